"""Rolling proactive validation: on a schedule, one healthy hive at a time is drained, put
through the ``proactive`` validation ladder and re-admitted (or quarantined when a validator
fails), only within the fleet cap and while the node's traffic leaves headroom.

Remediation's tick calls ``ProactiveScheduler.tick(now)``. It opens at most one validation
run (plan ``proactive``, trigger ``schedule``) when a hive is due and every gate is open, and
watches the one under way: the node's load rising above the thresholds, a fault run or a
firing health alert on the node, the breaker, a pause or the mode turning off abandon it at
once (``Abandon``: its workers go back into service). When each hive was last validated is
read from the journal's runs, so a restart neither repeats nor forgets a validation.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from fleetd.logs import get_logger
from fleetd.model import SeriesKey, label_value
from fleetd.query import Matcher, Query
from fleetd.remedy import machine as m
from fleetd.remedy.proactive_config import ProactiveConfig
from fleetd.vllm.collector import RUNNING, WAITING
from fleetd.vllm.config import VllmWorkerConfig

if TYPE_CHECKING:
    from fleetd.remedy.config import RemediationConfig
    from fleetd.remedy.journal import RunJournal
    from fleetd.remedy.lease import BreakerStatus

log = get_logger("remedy.proactive")

ACTIVITY = "fleetd_gpu_utilization_ratio"


@dataclass(frozen=True, slots=True)
class HiveDue:
    """One hive's place in the schedule."""

    gpus: tuple[int, ...]
    last_run: str | None  # the newest proactive run on it (None: never validated)
    last_at: float | None
    due_at: float  # when the next validation may begin

    def due(self, now: float) -> bool:
        return now >= self.due_at


def hives(gpus: Sequence[int], unit: Callable[[int], Sequence[int]]) -> list[tuple[int, ...]]:
    """The node's GPUs grouped into hives (the GPUs one reset reaches), in index order."""
    seen: set[int] = set()
    out: list[tuple[int, ...]] = []
    for gpu in sorted(gpus):
        if gpu in seen:
            continue
        hive = tuple(sorted((set(unit(gpu)) | {gpu}) & set(gpus)))
        seen.update(hive)
        out.append(hive)
    return out


def schedule(
    hive: tuple[int, ...], history: Sequence[m.Run], config: ProactiveConfig, now: float
) -> HiveDue:
    """When ``hive`` is next due, from the journaled runs (newest first): ``interval`` after the
    last validation began, ``retry_interval`` after one that was abandoned or refused."""
    for run in history:
        if run.plan is not m.Plan.PROACTIVE or run.gpu_indices != hive:
            continue
        gap = config.retry_interval if run.state is m.RunState.ABORTED else config.interval
        return HiveDue(hive, run.run_id, run.created_at, run.created_at + gap)
    return HiveDue(hive, None, None, now)


