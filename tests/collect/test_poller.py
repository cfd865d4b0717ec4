"""The poller on the simulated node: hung calls, GPUs off the bus, failing collectors."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from fleetd.clock import FakeClock
from fleetd.collect.catalog import CATALOG
from fleetd.collect.poller import Poller
from fleetd.collect.source import GpuSource, ReadError
from fleetd.model import Reading

from .conftest import by_key, find, gpu_of, make_rig

HUNG = 2
NOT_FROM_GPU = ("fleetd_gpu_up", "fleetd_gpu_readings_missing", "fleetd_gpu_info")


def test_every_gpu_reports_every_catalogued_reading(rig):
    rig.poll()
    snapshot = rig.poll()  # the second poll: throttle ratios need a previous sample
    assert [s.gpu.index for s in snapshot.gpus] == list(range(8))
    assert all(s.present and s.responsive and s.error is None for s in snapshot.gpus)
    assert {r.metric for r in snapshot.readings} <= CATALOG.keys()
    for reading in snapshot.readings:
        spec = CATALOG[reading.metric]
        assert {k for k, _ in reading.labels} == set(spec.labels), reading
        assert reading.ts == snapshot.ts
    assert all(c.success for c in snapshot.collectors)
    # MI355X exposes everything fleetd reads except average power (N/A on MI3xx)
    missing = {(r.metric, r.reason) for r in snapshot.readings if r.value is None}
    assert missing == {("fleetd_gpu_power_average_watts", "na")}


def test_mi300x_has_no_edge_sensor_reported_missing_not_zero(clock: FakeClock):
    rig = make_rig(clock, model="MI300X")
    try:
        snapshot = rig.poll()
    finally:
        rig.close()
    edge = find(snapshot, "fleetd_gpu_temperature_celsius", 0, sensor="edge")
    assert edge.value is None and edge.reason == "not_supported"
    limit = find(
        snapshot, "fleetd_gpu_temperature_limit_celsius", 0, sensor="edge", limit="critical"
    )
    assert limit.value is None
    assert find(snapshot, "fleetd_gpu_temperature_celsius", 0, sensor="hotspot").value > 0
    assert find(snapshot, "fleetd_gpu_power_cap_watts", 0).value == 750
    status = find(snapshot, "fleetd_gpu_readings_missing", 0, collector="temperature")
    assert status.value == 3


def test_hung_call_does_not_delay_other_gpus_beyond_the_timeout(clock: FakeClock):
    # the collectors before the hung call must finish inside the timeout, and no healthy
    # GPU's job may stall for the hand-off time, even on a loaded CI box
    timeout = 2.0
    rig = make_rig(clock, gpu_timeout=timeout, hand_off_after=timeout / 4)
    try:
        healthy = rig.poll()
        rig.node.inject(HUNG, "hung_call", function="amdsmi_get_pcie_info")
        threads_before = set(threading.enumerate())

        started = time.monotonic()
        hung = rig.poll()
        elapsed = time.monotonic() - started
        assert elapsed < timeout + 1.0

        status = hung.gpus[HUNG]
        assert status.present and not status.responsive
        assert "amdsmi" not in (status.error or "") and "pcie" in (status.error or "")
        assert find(hung, "fleetd_gpu_up", HUNG).value == 0
        # collectors before the hung call kept their readings; the rest are missing: timeout
        assert find(hung, "fleetd_gpu_temperature_celsius", HUNG, sensor="hotspot").value
        for metric, labels in (
            ("fleetd_gpu_pcie_link_width_lanes", {}),
            ("fleetd_gpu_xgmi_links", {"state": "up"}),
        ):
            reading = find(hung, metric, HUNG, **labels)
            assert reading.value is None and reading.reason == "timeout"
        pcie = next(c for c in hung.collectors if c.name == "pcie")
        assert not pcie.success and "timeout" in (pcie.error or "")
        assert next(c for c in hung.collectors if c.name == "xgmi").success
        # the hung GPU keeps every series it had, and the other GPUs are complete
        assert by_key(hung).keys() == by_key(healthy).keys()
        for reading in hung.readings:
            if gpu_of((reading.metric, reading.labels)) != HUNG:
                assert reading.value is not None or reading.metric.endswith("average_watts")

        # the GPUs after the hung one went to one more worker; the hung one keeps its own
        added = set(threading.enumerate()) - threads_before
        assert len(added) <= 1, sorted(t.name for t in added)
        threads_before = set(threading.enumerate())
        # while the call still hangs, the GPU is not polled again: no pile-up of threads
        for _ in range(3):
            again = rig.poll()
            assert not again.gpus[HUNG].responsive
            assert "still running" in (again.gpus[HUNG].error or "")
            temp = find(again, "fleetd_gpu_temperature_celsius", HUNG, sensor="hotspot")
            assert temp.value is None and temp.reason == "timeout"
            assert all(s.responsive for s in again.gpus if s.gpu.index != HUNG)
        assert set(threading.enumerate()) - threads_before == set()  # no new threads

        recovered = rig.recover()  # the stuck worker finishes its old job
        assert recovered.gpus[HUNG].responsive
        assert find(recovered, "fleetd_gpu_pcie_link_width_lanes", HUNG).value == 16
    finally:
        rig.close()


def poll_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.startswith("fleetd-poll-")}


def test_one_worker_thread_polls_every_gpu_in_turn_when_none_stalls(clock: FakeClock):
    # a hand-off only after a stall of a quarter of the timeout: none here
    rig = make_rig(clock, gpu_timeout=60.0, hand_off_after=60.0)
    try:
        before = poll_threads()
        for _ in range(3):
            snapshot = rig.poll()
            assert all(status.responsive for status in snapshot.gpus)
        assert len(poll_threads() - before) == 1  # one for all 8 GPUs, reused by each poll
    finally:
        rig.close()


def test_gpus_whose_turn_never_came_are_missing_with_timeout_and_say_why(clock: FakeClock):
    # hand-offs every 0.5 s within a 2 s timeout: at most 4 workers, all stuck on GPUs 0-3,
    # so GPUs 5-7 (after the hung GPU 4) never get a turn in this poll (a 0.4 s timeout let a
    # slow CI box leave the healthy poll's jobs running into the next poll)
    rig = make_rig(clock, gpu_timeout=2.0, hand_off_after=0.5)
    try:
        healthy = rig.poll()
        assert all(status.responsive for status in healthy.gpus), healthy.gpus
        hung = range(5)
        for gpu in hung:
            rig.node.inject(gpu, "hung_call", function="amdsmi_get_temp_metric")
        before = poll_threads()
        snapshot = rig.poll()
        assert len(poll_threads() - before) <= 3  # the first worker, then hand-offs
        for status in snapshot.gpus:
            assert not status.responsive
            if status.gpu.index in (5, 6, 7):
                assert status.error == "timeout after 2.0s waiting for its turn"
                assert find(snapshot, "fleetd_gpu_up", status.gpu.index).value == 0
        stuck = {s.gpu.index for s in snapshot.gpus if "temperature" in (s.error or "")}
        assert stuck <= {0, 1, 2, 3}
        for reading in snapshot.readings:  # every series still there; none made up
            gpu = gpu_of((reading.metric, reading.labels))
            if gpu in (5, 6, 7) and reading.metric not in NOT_FROM_GPU:
                assert reading.value is None and reading.reason == "timeout"
        assert by_key(snapshot).keys() == by_key(healthy).keys()

        # the stuck workers return, and go back to the pool
        assert all(status.responsive for status in rig.recover().gpus)
    finally:
        rig.close()


def test_gpu_off_the_bus_stays_in_the_snapshot_as_missing(clock: FakeClock, tmp_path: Path):
    rig = make_rig(clock, sysfs=tmp_path)
    try:
        before = rig.poll()
        rig.node.inject(5, "gpu_off_bus")
        assert not (tmp_path / "sys/bus/pci/devices" / before.gpus[5].gpu.bdf).exists()
        during = rig.poll()  # its PCI device left sysfs: missing from this poll on
        status = during.gpus[5]
        assert status.gpu.index == 5 and not status.present and not status.responsive
        assert find(during, "fleetd_gpu_up", 5).value == 0
        assert by_key(during).keys() == by_key(before).keys()  # nothing silently dropped
        for reading in during.readings:
            k = (reading.metric, reading.labels)
            if gpu_of(k) == 5 and reading.metric not in NOT_FROM_GPU:
                assert reading.value is None and reading.reason == "gpu_missing", k

        after = rig.poll()
        assert not after.gpus[5].present
        assert find(after, "fleetd_gpu_info", 5).value == 1  # still identifiable
        assert find(after, "fleetd_gpu_info", 5).labels == find(before, "fleetd_gpu_info", 5).labels
        assert find(after, "fleetd_gpu_power_watts", 5).reason == "gpu_missing"
        assert find(after, "fleetd_gpu_readings_missing", 5, collector="pcie").value == 9
        assert all(s.present and s.responsive for s in after.gpus if s.gpu.index != 5)

        assert [g.index for g in rig.backend.rediscover()] == list(range(8))  # still known
        assert not rig.backend.present(5)
        assert not rig.poll().gpus[5].present

        rig.node.clear_faults(gpu=5)
        identities = rig.backend.rediscover()
        assert identities[5] == before.gpus[5].gpu  # same index, same BDF, same identity
        back = rig.poll()
        assert back.gpus[5].present and back.gpus[5].responsive
        assert find(back, "fleetd_gpu_power_watts", 5).value > 0
    finally:
        rig.close()


def test_without_sysfs_a_gpu_off_the_bus_is_found_by_the_next_enumeration(rig):
    """Real amdsmi answers the old handle NOT_SUPPORTED (sysfs ENOENT) and DRM_ERROR, never
    NOT_FOUND: the poll alone cannot tell, a fresh enumeration (the daemon's periodic
    rediscovery) can."""
    rig.poll()
    rig.node.inject(5, "gpu_off_bus")
    during = rig.poll()
    assert during.gpus[5].present  # not NOT_FOUND: nothing says "gone" yet
    assert find(during, "fleetd_gpu_power_watts", 5).reason == "not_supported"
    assert [g.index for g in rig.backend.rediscover()] == list(range(8))
    assert not rig.backend.present(5)
    after = rig.poll()
    assert not after.gpus[5].present and find(after, "fleetd_gpu_up", 5).value == 0


def test_a_drm_error_on_the_old_handle_checks_the_bus_and_asks_for_rediscovery(
    clock: FakeClock, tmp_path: Path
):
    rig = make_rig(clock, sysfs=tmp_path)
    try:
        rig.poll()
        gpu = rig.backend.sources()[2]
        assert not rig.backend.rediscovery_wanted
        rig.node.inject(2, "gpu_off_bus")
        with pytest.raises(ReadError) as err:
            gpu.process_list()  # through the DRM render node
        assert err.value.reason == "drm_error"
        assert rig.backend.rediscovery_wanted and not gpu.present
        rig.backend.rediscover()
        assert not rig.backend.rediscovery_wanted
    finally:
        rig.close()


class Exploding:
    name = "exploding"

    def collect(self, gpu: GpuSource, now: float) -> list[Reading]:
        if gpu.identity.index == 1:
            raise RuntimeError("collector bug")
        return [Reading("fleetd_gpu_processes", gpu.identity.labels, 0.0, now)]


def test_a_failing_collector_fails_alone(rig):
    from fleetd.collect.collectors import PowerCollector

    poller = Poller(
        rig.backend,
        [Exploding(), PowerCollector()],
        node="n",
        gpu_timeout=5.0,
        timer=rig.clock.monotonic,
    )
    try:
        snapshot = poller.poll(rig.clock.now())
    finally:
        poller.close()
    results = {c.name: c for c in snapshot.collectors}
    assert not results["exploding"].success
    assert "RuntimeError: collector bug" in (results["exploding"].error or "")
    assert results["power"].success
    assert all(find(snapshot, "fleetd_gpu_power_watts", g).value for g in range(8))
    assert all(s.responsive for s in snapshot.gpus)


def test_poller_rejects_bad_arguments(rig):
    with pytest.raises(ValueError):
        Poller(rig.backend, [], node="n", gpu_timeout=0)
    with pytest.raises(ValueError):
        Poller(rig.backend, [Exploding(), Exploding()], node="n", gpu_timeout=1)


def test_processes_are_read_on_a_slow_cadence(clock: FakeClock):
    rig = make_rig(clock, processes_interval=30.0)
    try:
        first = rig.poll()
        assert find(first, "fleetd_gpu_processes", 0).value == 0
        rig.node.add_process(0, pid=4242, name="vllm", vram_bytes=200 << 30)
        cached = rig.poll(10.0)
        assert find(cached, "fleetd_gpu_processes", 0).value == 0  # not yet re-read
        assert find(cached, "fleetd_gpu_processes", 0).ts == cached.ts
        fresh = rig.poll(25.0)
        assert find(fresh, "fleetd_gpu_processes", 0).value == 1
        assert find(fresh, "fleetd_gpu_process_memory_bytes", 0).value > 0
        assert find(fresh, "fleetd_gpu_processes", 1).value == 0
    finally:
        rig.close()


def test_xgmi_series_go_missing_by_their_own_index_when_a_call_fails(rig):
    healthy = rig.poll()
    ports = {
        dict(r.labels)["link"]
        for r in healthy.readings
        if r.metric == "fleetd_gpu_xgmi_link_up" and ("gpu", "2") in r.labels
    }
    assert ports == {str(p) for p in range(8) if p != 2}  # per port: its own has no link
    rig.node.inject(
        2,
        "unsupported_fields",
        calls=["amdsmi_get_gpu_xgmi_link_status", "amdsmi_get_link_metrics"],
        status="IO",
    )
    failed = rig.poll()
    assert by_key(failed).keys() == by_key(healthy).keys()  # nothing silently dropped
    for reading in failed.readings:
        if ("gpu", "2") in reading.labels and reading.metric.startswith("fleetd_gpu_xgmi_"):
            assert reading.value is None and reading.reason == "io_error", reading
