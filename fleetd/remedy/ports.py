"""What remediation needs from the GPU backend, as structural protocols.

``fleetd.collect.amdsmi_backend.AmdSmiBackend`` and the simulator-backed backend satisfy
these without importing anything from here; tests and the benchmark pass either.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from fleetd.model import GpuIdentity, Snapshot


class ProcessInfo(Protocol):
    """One process holding a GPU (amdsmi_get_gpu_process_list)."""

    @property
    def pid(self) -> int: ...

    @property
    def name(self) -> str | None: ...


class GpuControl(Protocol):
    """The backend calls a remediation run makes."""

    def gpus(self) -> list[GpuIdentity]:
        """The GPUs enumerated now."""
        ...

    def reset_unit(self, index: int) -> list[int]:
        """Every GPU a reset of ``index`` touches: its XGMI hive on MI300/MI350-class nodes."""
        ...

    def reset_gpu(self, index: int) -> None:
        """Reset ``index`` (and with it its hive); raises BackendError on failure."""
        ...

    def processes(self, index: int) -> Sequence[ProcessInfo]:
        """Processes holding GPU ``index``."""
        ...

    def compute_processes(self) -> list[int]:
        """Pids of every KFD (compute) process on the node; a hive reset kills all of them."""
        ...

    def rediscover(self) -> list[GpuIdentity]:
        """Shut the library down, initialise it again and enumerate (handles go stale)."""
        ...


class HealthPoller(Protocol):
    """One poll of every GPU, in the catalog's metric names."""

    def poll(self, now: float) -> Snapshot: ...
