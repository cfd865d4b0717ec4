"""The typed events the fault sources deliver, and the tally every source keeps of bad input.

A ``KernelEvent`` is one fault the kernel log reported, tied to a GPU by PCI BDF when the
line (or the DRM minor it names) says which; ``bdf`` is None when the driver did not say.
Values a line did not carry are None, never 0: "no count printed" is not "zero errors".
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Literal

EventKind = Literal[
    "ras_error",  # RAS report: uncorrectable / correctable / deferred / poison / fatal
    "aca_bank",  # an Accelerator Check Architecture bank dump (registers of one RAS event)
    "gpu_reset",  # GPU reset begin / method / succeeded / failed / VRAM lost
    "ring_reset",  # a per-ring (queue) reset, tried before a whole-GPU reset
    "ring_timeout",  # a job timed out on a ring (a GPU hang)
    "page_fault",  # a GPU page fault (VM fault) with the faulting address and process
    "firmware_error",  # a firmware load or IP-block init failure
    "pcie_aer",  # a PCIe AER report whose source is one of the GPUs
]
"""Every kind of event the kernel log source can deliver (stable names: rules match them)."""

EVENT_KINDS: tuple[str, ...] = EventKind.__args__  # type: ignore[attr-defined]


@dataclass(frozen=True, slots=True)
class KernelEvent:
    """One fault reported in the kernel log.

    ``at`` is the wall time (Unix seconds) the kernel logged it, from the journal's realtime
    stamp or the kmsg monotonic stamp plus the boot time, else the time it was read.
    ``key`` identifies the first line of the event in its source (journal cursor, or
    ``boot_id:seq`` for kmsg, or ``file:offset``): a consumer can drop a repeat by it.
    ``fields`` holds the kind's own values (see the parser's docstring per kind); ``lines``
    the raw message lines it was built from, kept as evidence.
    """

    kind: EventKind
    bdf: str | None
    at: float
    fields: dict[str, Any]
    lines: tuple[str, ...]
    key: str = ""

    def get(self, name: str) -> Any:
        return self.fields.get(name)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form for the event log (the raw lines kept as evidence)."""
        return {
            "source": "kernel_log",
            "kind": self.kind,
            "bdf": self.bdf,
            "at": self.at,
            "key": self.key,
            "fields": dict(self.fields),
            "lines": list(self.lines),
        }


@dataclass(slots=True)
class Tally:
    """Counts of what a source met, by kind, and which kinds were already logged once.

    ``note`` returns True the first time a kind is met, so the caller logs each kind of bad
    input once (with a sample) and only counts the rest: a stream of malformed lines must
    not become a stream of log lines.
    """

    counts: Counter[str] = field(default_factory=Counter)
    _logged: set[str] = field(default_factory=set)

    def note(self, kind: str, n: int = 1) -> bool:
        self.counts[kind] += n
        if kind in self._logged:
            return False
        self._logged.add(kind)
        return True

    def __getitem__(self, kind: str) -> int:
        return self.counts[kind]

    def snapshot(self) -> dict[str, int]:
        return dict(self.counts)
