"""Reliability KPIs and per-rule precision, derived from the run journal and the alert history.

Pure: ``build_report(…, now)`` takes the runs, their journaled events (each stamped with the
time it was written and the run's state then), the alert history and the GPUs' identities,
and returns the figures of one window. Nothing here is stored: the journal and the event log
are the record, so a restarted daemon reports the same numbers.

* **Time to repair** — from the trigger to back in service. *Automatic*: the run ended
  ``done`` on its own. *Manual*: the run ended holding its GPUs (quarantined, or aborted with
  workers out) and a person released them later (the run's ``hold_released`` entry).
* **Time between incidents** — per GPU (by serial) and per hive. An incident is a run an alert
  started (a dry run too: the fault happened) or a critical alert that fired on a GPU and
  started no run; the figure is the mean gap between consecutive incidents in the window.
* **Success rate** — automatic reset/reboot runs (not dry) that ended ``done``, over those
  that concluded (``done``, ``quarantined``, ``aborted``).
* **Re-admission by stage** — each successful run's time in queued (waiting for the node
  slot and the fleet cap), drain, capture (the pre-reset evidence bundle), reset, verify
  (with burn-in), validate (the validation ladder's states, when the journal has them), worker
  start (started until the last worker answered healthy) and back in rotation (from then to
  ``done``). A stage begins at the first entry journaled in one of its states.
* **GPU-hours out of service** — per run (not dry, not an undrain), from the lease (workers
  start leaving) to back in service, or ``now`` while it still holds them, times its GPUs;
  clipped to the window.
* **Rule precision** (staged trust) — per rule: its automatic runs that found a real fault
  (the run quarantined after its reset, or its trigger carried hard evidence of the fault —
  ``fault_evidence``: an AFID, a CPER or kernel report, an uncorrectable count that rose —
  even though the reset recovered it), those that found nothing (``done`` on a symptom
  alone), those that recurred (another automatic run on one of its GPUs within the
  probation after it ended), and its alerts that resolved with no action (no run on the
  GPU while they fired). precision = (fault found + recurred) / runs judged; shadow firings
  come from the history's ``shadow_alert`` entries.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from fleetd.model import GpuIdentity, Reading, make_labels
from fleetd.remedy.events import RemediationEvent
from fleetd.remedy.kpi_labels import STAGES, VERDICTS
from fleetd.remedy.run import Plan, Run, RunState

_STAGE_OF_STATE = {
    RunState.PLANNED.value: "queued",
    RunState.UNROUTING.value: "drain",
    RunState.BALANCER_WAIT.value: "drain",
    RunState.QUIESCING.value: "drain",
    RunState.STOPPING.value: "drain",
    RunState.RELEASE_CHECK.value: "drain",
    RunState.RESETTING.value: "reset",
    RunState.REBOOTING.value: "reset",
    RunState.VERIFYING.value: "verify",
    RunState.BURN_IN.value: "verify",
    RunState.STARTING.value: "worker_start",
    RunState.AWAIT_READY.value: "worker_start",
}
_TERMINAL = frozenset(s.value for s in (RunState.DONE, RunState.QUARANTINED, RunState.ABORTED))
_AUTOMATIC = frozenset({Plan.RESET, Plan.REBOOT})
REPAIRS = ("automatic", "manual")
SHADOW_ALERT_KIND = "shadow_alert"
"""The event-log kind of a shadow rule's firing and resolving (``fleetd.rules.trust``)."""


def stage_of(state: str) -> str | None:
    """The KPI stage of a run state; any state of the validation ladder is ``validate``."""
    if "validat" in state:
        return "validate"
    return _STAGE_OF_STATE.get(state)


class HistoryEntry(Protocol):
    """An alert-history entry of the event log (``fleetd.store.events.Event``)."""

    @property
    def ts(self) -> float: ...
    @property
    def gpu(self) -> int | None: ...
    @property
    def kind(self) -> str: ...
    @property
    def data(self) -> Mapping[str, Any]: ...


