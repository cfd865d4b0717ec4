"""Storage that fails soft: the daemon keeps polling, evaluating and alerting from memory.

``ResilientStore`` owns the database connection, the sample store, its maintenance and the
event log. Nothing it does raises into the poll loop: a failed write (disk full, database
locked by another writer, I/O error) is counted, the poll is kept in a bounded in-memory
backlog, storage is reported degraded with the reason, and the write is retried after a
back-off (doubling up to a maximum) — the backlog is flushed a few polls at a time once the
database answers again. A corrupt SQLite file is moved aside (renamed with a UTC timestamp
suffix, together with its WAL; never deleted) and a fresh database is started at once, at
start and while running: ``maintenance`` runs ``PRAGMA quick_check`` every
``integrity_check_interval`` (off the poll's path), so garbage in the WAL or the main file is
found even when nothing happens to read the damaged page.

The poll never waits on storage: ``append`` and ``append_event`` wait at most
``POLL_LOCK_WAIT`` for the store's lock (held by maintenance, say, stuck behind another
process's write lock) and otherwise keep the poll in memory; a retry first checks with a
50 ms wait that the write lock can be had at all. A state directory that cannot hold the
database at start (read-only, immutable, no such directory) does not stop the daemon:
``start`` falls back to a database in memory, storage reports degraded for the whole run
(``store_memory_only``), and polling, rules and alerts work as usual.

Reads go through the same object (it implements ``StoredQuery``) and raise ``StoreError``
when the database cannot answer; ``HybridQuery`` then answers from memory.
"""

from __future__ import annotations

import errno
import shutil
import sqlite3
import tempfile
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy.exc import SQLAlchemyError

from fleetd.configbase import Secret
from fleetd.errors import StoreError
from fleetd.logs import get_logger
from fleetd.model import Reading, Sample, SeriesKey
from fleetd.query import Matcher, QueryBase, RangeSpan, WindowFn
from fleetd.store.config import StoreConfig
from fleetd.store.db import Database, SchemaTooNewError
from fleetd.store.events import Event, EventKind, EventLog
from fleetd.store.functions import Summary
from fleetd.store.maintenance import Maintenance, MaintenanceReport
from fleetd.store.samples import Rider, SampleStore

log = get_logger("store")

OPS = ("open", "write", "read", "maintenance", "event", "corrupt")
FLUSH_PER_WRITE = 30  # backlog polls written alongside each new poll after a recovery
EVENT_BACKLOG = 1000
POLL_LOCK_WAIT = 0.05  # the longest a poll waits for the store's lock before keeping its data
PROBE_WAIT = 0.05  # a retry's look at the write lock before the real write waits busy_timeout
SCRATCH_DIRS = ("/dev/shm", None)  # where a run without storage keeps its database (None: TMPDIR)

_CORRUPT_CODES = {sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB}
_SQLITE_REASONS = {
    sqlite3.SQLITE_BUSY: "database locked by another writer",
    sqlite3.SQLITE_LOCKED: "database locked by another writer",
    sqlite3.SQLITE_FULL: "disk full",
    sqlite3.SQLITE_IOERR: "I/O error (disk full or failing)",
    sqlite3.SQLITE_READONLY: "database is read-only",
    sqlite3.SQLITE_CANTOPEN: "cannot open the database file",
    sqlite3.SQLITE_CORRUPT: "database file is corrupt",
    sqlite3.SQLITE_NOTADB: "file is not a database",
}


class CorruptDatabaseError(StoreError):
    """An integrity check found the database damaged."""


@dataclass(frozen=True, slots=True)
class Failure:
    """Why a storage operation failed, in words for health and logs."""

    reason: str
    corrupt: bool = False


