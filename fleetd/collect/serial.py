"""The one Poller shared by the tick and remediation, and amdsmi calls made between polls.

A reset or a rediscovery (``amdsmi_shut_down`` + init) invalidates the handles a running
poll is using (amdsmi.md: keep calls on one thread or behind a lock), so everything that
calls amdsmi outside a poll takes the same lock the poll holds.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from fleetd.collect.amdsmi_backend import AmdSmiBackend
from fleetd.collect.dump import dump_unit
from fleetd.collect.poller import Poller
from fleetd.collect.source import GpuProcess
from fleetd.model import GpuIdentity, Snapshot


class SerialPoller:
    """The one Poller, shared by the tick and remediation's verification, never overlapped."""

    def __init__(self, poller: Poller) -> None:
        self._poller = poller
        self._lock = threading.Lock()

    def poll(self, now: float) -> Snapshot:
        with self._lock:
            return self._poller.poll(now)

    def close(self) -> None:
        with self._lock:
            self._poller.close()

    def busy(self) -> bool:
        """Whether a hung call from an earlier poll is still inside amdsmi."""
        return self._poller.busy()

    @property
    def lock(self) -> threading.Lock:
        """Held while amdsmi is called outside a poll (CPER reads): never during one."""
        return self._lock

    def rediscover(self, backend: AmdSmiBackend) -> list[GpuIdentity]:
        """Re-initialise amdsmi between two polls, never during one."""
        with self._lock:
            return backend.rediscover()


class PollSafeBackend:
    """The backend as remediation drives it (``fleetd.remedy.ports.GpuControl``): its
    rediscovery after a reset waits for a running poll, like the daemon's own."""

    def __init__(self, backend: AmdSmiBackend, poller: SerialPoller) -> None:
        self._backend = backend
        self._poller = poller

    def gpus(self) -> list[GpuIdentity]:
        return self._backend.gpus()

    def reset_unit(self, index: int) -> list[int]:
        return self._backend.reset_unit(index)

    def reset_unit_note(self, index: int) -> str | None:
        return self._backend.reset_unit_note(index)

    def reset_gpu(self, index: int) -> None:
        self._backend.reset_gpu(index)

    def processes(self, index: int) -> list[GpuProcess]:
        return self._backend.processes(index)

    def compute_processes(self) -> list[int]:
        return self._backend.compute_processes()

    def rediscover(self) -> list[GpuIdentity]:
        return self._poller.rediscover(self._backend)

    def partition_modes(self) -> dict[str, tuple[str | None, str | None]]:
        """The physical GPUs' partition modes (``fleetd.remedy.ports.PartitionControl``),
        read between two polls."""
        with self._poller.lock:
            return self._backend.partition_modes()

    def set_partition_modes(self, bdf: str, compute: str, memory: str) -> None:
        with self._poller.lock:
            self._backend.set_partition_modes(bdf, compute, memory)

    def dump(self, indices: Sequence[int], *, wait: float = 5.0) -> dict[str, Any]:
        """Every raw read of ``indices`` for the evidence bundle, between two polls. A call
        of an earlier poll still hung inside amdsmi, or a poll that keeps the lock past
        ``wait``, gives an error instead of a dump: the bundle is never worth a stuck poll."""
        if self._poller.busy():
            return {"error": "a GPU call of an earlier poll is still hung inside amdsmi"}
        lock = self._poller.lock
        if not lock.acquire(timeout=wait):
            return {"error": f"the poll held the GPU lock for over {wait:g}s"}
        try:
            return dump_unit(self._backend, indices)
        finally:
            lock.release()