@dataclass(frozen=True, slots=True)
class RuleMode:
    """A rule's trust stage as loaded: ``shadow``, ``alert`` or ``remediate``."""

    rule: str
    mode: str
    plan: str | None = None


# ------------------------------------------------------------------------------- one run
@dataclass(frozen=True, slots=True)
class RunFigures:
    """What one run contributes to the KPIs."""

    run_id: str
    plan: str
    state: str
    dry_run: bool
    rule: str | None
    trigger_gpu: int | None
    gpus: tuple[int, ...]
    fingerprint: str | None  # the alert that started it
    trigger_uuid: str | None  # the faulty GPU's uuid when the run knew it
    trigger_at: float
    automatic: bool  # started by an alert (not a person's drain/undrain)
    out_from: float | None  # when workers began leaving (the lease was granted)
    ended_at: float | None  # when the run concluded
    back_at: float | None  # back in service: done, or its hold released
    repair: str | None  # automatic | manual | None (not repaired, or not a fault run)
    stages: tuple[tuple[str, float], ...] = ()
    verdict: str | None = None  # fault_found | nothing_found | None (not judged)
    recurred: bool = False

    @property
    def repair_s(self) -> float | None:
        return None if self.back_at is None else max(0.0, self.back_at - self.trigger_at)

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "plan": self.plan,
            "state": self.state,
            "dry_run": self.dry_run,
            "rule": self.rule,
            "gpu": self.trigger_gpu,
            "gpus": list(self.gpus),
            "trigger_at": self.trigger_at,
            "ended_at": self.ended_at,
            "back_in_service_at": self.back_at,
            "repair": self.repair,
            "repair_s": self.repair_s if self.repair is not None else None,
            "stages": dict(self.stages),
            "verdict": self.verdict,
            "recurred": self.recurred,
        }


def stage_durations(run: Run, events: Sequence[RemediationEvent]) -> tuple[tuple[str, float], ...]:
    """Seconds the run spent in each stage, in stage order (stages it never entered left out).

    A stage begins at the first journaled entry in one of its states and ends where the next
    begins; the run's conclusion ends the last. The capture is cut out of the drain by the
    run's ``captures_started`` time for ``pre_reset``; ``back_in_rotation`` begins at the
    last ``worker_ready`` entry."""
    ordered = sorted(events, key=lambda e: (e.seq, e.at))
    marks: list[tuple[float, str]] = []
    end: float | None = None
    for e in ordered:
        if e.state in _TERMINAL:
            end = e.at
            break
        stage = stage_of(e.state)
        if stage is not None and (not marks or marks[-1][1] != stage):
            marks.append((e.at, stage))
    if end is None:
        return ()
    ready = [e.at for e in ordered if e.kind == "worker_ready" and e.at <= end]
    if ready:
        marks.append((max(ready), "back_in_rotation"))
    capture = dict(run.captures_started).get("pre_reset")
    if capture is not None:
        after = [t for t, s in marks if t > capture]
        marks.append((capture, "capture"))
        if after:  # what followed the capture begins when it ended
            nxt = min(after)
            marks = [(t, s) for t, s in marks if not (capture < t < nxt)]
    marks.sort(key=lambda m: m[0])
    totals: dict[str, float] = defaultdict(float)
    for (t, stage), (t_next, _s) in zip(marks, [*marks[1:], (end, "")], strict=True):
        totals[stage] += max(0.0, t_next - t)
    return tuple((s, totals[s]) for s in STAGES if s in totals)


FAULT_REPORT_SOURCES = frozenset({"cper", "kernel"})
"""The ``source`` labels of a fault incident (``fleetd_gpu_fault_incident_open``) that are a
report of the fault itself: a CPER record, a kernel RAS line (not the counters' symptom)."""
_UNCORRECTABLE = frozenset({"uncorrectable", "deferred"})


