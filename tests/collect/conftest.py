"""Shared harness for collect tests: a simulated node, its backend and a poller."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from fleetd.clock import FakeClock
from fleetd.collect.amdsmi_backend import AmdSmiBackend
from fleetd.collect.collectors import default_collectors
from fleetd.collect.poller import HAND_OFF_AFTER_S, Poller
from fleetd.model import Labels, Reading, Snapshot
from fleetd.sim import SimNode, SimulatedAmdSmi, build_node

SEED = 7
POLL_INTERVAL = 5.0

Key = tuple[str, Labels]  # (metric, labels without uuid)


def key(reading: Reading) -> Key:
    return reading.metric, tuple((k, v) for k, v in reading.labels if k != "uuid")


def by_key(snapshot: Snapshot) -> dict[Key, Reading]:
    return {key(r): r for r in snapshot.readings}


def gpu_of(k: Key) -> int | None:
    for name, value in k[1]:
        if name == "gpu":
            return int(value)
    return None


def find(snapshot: Snapshot, metric: str, gpu: int, **labels: str) -> Reading:
    wanted = {"gpu": str(gpu), **labels}
    for reading in snapshot.readings:
        if reading.metric != metric:
            continue
        have = dict(reading.labels)
        if all(have.get(k) == v for k, v in wanted.items()):
            return reading
    raise AssertionError(f"no reading {metric}{wanted}")


@dataclass
class Rig:
    """A simulated node polled through the real backend and poller."""

    clock: FakeClock
    node: SimNode
    backend: AmdSmiBackend
    poller: Poller

    def poll(self, advance: float = POLL_INTERVAL) -> Snapshot:
        self.clock.advance(advance)
        return self.poller.poll(self.clock.now())

    def recover(self, within: float = 5.0) -> Snapshot:
        """Release every hung call and poll until every GPU answers again (a real-time
        deadline: the stuck workers return on their own threads)."""
        self.node.release_hangs()
        deadline = time.monotonic() + within
        snapshot = self.poll()
        while not all(s.responsive for s in snapshot.gpus) and time.monotonic() < deadline:
            snapshot = self.poll()
        return snapshot

    def close(self) -> None:
        self.node.release_hangs()
        self.poller.close()
        self.backend.close()


def make_rig(
    clock: FakeClock,
    *,
    model: str = "MI355X",
    seed: int = SEED,
    gpu_timeout: float = 5.0,
    root: bool = True,
    load: float = 0.5,
    processes_interval: float = 30.0,
    sysfs: Path | None = None,
    slow_every: int = 1,
    metrics_table: bool = False,
    compute_partition: str = "SPX",
    memory_partition: str = "NPS1",
    hand_off_after: float = HAND_OFF_AFTER_S,
) -> Rig:
    """``sysfs``: give the node a fake sysfs tree there and the backend that root."""
    node = build_node(
        model,
        seed=seed,
        clock=clock,
        root=root,
        compute_partition=compute_partition,
        memory_partition=memory_partition,
    )
    node.set_load(None, load)
    pci_root = node.attach_sysfs(sysfs) if sysfs is not None else None
    backend = AmdSmiBackend(SimulatedAmdSmi(node), pci_root=pci_root)
    poller = Poller(
        backend,
        default_collectors(
            processes_interval=processes_interval,
            slow_every=slow_every,
            metrics_table=metrics_table,
        ),
        node="sim-node",
        gpu_timeout=gpu_timeout,
        timer=clock.monotonic,
        hand_off_after=hand_off_after,
    )
    return Rig(clock, node, backend, poller)


@pytest.fixture
def rig(clock: FakeClock) -> Iterator[Rig]:
    r = make_rig(clock)
    try:
        yield r
    finally:
        r.close()
