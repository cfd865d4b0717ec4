"""The amdsmi package and the library it drives: validated, unvalidated, or refused."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from fleetd.clock import FakeClock
from fleetd.collect.abi import check_pair
from fleetd.collect.amdsmi_backend import AmdSmiBackend
from fleetd.errors import BackendError
from fleetd.sim import SimulatedAmdSmi, build_node


@pytest.mark.parametrize(
    ("package", "library", "verdict", "says"),
    [
        ("7.0.2", (26, 1, 0), "validated", "validated"),
        ("7.0.2", (26, 2, 0), "unsafe", "XGMI per-link counters"),  # ROCm 7.1 / 7.2
        ("7.0.2", (26, 3, 0), "unsafe", "8 bytes past the package's ASIC-info"),  # 7.12
        ("7.0.2", (26, 4, 0), "unsafe", "176 bytes past the gpu_metrics buffer"),  # 7.13
        ("7.0.2", (27, 0, 0), "unsafe", "lacks symbols"),  # 10.0
        ("7.13.0", (26, 4, 0), "unvalidated", "not a pair fleetd has validated"),  # ROCm's own
        ("7.13.0", (26, 1, 0), "unsafe", "structures are smaller"),
        ("7.2.1", (26, 2, 1), "unvalidated", "not a pair"),
        ("8.5.0", (31, 0, 0), "unvalidated", "not a pair"),  # unknown to fleetd: a warning
        (None, (26, 1, 0), "unvalidated", "cannot read the amdsmi package version"),
        ("7.0.2", None, "unvalidated", "cannot read the amdsmi library version"),
    ],
)
def test_the_verdict_on_each_pair(
    package: str | None, library: tuple[int, int, int] | None, verdict: str, says: str
) -> None:
    result = check_pair(package, library)
    assert result.verdict == verdict
    assert says in result.message


def test_an_unsafe_pair_is_one_line_naming_the_fix_and_the_override(clock: FakeClock) -> None:
    node = build_node("MI355X", seed=1, clock=clock)
    node.library_version = (26, 4, 0, "7.13.0")
    with pytest.raises(BackendError) as raised:
        AmdSmiBackend(SimulatedAmdSmi(node))
    text = str(raised.value)
    assert "\n" not in text and "is unsafe" in text and "backend.allow_unsafe_library" in text
    allowed = AmdSmiBackend(SimulatedAmdSmi(node), allow_unsafe_library=True)
    try:
        assert allowed.abi.verdict == "unsafe" and allowed.abi.library == "26.4.0"
        assert len(allowed.gpus()) == 8
    finally:
        allowed.close()


def test_the_shipped_simulator_is_the_validated_pair(clock: FakeClock) -> None:
    backend = AmdSmiBackend(SimulatedAmdSmi(build_node("MI300X", seed=1, clock=clock)))
    try:
        assert (backend.abi.verdict, backend.abi.package, backend.abi.library) == (
            "validated",
            "7.0.2",
            "26.1.0",
        )
    finally:
        backend.close()


class MeetingFace(SimulatedAmdSmi):
    """Library-wide calls wait for a second caller to be inside one at the same time: run
    one after another they never meet (the barrier times out), run together they do."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.barrier: threading.Barrier | None = None
        self.met = 0

    def _meet(self) -> None:
        if self.barrier is None:
            return
        try:
            self.barrier.wait()
            self.met += 1
        except threading.BrokenBarrierError:
            pass

    def amdsmi_get_gpu_compute_process_info(self) -> list[dict[str, Any]]:
        self._meet()
        return super().amdsmi_get_gpu_compute_process_info()

    def amdsmi_get_processor_handles(self) -> list[Any]:
        self._meet()
        return super().amdsmi_get_processor_handles()


def test_library_wide_calls_never_run_at_once(clock: FakeClock) -> None:
    face = MeetingFace(build_node("MI355X", seed=1, clock=clock))
    backend = AmdSmiBackend(face)
    try:
        face.barrier = threading.Barrier(2, timeout=0.5)
        threads = [
            threading.Thread(target=backend.compute_processes),
            threading.Thread(target=backend.rediscover),
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=10)
        assert face.met == 0  # serialised: neither call was ever inside with the other
        # the same two calls made straight on the library do meet: the check can fail
        face.barrier = threading.Barrier(2, timeout=5)
        direct = [
            threading.Thread(target=face.amdsmi_get_gpu_compute_process_info),
            threading.Thread(target=face.amdsmi_get_processor_handles),
        ]
        for t in direct:
            t.start()
        for t in direct:
            t.join(timeout=10)
        assert face.met == 2
    finally:
        backend.close()
