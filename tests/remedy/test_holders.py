"""The reset holder check: fleetd itself and monitoring agents never hold a reset back; a
process with VRAM or queues does, and the refusal says which process holds what."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleetd.clock import FakeClock
from fleetd.collect.amdsmi_backend import AmdSmiBackend
from fleetd.collect.collectors import default_collectors
from fleetd.collect.collectors.usage import MEMORY_USED
from fleetd.collect.poller import Poller
from fleetd.model import label_value
from fleetd.remedy import machine as m
from fleetd.remedy.holders import KfdInspector, KfdProcess, judge
from fleetd.sim import SimulatedAmdSmi, build_node

from .rig import Rig, make_rig, path_with

GIB = 1024**3


def fake_process(
    root: Path,
    pid: int,
    comm: str,
    *,
    unit: str | None = None,
    vram: dict[int, int] | None = None,
    queues: int | None = None,
) -> None:
    """/proc/<pid> and (with vram or queues) /sys/class/kfd/kfd/proc/<pid> under ``root``."""
    proc = root / "proc" / str(pid)
    proc.mkdir(parents=True)
    (proc / "comm").write_text(comm + "\n")
    if unit is not None:
        (proc / "cgroup").write_text(f"0::/system.slice/{unit}\n")
    if vram is None and queues is None:
        return
    kfd = root / "sys/class/kfd/kfd/proc" / str(pid)
    kfd.mkdir(parents=True)
    for gpu_id, size in (vram or {}).items():
        (kfd / f"vram_{gpu_id}").write_text(f"{size}\n")
    for q in range(queues or 0):
        (kfd / "queues" / str(q)).mkdir(parents=True)


def test_the_kernel_says_who_holds_what(tmp_path: Path) -> None:
    fake_process(tmp_path, 4242, "python3", unit="vllm@3.service", vram={52861: 12 * GIB}, queues=4)
    fake_process(tmp_path, 10, "gpuagent", vram={52861: 0}, queues=0)
    fake_process(tmp_path, 11, "amd-metrics-exp")  # the kernel cut the name at 15 bytes
    fake_process(tmp_path, 12, "exporter", unit="rdcd.service")
    fake_process(tmp_path, 13, "idle-notebook", vram={52861: 0}, queues=0)
    fake_process(tmp_path, 14, "mystery")  # no KFD sysfs entry: the kernel does not say
    inspector = KfdInspector(tmp_path)
    assert inspector.kfd_pids() == [10, 13, 4242]
    procs = [inspector.inspect(pid) for pid in (4242, 10, 11, 12, 13, 14, 99)]
    verdict = judge(procs, own_pid=99)
    assert [p.describe() for p in verdict.holders] == [
        "pid 4242 (python3, vllm@3.service): 12.0 GiB VRAM, 4 queues",
        "pid 14 (mystery): VRAM unknown, queues unknown",
    ]
    assert [(p.pid, why) for p, why in verdict.ignored] == [
        (10, "monitoring agent gpuagent"),
        (11, "monitoring agent amd-metrics-exporter"),
        (12, "monitoring agent rdcd"),
        (13, "holds /dev/kfd with no VRAM and no queues"),
        (99, "fleetd itself (amdsmi opened /dev/kfd in this process)"),
    ]


def test_an_empty_allow_list_counts_every_agent_with_memory() -> None:
    agent = KfdProcess(10, "gpuagent", vram_bytes=GIB, queues=1)
    assert judge([agent], own_pid=1, agents=()).holders == (agent,)


def test_unreadable_numbers_count_as_holding(tmp_path: Path) -> None:
    fake_process(tmp_path, 7, "python3", vram={1: 0})
    (tmp_path / "sys/class/kfd/kfd/proc/7/vram_1").write_text("garbage\n")
    [proc] = judge([KfdInspector(tmp_path).inspect(7)], own_pid=1).holders
    assert proc.vram_bytes is None and proc.queues == 0


# --- through a remediation run on a simulated MI300X (ROCm 7.0: the VRAM fallback quirk) -----


def kfd_root(rig: Rig) -> Path:
    assert rig.kfd is not None
    return rig.kfd.root


@pytest.fixture
def mi300x(tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> Iterator[Rig]:
    root = tmp_path / "root"
    root.mkdir()
    r = make_rig(tmp_path, clock, workers_on=(2, 3), model="MI300X", kfd=KfdInspector(root))
    monkeypatch.setenv("PATH", path_with(r.fleet.bin_dir))
    try:
        yield r
    finally:
        r.close()


def test_reading_vram_makes_fleetd_a_kfd_process_on_mi300x_before_rocm_7_12(mi300x: Rig) -> None:
    """The simulator's quirk itself (ROCm/ROCm#4411), as the stand-in library shows it."""
    amdsmi = SimulatedAmdSmi(mi300x.sim)
    amdsmi.amdsmi_init()
    before = {p["process_id"] for p in amdsmi.amdsmi_get_gpu_compute_process_info()}
    mi300x.poller.poll(mi300x.clock.now())  # reads VRAM usage on every GPU
    after = {p["process_id"] for p in amdsmi.amdsmi_get_gpu_compute_process_info()}
    assert after - before == {os.getpid()}
    mi300x.sim.library_version = (26, 3, 0, "7.12.0")  # fixed there: nobody new is added
    mi300x.sim.remove_process(os.getpid())
    mi300x.poller.poll(mi300x.clock.now())
    assert os.getpid() not in {
        p["process_id"] for p in amdsmi.amdsmi_get_gpu_compute_process_info()
    }


