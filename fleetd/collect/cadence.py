"""Cadence tiers: which readings are slow, and the small per-GPU bookkeeping of a slow read.

A slow part of a collector runs every ``every`` polls (``collect.slow_every``) — or at once
when the collector says so (the ECC guard) — and in between the readings it produced last
are returned again *with the time they were read*: /metrics keeps the series, the store and
the memory window keep one sample per real read, and the rules see the true data age, with
a staleness limit stretched by the same factor (``metric_cadence``).
"""

from __future__ import annotations

from collections.abc import Callable

from fleetd.collect.source import GpuSource
from fleetd.model import Reading

SLOW_METRICS: frozenset[str] = frozenset(
    {
        "fleetd_gpu_ecc_block_errors_total",
        "fleetd_gpu_retired_pages",
        "fleetd_gpu_clock_hertz",
        "fleetd_gpu_xgmi_read_bytes_total",
        "fleetd_gpu_xgmi_write_bytes_total",
        "fleetd_gpu_power_cap_watts",
        # static (read once per discovery), sent with the slow tier: no sample every poll
        "fleetd_gpu_ecc_enabled",
        "fleetd_gpu_retired_pages_threshold",
        "fleetd_gpu_temperature_limit_celsius",
    }
)
"""Metrics read on the slow tier: the rules allow them ``slow_every`` polls per read."""


def metric_cadence(slow_every: int) -> tuple[tuple[str, int], ...]:
    """(metric, polls per read) of every metric not read every poll, for the rule engine."""
    if slow_every <= 1:
        return ()
    return tuple((metric, slow_every) for metric in sorted(SLOW_METRICS))


def slow_every_of(every: int) -> int:
    """A collector's ``slow_every`` (its slow tier reads every that many polls), checked."""
    if every < 1:
        raise ValueError("slow_every must be at least 1")
    return every


def slow_part(
    gpu: GpuSource,
    key: str,
    every: int,
    read: Callable[[], list[Reading]],
    *,
    force: bool = False,
) -> tuple[list[Reading], bool]:
    """(readings, read now?): ``read()`` when due (every ``every`` polls of this GPU, or
    ``force``); otherwise what it returned last time, unchanged (same values, same read
    times). Rediscovery clears the memo, so a GPU's slow readings are read again on its
    first poll after it."""
    memo = gpu.memo()
    count_key, last_key = f"slow_polls:{key}", f"slow_last:{key}"
    last: list[Reading] | None = memo.get(last_key)
    waited = memo.get(count_key, 0) + 1
    if force or last is None or waited >= every or not gpu.present:
        readings = read()
        memo[last_key] = readings
        memo[count_key] = 0
        return list(readings), True
    memo[count_key] = waited
    return list(last), False