def fault_evidence(run: Run, events: Sequence[RemediationEvent]) -> str | None:
    """The hard evidence of a fault the run had before its reset, or None.

    A run whose trigger proves the fault found a fault even when the reset recovered it:
    the trigger names an AFID (a CPER record) or comes from a fault report (``source`` cper
    or kernel), it is a count of uncorrectable or deferred errors that rose (``type`` label,
    a value above zero), or the fault's CPER record joined the run before it began (its
    ``classified`` entry). A symptom alone (a hang, a slow link, a stale poll) is no proof.
    """
    labels = dict(run.trigger.labels)
    afid = labels.get("afid", "")
    if afid:
        return f"CPER record, AFID {afid}"
    source = labels.get("source", "")
    if source in FAULT_REPORT_SOURCES:
        return f"{source} fault report"
    value = run.trigger.value
    if labels.get("type", "") in _UNCORRECTABLE and value is not None and value > 0:
        return f"{value:g} new {labels['type']} error(s)"
    for e in events:
        if e.kind == "classified":
            return e.message
    return None


def run_figures(run: Run, events: Sequence[RemediationEvent]) -> RunFigures:
    """One run's figures from its journaled entries."""
    ordered = sorted(events, key=lambda e: (e.seq, e.at))
    automatic = run.trigger.kind == "alert" and run.plan in _AUTOMATIC
    ended = next((e.at for e in ordered if e.state in _TERMINAL | {"drained"}), None)
    if ended is None and run.terminal:
        ended = run.entered_at
    out_from = next((e.at for e in ordered if e.state and e.state != "planned"), None)
    released = next((e.at for e in ordered if e.kind == "hold_released"), None)
    back: float | None = None
    repair: str | None = None
    if run.state is RunState.DONE:
        back = ended
        repair = "automatic" if automatic else None
    elif released is not None:
        back = released
        repair = "manual" if automatic else None
    elif run.state is RunState.ABORTED and not run.holding:
        back = ended  # rolled back: its workers went back into rotation
    verdict: str | None = None
    if automatic and not run.dry_run:
        if run.state is RunState.DONE:
            verdict = "fault_found" if fault_evidence(run, ordered) else "nothing_found"
        elif run.state is RunState.QUARANTINED and (run.reset_count or run.reboot_count):
            verdict = "fault_found"
    return RunFigures(
        run_id=run.run_id,
        plan=run.plan.value,
        state=run.state.value,
        dry_run=run.dry_run,
        rule=run.trigger.rule,
        trigger_gpu=run.trigger.gpu,
        gpus=run.verify_gpus,
        fingerprint=run.trigger.fingerprint,
        trigger_uuid=next((g.uuid for g in run.gpus if g.index == run.trigger.gpu), None),
        trigger_at=run.trigger.at or run.created_at,
        automatic=automatic,
        out_from=out_from if run.plan is not Plan.UNDRAIN else None,
        ended_at=ended,
        back_at=back,
        repair=repair,
        stages=stage_durations(run, ordered) if run.state is RunState.DONE else (),
        verdict=verdict,
    )


def mark_recurrences(figures: Sequence[RunFigures], probation_s: float) -> list[RunFigures]:
    """Each automatic run whose GPUs faulted again (another automatic run triggered on one of
    them) within ``probation_s`` of it ending gets ``recurred``."""
    auto = sorted((f for f in figures if f.automatic), key=lambda f: f.trigger_at)
    out = []
    for f in figures:
        recurred = False
        if f.automatic and f.ended_at is not None and not f.dry_run:
            mine = set(f.gpus)
            recurred = any(
                o.run_id != f.run_id
                and o.dry_run == f.dry_run
                and f.ended_at <= o.trigger_at <= f.ended_at + probation_s
                and (o.trigger_gpu in mine or bool(mine & set(o.gpus)))
                for o in auto
            )
        out.append(f if recurred == f.recurred else _with(f, recurred=recurred))
    return out


def _with(f: RunFigures, **changes: Any) -> RunFigures:
    return replace(f, **changes)


# ------------------------------------------------------------------------------- the report
@dataclass(frozen=True, slots=True)
class Spread:
    """Count, mean and max of some seconds."""

    count: int = 0
    mean_s: float | None = None
    max_s: float | None = None

    @classmethod
    def of(cls, values: Iterable[float]) -> Spread:
        v = list(values)
        if not v:
            return cls()
        return cls(len(v), sum(v) / len(v), max(v))

    def to_dict(self) -> dict[str, Any]:
        return {"count": self.count, "mean_s": self.mean_s, "max_s": self.max_s}


