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
from typing import Protocol

from fleetd.remedy.messages import Severity
from fleetd.remedy.run import Trigger


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
    outcome: str | None = None  # how the run ended (once it has), in a few words
    details: tuple[tuple[str, str], ...] = ()  # structured fields (the RMA ticket's body)


def alert_key(node: str, gpus: tuple[int, ...]) -> str:
    """The dedup key of the 'held out of service' alert of one node's reset unit."""
    return f"fleetd-remediation/{node}/gpus-{'-'.join(str(g) for g in sorted(gpus))}"


class ChangeSink(Protocol):
    """The alert dispatcher: turns remediation steps into change events and alerts."""

    def submit_change(self, event: RemediationEvent, now: float) -> None: ...


class EventSink(Protocol):
    """The store's event log (queryable by node, GPU and time)."""

    def record(self, event: RemediationEvent) -> None: ...
