"""Reliability KPIs and rule precision derived from synthetic journals and alert histories
(``fleetd.remedy.kpi``): stage breakdown, repairs, success, incidents, GPU-hours, trust."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from fleetd.cli.fleetctl_context import Fleet
from fleetd.cli.fleetctl_report import NodeReport, render
from fleetd.clock import FakeClock
from fleetd.collect.catalog import CATALOG
from fleetd.model import GpuIdentity
from fleetd.remedy import machine as m
from fleetd.remedy.events import RemediationEvent
from fleetd.remedy.journal import RunJournal
from fleetd.remedy.kpi import (
    RuleMode,
    build_report,
    report_readings,
    run_figures,
    stage_durations,
)
from fleetd.remedy.reliability import ReliabilityReporter

from .rig import make_rig, path_with

NODE = "gpu-node-001"
HOUR = 3600.0
DAY = 86400.0
NOW = 1_000_000.0


@dataclass(frozen=True)
class Hist:
    ts: float
    gpu: int | None
    kind: str
    data: Mapping[str, Any] = field(default_factory=dict)


def make_run(
    run_id: str,
    state: m.RunState,
    *,
    at: float,
    gpu: int = 3,
    gpus: Sequence[int] = range(8),
    plan: m.Plan = m.Plan.RESET,
    rule: str | None = "GpuEccUncorrectableError",
    dry_run: bool = False,
    holding: bool = False,
    resets: int = 1,
    captured_at: float | None = None,
    kind: str = "alert",
    labels: Mapping[str, str] | None = None,
    value: float | None = None,
) -> m.Run:
    trigger = m.Trigger(
        kind="alert" if kind == "alert" else "manual",
        at=at,
        rule=rule if kind == "alert" else None,
        fingerprint=f"fp-{run_id}" if kind == "alert" else None,
        gpu=gpu,
        value=value,
        labels=tuple(sorted((labels or {}).items())),
        who=None if kind == "alert" else "alice",
    )
    return m.Run(
        run_id=run_id,
        node=NODE,
        plan=plan,
        trigger=trigger,
        gpus=tuple(m.UnitGpu(i) for i in gpus),
        workers=(),
        settings=m.RunSettings(),
        created_at=at,
        state=state,
        dry_run=dry_run,
        holding=holding,
        reset_count=resets,
        captures_started=(("pre_reset", captured_at),) if captured_at is not None else (),
    )


def events(run: m.Run, steps: Sequence[tuple[float, str, str]]) -> list[RemediationEvent]:
    """(at, state, kind) entries as the executor journals them, in order."""
    return [
        RemediationEvent(
            event_id=f"{run.run_id}:{i}",
            node=NODE,
            kind=kind,
            message=kind,
            at=at,
            run_id=run.run_id,
            seq=i,
            state=state,
            plan=run.plan.value,
            dry_run=run.dry_run,
        )
        for i, (at, state, kind) in enumerate(steps, start=1)
    ]


def reset_steps(t0: float, *, validate: bool = False) -> list[tuple[float, str, str]]:
    """A reset run that re-admits: queued 10 s, drain 40 s, capture 3 s, reset 7 s, verify
    15 s (10 s with a 5 s validation), worker start 25 s, back in rotation 1 s."""
    steps = [
        (t0, "planned", "run_planned"),
        (t0 + 10, "unrouting", "lease_granted"),
        (t0 + 10, "unrouting", "draining"),
        (t0 + 25, "balancer_wait", "balancer_wait"),
        (t0 + 40, "release_check", "release_check"),
        (t0 + 53, "resetting", "evidence_captured"),
        (t0 + 53, "resetting", "reset_intent"),
        (t0 + 60, "verifying", "reset_done"),
        (t0 + 75, "starting", "readmitting"),
        (t0 + 90, "await_ready", "worker_started"),
        (t0 + 100, "await_ready", "worker_ready"),
        (t0 + 101, "done", "worker_rerouted"),
        (t0 + 101, "done", "done"),
    ]
    if validate:  # the ladder's state, when the journal has it
        steps.insert(8, (t0 + 70, "validating", "validating"))
    return steps


def test_stage_durations_come_from_the_journaled_entries_and_the_capture_start() -> None:
    run = make_run("r1", m.RunState.DONE, at=NOW - HOUR, captured_at=NOW - HOUR + 50)
    stages = dict(stage_durations(run, events(run, reset_steps(NOW - HOUR))))
    assert stages == {
        "queued": 10,
        "drain": 40,
        "capture": 3,
        "reset": 7,
        "verify": 15,
        "worker_start": 25,
        "back_in_rotation": 1,
    }
    assert list(stages) == [s for s in stages]  # in stage order
    # with a validation state in the journal, its time is its own stage
    run2 = make_run("r2", m.RunState.DONE, at=NOW - HOUR, captured_at=NOW - HOUR + 50)
    stages2 = dict(stage_durations(run2, events(run2, reset_steps(NOW - HOUR, validate=True))))
    assert stages2["verify"] == 10 and stages2["validate"] == 5
    # without a capture the drain runs up to the reset; a run not concluded has no breakdown
    plain = make_run("r3", m.RunState.DONE, at=NOW - HOUR)
    assert dict(stage_durations(plain, events(plain, reset_steps(NOW - HOUR))))["drain"] == 43
    assert stage_durations(plain, events(plain, reset_steps(NOW - HOUR)[:6])) == ()


def test_automatic_and_manual_repairs_and_what_each_run_found() -> None:
    auto = make_run("auto", m.RunState.DONE, at=NOW - 5 * HOUR)
    held = make_run("held", m.RunState.QUARANTINED, at=NOW - 4 * HOUR, holding=False)
    held_steps = [
        (NOW - 4 * HOUR, "planned", "run_planned"),
        (NOW - 4 * HOUR + 5, "unrouting", "lease_granted"),
        (NOW - 4 * HOUR + 100, "quarantined", "quarantined"),
        (NOW - 2 * HOUR, "quarantined", "hold_released"),  # a person undrained it
    ]
    fa = run_figures(auto, events(auto, reset_steps(NOW - 5 * HOUR)))
    fh = run_figures(held, events(held, held_steps))
    assert fa.repair == "automatic" and fa.repair_s == 101 and fa.verdict == "nothing_found"
    assert fh.repair == "manual" and fh.repair_s == 2 * HOUR and fh.verdict == "fault_found"
    refused = make_run("refused", m.RunState.QUARANTINED, at=NOW - HOUR, resets=0, holding=True)
    fr = run_figures(refused, events(refused, held_steps[:3]))
    assert fr.repair is None and fr.back_at is None and fr.verdict is None  # no reset: unjudged
    drain = make_run("drain", m.RunState.DRAINED, at=NOW - HOUR, plan=m.Plan.DRAIN, kind="manual")
    fd = run_figures(drain, events(drain, held_steps[:2]))
    assert not fd.automatic and fd.repair is None and fd.verdict is None


def test_a_reset_that_recovered_a_proven_fault_found_a_fault() -> None:
    """A run whose trigger carried hard evidence of the fault (an AFID from a CPER record, a
    kernel RAS report, an uncorrectable count that rose, the CPER record that joined the run)
    found a fault although the reset recovered it; a symptom alone re-admitted found nothing."""
    t0 = NOW - 5 * HOUR
    cper = make_run(
        "cper",
        m.RunState.DONE,
        at=t0,
        rule="GpuCperUncorrectedError",
        labels={"afid": "22", "source": "cper", "class": "non_fatal_uncorrected", "gpu": "3"},
        value=1,
    )
    kernel = make_run(
        "kernel", m.RunState.DONE, at=t0, rule="GpuKernelUncorrectableError",
        labels={"source": "kernel", "class": "uncorrectable", "gpu": "3"}, value=1,
    )  # fmt: skip
    counters = make_run(
        "counters", m.RunState.DONE, at=t0, rule="GpuEccUncorrectableError",
        labels={"type": "uncorrectable", "gpu": "3"}, value=1,
    )  # fmt: skip
    joined = make_run("joined", m.RunState.DONE, at=t0, rule="SiteEccRule")
    joined_steps = [(t0 + 1, "planned", "classified"), *reset_steps(t0)[1:]]
    hang = make_run("hang", m.RunState.DONE, at=t0, rule="GpuHang", labels={"gpu": "3"}, value=1)
    quiet = make_run(
        "quiet", m.RunState.DONE, at=t0, rule="SiteEccRule",
        labels={"type": "uncorrectable", "gpu": "3"}, value=0,
    )  # fmt: skip
    verdicts = {
        r.run_id: run_figures(
            r, events(r, joined_steps if r is joined else reset_steps(t0))
        ).verdict
        for r in (cper, kernel, counters, joined, hang, quiet)
    }
    assert verdicts == {
        "cper": "fault_found",
        "kernel": "fault_found",
        "counters": "fault_found",
        "joined": "fault_found",
        "hang": "nothing_found",
        "quiet": "nothing_found",
    }
    # the demo's headline repair: its rule's precision is the fault it found, not 0 %
    report = build_report(
        node=NODE,
        runs=[cper],
        events={"cper": events(cper, reset_steps(t0))},
        history=[],
        identities=[],
        rules=[RuleMode("GpuCperUncorrectedError", "remediate", "afid")],
        now=NOW,
        window_s=DAY,
        probation_s=HOUR,
    )
    [trust] = report.rules
    assert (trust.runs, trust.fault_found, trust.nothing_found) == (1, 1, 0)
    assert trust.precision == 1.0 and report.succeeded == 1


def test_the_report_over_a_window() -> None:
    t1, t2, t3 = NOW - 3 * DAY, NOW - 2 * DAY, NOW - 2 * DAY + HOUR
    ok1 = make_run("ok1", m.RunState.DONE, at=t1, gpu=3, captured_at=t1 + 50)
    ok2 = make_run("ok2", m.RunState.DONE, at=t2, gpu=3, captured_at=t2 + 50)  # recurs: ok1 no
    bad = make_run("bad", m.RunState.QUARANTINED, at=t3, gpu=3, holding=True)
    dry = make_run("dry", m.RunState.DONE, at=NOW - DAY, gpu=9, gpus=range(8, 16), dry_run=True)
    old = make_run("old", m.RunState.DONE, at=NOW - 30 * DAY, gpu=5)  # outside the window
    bad_steps = [
        (t3, "planned", "run_planned"),
        (t3 + 10, "unrouting", "lease_granted"),
        (t3 + 200, "quarantined", "quarantined"),
    ]
    journal = {
        "ok1": events(ok1, reset_steps(t1)),
        "ok2": events(ok2, reset_steps(t2)),
        "bad": events(bad, bad_steps),
        "dry": events(dry, reset_steps(NOW - DAY)),
        "old": events(old, reset_steps(NOW - 30 * DAY)),
    }
    identities = [
        GpuIdentity(i, f"uuid-{i}", f"0000:{i:02x}:00.0", serial=f"SN{i:03d}", hive_id=f"h{i // 8}")
        for i in range(16)
    ]
    history = [
        # the alert that started ok1 (its run's fingerprint): not a second incident
        Hist(t1, 3, "alert", {"rule": "GpuEccUncorrectableError", "state": "firing",
                              "severity": "critical", "fingerprint": "fp-ok1"}),
        # a critical alert of an alert-mode rule on GPU 12: an incident without a run
        Hist(NOW - HOUR, 12, "alert", {"rule": "GpuHot", "state": "firing",
                                       "severity": "critical", "fingerprint": "x"}),
        Hist(NOW - HOUR + 60, 12, "alert", {"rule": "GpuHot", "state": "resolved",
                                            "severity": "critical", "fired_at": NOW - HOUR}),
        # resolved while ok2 had the GPU: acted on
        Hist(t2 + 90, 3, "alert", {"rule": "GpuEccUncorrectableError", "state": "resolved",
                                   "severity": "critical", "fired_at": t2}),
        Hist(NOW - 60, 4, "shadow_alert", {"rule": "XgmiFlaky", "state": "firing"}),
        Hist(NOW - 30, 4, "shadow_alert", {"rule": "XgmiFlaky", "state": "resolved",
                                           "fired_at": NOW - 60}),
    ]  # fmt: skip
    rules = [
        RuleMode("GpuEccUncorrectableError", "remediate", "reset"),
        RuleMode("GpuHot", "alert"),
        RuleMode("XgmiFlaky", "shadow", "reset"),
    ]
    report = build_report(
        node=NODE,
        runs=[ok1, ok2, bad, dry, old],
        events=journal,
        history=history,
        identities=identities,
        rules=rules,
        now=NOW,
        window_s=7 * DAY,
        probation_s=2 * DAY,
    )
    assert (report.succeeded, report.failed, report.success_ratio) == (2, 1, pytest.approx(2 / 3))
    auto = report.repair["automatic"]
    assert (auto.count, auto.mean_s, auto.max_s) == (2, 101, 101)
    assert report.repair["manual"].count == 0  # bad still holds its GPUs
    stages = {s: v.mean_s for s, v in report.stages}
    assert stages == {
        "queued": 10,
        "drain": 40,
        "capture": 3,
        "reset": 7,
        "verify": 15,
        "worker_start": 25,
        "back_in_rotation": 1,
    }
    assert report.readmission.mean_s == 101
    # incidents: GPU 3 three times (t1, t2, t3), GPU 9 once (the dry run), GPU 12 once
    by_gpu = {g.gpu: g for g in report.gpus}
    assert by_gpu[3].serial == "SN003" and by_gpu[3].incidents == 3
    assert by_gpu[3].mean_between_s == pytest.approx((t3 - t1) / 2)
    assert by_gpu[9].incidents == 1 and by_gpu[9].mean_between_s is None
    assert by_gpu[12].incidents == 1 and by_gpu[0].incidents == 0
    hives = {h.key: h for h in report.hives}
    assert hives["h0"].incidents == 3 and hives["h1"].incidents == 2
    # GPU-hours: ok1, ok2 91 s × 8 GPUs each; bad from its lease until now × 8 (dry: none)
    expected = (2 * 91 * 8 + (NOW - (t3 + 10)) * 8) / 3600
    assert report.gpu_hours_out_of_service == pytest.approx(expected)
    trust = {t.rule: t for t in report.rules}
    ecc = trust["GpuEccUncorrectableError"]
    assert (ecc.runs, ecc.fault_found, ecc.nothing_found) == (3, 1, 2)
    assert ecc.recurred == 2  # ok1 (ok2 came within probation) and ok2 (bad came an hour later)
    assert ecc.precision == 1.0 and ecc.resolved_without_action == 0 and ecc.fired == 1
    hot = trust["GpuHot"]
    assert (hot.mode, hot.fired, hot.resolved_without_action, hot.precision) == (
        "alert",
        1,
        1,
        None,
    )
    flaky = trust["XgmiFlaky"]
    assert (flaky.mode, flaky.shadow_fired, flaky.fired) == ("shadow", 1, 0)
    assert flaky.shadow_would == "remediate (reset)" and flaky.resolved_without_action == 1
    assert [r.run_id for r in report.runs] == ["dry", "bad", "ok2", "ok1"]  # newest first

    readings = report_readings(report, NOW)
    assert all(r.metric in CATALOG and r.value is not None for r in readings)
    values = {(r.metric, r.labels): r.value for r in readings}
    assert values[("fleetd_kpi_remediation_success_ratio", ())] == pytest.approx(2 / 3)
    assert values[("fleetd_kpi_readmission_stage_seconds", (("stage", "capture"),))] == 3
    assert ("fleetd_kpi_readmission_stage_seconds", (("stage", "validate"),)) not in values
    assert values[("fleetd_rule_shadow_firings", (("rule", "XgmiFlaky"),))] == 1
    assert values[("fleetd_rule_mode", (("mode", "shadow"), ("rule", "XgmiFlaky")))] == 1
    assert values[("fleetd_kpi_hive_incidents", (("hive", "h0"),))] == 3
    summary = report.summary()
    assert summary["success"]["succeeded"] == 2 and "runs" not in summary


def test_nothing_to_measure_is_left_out_never_a_zero() -> None:
    report = build_report(
        node=NODE,
        runs=[],
        events={},
        history=[],
        identities=[],
        rules=[RuleMode("GpuHot", "alert")],
        now=NOW,
        window_s=DAY,
        probation_s=HOUR,
    )
    assert report.success_ratio is None and report.readmission.mean_s is None
    metrics = {r.metric for r in report_readings(report, NOW)}
    assert "fleetd_kpi_remediation_success_ratio" not in metrics
    assert "fleetd_kpi_time_to_repair_seconds" not in metrics
    assert "fleetd_rule_precision_ratio" not in metrics
    assert "fleetd_kpi_remediation_runs" in metrics  # a count of none is a real 0


def test_the_rig_s_reset_of_a_served_hive_reports_every_stage(
    tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The remediation rig (simulator, stand-in vLLM workers, real journal): one reset run,
    then the report, its metrics and fleetctl's rendering of it show each stage and the
    success."""
    rig = make_rig(tmp_path, clock, workers_on=(2, 3))
    monkeypatch.setenv("PATH", path_with(rig.fleet.bin_dir))
    try:
        for worker in rig.fleet.workers.values():
            worker.add_requests(1, duration_s=6.0)  # in flight: the drain takes time
        rig.sim.inject(3, "ecc_uncorrectable", count=2)
        [run_id] = rig.fault(3)
        rig.run_until_settled()
        assert rig.run(run_id).state is m.RunState.DONE
        reporter = ReliabilityReporter(
            node=rig.node_name,
            journal=RunJournal(rig.db),
            history=lambda since, now: [],
            identities=rig.backend.gpus,
            rules=lambda: [RuleMode("GpuUncorrectableEcc", "remediate", "reset")],
            window_s=DAY,
            probation_s=HOUR,
        )
        now = clock.now()
        report = reporter.report(now)
    finally:
        rig.close()
    assert (report.succeeded, report.failed) == (1, 0)
    stages = {s: v.mean_s for s, v in report.stages}
    assert set(stages) == {
        "queued",
        "drain",
        "capture",
        "reset",
        "verify",
        "worker_start",
        "back_in_rotation",
    }, stages
    assert stages["drain"] is not None and stages["drain"] >= 6.0  # waited for the request
    assert stages["worker_start"] is not None and stages["worker_start"] > 0  # units load
    [run] = report.runs
    assert run.repair == "automatic" and sum(dict(run.stages).values()) == run.repair_s
    assert {g.serial for g in report.gpus if g.incidents} == {
        next(i.serial for i in rig.backend.gpus() if i.index == 3)
    }
    values = {(r.metric, r.labels): r.value for r in reporter.readings(now)}
    assert values[("fleetd_kpi_remediation_success_ratio", ())] == 1.0
    assert (
        values[("fleetd_kpi_readmission_stage_seconds", (("stage", "worker_start"),))]
        == (stages["worker_start"])
    )
    shown = render(
        [NodeReport(rig.node_name, report.to_dict(), now)],
        Fleet(None, None, 2.0, None, None, False, 300.0),
        source="the agents",
    )
    assert "runs: 1 succeeded, 0 failed (success 100%)" in shown
    assert "worker start " in shown and "back in rotation " in shown
    assert f"{run_id} reset done repair automatic" in shown