@dataclass(frozen=True, slots=True)
class Incidents:
    """One GPU's or hive's incidents in the window and the mean gap between them."""

    key: str
    incidents: int
    mean_between_s: float | None
    gpu: int | None = None
    serial: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"incidents": self.incidents, "mean_between_s": self.mean_between_s}
        if self.gpu is not None or self.serial is not None:
            return {"gpu": self.gpu, "serial": self.serial, **out}
        return {"hive": self.key, **out}


@dataclass(frozen=True, slots=True)
class RuleTrust:
    """One rule's stage and what its firings led to in the window."""

    rule: str
    mode: str
    plan: str | None = None
    runs: int = 0
    fault_found: int = 0
    nothing_found: int = 0
    recurred: int = 0
    fired: int = 0
    resolved_without_action: int = 0
    shadow_fired: int = 0
    shadow_would: str = ""  # what the shadow rule would have done: notify, or plan X

    @property
    def judged(self) -> int:
        return self.fault_found + self.nothing_found

    @property
    def precision(self) -> float | None:
        """Runs that found a real fault or recurred, over the runs judged (None: none yet)."""
        if not self.judged:
            return None
        confirmed = self.fault_found + min(self.recurred, self.nothing_found)
        return confirmed / self.judged

    def to_dict(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "mode": self.mode,
            "plan": self.plan,
            "runs": self.runs,
            "fault_found": self.fault_found,
            "nothing_found": self.nothing_found,
            "recurred": self.recurred,
            "precision": self.precision,
            "fired": self.fired,
            "resolved_without_action": self.resolved_without_action,
            "shadow_fired": self.shadow_fired,
            "shadow_would": self.shadow_would or None,
        }


@dataclass(frozen=True, slots=True)
class Report:
    """The reliability figures of one node over ``[since, now]``."""

    node: str
    now: float
    window_s: float
    repair: Mapping[str, Spread]
    succeeded: int
    failed: int
    stages: tuple[tuple[str, Spread], ...]
    readmission: Spread
    gpus: tuple[Incidents, ...]
    hives: tuple[Incidents, ...]
    gpu_hours_out_of_service: float
    rules: tuple[RuleTrust, ...]
    runs: tuple[RunFigures, ...] = field(default=())

    @property
    def since(self) -> float:
        return self.now - self.window_s

    @property
    def success_ratio(self) -> float | None:
        total = self.succeeded + self.failed
        return self.succeeded / total if total else None

    def summary(self, *, compact: bool = False) -> dict[str, Any]:
        """The figures without the per-run list. ``compact`` (what the heartbeat publishes,
        10,000 nodes in one registry read): only GPUs with an incident and rules with
        something counted or in shadow mode."""
        gpus = [g for g in self.gpus if g.incidents or not compact]
        rules = [r for r in self.rules if not compact or r.mode == "shadow" or _counted(r)]
        return {
            "node": self.node,
            "at": self.now,
            "window_s": self.window_s,
            "time_to_repair": {k: v.to_dict() for k, v in self.repair.items()},
            "success": {
                "succeeded": self.succeeded,
                "failed": self.failed,
                "ratio": self.success_ratio,
            },
            "readmission": {
                "runs": self.readmission.count,
                "mean_s": self.readmission.mean_s,
                "stages": {s: v.mean_s for s, v in self.stages},
            },
            "incidents": {
                "gpus": [g.to_dict() for g in gpus],
                "hives": [h.to_dict() for h in self.hives if h.incidents or not compact],
            },
            "gpu_hours_out_of_service": self.gpu_hours_out_of_service,
            "rules": [r.to_dict() for r in rules],
        }

    def to_dict(self) -> dict[str, Any]:
        return {**self.summary(), "runs": [r.to_dict() for r in self.runs]}


def _counted(t: RuleTrust) -> bool:
    return bool(t.runs or t.fired or t.resolved_without_action or t.shadow_fired)


