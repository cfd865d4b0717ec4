"""The one reading of a vLLM server's Prometheus text, for the collector and for draining.

vLLM's V1 engine labels its gauges with ``model_name`` and ``engine``; several engines (data
parallel) are summed, except KV-cache usage, which takes the fullest engine. A value that is
not a finite non-negative number is no value (never a fake zero); a KV-cache ratio above 1
is no value either.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from prometheus_client.samples import Sample

from fleetd.vllm.exposition import exposition_samples
from fleetd.vllm.serving import ServingValues, read_serving

RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
KV_CACHE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")  # new, deprecated
GENERATION = "vllm:generation_tokens_total"


@dataclass(frozen=True, slots=True)
class VllmValues:
    """What fleetd takes from one worker's /metrics; None where the server did not say."""

    running: float | None = None
    waiting: float | None = None
    kv_cache_usage: float | None = None
    generation_tokens: float | None = None
    serving: ServingValues = field(default_factory=ServingValues)
    """Latency histograms and serving counters (``fleetd.vllm.serving``)."""

    def missing_load(self) -> list[str]:
        """The load gauges the server did not export (draining needs both)."""
        return [name for name, v in ((RUNNING, self.running), (WAITING, self.waiting)) if v is None]


def parse_vllm_metrics(text: str) -> VllmValues:
    """Pick the values fleetd needs out of vLLM's Prometheus text.

    Raises ValueError when the text is not Prometheus exposition format.
    """
    sums: dict[str, float] = {}
    maxima: dict[str, float] = {}
    wanted = {RUNNING, WAITING, GENERATION, *KV_CACHE}
    rest: list[Sample] = []
    for sample in exposition_samples(text):
        if sample.name not in wanted:
            rest.append(sample)
            continue
        value = float(sample.value)
        if not math.isfinite(value) or value < 0:
            continue  # (amdsmi's sentinels mean nothing here: 65535 tokens is a count)
        sums[sample.name] = sums.get(sample.name, 0.0) + value
        maxima[sample.name] = max(maxima.get(sample.name, value), value)
    kv = next((maxima[name] for name in KV_CACHE if name in maxima), None)
    if kv is not None and kv > 1.0:
        kv = None
    return VllmValues(
        running=sums.get(RUNNING),
        waiting=sums.get(WAITING),
        kv_cache_usage=kv,
        generation_tokens=sums.get(GENERATION),
        serving=read_serving(rest),
    )
