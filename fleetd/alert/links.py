"""The one link shape notifications use for an alert: ``{external_url}/api/v1/alerts/{fp}``.

``GET /api/v1/alerts/{fingerprint}`` (fleetd's HTTP API) answers it with the alert as the
dispatcher holds it, so PagerDuty's "fleetd" link and every Alertmanager/webhook
``generatorURL`` lead to the same page. Without ``alerting.external_url`` fleetd does not know
how people reach it, so no link is made at all (PagerDuty gets none, ``generatorURL`` is empty
in webhooks and left out for Alertmanager).
"""

from __future__ import annotations

from urllib.parse import quote

ALERTS_PATH = "/api/v1/alerts/"


def alert_url(external_url: str | None, fingerprint: str) -> str | None:
    """``https://node7.example:9477/api/v1/alerts/0123456789abcdef``, or None without a base."""
    if not external_url:
        return None
    return external_url.rstrip("/") + ALERTS_PATH + quote(fingerprint, safe="")
