"""The registry tests run fleetctl in-process beside in-process agents, as tests/fleetctl does:
the agents' log lines go to a buffer of their own, never into fleetctl's captured output (an
agent's background thread logging during ``fleetctl report --json`` broke its JSON once)."""

from tests.fleetctl.conftest import quiet_agent_logs

__all__ = ["quiet_agent_logs"]
