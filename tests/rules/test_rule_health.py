"""GPU and node health: precedence of the verdicts, unknown for stale data, and the roll-up."""

from __future__ import annotations

from dataclasses import replace

import pytest

from fleetd.model import (
    Alert,
    AlertKey,
    AlertState,
    HealthState,
    OutOfService,
    Reading,
    Sample,
    SeriesKey,
    ServiceReason,
    Severity,
    make_labels,
)
from fleetd.remedy import machine as m
from fleetd.remedy.journal import PauseState
from fleetd.remedy.lease import BreakerStatus
from fleetd.remedy.service import HeldGpus, RemediationStatus
from fleetd.rules.health import (
    ServiceWatch,
    assess,
    health_vector,
    out_of_service,
    service_state,
    summary_parts,
    with_service,
)
from fleetd.rules.state import AlertEntry

NOW = 1_767_225_600.0
H, D, U, K = HealthState.HEALTHY, HealthState.DEGRADED, HealthState.UNHEALTHY, HealthState.UNKNOWN
X = HealthState.OUT_OF_SERVICE  # out of service


def up(*ages: float | None) -> dict[SeriesKey, Sample | None]:
    out: dict[SeriesKey, Sample | None] = {}
    for gpu, age in enumerate(ages):
        key = SeriesKey("fleetd_gpu_up", make_labels({"gpu": gpu, "uuid": f"U{gpu}"}))
        out[key] = None if age is None else Sample(NOW - age, 1.0)
    return out


def firing(
    rule: str, severity: Severity, gpu: int | None = None, *, no_data: float | None = None
) -> AlertEntry:
    labels = make_labels({} if gpu is None else {"gpu": gpu, "uuid": f"U{gpu}"})
    alert = Alert(AlertKey(rule, labels), AlertState.FIRING, severity, labels)
    return AlertEntry(alert, None if no_data is None else NOW - no_data)


def verdicts(report) -> list[HealthState]:  # type: ignore[no-untyped-def]
    return [g.health.state for g in report.gpus]


def test_fresh_and_quiet_is_healthy_with_its_data_age() -> None:
    report = assess(up(2.0, 4.0), [], NOW, stale_after_s=17.5)
    assert verdicts(report) == [H, H]
    assert report.node.state == H and report.node.data_age_s == 4.0
    assert report.gpus[0].health.data_age_s == 2.0


def test_warning_degrades_critical_makes_unhealthy_info_changes_nothing() -> None:
    alerts = [
        firing("Warm", Severity.WARNING, 0),
        firing("Broken", Severity.CRITICAL, 1),
        firing("Busy", Severity.INFO, 2),
    ]
    report = assess(up(1, 1, 1), alerts, NOW, stale_after_s=17.5)
    assert verdicts(report) == [D, U, H]
    assert report.gpus[1].health.reasons == ("Broken (critical)",)
    assert report.node.state == U


def test_stale_telemetry_is_unknown_even_with_a_critical_alert() -> None:
    """No verdict without data: not unhealthy forever, and never healthy."""
    report = assess(
        up(60.0, None), [firing("Broken", Severity.CRITICAL, 0)], NOW, stale_after_s=17.5
    )
    assert verdicts(report) == [K, K]
    assert report.gpus[0].health.reasons == ("no fresh telemetry for 1m",)
    assert report.gpus[1].health.data_age_s is None
    assert report.node.state == K


def test_an_alert_that_lost_its_data_makes_the_gpu_unknown() -> None:
    alerts = [
        firing("Hot", Severity.CRITICAL, 0, no_data=90.0),
        firing("Warm", Severity.WARNING, 0),
    ]
    report = assess(up(1.0), alerts, NOW, stale_after_s=17.5)
    assert verdicts(report) == [K]
    assert report.gpus[0].health.reasons == ("Hot: no data for 1m30s", "Warm (warning)")


def test_a_fresh_critical_outranks_an_unknown_alert() -> None:
    alerts = [
        firing("Hot", Severity.CRITICAL, 0, no_data=90.0),
        firing("Gone", Severity.CRITICAL, 0),
    ]
    assert verdicts(assess(up(1.0), alerts, NOW, stale_after_s=17.5)) == [U]


