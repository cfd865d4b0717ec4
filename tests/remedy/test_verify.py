"""Verification reads a Snapshot: missing is never healthy."""

from __future__ import annotations

from dataclasses import replace

from fleetd.model import Alert, AlertKey, AlertState, Reading, Severity, Snapshot, make_labels
from fleetd.remedy import verify

NOW = 1_767_225_600.0


def r(metric: str, gpu: int, value: float | None, **labels: str) -> Reading:
    return Reading(metric, make_labels({"gpu": gpu, "uuid": f"u{gpu}", **labels}), value, NOW)


def healthy(gpu: int, ue: float = 0.0) -> list[Reading]:
    return [
        r(verify.UP, gpu, 1),
        r(verify.PCIE_WIDTH, gpu, 16),
        r(verify.PCIE_MAX_WIDTH, gpu, 16),
        r(verify.PCIE_SPEED, gpu, 32),
        r(verify.PCIE_MAX_SPEED, gpu, 32),
        r(verify.XGMI_UP, gpu, 1, link="0"),
        r(verify.XGMI_UP, gpu, 1, link="1"),
        r(verify.ECC, gpu, ue, type="uncorrectable"),
        r(verify.ECC, gpu, 99, type="correctable"),
    ]


def snap(readings: list[Reading]) -> Snapshot:
    return Snapshot(node="n", ts=NOW, gpus=(), readings=tuple(readings))


def test_healthy_units_pass_and_report_ue_counts() -> None:
    result = verify.assess(snap(healthy(0) + healthy(1, ue=4)), [0, 1])
    assert result.problems == () and result.ue_counts == ((0, 0.0), (1, 4.0))


def test_each_kind_of_problem() -> None:
    readings = healthy(0) + healthy(1) + healthy(2) + healthy(3)
    readings = [x for x in readings if not (x.metric == verify.UP and ("gpu", "3") in x.labels)]
    readings = [
        r(verify.PCIE_WIDTH, 0, 8)
        if x.metric == verify.PCIE_WIDTH and ("gpu", "0") in x.labels
        else x
        for x in readings
    ]
    readings = [
        r(verify.XGMI_UP, 1, 0, link="1")
        if x.metric == verify.XGMI_UP and ("gpu", "1") in x.labels and ("link", "1") in x.labels
        else x
        for x in readings
    ]
    readings = [
        r(verify.PCIE_SPEED, 2, None)
        if x.metric == verify.PCIE_SPEED and ("gpu", "2") in x.labels
        else x
        for x in readings
    ]
    result = verify.assess(snap([*readings, r(verify.UP, 4, 0)]), [0, 1, 2, 3, 4])
    assert result.problems == (
        "GPU 0: PCIe width 8 lanes, below max 16",
        "GPU 1: XGMI link 1 down",
        "GPU 2: PCIe speed missing",
        "GPU 3: not reported",
        "GPU 4: down",
    )


def test_gpus_outside_the_unit_are_ignored_and_absent_links_are_not_checked() -> None:
    readings = [r(verify.UP, 0, 1), r(verify.UP, 1, 0)]
    result = verify.assess(snap(readings), [0])
    assert result.problems == () and result.ue_counts == ()


def test_deferred_errors_count_with_uncorrectable_ones() -> None:
    readings = [*healthy(0, ue=2), r(verify.ECC, 0, 3, type="deferred")]
    assert verify.assess(snap(readings), [0]).ue_counts == ((0, 5.0),)


# ------------------------------------------------------------------ the rules have a say
def alert(
    rule: str, gpu: int, severity: Severity = Severity.CRITICAL, *, clear_since: float | None = None
) -> Alert:
    key = AlertKey(rule, make_labels({"gpu": gpu}))
    labels = make_labels({"gpu": gpu, "alertname": rule, "severity": severity.value})
    return Alert(
        key, AlertState.FIRING, severity, labels, keep_firing_since=clear_since, last_eval_at=NOW
    )


TRIGGER = alert("GpuEccUncorrectableError", 3)


