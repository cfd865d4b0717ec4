"""One uncorrectable fault is one incident, however many sources report it.

amdgpu reports an uncorrectable HBM error three ways within about a second: a RAS line in the
kernel log (at interrupt time), a CPER record with the AFID that names its service action
(read from the ring every ``cper.interval``), and the ECC counters (read at the next poll).
Each is a reason to page; together they are one fault. The first report of a GPU opens its
incident and fixes the incident's labels (``source``, ``severity``, ``afid``, ``action``); the
later ones join it. Only the rule of the first source fires (the others stand down on the
incident series), so an on-call engineer gets one page; and the incident keeps the most severe
action any report called for, which remediation reads before it acts (docs/remediation.md,
"One incident, one plan").

An incident a reset can repair (its action is ``reset``) closes when a fleetd run has reset
the GPU (the run's verification then decides: its trigger must be seen clear, and a fault that
comes back opens a new incident, which fails it; the GPU stays out of service until the run
concludes) or when the driver completes a reset of the GPU on its own. Any incident closes
``max_age`` after its last report (no run could repair it: remediation off, dry-run, a
physical or reboot class quarantined for a person). Until then the GPU stays unhealthy.

Open incidents outlive the process (``INCIDENTS_FILE`` in the state directory): a report
read only after a restart — a kernel line the old process had not reached yet — joins the
incident its fault already opened instead of opening a second one and paging again.
"""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from fleetd.events.afid import ORDER, ActionKind
from fleetd.logs import get_logger
from fleetd.statefile import StateFile

log = get_logger("events.incidents")

Source = str  # "counters", "kernel", "cper"
MAX_REPORTS = 20
INCIDENTS_FILE = "incidents.json"


@dataclass(frozen=True, slots=True)
class Incident:
    gpu: int
    opened_at: float
    last_at: float
    source: Source
    severity: str  # fatal, non_fatal_uncorrected, uncorrectable, deferred, poison
    afid: str  # the first report's AFID ("" when it had none)
    label_action: str  # the first report's action ("" when it named none)
    action: ActionKind  # the most severe action any report called for
    why: str  # the report that called for ``action``
    reports: tuple[str, ...] = field(default_factory=tuple)
    classified: str = ""  # the first CPER report: AMD's classification of the fault (AFID)

    def describe(self) -> str:
        return (
            f"incident on GPU {self.gpu} since {self.opened_at:.3f} ({len(self.reports)} reports)"
        )


class IncidentBook:
    """Open incidents per GPU (thread-safe: sources report from their own threads), kept in
    ``state`` when one is given."""

    def __init__(self, state: StateFile | None = None) -> None:
        self._state = state
        self._open: dict[int, Incident] = _load(state)
        self._closed: dict[int, tuple[Incident, float]] = {}  # the last closed, and when
        self._lock = threading.Lock()

    def _save(self) -> None:
        """Called with the lock held, after every change to the open incidents."""
        if self._state is None:
            return
        data = {"open": [asdict(i) for i in self._open.values()]}
        try:
            self._state.save(data)
        except OSError as exc:
            log.warning("incidents_not_saved", error=repr(exc))

    def report(
        self,
        gpu: int,
        source: Source,
        at: float,
        *,
        severity: str,
        action: ActionKind,
        why: str,
        afid: str = "",
        label_action: str = "",
    ) -> tuple[Incident, bool]:
        """Record one report; returns the incident and whether this report opened it."""
        line = f"{source}: {why}"
        with self._lock:
            current = self._open.get(gpu)
            classified = why if source == "cper" else ""
            if current is None:
                incident = Incident(
                    gpu, at, at, source, severity, afid, label_action, action, why, (line,),
                    classified,
                )  # fmt: skip
                self._open[gpu] = incident
                self._save()
                return incident, True
            more_severe = ORDER[action] > ORDER[current.action]
            incident = replace(
                current,
                last_at=max(current.last_at, at),
                action=action if more_severe else current.action,
                why=why if more_severe else current.why,
                reports=(*current.reports, line)[-MAX_REPORTS:],
                classified=current.classified or classified,
            )
            self._open[gpu] = incident
            self._save()
            return incident, False

    def get(self, gpu: int) -> Incident | None:
        with self._lock:
            return self._open.get(gpu)

    def all(self) -> list[Incident]:
        with self._lock:
            return sorted(self._open.values(), key=lambda i: i.gpu)

    def close(self, gpu: int, at: float) -> Incident | None:
        with self._lock:
            incident = self._open.pop(gpu, None)
            if incident is not None:
                self._closed[gpu] = (incident, at)
                self._save()
            return incident

    def closed(self, now: float, keep: float) -> list[Incident]:
        """Incidents closed less than ``keep`` ago (their series read 0: the alert resolves
        at the next evaluation instead of when the series goes stale); older ones are
        forgotten."""
        with self._lock:
            for gpu in [g for g, (_i, at) in self._closed.items() if now - at > keep]:
                del self._closed[gpu]
            return [i for i, _at in self._closed.values()]

    def expired(self, now: float, max_age: float) -> list[Incident]:
        """Close and return the incidents whose last report is older than ``max_age``."""
        with self._lock:
            old = [i for i in self._open.values() if now - i.last_at > max_age]
            for incident in old:
                del self._open[incident.gpu]
                self._closed[incident.gpu] = (incident, now)
            if old:
                self._save()
            return old


def _load(state: StateFile | None) -> dict[int, Incident]:
    """The incidents open when the last process stopped; an unreadable file starts afresh."""
    data = None if state is None else state.load()
    loaded: dict[int, Incident] = {}
    for item in (data or {}).get("open", []):
        try:
            incident = _incident(item)
        except (TypeError, ValueError, KeyError) as exc:
            log.warning("incident_not_restored", error=repr(exc))
            continue
        loaded[incident.gpu] = incident
    return loaded


def _incident(item: Any) -> Incident:
    if not isinstance(item, dict):
        raise TypeError(f"not an object: {item!r}")
    incident = Incident(**{**item, "reports": tuple(item.get("reports", ()))})
    if incident.action not in ORDER or not isinstance(incident.gpu, int):
        raise ValueError(f"not an incident: {item!r}")
    return incident
