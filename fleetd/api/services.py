"""What the API reads and acts on: the daemon's components, handed over in one object.

The daemon builds every component and passes them here; the API never builds, starts or
owns any of them, and never reads the clock itself except through the ``Clock`` it is given
(the daemon passes its ``SystemClock``, tests a ``FakeClock``). Remediation is reached
through the small ``RemediationControl`` protocol so the API depends on what it asks of
remediation, not on how remediation is built.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol

from fleetd import __version__
from fleetd.alert.dispatch import Dispatcher
from fleetd.api.config import ApiConfig
from fleetd.clock import Clock
from fleetd.model import Snapshot
from fleetd.query import Query
from fleetd.remedy.events import RemediationEvent
from fleetd.remedy.machine import Run
from fleetd.remedy.reliability import ReliabilityReporter
from fleetd.remedy.rma import RmaRecord
from fleetd.remedy.service import EvidenceFile, RemediationStatus
from fleetd.rules.coverage import BlindSpot
from fleetd.rules.engine import RuleEngine
from fleetd.rules.health import NodeHealth
from fleetd.rules.state import AlertEntry
from fleetd.store.events import Event, EventLog
from fleetd.vllm.benchmark import Baseline

if TYPE_CHECKING:
    from fleetd.store.resilient import ResilientStore


class RemediationControl(Protocol):
    """What the API needs from remediation (``fleetd.remedy.service.Remediation``).

    Refusals (a GPU already in a run, nothing to undrain, no such run) raise
    ``fleetd.errors.RemedyError`` with a message for the operator; a bad argument raises
    ``ValueError``.
    """

    def status(self) -> RemediationStatus:
        """Mode, pause switch, breaker, fleet lease use, active runs and held GPUs."""
        ...

    def runs(self, *, limit: int = 50) -> list[Run]:
        """Recent runs, newest first."""
        ...

    def run(self, run_id: str) -> Run | None: ...

    def events(self, run_id: str | None = None, *, limit: int = 1000) -> list[RemediationEvent]:
        """Step events in the order they happened."""
        ...

    def evidence_bundle(self, run_id: str, phase: str | None = None) -> EvidenceFile | None:
        """The run's newest evidence bundle (or that of ``phase``), None when there is none."""
        ...

    def rma_records(self, *, physical_only: bool = False) -> list[RmaRecord]:
        """The RMA records of this node's GPUs (one per serial), newest change first."""
        ...

    def rma_record(self, serial: str) -> RmaRecord | None:
        """One GPU's RMA record by its serial, None when it has none."""
        ...

    def drain(self, gpu: int, *, who: str, why: str, now: float) -> str:
        """Take the workers on ``gpu`` (that GPU only, not its hive) out of rotation, stop
        them and hold the GPU out of service until undrained; the new run's id."""
        ...

    def undrain(self, gpu: int, *, who: str, why: str, now: float) -> str:
        """Bring back every worker held by the run(s) holding ``gpu``; the new run's id."""
        ...

    def baselines(self) -> list[Baseline]:
        """The readmission benchmark's baselines, one per worker."""
        ...

    def capture_baseline(self, *, who: str, why: str, now: float) -> list[Baseline]:
        """Probe every worker on a healthy hive and store the figures."""
        ...

    def cancel(self, run_id: str, *, who: str, why: str, now: float) -> Run: ...

    def pause(self, *, who: str, why: str, now: float) -> None: ...

    def resume(self, *, who: str, why: str, now: float) -> None: ...

    def reset_breaker(self, *, who: str, now: float) -> None: ...


ReloadCallback = Callable[[], object]
"""Reload fleetd.yaml and the rules; raises ``fleetd.errors.ConfigError`` and changes nothing
when any file is bad (the daemon's SIGHUP path)."""


