"""Parse amdgpu's kernel messages into typed events tied to a GPU.

The formats are the driver's own (amdgpu_ras.c, ras_aca.c, amdgpu_job.c, gmc_v9_0.c,
amdgpu_device.c, amdgpu_psp.c, the PCI core's aer.c) as they appear in public bug reports;
tests/events/fixtures/ holds real lines with their sources. Kinds and their fields:

- ``ras_error``: ``severity`` (uncorrectable, correctable, deferred, poison, fatal), ``block``
  (umc, gfx, xgmi_wafl, ... or None), ``count`` (new errors this report, None if the line
  has none), ``total`` (running total the driver printed, or None), ``socket``, ``die``,
  ``event_id`` (the driver's ``{N}`` RAS event number), ``source`` (the interrupt named by a
  fatal report), ``state`` (poison: created or consumed), ``client``.
- ``aca_bank``: ``banks`` (list of {register: value}), ``event_id``.
- ``gpu_reset``: ``phase`` (begin, method, resuming, succeeded, failed, skipped, vram_lost,
  wedged_recovered), ``counter`` (the driver's reset counter), ``source``, ``method``,
  ``error``.
- ``ring_reset``: ``phase`` (begin, succeeded, failed), ``ring``.
- ``ring_timeout``: ``ring``, ``signaled``, ``emitted``, ``process``, ``pid``, ``thread``,
  ``tid``.
- ``page_fault``: ``hub``, ``retry``, ``src_id``, ``ring_id``, ``vmid``, ``pasid``,
  ``process``, ``pid``, ``thread``, ``tid``, ``address``, ``client``, ``status``.
- ``firmware_error``: ``stage`` (request, load, ip_init, gpu_init, probe, psp), ``firmware``,
  ``ip_block``, ``error``, ``detail``.
- ``pcie_aer``: ``severity`` (corrected, nonfatal, fatal), ``multiple``, ``layer``,
  ``agent``, ``reporter`` (the port that reported it), ``status``, ``mask``, ``errors``
  (names of the error bits), ``recovery``.

Several kinds span lines (a ring timeout and the process line after it, a page fault and its
address line, an AER report and its status lines). The parser keeps one event per device
open until its continuation is complete-enough: another event for that device, or
``flush()``, which the follower calls at the end of every read (the kernel writes one
report's lines together, so they arrive in one read).

Bad input never raises and never becomes a fault: an amdgpu line that names a fault word but
matches no pattern is counted ``unparsed`` (and logged once by the follower); other amdgpu
lines are ``routine``; lines of other drivers are ``ignored`` after a cheap substring test.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from fleetd.events.model import EventKind, KernelEvent, Tally

_BDF = r"[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]"
_DEVICE = re.compile(rf"^(?P<drv>[\w.-]+) (?P<bdf>{_BDF}): ?(?P<rest>.*)$", re.S)
_PREFIX = re.compile(
    r"^(?:amdgpu: |\[drm(?::[\w.]+(?: \[amdgpu\])?)?\] (?:\*ERROR\* )?|\[drm ERROR :\w+\] )+"
)
_EVENT_ID = re.compile(r"^\{(\d+)\}\s*")
_HW_ERR = "[Hardware Error]:"
_FAULT_WORDS = re.compile(
    r"error|fail|(?<!de)fault|timeout|timed out|reset|uncorrect|poison|hang|\bRAS\b|lost|fatal|"
    r"wedged|abort",
    re.I,
)
MAX_ACA_BANKS = 64
"""Most ACA banks one event lists (MI300X logs a handful; a mangled index is not a size)."""
_OTHER_DRM = re.compile(r"\[drm:[\w.]+ \[(?!amdgpu\])[\w-]+\]\]")
"""``[drm:r600_ib_test [radeon]]``: another DRM driver's message (radeon, i915, ...)."""
_CARD = re.compile(r"\bcard(\d+)\b")
_ROUTINE = re.compile(
    r"^(?:reset (?:compute|gfx|sdma|kernel) queue \(|\S+ ECC is (?:active|not presented)|"
    r"RAS: optional ras ta ucode is not available|GPU reset\(\d+\) started)"
)
"""amdgpu lines with a fault word that report no fault (steps of a recovery, boot notes)."""


