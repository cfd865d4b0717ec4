"""Day one on a real MI300X / MI355X node: behaviours of the real library that the
simulator reproduces through both faces, and fleetd's handling of them
(docs/hardware-fidelity.md, "Behaviour catalogue")."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

from fleetd.clock import FakeClock
from fleetd.collect.amdsmi_backend import AmdSmiBackend
from fleetd.model import Snapshot
from fleetd.remedy.verify import assess
from fleetd.sim import SimNode, SimulatedAmdSmi, build_node
from fleetd.sim.libemu import SimProvider

from .pollers import GPU_TIMEOUT, make_poller


def _twins(clock: FakeClock, model: str, attach: Callable[[SimNode], SimProvider]) -> list[SimNode]:
    """Two identical nodes: the first for the stand-in, the second behind the real package."""
    nodes = [build_node(model, seed=5, clock=clock) for _ in "ab"]
    attach(nodes[1])
    return nodes


@pytest.mark.parametrize("model", ["MI300X", "MI355X"])
def test_an_unknown_hive_makes_the_reset_unit_the_whole_node(
    clock: FakeClock,
    real_amdsmi: ModuleType,
    attach: Callable[[SimNode], SimProvider],
    model: str,
) -> None:
    nodes = _twins(clock, model, attach)
    for node in nodes:
        node.inject(2, "unsupported_fields", calls=["amdsmi_get_xgmi_info"], status="FILE_ERROR")
    backends = [AmdSmiBackend(SimulatedAmdSmi(nodes[0])), AmdSmiBackend(real_amdsmi)]
    try:
        for backend in backends:
            assert backend.reset_unit(2) == list(range(8))
            assert backend.reset_unit(5) == list(range(8))
            note = backend.reset_unit_note(2)
            assert note is not None and "whole node" in note and "GPU 2" in note
    finally:
        for backend in backends:
            backend.close()


@pytest.mark.parametrize("model", ["MI300X", "MI355X"])
def test_xgmi_error_status_is_asked_once_and_xgmi_faults_are_xgmi_wafl_counts(
    clock: FakeClock,
    real_amdsmi: ModuleType,
    attach: Callable[[SimNode], SimProvider],
    model: str,
) -> None:
    nodes = _twins(clock, model, attach)
    sim = SimulatedAmdSmi(nodes[0])
    calls = [0, 0]
    libs = [sim.lib, attach(nodes[1]).lib]
    for i, lib in enumerate(libs):
        inner = lib.amdsmi_gpu_xgmi_error_status

        def counted(handle: int, _inner=inner, _i=i) -> int:  # type: ignore[no-untyped-def]
            calls[_i] += 1
            return _inner(handle)

        lib.amdsmi_gpu_xgmi_error_status = counted  # type: ignore[method-assign]
    backends = [AmdSmiBackend(sim), AmdSmiBackend(real_amdsmi)]
    pollers = [make_poller(b, clock, GPU_TIMEOUT) for b in backends]
    try:
        for node in nodes:
            node.set_load(None, 0.5)
            node.inject(6, "xgmi_link_down", link=0)
        for _ in range(4):
            clock.advance(5)
            snaps = [p.poll(clock.now()) for p in pollers]
        assert calls == [8, 8]  # once per GPU, not once per poll
        for backend in backends:
            backend.rediscover()  # the daemon re-enumerates every minute: not asked again
        clock.advance(5)
        snaps = [p.poll(clock.now()) for p in pollers]
        assert calls == [8, 8]
        for snap, backend in zip(snaps, backends, strict=True):
            assert not [r for r in snap.readings if r.metric == "fleetd_gpu_xgmi_error_status"]
            assert not [r for r in snap.readings if r.reason == "invalid_argument"]
            wafl = {
                (dict(r.labels)["gpu"], dict(r.labels)["type"]): r.value
                for r in snap.readings
                if r.metric == "fleetd_gpu_ecc_block_errors_total"
                and ("block", "xgmi_wafl") in r.labels
            }
            assert wafl[("6", "correctable")] == wafl[("0", "correctable")] == 4
            assert wafl[("6", "uncorrectable")] == wafl[("0", "uncorrectable")] == 1
            assert wafl[("3", "uncorrectable")] == 0
            unsupported = backend.sources()[6].unsupported()
            assert unsupported["amdsmi_gpu_xgmi_error_status"] == "invalid_argument"
            # besides the XGMI status only a sensor the model lacks (EDGE on MI300X)
            assert set(unsupported) <= {
                "amdsmi_gpu_xgmi_error_status",
                "amdsmi_get_temp_metric:EDGE",
            }
    finally:
        for poller, backend in zip(pollers, backends, strict=True):
            poller.close()
            backend.close()


@pytest.mark.parametrize("model", ["MI300X", "MI355X"])
def test_a_gpu_off_the_bus_is_reported_missing_although_amdsmi_never_says_not_found(
    clock: FakeClock,
    real_amdsmi: ModuleType,
    attach: Callable[[SimNode], SimProvider],
    model: str,
    tmp_path: Path,
) -> None:
    nodes = _twins(clock, model, attach)
    roots = [node.attach_sysfs(tmp_path / name) for node, name in zip(nodes, "ab", strict=True)]
    faces = [SimulatedAmdSmi(nodes[0]), real_amdsmi]
    backends = [AmdSmiBackend(face, pci_root=root) for face, root in zip(faces, roots, strict=True)]
    pollers = [make_poller(b, clock, GPU_TIMEOUT) for b in backends]
    try:
        handles = [backend.sources()[4].handle for backend in backends]
        for node in nodes:
            node.inject(4, "gpu_off_bus")
        for face, old in zip(faces, handles, strict=True):
            codes = []
            for call in ("amdsmi_get_gpu_activity", "amdsmi_get_gpu_asic_info"):
                with pytest.raises(face.AmdSmiLibraryException) as err:
                    getattr(face, call)(old)
                codes.append(err.value.get_error_code())
            assert codes == [2, 6]  # NOT_SUPPORTED (sysfs ENOENT), DRM_ERROR; never 31
        clock.advance(5)
        snaps = [p.poll(clock.now()) for p in pollers]
        for snap in snaps:
            assert not snap.gpus[4].present
            up = [
                r for r in snap.readings if r.metric == "fleetd_gpu_up" and ("gpu", "4") in r.labels
            ]
            assert [r.value for r in up] == [0.0]
        assert [g.index for g in backends[0].rediscover()] == list(range(8))
        assert backends[1].rediscover() == backends[0].gpus()
        assert not backends[0].present(4) and not backends[1].present(4)
    finally:
        for poller, backend in zip(pollers, backends, strict=True):
            poller.close()
            backend.close()


def _link_up(snap: Snapshot, gpu: int) -> dict[str, float | None]:
    return {
        dict(r.labels)["link"]: r.value
        for r in snap.readings
        if r.metric == "fleetd_gpu_xgmi_link_up" and ("gpu", str(gpu)) in r.labels
    }


@pytest.mark.parametrize("model", ["MI300X", "MI355X"])
def test_xgmi_link_status_is_per_port_and_judged_against_a_learned_baseline(
    clock: FakeClock,
    real_amdsmi: ModuleType,
    attach: Callable[[SimNode], SimProvider],
    model: str,
    tmp_path: Path,
) -> None:
    nodes = _twins(clock, model, attach)
    faces = [SimulatedAmdSmi(nodes[0]), real_amdsmi]
    files = [tmp_path / "a.json", tmp_path / "b.json"]
    backends = [AmdSmiBackend(f, baseline_path=p) for f, p in zip(faces, files, strict=True)]
    pollers = [make_poller(b, clock, GPU_TIMEOUT) for b in backends]
    try:
        for face, backend in zip(faces, backends, strict=True):
            status = face.amdsmi_get_gpu_xgmi_link_status(backend.sources()[3].handle)
            # total_links is the GPU count; the port to itself reads down on a healthy board
            assert status == {
                "status": ["D" if p == 3 else "U" for p in range(8)],
                "total_links": 8,
            }
        clock.advance(5)
        healthy = [p.poll(clock.now()) for p in pollers]
        for snap in healthy:
            ports = _link_up(snap, 3)
            assert ports == {str(p): 1.0 for p in range(8) if p != 3}  # its own port: no link
            assert assess(snap, range(8)).problems == ()  # verification passes
        for node in nodes:
            node.inject(3, "xgmi_link_down", link=0)  # GPU 3 ↔ GPU 0
        clock.advance(5)
        down = [p.poll(clock.now()) for p in pollers]
        for snap in down:
            assert _link_up(snap, 3)["0"] == 0.0 and _link_up(snap, 0)["3"] == 0.0
            assert sorted(assess(snap, range(8)).problems) == [
                "GPU 0: XGMI link 3 down",
                "GPU 3: XGMI link 0 down",
            ]
        # a restart while the link is down: the persisted baseline still expects the port
        for poller, backend in zip(pollers, backends, strict=True):
            poller.close()
            backend.close()
        backends = [AmdSmiBackend(f, baseline_path=p) for f, p in zip(faces, files, strict=True)]
        pollers = [make_poller(b, clock, GPU_TIMEOUT) for b in backends]
        clock.advance(5)
        for snap in (p.poll(clock.now()) for p in pollers):
            assert _link_up(snap, 3)["0"] == 0.0
    finally:
        for poller, backend in zip(pollers, backends, strict=True):
            poller.close()
            backend.close()
