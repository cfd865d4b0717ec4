"""The rule engine: evaluates every rule once per tick and advances its alerts.

``RuleEngine.evaluate(query, now)`` is the only entry point the daemon's tick needs; it
returns the transitions for the outbox and the remediation policy. Everything else is read
side (alerts, rule health, GPU health) or life cycle (restore after a restart, reload).
A rule that fails to evaluate changes nothing about its alerts; the failure shows in rule
health and ``fleetd_rule_evaluation_failures_total``, never as a page.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Literal, ParamSpec, TypeVar

from fleetd.errors import ConfigError
from fleetd.logs import get_logger
from fleetd.model import (
    Alert,
    AlertKey,
    AlertState,
    Labels,
    SeriesKey,
    Severity,
    Transition,
    identity_labels,
    label_value,
    make_labels,
)
from fleetd.polltiming import PollTiming
from fleetd.query import Query
from fleetd.rules.evaluate import Evaluation, Vector, compare, range_needs
from fleetd.rules.health import (
    GPU_INFO_METRIC,
    GPU_UP_METRIC,
    HEALTH_METRIC,
    NodeHealth,
    ServiceMap,
    assess,
    health_vector,
    physical_of,
)
from fleetd.rules.loader import RuleSet
from fleetd.rules.ranges import RangeMirror
from fleetd.rules.spec import Rule
from fleetd.rules.state import (
    AlertEntry,
    Observation,
    StateChanges,
    StepResult,
    Timing,
    restore,
    step,
)

INFO_METRIC = "fleetd_gpu_info"
MAX_SHADOW_TRANSITIONS = 10_000
"""Shadow transitions kept for ``take_shadow`` (the oldest go first when nobody takes them)."""
P = ParamSpec("P")
R = TypeVar("R")
RuleHealthState = Literal["ok", "err", "unknown"]
_log = get_logger("rules")


@dataclass(frozen=True, slots=True)
class EngineSettings:
    """Timing knobs of the engine (from ``rules:`` in fleetd.yaml)."""

    poll_interval_s: float = 5.0
    stale_polls: int = 3
    no_data_hold_s: float = 3600.0
    resolved_retention_s: float = 900.0
    outage_tolerance_s: float = 3600.0
    for_grace_period_s: float = 60.0
    cadence: tuple[tuple[str, int], ...] = ()
    """(metric, polls per read) of metrics read less often than every poll (the slow tier):
    such a series is stale after ``stale_polls`` of *its own* reads, not of polls."""

    @property
    def timing(self) -> PollTiming:
        return PollTiming(self.poll_interval_s, stale_polls=self.stale_polls)

    @property
    def lookback_s(self) -> float:
        """How old a sample may be and still count as the current value."""
        return self.timing.stale_after_s

    @property
    def polls_per_read(self) -> dict[str, int]:
        """Metric → polls per read, for the metrics not read every poll."""
        return dict(self.cadence)


@dataclass(frozen=True, slots=True)
class RuleStatus:
    """Whether a rule itself works: shown in the API and /metrics, never paged."""

    rule: str
    health: RuleHealthState = "unknown"
    last_error: str | None = None
    last_eval_at: float | None = None
    last_duration_s: float = 0.0
    failures_total: int = 0


@dataclass(frozen=True, slots=True)
class ReloadStatus:
    """How rule reloads went: counts, and the problems of the last failed one."""

    successes: int = 0
    failures: int = 0
    last_ok: bool = True
    last_problems: tuple[str, ...] = ()


@dataclass
class _RuleRuntime:
    rule: Rule
    timing: Timing
    alerts: dict[Labels, AlertEntry] = field(default_factory=dict)
    status: RuleStatus = field(default_factory=lambda: RuleStatus(""))


def _locked(method: Callable[P, R]) -> Callable[P, R]:
    """Run a method under the engine's lock: the API reads while the tick evaluates."""

    @functools.wraps(method)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        engine = args[0]
        assert isinstance(engine, RuleEngine)
        with engine._lock:
            return method(*args, **kwargs)

    return wrapper


