"""Which UUID each physical GPU had last time, so a UUID that changes keeps the GPU's history.

amdsmi 7.13 changes the UUID format (hardware-behaviour.md §2.4): every per-GPU series is
labelled with ``uuid``, so after a ROCm upgrade each would start afresh and the history (the
rules' windows, `fleetctl history`) would split in two. fleetd's own state is keyed on what
survives an upgrade — the board's serial number and its partition (the PCI function of its
BDF: partitions of one board share the serial), or the BDF where the serial is unknown — and
this ledger, a small JSON file in the state directory, remembers the UUID each had. At start
the daemon compares, renames the ``uuid`` label of the stored series of every GPU whose UUID
changed, and records it in the event log. Alert identity does not use the UUID at all
(``model.identity_labels``), so an alert firing across the change stays one incident.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from fleetd.logs import get_logger
from fleetd.model import GpuIdentity
from fleetd.statefile import StateFile

log = get_logger("collect.identities")

LEDGER_FILE = "gpu-identities.json"
_UNKNOWN_SERIALS = {"", "N/A", "0", "0x0", "FFFFFFFFFFFFFFFF", "0xFFFFFFFFFFFFFFFF"}


@dataclass(frozen=True, slots=True)
class UuidChange:
    """One GPU whose UUID is not the one it had last time."""

    key: str
    gpu: int
    old: str
    new: str


def stable_key(identity: GpuIdentity) -> str:
    """``serial:<serial>/fn<n>`` (partition = PCI function), else ``bdf:<bdf>``."""
    serial = (identity.serial or "").strip()
    if serial.upper() in _UNKNOWN_SERIALS:
        return f"bdf:{identity.bdf}"
    function = identity.bdf.rsplit(".", 1)[-1] if "." in identity.bdf else "0"
    return f"serial:{serial}/fn{function}"


class IdentityLedger:
    """The last UUID of each GPU by its stable key; unreadable files start it afresh."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file = StateFile(path.parent, path.name)

    def load(self) -> dict[str, str]:
        data = self._file.load(
            lambda why: log.warning("gpu_identities_unreadable", path=str(self.path), error=why)
        )
        return {str(k): str(v) for k, v in (data or {}).items() if isinstance(v, str)}

    def reconcile(self, identities: Iterable[GpuIdentity]) -> list[UuidChange]:
        """The GPUs whose UUID changed since the last run; remembers the new ones."""
        known = self.load()
        changes: list[UuidChange] = []
        current = dict(known)
        for identity in identities:
            key = stable_key(identity)
            old = known.get(key)
            if old is not None and old != identity.uuid:
                changes.append(UuidChange(key, identity.index, old, identity.uuid))
            current[key] = identity.uuid
        if current != known:
            self._save(current)
        return changes

    def _save(self, data: dict[str, str]) -> None:
        try:
            self._file.save(dict(data))
        except OSError as exc:  # a read-only state dir: the next start compares again
            log.warning("gpu_identities_not_saved", path=str(self.path), error=exc.strerror)
