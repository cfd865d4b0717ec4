"""The node's alerts as one list: the rules engine's, with the dispatcher's muting added.

The engine knows pending alerts and why an alert fires; the dispatcher knows silences,
inhibitions, acknowledgements and the alerts it raises itself (remediation in progress,
notifications rejected). The API shows both, joined by fingerprint.
"""

from __future__ import annotations

from fleetd.api.services import ApiServices
from fleetd.api.views import Json, alert_view, dispatcher_alert_view, event_view
from fleetd.errors import StoreError
from fleetd.rules.alert_events import ALERT_EVENT_KIND
from fleetd.store.events import Event

STATE_ORDER = {"firing": 0, "pending": 1, "resolved": 2}
HISTORY_SCAN = 5000  # newest alert events searched for one fingerprint
SEVERITY_ORDER = {"critical": 0, "warning": 1, "info": 2}


def current_alerts(services: ApiServices, now: float) -> list[Json]:
    """Pending, firing and recently resolved alerts: firing first, most severe first."""
    muting = {held.alert.fingerprint: held for held in services.dispatcher.alerts(now)}
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


def alert_detail(services: ApiServices, fingerprint: str, now: float) -> Json | None:
    """One alert by fingerprint (the link in every PagerDuty event and Alertmanager
    ``generatorURL``): as the engine and the dispatcher hold it — labels, annotations, state,
    muting, acknowledgement, times, runbook — with its firing/resolved history from the event
    log. An alert neither holds any more is rebuilt from that history while the event log
    keeps it (``store.event_retention``); None when nothing knows the fingerprint."""
    held = next((a for a in current_alerts(services, now) if a["fingerprint"] == fingerprint), None)
    try:
        history = alert_history(services, fingerprint)
    except StoreError:
        if held is None:
            raise
        history = []
    if held is None:
        if not history:
            return None
        held = _from_history(history)
    rule = services.engine.rules.get(held["rule"])
    ack = next(
        (a for a in services.dispatcher.acknowledgements() if a.fingerprint == fingerprint), None
    )
    return {
        **held,
        "runbook": rule.runbook if rule is not None else None,
        "runbook_url": held["annotations"].get("runbook_url"),
        "acknowledgement": None
        if ack is None or not held["acknowledged"]
        else {"author": ack.author, "comment": ack.comment, "created_at": ack.created_at},
        "history": [event_view(e) for e in history],
    }


def alert_history(services: ApiServices, fingerprint: str) -> list[Event]:
    """The alert's transitions in the event log, oldest first."""
    events = services.query_events(kinds=[ALERT_EVENT_KIND], limit=HISTORY_SCAN)
    return [e for e in events if e.data.get("fingerprint") == fingerprint]


def _from_history(history: list[Event]) -> Json:
    """The alert as its last logged transition left it (the engine has forgotten it)."""
    last = history[-1].data
    fired = [e.data.get("fired_at") for e in history if e.data.get("state") == "firing"]
    labels = {str(k): str(v) for k, v in dict(last.get("labels") or {}).items()}
    return {
        "fingerprint": str(last["fingerprint"]),
        "rule": str(last.get("rule", "")),
        "state": str(last.get("state", "resolved")),
        "severity": str(last.get("severity", "warning")),
        "gpu": last.get("gpu"),
        "labels": labels,
        "annotations": {str(k): str(v) for k, v in dict(last.get("annotations") or {}).items()},
        "value": last.get("value"),
        "active_at": last.get("active_at"),
        "fired_at": last.get("fired_at") or (fired[-1] if fired else None),
        "resolved_at": last.get("resolved_at"),
        "no_data_since": None,
        "remediation_plan": None,
        "source": "events",
        "silenced_by": [],
        "inhibited_by": [],
        "acknowledged": False,
    }
