"""The simulated node seen by fleetd's logical device indices (one per partition).

fleetd numbers every processor handle (64 on a CPX node); the model numbers physical GPUs.
Stand-in workers configured on logical indices register their processes and read their
speed through this view, which maps each logical index to its physical GPU.
"""

from __future__ import annotations

from collections.abc import Callable

from fleetd.sim.model import SimGpu, SimNode
from fleetd.sim.partitions import PARTITION_COUNTS


class LogicalView:
    """A ``ProcessTable`` and speed source over logical indices (GPU-major enumeration)."""

    def __init__(self, node: SimNode) -> None:
        self.node = node
        self.per_gpu = PARTITION_COUNTS[node.compute_partition]
        """Partitions per physical GPU, fixed when the view is made (the enumeration fleetd
        discovered at start)."""

    def physical(self, logical: int) -> int:
        """The physical GPU index of logical device ``logical``."""
        return logical // self.per_gpu

    @property
    def gpus(self) -> list[SimGpu]:
        """One entry per logical device: its physical GPU."""
        return [g for g in self.node.gpus for _ in range(self.per_gpu)]

    def add_process(
        self,
        gpu: int,
        pid: int,
        name: str,
        vram_bytes: int,
        on_kill: Callable[[int], None] | None = None,
    ) -> None:
        self.node.add_process(self.physical(gpu), pid, name, vram_bytes, on_kill)

    def remove_process(self, pid: int) -> bool:
        return self.node.remove_process(pid)

    def set_load(self, gpu: int, level: float) -> None:
        self.node.set_load(self.physical(gpu), level)

    def gfx_clock_mhz(self, gpu: SimGpu) -> int:
        return self.node.gfx_clock_mhz(gpu)

    def throttle_factor(self, gpu: SimGpu) -> float:
        return self.node.throttle_factor(gpu)

    def pcie_link(self, logical: int) -> tuple[int, int]:
        return self.node.pcie_link(self.physical(logical))


__all__ = ["LogicalView"]