@dataclass(frozen=True, slots=True)
class KernelLine:
    """One kernel message as a source read it: the text (no timestamp prefix), the wall time
    it was logged if the source knows it, and its position in the source (for event keys)."""

    message: str
    at: float | None = None
    key: str = ""


def normalize_bdf(text: str) -> str:
    """``0000:C1:00.0`` → ``0000:c1:00.0`` (amdsmi prints BDFs lower-case)."""
    return text.lower()


# ---------------------------------------------------------------------------------- patterns
# Each pattern returns (kind, fields) for a first line, or (continuation tag, fields).
Fields = dict[str, Any]


def _int(text: str | None, base: int = 10) -> int | None:
    return None if text is None else int(text, base)


_RAS_COUNT = re.compile(
    r"^(?:socket: (?P<socket>\d+), die: (?P<die>\d+),? )?(?P<count>\d+) (?P<new>new )?"
    r"(?P<what>uncorrectable hardware errors|correctable hardware errors|"
    r"deferred hardware errors|poison consumption) detected (?P<total>in total )?"
    r"in (?P<block>[\w.-]+) block(?:, no user action is needed\.?)?$"
)
_RAS_SEVERITY = {
    "uncorrectable hardware errors": "uncorrectable",
    "correctable hardware errors": "correctable",
    "deferred hardware errors": "deferred",
    "poison consumption": "poison",
}
_RAS_FATAL = re.compile(r"^uncorrectable hardware error\((?P<source>\w+)\) detected!?$")
_POISON_CONSUMED = re.compile(
    r"^(?:poison is consumed by client (?P<c1>\d+), kick off gpu reset flow|"
    r"RAS poison consumption, (?:fall back to gpu reset flow|unmap queue flow succeeded): "
    r"client id (?P<c2>\d+))$"
)
_POISON_CREATED = re.compile(r"^Poison is created$")
_ACA_HEAD = re.compile(r"^Accelerator Check Architecture events logged$")
_ACA_REG = re.compile(
    r"^(?:aca entry\[(?P<i>\d+)\]|ACA\[(?P<j>\d+)/\d+\])\.(?P<reg>\w+)=0x(?P<val>[0-9a-fA-F]+)$"
)

_RESET_BEGIN = re.compile(r"^GPU reset begin!(?:\. Source: +(?P<source>\d+))?$")
_RESET_RESUMING = re.compile(r"^GPU reset succeeded, trying to resume$")
_RESET_OK = re.compile(r"^GPU reset\((?P<counter>\d+)\) succeeded!$")
_RESET_FAILED = re.compile(
    r"^(?:GPU reset\((?P<counter>\d+)\) failed(?: with error (?P<e1>-?\d+))?|"
    r"GPU reset end with ret = (?P<e2>-?\d+)|GPU Recovery Failed: (?P<e3>-?\d+)|"
    r"GPU (?:(?:psp|smu) )?(?P<method>MODE1|MODE2|BACO|mode1|mode2|baco) reset failed)\s*$"
)
_RESET_METHOD = re.compile(
    r"^(?:GPU )?(?:(?:psp|smu) )?(?P<method>MODE1|MODE2|BACO|mode1|mode2|baco) reset$"
)
_RESET_SKIPPED = re.compile(r"^Guilty job already signaled, skipping HW reset$")
_VRAM_LOST = re.compile(r"^VRAM is lost(?: due to GPU reset)?!$")
_WEDGED = re.compile(r"^device wedged, but recovered through reset$")
_RING_RESET = re.compile(
    r"^(?:Starting (?P<r1>\S+) ring reset|Ring (?P<r2>\S+) reset (?P<result>succeeded|failed))$"
)