class ApiServices:
    """The components the API serves, as the daemon wired them.

    Args:
        node: this node's name (alerts, the event log and the registry use the same).
        clock: where ``now`` comes from.
        latest_snapshot: the newest poll (None before the first).
        engine: the rule engine (alerts, rule health, GPU health).
        dispatcher: alert delivery (silences, acknowledgements, muting).
        events: the event log, or the storage handle that owns it (``ResilientStore``: it
            queues events while storage is down; reads raise ``StoreError`` meanwhile);
            every mutation is recorded there.
        query: telemetry history for GPU detail and ``explain``.
        remedy: remediation control, or None when remediation is not built on this node.
        reload: the daemon's reload, or None when it cannot reload.
        health: the health verdict; defaults to the engine's last one.
        config: the ``api:`` section (history sizes).
        engine_lock: held by the daemon while the engine evaluates; the API holds it while it
            copies the engine's alerts (HTTP threads run beside the poll loop). Without one,
            a copy that races an evaluation is simply taken again.
        labels: the node's labels (fleetd.yaml ``node.labels``: cluster, rack, …).
        blind_spots: the rules that can never fire on this node (inputs never provided).
        reliability: the node's reliability KPIs and rule precision (``fleetd.remedy.kpi``).
    """

    def __init__(
        self,
        *,
        node: str,
        clock: Clock,
        latest_snapshot: Callable[[], Snapshot | None],
        engine: RuleEngine,
        dispatcher: Dispatcher,
        events: EventLog | ResilientStore,
        query: Query,
        remedy: RemediationControl | None = None,
        reload: ReloadCallback | None = None,
        health: Callable[[], NodeHealth | None] | None = None,
        config: ApiConfig | None = None,
        version: str = __version__,
        started_at: float | None = None,
        engine_lock: AbstractContextManager[Any] | None = None,
        labels: Mapping[str, str] | None = None,
        blind_spots: Callable[[], Sequence[BlindSpot]] | None = None,
        reliability: ReliabilityReporter | None = None,
    ) -> None:
        self.node = node
        self.clock = clock
        self.latest_snapshot = latest_snapshot
        self.engine = engine
        self.dispatcher = dispatcher
        self._events = events
        self.query = query
        self.remedy = remedy
        self.reload = reload
        self.health = health if health is not None else engine.health
        self.config = config if config is not None else ApiConfig()
        self.version = version
        self.started_at = started_at if started_at is not None else clock.now()
        self._engine_lock = engine_lock
        self.labels: dict[str, str] = dict(labels or {})
        self.blind_spots = blind_spots or (lambda: ())
        self.reliability = reliability  # GET /report, and the KPI summary the heartbeat sends

    def alert_entries(self) -> list[AlertEntry]:
        """A consistent copy of the engine's alerts."""
        if self._engine_lock is not None:
            with self._engine_lock:
                return self.engine.entries()
        for _ in range(5):
            try:
                return self.engine.entries()
            except RuntimeError:  # "dictionary changed size during iteration"
                continue
        return self.engine.entries()

    def now(self) -> float:
        return self.clock.now()

    def record_event(
        self,
        kind: str,
        *,
        now: float,
        message: str,
        gpu: int | None = None,
        data: Mapping[str, Any] | None = None,
        actor: str | None = None,
    ) -> None:
        """Append one event for this node."""
        events = self._events
        append = events.append if isinstance(events, EventLog) else events.append_event
        append(kind, now=now, node=self.node, gpu=gpu, message=message, data=data, actor=actor)

    def query_events(
        self,
        *,
        gpu: int | None = None,
        kinds: Iterable[str] | None = None,
        since: float | None = None,
        until: float | None = None,
        limit: int = 200,
    ) -> list[Event]:
        """This node's newest events matching the filters, oldest first."""
        filters: dict[str, Any] = {
            "node": self.node,
            "gpu": gpu,
            "kinds": None if kinds is None else list(kinds),
            "since": since,
            "until": until,
            "limit": limit,
            "newest_first": True,
        }
        events = self._events
        found = (
            events.query(**filters)
            if isinstance(events, EventLog)
            else events.query_events(**filters)
        )
        return list(reversed(found))

    def known_gpus(self, snapshot: Snapshot | None, health: NodeHealth | None) -> Sequence[int]:
        """GPU indices this node knows of: enumerated in the last poll or judged by health."""
        found: set[int] = set()
        if snapshot is not None:
            found.update(status.gpu.index for status in snapshot.gpus)
        if health is not None:
            found.update(
                int(item.gpu) for item in health.gpus if item.gpu.isascii() and item.gpu.isdigit()
            )
        return sorted(found)
