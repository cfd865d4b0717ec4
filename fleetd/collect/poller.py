"""One poll of every GPU: a worker thread per GPU, a timeout per GPU, missing never zero.

Each physical GPU has one long-lived daemon worker thread. A poll hands every idle worker a job
(run all collectors on that GPU, and on a partitioned GPU on each of its logical devices in
turn, partition 0 first) and waits until the shared deadline. Readings of collectors
that finished in time are kept; the collector that was still running and those after it
are reported missing with reason ``timeout``, using the series that collector produced last
time. A GPU whose previous job is still stuck is not given another (no pile-up of threads):
it is reported unresponsive until its call returns. A GPU that vanished from enumeration
stays in the snapshot (present=False) with its readings missing.

Board-level collectors (``board_level = True``: power, temperatures, PCIe, RAS, XGMI, throttle)
run on partition 0 of a partitioned GPU only; on its other partitions they are *not
applicable* — no readings, no missing count, no self-metric — never missing. The partitions of
one physical GPU share one worker and one job: the thread hand-off, the deadline wait and
the hung check are per physical GPU, so a CPX node (64 logical devices) costs 8 of them, as
in SPX; a call stuck on one partition holds its siblings too (they are one device).

The poller adds two readings per GPU itself: ``fleetd_gpu_up`` and, per applicable
collector, ``fleetd_gpu_readings_missing``.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from fleetd.collect.base import Collector
from fleetd.collect.source import REASON_GPU_MISSING, REASON_TIMEOUT, GpuBackend, GpuSource
from fleetd.logs import get_logger
from fleetd.model import CollectorResult, GpuIdentity, GpuStatus, Labels, Reading, Snapshot

GPU_UP = "fleetd_gpu_up"
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


class _Worker:
    """A daemon thread that runs one GPU's jobs, one at a time.

    Daemon, so a call stuck inside the GPU library can never keep the process from exiting.
    """

    def __init__(self, name: str) -> None:
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._busy = threading.Event()
        self._busy_since: float | None = None
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    @property
    def busy(self) -> bool:
        return self._busy.is_set()

    @property
    def busy_since(self) -> float | None:
        return self._busy_since if self.busy else None

    def submit(self, job: _Job) -> None:
        self._busy.set()
        self._busy_since = job.now
        self._jobs.put(job)

    def stop(self) -> None:
        self._jobs.put(None)

    def _loop(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            try:
                job.run()
            finally:
                # idle before done: a poll that sees ``done`` may submit again at once
                self._busy.clear()
                job.done.set()


class Poller:
    """Polls every GPU of ``backend`` with ``collectors`` and returns a Snapshot.

    ``gpu_timeout`` bounds how long one poll waits for the slowest GPU (real seconds).
    ``timer`` measures durations for self-metrics; tests pass a fake one for determinism.
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
        self._workers: dict[str, _Worker] = {}  # by physical GPU (partition 0's BDF)
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
            worker = self._workers.get(physical)
            if worker is None:
                worker = _Worker(f"fleetd-gpu-{members[0].identity.index}")
                self._workers[physical] = worker
            if worker.busy:
                for gpu in members:
                    hung[gpu.identity.bdf] = worker.busy_since
                continue
            job = _Job(tuple(members), self._collectors, self._secondary, now, self._timer)
            worker.submit(job)
            pending.append(job)
            for gpu in members:
                jobs[gpu.identity.bdf] = job

        for job in pending:
            job.done.wait(max(0.0, deadline - time.monotonic()))

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
            call = running[1] if running is not None and running[0] == bdf else None
            if call is None and running is not None:
                call = f"{running[1]} on {running[0]}"  # a sibling partition's call holds it
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

    def busy(self) -> bool:
        """Whether a GPU's worker is still inside a call from an earlier poll (hung)."""
        return any(worker.busy for worker in self._workers.values())

    def close(self) -> None:
        """Let idle worker threads end (stuck ones are daemons and die with the process)."""
        for worker in self._workers.values():
            worker.stop()
        self._workers.clear()


def _with_error(status: GpuStatus, error: str) -> GpuStatus:
    return GpuStatus(
        gpu=status.gpu,
        present=status.present,
        responsive=status.responsive,
        missing_readings=status.missing_readings,
        error=error,
    )
