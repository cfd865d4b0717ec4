"""AmdSmiBackend on the simulator: identity, the reset unit, resets, processes, rediscovery."""

from __future__ import annotations

import ctypes
import json
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from fleetd.clock import FakeClock
from fleetd.collect.amdsmi_backend import AmdSmiBackend, GpuProcess, status_reason
from fleetd.collect.source import ReadError
from fleetd.errors import BackendError
from fleetd.sim import SimulatedAmdSmi, build_node

from .conftest import find, make_rig


def test_identity_is_read_and_normalised(rig):
    gpus = rig.backend.gpus()
    assert [g.index for g in gpus] == list(range(8))
    assert len({g.bdf for g in gpus}) == len({g.uuid for g in gpus}) == 8
    for gpu in gpus:
        assert gpu.model == "MI355X"
        assert gpu.product and "MI355X" in gpu.product
        assert gpu.serial and gpu.vbios and gpu.driver_version
        assert gpu.hip_id == gpu.index and gpu.kfd_id is not None
        assert gpu.hive_id is not None and gpu.hive_id.startswith("0x")
        assert gpu.bdf == gpu.bdf.lower() and len(gpu.bdf.split(":")) == 3
    assert len({g.hive_id for g in gpus}) == 1


def test_mi300x_model_is_normalised(clock: FakeClock):
    node = build_node("MI300X", seed=3, clock=clock)
    backend = AmdSmiBackend(SimulatedAmdSmi(node))
    try:
        assert {g.model for g in backend.gpus()} == {"MI300X"}
    finally:
        backend.close()


def test_handles_are_never_used_as_keys(rig):
    handles = [gpu.handle for gpu in rig.backend.sources()]
    assert all(isinstance(h, ctypes.c_void_p) for h in handles)
    with pytest.raises(TypeError):
        hash(handles[0])  # unhashable, as in the real wrapper: the backend keys by BDF


def test_reset_unit_is_the_whole_hive(rig):
    for index in range(8):
        assert rig.backend.reset_unit(index) == list(range(8))
    with pytest.raises(BackendError, match="no GPU with index 9"):
        rig.backend.reset_unit(9)


def test_reset_then_rediscover_clears_counters_and_keeps_indices(rig):
    rig.node.inject(3, "ecc_uncorrectable")
    rig.node.inject(6, "pcie_replay_storm")
    before = rig.poll()
    assert find(before, "fleetd_gpu_ecc_errors_total", 3, type="uncorrectable").value == 1
    assert find(before, "fleetd_gpu_retired_pages", 3, status="pending").value == 1
    assert find(before, "fleetd_gpu_pcie_replays_total", 6).value > 0
    identities = rig.backend.gpus()

    rig.backend.reset_gpu(3)
    assert rig.node.reset_count() == 1  # one reset for the whole hive
    assert rig.backend.rediscover() == identities

    after = rig.poll()
    assert all(s.present and s.responsive for s in after.gpus)
    assert find(after, "fleetd_gpu_ecc_errors_total", 3, type="uncorrectable").value == 0
    assert find(after, "fleetd_gpu_retired_pages", 3, status="pending").value == 0
    assert find(after, "fleetd_gpu_retired_pages", 3, status="reserved").value == 1
    assert find(after, "fleetd_gpu_pcie_replays_total", 6).value == 0
    # throttle state starts over after rediscovery: no ratio across a reset
    ratio = find(after, "fleetd_gpu_throttle_ratio", 3, reason="ppt")
    assert ratio.value is None and ratio.reason == "no_previous_sample"


def test_reset_without_root_raises_a_clear_error(clock: FakeClock):
    rig = make_rig(clock, root=False)
    try:
        with pytest.raises(
            BackendError, match=r"reset of GPU 2 \(0000:[0-9a-f:.]+\) failed: no_perm"
        ):
            rig.backend.reset_gpu(2)
        assert rig.node.reset_count() == 0
    finally:
        rig.close()


def test_reset_of_a_missing_gpu_is_refused(rig):
    rig.node.inject(4, "gpu_off_bus")
    rig.backend.rediscover()
    with pytest.raises(BackendError, match="missing"):
        rig.backend.reset_gpu(4)
    assert rig.node.reset_count() == 0


def test_processes_and_compute_processes(rig):
    rig.node.add_process(0, pid=4242, name="vllm", vram_bytes=100 << 30)
    rig.node.add_process(1, pid=4242, name="vllm", vram_bytes=100 << 30)
    rig.node.add_process(5, pid=777, name="python3", vram_bytes=1 << 30)
    assert rig.backend.processes(0) == [GpuProcess(pid=4242, name="vllm", memory_bytes=100 << 30)]
    assert [p.pid for p in rig.backend.processes(5)] == [777]
    assert rig.backend.processes(3) == []
    assert rig.backend.compute_processes() == [777, 4242]


def test_processes_failure_raises(rig):
    rig.node.inject(
        2, "unsupported_fields", calls=["amdsmi_get_gpu_process_list"], status="NO_PERM"
    )
    with pytest.raises(BackendError, match=r"cannot list processes on GPU 2.*no_perm"):
        rig.backend.processes(2)


def test_raw_calls_turn_failures_into_read_errors(rig):
    gpu = rig.backend.sources()[1]
    rig.node.inject(1, "unsupported_fields", calls=["amdsmi_get_power_info"], status="BUSY")
    with pytest.raises(ReadError) as info:
        gpu.power_info()
    assert info.value.reason == "busy"
    with pytest.raises(ReadError) as info:
        gpu.temp_metric("HOTSPOT", "NO_SUCH_METRIC")
    assert info.value.reason == "error"


def test_static_values_are_cached_until_rediscovery(rig):
    gpu = rig.backend.sources()[0]
    calls = []

    def read() -> int:
        calls.append(1)
        return 42

    assert gpu.static("x", read) == 42
    assert gpu.static("x", read) == 42
    assert len(calls) == 1
    rig.backend.rediscover()
    assert gpu.static("x", read) == 42
    assert len(calls) == 2


def test_status_reasons():
    assert status_reason(2) == "not_supported"
    assert status_reason(10) == "no_perm"
    assert status_reason(30) == "busy"
    assert status_reason(8) == "library_timeout"
    assert status_reason(999) == "status_999"
    assert status_reason(None) == "error"


def test_close_is_idempotent_and_marks_gpus_gone(clock: FakeClock):
    rig = make_rig(clock)
    rig.backend.close()
    rig.backend.close()
    assert not any(rig.backend.present(i) for i in range(8))
    rig.poller.close()


def test_a_damaged_port_baseline_file_is_reported_and_learned_afresh(
    clock: FakeClock, tmp_path: Path
) -> None:
    """A baseline file that cannot be used (a disk error, a half-restored backup) is said in
    the journal, never a crash; the ports are learned again and the file rewritten whole."""
    path = tmp_path / "port-baselines.json"
    path.write_text('{"0000:05:00.0": {"serial": ', encoding="utf-8")
    node = build_node("MI300X", seed=1, clock=clock)
    with capture_logs() as logs:
        backend = AmdSmiBackend(SimulatedAmdSmi(node), baseline_path=path)
    try:
        warned = [e for e in logs if e["event"] == "port_baseline_unreadable"]
        assert len(warned) == 1 and warned[0]["path"] == str(path)
        assert "Expecting value" in warned[0]["error"]
        gpu = backend.sources()[0]
        assert gpu.port_baseline("xgmi", [1, 2]) == {1, 2}
        stored = json.loads(path.read_text(encoding="utf-8"))
        assert stored[gpu.identity.bdf]["xgmi"] == [1, 2]
    finally:
        backend.close()
