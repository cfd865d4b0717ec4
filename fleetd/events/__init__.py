"""fleetd.events — fault sources beyond polling: the kernel log and CPER records with AFIDs.

Building blocks the daemon wires in (none of them reads the clock for logic or blocks the
poll):

- ``KernelLogParser`` / ``KernelLogFollower`` (kernel_log.py, follow.py): amdgpu's kernel
  messages — RAS reports, resets, ring timeouts, page faults, firmware failures, PCIe AER —
  as ``KernelEvent``s, followed from the journal, /dev/kmsg or a file, resumed by cursor.
- ``decode_cper_entries`` / ``CperReader`` (cper.py): records of
  ``amdsmi_get_gpu_cper_entries`` decoded (severity, time, sections, AFIDs, raw bytes),
  read forward from a persisted per-GPU cursor, stale records marked.
- ``AfidTable`` (afid.py): AFID → action (none, reset, reboot, physical) from the shipped
  ``fleetd/data/afid_actions.yaml`` and an operator's override file.
"""

from fleetd.events.afid import ActionKind, AfidDecision, AfidTable
from fleetd.events.cper import (
    CperBatch,
    CperReader,
    CperRecord,
    CperSectionDescriptor,
    amdsmi_afid_decoder,
    decode_cper_entries,
    is_partition_zero,
)
from fleetd.events.follow import KernelLogConfig, KernelLogFollower
from fleetd.events.kernel_log import KernelLine, KernelLogParser
from fleetd.events.model import EVENT_KINDS, EventKind, KernelEvent, Tally

__all__ = [
    "EVENT_KINDS",
    "ActionKind",
    "AfidDecision",
    "AfidTable",
    "CperBatch",
    "CperReader",
    "CperRecord",
    "CperSectionDescriptor",
    "EventKind",
    "KernelEvent",
    "KernelLine",
    "KernelLogConfig",
    "KernelLogFollower",
    "KernelLogParser",
    "Tally",
    "amdsmi_afid_decoder",
    "decode_cper_entries",
    "is_partition_zero",
]
