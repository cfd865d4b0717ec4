"""What collectors and remediation see of the GPUs: small protocols, no amdsmi.

``GpuSource`` is one GPU's raw amdsmi calls (results exactly as amdsmi returns them; failures
raised as ``ReadError`` with a short stable reason). ``GpuBackend`` is the node-wide view the
poller and remediation use. ``fleetd.collect.amdsmi_backend.AmdSmiBackend`` implements both
over the real amdsmi module or the simulator.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from fleetd.model import GpuIdentity

T = TypeVar("T")

# Reasons a whole raw call failed (besides amdsmi status names such as "not_supported").
REASON_GPU_MISSING = "gpu_missing"
REASON_TIMEOUT = "timeout"
REASON_ERROR = "error"

UNSUPPORTED_ON_SKU: frozenset[str] = frozenset({"not_supported", "invalid_argument"})
"""Answers that mean "this call does not work on this GPU model": NOT_SUPPORTED, and INVAL,
which amdsmi returns when the driver's sysfs node fails EINVAL (XGMI error status on
gfx942/gfx950, ROCm/rocm-systems#11468). See ``GpuSource.feature``."""


class ReadError(Exception):
    """A raw GPU call failed; ``reason`` is a short stable token for the missing reading.

    Examples: ``not_supported``, ``no_perm``, ``busy``, ``gpu_missing``, ``error``.
    ``detail`` keeps the library's own words for logs.
    """

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True, slots=True)
class GpuProcess:
    """A process holding a GPU, from amdsmi_get_gpu_process_list."""

    pid: int
    name: str | None
    memory_bytes: int | None


class GpuSource(Protocol):
    """One GPU's raw amdsmi calls, plus small per-GPU caches the collectors share.

    Every raw call returns the amdsmi result unchanged (dicts, lists, ints, "N/A", sentinels);
    conversion is ``fleetd.collect.parse``'s job. Enum arguments are given by member name
    (``temp_metric("HOTSPOT", "CRITICAL")``) so collectors never import amdsmi.
    """

    @property
    def identity(self) -> GpuIdentity: ...

    @property
    def present(self) -> bool: ...

    def static(self, key: str, read: Callable[[], T]) -> T:
        """``read()`` once and keep it until rediscovery (limits, VRAM size, ECC blocks).

        NOT_SUPPORTED is remembered too (it will not change until the driver reloads);
        other failures are retried next time.
        """
        ...

    def feature(self, key: str, read: Callable[[], T]) -> T:
        """``read()`` every time, until the library answers with a reason in
        ``UNSUPPORTED_ON_SKU``: from then on (until rediscovery) that error is raised again
        without calling, so an unreadable call is asked once, not every poll."""
        ...

    def per_poll(self, key: str, now: float, read: Callable[[], T]) -> T:
        """``read()`` at most once per poll time ``now``; collectors share the result/error."""
        ...

    def port_baseline(self, kind: str, seen_up: Iterable[int]) -> frozenset[int]:
        """Add ``seen_up`` (ports read up now) to the ports of ``kind`` this GPU has ever had
        up, and return them: the learned per-port baseline. It survives rediscovery and, when
        the backend has a state file, restarts (keyed by BDF and serial)."""
        ...

    def memo(self) -> dict[str, Any]:
        """Per-GPU state collectors keep between polls; reset on rediscovery."""
        ...

    def ras_blocks(self) -> Mapping[str, int]:
        """RAS block names (lower-case) → AmdSmiGpuBlock bit values, real blocks only."""
        ...

    # raw calls
    def temp_metric(self, sensor: str, metric: str) -> object: ...
    def power_info(self) -> dict[str, object]: ...
    def power_cap_info(self) -> dict[str, object]: ...
    def energy_count(self) -> dict[str, object]: ...
    def total_ecc_count(self) -> dict[str, object]: ...
    def ecc_count(self, block: str) -> dict[str, object]: ...
    def ecc_enabled(self) -> object: ...
    def bad_page_info(self) -> object: ...
    def bad_page_threshold(self) -> object: ...
    def pcie_info(self) -> dict[str, Any]: ...
    def xgmi_error_status(self) -> object: ...
    def xgmi_link_status(self) -> dict[str, Any]: ...
    def link_metrics(self) -> dict[str, Any]: ...
    def gpu_metrics(self) -> dict[str, Any]: ...
    def activity(self) -> dict[str, object]: ...
    def vram_used_sysfs(self) -> int | None: ...

    def memory_usage(self, mem_type: str) -> object: ...
    def memory_total(self, mem_type: str) -> object: ...
    def clock_info(self, clock_type: str) -> dict[str, object]: ...
    def process_list(self) -> list[dict[str, Any]]: ...


class GpuBackend(Protocol):
    """The node-wide GPU view: enumeration, per-GPU sources, and what remediation calls."""

    def sources(self) -> Sequence[GpuSource]:
        """Every known GPU, present or vanished, in index order."""
        ...

    def gpus(self) -> list[GpuIdentity]: ...

    def present(self, index: int) -> bool: ...

    def reset_unit(self, index: int) -> list[int]: ...

    def reset_gpu(self, index: int) -> None: ...

    def processes(self, index: int) -> list[GpuProcess]: ...

    def compute_processes(self) -> list[int]: ...

    def rediscover(self) -> list[GpuIdentity]: ...

    def close(self) -> None: ...
