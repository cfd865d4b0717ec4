"""Interval jobs on the monotonic clock: what the daemon runs besides its HTTP threads.

It replaces APScheduler 3, whose interval triggers compute each next run time as a
wall-clock datetime and whose loop waits until the wall clock reaches it: a backward step of
the wall clock stopped every job for the length of the step. Here each job has one thread
that waits with ``threading.Event.wait`` (on the monotonic clock since Python 3.11 on
glibc ≥ 2.30) for a due time measured on ``time.monotonic``; the wall clock is never read.

What the daemon relied on is kept:

* a job never overlaps itself (its one thread runs it);
* due times that pass while a run is still going are skipped, not stacked, and their number
  goes to ``on_missed`` (``fleetd_polls_missed_total`` for the poll);
* due times that pass while the thread could not run at all (a stopped or starved process)
  coalesce into one run, uncounted;
* an exception is logged and the job runs again at its next due time; no other job notices;
* ``reschedule`` applies a new interval at once: the next run is one new interval away.

A job's first run is one interval after ``start`` (the daemon polls once before that).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from fleetd.logs import get_logger

log = get_logger("jobs")


@dataclass
class Cadence:
    """When a job is next due, on a fixed grid of ``interval`` seconds (monotonic time)."""

    interval: float
    due: float

    def after_run(self, started: float, finished: float) -> int:
        """Move ``due`` past a run that went from ``started`` to ``finished``; return the
        due times skipped because the run was still going."""
        step = self.interval
        if self.due <= started:  # due times before the start coalesced into this run
            self.due += (math.floor((started - self.due) / step) + 1) * step
        if self.due > finished:
            return 0
        missed = math.floor((finished - self.due) / step) + 1
        self.due += missed * step
        return missed


class _Job:
    def __init__(
        self,
        name: str,
        body: Callable[[], None],
        interval: float,
        on_missed: Callable[[int], None] | None,
    ) -> None:
        self.name = name
        self.body = body
        self.cadence = Cadence(interval, math.inf)
        self.on_missed = on_missed
        self.lock = threading.Lock()
        self.wake = threading.Event()
        self.thread: threading.Thread | None = None
        self.runs = 0
        self.failures = 0
        self.missed = 0


def _check_interval(seconds: float) -> float:
    if not seconds > 0 or math.isinf(seconds):
        raise ValueError(f"a job interval must be a positive number of seconds, got {seconds!r}")
    return float(seconds)


class JobRunner:
    """Named interval jobs, each on its own thread; ``start`` → ``shutdown``.

    ``timer`` must be monotonic. A test may pass a fake one and ``poke`` the runner after
    moving it: waiting threads then read it again at once.
    """

    def __init__(self, *, timer: Callable[[], float] = time.monotonic) -> None:
        self._timer = timer
        self._jobs: dict[str, _Job] = {}
        self._lock = threading.Lock()
        self._started = False
        self._stopping = threading.Event()

    @property
    def running(self) -> bool:
        return self._started and not self._stopping.is_set()

    def add(
        self,
        name: str,
        body: Callable[[], None],
        interval: float,
        *,
        on_missed: Callable[[int], None] | None = None,
    ) -> None:
        """Run ``body`` every ``interval`` seconds once started (at once if already)."""
        job = _Job(name, body, _check_interval(interval), on_missed)
        with self._lock:
            if name in self._jobs:
                raise ValueError(f"a job named {name!r} exists already")
            if self._stopping.is_set():
                raise RuntimeError("the job runner has been shut down")
            self._jobs[name] = job
            if self._started:
                self._launch(job)

    def start(self) -> None:
        with self._lock:
            if self._started:
                raise RuntimeError("the job runner is running already")
            self._started = True
            for job in self._jobs.values():
                self._launch(job)

    def reschedule(self, name: str, interval: float) -> None:
        """A new interval for ``name``, counted from now."""
        seconds = _check_interval(interval)
        job = self._jobs[name]
        with job.lock:
            job.cadence = Cadence(seconds, self._timer() + seconds)
        job.wake.set()

    def run_soon(self, name: str) -> None:
        """Run ``name`` now (once; its cadence continues from that run), unless it is running
        already: e.g. deliver an alert the moment an event fired it. Unknown names: nothing."""
        with self._lock:
            job = self._jobs.get(name)
        if job is None:
            return
        with job.lock:
            job.cadence.due = min(job.cadence.due, self._timer())
        job.wake.set()

    def run_now(self, name: str) -> None:
        """Run ``name`` once in the caller's thread, counted as its own thread counts a run.

        For a runner that is never started (``Daemon(schedule_jobs=False)``): a benchmark
        drives every job by hand on a fake clock, each at its own interval, in one thread.
        """
        with self._lock:
            job = self._jobs[name]
        self._run(job)
        with job.lock:
            job.runs += 1

    def poke(self) -> None:
        """Make every waiting job read the timer again (a test moved its fake timer)."""
        with self._lock:
            jobs = list(self._jobs.values())
        for job in jobs:
            job.wake.set()

    def shutdown(self, *, wait: bool = True) -> None:
        """Stop every job; with ``wait``, until each one's current run has finished."""
        self._stopping.set()
        with self._lock:
            jobs = list(self._jobs.values())
        for job in jobs:
            job.wake.set()
        if wait:
            current = threading.current_thread()
            for job in jobs:
                if job.thread is not None and job.thread is not current:
                    job.thread.join()

    def names(self) -> list[str]:
        with self._lock:
            return list(self._jobs)

    def stats(self, name: str) -> tuple[int, int, int]:
        """Runs finished, failed runs and skipped due times of ``name`` so far."""
        job = self._jobs[name]
        with job.lock:
            return job.runs, job.failures, job.missed

    def interval(self, name: str) -> float:
        job = self._jobs[name]
        with job.lock:
            return job.cadence.interval

    # ----------------------------------------------------------------------------- threads
    def _launch(self, job: _Job) -> None:
        with job.lock:
            job.cadence.due = self._timer() + job.cadence.interval
        job.thread = threading.Thread(target=self._loop, args=(job,), name=f"fleetd-job-{job.name}")
        job.thread.daemon = True  # a run stuck in a library call never keeps the process up
        job.thread.start()

    def _loop(self, job: _Job) -> None:
        while not self._stopping.is_set():
            with job.lock:
                delay = job.cadence.due - self._timer()
            if delay > 0:
                job.wake.wait(delay)
                job.wake.clear()  # a reschedule sets the cadence before it wakes us
                continue
            started = self._timer()
            self._run(job)
            with job.lock:  # one step: whoever sees the run counted sees it finished
                job.runs += 1
                missed = job.cadence.after_run(started, self._timer())
                job.missed += missed
            if missed and job.on_missed is not None:
                try:
                    job.on_missed(missed)
                except Exception as exc:
                    log.exception("job_missed_hook_failed", job=job.name, error=repr(exc))

    def _run(self, job: _Job) -> None:
        try:
            job.body()
        except Exception as exc:  # one failing job never stops the others, nor itself
            with job.lock:
                job.failures += 1
            log.exception("job_failed", job=job.name, error=repr(exc))