def build_report(
    *,
    node: str,
    runs: Sequence[Run],
    events: Mapping[str, Sequence[RemediationEvent]],
    history: Sequence[HistoryEntry],
    identities: Sequence[GpuIdentity],
    rules: Sequence[RuleMode],
    now: float,
    window_s: float,
    probation_s: float,
    recent: int = 20,
) -> Report:
    """The report of ``[now - window_s, now]``; ``runs`` may reach back further (a run that
    still holds GPUs, a run whose recurrence falls in the window)."""
    since = now - window_s
    figures = mark_recurrences(
        [run_figures(r, events.get(r.run_id, ())) for r in runs], probation_s
    )
    in_window = [f for f in figures if f.trigger_at >= since or (f.back_at or now) >= since]
    repaired: dict[str, list[float]] = {k: [] for k in REPAIRS}
    for f in in_window:
        if f.repair is not None and not f.dry_run and f.back_at is not None and f.back_at >= since:
            repaired[f.repair].append(f.back_at - f.trigger_at)
    concluded = [
        f
        for f in in_window
        if f.automatic
        and not f.dry_run
        and f.ended_at is not None
        and f.ended_at >= since
        and f.state in _TERMINAL
    ]
    ok = [f for f in concluded if f.state == RunState.DONE.value]
    stage_values: dict[str, list[float]] = defaultdict(list)
    for f in ok:
        for stage, seconds in f.stages:
            stage_values[stage].append(seconds)
    stages = tuple((s, Spread.of(stage_values[s])) for s in STAGES if stage_values.get(s))
    readmission = Spread.of(sum(v for _s, v in f.stages) for f in ok if f.stages)
    gpus, hives = _incidents(figures, history, identities, since, now)
    return Report(
        node=node,
        now=now,
        window_s=window_s,
        repair={k: Spread.of(v) for k, v in repaired.items()},
        succeeded=len(ok),
        failed=len(concluded) - len(ok),
        stages=stages,
        readmission=readmission,
        gpus=gpus,
        hives=hives,
        gpu_hours_out_of_service=_gpu_hours(figures, since, now),
        rules=_trust(in_window, figures, history, rules, since),
        runs=tuple(sorted(in_window, key=lambda f: -f.trigger_at)[:recent]),
    )


def _gpu_hours(figures: Sequence[RunFigures], since: float, now: float) -> float:
    total = 0.0
    for f in figures:
        if f.dry_run or f.out_from is None:
            continue
        start = max(f.out_from, since)
        end = min(now, f.back_at if f.back_at is not None else now)
        total += max(0.0, end - start) * len(f.gpus)
    return total / 3600.0


def _mean_gap(times: Sequence[float]) -> float | None:
    t = sorted(times)
    if len(t) < 2:
        return None
    return (t[-1] - t[0]) / (len(t) - 1)


