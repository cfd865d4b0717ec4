"""What a notification says about the GPU an alert is about: serial, BDF, product, firmware.

An RMA needs the serial number and whoever replaces a board needs its bus address, so
PagerDuty's ``custom_details`` carry them. The dispatcher asks a ``GpuDetails`` function
(given an alert's ``gpu`` label value) when it decides a notification and stores the answer in
it, so a redelivery after a restart says what was true when the alert was notified. An unknown
GPU, or a lookup that fails, gives no fields, never an error.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from fleetd.logs import get_logger
from fleetd.model import GpuIdentity

GpuDetails = Callable[[str], Mapping[str, str]]
"""``gpu`` label value → fields such as serial, bdf, product, vbios (empty when unknown)."""

IDENTITY_FIELDS = ("serial", "bdf", "product", "model", "vbios", "driver_version", "uuid")


def identity_details(identity: GpuIdentity) -> dict[str, str]:
    """The fields of ``identity`` worth a notification, those the backend knows."""
    out: dict[str, str] = {}
    for name in IDENTITY_FIELDS:
        value = getattr(identity, name)
        if value is not None and str(value):
            out[name] = str(value)
    return out


def details_from(gpus: Callable[[], Iterable[GpuIdentity]]) -> GpuDetails:
    """A ``GpuDetails`` over the backend's current identities (``backend.gpus``)."""

    def lookup(gpu: str) -> Mapping[str, str]:
        for identity in gpus():
            if str(identity.index) == gpu:
                return identity_details(identity)
        return {}

    return lookup


def collect(lookup: GpuDetails | None, gpus: Iterable[str | None]) -> dict[str, dict[str, str]]:
    """Details per distinct ``gpu`` label value; failures and unknown GPUs are left out."""
    out: dict[str, dict[str, str]] = {}
    if lookup is None:
        return out
    for gpu in gpus:
        if not gpu or gpu in out:
            continue
        try:
            fields = {str(k): str(v) for k, v in lookup(gpu).items() if v is not None}
        except Exception as exc:  # a notification never fails for want of a serial number
            get_logger("alert.gpuinfo").warning(
                "gpu_details_failed", gpu=gpu, error=type(exc).__name__
            )
            continue
        if fields:
            out[gpu] = fields
    return out
