"""vLLM on this node: its config section, its HTTP client, the one metrics parser, the collector.

The collector (time series) and the remediation worker adapters (drain, re-admission) both
read a server through ``client`` and ``metrics``, so they cannot disagree on what a worker
said.
"""
