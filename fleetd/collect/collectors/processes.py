"""Processes using each GPU, on a slow cadence.

amdsmi_get_gpu_process_list scans /proc and rebuilds KFD topology per process; it scales
badly, so it runs at most every ``interval`` seconds per GPU. In between, the last values
are re-published with the current poll time (like cached static values), so /metrics and
rules see a steady series whose staleness is bounded by ``interval``.
"""

from __future__ import annotations

from fleetd.collect import parse
from fleetd.collect.base import Readings, attempt
from fleetd.collect.source import GpuSource
from fleetd.model import Reading

PROCESSES = "fleetd_gpu_processes"
PROCESS_MEMORY = "fleetd_gpu_process_memory_bytes"
_MEMO = "processes_last"


class ProcessesCollector:
    name = "processes"

    def __init__(self, interval: float = 30.0) -> None:
        if interval < 0:
            raise ValueError("interval must not be negative")
        self.interval = interval

    def collect(self, gpu: GpuSource, now: float) -> list[Reading]:
        memo = gpu.memo()
        last: tuple[float, float | None, float | None, str | None] | None = memo.get(_MEMO)
        if not gpu.present:  # never re-publish old values for a GPU that is gone
            last = None
            memo.pop(_MEMO, None)
        if last is None or now - last[0] >= self.interval or now < last[0]:
            records, err = attempt(gpu.process_list)
            if err is None and records is not None:
                valid = [r for r in records if isinstance(r, dict)]
                count: float | None = float(len(valid)) if len(valid) == len(records) else None
                memory = parse.process_memory(valid) if count is not None else None
                reason = None if count is not None else parse.REASON_WRONG_TYPE
            else:
                count, memory, reason = None, None, err
            last = (now, count, memory, reason)
            memo[_MEMO] = last
        _, count, memory, reason = last
        out = Readings(gpu.identity, now)
        out.add(PROCESSES, count, reason=reason)
        out.add(
            PROCESS_MEMORY,
            memory,
            reason=reason or (parse.REASON_WRONG_TYPE if memory is None else None),
        )
        return out.items