def test_node_rolls_up_worst_first_with_unknown_between_unhealthy_and_degraded() -> None:
    assert (
        assess(up(1, 1), [firing("W", Severity.WARNING, 0)], NOW, stale_after_s=17.5).node.state
        == D
    )
    assert (
        assess(up(1, 60), [firing("W", Severity.WARNING, 0)], NOW, stale_after_s=17.5).node.state
        == K
    )
    mixed = [firing("W", Severity.WARNING, 0), firing("C", Severity.CRITICAL, 1)]
    assert assess(up(1, 1, 60), mixed, NOW, stale_after_s=17.5).node.state == U


def test_node_level_alerts_count_for_the_node() -> None:
    report = assess(up(1, 1), [firing("NodeHot", Severity.CRITICAL)], NOW, stale_after_s=17.5)
    assert verdicts(report) == [H, H]
    assert report.node.state == U and "NodeHot (critical)" in report.node.reasons


def test_no_gpus_is_unknown() -> None:
    report = assess({}, [], NOW, stale_after_s=17.5)
    assert report.node.state == K and report.gpus == ()


def test_gpus_are_ordered_by_index_and_a_replaced_gpu_reports_its_newest_uuid() -> None:
    data = up(1, 1)
    data[SeriesKey("fleetd_gpu_up", make_labels({"gpu": 10, "uuid": "U10"}))] = Sample(NOW, 1.0)
    data[SeriesKey("fleetd_gpu_up", make_labels({"gpu": 1, "uuid": "NEW"}))] = Sample(NOW, 1.0)
    report = assess(data, [], NOW, stale_after_s=17.5)
    assert [(g.gpu, g.uuid) for g in report.gpus] == [("0", "U0"), ("1", "NEW"), ("10", "U10")]


def test_health_vector_is_a_state_set() -> None:
    report = assess(up(1), [firing("W", Severity.WARNING, 0)], NOW, stale_after_s=17.5)
    vector = health_vector(report)
    assert vector[make_labels({"gpu": 0, "uuid": "U0", "state": "degraded"})] == 1.0
    assert sum(vector.values()) == 1.0 and len(vector) == len(HealthState) == 5


# ------------------------------------------------------------------------- out of service
def hold(gpu: str, reason: ServiceReason = ServiceReason.QUARANTINED) -> dict[str, OutOfService]:
    return {gpu: OutOfService(reason, "run-q", "reset", reason.value, NOW - 60, "budget spent")}


def test_an_out_of_service_gpu_is_never_healthy_and_keeps_the_rules_verdict() -> None:
    alerts = [firing("Broken", Severity.CRITICAL, 1)]
    service = {**hold("0", ServiceReason.DRAINED), **hold("1")}
    report = assess(up(1, 1, 1), alerts, NOW, stale_after_s=17.5, service=service)
    assert verdicts(report) == [X, X, H]
    drained, quarantined = report.gpus[0].health, report.gpus[1].health
    assert drained.rules_state == H and drained.judged == H
    assert drained.out_of_service is not None and drained.out_of_service.run_id == "run-q"
    assert drained.reasons == ("drained by run run-q (reset, drained): budget spent",)
    assert quarantined.judged == U and quarantined.data_age_s == 1
    assert quarantined.reasons[1:] == ("rules say unhealthy", "Broken (critical)")
    assert report.in_service == 1 and report.healthy == 1
    assert service_state(report.gpus[0]) == "drained"
    assert service_state(report.gpus[2]) == "in_service"


def test_a_node_with_gpus_out_rolls_up_below_any_problem_in_service() -> None:
    out = assess(up(1, 1), [], NOW, stale_after_s=17.5, service=hold("0"))
    assert out.node.state == X
    assert out.node.reasons == ("gpu 0: quarantined (run run-q)",)
    warm = [firing("W", Severity.WARNING, 1)]
    assert assess(up(1, 1), warm, NOW, stale_after_s=17.5, service=hold("0")).node.state == D
    assert out.node.rules_state == H and out.node.judged == H
    sick = assess(up(1, 1), warm, NOW, stale_after_s=17.5, service=hold("1"))
    assert sick.node.state == X and sick.node.judged == D
    both = {"0": hold("0")["0"], "1": hold("1", ServiceReason.DRAINED)["1"]}
    mixed = assess(up(1, 1, 1), [firing("B", Severity.CRITICAL, 2)], NOW, stale_after_s=17.5)
    assert with_service(mixed, both).node.reasons == (
        "gpu 2: unhealthy",
        "gpu 0: quarantined (run run-q)",
        "gpu 1: drained (run run-q)",
    )
    stale = assess(up(1, 60), [], NOW, stale_after_s=17.5, service=hold("0"))
    assert stale.node.state == K
    node_alert = [firing("NodeHot", Severity.CRITICAL)]
    every = {**hold("0"), **hold("1")}
    assert assess(up(1, 1), node_alert, NOW, stale_after_s=17.5, service=every).node.state == U