def _incidents(
    figures: Sequence[RunFigures],
    history: Sequence[HistoryEntry],
    identities: Sequence[GpuIdentity],
    since: float,
    now: float,
) -> tuple[tuple[Incidents, ...], tuple[Incidents, ...]]:
    by_index = {g.index: g for g in identities}
    by_uuid = {g.uuid: g for g in identities if g.uuid}
    # by the physical GPU: its uuid when the entry names one (a GPU swapped since keeps its
    # own incidents, not its successor's), else the index's GPU now
    times: dict[tuple[int, str | None], list[float]] = defaultdict(list)

    def where(index: int, uuid: str | None) -> tuple[int, str | None]:
        if uuid:
            found = by_uuid.get(uuid)
            return (found.index, found.uuid) if found is not None else (index, uuid)
        ident = by_index.get(index)
        return (index, ident.uuid if ident is not None else None)

    for f in figures:
        if f.automatic and f.trigger_gpu is not None and since <= f.trigger_at <= now:
            times[where(f.trigger_gpu, f.trigger_uuid)].append(f.trigger_at)
    started_runs = {f.fingerprint for f in figures if f.fingerprint}
    for h in history:
        d = h.data
        if h.kind != "alert" or d.get("state") != "firing" or d.get("severity") != "critical":
            continue
        if h.gpu is None or not since <= h.ts <= now or d.get("fingerprint") in started_runs:
            continue
        labels = d.get("labels")
        uuid = labels.get("uuid") if isinstance(labels, Mapping) else None
        times[where(h.gpu, str(uuid) if uuid else None)].append(h.ts)
    for ident in identities:
        times.setdefault((ident.index, ident.uuid or None), [])
    gpus = []
    for (index, uuid), found in sorted(times.items(), key=lambda kv: (kv[0][0], kv[0][1] or "")):
        known = by_uuid.get(uuid) if uuid else by_index.get(index)
        serial = known.serial if known is not None else None
        key = serial or (f"uuid:{uuid}" if uuid else f"index:{index}")
        gpus.append(Incidents(key, len(found), _mean_gap(found), index, serial))
    per_hive: dict[str, list[float]] = defaultdict(list)
    for ident in identities:
        if ident.hive_id:
            per_hive.setdefault(ident.hive_id, [])
            per_hive[ident.hive_id].extend(times.get((ident.index, ident.uuid or None), ()))
    hives = tuple(Incidents(h, len(t), _mean_gap(t)) for h, t in sorted(per_hive.items()))
    return tuple(gpus), hives


def _trust(
    in_window: Sequence[RunFigures],
    figures: Sequence[RunFigures],
    history: Sequence[HistoryEntry],
    rules: Sequence[RuleMode],
    since: float,
) -> tuple[RuleTrust, ...]:
    modes = {r.rule: r for r in rules}
    runs: dict[str, list[RunFigures]] = defaultdict(list)
    for f in in_window:
        if f.automatic and not f.dry_run and f.rule is not None:
            runs[f.rule].append(f)
    fired: dict[str, int] = defaultdict(int)
    idle: dict[str, int] = defaultdict(int)
    shadow: dict[str, int] = defaultdict(int)
    spans = _Spans(figures)
    for h in history:
        rule = str(h.data.get("rule") or "")
        if not rule or h.ts < since:
            continue
        state = h.data.get("state")
        if state == "firing":
            (shadow if h.kind == SHADOW_ALERT_KIND else fired)[rule] += 1
        elif state == "resolved" and not _acted_on(h, spans):
            idle[rule] += 1
    names = sorted(set(modes) | set(runs) | set(fired) | set(shadow) | set(idle))
    out = []
    for name in names:
        mode = modes.get(name)
        mine = runs.get(name, [])
        plan = mode.plan if mode is not None else None
        out.append(
            RuleTrust(
                rule=name,
                mode=mode.mode if mode is not None else "unknown",
                plan=plan,
                runs=len(mine),
                fault_found=sum(f.verdict == "fault_found" for f in mine),
                nothing_found=sum(f.verdict == "nothing_found" for f in mine),
                # a re-admitted run whose fault came back: the reset only hid it
                recurred=sum(f.recurred and f.verdict == "nothing_found" for f in mine),
                fired=fired.get(name, 0),
                resolved_without_action=idle.get(name, 0),
                shadow_fired=shadow.get(name, 0),
                shadow_would=(f"remediate ({plan})" if plan else "notify")
                if mode is not None and mode.mode == "shadow"
                else "",
            )
        )
    return tuple(out)


class _Spans:
    """When runs held which GPUs, for "did a run touch this GPU while the alert fired"
    in O(log runs) per alert: per GPU (and for all), the runs' starts in order with the
    latest end among those started so far."""

    def __init__(self, figures: Sequence[RunFigures]) -> None:
        per: dict[int | None, list[tuple[float, float]]] = defaultdict(list)
        for f in figures:
            span = (f.trigger_at, math.inf if f.ended_at is None else f.ended_at)
            per[None].append(span)
            for gpu in {f.trigger_gpu, *f.gpus} - {None}:
                per[gpu].append(span)
        self._starts: dict[int | None, list[float]] = {}
        self._latest_end: dict[int | None, list[float]] = {}
        for gpu, spans in per.items():
            spans.sort()
            ends, latest = [], -math.inf
            for _t0, t1 in spans:
                latest = max(latest, t1)
                ends.append(latest)
            self._starts[gpu] = [t0 for t0, _t1 in spans]
            self._latest_end[gpu] = ends

    def touched(self, gpu: int | None, start: float, end: float) -> bool:
        """Whether a run on ``gpu`` (any GPU: None) began by ``end`` and ended at or after
        ``start``."""
        starts = self._starts.get(gpu)
        if not starts:
            return False
        n = bisect_right(starts, end)
        return n > 0 and self._latest_end[gpu][n - 1] >= start


