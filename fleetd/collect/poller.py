"""One poll of every GPU: a worker thread per GPU, a timeout per GPU, missing never zero.

Each GPU has one long-lived daemon worker thread. A poll hands every idle worker a job
(run all collectors on that GPU) and waits until the shared deadline. Readings of collectors
that finished in time are kept; the collector that was still running and those after it
are reported missing with reason ``timeout``, using the series that collector produced last
time. A GPU whose previous job is still stuck is not given another (no pile-up of threads):
it is reported unresponsive until its call returns. A GPU that vanished from enumeration
stays in the snapshot (present=False) with its readings missing.

The poller adds two readings per GPU itself: ``fleetd_gpu_up`` and, per collector,
``fleetd_gpu_readings_missing``.
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
    """All collectors on one GPU; the worker fills ``outcomes`` as each collector finishes."""

    gpu: GpuSource
    collectors: Sequence[Collector]
    now: float
    timer: Callable[[], float]
    done: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    outcomes: dict[str, _Outcome] = field(default_factory=dict)
    running: str | None = None
    abandoned: bool = False

    def run(self) -> None:
        """Run the collectors in order; the worker signals ``done`` afterwards."""
        for collector in self.collectors:
            with self.lock:
                if self.abandoned:
                    return
                self.running = collector.name
            start = self.timer()
            error: str | None = None
            try:
                if getattr(collector, "board_level", False) and not self.gpu.identity.primary:
                    readings = []  # not applicable on a secondary partition: not missing
                else:
                    readings = collector.collect(self.gpu, self.now)
            except Exception as exc:  # a collector bug fails that collector alone
                readings, error = [], f"{type(exc).__name__}: {exc}"
                log.error(
                    "collector_failed",
                    collector=collector.name,
                    gpu=self.gpu.identity.index,
                    error=error,
                )
            outcome = _Outcome(readings, self.timer() - start, error)
            with self.lock:
                if self.abandoned:
                    return
                self.outcomes[collector.name] = outcome
                self.running = None

    def harvest(self) -> tuple[dict[str, _Outcome], str | None, bool]:
        """Stop accepting results: (finished outcomes, collector still running, finished?)."""
        with self.lock:
            self.abandoned = True
            return dict(self.outcomes), self.running, self.done.is_set()


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
        self._node = node
        self._timeout = gpu_timeout
        self._timer = timer
        self._workers: dict[str, _Worker] = {}
        # last series each collector produced per GPU: what to report missing next time
        self._templates: dict[tuple[str, str], tuple[tuple[str, Labels], ...]] = {}

    def poll(self, now: float) -> Snapshot:
        start = self._timer()
        deadline = time.monotonic() + self._timeout
        sources = self._backend.sources()
        jobs: dict[str, _Job] = {}
        hung: dict[str, float | None] = {}
        for gpu in sources:
            if not gpu.present:
                continue
            bdf = gpu.identity.bdf
            worker = self._workers.get(bdf)
            if worker is None:
                worker = _Worker(f"fleetd-gpu-{gpu.identity.index}")
                self._workers[bdf] = worker
            if worker.busy:
                hung[bdf] = worker.busy_since
                continue
            job = _Job(gpu, self._collectors, now, self._timer)
            worker.submit(job)
            jobs[bdf] = job

        for pending in jobs.values():
            pending.done.wait(max(0.0, deadline - time.monotonic()))

        statuses: list[GpuStatus] = []
        readings: list[Reading] = []
        per_collector: dict[str, list[tuple[float, str | None]]] = {
            c.name: [] for c in self._collectors
        }
        for gpu in sources:
            identity = gpu.identity
            maybe_job = jobs.get(identity.bdf)
            if maybe_job is not None:
                status, gpu_readings = self._finished(identity, maybe_job, now, per_collector)
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
        identity: GpuIdentity,
        job: _Job,
        now: float,
        per_collector: dict[str, list[tuple[float, str | None]]],
    ) -> tuple[GpuStatus, list[Reading]]:
        outcomes, running, finished = job.harvest()
        readings: list[Reading] = []
        missing_by: dict[str, int] = {}
        for collector in self._collectors:
            name = collector.name
            outcome = outcomes.get(name)
            if outcome is None:
                got = self._missing_from_template(identity, name, now, REASON_TIMEOUT)
                if name == running:
                    per_collector[name].append((0.0, f"timeout on gpu {identity.index}"))
            else:
                got = outcome.readings
                per_collector[name].append((outcome.duration_s, outcome.error))
                if outcome.error is None:
                    self._templates[(identity.bdf, name)] = tuple((r.metric, r.labels) for r in got)
            missing_by[name] = sum(1 for r in got if r.value is None)
            readings.extend(got)
        present = job.gpu.present  # a call may have found the GPU gone mid-poll
        responsive = present and finished and len(outcomes) == len(self._collectors)
        readings.extend(self._gpu_readings(identity, now, responsive, missing_by))
        error: str | None = None
        if not present:
            error = REASON_GPU_MISSING
        elif not responsive:
            error = f"timeout after {self._timeout}s in {running}"
            log.warning("gpu_poll_timeout", gpu=identity.index, bdf=identity.bdf, call=running)
        status = GpuStatus(
            gpu=identity,
            present=present,
            responsive=responsive,
            missing_readings=sum(missing_by.values()),
            error=error,
        )
        return status, readings

    def _absent(
        self, identity: GpuIdentity, gpu: GpuSource, now: float, reason: str, *, present: bool
    ) -> tuple[GpuStatus, list[Reading]]:
        """A GPU that cannot be asked: its series are reported missing with ``reason``.

        Collectors that never touch the GPU (``needs_gpu = False``, e.g. identity) still run,
        so a vanished or hung GPU stays identifiable.
        """
        readings: list[Reading] = []
        missing_by: dict[str, int] = {}
        for collector in self._collectors:
            if getattr(collector, "needs_gpu", True):
                got = self._missing_from_template(identity, collector.name, now, reason)
            else:
                got = collector.collect(gpu, now)
            missing_by[collector.name] = sum(1 for r in got if r.value is None)
            readings.extend(got)
        readings.extend(self._gpu_readings(identity, now, False, missing_by))
        status = GpuStatus(
            gpu=identity,
            present=present,
            responsive=False,
            missing_readings=sum(missing_by.values()),
            error=reason,
        )
        return status, readings

    def _missing_from_template(
        self, identity: GpuIdentity, collector: str, now: float, reason: str
    ) -> list[Reading]:
        template = self._templates.get((identity.bdf, collector), ())
        return [Reading(metric, labels, None, now, reason) for metric, labels in template]

    @staticmethod
    def _gpu_readings(
        identity: GpuIdentity, now: float, up: bool, missing_by: dict[str, int]
    ) -> list[Reading]:
        base = identity.labels
        readings = [Reading(GPU_UP, base, 1.0 if up else 0.0, now)]
        for name, missing in missing_by.items():
            labels = tuple(sorted((*base, ("collector", name))))
            readings.append(Reading(READINGS_MISSING, labels, float(missing), now))
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
