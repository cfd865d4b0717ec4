"""Fixtures for running the REAL amdsmi package over the emulated libamd_smi.so.

The library is generated and compiled once per test session (into a session temp dir), and
the real amdsmi is imported once into this process bound to it. Each test then installs a
SimProvider over its own simulated node; at teardown the provider is removed and must have
recorded no internal error.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import ModuleType

import pytest

from fleetd.clock import FakeClock
from fleetd.sim import RawLibrary, SimNode, SimulatedAmdSmi, build_node
from fleetd.sim.libemu import (
    CompilerMissing,
    EmulatedLibrary,
    EmulationError,
    SimProvider,
    build_library,
)

from .pollers import polled  # noqa: F401 - a fixture for the backend and alert tests


@pytest.fixture(scope="session")
def emulated_library(tmp_path_factory: pytest.TempPathFactory) -> EmulatedLibrary:
    """The emulated libamd_smi.so, built for this session (skips without amdsmi or gcc)."""
    if importlib.util.find_spec("amdsmi") is None:
        pytest.skip("the amdsmi 7.0.2 package is not installed (CI: pip install amdsmi==7.0.2)")
    try:
        path = build_library(tmp_path_factory.mktemp("libemu"))
    except CompilerMissing as exc:
        pytest.skip(f"cannot build the emulated libamd_smi.so: {exc}")
    return EmulatedLibrary(path)


@pytest.fixture(scope="session")
def real_amdsmi(emulated_library: EmulatedLibrary) -> ModuleType:
    """The real amdsmi package, imported over the emulated library."""
    try:
        return emulated_library.import_amdsmi()
    except EmulationError as exc:
        pytest.fail(str(exc))


@dataclass
class Faces:
    """One simulated node read through both faces."""

    clock: FakeClock
    node: SimNode
    sim: SimulatedAmdSmi
    real: ModuleType
    provider: SimProvider


def serve(library: EmulatedLibrary, real: ModuleType, node: SimNode) -> SimProvider:
    """Install a provider answering the real package's C calls from ``node``."""
    provider = SimProvider(real.amdsmi_wrapper, RawLibrary(node))
    library.install(provider)
    return provider


@pytest.fixture
def attach(
    emulated_library: EmulatedLibrary, real_amdsmi: ModuleType
) -> Iterator[Callable[[SimNode], SimProvider]]:
    """Attach the real package to a node of the test's own making (last one wins)."""
    providers: list[SimProvider] = []

    def attach_node(node: SimNode) -> SimProvider:
        provider = serve(emulated_library, real_amdsmi, node)
        providers.append(provider)
        return provider

    try:
        yield attach_node
    finally:
        emulated_library.install(None)
    for provider in providers:
        assert provider.errors == [], "\n".join(provider.errors)
        assert not provider.unhandled, f"calls the simulator does not model: {provider.unhandled}"


@pytest.fixture
def faces(
    clock: FakeClock, real_amdsmi: ModuleType, attach: Callable[[SimNode], SimProvider]
) -> Faces:
    """An MI355X node under load, initialised through both faces."""
    node = build_node("MI355X", seed=11, clock=clock)
    provider = attach(node)
    sim = SimulatedAmdSmi(node)
    sim.amdsmi_init()
    real_amdsmi.amdsmi_init()
    node.set_load(None, 0.6)
    clock.advance(90)
    return Faces(clock, node, sim, real_amdsmi, provider)