def _acted_on(h: HistoryEntry, spans: _Spans) -> bool:
    """Whether a run touched the resolved alert's GPU while it fired (any run: a person's
    drain is an action too)."""
    fired_at = h.data.get("fired_at")
    start = float(fired_at) if isinstance(fired_at, int | float) else h.ts
    return spans.touched(h.gpu, start, h.ts)


# ------------------------------------------------------------------------------- metrics
def report_readings(report: Report, now: float) -> list[Reading]:
    """The ``fleetd_kpi_*`` and ``fleetd_rule_*`` trust series of the catalog (gauges over
    the window; a figure with nothing to measure yet is left out, never a zero)."""

    def r(metric: str, value: float, **labels: object) -> Reading:
        return Reading(metric, make_labels(labels), float(value), now)

    out = [
        r("fleetd_kpi_window_seconds", report.window_s),
        r("fleetd_kpi_gpu_out_of_service_seconds", report.gpu_hours_out_of_service * 3600.0),
        r("fleetd_kpi_remediation_runs", report.succeeded, result="succeeded"),
        r("fleetd_kpi_remediation_runs", report.failed, result="failed"),
    ]
    if report.success_ratio is not None:
        out.append(r("fleetd_kpi_remediation_success_ratio", report.success_ratio))
    for kind in REPAIRS:
        spread = report.repair.get(kind, Spread())
        out.append(r("fleetd_kpi_repairs", spread.count, repair=kind))
        if spread.mean_s is not None:
            out.append(r("fleetd_kpi_time_to_repair_seconds", spread.mean_s, repair=kind))
    for stage, spread in report.stages:
        if spread.mean_s is not None:
            out.append(r("fleetd_kpi_readmission_stage_seconds", spread.mean_s, stage=stage))
    if report.readmission.mean_s is not None:
        out.append(r("fleetd_kpi_readmission_seconds", report.readmission.mean_s))
    for g in report.gpus:
        labels = {"gpu": g.gpu, "serial": g.serial or g.key}  # a GPU gone since: uuid:…
        out.append(r("fleetd_kpi_gpu_incidents", g.incidents, **labels))
        if g.mean_between_s is not None:
            out.append(
                r("fleetd_kpi_gpu_time_between_incidents_seconds", g.mean_between_s, **labels)
            )
    for h in report.hives:
        out.append(r("fleetd_kpi_hive_incidents", h.incidents, hive=h.key))
        if h.mean_between_s is not None:
            out.append(
                r("fleetd_kpi_hive_time_between_incidents_seconds", h.mean_between_s, hive=h.key)
            )
    for t in report.rules:
        if t.mode != "unknown":
            out.append(r("fleetd_rule_mode", 1, rule=t.rule, mode=t.mode))
        for verdict, n in zip(VERDICTS, (t.fault_found, t.nothing_found, t.recurred), strict=True):
            out.append(r("fleetd_rule_remediation_verdicts", n, rule=t.rule, verdict=verdict))
        if t.precision is not None:
            out.append(r("fleetd_rule_precision_ratio", t.precision, rule=t.rule))
        out.append(
            r("fleetd_rule_alerts_resolved_without_action", t.resolved_without_action, rule=t.rule)
        )
        if t.mode == "shadow" or t.shadow_fired:
            out.append(r("fleetd_rule_shadow_firings", t.shadow_fired, rule=t.rule))
    return [x for x in out if x.value is not None and math.isfinite(x.value)]
