"""The amdsmi call meter: every module function counted by name with its time, nothing else."""

from __future__ import annotations

from typing import Any

import pytest

from fleetd.clock import FakeClock
from fleetd.collect.amdsmi_backend import AmdSmiBackend
from fleetd.collect.callmeter import CALLS, SECONDS, MeteredAmdSmi
from fleetd.collect.collectors import default_collectors
from fleetd.collect.poller import Poller
from fleetd.sim import SimulatedAmdSmi, build_node


class Module:
    """A tiny stand-in module: two functions, an enum-like attribute, an exception class."""

    class AmdSmiException(Exception):
        pass

    AmdSmiGpuBlock = ("UMC", 1)
    __version__ = "7.0.2"

    def __init__(self) -> None:
        self.amdsmi_wrapper = object()  # a submodule: not callable

    def amdsmi_ok(self, value: int) -> int:
        return value * 2

    def amdsmi_fails(self) -> None:
        raise self.AmdSmiException("no")


class StepTimer:
    def __init__(self, step: float) -> None:
        self.now, self.step = 0.0, step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def test_calls_are_counted_and_timed_by_function_failures_included() -> None:
    meter = MeteredAmdSmi(Module(), timer=StepTimer(0.25))
    assert meter.amdsmi_ok(3) == 6
    assert meter.amdsmi_ok(4) == 8
    with pytest.raises(Module.AmdSmiException):
        meter.amdsmi_fails()
    assert meter.totals() == {"amdsmi_ok": (2, 0.5), "amdsmi_fails": (1, 0.25)}
    readings = {(r.metric, r.labels): r.value for r in meter.readings(10.0)}
    assert readings == {
        (CALLS, (("function", "amdsmi_fails"),)): 1.0,
        (SECONDS, (("function", "amdsmi_fails"),)): 0.25,
        (CALLS, (("function", "amdsmi_ok"),)): 2.0,
        (SECONDS, (("function", "amdsmi_ok"),)): 0.5,
    }


def test_everything_but_module_functions_passes_through_unchanged() -> None:
    module = Module()
    meter: Any = MeteredAmdSmi(module)
    assert meter.AmdSmiException is Module.AmdSmiException
    assert meter.AmdSmiGpuBlock is Module.AmdSmiGpuBlock
    assert meter.__version__ == "7.0.2"
    assert meter.amdsmi_wrapper is module.amdsmi_wrapper
    assert meter.module is module
    with pytest.raises(AttributeError):
        meter.amdsmi_missing  # noqa: B018
    assert meter.totals() == {}


def test_a_function_patched_on_the_module_later_is_the_one_called() -> None:
    module = Module()
    meter: Any = MeteredAmdSmi(module)
    assert meter.amdsmi_ok(1) == 2
    module.amdsmi_ok = lambda value: value + 100  # type: ignore[method-assign]
    assert meter.amdsmi_ok(1) == 101
    assert meter.totals()["amdsmi_ok"][0] == 2


def test_the_backend_counts_every_call_a_poll_makes() -> None:
    clock = FakeClock()
    module = SimulatedAmdSmi(build_node("MI300X", seed=2, clock=clock, gpu_count=2))
    backend = AmdSmiBackend(module)
    poller = Poller(backend, default_collectors(), node="n", gpu_timeout=5.0)
    try:
        before = {name: count for name, (count, _) in backend.meter.totals().items()}
        assert before["amdsmi_init"] == 1 and before["amdsmi_get_processor_handles"] == 1
        poller.poll(clock.advance(5.0))
        after = backend.meter.totals()
        assert after["amdsmi_get_gpu_metrics_info"][0] == 2  # one per GPU, shared by collectors
        assert all(seconds >= 0.0 for _, seconds in after.values())
    finally:
        poller.close()
        backend.close()
