"""fleetd's backend and poller on both faces of one node, polled side by side."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

import pytest

from fleetd.clock import FakeClock
from fleetd.collect.amdsmi_backend import AmdSmiBackend
from fleetd.collect.collectors import default_collectors
from fleetd.collect.poller import Poller
from fleetd.model import Snapshot
from fleetd.sim import SimNode, SimulatedAmdSmi
from fleetd.sim.libemu import SimProvider

GPU_TIMEOUT = 5.0
"""Real seconds a GPU may take per poll: generous, so a loaded CI box never times out a
healthy GPU on one face only."""
HUNG_GPU_TIMEOUT = 3.0
"""For nodes with a hung call: each face waits this long once a poll, in parallel. Long
enough that the real package's face, slower per call, reaches every healthy GPU within it on
a slow or loaded machine (1 s let healthy GPUs time out "waiting for their turn" on that face
only)."""


def make_poller(backend: AmdSmiBackend, clock: FakeClock, gpu_timeout: float) -> Poller:
    return Poller(
        backend,
        default_collectors(processes_interval=30.0),
        node="emulated",
        gpu_timeout=gpu_timeout,
        timer=clock.monotonic,
    )


@dataclass
class Pair:
    """One node polled through the stand-in (index 0) and the real package (index 1)."""

    clock: FakeClock
    node: SimNode
    backends: tuple[AmdSmiBackend, AmdSmiBackend]
    pollers: tuple[Poller, Poller]
    pool: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(2))

    def poll(self) -> tuple[Snapshot, Snapshot]:
        """Both faces at the same model time, concurrently (hung-call waits overlap)."""
        now = self.clock.now()
        first, second = (self.pool.submit(p.poll, now) for p in self.pollers)
        return first.result(), second.result()

    def close(self) -> None:
        self.node.release_hangs()
        for poller, backend in zip(self.pollers, self.backends, strict=True):
            poller.close()
            backend.close()
        self.pool.shutdown()


@pytest.fixture
def polled(
    clock: FakeClock, real_amdsmi: ModuleType, attach: Callable[[SimNode], SimProvider]
) -> Iterator[Callable[..., Pair]]:
    """``polled(node, gpu_timeout=...)``: a Pair over ``node``, closed after the test."""
    pairs: list[Pair] = []

    def make(node: SimNode, gpu_timeout: float = GPU_TIMEOUT, sysfs: Path | None = None) -> Pair:
        """``sysfs``: keep the node's fake sysfs tree there; both backends check it."""
        attach(node)
        root = node.attach_sysfs(sysfs) if sysfs is not None else None
        sim_backend = AmdSmiBackend(SimulatedAmdSmi(node), pci_root=root)
        real_backend = AmdSmiBackend(real_amdsmi, pci_root=root)
        pair = Pair(
            clock,
            node,
            (sim_backend, real_backend),
            (
                make_poller(sim_backend, clock, gpu_timeout),
                make_poller(real_backend, clock, gpu_timeout),
            ),
        )
        pairs.append(pair)
        return pair

    try:
        yield make
    finally:
        for pair in pairs:
            pair.close()
