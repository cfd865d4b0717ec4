"""KFD SMI events through amdsmi's ``AmdSmiEventReader``: one thread for every GPU.

The driver pushes these as they happen — thermal (and PPT) throttling, GPU pre-/post-reset,
VM faults, and, for a root reader that asks for every process, the pid-tagged ones
(migrations, page faults, queue evictions/restores, unmaps, process start/end). They reach
fleetd in milliseconds instead of at the next poll.

amdsmi 7.0.2's reader has traps (docs/reference amdsmi.md §0, §14), handled here:

- ``read()`` is one global read across every GPU that has a reader; events are told apart by
  ``event["processor_handle"].value``, so one thread calls ``read`` on one reader and
  dispatches the events of all.
- It raises ``AmdSmiLibraryException`` code 40 (NO_DATA) when nothing came within its
  timeout: that is "nothing happened", not an error.
- ``AmdSmiEvtNotificationType.PAGE_FAULT_START`` has the value 8 (a copy of
  ``PAGE_FAULT_END``): a reader built with it subscribes to KFD event 8 (page-fault *end*),
  and ``read()`` names KFD event 8 ``"PAGE_FAULT_START"`` while it silently drops KFD event
  7 (the real page-fault start). So the kind of an event is decided here by its raw number
  (the enum value of the name ``read`` gave): ``PAGE_FAULT_START`` from ``read`` is
  ``page_fault_end``, and ``page_fault_start`` cannot be received through amdsmi 7.0.2 at
  all — asking for it is refused (counted and logged once) instead of silently watching
  the wrong event.
- ``message`` is only the first word of the KFD payload (the C parser's ``%63s``).
- Pid-tagged events reach only their own process unless a root client sets
  ``KFD_SMI_EVENT_ALL_PROCESS`` (mask bit 63), which the Python class cannot: it is set
  through ``amdsmi_wrapper.amdsmi_set_gpu_event_notification_mask`` when such kinds are asked
  for (refused without root: counted).

After a rediscovery (a reset: amdsmi is shut down and initialised again) the readers' handles
are stale; the thread notices the handles changed, or a read failing, and opens new readers.
"""

from __future__ import annotations

import ctypes
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from fleetd.events.model import Tally
from fleetd.logs import get_logger

log = get_logger("events.amdsmi")

KFD_EVENTS: dict[int, str] = {
    1: "vmfault",
    2: "thermal_throttle",
    3: "gpu_pre_reset",
    4: "gpu_post_reset",
    5: "migrate_start",
    6: "migrate_end",
    7: "page_fault_start",
    8: "page_fault_end",
    9: "queue_eviction",
    10: "queue_restore",
    11: "unmap_from_gpu",
    12: "process_start",
    13: "process_end",
}
"""KFD SMI event numbers (kernel ``kfd_ioctl.h``) → fleetd's names for them."""
EVENT_NUMBERS: dict[str, int] = {name: number for number, name in KFD_EVENTS.items()}
DEVICE_WIDE: tuple[str, ...] = ("vmfault", "thermal_throttle", "gpu_pre_reset", "gpu_post_reset")
"""Events KFD broadcasts to every client (no pid filtering): the default set."""
ALL_PROCESS_BIT = 1 << 63  # KFD_SMI_EVENT_ALL_PROCESS (event 64)
NO_DATA = 40  # AMDSMI_STATUS_NO_DATA
READ_BATCH = 64
RECHECK_HANDLES = 2.0
"""Seconds between two comparisons of the readers' handles with the backend's."""