class RuleEngine:
    """Holds the rules and their alerts; ``evaluate`` is pure apart from updating that state.

    Thread-safe: evaluation, reload, restore and the read methods take one lock, so the HTTP
    API can read alerts and health while the daemon's tick evaluates.

    Args:
        rules: the rule set to run.
        settings: timing knobs.
        node: added to every alert as the ``node`` label when given.
        timer: a monotonic clock for measuring evaluation time (the daemon passes
            ``SystemClock().monotonic``); without it durations read 0.
    """

    def __init__(
        self,
        rules: RuleSet,
        settings: EngineSettings | None = None,
        *,
        node: str | None = None,
        timer: Callable[[], float] | None = None,
    ) -> None:
        self._lock = threading.RLock()
        self.settings = settings or EngineSettings()
        self.node = node
        self._timer = timer
        self._rules = rules
        self._runtime: dict[str, _RuleRuntime] = {}
        self._orphans: dict[AlertKey, AlertEntry] = {}
        self._dirty: dict[AlertKey, AlertEntry | None] = {}
        self._health: NodeHealth | None = None
        # per GPU: when its last successful reading was (fleetd_gpu_up 1), else when first seen
        self._last_read: dict[str, float] = {}
        self._physical_from: list[SeriesKey] | None = None  # the info series _physical_map is of
        self._physical_map: dict[str, str] = {}
        # which GPUs remediation has out of service (the daemon sets it): health says so, and
        # rules reading fleetd_gpu_health see it
        self.service: Callable[[], ServiceMap] | None = None
        self._last_eval_at: float | None = None
        self._shadow: list[Transition] = []  # shadow rules' transitions, for take_shadow
        self.last_duration_s = 0.0
        self.evaluations_total = 0
        self.reload_status = ReloadStatus()
        self._ranges = RangeMirror(late_margin_s=self.settings.timing.late_margin_s)
        self._install(rules, previous={})

    # ------------------------------------------------------------------------------ life cycle
    @property
    def rules(self) -> RuleSet:
        return self._rules

    @_locked
    def reload(self, new_rules: RuleSet, settings: EngineSettings | None = None) -> None:
        """Swap in ``new_rules``; alerts of rules whose name and labels are unchanged survive.

        Alerts of rules that were removed (or whose labels changed) are resolved at the next
        evaluation, so a receiver is never left with an incident nobody will close.
        ``settings`` replaces the timing knobs as well (``rules:`` or the poll interval
        changed: staleness is counted in polls).
        """
        if settings is not None:
            self.settings = settings
            self._ranges.late_margin_s = settings.timing.late_margin_s
        previous = self._runtime
        self._rules = new_rules
        self._install(new_rules, previous)
        _log.info("rules_reloaded", rules=len(new_rules), orphaned_alerts=len(self._orphans))

    def try_reload(
        self, load: Callable[[], RuleSet], settings: EngineSettings | None = None
    ) -> ReloadStatus:
        """Load, validate and swap in one step (SIGHUP, the API).

        A rule file with any problem raises ``ConfigError`` in ``load``; then nothing changes,
        the running rules keep running, and the problems are logged and kept for the API.
        """
        try:
            new_rules = load()
        except ConfigError as exc:
            return self.reload_rejected(str(p) for p in exc.problems)
        with self._lock:
            self.reload(new_rules, settings)
            status = self.reload_status
            self.reload_status = ReloadStatus(status.successes + 1, status.failures, True, ())
            return self.reload_status

    def reload_rejected(self, problems: Iterable[str]) -> ReloadStatus:
        """Count a reload that was refused (its files had problems); the rules keep running."""
        with self._lock:
            found = tuple(problems)
            status = self.reload_status
            self.reload_status = ReloadStatus(status.successes, status.failures + 1, False, found)
        _log.error("rules_reload_failed", problems=list(found))
        return self.reload_status

    def _install(self, rules: RuleSet, previous: dict[str, _RuleRuntime]) -> None:
        runtime: dict[str, _RuleRuntime] = {}
        for rule in rules.rules:
            old = previous.get(rule.name)
            state = _RuleRuntime(rule, self._timing(rule), status=RuleStatus(rule.name))
            if old is not None:
                state.status = old.status
                # into or out of shadow mode, alerts start over: the receivers resolve what
                # they were told of, and a promoted rule's firing reaches them as new
                same_stage = (old.rule.mode == "shadow") == (rule.mode == "shadow")
                if old.rule.identity == rule.identity and same_stage:
                    state.alerts = old.alerts
            runtime[rule.name] = state
        for name, old in previous.items():
            kept = runtime.get(name)
            if kept is not None and kept.alerts is old.alerts:
                continue
            for entry in old.alerts.values():
                if old.rule.mode == "shadow":  # never notified: nothing to resolve
                    self._dirty[entry.alert.key] = None
                    continue
                self._orphans[entry.alert.key] = entry
        self._runtime = runtime
        self._ranges.plan(range_needs(rule.expr for rule in rules.rules))

    def _timing(self, rule: Rule) -> Timing:
        return Timing(
            for_s=rule.for_s,
            keep_firing_for_s=rule.keep_firing_for_s,
            no_data_hold_s=self.settings.no_data_hold_s,
            resolved_retention_s=self.settings.resolved_retention_s,
        )

    @_locked
    def restore(
        self, entries: Iterable[AlertEntry], *, last_eval_at: float | None, now: float
    ) -> None:
        """Resume alert state saved before a restart (see ``fleetd.rules.state.restore``)."""
        entries = list(entries)
        kept = restore(
            entries,
            last_eval_at=last_eval_at,
            now=now,
            for_of={name: rt.rule.for_s for name, rt in self._runtime.items()},
            outage_tolerance_s=self.settings.outage_tolerance_s,
            for_grace_period_s=self.settings.for_grace_period_s,
            resolved_retention_s=self.settings.resolved_retention_s,
        )
        kept_keys = {entry.alert.key for entry in kept}
        for entry in entries:
            if entry.alert.key not in kept_keys:
                self._dirty[entry.alert.key] = None  # stale rows must not come back next time
        for entry in kept:
            runtime = self._runtime.get(entry.alert.key.rule)
            if runtime is None:
                self._orphans[entry.alert.key] = entry
            else:
                runtime.alerts[entry.alert.key.labels] = entry
        self._last_eval_at = last_eval_at
        _log.info("alert_state_restored", alerts=len(kept), last_eval_at=last_eval_at)

    # ------------------------------------------------------------------------------ evaluation
    @_locked
    def evaluate(self, query: Query, now: float, *, held: Collection[str] = ()) -> list[Transition]:
        """Evaluate every rule at ``now`` and return the alert transitions, in rule order.

        Pass the same ``query`` object every tick (the daemon's MemoryWindow): range functions
        are kept incrementally per query object, and a different object starts them over.
        ``held``: fingerprints of firing alerts whose remediation run is under way; they stay
        firing until the run lets go (see ``fleetd.rules.state``).
        """
        started = self._clock()
        settings = self.settings
        service = self.service() if self.service is not None else None
        before = self._assess(query, now, service)
        firing_before = self._firing_health()
        ev = Evaluation(
            query,
            now,
            lookback=settings.lookback_s,
            poll_interval=settings.poll_interval_s,
            polls_per_read=settings.polls_per_read,
            synthetic={HEALTH_METRIC: health_vector(before)},
            ranges=self._ranges,
        )
        transitions = self._resolve_orphans(now)
        models: dict[str, str] | None = None
        for runtime in self._runtime.values():
            rule = runtime.rule
            t0 = self._clock()
            try:
                if models is None and _needs_models(rule):
                    models = _gpu_models(query, now)
                matches, present = self._matches(runtime, ev, models or {})
                found = self._advance(runtime, ev, matches, present, now, held)
                if rule.mode == "shadow":  # fires internally: logged and counted, never sent
                    self._shadow.extend(found)
                    del self._shadow[:-MAX_SHADOW_TRANSITIONS]
                else:
                    transitions.extend(found)
            except Exception as exc:  # any failure is rule health, never a crash
                status = runtime.status
                runtime.status = RuleStatus(
                    rule.name,
                    "err",
                    _describe(exc),
                    now,
                    self._clock() - t0,
                    status.failures_total + 1,
                )
                _log.warning("rule_evaluation_failed", rule=rule.name, error=_describe(exc))
                continue
            runtime.status = RuleStatus(
                rule.name, "ok", None, now, self._clock() - t0, runtime.status.failures_total
            )
        # the verdict changes within an evaluation only if what a health rule fires does
        if self._firing_health() == firing_before:
            self._health = before
        else:
            self._health = self._assess(query, now, service)
        self._last_eval_at = now
        self.evaluations_total += 1
        self.last_duration_s = self._clock() - started
        return transitions

    def _matches(
        self, runtime: _RuleRuntime, ev: Evaluation, models: dict[str, str]
    ) -> tuple[Vector, Vector | None]:
        rule = runtime.rule
        values = ev.vector(rule.expr)
        if rule.op is None or rule.threshold is None:
            return values, None
        out: Vector = {}
        alerts = runtime.alerts
        for labels, value in values.items():
            if rule.threshold_by is not None:
                model = label_value(labels, rule.threshold_by)
            else:
                model = models.get(_gpu_of(labels) or "") if models else None
            entry = alerts.get(identity_labels(labels))
            level = rule.threshold
            if rule.clear is not None and entry is not None and entry.state == AlertState.FIRING:
                level = rule.clear
            if compare(rule.op, value, level.for_model(model)):
                out[labels] = value
        return out, values

    def _advance(
        self,
        runtime: _RuleRuntime,
        ev: Evaluation,
        matches: Vector,
        present: Vector | None,
        now: float,
        held: Collection[str] = (),
    ) -> list[Transition]:
        rule, timing, alerts = runtime.rule, runtime.timing, runtime.alerts
        transitions: list[Transition] = []
        # alerts are keyed by their identity labels (no uuid): one alert across a UUID change
        matched_keys: set[Labels] = set()
        for labels, value in matches.items():
            key = identity_labels(labels)
            matched_keys.add(key)
            current = self._alert_for(rule, labels, value)
            self._apply(
                alerts,
                key,
                step(timing, alerts.get(key), Observation(True, current), now),
                transitions,
            )
        present_keys = None if present is None else {identity_labels(x) for x in present}
        for key, entry in list(alerts.items()):
            if key in matched_keys:
                continue
            matched: bool | None = False
            if entry.state in (AlertState.PENDING, AlertState.FIRING) and (
                present_keys is None or key not in present_keys
            ):
                matched = False if ev.has_data(rule.expr, key) else None
            result = step(
                timing,
                entry,
                Observation(matched),
                now,
                held=bool(held) and entry.alert.key.fingerprint() in held,
            )
            self._apply(alerts, key, result, transitions)
        return transitions

    def _apply(
        self,
        alerts: dict[Labels, AlertEntry],
        labels: Labels,
        result: StepResult,
        transitions: list[Transition],
    ) -> None:
        old = alerts.get(labels)
        new = result.entry
        if new is None:
            if old is not None:
                del alerts[labels]
                self._dirty[old.alert.key] = None
        else:
            alerts[labels] = new
            if old is None or _persisted(old) != _persisted(new):
                self._dirty[new.alert.key] = new
        if result.transition is not None:
            transitions.append(result.transition)

    def _resolve_orphans(self, now: float) -> list[Transition]:
        transitions: list[Transition] = []
        for key, entry in list(self._orphans.items()):
            del self._orphans[key]
            self._dirty[key] = None
            alert = entry.alert
            if alert.state == AlertState.FIRING:
                gone = Alert(
                    key=alert.key,
                    state=AlertState.RESOLVED,
                    severity=alert.severity,
                    labels=alert.labels,
                    annotations=tuple(
                        sorted(
                            {
                                **dict(alert.annotations),
                                "resolved_reason": "rule removed or changed",
                            }.items()
                        )
                    ),
                    value=alert.value,
                    active_at=alert.active_at,
                    fired_at=alert.fired_at,
                    resolved_at=now,
                    last_eval_at=now,
                    remediation_plan=alert.remediation_plan,
                )
                transitions.append(Transition(gone, AlertState.FIRING, AlertState.RESOLVED, now))
            elif alert.state == AlertState.PENDING:
                transitions.append(Transition(alert, AlertState.PENDING, AlertState.INACTIVE, now))
        return transitions

    def _alert_for(self, rule: Rule, labels: Labels, value: float) -> Alert:
        label_map = dict(labels)
        full = dict(label_map)
        full.update(rule.labels)
        full["alertname"] = rule.name
        full["severity"] = rule.severity.value
        if self.node is not None:
            full["node"] = self.node
        # As in Prometheus, an empty value is no label (a rule's `x: ""` removes x): a page
        # must not say "afid=" for a report that carried none. The key keeps the series' set.
        full = {name: value for name, value in full.items() if value}
        annotations = tuple((name, tpl.render(value, label_map)) for name, tpl in rule.annotations)
        return Alert(
            key=AlertKey(rule.name, identity_labels(labels)),  # one alert across UUIDs
            state=AlertState.INACTIVE,
            severity=rule.severity,
            labels=make_labels(full),
            annotations=annotations,
            value=value,
            remediation_plan=rule.remediation_plan if rule.remediates else None,
        )

    def _assess(self, query: Query, now: float, service: ServiceMap | None) -> NodeHealth:
        gpu_up = query.latest(GPU_UP_METRIC, now=now)
        known = {key: gpu_up.get(key) for key in query.series(GPU_UP_METRIC)}
        known.update(gpu_up)
        for key, sample in known.items():
            gpu = key.label("gpu")
            if gpu is None or sample is None:
                continue
            if sample.value == 1.0:
                self._last_read[gpu] = max(sample.ts, self._last_read.get(gpu, sample.ts))
            else:  # never read yet: its data is at least as old as the first sample we saw
                self._last_read.setdefault(gpu, sample.ts)
        counted = (entry for entries in self._health_entries() for entry in entries)
        return assess(
            known,
            counted,
            now,
            stale_after_s=self.settings.lookback_s,
            service=service,
            last_read=self._last_read,
            physical=self._physical(query.series(GPU_INFO_METRIC)),
        )

    def _health_entries(self) -> Iterator[Iterable[AlertEntry]]:
        """The alert entries of each health rule (not shadow): what the verdict is made of."""
        for runtime in self._runtime.values():
            if runtime.rule.health and runtime.rule.mode != "shadow":
                yield runtime.alerts.values()

    def _firing_health(self) -> list[tuple[AlertKey, Severity, float | None]]:
        """What of the health rules' alerts the verdict reads (``fleetd.rules.health``):
        which fire, how severe, since when without data."""
        return [
            (entry.alert.key, entry.alert.severity, entry.no_data_since)
            for entries in self._health_entries()
            for entry in entries
            if entry.state == AlertState.FIRING
        ]

    def _physical(self, info: list[SeriesKey]) -> dict[str, str]:
        """``physical_of(info)``, worked out again only when the info series change (twice
        a tick otherwise, four labels of every device)."""
        if info != self._physical_from:
            self._physical_from, self._physical_map = info, physical_of(info)
        return self._physical_map

    def _clock(self) -> float:
        return self._timer() if self._timer is not None else 0.0

    # ------------------------------------------------------------------------------ read side
    def alerts(self, *, shadow: bool = False) -> list[Alert]:
        """Pending, firing and recently resolved alerts, by rule order then labels; a shadow
        rule's only with ``shadow`` (they are never notified)."""
        return [entry.alert for entry in self.entries(shadow=shadow)]

    @_locked
    def entries(self, *, shadow: bool = False) -> list[AlertEntry]:
        """Like ``alerts`` with the engine's extra (``no_data_since``)."""
        out: list[AlertEntry] = []
        for runtime in self._runtime.values():
            if runtime.rule.mode == "shadow" and not shadow:
                continue
            out.extend(entry for _, entry in sorted(runtime.alerts.items()))
        return out

    @_locked
    def shadow_alerts(self) -> list[Alert]:
        """The alerts of the rules in ``shadow`` mode (what they would have sent)."""
        return [
            entry.alert
            for runtime in self._runtime.values()
            if runtime.rule.mode == "shadow"
            for _, entry in sorted(runtime.alerts.items())
        ]

    @_locked
    def take_shadow(self) -> list[Transition]:
        """The shadow rules' transitions since the last call (the daemon logs them)."""
        taken, self._shadow = self._shadow, []
        return taken

    @_locked
    def health_alerts(self) -> list[Alert]:
        """Alerts of the rules that count towards GPU health (``health: true``): the faults
        remediation's verification must see cleared before a GPU goes back into service."""
        return [
            entry.alert
            for runtime in self._runtime.values()
            if runtime.rule.health and runtime.rule.mode != "shadow"
            for _, entry in sorted(runtime.alerts.items())
        ]

    @_locked
    def rule_statuses(self) -> list[RuleStatus]:
        return [runtime.status for runtime in self._runtime.values()]

    @_locked
    def health(self) -> NodeHealth | None:
        """The health verdict of the last evaluation (None before the first)."""
        return self._health

    @property
    def last_eval_at(self) -> float | None:
        return self._last_eval_at

    @_locked
    def take_changes(self) -> StateChanges:
        """Alert rows to write or delete since the last call (for ``AlertStateStore.save``)."""
        dirty, self._dirty = self._dirty, {}
        upserts = tuple(entry for entry in dirty.values() if entry is not None)
        deletes = tuple(key for key, entry in dirty.items() if entry is None)
        return StateChanges(upserts, deletes, self._last_eval_at)


def _persisted(entry: AlertEntry) -> tuple[object, ...]:
    a = entry.alert
    return (
        a.state,
        a.active_at,
        a.fired_at,
        a.resolved_at,
        a.keep_firing_since,
        entry.no_data_since,
        a.severity,
        a.labels,
    )


def _needs_models(rule: Rule) -> bool:
    if rule.threshold_by is not None:
        return False  # keyed by a label of the series itself
    return any(t is not None and t.per_model for t in (rule.threshold, rule.clear))


def _gpu_models(query: Query, now: float) -> dict[str, str]:
    """GPU index → product (MI300X, ...) from ``fleetd_gpu_info{model}``, however old."""
    out: dict[str, str] = {}
    for key in query.latest(INFO_METRIC, now=now):
        gpu, model = key.label("gpu"), key.label("model")
        if gpu is not None and model:
            out[gpu] = model
    return out


def _gpu_of(labels: Labels) -> str | None:
    return label_value(labels, "gpu")


def _describe(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text if len(text) <= 500 else text[:497] + "..."
