"""The event sources as the daemon runs them: kernel log, CPER records, KFD events, incidents.

``EventService`` owns the ``KernelLogFollower`` (its own thread, plus a handler thread that
takes its events off its bounded queue), the ``CperReader`` (the daemon's ``cper`` job calls
``poll_cper``) and the ``AmdSmiEventSource`` (its own thread). Every decoded event is appended
to the store's event log (raw lines, the raw CPER record in base64, the KFD payload) and
counted into series the rules read:

- ``fleetd_gpu_kernel_events_total`` / ``fleetd_gpu_kernel_event_age_seconds``
  ``{gpu,uuid,kind,severity}``; ``fleetd_gpu_driver_events_total`` /
  ``fleetd_gpu_driver_event_age_seconds`` ``{gpu,uuid,event}``;
- ``fleetd_gpu_cper_records_total{gpu,uuid,severity,afid}`` (fresh records only) and
  ``fleetd_gpu_cper_last_fatal_age_seconds{gpu,uuid,afid,action}``;
- ``fleetd_gpu_unplanned_resets_total{gpu,uuid}`` / ``fleetd_gpu_unplanned_reset_age_seconds``:
  GPU resets the kernel or KFD reported while no fleetd run had the GPU out of service (the
  kernel's ``GPU reset(N) succeeded!`` and the post-reset event of one reset count once);
- ``fleetd_gpu_fault_incident_open{gpu,uuid,source,class,afid,action}``: 1 while an
  uncorrectable fault's incident is open, 0 for a while after it closed (incidents.py);
- ``fleetd_event_source_input_total{source,kind}``: every source's bad-input tally.

After each event (or batch of them) ``on_arrival`` is called: the daemon evaluates the rules
at once instead of waiting for the next poll. Stale CPER records (from before this boot or
older than ``max_age`` at the first read) are logged as evidence and never counted.

Reset evidence (``reset_evidence``): the post-reset events and the kernel's reset lines per
GPU, which remediation reads to verify a reset and to tell, after a restart, whether the
reset it had journaled happened.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fleetd.events.afid import AfidDecision, AfidTable
from fleetd.events.config import EventsConfig
from fleetd.events.cper import CperBatch, CperReader, CperRecord
from fleetd.events.driver_events import AmdSmiEventSource, DriverEvent
from fleetd.events.follow import KernelLogConfig, KernelLogFollower
from fleetd.events.host import read_boot_id, read_boot_time
from fleetd.events.incidents import INCIDENTS_FILE, Incident, IncidentBook
from fleetd.events.model import KernelEvent
from fleetd.logs import get_logger
from fleetd.model import Reading, label_value, make_labels
from fleetd.statefile import StateFile

log = get_logger("events")

AppendEvent = Callable[..., Any]
UE_SEVERITIES = frozenset({"uncorrectable", "fatal", "poison", "deferred"})
"""Kernel RAS severities that are an uncorrectable fault (poison: consumed or created)."""
CPER_INCIDENT = frozenset({"fatal", "non_fatal_uncorrected"})
SEVERITY_BITS = {"non_fatal_uncorrected": 0, "fatal": 1, "non_fatal_corrected": 2}
ONE_RESET = 60.0
"""Reports of a reset of one GPU within this many seconds are one reset (the kernel's lines
and KFD's post-reset event)."""
MAX_MARKS = 32
UE_COUNTS_FILE = "ue_counts.json"
INCIDENT_ZERO_KEEP = 900.0
"""Seconds a closed incident's series keeps reading 0 (then it is dropped)."""


@dataclass(frozen=True, slots=True)
class ResetMark:
    """One piece of reset evidence: ``kind`` begin, succeeded or failed."""

    at: float
    kind: str
    source: str  # kernel_log, amdsmi_event
    detail: str


@dataclass(frozen=True, slots=True)
class ResetEvidence:
    """What the driver said about resets of some GPUs since a time (remedy.ports)."""

    succeeded: dict[int, str] = field(default_factory=dict)
    failed: dict[int, str] = field(default_factory=dict)
    begun: dict[int, str] = field(default_factory=dict)
    sources_running: bool = False


def event_severity(event: KernelEvent) -> str:
    """The ``severity`` label of a kernel event: the RAS/AER severity, the reset phase, or
    ``error`` for the kinds that are all faults."""
    if event.kind in ("ras_error", "pcie_aer"):
        return str(event.get("severity") or "unknown")
    if event.kind in ("gpu_reset", "ring_reset"):
        return str(event.get("phase") or "unknown")
    return "error"


def severity_mask(names: Iterable[str]) -> int:
    """The amdsmi CPER severity mask (bit ``1 << severity``) of ``events.cper.severities``."""
    mask = 0
    for name in names:
        mask |= 1 << SEVERITY_BITS[name]
    return mask


class EventService:
    """Runs the kernel log, CPER and KFD event sources for the daemon (module docstring)."""

    def __init__(
        self,
        config: EventsConfig,
        *,
        state_dir: str | Path,
        backend: Any,
        append_event: AppendEvent,
        on_arrival: Callable[[], object],
        fleetd_has_gpu: Callable[[int], bool] = lambda _gpu: False,
        verified_since: Callable[[int, float], str | None] = lambda _gpu, _t: None,
        kernel_log_path: str | Path | None = None,
        now: Callable[[], float] = time.time,
        amdsmi_lock: Any = None,
        query_events: Callable[..., list[Any]] | None = None,
    ) -> None:
        self.config = config
        self.backend = backend
        self.append_event = append_event
        self.on_arrival = on_arrival
        self.fleetd_has_gpu = fleetd_has_gpu
        self.verified_since = verified_since
        self.query_events = query_events
        self.now = now
        self.started_at = now()
        self.afids = AfidTable.load(config.cper.afid_overrides)
        self.incidents = IncidentBook(StateFile(state_dir, INCIDENTS_FILE))
        self._lock = threading.Lock()
        self._kernel: dict[tuple[int, str, str], tuple[int, float]] = {}
        self._driver: dict[tuple[int, str], tuple[int, float]] = {}
        self._cper: dict[tuple[int, str, int], int] = {}
        self._fatal: dict[int, tuple[float, int, str]] = {}
        self._unplanned: dict[int, tuple[int, float]] = {}
        self._marks: dict[int, list[ResetMark]] = {}
        # each GPU's last uncorrectable + deferred count, kept across restarts: a rise while
        # fleetd was down is a report like any other (GpuEccUncorrectableError stands down
        # after an incident closed unless the counters open one)
        self._ue_state = StateFile(state_dir, UE_COUNTS_FILE)
        self._ue_counts: dict[tuple[int, str], float] = self._load_ue_counts()
        self._seen_keys: set[str] = set()
        self._gpus: dict[str, tuple[int, str]] = {}
        self._uuids: dict[int, str] = {}
        self.follower: KernelLogFollower | None = None
        self.refresh_gpus()
        section = config.kernel_log
        if section.source != "off":
            if kernel_log_path is not None:
                klc = KernelLogConfig(source="file", path=str(kernel_log_path))
            elif section.source == "file":
                klc = KernelLogConfig(source="file", path=str(section.path))
            else:
                klc = KernelLogConfig(source=section.source)
            self.follower = KernelLogFollower(klc, state_dir, gpus=list(self._gpus))
        self.cper: CperReader | None = None
        if config.cper.enabled:
            self.cper = CperReader(
                backend.amdsmi,
                state_dir,
                boot_id=read_boot_id() or "unknown",
                boot_time=read_boot_time() or 0.0,
                max_age=config.cper.max_age,
                severity_mask=severity_mask(config.cper.severities),
            )
        self.driver: AmdSmiEventSource | None = None
        if config.amdsmi_events.enabled:
            self.driver = AmdSmiEventSource(
                backend.amdsmi,
                self._handles,
                self.handle_driver_events,
                kinds=config.amdsmi_events.events,
                lock=amdsmi_lock,
                read_timeout=config.amdsmi_events.read_timeout,
                now=now,
            )
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ GPUs
    def refresh_gpus(self) -> None:
        gpus = {g.bdf.lower(): (g.index, g.uuid) for g in self.backend.gpus()}
        with self._lock:
            self._gpus = gpus
            self._uuids = {index: uuid for index, uuid in gpus.values()}
        if self.follower is not None:
            self.follower.set_gpus(list(gpus))

    def _handles(self) -> list[tuple[int, Any]]:
        return [
            (s.identity.index, s.handle) for s in self.backend.sources() if s.handle is not None
        ]

    def _labels(self, gpu: int, **extra: object) -> Any:
        return make_labels({"gpu": gpu, "uuid": self._uuids.get(gpu, ""), **extra})

    # ------------------------------------------------------------------ start / stop
    def start(self) -> None:
        if self.driver is not None:
            self.driver.start()
        if self.follower is None:
            return
        self.follower.start()
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="kernel-events", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self.follower is not None:  # wake the thread (it waits without a timeout)
            with contextlib.suppress(queue.Full):  # full: it is draining, and sees the flag
                self.follower.events.put_nowait(None)
        if self.driver is not None:
            self.driver.stop()
        if self.follower is not None:
            self.follower.close()
        if self._thread is not None:
            self._thread.join(5.0)
            self._thread = None

    def _run(self) -> None:
        assert self.follower is not None
        events = self.follower.events
        while not self._stop.is_set():
            first = events.get()  # no timeout: an idle wake-up costs CPU, and stop() wakes it
            if first is None:
                continue
            batch = [first]
            with contextlib.suppress(queue.Empty):
                while len(batch) < 1000:
                    event = events.get_nowait()
                    if event is not None:
                        batch.append(event)
            try:
                if self.handle_kernel_events(batch):
                    self.on_arrival()
            except Exception as exc:  # never let the thread die
                log.warning("kernel_event_handling_failed", error=repr(exc)[:300])

    # ------------------------------------------------------------------ kernel events
    def handle_kernel_events(self, events: list[KernelEvent]) -> int:
        """Count, log and store ``events``; returns how many were new (repeats dropped)."""
        new = 0
        for event in events:
            if event.key and event.key in self._seen_keys:
                continue
            if event.key:
                self._seen_keys.add(event.key)
                if len(self._seen_keys) > 10_000:
                    self._seen_keys.clear()
            new += 1
            self._kernel_event(event)
        return new

    def _kernel_event(self, event: KernelEvent) -> None:
        with self._lock:
            found = self._gpus.get((event.bdf or "").lower())
        gpu = found[0] if found is not None else None
        severity = event_severity(event)
        at = self.now()
        message = f"kernel: {event.kind} ({severity})" + (
            f" on GPU {gpu}" if gpu is not None else ""
        )
        data: dict[str, Any] = event.as_dict()
        if gpu is not None:
            with self._lock:
                n, _ = self._kernel.get((gpu, event.kind, severity), (0, 0.0))
                self._kernel[(gpu, event.kind, severity)] = (n + 1, at)
            if event.kind == "gpu_reset":
                message = self._kernel_reset(gpu, event, severity, at, data) or message
            elif event.kind == "ras_error" and severity in UE_SEVERITIES:
                block = event.get("block") or "an unnamed"
                count = event.get("count")
                what = f"{count} new {severity}" if count is not None else severity
                self._report(
                    gpu,
                    "kernel",
                    at,
                    severity=severity,
                    action=self.afids.default.action,
                    why=f"amdgpu: {what} error(s) in {block} block (no AFID: the AFID "
                    f"table's default, {self.afids.default.action})",
                )
        self.append_event("kernel_event", now=at, gpu=gpu, message=message, data=data,
                          actor="kernel")  # fmt: skip

    def _kernel_reset(
        self, gpu: int, event: KernelEvent, phase: str, at: float, data: dict[str, Any]
    ) -> str | None:
        line = event.lines[0] if event.lines else phase
        if phase == "begin":
            data["initiator"] = "fleetd" if self._by_fleetd(gpu) else "driver"
            self._mark(gpu, ResetMark(at, "begin", "kernel_log", line))
            return None
        if phase == "succeeded":
            self._mark(gpu, ResetMark(at, "succeeded", "kernel_log", line))
            return self._reset_done(gpu, at, data, "kernel_log")
        if phase == "failed":
            self._mark(gpu, ResetMark(at, "failed", "kernel_log", line))
        return None

    def _reset_done(self, gpu: int, at: float, data: dict[str, Any], source: str) -> str | None:
        """A reset of ``gpu`` completed: count it once if fleetd did not start it, and close
        an incident a reset was enough for."""
        by_fleetd = self._by_fleetd(gpu)
        data["initiator"] = "fleetd" if by_fleetd else "driver"
        if by_fleetd:
            return None
        with self._lock:
            count, last = self._unplanned.get(gpu, (0, float("-inf")))
            repeat = at - last < ONE_RESET
            self._unplanned[gpu] = (count if repeat else count + 1, last if repeat else at)
        incident = self.incidents.get(gpu)
        if incident is not None and incident.action == "reset":
            self._close(incident, at, f"the driver reset GPU {gpu} ({source})")
        if repeat:
            return None
        return f"GPU {gpu} reset by the driver (no fleetd run), reported by {source}"

    def _by_fleetd(self, gpu: int) -> bool:
        try:
            return bool(self.fleetd_has_gpu(gpu))
        except Exception:
            return False

    def _mark(self, gpu: int, mark: ResetMark) -> None:
        with self._lock:
            marks = self._marks.setdefault(gpu, [])
            marks.append(mark)
            del marks[:-MAX_MARKS]

    # ------------------------------------------------------------------ KFD events
    def handle_driver_events(self, events: list[DriverEvent]) -> None:
        """Count, log and store KFD events (the reader's thread); evaluate the rules once."""
        for event in events:
            self._driver_event(event)
        if events:
            self.on_arrival()

    def _driver_event(self, event: DriverEvent) -> None:
        gpu, at = event.gpu, self.now()
        with self._lock:
            n, _ = self._driver.get((gpu, event.kind), (0, 0.0))
            self._driver[(gpu, event.kind)] = (n + 1, at)
        data = event.as_dict()
        message = f"KFD event {event.kind} on GPU {gpu}: {event.message}"
        if event.kind == "gpu_post_reset":
            self._mark(gpu, ResetMark(at, "succeeded", "amdsmi_event", message))
            message = self._reset_done(gpu, at, data, "amdsmi_event") or message
        elif event.kind == "gpu_pre_reset":
            self._mark(gpu, ResetMark(at, "begin", "amdsmi_event", message))
        self.append_event("driver_event", now=at, gpu=gpu, message=message, data=data,
                          actor="kfd")  # fmt: skip

    # ------------------------------------------------------------------ counters
    def observe_counters(self, readings: Iterable[Reading], now: float) -> None:
        """The poll's ECC counters: a rise of a GPU's uncorrectable + deferred count is one
        more report of an uncorrectable fault (the first read, and a drop, set the base). The
        counts are kept across restarts by GPU and UUID, so a rise while fleetd was down is
        a rise; another board in the slot (another UUID) starts from its first read."""
        totals: dict[tuple[int, str], float] = {}
        for reading in readings:
            if reading.metric != "fleetd_gpu_ecc_errors_total" or reading.value is None:
                continue
            if label_value(reading.labels, "type") not in ("uncorrectable", "deferred"):
                continue
            index = label_value(reading.labels, "gpu")
            if index is not None and index.isdigit():
                key = (int(index), label_value(reading.labels, "uuid") or "")
                totals[key] = totals.get(key, 0.0) + reading.value
        changed = {key: t for key, t in totals.items() if self._ue_counts.get(key) != t}
        if changed:
            self._save_ue_counts({**self._ue_counts, **changed})
        for (gpu, uuid), total in changed.items():
            before = self._ue_counts.get((gpu, uuid))
            self._ue_counts[(gpu, uuid)] = total
            if before is not None and total > before:
                self._report(
                    gpu,
                    "counters",
                    now,
                    severity="uncorrectable",
                    action="reset",
                    why=f"ECC counters: {total - before:g} new uncorrectable/deferred error(s)",
                )

    def _load_ue_counts(self) -> dict[tuple[int, str], float]:
        path = str(self._ue_state.path)
        data = self._ue_state.load(
            lambda why: log.warning("ue_counts_unreadable", path=path, error=why)
        )
        rows = data.get("counts") if isinstance(data, dict) else None
        if not isinstance(rows, list):
            return {}
        return {
            (row[0], row[1]): float(row[2])
            for row in rows
            if isinstance(row, list)
            and len(row) == 3
            and isinstance(row[0], int)
            and isinstance(row[1], str)
            and isinstance(row[2], int | float)
        }

    def _save_ue_counts(self, counts: dict[tuple[int, str], float]) -> None:
        rows = [[gpu, uuid, total] for (gpu, uuid), total in sorted(counts.items())]
        try:
            self._ue_state.save({"counts": rows})
        except OSError as exc:  # kept in memory; a restart takes its first read as the base
            log.warning("ue_counts_unsaved", path=str(self._ue_state.path), error=str(exc))

    # ------------------------------------------------------------------ incidents
    def _report(
        self,
        gpu: int,
        source: str,
        at: float,
        *,
        severity: str,
        action: Any,
        why: str,
        decision: AfidDecision | None = None,
    ) -> None:
        afid = "" if decision is None or decision.decided_by is None else str(decision.decided_by)
        if decision is not None and not afid and decision.afids:
            afid = str(decision.afids[0])
        incident, opened = self.incidents.report(
            gpu,
            source,
            at,
            severity=severity,
            action=action,
            why=why,
            afid=afid,
            label_action=str(action) if decision is not None else "",
        )
        kind = "incident_opened" if opened else "incident_report"
        self.append_event(
            kind,
            now=at,
            gpu=gpu,
            message=f"GPU {gpu}: {why}" + ("" if opened else f" (joins the {incident.source} "
                                                              "report's incident)"),
            data={"source": source, "action": action, "incident_action": incident.action,
                  "opened_at": incident.opened_at, "reports": list(incident.reports)},
            actor="events",
        )  # fmt: skip

    def incident(self, gpu: int) -> Incident | None:
        """The open incident of ``gpu`` (remedy reads its action before it acts)."""
        return self.incidents.get(gpu)

    @property
    def settle(self) -> float:
        return self.config.incident.settle

    def _close(self, incident: Incident, at: float, why: str) -> None:
        if self.incidents.close(incident.gpu, at) is None:
            return
        self.append_event(
            "incident_closed",
            now=at,
            gpu=incident.gpu,
            message=f"GPU {incident.gpu}: fault incident closed: {why}",
            data={"opened_at": incident.opened_at, "reports": list(incident.reports)},
            actor="events",
        )

    def _settle_incidents(self, now: float) -> None:
        for incident in self.incidents.all():
            if incident.action != "reset":  # a reset repairs nothing physical: it waits
                continue
            try:
                verified = self.verified_since(incident.gpu, incident.opened_at)
            except Exception:
                verified = None
            if verified:
                self._close(incident, now, verified)
        for incident in self.incidents.expired(now, self.config.incident.max_age):
            self.append_event(
                "incident_closed",
                now=now,
                gpu=incident.gpu,
                message=f"GPU {incident.gpu}: fault incident closed: no report for "
                f"{self.config.incident.max_age:g}s and no run verified the GPU",
                data={"opened_at": incident.opened_at, "reports": list(incident.reports)},
                actor="events",
            )

    # ------------------------------------------------------------------ reset evidence
    def reset_evidence(self, gpus: Iterable[int], since: float) -> ResetEvidence:
        """The driver's word on resets of ``gpus`` after ``since``: the latest success and
        failure per GPU, and whether a source that would have seen them is running."""
        wanted = set(gpus)
        out = ResetEvidence(sources_running=self.follower is not None or self.driver is not None)
        marks: list[tuple[int, ResetMark]] = []
        if since < self.started_at:  # a run of an earlier process: read what it logged
            marks += self._logged_marks(wanted, since)
        with self._lock:
            marks += [(g, m) for g in wanted for m in self._marks.get(g, []) if m.at >= since]
        for gpu, mark in sorted(marks, key=lambda item: item[1].at):
            target = {"succeeded": out.succeeded, "failed": out.failed}.get(mark.kind, out.begun)
            target[gpu] = mark.detail
        return out

    def _logged_marks(self, gpus: set[int], since: float) -> list[tuple[int, ResetMark]]:
        """Reset evidence in the event log (the kernel lines and KFD events an earlier
        process read before it died: the follower's cursor is past them now)."""
        if self.query_events is None:
            return []
        try:
            rows = self.query_events(kinds=["kernel_event", "driver_event"], since=since)
        except Exception as exc:
            log.warning("reset_evidence_unreadable", error=repr(exc)[:200])
            return []
        out = []
        for row in rows:
            data = row.data if isinstance(row.data, Mapping) else {}
            if row.gpu not in gpus or row.ts >= self.started_at:
                continue
            if row.kind == "driver_event" and data.get("kind") == "gpu_post_reset":
                out.append((row.gpu, ResetMark(row.ts, "succeeded", "amdsmi_event", row.message)))
            elif row.kind == "kernel_event" and data.get("kind") == "gpu_reset":
                phase = (data.get("fields") or {}).get("phase")
                lines = data.get("lines") or [row.message]
                if phase in ("succeeded", "failed", "begin"):
                    out.append((row.gpu, ResetMark(row.ts, phase, "kernel_log", str(lines[0]))))
        return out

    # ------------------------------------------------------------------ CPER
    def poll_cper(self) -> int:
        """Read every GPU's CPER ring (partition 0); returns how many fresh records came."""
        return self.take_cper(self.read_cper())

    def read_cper(self) -> list[tuple[int, CperBatch]]:
        """The amdsmi part of ``poll_cper``: each present GPU's new records."""
        if self.cper is None:
            return []
        now = self.now()
        out = []
        for source in self.backend.sources():
            handle = source.handle
            if handle is not None:
                gpu = source.identity.index
                out.append((gpu, self.cper.read(str(gpu), handle, now)))
        return out

    def take_cper(self, batches: list[tuple[int, CperBatch]]) -> int:
        """Count, log and store what ``read_cper`` gave; evaluate at once when fresh."""
        fresh = 0
        now = self.now()
        for gpu, batch in batches:
            for record in batch.records:
                self._cper_record(gpu, record, now)
                fresh += 0 if record.stale else 1
        if fresh:
            self.on_arrival()
        return fresh

    def _cper_record(self, gpu: int, record: CperRecord, now: float) -> None:
        decision = self.afids.action_for(record.afids)
        data = record.as_dict()
        data["action"] = decision.action
        data["action_message"] = decision.message
        data["unknown_afids"] = list(decision.unknown)
        afid = (
            decision.decided_by
            if decision.decided_by is not None
            else (record.afids[0] if record.afids else 0)
        )
        if not record.stale:
            with self._lock:
                key = (gpu, record.severity, afid)
                self._cper[key] = self._cper.get(key, 0) + 1
                if record.fatal:
                    self._fatal[gpu] = (now, afid, decision.action)
        afids = ",".join(str(a) for a in record.afids) or "none"
        stale = f", stale: {record.stale_reason}" if record.stale else ""
        message = f"CPER {record.severity} on GPU {gpu} (AFID {afids}: {decision.action}{stale})"
        self.append_event("cper_record", now=now, gpu=gpu, message=message, data=data,
                          actor="cper")  # fmt: skip
        if not record.stale and record.severity in CPER_INCIDENT:
            text = f": {decision.message}" if decision.message else ""
            self._report(
                gpu,
                "cper",
                now,
                severity=record.severity,
                action=decision.action,
                why=f"CPER {record.severity} record, AFID {afid} calls for {decision.action}{text}",
                decision=decision,
            )

    # ------------------------------------------------------------------ series
    def readings(self, now: float) -> list[Reading]:
        self._settle_incidents(now)
        out: list[Reading] = []
        with self._lock:
            kernel = dict(self._kernel)
            driver = dict(self._driver)
            cper = dict(self._cper)
            fatal = dict(self._fatal)
            unplanned = dict(self._unplanned)
        for (gpu, kind, severity), (n, at) in kernel.items():
            labels = self._labels(gpu, kind=kind, severity=severity)
            out.append(Reading("fleetd_gpu_kernel_events_total", labels, float(n), now))
            out.append(
                Reading("fleetd_gpu_kernel_event_age_seconds", labels, max(0.0, now - at), now)
            )
        for (gpu, kind), (n, at) in driver.items():
            labels = self._labels(gpu, event=kind)
            out.append(Reading("fleetd_gpu_driver_events_total", labels, float(n), now))
            out.append(
                Reading("fleetd_gpu_driver_event_age_seconds", labels, max(0.0, now - at), now)
            )
        for (gpu, severity, afid), n in cper.items():
            labels = self._labels(gpu, severity=severity, afid=afid)
            out.append(Reading("fleetd_gpu_cper_records_total", labels, float(n), now))
        for gpu, (at, afid, action) in fatal.items():
            labels = self._labels(gpu, afid=afid, action=action)
            out.append(
                Reading("fleetd_gpu_cper_last_fatal_age_seconds", labels, max(0.0, now - at), now)
            )
        for gpu, (n, at) in unplanned.items():
            labels = self._labels(gpu)
            out.append(Reading("fleetd_gpu_unplanned_resets_total", labels, float(n), now))
            out.append(
                Reading("fleetd_gpu_unplanned_reset_age_seconds", labels, max(0.0, now - at), now)
            )
        open_now = self.incidents.all()
        series: dict[Any, float] = {}
        for incident, value in [
            *((i, 0.0) for i in self.incidents.closed(now, INCIDENT_ZERO_KEEP)),
            *((i, 1.0) for i in open_now),  # an open one wins over a closed one's series
        ]:
            labels = self._labels(
                incident.gpu,
                source=incident.source,
                afid=incident.afid,
                action=incident.label_action,
                **{"class": incident.severity},
            )
            series[labels] = value
        for labels, value in series.items():
            out.append(Reading("fleetd_gpu_fault_incident_open", labels, value, now))
        for name, value in sorted(self.stats().items()):
            source, _, kind = name.partition(".")
            labels = make_labels({"source": source, "kind": kind})
            out.append(Reading("fleetd_event_source_input_total", labels, float(value), now))
        return out

    def stats(self) -> dict[str, int]:
        """Every source's tally of bad or unusual input, as ``source.kind`` → count."""
        out: dict[str, int] = {}
        if self.follower is not None:
            out.update({f"kernel_log.{k}": v for k, v in self.follower.stats().items()})
        if self.cper is not None:
            out.update({f"cper.{k}": v for k, v in self.cper.tally.snapshot().items()})
        if self.driver is not None:
            out.update({f"amdsmi_events.{k}": v for k, v in self.driver.tally.snapshot().items()})
        return out


def gpus_of(out: Mapping[str, Any]) -> set[int]:
    """GPU indices of ``out_of_service`` (its keys are index strings)."""
    return {int(k) for k in out if str(k).isdigit()}
