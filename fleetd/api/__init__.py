"""fleetd's HTTP surface: /metrics, /healthz and the versioned JSON API."""
