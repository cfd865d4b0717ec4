"""A CPX node polled: 64 logical devices, board readings once per physical GPU (partition 0)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from fleetd.clock import FakeClock
from fleetd.collect.amdsmi_backend import AmdSmiBackend
from fleetd.model import Snapshot
from fleetd.sim import SimulatedAmdSmi, build_node

from .conftest import find, make_rig

BOARD_METRICS = {
    "fleetd_gpu_power_watts",
    "fleetd_gpu_temperature_celsius",
    "fleetd_gpu_pcie_link_width_lanes",
    "fleetd_gpu_ecc_errors_total",
}


def _metrics_of(snapshot: Snapshot, gpu: int) -> set[str]:
    return {r.metric for r in snapshot.readings if dict(r.labels).get("gpu") == str(gpu)}


@pytest.mark.parametrize("metrics_table", [False, True])
def test_a_cpx_node_reads_board_data_once_per_physical_gpu(
    clock: FakeClock, tmp_path: Path, metrics_table: bool
) -> None:
    rig = make_rig(
        clock, model="MI300X", compute_partition="CPX", sysfs=tmp_path, metrics_table=metrics_table
    )
    try:
        rig.poll()
        snap = rig.poll()
        gpus = rig.backend.gpus()
        assert len(gpus) == 64
        primaries = [g for g in gpus if g.primary]
        assert len(primaries) == 8
        assert len({g.serial for g in gpus}) == 8
        spx = make_rig(FakeClock(), model="MI300X", metrics_table=metrics_table)
        try:
            spx.poll()
            spx_missing = spx.poll().gpus[0].missing_readings  # MI300X lacks e.g. an edge sensor
        finally:
            spx.close()
        for status in snap.gpus:
            assert status.responsive, status
            expected = spx_missing if status.gpu.primary else 0
            assert status.missing_readings == expected, status
        for g in gpus:
            have = _metrics_of(snap, g.index)
            assert "fleetd_gpu_utilization_ratio" in have  # per partition
            if g.primary:
                assert BOARD_METRICS & have == BOARD_METRICS
            else:
                assert BOARD_METRICS & have == set()  # not applicable: absent, not missing
        second = next(r for r in snap.readings if dict(r.labels).get("gpu") == "1")
        labels = dict(second.labels)
        assert labels["gpu_partition_id"] == "1"
        assert labels["gpu_compute_partition_type"] == "CPX"
        assert labels["gpu_memory_partition_type"] == "NPS1"
    finally:
        rig.close()


def test_an_spx_node_carries_no_partition_labels(clock: FakeClock) -> None:
    rig = make_rig(clock, model="MI300X")
    try:
        snap = rig.poll()
        assert len(rig.backend.gpus()) == 8
        assert all("gpu_partition_id" not in dict(r.labels) for r in snap.readings)
    finally:
        rig.close()


def test_a_reset_of_a_secondary_partition_goes_through_partition_0(clock: FakeClock) -> None:
    rig = make_rig(clock, model="MI300X", compute_partition="DPX")
    try:
        rig.poll()
        rig.backend.reset_gpu(5)  # GPU 2's partition 1
        (record,) = rig.node.resets
        assert record.initiator == 2
    finally:
        rig.close()


def test_secondaries_publish_no_self_metrics_for_collectors_that_do_not_apply(
    clock: FakeClock,
) -> None:
    rig = make_rig(clock, model="MI300X", compute_partition="QPX")
    try:
        snap = rig.poll()

        def collectors_of(gpu: int) -> set[str]:
            return {
                dict(r.labels)["collector"]
                for r in snap.readings
                if r.metric == "fleetd_gpu_readings_missing" and dict(r.labels)["gpu"] == str(gpu)
            }

        board = {"temperature", "power", "ecc", "pcie", "xgmi", "throttle"}
        assert board <= collectors_of(0)  # partition 0 of physical GPU 0
        assert collectors_of(1) == {"identity", "usage", "processes"}
        # the node-wide self-metric of a board-level collector counts partition 0s only
        assert all(c.success for c in snap.collectors), snap.collectors
    finally:
        rig.close()


def test_a_hung_call_holds_its_physical_gpu_s_partitions_and_no_other(clock: FakeClock) -> None:
    """The partitions of a physical GPU share one job: a call hung on partition 0 leaves
    its siblings unpolled (timeout), every other GPU's partitions are complete (one more
    worker takes them), and no thread is started while it hangs."""
    # no healthy GPU's job may stall for the hand-off time, even on a loaded CI box (with
    # the default 0.1 s, one did, and a correct second worker failed the thread count)
    timeout = 2.0
    rig = make_rig(
        clock,
        model="MI300X",
        compute_partition="CPX",
        gpu_timeout=timeout,
        hand_off_after=timeout / 4,
    )
    try:
        rig.poll()
        rig.node.inject(3, "hung_call", function="amdsmi_get_gpu_activity")
        threads_before = set(threading.enumerate())
        started = time.monotonic()
        hung = rig.poll()
        assert time.monotonic() - started < timeout + 1.0
        held = set(range(24, 32))  # physical GPU 3's eight partitions
        for status in hung.gpus:
            assert status.responsive is (status.gpu.index not in held), status
        assert "usage" in (hung.gpus[24].error or "")
        assert "on 0000:" in (hung.gpus[25].error or "")  # held by a sibling's call
        # partition 0's collectors before the hung one kept their readings
        assert find(hung, "fleetd_gpu_power_watts", 24).value is not None
        assert find(hung, "fleetd_gpu_utilization_ratio", 25, engine="gfx").reason == "timeout"
        added = set(threading.enumerate()) - threads_before
        assert len(added) <= 1, sorted(t.name for t in added)  # the hand-off's worker
        threads_before = set(threading.enumerate())
        again = rig.poll()
        assert all("still running" in (again.gpus[i].error or "") for i in held)
        added = set(threading.enumerate()) - threads_before
        assert added == set(), sorted(t.name for t in added)
        assert all(s.responsive for s in rig.recover().gpus)
    finally:
        rig.close()


def _backend(
    clock: FakeClock, compute: str, *, partition_unread: int | None = None
) -> AmdSmiBackend:
    """An MI300X node whose GPUs are in no XGMI hive (as PCIe cards are), optionally with the
    partition-mode calls of one physical GPU answering NOT_SUPPORTED."""
    node = build_node("MI300X", seed=7, clock=clock, compute_partition=compute)
    for gpu in range(8):
        node.inject(gpu, "unsupported_fields", fields=["amdsmi_get_xgmi_info.xgmi_hive_id"])
    if partition_unread is not None:
        node.inject(
            partition_unread,
            "unsupported_fields",
            calls=["amdsmi_get_gpu_compute_partition", "amdsmi_get_gpu_memory_partition"],
        )
    return AmdSmiBackend(SimulatedAmdSmi(node))


def test_without_a_hive_the_reset_unit_is_the_physical_gpu_with_all_its_partitions(
    clock: FakeClock,
) -> None:
    backend = _backend(clock, "CPX")
    try:
        assert all(g.hive_id is None for g in backend.gpus())
        assert backend.reset_unit(26) == list(range(24, 32))  # physical GPU 3's partitions
        assert backend.reset_unit_note(26) is None
    finally:
        backend.close()


def test_an_unreadable_partition_mode_makes_the_reset_unit_the_whole_node(
    clock: FakeClock,
) -> None:
    """Physical GPU 3's eight devices look unpartitioned, but share a serial and a PCI device:
    they may be partitions, so the unit fails safe to the whole node."""
    backend = _backend(clock, "CPX", partition_unread=3)
    try:
        unread = [g for g in backend.gpus() if g.compute_partition is None]
        assert [g.index for g in unread] == list(range(24, 32))
        assert backend.reset_unit(26) == list(range(64))
        assert backend.reset_unit(0) == list(range(64))
        note = backend.reset_unit_note(26) or ""
        assert "partition mode unreadable for GPU 24, 25" in note and "whole node" in note
    finally:
        backend.close()


def test_an_unreadable_partition_mode_on_a_gpu_alone_on_its_pci_device_is_its_own_unit(
    clock: FakeClock,
) -> None:
    """Topology proves it: nothing else has its serial or its PCI device."""
    backend = _backend(clock, "SPX", partition_unread=2)
    try:
        assert backend.gpus()[2].compute_partition is None
        assert backend.reset_unit(2) == [2]
        assert backend.reset_unit_note(2) is None
    finally:
        backend.close()


def test_a_physical_gpu_off_the_bus_takes_all_its_partitions_with_it(
    clock: FakeClock, tmp_path: Path
) -> None:
    rig = make_rig(clock, model="MI300X", compute_partition="QPX", sysfs=tmp_path)
    try:
        rig.poll()
        rig.node.inject(2, "gpu_off_bus")
        snap = rig.poll()
        gone = {s.gpu.index for s in snap.gpus if not s.present}
        assert gone == set(range(8, 12)), gone  # physical GPU 2's four partitions
        assert find(snap, "fleetd_gpu_utilization_ratio", 9, engine="gfx").reason == "gpu_missing"
    finally:
        rig.close()