def test_incidents_stay_with_the_physical_gpu_after_a_swap() -> None:
    """GPU 3 faulted twice as uuid-old, was replaced (uuid-3, serial SN003 now), then faulted
    once more: the old GPU keeps its two incidents, the new one has one."""

    def on(uuid: str, run_id: str, at: float) -> m.Run:
        run = make_run(run_id, m.RunState.DONE, at=at, gpu=3, gpus=(3,))
        return dataclasses.replace(run, gpus=(m.UnitGpu(3, uuid=uuid),))

    runs = [on("uuid-old", "a", NOW - 3 * DAY), on("uuid-old", "b", NOW - 2 * DAY)]
    runs.append(on("uuid-3", "c", NOW - DAY))
    identities = [GpuIdentity(3, "uuid-3", "0000:03:00.0", serial="SN003", hive_id="h0")]
    report = build_report(
        node=NODE,
        runs=runs,
        events={r.run_id: events(r, reset_steps(r.trigger.at)) for r in runs},
        history=[],
        identities=identities,
        rules=[],
        now=NOW,
        window_s=7 * DAY,
        probation_s=HOUR,
    )
    found = {(g.gpu, g.serial, g.key): (g.incidents, g.mean_between_s) for g in report.gpus}
    assert found == {
        (3, None, "uuid:uuid-old"): (2, DAY),
        (3, "SN003", "SN003"): (1, None),
    }
    [hive] = report.hives
    assert hive.incidents == 1  # the hive's GPUs now
    labels = {
        r.labels for r in report_readings(report, NOW) if r.metric == "fleetd_kpi_gpu_incidents"
    }
    assert labels == {
        (("gpu", "3"), ("serial", "SN003")),
        (("gpu", "3"), ("serial", "uuid:uuid-old")),
    }