def problems(alerts: list[Alert], *, evaluated_at: float | None = NOW + 10) -> list[str]:
    return verify.alert_problems(
        alerts,
        [0, 1, 2, 3],
        trigger_fingerprint=TRIGGER.key.fingerprint(),
        since=NOW,
        evaluated_at=evaluated_at,
    )


def test_nothing_is_proven_until_the_rules_evaluate_after_the_reset() -> None:
    assert problems([], evaluated_at=None) == problems([], evaluated_at=NOW) != []
    assert problems([]) == []


def test_the_trigger_still_holding_blocks_readmission() -> None:
    found = problems([TRIGGER])
    assert found == ["GPU 3: GpuEccUncorrectableError (the alert that started this run) holds"]


def test_a_trigger_kept_open_by_its_run_but_clear_passes() -> None:
    cleared = replace(TRIGGER, keep_firing_since=NOW + 5)
    assert problems([cleared]) == []


def test_critical_alerts_of_the_unit_block_and_others_do_not() -> None:
    found = problems(
        [
            alert("GpuXgmiLinkDown", 1),
            alert("GpuThermalThrottling", 2, Severity.WARNING),
            alert("GpuXgmiLinkDown", 7),  # not in the unit
            alert("GpuMissing", 0, clear_since=NOW + 1),  # seen clear after the reset
        ]
    )
    assert found == ["GPU 1: GpuXgmiLinkDown (critical) holds"]


def test_a_warning_trigger_blocks_too() -> None:
    trigger = alert("GpuPcieReplayRate", 2, Severity.WARNING)
    found = verify.alert_problems(
        [trigger],
        [2],
        trigger_fingerprint=trigger.key.fingerprint(),
        since=NOW,
        evaluated_at=NOW + 1,
    )
    assert found == ["GPU 2: GpuPcieReplayRate (the alert that started this run) holds"]


def test_an_alert_on_the_uncorrectable_counts_is_judged_by_the_counts_the_poll_read() -> None:
    """GpuEccUncorrectableError's ``increase(…[10m])`` still sees the pre-reset fault for ten
    minutes when the driver keeps its counts: the counts read on the poll, compared with the
    pre-reset baseline, judge it instead (the machine's ``new_errors``). Without a count read
    for that GPU, or on another kind of alert, the rules keep their say."""

    def counting(rule: str, gpu: int, kind: str) -> Alert:
        key = AlertKey(rule, make_labels({"gpu": gpu, "type": kind}))
        labels = make_labels({"gpu": gpu, "type": kind, "severity": "critical"})
        return Alert(key, AlertState.FIRING, Severity.CRITICAL, labels, last_eval_at=NOW)

    trigger = counting("GpuEccUncorrectableError", 3, "uncorrectable")
    deferred = counting("GpuEccUncorrectableError", 1, "deferred")
    link = alert("GpuXgmiLinkDown", 1)

    def found(counted: list[int]) -> list[str]:
        return verify.alert_problems(
            [trigger, deferred, link],
            [0, 1, 2, 3],
            trigger_fingerprint=trigger.key.fingerprint(),
            since=NOW,
            evaluated_at=NOW + 10,
            counted=counted,
        )

    assert found([0, 1, 2, 3]) == ["GPU 1: GpuXgmiLinkDown (critical) holds"]
    assert found([0, 1, 2]) == [
        "GPU 3: GpuEccUncorrectableError (the alert that started this run) holds",
        "GPU 1: GpuXgmiLinkDown (critical) holds",
    ]
    # GPU 3's count was read after the reset but not before it (the sick GPU's read failed):
    # 6 could be 5 kept and 1 new, so the counts do not judge it and its alert still holds
    read_now = ((0, 0.0), (1, 2.0), (2, 0.0), (3, 6.0))
    read_before = ((0, 0.0), (1, 2.0), (2, 0.0))
    counted = verify.judged_by_counts(read_now, read_before)
    assert counted == {0, 1, 2}
    assert found(sorted(counted))[0].startswith("GPU 3: GpuEccUncorrectableError")