def _by(values: dict[SeriesKey, float], label: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for key, value in values.items():
        name = label_value(key.labels, label)
        if name is not None:
            out[name] = max(out.get(name, value), value)
    return out


def load_problem(
    query: Query | None,
    config: ProactiveConfig,
    *,
    workers: Sequence[str],
    gpus: Sequence[int],
    window: float,
    now: float,
    require: bool,
) -> str | None:
    """Why the node has no headroom for a validation (None: it has): a worker whose running +
    waiting requests went above ``max_requests`` over ``window``, or a GPU of ``gpus`` whose
    average gfx activity went above ``max_gpu_activity``. With ``require`` (before a start), a
    worker or GPU with no reading is no headroom either: fleetd never validates blind."""
    if query is None:
        return "no metrics to judge the node's load" if require else None
    running = _by(query.window("max", RUNNING, window=window, now=now), "worker")
    waiting = _by(query.window("max", WAITING, window=window, now=now), "worker")
    # readings from the window's start too: a load judged over a whole window, not a moment
    early = (
        _by(
            query.window("max", RUNNING, window=window, now=now - window + config.check_interval),
            "worker",
        )
        if require
        else running
    )
    for name in workers:
        if name not in running and name not in waiting:
            if require:
                return f"no load reading of worker {name} in the last {window:g}s"
            continue
        if name not in early:
            return f"worker {name}'s load not read for a whole window ({window:g}s) yet"
        load = running.get(name, 0.0) + waiting.get(name, 0.0)
        if load > config.max_requests:
            return (
                f"worker {name} had {load:g} requests running + waiting "
                f"(threshold {config.max_requests:g})"
            )
    if config.max_gpu_activity is None or not gpus:
        return None
    gfx = (Matcher("engine", "=", "gfx"),)
    activity = _by(query.window("avg", ACTIVITY, gfx, window=window, now=now), "gpu")
    for gpu in gpus:
        value = activity.get(str(gpu))
        if value is None:
            if require:
                return f"no activity reading of GPU {gpu} in the last {window:g}s"
            continue
        if value > config.max_gpu_activity:
            return f"GPU {gpu} gfx activity {value:.2f} (threshold {config.max_gpu_activity:g})"
    return None


class ProactiveScheduler:
    """Opens and watches this node's proactive validations (one at a time)."""

    def __init__(self, remediation: ProactiveHost) -> None:
        self._host = remediation
        self._next_check: float | None = None  # in memory: the schedule itself is journaled
        self.query: Query | None = None

    def tick(self, now: float) -> str | None:
        """Watch the validation under way, or open one when due; the opened run's id."""
        host = self._host
        config = host.config.proactive
        active = host.executor.active()
        mine = [r for r in active if r.plan is m.Plan.PROACTIVE]
        for run in mine:
            why = self._abandon_reason(run, active, now)
            if why is not None:
                host.executor.feed(run.run_id, m.Abandon(why), now)
        if not config.enabled or mine or active:
            return None
        if self._next_check is not None and now < self._next_check:
            return None
        self._next_check = now + config.check_interval
        return self._maybe_open(now)

    def due(self, now: float) -> list[HiveDue]:
        """Every hive of the node and when it is next due (the API and tests read it)."""
        host = self._host
        config = host.config.proactive
        since = now - max(config.interval, config.retry_interval)
        history = host.journal.runs(host.node, since=since, limit=1000)
        return [schedule(h, history, config, now) for h in host.hives()]

    # ---- deciding ---------------------------------------------------------------------
    def _gate(self, now: float) -> str | None:
        host = self._host
        if host.config.mode == "off":
            return "remediation is off"
        pause = host.journal.pause_state(host.node)
        if pause.paused:
            return f"remediation paused by {pause.by}"
        breaker = host.breaker()
        if breaker.tripped:
            return f"circuit breaker open ({breaker.reason or breaker.scope})"
        firing = host.firing_alerts()
        if firing:
            return f"health alerts firing: {', '.join(firing)}"
        return None

    def _maybe_open(self, now: float) -> str | None:
        host = self._host
        config = host.config.proactive
        gate = self._gate(now)
        if gate is not None:
            log.debug("proactive_validation_not_started", reason=gate)
            return None
        held = {i for r in host.journal.holding(host.node) for i in r.gpu_indices}
        due = [d for d in self.due(now) if d.due(now) and not set(d.gpus) & held]
        if not due:
            return None
        hive = min(due, key=lambda d: (d.last_at is not None, d.last_at or 0.0, d.gpus))
        names = [w.name for w in host.workers]
        problem = load_problem(
            self.query,
            config,
            workers=names,
            gpus=sorted(g for h in host.hives() for g in h),
            window=config.window,
            now=now,
            require=True,
        )
        if problem is not None:
            log.info("proactive_validation_no_headroom", gpus=list(hive.gpus), reason=problem)
            return None
        last = "never validated" if hive.last_at is None else f"last {hive.last_run}"
        return host.open_proactive(hive.gpus, f"due: {last}", now)

    def _abandon_reason(self, run: m.Run, active: Sequence[m.Run], now: float) -> str | None:
        if run.abandoned or run.state in (m.RunState.STARTING, m.RunState.AWAIT_READY):
            return None  # already re-admitting
        if run.state is m.RunState.ROLLING_BACK:
            return None
        others = [r for r in active if r.run_id != run.run_id and not r.dry_run]
        if others:
            return f"run {others[0].run_id} ({others[0].plan.value}) started on the node"
        gate = self._gate(now)
        if gate is not None:
            return gate
        if not run.lease_held:
            return None  # nothing taken out yet: the lease decides
        config = self._host.config.proactive
        outside = [g for h in self._host.hives() for g in h if g not in run.gpu_indices]
        return load_problem(
            self.query,
            config,
            workers=[w.name for w in self._host.workers],
            gpus=outside,
            window=min(config.check_interval, config.window),
            now=now,
            require=False,
        )


class ActiveRuns(Protocol):
    def active(self) -> list[m.Run]: ...

    def feed(self, run_id: str, event: m.Event, now: float) -> m.Run: ...


class ProactiveHost(Protocol):
    """What the scheduler needs of ``fleetd.remedy.service.Remediation`` (which is one)."""

    node: str
    config: RemediationConfig

    @property
    def executor(self) -> ActiveRuns: ...

    @property
    def journal(self) -> RunJournal: ...

    @property
    def workers(self) -> Sequence[VllmWorkerConfig]: ...

    def hives(self) -> list[tuple[int, ...]]: ...

    def breaker(self) -> BreakerStatus: ...

    def firing_alerts(self) -> list[str]: ...

    def open_proactive(self, gpus: tuple[int, ...], why: str, now: float) -> str: ...
