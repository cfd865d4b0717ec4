"""One poll of every GPU: one worker thread in turn, a timeout per poll, missing never zero.

A poll hands the GPUs' jobs (all collectors on one physical GPU, and on a partitioned GPU on
each of its logical devices in turn, partition 0 first) to one long-lived daemon worker,
which runs them one after another: eight threads contending for the interpreter lock, which
every amdsmi call releases and retakes, cost several times the CPU of one. When every
worker on the poll has been inside its current job for ``HAND_OFF_AFTER_S`` with GPUs still
waiting, the poller adds a worker from its pool, so a slow or hung GPU delays the others by
that much, not by the timeout. At the shared deadline the readings of collectors that
finished are kept; the collector that was still running and those after it (and a GPU whose
turn never came) are reported missing with reason ``timeout``, using the series that
collector produced last time. A GPU whose job is still stuck in a call is given no other
(no pile-up of threads: its worker stays with the call): it is reported unresponsive until
the call returns. A GPU that vanished from enumeration stays in the snapshot
(present=False) with its readings missing.

Board-level collectors (``board_level = True``: power, temperatures, PCIe, RAS, XGMI, throttle)
run on partition 0 of a partitioned GPU only; on its other partitions they are *not
applicable* — no readings, no missing count, no self-metric — never missing. The partitions of
one physical GPU share one job: the hung check is per physical GPU, so a CPX node (64 logical
devices) runs 8 jobs, as in SPX; a call stuck on one partition holds its siblings too (they
are one device).

The poller adds two readings per GPU itself: ``fleetd_gpu_up`` and, per applicable
collector, ``fleetd_gpu_readings_missing``.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from fleetd.collect.base import Collector
from fleetd.collect.source import REASON_GPU_MISSING, REASON_TIMEOUT, GpuBackend, GpuSource
from fleetd.logs import get_logger
from fleetd.model import CollectorResult, GpuIdentity, GpuStatus, Labels, Reading, Snapshot

GPU_UP = "fleetd_gpu_up"
# a worker inside one GPU's job this long, with GPUs waiting their turn, gets a helper
HAND_OFF_AFTER_S = 0.1
READINGS_MISSING = "fleetd_gpu_readings_missing"


log = get_logger("collect.poller")


@dataclass(slots=True)
class _Outcome:
    """One collector on one GPU in one poll."""

    readings: list[Reading]
    duration_s: float
    error: str | None = None


@dataclass(slots=True)
class _Job:
    """All collectors on the logical devices of one physical GPU (one device unless it is
    partitioned); the worker fills ``outcomes`` (by BDF and collector) as each finishes."""

    gpus: tuple[GpuSource, ...]
    primary: tuple[Collector, ...]
    secondary: tuple[Collector, ...]
    now: float
    timer: Callable[[], float]
    done: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    outcomes: dict[tuple[str, str], _Outcome] = field(default_factory=dict)
    running: tuple[str, str] | None = None
    abandoned: bool = False
    harvested: tuple[dict[tuple[str, str], _Outcome], tuple[str, str] | None] | None = None

    def run(self) -> None:
        """Run the collectors in order, device by device; the worker signals ``done`` after."""
        timer, now, lock = self.timer, self.now, self.lock
        for gpu in self.gpus:
            identity = gpu.identity
            bdf = identity.bdf
            for collector in self.primary if identity.primary else self.secondary:
                name = collector.name
                with lock:
                    if self.abandoned:
                        return
                    self.running = (bdf, name)
                start = timer()
                error: str | None = None
                try:
                    readings = collector.collect(gpu, now)
                except Exception as exc:  # a collector bug fails that collector alone
                    readings, error = [], f"{type(exc).__name__}: {exc}"
                    log.error("collector_failed", collector=name, gpu=identity.index, error=error)
                outcome = _Outcome(readings, timer() - start, error)
                with lock:
                    if self.abandoned:
                        return
                    self.outcomes[(bdf, name)] = outcome
                    self.running = None

    def harvest(self) -> tuple[dict[tuple[str, str], _Outcome], tuple[str, str] | None]:
        """Stop accepting results: (finished outcomes, (BDF, collector) still running); the
        same answer for every device of the job."""
        with self.lock:
            if self.harvested is None:
                self.abandoned = True
                self.harvested = (dict(self.outcomes), self.running)
            return self.harvested


class _Run:
    """The jobs of one poll, taken in turn by one worker, or by more when each stalls.

    One thread running the GPUs one after another costs a fraction of eight threads
    contending for the interpreter lock (every amdsmi call releases and retakes it). The
    poller adds a worker only when every worker on the run has been inside its current job
    for ``HAND_OFF_AFTER_S``: a slow or hung GPU delays the GPUs after it by that, not by
    the timeout.
    """

    def __init__(self, jobs: Sequence[_Job]) -> None:
        self._queue = deque(jobs)
        self._changed = threading.Condition()
        self._started: dict[_Worker, float] = {}  # worker → when its current job began
        self._unfinished = len(jobs)
        self._closed = False
        self._handed_off = time.monotonic()  # as good as a job start: no hand-off before

    def next_job(self, worker: _Worker, *, finished: _Job | None = None) -> _Job | None:
        """The next job for ``worker``, after it ``finished`` one; None: the run is empty or
        closed, and the worker is back in its pool before the poll can see the run complete
        (so the next poll finds it idle)."""
        with self._changed:
            job: _Job | None = None
            if self._closed or not self._queue:
                self._started.pop(worker, None)
                worker.idle()
            else:
                self._started[worker] = time.monotonic()
                job = self._queue.popleft()
            if finished is not None:
                self._unfinished -= 1
                self._changed.notify_all()
            return job

    def wait(self, until: float, hand_off_after: float) -> bool:
        """Wait until every job finished (True), ``until`` passed (False), or every worker
        has been inside its current job for ``hand_off_after`` with jobs still waiting
        (True; the caller adds a worker)."""
        with self._changed:
            while self._unfinished:
                now = time.monotonic()
                if now >= until:
                    return False
                wake = until
                if self._queue:
                    latest = max([self._handed_off, *self._started.values()])
                    stalled_at = latest + hand_off_after
                    if stalled_at <= now:
                        self._handed_off = now
                        return True
                    wake = min(wake, stalled_at)
                self._changed.wait(wake - now)
            return True

    @property
    def complete(self) -> bool:
        with self._changed:
            return not self._unfinished

    @property
    def waiting(self) -> bool:
        with self._changed:
            return bool(self._queue)

    def close(self) -> None:
        """Take no more jobs; those never started are done (they never ran)."""
        with self._changed:
            self._closed = True
            unstarted = list(self._queue)
            self._queue.clear()
        for job in unstarted:
            job.done.set()


class _Worker:
    """A daemon thread that takes jobs from the runs it is given, then goes back to its pool.

    Daemon, so a call stuck inside the GPU library can never keep the process from exiting.
    """

    def __init__(self, name: str, pool: _Pool) -> None:
        self._runs: queue.SimpleQueue[_Run | None] = queue.SimpleQueue()
        self._pool = pool
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def submit(self, run: _Run) -> None:
        self._runs.put(run)

    def stop(self) -> None:
        self._runs.put(None)

    def idle(self) -> None:
        self._pool.release(self)

    def _loop(self) -> None:
        while True:
            run = self._runs.get()
            if run is None:
                return
            job = run.next_job(self)
            while job is not None:
                try:
                    job.run()
                except Exception as exc:  # a bug here must not end the thread or the poll
                    log.error("poll_job_failed", error=f"{type(exc).__name__}: {exc}")
                finally:
                    job.done.set()
                job = run.next_job(self, finished=job)


class _Pool:
    """The poll's worker threads: one in the common case, one more for each GPU stuck in a
    call (its worker stays with the call until it returns) or each stall being handed off."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: list[_Worker] = []
        self._started = 0  # names the threads

    def acquire(self) -> _Worker:
        with self._lock:
            if self._idle:
                return self._idle.pop()
            self._started += 1
            return _Worker(f"fleetd-poll-{self._started - 1}", self)

    def release(self, worker: _Worker) -> None:
        with self._lock:
            self._idle.append(worker)

    def close(self) -> None:
        """Let idle workers end (stuck ones are daemons and die with the process)."""
        with self._lock:
            idle, self._idle = self._idle, []
        for worker in idle:
            worker.stop()