_RING_TIMEOUT = re.compile(
    r"^ring (?P<ring>\S+) timeout, signaled seq=(?P<signaled>\d+), emitted seq=(?P<emitted>\d+)$"
)
_PROCESS = re.compile(
    r"^(?:Process information: process|Process|in process|for process) (?P<process>.*?) "
    r"pid (?P<pid>\d+) thread (?P<thread>.*?) pid (?P<tid>\d+)\)?$"
)
_PAGE_FAULT = re.compile(
    r"^\[(?P<hub>\w+)\] (?:(?P<retry>retry|no-retry) )?page fault \(src_id:(?P<src>\d+) "
    r"ring:(?P<ring>\d+) vmid:(?P<vmid>\d+) pasid:(?P<pasid>\d+)(?:, for process "
    r"(?P<process>.*?) pid (?P<pid>\d+) thread (?P<thread>.*?) pid (?P<tid>\d+))?\)$"
)
_FAULT_ADDR = re.compile(
    r"^in page starting at address 0x(?P<addr>[0-9a-fA-F]+) from (?:IH )?client "
    r"(?:0x(?P<hex>[0-9a-fA-F]+)|(?P<dec>\d+))(?: \((?P<name>[^)]*)\))?$"
)
_FAULT_STATUS = re.compile(r"^(?:GC|MM)?VM_L2_PROTECTION_FAULT_STATUS:0x(?P<status>[0-9a-fA-F]+)$")
_FAULT_DETAIL = re.compile(
    r"^(?:Faulty UTCL2 client ID|MORE_FAULTS|WALKER_ERROR|PERMISSION_FAULTS|MAPPING_ERROR|"
    r"RW|CID|cookie node_id)\b.*$"
)

_FW_REQUEST = re.compile(r"^Direct firmware load for (?P<fw>\S+) failed with error (?P<e>-?\d+)$")
_FW_LOAD = re.compile(
    r'^(?:Failed to load (?:gpu_info firmware "(?P<fw>[^"]+)"|(?P<what>\w+) firmware!?)|'
    r'(?:(?P<what4>\w+)(?: v[\d.]+)?: )?Failed to load firmware "(?P<fw2>[^"]+)"|'
    r"fail to request/validate (?P<what2>\w+) microcode|PSP firmware loading failed|"
    r"PSP load (?P<what3>[\w ]+?) failed!?|PSP create ring failed!?)$"
)
_FW_IP = re.compile(
    r"^(?P<stage>sw_init|hw_init|early_init|late_init) of IP block <(?P<ip>[\w.]+)> "
    r"failed (?P<e>-?\d+)$"
)
_FW_UCODE = re.compile(
    r"^(?:failed to load ucode id \((?P<u1>\d+)\)|failed loading with status \((?P<s1>-?\d+)\) "
    r"and ucode id \((?P<u2>\d+)\)|"
    r"psp gfx command (?P<cmd>\w+(?: \w+)*)\(0x[0-9a-fA-F]+\) failed and "
    r"response status is \((?P<s2>0x[0-9a-fA-F]+|-?\d+)\)|psp command failed and response "
    r"status is \((?P<s3>0x[0-9a-fA-F]+|-?\d+)\))\s*$"
)
_FW_INIT = re.compile(r"^(?:Fatal error during GPU init|amdgpu_device_ip_init failed)$")
_FW_PROBE = re.compile(rf"^probe of (?P<bdf>{_BDF}) failed with error (?P<e>-?\d+)$")
_DRM_MINOR = re.compile(  # older kernels print the driver date after the version
    rf"^Initialized amdgpu [\w.]+(?: \d{{8}})? for (?P<bdf>{_BDF}) on minor (?P<minor>\d+)$"
)

