"""fleetd's real backend and poller on both faces of one model: identical snapshots.

``AmdSmiBackend(SimulatedAmdSmi(node))`` and ``AmdSmiBackend(amdsmi)`` — the real package over
the emulated library answering from the same node — must record the same identities, the
same readings (values, missing reasons) and the same per-GPU status, for every fault class
and every shipped scenario (alerts: test_alerts_agree.py).
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest

from fleetd.clock import FakeClock
from fleetd.collect.amdsmi_backend import AmdSmiBackend
from fleetd.model import Snapshot
from fleetd.sim import SimNode, SimulatedAmdSmi, build_node, start_scenario
from fleetd.sim.libemu import SimProvider
from fleetd.sim.scenario import scenario_names

from .pollers import GPU_TIMEOUT, HUNG_GPU_TIMEOUT, Pair, make_poller
from .test_fault_catalogue import FAULT_CASES


def assert_same(stand_in: Snapshot, real: Snapshot) -> None:
    assert [g.gpu for g in stand_in.gpus] == [g.gpu for g in real.gpus]
    assert stand_in.gpus == real.gpus
    left = {(r.metric, r.labels): (r.value, r.reason) for r in stand_in.readings}
    right = {(r.metric, r.labels): (r.value, r.reason) for r in real.readings}
    assert left.keys() == right.keys()
    wrong = {k: (left[k], right[k]) for k in left if left[k] != right[k]}
    assert wrong == {}
    assert stand_in == real  # order, timestamps, collector results too


def test_identities_and_a_healthy_poll_agree(clock: FakeClock, polled: Callable[..., Pair]) -> None:
    node = build_node("MI300X", seed=2, clock=clock)
    node.set_load(None, 0.5)
    pair = polled(node)
    identities = [b.gpus() for b in pair.backends]
    assert identities[0] == identities[1]
    assert {i.model for i in identities[1]} == {"MI300X"}
    assert all(i.hive_id and i.serial and i.kfd_id is not None for i in identities[1])
    for _ in range(3):
        clock.advance(5)
        first, second = pair.poll()
        assert_same(first, second)
    missing = [r for r in second.readings if r.value is None]
    assert {r.reason for r in missing} <= {"not_supported", "na"}  # MI300X has no such sensor


@pytest.mark.parametrize("kind", sorted(FAULT_CASES))
def test_every_fault_polls_the_same(
    kind: str, clock: FakeClock, polled: Callable[..., Pair]
) -> None:
    node = build_node("MI355X", seed=6, clock=clock)
    node.set_load(None, 0.6)
    node.add_process(5, pid=5005, name="vllm-worker-5", vram_bytes=120 << 30)
    pair = polled(node, gpu_timeout=HUNG_GPU_TIMEOUT if kind == "hung_call" else GPU_TIMEOUT)
    clock.advance(5)
    assert_same(*pair.poll())
    node.inject(5, kind, **FAULT_CASES[kind])
    for _ in range(2):
        clock.advance(30)
        stand_in, real = pair.poll()
        assert_same(stand_in, real)
    if kind == "gpu_off_bus":
        # real amdsmi never answers NOT_FOUND for the old handle (and this node has no fake
        # sysfs tree): a fresh enumeration, the daemon's periodic rediscovery, tells
        for backend in pair.backends:
            backend.rediscover()
        clock.advance(5)
        stand_in, real = pair.poll()
        assert_same(stand_in, real)
    if kind in ("hung_call", "gpu_off_bus"):
        status = real.gpus[5]
        assert not (status.present and status.responsive), status


@pytest.mark.parametrize("name", scenario_names())
def test_every_scenario_polls_the_same(
    name: str, clock: FakeClock, polled: Callable[..., Pair]
) -> None:
    node, runner = start_scenario(name, clock)
    pair = polled(node)
    last_step = max(step.at for step in runner.scenario.steps)
    checkpoints = sorted({runner.start + 5.0, runner.start + last_step + 20.0, runner.end})
    for at in checkpoints:
        clock.advance(at - clock.now())
        runner.advance()
        pair.node.release_hangs()
        assert_same(*pair.poll())


def test_traps_reach_fleetd_as_missing_readings_on_the_real_package(
    clock: FakeClock, polled: Callable[..., Pair]
) -> None:
    """Raw sentinels, "N/A" and NOT_SUPPORTED become missing readings, never fake values."""
    node = build_node("MI355X", seed=9, clock=clock)
    node.set_load(None, 0.6)
    pair = polled(node)
    node.inject(
        2,
        "unsupported_fields",
        fields=[
            "amdsmi_get_power_info.current_socket_power",
            "amdsmi_get_power_info.socket_power",
            "amdsmi_get_gpu_metrics_info.temperature_hotspot",
            "amdsmi_get_pcie_info.pcie_metric.pcie_replay_count",
        ],
        calls=["amdsmi_get_temp_metric:VRAM"],
    )
    clock.advance(10)
    stand_in, real = pair.poll()
    assert_same(stand_in, real)
    gpu2 = [r for r in real.readings if ("gpu", "2") in r.labels]
    sentinels = {0xFFFF, 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF}
    assert [r for r in gpu2 if r.value in sentinels] == []
    power = _one(gpu2, "fleetd_gpu_power_watts")
    assert power.value is None and power.reason, power


def _one(readings: list[Any], metric: str) -> Any:
    found = [r for r in readings if r.metric == metric]
    assert found, metric
    return found[0]


def test_a_backend_reset_and_rediscovery_agree_on_twin_nodes(
    clock: FakeClock, real_amdsmi: ModuleType, attach: Callable[[SimNode], SimProvider]
) -> None:
    twins = [build_node("MI355X", seed=5, clock=clock) for _ in "ab"]
    for node in twins:
        node.set_load(None, 0.7)
        node.add_process(3, pid=4321, name="vllm", vram_bytes=100 << 30)
        node.inject(3, "ecc_uncorrectable")
    attach(twins[1])
    backends = [AmdSmiBackend(SimulatedAmdSmi(twins[0])), AmdSmiBackend(real_amdsmi)]
    pollers = [make_poller(b, clock, GPU_TIMEOUT) for b in backends]
    try:
        clock.advance(5)
        assert backends[0].compute_processes() == backends[1].compute_processes() == [4321]
        assert backends[0].reset_unit(3) == backends[1].reset_unit(3) == list(range(8))
        for backend in backends:
            backend.reset_gpu(3)
            assert backend.rediscover() == backends[0].gpus()
        assert [n.reset_count() for n in twins] == [1, 1]
        assert [[k.pid for k in n.killed] for n in twins] == [[4321], [4321]]
        clock.advance(5)
        now = clock.now()
        assert_same(pollers[0].poll(now), pollers[1].poll(now))
    finally:
        for poller, backend in zip(pollers, backends, strict=True):
            poller.close()
            backend.close()
