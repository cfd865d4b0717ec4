"""The ``events:`` section of fleetd.yaml: fault sources beyond polling.

The kernel log follower, the CPER reader and the KFD event reader (fleetd.events) run beside
the poll; what they read is stored in the event log and fed to the rules at once
(docs/rules.md, "Events").
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, StrictBool, field_validator, model_validator

from fleetd.configbase import Duration, Span, StrictModel, documents


class KernelLogSection(StrictModel):
    """Where amdgpu's kernel messages (RAS reports, resets, ring timeouts, page faults,
    firmware failures, PCIe AER) are read from."""

    source: Literal["auto", "journal", "kmsg", "file", "off"] = "auto"
    """`auto`: the systemd journal where journald runs, else /dev/kmsg; `journal`
    (journalctl), `kmsg` (/dev/kmsg), `file` (follow `path`: kmsg records or journal JSON
    lines), or `off`. `fleetd demo` and `--simulate` follow the simulator's kernel log file
    whatever this says (unless `off`).
    """
    path: Path | None = None
    """The file `source: file` follows."""

    @model_validator(mode="after")
    @documents("source: file needs a path")
    def _file_needs_path(self) -> KernelLogSection:
        if self.source == "file" and self.path is None:
            raise ValueError("source: file needs a path")
        return self


CperSeverity = Literal["fatal", "non_fatal_uncorrected", "non_fatal_corrected"]
CPER_SEVERITIES: tuple[CperSeverity, ...] = (
    "fatal",
    "non_fatal_uncorrected",
    "non_fatal_corrected",
)


class CperSection(StrictModel):
    """CPER records (amdsmi_get_gpu_cper_entries, root only) read per GPU from a persisted
    cursor; their AFIDs choose the remediation (fleetd/data/afid_actions.yaml)."""

    enabled: StrictBool = True
    """Read each GPU's CPER ring. Without root amdsmi refuses; that is logged once."""
    interval: Annotated[Duration, Span(0, "1h", above=True)] = 1.0
    """How often each GPU's ring is read (a read of an unchanged ring is one cheap call)."""
    max_age: Annotated[Duration, Span(0, "365d", above=True)] = 86400.0
    """Records already in the ring when fleetd starts that are older than this (or from before
    the boot) are stored as evidence but never make a GPU unhealthy.
    """
    afid_overrides: Path | None = None
    """An operator's AFID → action file (same format as the shipped
    fleetd/data/afid_actions.yaml): its entries extend or override the shipped ones.
    """
    severities: list[CperSeverity] = Field(
        default_factory=lambda: list(CPER_SEVERITIES), min_length=1
    )
    """The record severities read (the amdsmi severity mask). Corrected records only count
    (`fleetd_gpu_cper_records_total`); drop `non_fatal_corrected` on a node whose ring fills
    with them."""

    @field_validator("severities")
    @classmethod
    @documents("cper.severities: a severity is listed twice")
    def _no_repeats(cls, value: list[str]) -> list[str]:
        if len(set(value)) != len(value):
            raise ValueError("a severity is listed twice")
        return value


AmdsmiEventName = Literal[
    "vmfault",
    "thermal_throttle",
    "gpu_pre_reset",
    "gpu_post_reset",
    "migrate_start",
    "migrate_end",
    "page_fault_start",
    "page_fault_end",
    "queue_eviction",
    "queue_restore",
    "unmap_from_gpu",
    "process_start",
    "process_end",
]


DEVICE_WIDE_EVENTS: tuple[AmdsmiEventName, ...] = (
    "vmfault",
    "thermal_throttle",
    "gpu_pre_reset",
    "gpu_post_reset",
)


class AmdsmiEventsSection(StrictModel):
    """KFD SMI events (AmdSmiEventReader): one thread reads every GPU's."""

    enabled: StrictBool = True
    """Read them. Needs /dev/kfd (root, or the render and video groups)."""
    events: list[AmdsmiEventName] = Field(
        default_factory=lambda: list(DEVICE_WIDE_EVENTS), min_length=1
    )
    """Which events. The default four are broadcast to every reader; the others are tagged
    with a process and reach fleetd only as root (fleetd then asks for every process's).
    `page_fault_start` cannot be received through amdsmi 7.0.2 (its enum numbers it 8 and its
    read() drops the real event 7): listing it is logged and ignored."""
    read_timeout: Annotated[Duration, Span(0, "5s", above=True)] = 1.0
    """How long one read waits for events (the thread's wake-up; an event is delivered at
    once whatever this is). Each wake-up costs CPU on an idle node; a stop waits for it."""


class IncidentSection(StrictModel):
    """One uncorrectable fault, however many sources report it, is one incident: its first
    report pages, the rest join it, and its remediation plan is decided once."""

    settle: Annotated[Duration, Span(0, "5m")] = 3.0
    """How long a remediation run opened for an incident waits, before it takes the node
    slot, for the fault's other reports (the CPER record with its AFID is read every
    `cper.interval`): a more severe action among them (physical, reboot) replaces the plan."""
    max_age: Annotated[Duration, Span(0, "30d", above=True)] = 3600.0
    """An incident no run verified (remediation off, or not allowed to act) closes this long
    after its last report; a run that verifies the GPU, or a reset the driver completes,
    closes it at once."""


class EventsConfig(StrictModel):
    """Fault sources beyond polling: the kernel log, CPER records and KFD SMI events."""

    kernel_log: KernelLogSection = Field(default_factory=KernelLogSection)
    """The kernel log source."""
    cper: CperSection = Field(default_factory=CperSection)
    """The CPER reader."""
    amdsmi_events: AmdsmiEventsSection = Field(default_factory=AmdsmiEventsSection)
    """The KFD SMI event reader."""
    incident: IncidentSection = Field(default_factory=IncidentSection)
    """How reports of one uncorrectable fault become one incident."""