_AER_RECEIVED = re.compile(
    r"^AER: (?P<multi>Multiple )?(?P<sev>Corrected|Correctable|Uncorrected \(Non-Fatal\)|"
    r"Uncorrectable \(Non-Fatal\)|Uncorrected \(Fatal\)|Uncorrectable \(Fatal\)) error "
    rf"(?:message )?received(?: from|:) (?:id=(?P<id>[0-9a-fA-F]{{4}})|(?P<src>{_BDF}))$"
)
_AER_BUS_ERROR = re.compile(
    r"^PCIe Bus Error: severity=(?P<sev>[^,]+), type=(?P<layer>[^,]+), "
    r"(?:id=[0-9a-fA-F]{4})?\((?P<agent>[^)]+)\)$"
)
_AER_STATUS = re.compile(
    r"^device \[(?P<vid>[0-9a-fA-F]{4}):(?P<did>[0-9a-fA-F]{4})\] error status/mask="
    r"(?P<status>[0-9a-fA-F]{8})/(?P<mask>[0-9a-fA-F]{8})$"
)
_AER_BIT = re.compile(r"^\[\s*(?P<bit>\d+)\] (?P<name>.+?)(?:\s+\(First\))?$")
_AER_DETAIL = re.compile(
    r"^(?:TLP Header: .*|AER: (?:aer_status|aer_layer|aer_agent).*|aer_status:.*|aer_layer=.*)$"
)
_AER_RECOVERY = re.compile(
    r"^AER: (?P<what>can't recover \(no error_detected callback\)|[Dd]evice recovery "
    r"(?:failed|successful))$"
)
_AER_CONT_PREFIX = re.compile(r"^AER:\s+(?=PCIe Bus Error|device \[|\[|TLP Header)")
"""Since Linux 5.x the PCI core prefixes every line of an AER report with ``AER: ``."""
_AER_SEVERITY = {
    "Corrected": "corrected",
    "Correctable": "corrected",
    "Uncorrected (Non-Fatal)": "nonfatal",
    "Uncorrectable (Non-Fatal)": "nonfatal",
    "Uncorrected (Fatal)": "fatal",
    "Uncorrectable (Fatal)": "fatal",
}


# ---------------------------------------------------------------------------------- the parser
@dataclass(slots=True)
class _Open:
    """An event whose continuation lines may still come."""

    kind: EventKind
    bdf: str | None
    at: float
    key: str
    fields: Fields
    lines: list[str] = field(default_factory=list)
    seq: int = 0

    def close(self) -> KernelEvent:
        return KernelEvent(self.kind, self.bdf, self.at, self.fields, tuple(self.lines), self.key)


# continuation tag → the kinds of open event it belongs to
_CONTINUES: dict[str, frozenset[str]] = {
    "process": frozenset({"ring_timeout", "page_fault"}),
    "fault_addr": frozenset({"page_fault"}),
    "fault_status": frozenset({"page_fault"}),
    "fault_detail": frozenset({"page_fault"}),
    "aca_reg": frozenset({"aca_bank"}),
    "aer_status": frozenset({"pcie_aer"}),
    "aer_bit": frozenset({"pcie_aer"}),
    "aer_detail": frozenset({"pcie_aer"}),
    "aer_recovery": frozenset({"pcie_aer"}),
}
_MULTI_LINE = frozenset({"ring_timeout", "page_fault", "aca_bank", "pcie_aer", "ras_error"})