class Poller:
    """Polls every GPU of ``backend`` with ``collectors`` and returns a Snapshot.

    ``gpu_timeout`` bounds how long one poll waits for the slowest GPU (real seconds).
    ``timer`` measures durations for self-metrics; tests pass a fake one for determinism.
    ``hand_off_after`` (at most a quarter of the timeout): how long every worker may be inside
    one GPU's job, with GPUs waiting, before another worker takes them.
    Not re-entrant: the daemon never overlaps polls.
    """

    def __init__(
        self,
        backend: GpuBackend,
        collectors: Sequence[Collector],
        *,
        node: str,
        gpu_timeout: float,
        timer: Callable[[], float] = time.perf_counter,
        hand_off_after: float = HAND_OFF_AFTER_S,
    ) -> None:
        if gpu_timeout <= 0:
            raise ValueError("gpu_timeout must be greater than zero")
        names = [c.name for c in collectors]
        if len(set(names)) != len(names):
            raise ValueError(f"collector names must be unique: {names}")
        self._backend = backend
        self._collectors = tuple(collectors)
        # what runs on a secondary partition: the collectors that are not board-level
        self._secondary = tuple(c for c in collectors if not getattr(c, "board_level", False))
        self._node = node
        self._timeout = gpu_timeout
        self._timer = timer
        self._hand_off_after = min(hand_off_after, gpu_timeout / 4)
        self._pool = _Pool()
        # by physical GPU (partition 0's BDF): its job from an earlier poll, still inside a
        # call (hung); the GPU gets no other job until that one returns
        self._stuck: dict[str, _Job] = {}
        # last readings each collector produced per GPU: their series are what to report
        # missing next time (kept as they came: a poll copies nothing)
        self._templates: dict[tuple[str, str], Sequence[Reading]] = {}
        # the labels of each GPU's per-collector series, built once per identity
        self._collector_labels: dict[tuple[str, str], tuple[Labels, Labels]] = {}

    def _applicable(self, identity: GpuIdentity) -> tuple[Collector, ...]:
        return self._collectors if identity.primary else self._secondary

    def poll(self, now: float) -> Snapshot:
        start = self._timer()
        deadline = time.monotonic() + self._timeout
        sources = self._backend.sources()
        groups: dict[str, list[GpuSource]] = {}
        for gpu in sources:
            if gpu.present:
                groups.setdefault(gpu.identity.physical_bdf, []).append(gpu)
        jobs: dict[str, _Job] = {}  # by logical device's BDF
        hung: dict[str, float | None] = {}
        pending: list[_Job] = []
        for physical, members in groups.items():
            stuck = self._stuck.get(physical)
            if stuck is not None and not stuck.done.is_set():
                for gpu in members:
                    hung[gpu.identity.bdf] = stuck.now
                continue
            self._stuck.pop(physical, None)
            job = _Job(tuple(members), self._collectors, self._secondary, now, self._timer)
            pending.append(job)
            for gpu in members:
                jobs[gpu.identity.bdf] = job
        self._run(pending, deadline)

        statuses: list[GpuStatus] = []
        readings: list[Reading] = []
        per_collector: dict[str, list[tuple[float, str | None]]] = {
            c.name: [] for c in self._collectors
        }
        for gpu in sources:
            identity = gpu.identity
            maybe_job = jobs.get(identity.bdf)
            if maybe_job is not None:
                status, gpu_readings = self._finished(gpu, maybe_job, now, per_collector)
            elif identity.bdf in hung:
                status, gpu_readings = self._absent(
                    identity, gpu, now, REASON_TIMEOUT, present=True
                )
                since = hung[identity.bdf]
                status = _with_error(status, f"previous poll (at {since}) still running")
            else:
                status, gpu_readings = self._absent(
                    identity, gpu, now, REASON_GPU_MISSING, present=False
                )
            statuses.append(status)
            readings.extend(gpu_readings)

        collectors = tuple(
            CollectorResult(
                name=name,
                success=all(err is None for _, err in runs),
                duration_s=sum(d for d, _ in runs),
                error=next((err for _, err in runs if err is not None), None),
            )
            for name, runs in per_collector.items()
        )
        return Snapshot(
            node=self._node,
            ts=now,
            gpus=tuple(statuses),
            readings=tuple(readings),
            collectors=collectors,
            duration_s=self._timer() - start,
        )

    def _finished(
        self,
        gpu: GpuSource,
        job: _Job,
        now: float,
        per_collector: dict[str, list[tuple[float, str | None]]],
    ) -> tuple[GpuStatus, list[Reading]]:
        identity = gpu.identity
        bdf = identity.bdf
        outcomes, running = job.harvest()
        readings: list[Reading] = []
        missing_by: dict[str, int] = {}
        applicable = self._applicable(identity)
        complete = True
        for collector in applicable:
            name = collector.name
            outcome = outcomes.get((bdf, name))
            if outcome is None:
                complete = False
                got = self._missing_from_template(identity, name, now, REASON_TIMEOUT)
                if running == (bdf, name):
                    per_collector[name].append((0.0, f"timeout on gpu {identity.index}"))
            else:
                got = outcome.readings
                per_collector[name].append((outcome.duration_s, outcome.error))
                if outcome.error is None:
                    self._templates[(bdf, name)] = got
            missing = 0
            for r in got:
                if r.value is None:
                    missing += 1
            missing_by[name] = missing
            readings.extend(got)
        present = gpu.present  # a call may have found the GPU gone mid-poll
        responsive = present and complete
        error: str | None = None
        if not present:
            error = REASON_GPU_MISSING
        elif not responsive:
            call: str | None = None
            if running is None:  # not started (the GPUs before it took the time), or between
                where = "between calls" if outcomes else "waiting for its turn"
                error = f"timeout after {self._timeout}s {where}"
            else:
                call = running[1] if running[0] == bdf else f"{running[1]} on {running[0]}"
                error = f"timeout after {self._timeout}s in {call}"
            log.warning("gpu_poll_timeout", gpu=identity.index, bdf=bdf, call=call)
        return self._status(identity, now, readings, missing_by, present, responsive, error)

    def _absent(
        self, identity: GpuIdentity, gpu: GpuSource, now: float, reason: str, *, present: bool
    ) -> tuple[GpuStatus, list[Reading]]:
        """A GPU that cannot be asked: its series are reported missing with ``reason``.

        Collectors that never touch the GPU (``needs_gpu = False``, e.g. identity) still run,
        so a vanished or hung GPU stays identifiable.
        """
        readings: list[Reading] = []
        missing_by: dict[str, int] = {}
        for collector in self._applicable(identity):
            if getattr(collector, "needs_gpu", True):
                got = self._missing_from_template(identity, collector.name, now, reason)
            else:
                got = collector.collect(gpu, now)
            missing_by[collector.name] = sum(1 for r in got if r.value is None)
            readings.extend(got)
        return self._status(identity, now, readings, missing_by, present, False, reason)

    def _status(
        self,
        identity: GpuIdentity,
        now: float,
        readings: list[Reading],
        missing_by: dict[str, int],
        present: bool,
        responsive: bool,
        error: str | None,
    ) -> tuple[GpuStatus, list[Reading]]:
        """The GPU's status, and ``readings`` with its gpu_up and per-collector missing counts."""
        readings.extend(self._gpu_readings(identity, now, responsive, missing_by))
        status = GpuStatus(
            gpu=identity,
            present=present,
            responsive=responsive,
            missing_readings=sum(missing_by.values()),
            error=error,
        )
        return status, readings

    def _missing_from_template(
        self, identity: GpuIdentity, collector: str, now: float, reason: str
    ) -> list[Reading]:
        template = self._templates.get((identity.bdf, collector), ())
        return [Reading(r.metric, r.labels, None, now, reason) for r in template]

    def _gpu_readings(
        self, identity: GpuIdentity, now: float, up: bool, missing_by: dict[str, int]
    ) -> list[Reading]:
        base = identity.labels
        readings = [Reading(GPU_UP, base, 1.0 if up else 0.0, now)]
        for name, missing in missing_by.items():
            cached = self._collector_labels.get((identity.bdf, name))
            if cached is None or cached[0] is not base:  # new, or the identity was re-read
                cached = (base, tuple(sorted((*base, ("collector", name)))))
                self._collector_labels[(identity.bdf, name)] = cached
            readings.append(Reading(READINGS_MISSING, cached[1], float(missing), now))
        return readings

    def _run(self, jobs: list[_Job], deadline: float) -> None:
        """Run ``jobs`` on one worker, adding one whenever all of them stall, until every job
        is done or ``deadline`` passes; a job still running then marks its GPU stuck."""
        if not jobs:
            return
        run = _Run(jobs)
        self._pool.acquire().submit(run)
        while run.wait(deadline, self._hand_off_after) and not run.complete:
            if run.waiting:
                self._pool.acquire().submit(run)
        run.close()
        for job in jobs:
            if not job.done.is_set():
                self._stuck[job.gpus[0].identity.physical_bdf] = job

    def busy(self) -> bool:
        """Whether a GPU's job from an earlier poll is still inside a call (hung)."""
        return any(not job.done.is_set() for job in self._stuck.values())

    def close(self) -> None:
        """Let idle worker threads end (stuck ones are daemons and die with the process)."""
        self._pool.close()


def _with_error(status: GpuStatus, error: str) -> GpuStatus:
    return GpuStatus(
        gpu=status.gpu,
        present=status.present,
        responsive=status.responsive,
        missing_readings=status.missing_readings,
        error=error,
    )
