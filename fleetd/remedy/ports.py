"""What remediation needs from the GPU backend, as structural protocols.

``fleetd.collect.amdsmi_backend.AmdSmiBackend`` and the simulator-backed backend satisfy
these without importing anything from here; tests and the benchmark pass either.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from fleetd.events.afid import AfidTable
from fleetd.model import Alert, GpuIdentity, Snapshot


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


@runtime_checkable
class PartitionControl(Protocol):
    """Partition modes of the physical GPUs, for the check after a reset (the real backend
    has these; a backend without them has no partitions to check)."""

    def partition_modes(self) -> dict[str, tuple[str | None, str | None]]:
        """(compute, memory) mode per physical GPU (its partition 0's BDF), read now."""
        ...

    def set_partition_modes(self, bdf: str, compute: str, memory: str) -> None:
        """Put the physical GPU at ``bdf`` in these modes; raises BackendError on failure."""
        ...


class HealthPoller(Protocol):
    """One poll of every GPU, in the catalog's metric names."""

    def poll(self, now: float) -> Snapshot: ...


class AlertView(Protocol):
    """The rules engine as verification reads it (``fleetd.rules.engine.RuleEngine``)."""

    @property
    def last_eval_at(self) -> float | None:
        """When the rules last evaluated (None before the first evaluation)."""
        ...

    def health_alerts(self) -> list[Alert]:
        """Alerts of the rules that count towards GPU health."""
        ...


class IncidentLike(Protocol):
    """An open fault incident (``fleetd.events.incidents.Incident``)."""

    @property
    def opened_at(self) -> float: ...
    @property
    def action(self) -> str: ...
    @property
    def why(self) -> str: ...
    @property
    def classified(self) -> str: ...


class ResetEvidenceLike(Protocol):
    """The driver's word on resets (``fleetd.events.service.ResetEvidence``)."""

    @property
    def succeeded(self) -> Mapping[int, str]: ...
    @property
    def failed(self) -> Mapping[int, str]: ...


class FaultEvents(Protocol):
    """What remediation reads of the event sources (``fleetd.events.service.EventService``):
    the incident of a GPU, how long a run waits for the rest of it, the AFID table in force,
    and the reset evidence."""

    @property
    def settle(self) -> float: ...
    @property
    def afids(self) -> AfidTable: ...

    def incident(self, gpu: int) -> IncidentLike | None: ...

    def reset_evidence(self, gpus: Iterable[int], since: float) -> ResetEvidenceLike: ...


class GpuDumper(Protocol):
    """Everything fleetd reads of the unit's GPUs, raw (``fleetd.collect.dump.dump_unit``
    behind the poll lock): the evidence bundle's GPU section."""

    def __call__(self, indices: Sequence[int]) -> dict[str, Any]: ...


class FaultLog(Protocol):
    """The store's event log as the bundle reads it (``fleetd.store.events.EventLog.query``):
    CPER records and kernel events the event sources wrote."""

    def __call__(
        self, *, kinds: Iterable[str] | None = ..., since: float | None = ..., limit: int = ...
    ) -> Sequence[Any]: ...