class KernelLogParser:
    """Turns kernel lines into ``KernelEvent``s; keeps no state but open events and the
    DRM minor → BDF map it learns from ``[drm] Initialized amdgpu ... on minor N``.

    ``gpus`` are the node's GPU BDFs: PCIe AER reports count only when their source is one
    of them (or an amdgpu device). ``cards`` maps DRM card/minor numbers to BDFs for the
    few lines that name a card but no BDF.
    """

    def __init__(self, gpus: Iterable[str] = (), cards: Mapping[int, str] | None = None) -> None:
        self.gpus = frozenset(normalize_bdf(b) for b in gpus)
        self.cards: dict[int, str] = {k: normalize_bdf(v) for k, v in (cards or {}).items()}
        self.tally = Tally()
        self.last_unparsed = ""
        self._open: dict[str | None, _Open] = {}
        self._ready: list[tuple[int, KernelEvent]] = []
        self._seq = 0

    def set_gpus(self, gpus: Iterable[str]) -> None:
        self.gpus = frozenset(normalize_bdf(b) for b in gpus)

    # ------------------------------------------------------------------ entry points
    def feed(self, line: KernelLine, now: float) -> list[KernelEvent]:
        """Events completed by this line (possibly none; open ones wait for ``flush``)."""
        text = line.message
        if (
            "amdgpu" not in text
            and "[drm" not in text
            and "AER" not in text
            and ("PCIe Bus Error" not in text)
            and not self._aer_open()
        ):
            self.tally.counts["ignored"] += 1
            return []
        try:
            self._feed(line, text.rstrip("\n"), now)
        except Exception:  # a parser bug must cost one line, never the follower
            self.tally.note("parser_error")
        return self._release()

    def _aer_open(self) -> bool:
        """An AER report is open: its status lines (printed by the device's own driver,
        e.g. ``pcieport``, without the word AER on old kernels) must reach it."""
        return any(o.kind == "pcie_aer" for o in self._open.values())

    def flush(self) -> list[KernelEvent]:
        """Close every open event (the follower calls this when a read is done)."""
        for current in list(self._open.values()):
            self._done(current)
        self._open.clear()
        return self._release()

    def _release(self) -> list[KernelEvent]:
        """Completed events in the order of their first lines: one that completed early
        waits while an event that began before it is still open."""
        if not self._ready:
            return []
        self._ready.sort(key=lambda item: item[0])
        oldest_open = min((o.seq for o in self._open.values()), default=None)
        cut = len(self._ready)
        if oldest_open is not None:
            cut = next((i for i, (seq, _) in enumerate(self._ready) if seq > oldest_open), cut)
        out, self._ready = self._ready[:cut], self._ready[cut:]
        return [event for _, event in out]

    def _done(self, current: _Open) -> None:
        self._ready.append((current.seq, current.close()))
        self.tally.counts[f"event.{current.kind}"] += 1

    # ------------------------------------------------------------------ one line
    def _feed(self, line: KernelLine, text: str, now: float) -> None:
        device = _DEVICE.match(text)
        if device is not None:
            driver, bdf, rest = device["drv"], normalize_bdf(device["bdf"]), device["rest"]
        else:
            driver, bdf, rest = "", None, text
        body, event_id = _body(rest)
        at = line.at if line.at is not None else now
        is_amdgpu = driver == "amdgpu" or (
            ("amdgpu" in text or "[drm" in text) and _OTHER_DRM.search(text) is None
        )
        # another driver's line: only AER reports about a GPU concern us
        open_aer = bdf is not None and bdf in self._open and self._open[bdf].kind == "pcie_aer"
        if (driver not in ("", "amdgpu") and not is_amdgpu) and not (
            body.startswith(("AER:", "PCIe Bus Error")) or open_aer
        ):
            self.tally.counts["ignored"] += 1
            return
        body = _AER_CONT_PREFIX.sub("", body, count=1)
        if bdf is None:
            bdf = self._card_bdf(body)
        minor = _DRM_MINOR.match(body)
        if minor is not None:
            self.cards[int(minor["minor"])] = normalize_bdf(minor["bdf"])
            self.tally.counts["routine"] += 1
            return
        result = _classify(body)
        if result is None:
            self._unmatched(text, body, is_amdgpu)
            return
        tag, fields = result
        if tag in _CONTINUES or tag in ("ras_total", "aer_bus_error"):
            if tag == "ras_total" and event_id is not None:
                fields["event_id"] = event_id
            self._continue(tag, fields, driver, bdf, at, line.key, text)
            return
        kind: EventKind = tag  # type: ignore[assignment]
        if kind == "pcie_aer":
            bdf = self._aer_source(fields, bdf)
            if bdf is None:
                self.tally.counts["ignored"] += 1
                return
        if kind == "firmware_error" and fields.get("probe_bdf"):
            bdf = normalize_bdf(fields.pop("probe_bdf"))
        if event_id is not None and kind in ("ras_error", "aca_bank"):
            fields["event_id"] = event_id
        current = self._open.get(bdf)
        if (
            kind == "aca_bank"
            and event_id is not None
            and current is not None
            and current.kind == "aca_bank"
            and current.fields.get("event_id") == event_id
        ):
            # the driver prints the header before every bank of one event: same {N}, same event
            self._detail(current, text)
            return
        self._begin(_Open(kind, bdf, at, line.key, fields, [text]))

    def _begin(self, opened: _Open) -> None:
        """A new event: the device's open one is complete; this one waits for its details
        (kinds that have them) or is complete at once."""
        self._close(opened.bdf)
        self._seq += 1
        opened.seq = self._seq
        if opened.kind in _MULTI_LINE:
            self._open[opened.bdf] = opened
        else:
            self._done(opened)

    def _continue(
        self,
        tag: str,
        fields: Fields,
        driver: str,
        bdf: str | None,
        at: float,
        key: str,
        text: str,
    ) -> None:
        current = self._open.get(bdf)
        if tag == "ras_total":
            if current is not None and current.kind == "ras_error" and _same_ras(current, fields):
                current.fields["total"] = fields["total"]
                self._detail(current, text)
                return
            # a running total with no "new" line before it is an event of its own
            self._begin(_Open("ras_error", bdf, at, key, fields, [text]))
            return
        if tag == "aer_bus_error":
            if current is not None and current.kind == "pcie_aer":
                current.fields.update({k: v for k, v in fields.items() if v is not None})
                self._detail(current, text)
                return
            if bdf is None or (bdf not in self.gpus and driver != "amdgpu"):
                self.tally.counts["ignored"] += 1
                return
            fields.setdefault("multiple", False)
            self._begin(_Open("pcie_aer", bdf, at, key, fields, [text]))
            return
        if current is None or current.kind not in _CONTINUES[tag]:
            self.tally.counts["orphan_detail"] += 1
            return
        _merge(current, tag, fields)
        self._detail(current, text)

    def _detail(self, current: _Open, text: str) -> None:
        current.lines.append(text)
        self.tally.counts["detail"] += 1

    def _unmatched(self, text: str, body: str, is_amdgpu: bool) -> None:
        if not is_amdgpu:
            self.tally.counts["ignored"] += 1
        elif _FAULT_WORDS.search(body) and not _ROUTINE.match(body):
            self.tally.counts["unparsed"] += 1
            self.last_unparsed = text[:300]
        else:
            self.tally.counts["routine"] += 1

    def _close(self, bdf: str | None) -> None:
        current = self._open.pop(bdf, None)
        if current is not None:
            self._done(current)

    def _aer_source(self, fields: Fields, reporter: str | None) -> str | None:
        """The GPU an AER 'received from' line is about, or None (not one of ours)."""
        fields["reporter"] = reporter
        src = fields.pop("src", None)
        rid = fields.pop("rid", None)
        if src is None:
            if rid is None or reporter is None:
                return None
            value = int(rid, 16)
            src = f"{reporter[:4]}:{value >> 8:02x}:{(value >> 3) & 0x1F:02x}.{value & 7}"
        src = normalize_bdf(src)
        return src if src in self.gpus else None

    def _card_bdf(self, body: str) -> str | None:
        found = _CARD.search(body)
        if found is None:
            return None
        return self.cards.get(int(found.group(1)))


