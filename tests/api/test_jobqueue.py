"""The handler queue wakes the last handler to go idle: a steady trickle of requests stays
on one warm thread, a burst still spreads over the pool (fleetd.api.jobqueue)."""

from __future__ import annotations

import queue
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from fleetd.api.jobqueue import WarmQueue
from fleetd.api.server import HttpServer, Request, Response, Router

DEADLINE_S = 10.0


def wait_for(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.001)


def test_items_queue_in_order_up_to_the_bound() -> None:
    jobs: WarmQueue[int] = WarmQueue(2)
    jobs.put_nowait(1)
    jobs.put_nowait(2)
    with pytest.raises(queue.Full):
        jobs.put_nowait(3)
    assert [jobs.get_nowait(), jobs.get()] == [1, 2]
    with pytest.raises(queue.Empty):
        jobs.get_nowait()


def test_the_last_handler_to_go_idle_is_woken_first() -> None:
    jobs: WarmQueue[str] = WarmQueue(8)
    got: dict[str, str] = {}

    def handler(name: str) -> None:
        got[name] = jobs.get()

    threads = []
    for name in ("first", "second", "third"):
        thread = threading.Thread(target=handler, args=(name,))
        thread.start()
        threads.append(thread)
        wait_for(lambda: len(jobs._idle) == len(threads))  # each one idle before the next
    jobs.put_nowait("a")
    wait_for(lambda: "third" in got)
    jobs.put_nowait("b")
    wait_for(lambda: "second" in got)
    jobs.put_nowait("c")
    for thread in threads:
        thread.join(DEADLINE_S)
    assert got == {"third": "a", "second": "b", "first": "c"}


@pytest.fixture
def served() -> Iterator[tuple[HttpServer, list[str], threading.Barrier]]:
    names: list[str] = []
    burst = threading.Barrier(4, timeout=DEADLINE_S)
    router = Router()

    def who(_request: Request) -> Response:
        names.append(threading.current_thread().name)
        return Response.text("ok")

    def together(_request: Request) -> Response:
        burst.wait()  # only returns once four handlers are inside at once
        names.append(threading.current_thread().name)
        return Response.text("ok")

    router.add("GET", "/who", who)
    router.add("GET", "/together", together)
    running = HttpServer(router, "127.0.0.1", 0, workers=8)
    running.start()
    try:
        yield running, names, burst
    finally:
        running.stop()


def all_idle(server: HttpServer) -> bool:
    return len(server._listener.jobs._idle) == server._listener.workers


def test_a_steady_trickle_of_requests_stays_on_one_handler_thread(
    served: tuple[HttpServer, list[str], threading.Barrier],
) -> None:
    """With queue.Queue the longest-idle handler took each request: 30 scrapes in a row went
    round all eight threads, and each one's arena and stack stayed resident."""
    server, names, _ = served
    for _ in range(30):
        wait_for(lambda: all_idle(server))
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/who", timeout=10) as r:
            assert r.read() == b"ok"
    assert len(names) == 30
    assert len(set(names)) == 1


def test_a_burst_still_spreads_over_the_pool(
    served: tuple[HttpServer, list[str], threading.Barrier],
) -> None:
    server, names, _ = served
    wait_for(lambda: all_idle(server))

    def fetch(_: int) -> bytes:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/together", timeout=10) as r:
            return r.read()

    with ThreadPoolExecutor(4) as pool:
        assert list(pool.map(fetch, range(4))) == [b"ok"] * 4
    assert len(set(names)) == 4
