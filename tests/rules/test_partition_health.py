"""Health on a partitioned node: partition 0 carries the physical GPU's board-level data, so
its fault makes every partition of that GPU unhealthy; the roll-up goes partition → physical
GPU → node."""

from __future__ import annotations

from fleetd.model import (
    Alert,
    AlertKey,
    AlertState,
    HealthState,
    Sample,
    SeriesKey,
    Severity,
    make_labels,
)
from fleetd.rules.health import assess, physical_gpus, physical_of
from fleetd.rules.state import AlertEntry

NOW = 1_767_225_600.0
H, D, U, K = HealthState.HEALTHY, HealthState.DEGRADED, HealthState.UNHEALTHY, HealthState.UNKNOWN


def info(gpus: int, per_gpu: int) -> list[SeriesKey]:
    """``fleetd_gpu_info`` of ``gpus`` physical GPUs with ``per_gpu`` partitions each."""
    out = []
    for physical in range(gpus):
        for part in range(per_gpu):
            labels = {
                "gpu": physical * per_gpu + part,
                "bdf": f"0000:{0x10 * (physical + 1):02x}:00.{part}",
                "serial": f"SN{physical}",
            }
            if per_gpu > 1:
                labels["gpu_partition_id"] = part
            out.append(SeriesKey("fleetd_gpu_info", make_labels(labels)))
    return out


def up(count: int, stale: frozenset[int] = frozenset()) -> dict[SeriesKey, Sample | None]:
    return {
        SeriesKey("fleetd_gpu_up", make_labels({"gpu": g, "uuid": f"U{g}"})): Sample(
            NOW - (100.0 if g in stale else 1.0), 1.0
        )
        for g in range(count)
    }


def firing(rule: str, severity: Severity, gpu: int) -> AlertEntry:
    labels = make_labels({"gpu": gpu, "uuid": f"U{gpu}"})
    return AlertEntry(Alert(AlertKey(rule, labels), AlertState.FIRING, severity, labels), None)


def test_physical_of_maps_each_secondary_partition_to_its_partition_0() -> None:
    found = physical_of(info(2, 4))
    assert found == {"1": "0", "2": "0", "3": "0", "5": "4", "6": "4", "7": "4"}
    assert physical_of(info(8, 1)) == {}  # unpartitioned: every GPU its own physical GPU


def test_a_board_fault_on_partition_0_makes_every_partition_of_its_gpu_unhealthy() -> None:
    alerts = [firing("GpuEccUncorrectableError", Severity.CRITICAL, 4)]
    report = assess(up(8), alerts, NOW, stale_after_s=17.5, physical=physical_of(info(2, 4)))
    assert [g.health.state for g in report.gpus] == [H, H, H, H, U, U, U, U]
    assert report.gpus[6].health.reasons == (
        "physical GPU (partition 0, gpu 4): GpuEccUncorrectableError (critical)",
    )
    assert report.gpus[6].physical == "4" and report.gpus[4].physical is None
    assert report.node.state == U
    rolled = physical_gpus(report)
    assert [(p.gpu, p.partitions, p.health.state) for p in rolled] == [
        ("0", ("0", "1", "2", "3"), H),
        ("4", ("4", "5", "6", "7"), U),
    ]
    assert rolled[1].health.reasons == ("partition gpu 4: GpuEccUncorrectableError (critical)",)


def test_a_partition_s_own_problem_rolls_up_but_does_not_spread_to_its_siblings() -> None:
    alerts = [firing("Slow", Severity.WARNING, 2)]
    report = assess(up(8), alerts, NOW, stale_after_s=17.5, physical=physical_of(info(2, 4)))
    assert [g.health.state for g in report.gpus] == [H, H, D, H, H, H, H, H]
    first, second = physical_gpus(report)
    assert first.health.state == D and first.health.reasons == ("partition gpu 2: Slow (warning)",)
    assert second.health.state == H
    assert report.node.state == D


def test_stale_board_data_leaves_every_partition_unknown() -> None:
    report = assess(
        up(4, stale=frozenset({0})), [], NOW, stale_after_s=17.5, physical=physical_of(info(1, 4))
    )
    assert [g.health.state for g in report.gpus] == [K, K, K, K]
    assert report.gpus[3].health.reasons[0].startswith("physical GPU (partition 0, gpu 0): no")
