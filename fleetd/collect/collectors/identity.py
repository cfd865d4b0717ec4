"""``fleetd_gpu_info``: one series per GPU whose labels carry its identity."""

from __future__ import annotations

from fleetd.collect.base import Readings
from fleetd.collect.source import GpuSource
from fleetd.model import GpuIdentity, Reading

INFO = "fleetd_gpu_info"


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
        out = Readings(gpu.identity, now)
        out.add(INFO, 1.0, labels=info_labels(gpu.identity))
        return out.items
