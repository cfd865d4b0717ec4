"""The node's alerts as one list: the rules engine's, with the dispatcher's muting added.

The engine knows pending alerts and why an alert fires; the dispatcher knows silences,
inhibitions, acknowledgements and the alerts it raises itself (remediation in progress,
notifications rejected). The API shows both, joined by fingerprint.
"""

from __future__ import annotations

from typing import Any

from fleetd.api.services import ApiServices
from fleetd.api.views import Json, alert_view, dispatcher_alert_view

STATE_ORDER = {"firing": 0, "pending": 1, "resolved": 2}
SEVERITY_ORDER = {"critical": 0, "warning": 1, "info": 2}


def current_alerts(services: ApiServices, now: float) -> list[Json]:
    """Pending, firing and recently resolved alerts: firing first, most severe first."""
    muting: dict[str, dict[str, Any]] = {}
    for item in services.dispatcher.alerts(now):
        muting[str(item.get("fingerprint"))] = item
    out: list[Json] = []
    seen: set[str] = set()
    for entry in services.alert_entries():
        view = alert_view(entry, muting.get(entry.alert.key.fingerprint()))
        seen.add(view["fingerprint"])
        out.append(view)
    for fingerprint, item in muting.items():
        if fingerprint not in seen:
            out.append(dispatcher_alert_view(item))
    out.sort(
        key=lambda a: (
            STATE_ORDER.get(a["state"], 9),
            SEVERITY_ORDER.get(a["severity"], 9),
            a["gpu"] if a["gpu"] is not None else -1,
            a["rule"],
        )
    )
    return out


def firing(alerts: list[Json]) -> list[Json]:
    return [a for a in alerts if a["state"] == "firing"]
