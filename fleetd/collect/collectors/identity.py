"""``fleetd_gpu_info``: one series per GPU whose labels carry its identity."""

from __future__ import annotations

from fleetd.collect.source import GpuSource
from fleetd.model import GpuIdentity, Reading

INFO = "fleetd_gpu_info"
_MEMO = "identity_info_labels"


def info_labels(gpu: GpuIdentity) -> tuple[tuple[str, str], ...]:
    """Identity labels beyond gpu/uuid; unknown fields are empty strings, as Prometheus does."""

    def text(value: object) -> str:
        return "" if value is None else str(value)

    return (
        ("bdf", gpu.bdf),
        ("serial", text(gpu.serial)),
        ("product", text(gpu.product)),
        ("model", text(gpu.model)),
        ("vbios", text(gpu.vbios)),
        ("driver_version", text(gpu.driver_version)),
        ("kfd_id", text(gpu.kfd_id)),
        ("hip_id", text(gpu.hip_id)),
        ("hive_id", text(gpu.hive_id)),
    )


class IdentityCollector:
    """Identity is read at discovery; this only publishes it (value always 1)."""

    name = "identity"
    needs_gpu = False

    def collect(self, gpu: GpuSource, now: float) -> list[Reading]:
        identity = gpu.identity
        memo = gpu.memo()
        known = memo.get(_MEMO)
        if known is None or known[0] is not identity:  # built once per identity read
            known = memo[_MEMO] = (identity, identity.labels_with(info_labels(identity)))
        return [Reading(INFO, known[1], 1.0, now)]
