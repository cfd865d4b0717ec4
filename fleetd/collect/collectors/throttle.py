"""Throttling from gpu_metrics residency accumulators, without the 100 ms violation call.

amdsmi_get_violation_status sleeps 100 ms per GPU to diff two gpu_metrics samples. Here
the previous poll's sample is the first one, so the ratio covers the whole poll interval
and costs nothing extra. The first poll after start or rediscovery has no ratio (missing,
reason ``no_previous_sample``). The raw accumulators are exported too, so rules and
Prometheus can compute residency over any window.
"""

from __future__ import annotations

from fleetd.collect import parse
from fleetd.collect.base import Readings, attempt, field
from fleetd.collect.source import GpuSource
from fleetd.model import Reading

RESIDENCY = "fleetd_gpu_throttle_residency_total"
ACCUMULATION = "fleetd_gpu_throttle_accumulation_total"
RATIO = "fleetd_gpu_throttle_ratio"

REASONS = (
    ("ppt", "ppt_residency_acc"),
    ("socket_thermal", "socket_thm_residency_acc"),
    ("hbm_thermal", "hbm_thm_residency_acc"),
    ("vr_thermal", "vr_thm_residency_acc"),
    ("prochot", "prochot_residency_acc"),
)
_MEMO = "throttle_previous"
NO_PREVIOUS = "no_previous_sample"


class ThrottleCollector:
    name = "throttle"
    board_level = True  # partition 0 only: NOT applicable on other partitions

    def collect(self, gpu: GpuSource, now: float) -> list[Reading]:
        out = Readings(gpu.identity, now)
        memo = gpu.memo()
        metrics, err = attempt(gpu.per_poll, "gpu_metrics", now, gpu.gpu_metrics)
        previous: dict[str, object] | None = memo.get(_MEMO)

        acc = field(metrics, "accumulation_counter")
        out.add(ACCUMULATION, parse.count(acc), acc, reason=err)
        for label, key in REASONS:
            labels = (("reason", label),)
            raw = field(metrics, key)
            out.add(RESIDENCY, parse.count(raw), raw, reason=err, labels=labels)
            if err is not None:
                out.missing(RATIO, err, labels=labels)
            elif previous is None:
                out.missing(RATIO, NO_PREVIOUS, labels=labels)
            else:
                before, acc_before = previous.get(key), previous.get("accumulation_counter")
                ratio = parse.residency_ratio(before, raw, acc_before, acc)
                reason = None
                if ratio is None:
                    reason = parse.first_reason(raw, acc, before, acc_before)
                out.add(RATIO, ratio, reason=reason, labels=labels)
        if err is None and parse.count(acc) is not None:
            memo[_MEMO] = {key: field(metrics, key) for _, key in REASONS} | {
                "accumulation_counter": acc
            }
        return out.items
