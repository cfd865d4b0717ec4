"""Auto-remediation: drain the vLLM workers of a reset unit, reset once, verify, re-admit.

Pure parts: ``machine`` (the run state machine), ``policy`` (alert → plan, the escalation
ladder), ``verify`` (is a unit healthy in a Snapshot). Impure parts: ``executor`` (carries
commands out, journal first), ``workers`` (systemd / command adapters), ``lease`` (fleet cap
and circuit breaker), ``service`` (the facade the daemon, the API and fleetctl call).
"""