def _body(rest: str) -> tuple[str, int | None]:
    """The message without the driver's prefixes (``amdgpu: ``, ``[drm:f [amdgpu]] *ERROR* ``,
    ``{N}`` RAS event ids, ``[Hardware Error]:``) and the event id if there was one."""
    event_id: int | None = None
    body = rest
    for _ in range(3):
        body = _PREFIX.sub("", body.lstrip())
        found = _EVENT_ID.match(body)
        if found is not None:
            event_id = int(found.group(1))
            body = body[found.end() :]
        if body.startswith(_HW_ERR):
            body = body[len(_HW_ERR) :]
            continue
        if found is None:
            break
    return body.strip(), event_id


def _same_ras(current: _Open, total: Fields) -> bool:
    f = current.fields
    keys = ("severity", "block", "socket", "die", "event_id")
    return all(f.get(k) == total.get(k) for k in keys) and f.get("total") is None


def _merge(current: _Open, tag: str, fields: Fields) -> None:
    f = current.fields
    if tag in ("process", "fault_addr", "aer_status"):
        f.update(fields)
    elif tag == "fault_status":
        f["status"] = fields["status"]
    elif tag == "aca_reg":
        banks: list[dict[str, int]] = f.setdefault("banks", [])
        index = fields["index"]
        if not 0 <= index < MAX_ACA_BANKS:
            return  # a mangled bank number: keep the line as evidence, build nothing
        while len(banks) <= index:
            banks.append({})
        banks[index][fields["reg"]] = fields["value"]
    elif tag == "aer_bit":
        f.setdefault("errors", []).append(fields["name"])
    elif tag == "aer_recovery":
        f["recovery"] = fields["recovery"]


# ---------------------------------------------------------------------------------- classifier
Classified = tuple[str, Fields]


