"""Command-line entry points: ``fleetd`` (the daemon and its checks) and ``fleetctl`` (SREs)."""