def classify(exc: BaseException) -> Failure:
    """Turn a database exception into a reason (and whether the file is corrupt)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, CorruptDatabaseError):
            return Failure(f"database file is corrupt ({current})", corrupt=True)
        if isinstance(current, sqlite3.Error):
            code = getattr(current, "sqlite_errorcode", None)
            if code is not None:
                primary = code & 0xFF
                reason = _SQLITE_REASONS.get(primary, f"sqlite error {current}")
                return Failure(reason, corrupt=primary in _CORRUPT_CODES)
            text = str(current).lower()
            if "malformed" in text or "not a database" in text:
                return Failure("database file is corrupt", corrupt=True)
            if "locked" in text or "busy" in text:
                return Failure("database locked by another writer")
            if "disk is full" in text:
                return Failure("disk full")
            if "readonly" in text or "read-only" in text:
                return Failure("database is read-only")
        if isinstance(current, OSError) and current.errno in (errno.ENOSPC, errno.EFBIG):
            return Failure("disk full")
        if isinstance(current, OSError) and current.errno in (errno.EROFS, errno.EACCES):
            return Failure("database is read-only")
        current = getattr(current, "orig", None) or current.__cause__ or current.__context__
    if isinstance(exc, StoreError):
        return Failure(str(exc))
    if isinstance(exc, SQLAlchemyError):
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return Failure(f"database error: {first[:200]}")
    return Failure(f"{type(exc).__name__}: {exc}")


_DB_ERRORS = (SQLAlchemyError, StoreError, OSError, sqlite3.Error)
_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class _PendingEvent:
    """An event waiting for the database to come back."""

    kind: str
    now: float
    node: str
    gpu: int | None
    message: str
    data: Mapping[str, Any]
    actor: str | None = None

    def write(self, events: EventLog) -> int:
        return events.append(
            self.kind,
            now=self.now,
            node=self.node,
            gpu=self.gpu,
            message=self.message,
            data=self.data,
            actor=self.actor,
        )


@dataclass(frozen=True, slots=True)
class StoreHealth:
    """For /healthz and the storage alert: degraded (with why and since when) or fine."""

    degraded: bool
    reason: str | None = None
    since: float | None = None
    backlog_polls: int = 0


@dataclass(frozen=True, slots=True)
class StoreStats:
    """Counters for the ``fleetd_store_*`` metrics."""

    errors: Mapping[str, int] = field(default_factory=dict)
    degraded: bool = False
    samples_written: int = 0
    disk_bytes: int | None = None
    budget_dropped_bytes: int = 0
    backlog_polls: int = 0
    backlog_dropped_polls: int = 0


def move_aside(path: Path, now: float) -> Path:
    """Rename a database file (and its WAL/SHM) to ``<name>.corrupt-<UTC time>``; never delete."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
    target = path.with_name(f"{path.name}.corrupt-{stamp}")
    n = 1
    while target.exists():
        n += 1
        target = path.with_name(f"{path.name}.corrupt-{stamp}-{n}")
    path.rename(target)
    for suffix in ("-wal", "-shm"):
        side = Path(f"{path}{suffix}")
        if side.exists():
            side.rename(Path(f"{target}{suffix}"))
    return target