def test_a_newer_service_map_replaces_the_old_one() -> None:
    report = assess(up(1, 1), [firing("W", Severity.WARNING, 1)], NOW, stale_after_s=17.5)
    out = with_service(report, hold("1"))
    assert verdicts(out) == [H, X] and out.node.state == X
    back = with_service(out, {})
    assert verdicts(back) == [H, D] and back.node.state == D
    assert back.gpus[1].health.out_of_service is None
    assert back.gpus[1].health.reasons == ("W (warning)",)


def test_health_vector_and_summary_name_the_gpus_out() -> None:
    report = assess(up(1, 1, 1), [], NOW, stale_after_s=17.5, service=hold("2"))
    vector = health_vector(report)
    assert vector[make_labels({"gpu": 2, "uuid": "U2", "state": "out_of_service"})] == 1.0
    assert vector[make_labels({"gpu": 2, "uuid": "U2", "state": "healthy"})] == 0.0
    assert summary_parts(report) == [
        "2/3 GPUs healthy",
        "2/3 in service",
        "GPU2 quarantined (run run-q)",
    ]
    assert summary_parts(assess(up(1), [], NOW, stale_after_s=17.5)) == ["1/1 GPUs healthy"]
    hive = {str(i): hold("0")["0"] for i in range(8)}
    everything = assess(up(*[1] * 8), [], NOW, stale_after_s=17.5, service=hive)
    assert summary_parts(everything) == [
        "0/8 GPUs healthy",
        "0/8 in service",
        "GPU0-7 quarantined (run run-q)",
    ]
    assert everything.node.reasons == ("gpus 0-7: quarantined (run run-q)",)


# -------------------------------------------------------------- derived from remediation
TRIGGER = m.Trigger(kind="alert", at=NOW - 100, rule="GpuEccUncorrectableError", gpu=3)


def run(
    run_id: str,
    gpus: tuple[int, ...],
    *,
    state: m.RunState = m.RunState.QUIESCING,
    plan: m.Plan = m.Plan.RESET,
    dry_run: bool = False,
    lease_held: bool = False,
    workers: tuple[m.WorkerProgress, ...] = (),
) -> m.Run:
    return m.Run(
        run_id=run_id,
        node="n",
        plan=plan,
        trigger=TRIGGER,
        gpus=tuple(m.UnitGpu(i) for i in gpus),
        workers=workers,
        settings=m.RunSettings(),
        created_at=NOW - 100,
        state=state,
        dry_run=dry_run,
        lease_held=lease_held,
    )


def status(active: tuple[m.Run, ...] = (), held: tuple[HeldGpus, ...] = ()) -> RemediationStatus:
    return RemediationStatus(
        node="n",
        mode="on",
        paused=PauseState(False),
        breaker=BreakerStatus(False),
        lease_scope="node:n",
        gpus_out_of_service=0,
        active=active,
        held=held,
    )


def test_a_real_run_is_out_once_it_holds_its_lease_or_has_a_worker_out() -> None:
    leased = run("r1", (0, 1), lease_held=True)
    out = out_of_service(status(active=(leased,)))
    assert set(out) == {"0", "1"}
    assert out["0"].reason == ServiceReason.REMEDIATING
    assert (out["0"].run_id, out["0"].plan, out["0"].run_state) == ("r1", "reset", "quiescing")
    unrouted = run("r2", (4,), workers=(m.WorkerProgress("w", m.WorkerPhase.UNROUTED),))
    assert set(out_of_service(status(active=(unrouted,)))) == {"4"}


