"""Loopback stand-ins for what fleetd talks to: PagerDuty, Slack, webhooks, vLLM, Alertmanager."""