def test_fleetd_itself_and_agents_never_hold_the_reset_back(mi300x: Rig) -> None:
    mi300x.poller.poll(mi300x.clock.now())  # fleetd is now a KFD client (the quirk)
    fake_process(kfd_root(mi300x), 31337, "gpuagent", vram={1: 0}, queues=0)
    mi300x.sim.add_kfd_client(31337, "gpuagent")
    [run_id] = mi300x.fault(3)
    mi300x.run_until_settled()
    run = mi300x.run(run_id)
    assert run.state is m.RunState.DONE, run.outcome
    assert mi300x.sim.reset_count() == 1


def test_a_kfd_process_with_queues_refuses_the_reset_and_is_named(mi300x: Rig) -> None:
    fake_process(kfd_root(mi300x), 5555, "python3", unit="batch.service", vram={1: 0}, queues=2)
    mi300x.sim.add_kfd_client(5555, "python3")
    [run_id] = mi300x.fault(3)
    mi300x.run_until_settled()
    run = mi300x.run(run_id)
    assert run.state is m.RunState.QUARANTINED and mi300x.sim.reset_count() == 0
    assert "KFD process pid 5555 (python3, batch.service): 0.0 GiB VRAM, 2 queues" in (
        run.outcome or ""
    )


def test_vram_is_read_from_sysfs_so_polling_never_makes_fleetd_a_kfd_process(
    tmp_path: Path, clock: FakeClock
) -> None:
    """amdgpu's mem_info_vram_used gives the same number as amdsmi without its /dev/kfd
    fallback; where sysfs cannot be read fleetd still asks amdsmi (and the quirk applies)."""
    sim = build_node("MI300X", seed=3, clock=clock)
    root = sim.attach_sysfs(tmp_path / "root")
    sim.add_process(2, 4242, "python3", 10 * GIB)

    def poll(backend: AmdSmiBackend) -> dict[int, float | None]:
        poller = Poller(backend, default_collectors(), node="n", gpu_timeout=5.0)
        clock.advance(5.0)
        snapshot = poller.poll(clock.now())
        poller.close()
        return {
            int(str(label_value(r.labels, "gpu"))): r.value
            for r in snapshot.readings
            if r.metric == MEMORY_USED
        }

    used = poll(AmdSmiBackend(SimulatedAmdSmi(sim), pci_root=root))
    assert used == {g.index: float(sim.vram_used_bytes(g)) for g in sim.gpus}
    assert used[2] is not None and used[2] > 10 * GIB
    assert os.getpid() not in {p.pid for p in sim.processes()}
    poll(AmdSmiBackend(SimulatedAmdSmi(sim)))  # no sysfs to read: amdsmi's path
    assert os.getpid() in {p.pid for p in sim.processes()}