@pytest.mark.parametrize(
    "waiting",
    [
        run("planned", (0,), state=m.RunState.PLANNED),
        run("dry", (0,), lease_held=True, dry_run=True),
        run("serving", (0,), workers=(m.WorkerProgress("w", m.WorkerPhase.SERVING),)),
    ],
    ids=["planned without its lease", "dry run", "workers still serving"],
)
def test_a_run_that_touched_nothing_leaves_its_gpus_in_service(waiting: m.Run) -> None:
    assert out_of_service(status(active=(waiting,))) == {}


def test_holds_say_quarantined_drained_or_held_and_win_over_a_run_under_way() -> None:
    holds = (
        HeldGpus("q", (3,), ("w3",), "quarantined", "verification failed", NOW - 50),
        HeldGpus("d", (5,), ("w5",), "drained", "drained on request", NOW - 40),
        HeldGpus("a", (6,), ("w6",), "aborted", "cancelled by bob", NOW - 30),
    )
    undrain = run("u", (3,), plan=m.Plan.UNDRAIN, state=m.RunState.STARTING, lease_held=True)
    runs = {"q": run("q", (3,)), "d": run("d", (5,), plan=m.Plan.DRAIN), "a": run("a", (6,))}
    out = out_of_service(status(active=(undrain,), held=holds), runs.get)
    assert {k: v.reason for k, v in out.items()} == {
        "3": ServiceReason.QUARANTINED,
        "5": ServiceReason.DRAINED,
        "6": ServiceReason.HELD,
    }
    assert out["3"].run_id == "q" and out["3"].detail == "verification failed"
    assert out["5"].plan == "drain" and out["5"].since == NOW - 40


def test_a_dry_run_hold_is_not_out_of_service() -> None:
    dry = run("q", (3,), dry_run=True)
    held = (HeldGpus("q", (3,), (), "quarantined", "dry", NOW),)
    assert out_of_service(status(held=held), {"q": dry}.get) == {}
    assert set(out_of_service(status(held=held), {"q": replace(dry, dry_run=False)}.get)) == {"3"}


def test_the_service_watch_keeps_its_last_answer_when_remediation_cannot_be_read() -> None:
    answers: list[dict[str, OutOfService] | Exception] = [hold("1"), OSError("disk"), {}]

    def read() -> dict[str, OutOfService]:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    watch = ServiceWatch(read)
    assert watch() == {}  # nothing read yet
    assert set(watch.refresh()) == {"1"} and set(watch()) == {"1"}
    assert set(watch.refresh()) == {"1"}  # the journal could not be read: still out
    assert set(watch()) == {"1"}
    assert watch.refresh() == {} and watch() == {}


def test_a_worker_stopped_on_a_gpu_out_of_service_is_not_a_worker_down() -> None:
    """VllmWorkerDown pages for a worker down on healthy GPUs; remediation's own stop is not."""
    from fleetd.clock import FakeClock
    from fleetd.rules.config import shipped_rules_dir
    from fleetd.rules.engine import EngineSettings, RuleEngine
    from fleetd.rules.loader import load_rule_set
    from fleetd.store.memory import MemoryWindow

    rules = load_rule_set([shipped_rules_dir() / "vllm.yaml"])

    def pending_after_a_minute(service: dict[str, OutOfService]) -> list[str]:
        clock = FakeClock(NOW)
        engine = RuleEngine(rules, EngineSettings(poll_interval_s=5.0))
        engine.service = lambda: service
        window = MemoryWindow(retention=3600)
        names: list[str] = []
        for _ in range(14):
            window.append(
                [
                    Reading(
                        "fleetd_gpu_up", make_labels({"gpu": 0, "uuid": "U0"}), 1.0, clock.now()
                    ),
                    Reading(
                        "fleetd_vllm_up", make_labels({"worker": "w0", "gpu": 0}), 0.0, clock.now()
                    ),
                ]
            )
            names += [t.alert.key.rule for t in engine.evaluate(window, clock.now())]
            clock.advance(5.0)
        return names

    assert "VllmWorkerDown" in pending_after_a_minute({})
    assert pending_after_a_minute(hold("0", ServiceReason.REMEDIATING)) == []