def _ras(m: re.Match[str]) -> Classified:
    fields: Fields = {
        "severity": _RAS_SEVERITY[m["what"]],
        "block": m["block"].lower(),
        "count": None,
        "total": None,
        "socket": _int(m["socket"]),
        "die": _int(m["die"]),
    }
    count = int(m["count"])
    if m["total"]:
        fields["total"] = count
        return "ras_total", fields
    fields["count"] = count
    return "ras_error", fields


def _ras_fatal(m: re.Match[str]) -> Classified:
    return "ras_error", {"severity": "fatal", "block": None, "count": None, "source": m["source"]}


def _poison_consumed(m: re.Match[str]) -> Classified:
    client = m["c1"] or m["c2"]
    return "ras_error", {
        "severity": "poison",
        "state": "consumed",
        "block": None,
        "count": None,
        "client": _int(client),
    }


def _reset(phase: str, **extra: Any) -> Callable[[re.Match[str]], Classified]:
    def build(m: re.Match[str]) -> Classified:
        fields: Fields = {"phase": phase}
        for name, group in extra.items():
            value = m[group]
            numeric = value is not None and value.lstrip("-").isdigit()
            fields[name] = int(value) if numeric else value
        return "gpu_reset", fields

    return build


def _reset_failed(m: re.Match[str]) -> Classified:
    error = m["e1"] or m["e2"] or m["e3"]
    fields: Fields = {"phase": "failed", "counter": _int(m["counter"]), "error": _int(error)}
    if m["method"] is not None:
        fields["method"] = m["method"].upper()
    return "gpu_reset", fields


def _ring_reset(m: re.Match[str]) -> Classified:
    if m["r1"] is not None:
        return "ring_reset", {"phase": "begin", "ring": m["r1"]}
    return "ring_reset", {"phase": m["result"], "ring": m["r2"]}


def _ring_timeout(m: re.Match[str]) -> Classified:
    return "ring_timeout", {
        "ring": m["ring"],
        "signaled": int(m["signaled"]),
        "emitted": int(m["emitted"]),
        "process": None,
        "pid": None,
        "thread": None,
        "tid": None,
    }


def _process(m: re.Match[str]) -> Classified:
    return "process", {
        "process": m["process"] or None,
        "pid": int(m["pid"]),
        "thread": m["thread"] or None,
        "tid": int(m["tid"]),
    }


def _page_fault(m: re.Match[str]) -> Classified:
    retry = m["retry"]
    return "page_fault", {
        "hub": m["hub"],
        "retry": None if retry is None else retry == "retry",
        "src_id": int(m["src"]),
        "ring_id": int(m["ring"]),
        "vmid": int(m["vmid"]),
        "pasid": int(m["pasid"]),
        "process": m["process"] or None,
        "pid": _int(m["pid"]),
        "thread": m["thread"] or None,
        "tid": _int(m["tid"]),
        "address": None,
        "client": None,
        "status": None,
    }


def _fault_addr(m: re.Match[str]) -> Classified:
    client = m["name"] or (m["hex"] and f"0x{m['hex']}") or m["dec"]
    return "fault_addr", {"address": int(m["addr"], 16), "client": client}


def _fw(stage: str) -> Callable[[re.Match[str]], Classified]:
    def build(m: re.Match[str]) -> Classified:
        groups = m.groupdict()
        firmware = groups.get("fw") or groups.get("fw2")
        what = (
            groups.get("what") or groups.get("what2") or groups.get("what3") or groups.get("what4")
        )
        error = groups.get("e")
        fields: Fields = {
            "stage": stage,
            "firmware": firmware,
            "ip_block": groups.get("ip") or what,
            "error": _int(error),
            "detail": m.group(0),
        }
        if stage == "ip_init" and groups.get("stage"):
            fields["detail"] = groups["stage"]
        if groups.get("bdf"):
            fields["probe_bdf"] = groups["bdf"]
        return "firmware_error", fields

    return build


def _fw_ucode(m: re.Match[str]) -> Classified:
    status = m["s1"] or m["s2"] or m["s3"]
    return "firmware_error", {
        "stage": "psp",
        "firmware": None,
        "ip_block": m["cmd"],
        "error": None if status is None else int(status, 0),
        "detail": m.group(0),
        "ucode_id": _int(m["u1"] or m["u2"]),
    }