class ResilientStore(QueryBase):
    """The daemon's storage handle: never raises into the poll loop."""

    def __init__(self, url: Secret | str, config: StoreConfig, *, node: str) -> None:
        self._url = url if isinstance(url, Secret) else Secret(url)
        self._too_new = False
        self._scratch: Path | None = None  # the temporary directory of a run without storage
        self.config = config
        self.node = node
        self.db: Database | None = None
        self.samples: SampleStore | None = None
        self.events: EventLog | None = None
        self.maintenance_jobs: Maintenance | None = None
        self._errors: Counter[str] = Counter()
        self._backlog: deque[tuple[Reading, ...]] = deque()
        self._event_backlog: deque[_PendingEvent] = deque(maxlen=EVENT_BACKLOG)
        self._backlog_dropped = 0
        self._samples_written = 0
        self._budget_dropped_base = 0
        self._degraded: tuple[str, float] | None = None
        self._retry_at = 0.0
        self._backoff = config.retry_interval
        self._disk_bytes: int | None = None
        self._corrupt: BaseException | None = None
        self._memory_only: str | None = None  # why the database lives in memory this run
        self._waiting: deque[tuple[Reading, ...]] = deque(maxlen=max(1, config.backlog_polls))
        self._last_check: float | None = None  # the last integrity check (None: not yet)
        # the poll thread writes, the scheduler runs maintenance, API threads read and log
        self._lock = threading.RLock()

    # --------------------------------------------------------------------- open / close
    def open(self, now: float) -> bool:
        """Connect (creating or upgrading the schema); a corrupt file is moved aside."""
        with self._lock:
            try:
                self._connect()
            except _DB_ERRORS as exc:
                failure = classify(exc)
                if failure.corrupt and self._move_aside(now, exc):
                    try:
                        self._connect()
                    except _DB_ERRORS as again:
                        self._fail("open", again, now)
                        return False
                    self._recovered(now)
                    return True
                self._fail("open", exc, now)
                return False
            self._recovered(now)
            return True

    def start(self, now: float) -> bool:
        """``open`` at daemon start; when a SQLite file cannot be opened (read-only or
        immutable state directory, I/O error) run on a database in memory instead of
        leaving the node unmonitored. False only when even that is impossible or the
        database must not be replaced (a schema newer than this fleetd; PostgreSQL)."""
        if self.open(now):
            return True
        with self._lock:
            reason = self._degraded[0] if self._degraded else "cannot open the database"
            if _sqlite_path(self._url.reveal()) is None or self._too_new:
                return False
            try:
                self._connect(self._scratch_url())
            except _DB_ERRORS as exc:
                self._fail("open", exc, now)
                return False
            self._memory_only = reason
            self._degraded = (f"running without storage: {reason}", now)
            log.error(
                "store_memory_only",
                reason=reason,
                detail="the state database cannot be written; fleetd runs with a database in "
                "memory (alerts flow, nothing survives a restart); fix the state directory "
                "and restart fleetd",
            )
            return True

    def _scratch_url(self) -> str:
        """A SQLite file in memory (tmpfs under /dev/shm, else the temporary directory),
        removed at close: an in-memory SQLite database is one connection, which the
        daemon's threads cannot share."""
        for where in SCRATCH_DIRS:
            try:
                folder = tempfile.mkdtemp(prefix="fleetd-nostorage-", dir=where)
            except OSError:
                continue
            self._scratch = Path(folder)
            return f"sqlite:///{self._scratch / 'fleetd.db'}"
        raise StoreError("no writable temporary directory for a database in memory")

    @property
    def memory_only(self) -> str | None:
        """Why this run keeps its database in memory, or None."""
        return self._memory_only

    def _connect(self, url: str | None = None) -> None:
        self.close()
        self._too_new = False
        try:
            db = self._open_database(url or self._url.reveal())
        except SchemaTooNewError:
            self._too_new = True
            raise
        self._install(db)

    def _open_database(self, url: str) -> Database:
        return Database.open(
            url,
            busy_timeout=self.config.busy_timeout,
            synchronous=self.config.synchronous,
        )

    def _install(self, db: Database) -> None:
        try:
            samples = SampleStore(db)
            events = EventLog(db)
        except BaseException:
            db.dispose()
            raise
        self.db, self.samples, self.events = db, samples, events
        old = self.maintenance_jobs
        if old is not None:
            self._budget_dropped_base += old.budget_dropped_bytes_total
        self.maintenance_jobs = Maintenance(samples, self.config, events, node=self.node)

    def close(self) -> None:
        with self._lock:
            if self.db is not None:
                self.db.dispose()
            self.db = self.samples = self.events = None
            if self._scratch is not None and self._memory_only is not None:
                shutil.rmtree(self._scratch, ignore_errors=True)
                self._scratch = None

    def _move_aside(self, now: float, exc: BaseException) -> bool:
        """Rename a corrupt SQLite file out of the way; False if it is not a file we own."""
        path = self.db.path if self.db is not None else _sqlite_path(self._url.reveal())
        self.close()
        if path is None or not path.exists():
            return False
        self._errors["corrupt"] += 1
        try:
            moved = move_aside(path, now)
        except OSError as err:
            log.error("store_corrupt_not_moved", path=str(path), error=str(err))
            return False
        log.error(
            "store_corrupt_moved_aside",
            path=str(path),
            moved_to=str(moved),
            error=str(exc).splitlines()[0] if str(exc) else type(exc).__name__,
        )
        self._event_backlog.append(
            _PendingEvent(
                kind=EventKind.STORAGE.value,
                now=now,
                node=self.node,
                gpu=None,
                message=f"corrupt database moved aside to {moved}; started a fresh one",
                data={"moved_to": str(moved), "error": classify(exc).reason},
            )
        )
        return True

    # ------------------------------------------------------------------------- writing
    def append(
        self,
        readings: Iterable[Reading],
        *,
        now: float,
        also: Rider | None = None,
    ) -> bool:
        """Store one poll; True when it reached the database, False when it was kept in the
        backlog (storage degraded). Never raises for storage errors. ``also`` writes in the
        poll's transaction (``SampleStore.append``); it is not run when the poll is kept."""
        batch = tuple(r for r in readings if r.value is not None)
        if not self._lock.acquire(timeout=POLL_LOCK_WAIT):
            self._waiting.append(batch)  # maintenance holds the store: never wait for it
            return False
        try:
            while self._waiting:
                self._keep(self._waiting.popleft())
            if not self._ready(now):
                self._keep(batch)
                return False
            samples = self.samples
            assert samples is not None
            try:
                for _ in range(min(FLUSH_PER_WRITE, len(self._backlog))):
                    self._samples_written += samples.append(self._backlog[0])
                    self._backlog.popleft()
                self._samples_written += samples.append(batch, also=also)
            except _DB_ERRORS as exc:
                self._keep(batch)
                self._fail("write", exc, now)
                return False
            self._recovered(now)
            self._flush_events(now)
            return True
        finally:
            self._lock.release()

    def _ready(self, now: float) -> bool:
        """Connected and not backing off; reconnects when a retry is due."""
        if self._corrupt is not None:
            exc, self._corrupt = self._corrupt, None
            if self._move_aside(now, exc):
                return self.open(now)
        if self._memory_only is not None:
            return self.samples is not None
        if self._degraded is not None and now < self._retry_at:
            return False
        if self.samples is None:
            return self.open(now)
        if self._degraded is not None and self.db is not None:
            problem = self._write_problem(self.db)
            if problem is not None:  # still locked or read-only: cheap to find out
                self._fail("write", problem, now)
                return False
        return True

    @staticmethod
    def _write_problem(db: Database) -> BaseException | None:
        """Why a write transaction cannot start within PROBE_WAIT, or None."""
        if not db.is_sqlite:
            return None
        try:
            with db.begin(timeout=PROBE_WAIT) as conn:
                conn.exec_driver_sql("SELECT 1")
        except _DB_ERRORS as exc:
            return exc
        return None

    def _keep(self, batch: tuple[Reading, ...]) -> None:
        limit = self.config.backlog_polls
        if limit <= 0:
            self._backlog_dropped += 1
            return
        if len(self._backlog) >= limit:
            self._backlog.popleft()
            self._backlog_dropped += 1
        self._backlog.append(batch)

    def _fail(self, op: str, exc: BaseException, now: float) -> None:
        self._errors[op] += 1
        failure = classify(exc)
        if failure.corrupt and op != "open" and self._move_aside(now, exc) and self.open(now):
            return
        first = self._degraded is None
        if first:
            self._degraded = (failure.reason, now)
            self._backoff = self.config.retry_interval
        else:
            self._backoff = min(self._backoff * 2, self.config.retry_interval_max)
        self._retry_at = now + self._backoff
        if self.db is not None and failure.reason != _SQLITE_REASONS[sqlite3.SQLITE_BUSY]:
            # drop connections a failed statement may have left unusable (not for a lock:
            # the pooled connections are what keeps reads working meanwhile)
            self.db.dispose()
        log.warning(
            "store_degraded" if first else "store_retry_failed",
            op=op,
            reason=failure.reason,
            retry_in_s=self._backoff,
            backlog_polls=len(self._backlog),
        )

    def _recovered(self, now: float) -> None:
        if self._memory_only is not None:
            return  # degraded for the whole run
        if self._degraded is not None:
            reason, since = self._degraded
            log.info(
                "store_recovered",
                reason=reason,
                degraded_for_s=round(now - since, 3),
                backlog_polls=len(self._backlog),
            )
        self._degraded = None
        self._backoff = self.config.retry_interval
        self._retry_at = 0.0

    # -------------------------------------------------------------------------- events
    def append_event(
        self,
        kind: str,
        *,
        now: float,
        gpu: int | None = None,
        message: str,
        data: Mapping[str, Any] | None = None,
        actor: str | None = None,
        node: str | None = None,
    ) -> int | None:
        """Record an event; None when storage is down (it is kept and written later)."""
        entry = _PendingEvent(kind, now, node or self.node, gpu, message, dict(data or {}), actor)
        if not self._lock.acquire(timeout=POLL_LOCK_WAIT):
            self._event_backlog.append(entry)  # written with the next one
            return None
        try:
            if self._ready(now) and self.events is not None:
                self._flush_events(now)
                try:
                    return entry.write(self.events)
                except _DB_ERRORS as exc:
                    self._fail("event", exc, now)
            self._event_backlog.append(entry)
            return None
        finally:
            self._lock.release()

    def _flush_events(self, now: float) -> None:
        events = self.events
        while self._event_backlog and events is not None:
            try:
                self._event_backlog[0].write(events)
            except _DB_ERRORS as exc:
                self._fail("event", exc, now)
                return
            self._event_backlog.popleft()

    def query_events(self, **filters: Any) -> list[Event]:
        """``EventLog.query`` with the same filters; StoreError when storage is down."""
        if self.events is None:
            raise StoreError(self._unavailable())
        try:
            return self.events.query(**filters)
        except _DB_ERRORS as exc:
            raise self._read_failed(exc) from exc

    # --------------------------------------------------------------------- maintenance
    def maintenance(self, now: float) -> MaintenanceReport | None:
        """One bounded step of compaction, rollups, retention and the disk budget."""
        with self._lock:
            if not self._ready(now) or self.maintenance_jobs is None:
                return None
            try:
                report = self.maintenance_jobs.step(now)
            except _DB_ERRORS as exc:
                self._fail("maintenance", exc, now)
                return None
            self._disk_bytes = self.maintenance_jobs.disk_bytes
            self._check_integrity(now)
            return report

    def _check_integrity(self, now: float) -> None:
        """``PRAGMA quick_check`` every ``integrity_check_interval``; a damaged file is
        moved aside and a fresh one started, as at start. The check itself runs outside the
        store's lock (it reads every page; the poll's writes must not wait for it)."""
        interval = self.config.integrity_check_interval
        if interval <= 0 or self._memory_only is not None:
            return
        if self._last_check is not None and now - self._last_check < interval:
            return
        self._last_check = now
        db = self.db
        if db is None or not db.is_sqlite:
            return
        self._lock.release()
        try:
            problem: BaseException | None = None
            try:
                found = db.quick_check()
                if found is not None:
                    problem = CorruptDatabaseError(f"quick_check: {found}")
            except _DB_ERRORS as exc:
                if classify(exc).corrupt:
                    problem = exc
        finally:
            self._lock.acquire()
        if problem is None or db is not self.db:
            return
        log.error("store_integrity_check_failed", error=str(problem).splitlines()[0][:300])
        self._fail("maintenance", problem, now)

    # ---------------------------------------------------------------------- reporting
    def health(self) -> StoreHealth:
        degraded = self._degraded
        if degraded is None:
            return StoreHealth(False, backlog_polls=len(self._backlog))
        reason, since = degraded
        return StoreHealth(True, reason, since, len(self._backlog))

    def stats(self) -> StoreStats:
        jobs = self.maintenance_jobs
        dropped = self._budget_dropped_base + (jobs.budget_dropped_bytes_total if jobs else 0)
        return StoreStats(
            errors={op: self._errors.get(op, 0) for op in OPS},
            degraded=self._degraded is not None,
            samples_written=self._samples_written,
            disk_bytes=self._disk_bytes,
            budget_dropped_bytes=dropped,
            backlog_polls=len(self._backlog),
            backlog_dropped_polls=self._backlog_dropped,
        )

    # ------------------------------------------------------------------------- reading
    def _unavailable(self) -> str:
        reason = self._degraded[0] if self._degraded else "not open"
        return f"storage unavailable: {reason}"

    def _read_failed(self, exc: BaseException) -> StoreError:
        self._errors["read"] += 1
        failure = classify(exc)
        if failure.corrupt:
            self._corrupt = exc  # moved aside on the next write or maintenance (they know now)
        return StoreError(f"storage read failed: {failure.reason}")

    def _read(self, call: Callable[[SampleStore], _T]) -> _T:
        """``call`` on the sample store; a database error is counted and raised as StoreError."""
        try:
            if self.samples is None:
                raise StoreError(self._unavailable())
            return call(self.samples)
        except _DB_ERRORS as exc:
            raise self._read_failed(exc) from exc

    def series(self, metric: str, matchers: Sequence[Matcher] = ()) -> list[SeriesKey]:
        return self._read(lambda s: s.series(metric, matchers))

    def _latest(
        self, metric: str, matchers: Sequence[Matcher], now: float, max_age: float | None
    ) -> dict[SeriesKey, Sample]:
        return self._read(lambda s: s.latest(metric, matchers, now=now, max_age=max_age))

    def _window(
        self, fn: WindowFn, metric: str, matchers: Sequence[Matcher], window: float, now: float
    ) -> dict[SeriesKey, float]:
        return self._read(lambda s: s.window(fn, metric, matchers, window=window, now=now))

    def _range(
        self, metric: str, matchers: Sequence[Matcher], span: RangeSpan
    ) -> dict[SeriesKey, list[Sample]]:
        return self._read(lambda s: s._range(metric, matchers, span))

    def summaries(
        self, metric: str, matchers: Sequence[Matcher] = (), *, start: float, end: float
    ) -> dict[SeriesKey, Summary]:
        return self._read(lambda s: s.summaries(metric, matchers, start=start, end=end))

    def recent_columns(
        self, since: float, until: float
    ) -> Iterable[tuple[SeriesKey, list[float], list[float]]]:
        return self._read(lambda s: list(s.recent_columns(since, until)))


def _sqlite_path(url: str) -> Path | None:
    if not url.startswith("sqlite") or ":///" not in url:
        return None
    name = url.split(":///", 1)[1].split("?", 1)[0]
    return None if not name or name == ":memory:" else Path(name)
