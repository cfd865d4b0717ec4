"""Auto-remediation: drain the vLLM workers of a reset unit, reset once, verify, re-admit.

Pure parts: ``machine`` (the run state machine: the model in ``run``, the commands and
events in ``messages``, the handlers by phase in ``steps``), ``policy`` (alert → plan, the
escalation ladder), ``verify`` (is a unit healthy in a Snapshot), ``codec`` (the journal's
JSON form). Impure parts: ``executor`` (carries commands out, journal first), ``workers``
(systemd / command adapters), ``lease`` (fleet cap and circuit breaker), ``service`` (the
facade the daemon, the API and fleetctl call).
"""