@dataclass(frozen=True, slots=True)
class DriverEvent:
    """One KFD SMI event of one GPU, with the payload's fields decoded where known."""

    kind: str
    gpu: int
    at: float
    message: str
    fields: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form for the event log: every field, after its source."""
        return {"source": "amdsmi_event", **asdict(self)}


def _hex(text: str) -> int | None:
    try:
        return int(text, 16)
    except ValueError:
        return None


def decode_message(kind: str, message: str) -> dict[str, Any] | None:
    """The fields of a KFD payload's first word (None when it does not have the known form):
    THERMAL_THROTTLE ``<bitmask hex>:<counter hex>``, VMFAULT and PROCESS_* ``<pid hex>:<task>``,
    GPU_PRE/POST_RESET ``<reset seq hex>`` (newer kernels add a cause, cut off by amdsmi)."""
    if kind == "thermal_throttle":
        mask, _, counter = message.partition(":")
        bits, count = _hex(mask), _hex(counter)
        if bits is None or count is None:
            return None
        return {"bitmask": bits, "counter": count}
    if kind in ("vmfault", "process_start", "process_end"):
        pid, sep, task = message.partition(":")
        number = _hex(pid)
        if number is None or not sep:
            return None
        return {"pid": number, "task": task}
    if kind in ("gpu_pre_reset", "gpu_post_reset"):
        seq = _hex(message.split(":", 1)[0]) if message else None
        return None if seq is None else {"seq": seq}
    return {"payload": message}


class AmdSmiEventSource:
    """Reads every GPU's KFD events on one thread and hands them to ``on_events``.

    ``sources()`` gives the present GPUs as (index, handle) pairs (the backend's current
    handles); ``lock`` is taken around reader set-up and tear-down (library calls that must not
    run beside a poll), never around the blocking ``read``.
    """

    def __init__(
        self,
        amdsmi: Any,
        sources: Callable[[], Sequence[tuple[int, Any]]],
        on_events: Callable[[list[DriverEvent]], object],
        *,
        kinds: Sequence[str] = DEVICE_WIDE,
        lock: Any = None,
        read_timeout: float = 1.0,
        reopen_interval: float = 5.0,
        now: Callable[[], float] = time.time,
    ) -> None:
        self.amdsmi = amdsmi
        self.sources = sources
        self.on_events = on_events
        self.lock = lock if lock is not None else threading.Lock()
        self.read_timeout = read_timeout
        self.reopen_interval = reopen_interval
        self.now = now
        self.tally = Tally()
        self.kinds = tuple(k for k in kinds if self._receivable(k))
        self._readers: dict[int, Any] = {}  # handle value → reader
        self._gpu_of: dict[int, int] = {}  # handle value → GPU index
        self._handles: dict[int, Any] = {}  # GPU index → the handle object its reader holds
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._next_open = 0.0
        self._next_check = 0.0

    # ------------------------------------------------------------------ subscription
    def _receivable(self, kind: str) -> bool:
        if kind == "page_fault_start":
            self._note(
                "page_fault_start_unreceivable",
                detail="amdsmi 7.0.2 numbers PAGE_FAULT_START 8 and its read() drops KFD "
                "event 7: page-fault starts cannot be received (page_fault_end can)",
            )
            return False
        return kind in EVENT_NUMBERS

    def members(self) -> list[Any]:
        """The enum members whose *values* are the wanted KFD numbers (the reader computes
        its mask from the values: ``PAGE_FAULT_END`` is the member for KFD event 8)."""
        enum = getattr(self.amdsmi, "AmdSmiEvtNotificationType", None)
        if enum is None:
            return []
        by_value: dict[int, Any] = {}
        for member in enum:  # aliases iterate once, as the canonical (first) name
            by_value.setdefault(int(member.value), member)
        return [by_value[EVENT_NUMBERS[k]] for k in self.kinds if EVENT_NUMBERS[k] in by_value]

    def kind_of(self, name: str) -> str | None:
        """fleetd's kind for the name ``read()`` gave, by the enum value behind the name."""
        enum = getattr(self.amdsmi, "AmdSmiEvtNotificationType", None)
        try:
            number = int(enum[name].value) if enum is not None else None
        except (KeyError, TypeError, ValueError):
            return None
        return KFD_EVENTS.get(number) if number is not None else None

    @property
    def wants_all_processes(self) -> bool:
        return any(k not in DEVICE_WIDE for k in self.kinds)

    # ------------------------------------------------------------------ readers
    def open(self) -> int:
        """Open a reader per present GPU (closing old ones); returns how many opened."""
        self.close()
        members = self.members()
        cls = getattr(self.amdsmi, "AmdSmiEventReader", None)
        if cls is None or not members:
            self._note("reader_unavailable", detail="this amdsmi has no AmdSmiEventReader")
            return 0
        with self.lock:
            for gpu, handle in self.sources():
                try:
                    reader = cls(handle, members)
                except Exception as exc:
                    self._note("open_failed", gpu=gpu, detail=_describe(exc))
                    continue
                self._readers[handle.value] = reader
                self._gpu_of[handle.value] = gpu
                self._handles[gpu] = handle
                if self.wants_all_processes:
                    self._all_processes(handle, members, gpu)
        if self._readers:
            log.info("amdsmi_event_readers_open", gpus=len(self._readers), kinds=self.kinds)
        return len(self._readers)

    def _all_processes(self, handle: Any, members: list[Any], gpu: int) -> None:
        wrapper = getattr(self.amdsmi, "amdsmi_wrapper", None)
        setter = getattr(wrapper, "amdsmi_set_gpu_event_notification_mask", None)
        if setter is None:
            self._note("all_processes_unavailable", gpu=gpu, detail="no mask setter")
            return
        mask = ALL_PROCESS_BIT
        for member in members:
            mask |= 1 << (int(member.value) - 1)
        try:
            status = setter(handle, ctypes.c_uint64(mask))
        except Exception as exc:
            self._note("all_processes_refused", gpu=gpu, detail=_describe(exc))
            return
        if status not in (0, None):
            self._note("all_processes_refused", gpu=gpu, detail=f"status {status}")

    def close(self) -> None:
        readers, self._readers = self._readers, {}
        self._gpu_of = {}
        self._handles = {}
        if not readers:
            return
        with self.lock:
            for reader in readers.values():
                try:
                    reader.stop()
                except Exception as exc:  # stale handle after a shut_down: nothing to stop
                    self.tally.note("stop_failed")
                    log.debug("amdsmi_event_reader_stop_failed", error=_describe(exc))

    # ------------------------------------------------------------------ reading
    def read_once(self) -> list[DriverEvent] | None:
        """One read across every GPU: the events (possibly none); None when the read failed
        (the readers are closed then and reopened later)."""
        if not self._readers:
            return None
        reader = next(iter(self._readers.values()))
        timeout_ms = max(1, int(self.read_timeout * 1000))
        try:
            raw = reader.read(timeout_ms, READ_BATCH)
        except Exception as exc:
            if _code(exc) == NO_DATA:
                return []
            self._note("read_failed", detail=_describe(exc))
            self.close()
            return None
        at = self.now()
        out = []
        for item in raw if isinstance(raw, list) else []:
            event = self._decode(item, at)
            if event is not None:
                out.append(event)
        if isinstance(raw, list) and len(raw) >= READ_BATCH:
            self.tally.counts["full_reads"] += 1  # more may wait: the loop reads again at once
        return out

    def _decode(self, item: Any, at: float) -> DriverEvent | None:
        if not isinstance(item, dict):
            self._note("malformed_event")
            return None
        handle = item.get("processor_handle")
        value = getattr(handle, "value", None)
        gpu = self._gpu_of.get(value) if isinstance(value, int) else None
        if gpu is None:
            self._note("unknown_handle")
            return None
        kind = self.kind_of(str(item.get("event", "")))
        if kind is None:
            self._note("unknown_event", detail=str(item.get("event"))[:40])
            return None
        message = str(item.get("message", ""))
        fields = decode_message(kind, message)
        if fields is None:
            self._note("unparsed_message", what=kind, sample=message[:63])
            fields = {"payload": message}
        self.tally.counts[f"events.{kind}"] += 1
        return DriverEvent(kind, gpu, at, message, fields)

    # ------------------------------------------------------------------ the thread
    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="amdsmi-events", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.read_timeout + 5.0)
            self._thread = None
        self.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            tick = time.monotonic()
            if tick >= self._next_check and self._readers:
                self._next_check = tick + RECHECK_HANDLES
                if self._handles_changed():
                    self.close()
            if not self._readers and (tick < self._next_open or not self.open()):
                self._next_open = max(self._next_open, tick + self.reopen_interval)
                self._stop.wait(min(self.reopen_interval, 1.0))
                continue
            try:
                events = self.read_once()
            except Exception as exc:  # never let the thread die
                self._note("reader_crashed", detail=_describe(exc))
                events = None
            if events:
                try:
                    self.on_events(events)
                except Exception as exc:
                    self._note("handler_failed", detail=_describe(exc))
                continue
            if events is None:
                self._next_open = time.monotonic() + self.reopen_interval
            # a reader that returns at once with nothing (the stand-in) must not spin
            spent = time.monotonic() - tick
            self._stop.wait(max(0.0, self.read_timeout - spent))

    def _handles_changed(self) -> bool:
        """Whether the backend enumerated anew since the readers opened: a rediscovery makes
        new handle objects (the old ones may even carry the same pointer value, so identity
        is compared), and readers on the old ones hear nothing more."""
        try:
            current = dict(self.sources())
        except Exception:
            return False
        if current.keys() != self._handles.keys():
            return True
        return any(current[gpu] is not handle for gpu, handle in self._handles.items())

    def _note(self, kind: str, **context: Any) -> None:
        if self.tally.note(kind):
            log.warning("amdsmi_event_problem", kind=kind, **context)


def _code(exc: BaseException) -> int | None:
    getter = getattr(exc, "get_error_code", None)
    try:
        code = getter() if callable(getter) else getattr(exc, "err_code", None)
    except Exception:
        code = getattr(exc, "err_code", None)
    return abs(code) if isinstance(code, int) else None


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:200]
