"""The monotonic job runner: cadence, no overlap, missed runs counted, failures contained.

The runner's timer is a FakeClock's monotonic time; after moving it a test ``poke``s the
runner so waiting threads look again. The tests wait (with a deadline) only for the job
threads to get there, never for time to pass.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest

from fleetd.clock import FakeClock
from fleetd.jobs import Cadence, JobRunner

JOIN_S = 10.0


@pytest.fixture
def runner(clock: FakeClock) -> Iterator[JobRunner]:
    jobs = JobRunner(timer=clock.monotonic)
    yield jobs
    jobs.shutdown(wait=True)


class Counter:
    """A job body that counts its runs, then does ``then`` (with the run's number)."""

    def __init__(self, then: Callable[[int], None] | None = None) -> None:
        self.runs = 0
        self._then = then

    def __call__(self) -> None:
        self.runs += 1
        if self._then is not None:
            self._then(self.runs)


def move(clock: FakeClock, runner: JobRunner, to: float) -> None:
    clock.set(to)
    runner.poke()


def finished(runner: JobRunner, name: str, runs: int) -> None:
    """Wait until ``name`` has finished ``runs`` runs (and so is waiting for its next)."""
    deadline = time.monotonic() + JOIN_S
    while runner.stats(name)[0] < runs:
        assert time.monotonic() < deadline, f"{name}: {runner.stats(name)}"
        time.sleep(0.001)


# ------------------------------------------------------------------------------ cadence
def test_a_run_within_its_interval_is_followed_by_the_next_grid_time() -> None:
    cadence = Cadence(10.0, due=100.0)
    assert cadence.after_run(100.0, 103.0) == 0
    assert cadence.due == 110.0


def test_due_times_passed_during_a_run_are_skipped_and_counted() -> None:
    cadence = Cadence(10.0, due=100.0)
    assert cadence.after_run(100.0, 135.0) == 3  # 110, 120 and 130 fell inside the run
    assert cadence.due == 140.0


def test_due_times_passed_before_a_late_start_coalesce_into_the_run() -> None:
    cadence = Cadence(10.0, due=100.0)
    assert cadence.after_run(135.0, 136.0) == 0  # a stalled process: one run, not counted
    assert cadence.due == 140.0


def test_a_rescheduled_due_time_after_the_start_is_kept() -> None:
    cadence = Cadence(2.0, due=107.0)  # rescheduled at 105 during a run that began at 101
    assert cadence.after_run(101.0, 106.0) == 0
    assert cadence.due == 107.0


# ------------------------------------------------------------------------------- runner
def test_jobs_run_every_interval_after_start(clock: FakeClock, runner: JobRunner) -> None:
    fast, slow = Counter(), Counter()
    runner.add("fast", fast, 1.0)
    runner.add("slow", slow, 5.0)
    start = clock.monotonic()
    runner.start()
    assert runner.running and runner.names() == ["fast", "slow"]
    for second in range(1, 6):
        move(clock, runner, start + second)
        finished(runner, "fast", second)
    finished(runner, "slow", 1)
    assert fast.runs == 5 and slow.runs == 1
    assert runner.stats("fast") == (5, 0, 0)


def test_a_job_never_overlaps_itself_and_counts_the_runs_it_skipped(
    clock: FakeClock, runner: JobRunner
) -> None:
    gate, inside, missed = threading.Event(), threading.Event(), threading.Event()
    active, most = 0, 0
    lock = threading.Lock()
    skipped: list[int] = []

    def poll(_: int) -> None:
        nonlocal active, most
        with lock:
            active += 1
            most = max(most, active)
        inside.set()
        gate.wait(JOIN_S)
        with lock:
            active -= 1

    def on_missed(count: int) -> None:
        skipped.append(count)
        missed.set()

    body = Counter(poll)
    runner.add("poll", body, 10.0, on_missed=on_missed)
    start = clock.monotonic()
    runner.start()
    move(clock, runner, start + 10)
    assert inside.wait(JOIN_S)
    move(clock, runner, start + 45)  # the run takes 3.5 intervals
    gate.set()
    assert missed.wait(JOIN_S)
    assert skipped == [3] and most == 1 and body.runs == 1
    assert runner.stats("poll") == (1, 0, 3)
    move(clock, runner, start + 50)  # back on its grid
    finished(runner, "poll", 2)
    assert most == 1 and runner.stats("poll") == (2, 0, 3)


def test_a_failing_job_runs_again_and_never_stops_another(
    clock: FakeClock, runner: JobRunner
) -> None:
    def fail(n: int) -> None:
        raise RuntimeError(f"run {n} failed")

    bad, good = Counter(fail), Counter()
    runner.add("bad", bad, 1.0)
    runner.add("good", good, 1.0)
    start = clock.monotonic()
    runner.start()
    for second in (1, 2, 3):
        move(clock, runner, start + second)
        finished(runner, "bad", second)
        finished(runner, "good", second)
    assert runner.stats("bad") == (3, 3, 0)
    assert runner.stats("good") == (3, 0, 0) and good.runs == bad.runs == 3


def test_reschedule_counts_the_new_interval_from_now(clock: FakeClock, runner: JobRunner) -> None:
    poll = Counter()
    runner.add("poll", poll, 100.0)
    start = clock.monotonic()
    runner.start()
    move(clock, runner, start + 5)
    runner.reschedule("poll", 2.0)
    assert runner.interval("poll") == 2.0
    move(clock, runner, start + 7)
    finished(runner, "poll", 1)
    move(clock, runner, start + 9)
    finished(runner, "poll", 2)
    assert poll.runs == 2


def test_reschedule_before_start_applies_at_start(clock: FakeClock) -> None:
    jobs = JobRunner(timer=clock.monotonic)
    poll = Counter()
    jobs.add("poll", poll, 100.0)
    jobs.reschedule("poll", 1.0)
    start = clock.monotonic()
    jobs.start()
    try:
        move(clock, jobs, start + 1)
        finished(jobs, "poll", 1)
    finally:
        jobs.shutdown()


def test_shutdown_waits_for_a_running_job_and_stops_idle_ones(
    clock: FakeClock, runner: JobRunner
) -> None:
    gate, inside = threading.Event(), threading.Event()

    def long_step() -> None:
        inside.set()
        gate.wait(JOIN_S)

    runner.add("long", long_step, 1.0)
    runner.add("idle", lambda: None, 3600.0)
    runner.start()
    move(clock, runner, clock.monotonic() + 1)
    assert inside.wait(JOIN_S)
    stopping = threading.Thread(target=runner.shutdown, daemon=True)
    stopping.start()
    stopping.join(0.2)
    assert stopping.is_alive(), "shutdown returned while a run was still going"
    gate.set()
    stopping.join(JOIN_S)
    assert not stopping.is_alive() and not runner.running
    assert [t.name for t in threading.enumerate() if t.name.startswith("fleetd-job-")] == []


def test_names_and_intervals_are_checked(runner: JobRunner) -> None:
    runner.add("poll", lambda: None, 1.0)
    with pytest.raises(ValueError):
        runner.add("poll", lambda: None, 1.0)
    with pytest.raises(ValueError):
        runner.add("other", lambda: None, 0.0)
    with pytest.raises(ValueError):
        runner.reschedule("poll", float("nan"))


def test_run_now_runs_a_job_in_the_callers_thread_and_counts_it(runner: JobRunner) -> None:
    """A runner never started (a benchmark's hand-driven daemon): each run is counted as
    its thread would count it, a failure included, and the body runs in the caller's thread."""
    threads: list[str] = []

    def body() -> None:
        threads.append(threading.current_thread().name)
        if len(threads) == 2:
            raise RuntimeError("second run fails")

    runner.add("work", body, 5.0)
    runner.run_now("work")
    runner.run_now("work")
    runner.run_now("work")
    assert threads == [threading.current_thread().name] * 3
    assert runner.stats("work") == (3, 1, 0)
    assert not runner.running
    with pytest.raises(KeyError):
        runner.run_now("absent")
