"""The C heap's free pages go back to the kernel every few minutes (fleetd.heap)."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

from fleetd.heap import HEAP_TRIM_INTERVAL_S, HeapTrimmer, libc_malloc_trim

GLIBC = platform.libc_ver()[0] == "glibc"


class Trims:
    def __init__(self) -> None:
        self.pads: list[int] = []

    def __call__(self, pad: int) -> int:
        self.pads.append(pad)
        return 1


def test_the_first_call_starts_the_count_and_each_interval_trims_once() -> None:
    trims = Trims()
    heap = HeapTrimmer(300.0, trims)
    assert not heap.maybe(1000.0)  # the heap is young: nothing to give back yet
    assert not heap.maybe(1299.0)
    assert heap.maybe(1300.0)
    assert not heap.maybe(1310.0)
    assert not heap.maybe(1599.0)
    assert heap.maybe(1650.0)
    assert trims.pads == [0, 0]  # pad 0: keep nothing spare at the top of the heap
    assert heap.trims == 2


def test_a_wall_clock_step_back_starts_the_count_again_rather_than_stopping_trims() -> None:
    trims = Trims()
    heap = HeapTrimmer(300.0, trims)
    heap.maybe(10_000.0)
    assert not heap.maybe(5_000.0)  # stepped back over an hour: counted from here
    assert not heap.maybe(5_299.0)
    assert heap.maybe(5_300.0)
    assert len(trims.pads) == 1


def test_without_malloc_trim_the_trimmer_does_nothing() -> None:
    heap = HeapTrimmer(300.0, None)
    assert not heap.available
    assert not any(heap.maybe(t) for t in range(0, 10_000, 100))
    assert heap.trims == 0


@pytest.mark.skipif(not GLIBC, reason="malloc_trim is glibc's; this C library has none")
def test_glibc_trim_returns_free_pages_from_inside_the_heap() -> None:
    """What the daemon relies on: freed blocks between live ones keep their pages in RSS
    until malloc_trim hands them back, though nothing at the top of the heap is free."""
    code = """
from fleetd.heap import libc_malloc_trim

def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20

blocks = [bytearray(64 * 1024) for _ in range(1500)]  # below the mmap threshold: in the heap
for i in range(0, len(blocks) - 1, 2):
    blocks[i] = None  # every other block freed; the last stays, so the top is not free
before = rss_mb()
libc_malloc_trim()(0)
print(before - rss_mb())
"""
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert float(out.stdout) > 30  # about half of the ~94 MB allocated came back


@pytest.mark.skipif(not GLIBC, reason="malloc_trim is glibc's; this C library has none")
def test_the_daemons_trimmer_finds_glibcs_malloc_trim() -> None:
    assert libc_malloc_trim() is not None
    heap = HeapTrimmer.for_this_libc()
    assert heap.available
    assert heap.interval == HEAP_TRIM_INTERVAL_S