def _aer_received(m: re.Match[str]) -> Classified:
    return "pcie_aer", {
        "severity": _AER_SEVERITY[m["sev"]],
        "multiple": m["multi"] is not None,
        "layer": None,
        "agent": None,
        "src": m["src"],
        "rid": m["id"],
    }


def _aer_bus_error(m: re.Match[str]) -> Classified:
    severity = _AER_SEVERITY.get(m["sev"].strip(), m["sev"].strip().lower())
    return "aer_bus_error", {"severity": severity, "layer": m["layer"], "agent": m["agent"]}


def _aer_status(m: re.Match[str]) -> Classified:
    return "aer_status", {
        "device_id": f"{m['vid'].lower()}:{m['did'].lower()}",
        "status": int(m["status"], 16),
        "mask": int(m["mask"], 16),
    }


_PATTERNS: tuple[tuple[str, re.Pattern[str], Callable[[re.Match[str]], Classified]], ...] = (
    # (a word the line must contain, the pattern, the builder) — the word is a cheap pre-test
    ("detected", _RAS_COUNT, _ras),
    ("detected", _RAS_FATAL, _ras_fatal),
    ("oison", _POISON_CONSUMED, _poison_consumed),
    (
        "oison",
        _POISON_CREATED,
        lambda m: (
            "ras_error",
            {"severity": "poison", "state": "created", "block": None, "count": None},
        ),
    ),
    ("Architecture", _ACA_HEAD, lambda m: ("aca_bank", {"banks": []})),
    (
        "=0x",
        _ACA_REG,
        lambda m: (
            "aca_reg",
            {
                "index": int(m["i"] if m["i"] is not None else int(m["j"]) - 1),
                "reg": m["reg"],
                "value": int(m["val"], 16),
            },
        ),
    ),
    ("begin", _RESET_BEGIN, _reset("begin", source="source")),
    ("resume", _RESET_RESUMING, _reset("resuming")),
    ("succeeded!", _RESET_OK, _reset("succeeded", counter="counter")),
    ("GPU", _RESET_FAILED, _reset_failed),
    (
        "reset",
        _RESET_METHOD,
        lambda m: ("gpu_reset", {"phase": "method", "method": m["method"].upper()}),
    ),
    ("skipping", _RESET_SKIPPED, _reset("skipped")),
    ("VRAM", _VRAM_LOST, _reset("vram_lost")),
    ("wedged", _WEDGED, _reset("wedged_recovered")),
    ("ing", _RING_RESET, _ring_reset),
    ("timeout", _RING_TIMEOUT, _ring_timeout),
    ("pid", _PROCESS, _process),
    ("page fault", _PAGE_FAULT, _page_fault),
    ("address", _FAULT_ADDR, _fault_addr),
    ("FAULT_STATUS", _FAULT_STATUS, lambda m: ("fault_status", {"status": int(m["status"], 16)})),
    ("", _FAULT_DETAIL, lambda m: ("fault_detail", {})),
    ("firmware", _FW_REQUEST, _fw("request")),
    ("", _FW_LOAD, _fw("load")),
    ("IP block", _FW_IP, _fw("ip_init")),
    ("", _FW_UCODE, _fw_ucode),
    ("", _FW_INIT, _fw("gpu_init")),
    ("probe", _FW_PROBE, _fw("probe")),
    ("AER", _AER_RECEIVED, _aer_received),
    ("PCIe Bus Error", _AER_BUS_ERROR, _aer_bus_error),
    ("status/mask", _AER_STATUS, _aer_status),
    ("AER", _AER_RECOVERY, lambda m: ("aer_recovery", {"recovery": m["what"]})),
    ("", _AER_DETAIL, lambda m: ("aer_detail", {})),
    ("]", _AER_BIT, lambda m: ("aer_bit", {"name": m["name"].strip()})),
)


def _classify(body: str) -> Classified | None:
    for word, pattern, build in _PATTERNS:
        if word in body:
            found = pattern.match(body)
            if found is not None:
                return build(found)
    return None
