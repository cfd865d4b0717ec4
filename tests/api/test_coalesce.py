"""Coalesced: overlapping callers share a run that began after they arrived; sequential
callers always get a fresh run; a failure is shared, not swallowed."""

from __future__ import annotations

import threading
import time

import pytest

from fleetd.api.coalesce import Coalesced


def test_sequential_callers_always_get_a_fresh_run() -> None:
    counter = iter(range(100))
    shared = Coalesced(lambda: next(counter))
    assert [shared() for _ in range(5)] == [0, 1, 2, 3, 4]
    assert shared.runs == 5


def test_a_burst_shares_a_few_runs_each_newer_than_its_caller() -> None:
    started: list[float] = []

    def slow() -> float:
        started.append(time.monotonic())
        time.sleep(0.05)
        return started[-1]

    shared = Coalesced(slow)
    barrier = threading.Barrier(50)
    seen: list[tuple[float, float]] = []
    lock = threading.Lock()

    def caller() -> None:
        barrier.wait()
        arrived = time.monotonic()
        result = shared()
        with lock:
            seen.append((arrived, result))

    threads = [threading.Thread(target=caller) for _ in range(50)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert len(seen) == 50
    assert shared.runs <= 3
    # a caller may share only a run that began after it arrived (or the one it started)
    assert all(result >= arrived - 0.01 for arrived, result in seen)


def test_a_failure_is_raised_to_every_caller_that_shared_it() -> None:
    calls = 0

    def broken() -> int:
        nonlocal calls
        calls += 1
        raise RuntimeError("store down")

    shared = Coalesced(broken)
    for _ in range(2):
        with pytest.raises(RuntimeError, match="store down"):
            shared()
    assert calls == 2
