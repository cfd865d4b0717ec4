"""Follow the kernel log on a thread of its own and deliver amdgpu fault events.

``KernelLogFollower.step(now)`` is the whole logic: open the source if it is due, read what
is there, parse it, deliver the events, persist the cursor. The thread (``start``/``stop``)
only calls ``step`` and waits for the source to become readable; tests drive ``step``.

Source choice (``source``): ``journal`` (journalctl), ``kmsg`` (/dev/kmsg), ``file`` (``path``,
the simulator's log), or ``auto``: the journal where journalctl exists and journald runs
(/run/systemd/journal), else /dev/kmsg. A source that is missing, exits or fails is closed,
counted and logged once per kind, and tried again after a backoff (1 s doubling to 60 s);
``auto`` falls back to /dev/kmsg when the journal cannot be had.

Resuming: the position of the last line handled (journal cursor and its wall time, or
kmsg boot id + sequence number, or file inode + offset) is kept in
``<state_dir>/kernel_log.cursor.json``, written atomically (fsync + rename) at most once per
``persist_interval``, within ``event_persist_interval`` after a read that delivered events,
and on ``stop``. A clean restart repeats nothing; a crash can repeat the events of the last
``event_persist_interval`` (at-least-once), each carrying its source ``key`` so a consumer
can drop the repeat. (A write per event-bearing read cost a third of the follower's CPU at
1,000 lines/s: bench/events.py.)

Delivery never blocks the follower: events go to ``sink`` (a callable that must return at
once) or, without one, to the bounded queue ``events``; a full queue drops the event and
counts it (``dropped``).
"""

from __future__ import annotations

import contextlib
import os
import queue
import shutil
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from fleetd.configbase import StrictModel
from fleetd.events.host import read_boot_id, read_boot_time
from fleetd.events.kernel_log import KernelLogParser
from fleetd.events.model import KernelEvent, Tally
from fleetd.events.sources import (
    FileSource,
    JournalSource,
    KmsgSource,
    Source,
    SourceError,
    wait_readable,
)
from fleetd.logs import get_logger
from fleetd.statefile import StateFile

CURSOR_FILE = "kernel_log.cursor.json"
SourceName = Literal["auto", "journal", "kmsg", "file"]


IDLE_WAIT_S = 5.0
"""How long the thread sleeps between looks when its source wakes it for new lines (a
descriptor ``select`` watches) and no cursor waits to be saved; ``poll_interval`` otherwise."""


class KernelLogConfig(StrictModel):
    """The kernel log source's settings (a section the daemon's config can embed)."""

    source: SourceName = "auto"
    path: str | None = None
    """The file to follow when ``source`` is ``file`` (kmsg records or journal JSON lines)."""
    file_format: Literal["auto", "kmsg", "journal", "text"] = "auto"
    journalctl: str = "journalctl"
    kmsg_path: str = "/dev/kmsg"
    queue_size: int = Field(default=10_000, ge=1, le=1_000_000)
    max_lines_per_step: int = Field(default=5_000, ge=1, le=1_000_000)
    poll_interval: float = Field(default=0.2, gt=0, le=10)
    """How long the thread waits for new lines before reading again when nothing wakes it
    (a file is polled); kmsg and journalctl's pipe wake it when a line comes."""
    persist_interval: float = Field(default=1.0, ge=0, le=3600)
    """Longest time the saved cursor lags the lines read (no events among them)."""
    event_persist_interval: float = Field(default=0.25, ge=0, le=3600)
    """... and after a read that delivered events: a crash can repeat at most this much."""
    batch_interval: float = Field(default=0.05, ge=0, le=1)
    """After a read that found lines the thread waits this long before the next, so a busy
    log is read in batches (fewer wake-ups) at the cost of this much latency."""
    backoff_initial: float = Field(default=1.0, gt=0, le=3600)
    backoff_max: float = Field(default=60.0, gt=0, le=86400)


@dataclass(frozen=True, slots=True)
class Host:
    """What source selection looks at (replaced in tests)."""

    which: Callable[[str], str | None] = shutil.which
    isdir: Callable[[str], bool] = os.path.isdir
    readable: Callable[[str], bool] = lambda p: os.access(p, os.R_OK)
    journald_dir: str = "/run/systemd/journal"


