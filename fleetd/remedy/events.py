"""What remediation tells the rest of fleetd: one event per step, and where they go.

Every step of a run is journaled as a ``RemediationEvent`` in the same transaction as the run
state it belongs to, then handed to the dispatcher (a *change* event, which never pages by
itself) and to the store's event log. ``raise_alert`` asks the dispatcher to open an alert of
``severity`` under ``alert_key`` (critical pages a human: quarantine, an abort that leaves
workers out of service); ``resolve_alert`` closes it once the unit is back in service.
Delivery is at least once: ``event_id`` is stable across retries and restarts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from fleetd.remedy.machine import Severity, Trigger


@dataclass(frozen=True, slots=True)
class RemediationEvent:
    event_id: str
    node: str
    kind: str  # stable snake_case: run_planned, draining, worker_stopped, reset_intent, …
    message: str
    at: float
    severity: Severity = "info"
    run_id: str | None = None  # None for node-level events (pause, resume, breaker)
    seq: int = 0
    state: str = ""
    phase: str = ""
    plan: str = ""
    dry_run: bool = False
    gpus: tuple[int, ...] = ()
    workers: tuple[str, ...] = ()
    trigger: Trigger | None = None
    evidence: tuple[str, ...] = ()
    raise_alert: bool = False
    resolve_alert: bool = False
    alert_key: str = ""
    actor: str | None = None  # the person behind a manual action; None for fleetd itself

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form for the journal, the API and webhook payloads."""
        trigger = None
        if self.trigger is not None:
            t = self.trigger
            trigger = {
                "kind": t.kind,
                "at": t.at,
                "rule": t.rule,
                "fingerprint": t.fingerprint,
                "gpu": t.gpu,
                "severity": t.severity,
                "value": t.value,
                "labels": [list(p) for p in t.labels],
                "who": t.who,
                "why": t.why,
            }
        return {
            "event_id": self.event_id,
            "node": self.node,
            "kind": self.kind,
            "message": self.message,
            "at": self.at,
            "severity": self.severity,
            "run_id": self.run_id,
            "seq": self.seq,
            "state": self.state,
            "phase": self.phase,
            "plan": self.plan,
            "dry_run": self.dry_run,
            "gpus": list(self.gpus),
            "workers": list(self.workers),
            "trigger": trigger,
            "evidence": list(self.evidence),
            "raise_alert": self.raise_alert,
            "resolve_alert": self.resolve_alert,
            "alert_key": self.alert_key,
            "actor": self.actor,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RemediationEvent:
        trig = data.get("trigger")
        trigger = None
        if trig is not None:
            trig = dict(trig)
            trig["labels"] = tuple((str(k), str(v)) for k, v in trig.get("labels", ()))
            trigger = Trigger(**trig)
        return cls(
            event_id=data["event_id"],
            node=data["node"],
            kind=data["kind"],
            message=data["message"],
            at=data["at"],
            severity=data["severity"],
            run_id=data["run_id"],
            seq=data["seq"],
            state=data["state"],
            phase=data["phase"],
            plan=data["plan"],
            dry_run=data["dry_run"],
            gpus=tuple(data["gpus"]),
            workers=tuple(data["workers"]),
            trigger=trigger,
            evidence=tuple(data["evidence"]),
            raise_alert=data["raise_alert"],
            resolve_alert=data["resolve_alert"],
            alert_key=data["alert_key"],
            actor=data.get("actor"),
        )


def alert_key(node: str, gpus: tuple[int, ...]) -> str:
    """The dedup key of the 'held out of service' alert of one node's reset unit."""
    return f"fleetd-remediation/{node}/gpus-{'-'.join(str(g) for g in sorted(gpus))}"


class ChangeSink(Protocol):
    """The alert dispatcher: turns remediation steps into change events and alerts."""

    def submit_change(self, event: RemediationEvent, now: float) -> None: ...


class EventSink(Protocol):
    """The store's event log (queryable by node, GPU and time)."""

    def record(self, event: RemediationEvent) -> None: ...