class KernelLogFollower:
    """Reads the kernel log, parses amdgpu lines, delivers ``KernelEvent``s.

    ``gpus`` are the node's GPU BDFs (PCIe AER lines count only for them); ``boot_id`` and
    ``boot_time`` default to this machine's (they turn kmsg stamps into wall time and tell
    whether a saved kmsg cursor is from this boot).
    """

    def __init__(
        self,
        config: KernelLogConfig,
        state_dir: str | Path,
        *,
        gpus: Iterable[str] = (),
        sink: Callable[[KernelEvent], None] | None = None,
        boot_id: str | None = None,
        boot_time: float | None = None,
        host: Host | None = None,
    ) -> None:
        self.config = config
        self.host = host or Host()
        self.boot_id = boot_id if boot_id is not None else read_boot_id()
        self.boot_time = boot_time if boot_time is not None else read_boot_time()
        self.state = StateFile(state_dir, CURSOR_FILE)
        self.tally = Tally()
        self.parser = KernelLogParser(gpus)
        self.sink = sink
        # None: a consumer's own wake-up (to see its stop flag); the follower never puts it
        self.events: queue.Queue[KernelEvent | None] = queue.Queue(maxsize=config.queue_size)
        self.log = get_logger("events.kernel_log")
        self.source: Source | None = None
        self._saved: dict[str, Any] = self.state.load() or {}
        if self.state.exists() and not self._saved:
            self._once("cursor_unreadable", path=str(self.state.path))
        self._retry_at = 0.0
        self._backoff = config.backoff_initial
        self._persisted_at = -1e18
        self._dirty = False
        self._logged_unparsed = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._wake_r, self._wake_w = os.pipe()
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ the logic
    def step(self, now: float) -> int:
        """Read what the source has now, deliver its events; returns lines read (0: idle).

        ``lines`` in ``stats()`` counts the lines handed to the parser; the journal source
        skips other drivers' lines before decoding their JSON (``prefiltered``)."""
        with self._lock:
            if self.source is None and not self._open(now):
                return 0
            assert self.source is not None
            before = self.source.position()
            skipped = self.tally["prefiltered"]
            try:
                lines = self.source.read(self.config.max_lines_per_step)
            except SourceError as err:
                self._lost(err, now)
                return 0
            events: list[KernelEvent] = []
            for line in lines:
                events.extend(self.parser.feed(line, now))
            events.extend(self.parser.flush())
            self.tally.counts["lines"] += len(lines)
            for event in events:
                self._deliver(event)
            self._report_unparsed()
            if lines or self.source.position() != before:
                self._backoff = self.config.backoff_initial
                self._dirty = True
            since = now - self._persisted_at
            if self._dirty and (
                since >= self.config.persist_interval
                or (events and since >= self.config.event_persist_interval)
            ):
                self._persist(now)
            return len(lines) + self.tally["prefiltered"] - skipped

    def set_gpus(self, gpus: Iterable[str]) -> None:
        with self._lock:
            self.parser.set_gpus(gpus)

    def stats(self) -> dict[str, int]:
        """Counters of the follower and its parser (lines, events by kind, drops, faults)."""
        out = self.tally.snapshot()
        for kind, n in self.parser.tally.counts.items():
            out[f"parser.{kind}"] = n
        return out

    def select_source(self) -> Source | None:
        """The source the config and this host call for (None: nothing to read here)."""
        cfg, host = self.config, self.host
        wanted = cfg.source
        if wanted == "file":
            if not cfg.path:
                return None
            return FileSource(self.tally, cfg.path, cfg.file_format, self.boot_time)
        journal_ok = host.which(cfg.journalctl) is not None and host.isdir(host.journald_dir)
        if wanted == "journal" or (wanted == "auto" and journal_ok and not self._journal_failed()):
            return JournalSource(self.tally, cfg.journalctl)
        if wanted in ("kmsg", "auto") and host.readable(cfg.kmsg_path):
            return KmsgSource(self.tally, self.boot_id, self.boot_time, cfg.kmsg_path)
        return None

    def _journal_failed(self) -> bool:
        return self.tally["journal_unavailable"] > 0 or self.tally["journal_exited"] >= 3

    def _open(self, now: float) -> bool:
        if now < self._retry_at:
            return False
        source = self.select_source()
        if source is None:
            self._once("no_source", wanted=self.config.source)
            self._retry_at = now + self._next_backoff()
            return False
        try:
            source.open(self._saved.get(source.name))
        except SourceError as err:
            self._lost(err, now)
            return False
        self.source = source
        self.tally.counts[f"opened.{source.name}"] += 1
        return True

    def _lost(self, err: SourceError, now: float) -> None:
        source, self.source = self.source, None
        if source is not None:
            position = source.position()
            if err.kind == "cursor_rejected":
                position = {k: v for k, v in (position or {}).items() if k != "cursor"}
            if position is not None:
                self._saved[source.name] = position
            source.close()
        self._once(err.kind, detail=err.detail[:300])
        self._retry_at = now + self._next_backoff()
        for event in self.parser.flush():
            self._deliver(event)

    def _next_backoff(self) -> float:
        delay = self._backoff
        self._backoff = min(self._backoff * 2, self.config.backoff_max)
        return delay

    def _deliver(self, event: KernelEvent) -> None:
        self.tally.counts[f"event.{event.kind}"] += 1
        if self.sink is not None:
            try:
                self.sink(event)
            except Exception as exc:  # the consumer's failure must not stop the follower
                self._once("sink_error", error=repr(exc)[:200])
            return
        try:
            self.events.put_nowait(event)
        except queue.Full:
            self._once("dropped", queue_size=self.config.queue_size)

    def _report_unparsed(self) -> None:
        n = self.parser.tally["unparsed"]
        if n > self._logged_unparsed:
            if self._logged_unparsed == 0:
                self.log.warning("kernel_line_unparsed", sample=self.parser.last_unparsed)
            self._logged_unparsed = n
        if self.parser.tally["parser_error"] and self.tally.note("parser_error_logged"):
            self.log.error("kernel_parser_error")

    def _persist(self, now: float) -> None:
        if self.source is None:
            return
        position = self.source.position()
        if position is None:
            return
        self._saved[self.source.name] = position
        try:
            self.state.save({"version": 1, **self._saved})
        except OSError as exc:
            self._once("cursor_write_failed", error=exc.strerror or str(exc))
            return
        self._persisted_at = now
        self._dirty = False

    def _once(self, kind: str, **context: Any) -> None:
        if self.tally.note(kind):
            self.log.warning("kernel_log_source_problem", kind=kind, **context)

    # ------------------------------------------------------------------ the thread
    def start(self) -> None:
        """Follow on a daemon thread until ``stop``."""
        if self._thread is not None:
            return
        os.set_blocking(self._wake_r, False)
        try:
            while os.read(self._wake_r, 512):
                pass
        except BlockingIOError:
            pass
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="kernel-log", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> bool:
        """Stop the thread, persist the cursor, close the source; False if it did not end."""
        self._stop.set()
        with contextlib.suppress(OSError):  # already closed: nothing to wake
            os.write(self._wake_w, b"x")
        thread, self._thread = self._thread, None
        ended = True
        if thread is not None:
            thread.join(timeout)
            ended = not thread.is_alive()
        with self._lock:
            if self._dirty:
                self._persist(time.time())
            if self.source is not None:
                self.source.close()
                self.source = None
        return ended

    def close(self) -> None:
        self.stop()
        for fd in (self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                read = self.step(time.time())
            except Exception as exc:  # never let the thread die silently
                self._once("step_error", error=repr(exc)[:200])
                read = 0
            if self._stop.is_set():
                break
            if read:
                self._stop.wait(self.config.batch_interval)
                continue
            fd = self.source.fileno() if self.source is not None else None
            fds = [self._wake_r] + ([fd] if fd is not None else [])
            # a source with a descriptor (kmsg, journalctl's pipe) wakes the thread itself
            # when a line comes: the timeout is then only for a cursor still to be saved
            wait = self.config.poll_interval
            if fd is not None and not self._dirty:
                wait = max(wait, IDLE_WAIT_S)
            if wait_readable(fds, wait) and self._stop.is_set():
                break
