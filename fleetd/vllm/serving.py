"""vLLM's latency histograms and serving counters, as current releases name them.

Names were checked against vLLM's own Prometheus logger (``vllm/v1/metrics/loggers.py``):
the histograms ``vllm:time_to_first_token_seconds``, ``vllm:inter_token_latency_seconds``
(``vllm:time_per_output_token_seconds`` before it, deprecated in its favour — the first name
present wins), ``vllm:e2e_request_latency_seconds``, ``vllm:request_queue_time_seconds``,
``vllm:request_prefill_time_seconds`` and ``vllm:request_decode_time_seconds``; the counters
``vllm:prompt_tokens_total``, ``vllm:num_preemptions_total``,
``vllm:request_success_total{finished_reason}`` and the prefix cache's
``vllm:prefix_cache_queries_total`` / ``vllm:prefix_cache_hits_total`` (``vllm:gpu_prefix_cache_*``
in the releases before).

Label cardinality stays bounded whatever a server exports: engines (data parallel) are summed,
the model name is kept for at most ``MAX_MODELS`` models per worker (more are folded into
``other``), finish reasons outside vLLM's set become ``other``, and a histogram with more than
``MAX_BUCKETS`` buckets is skipped. A histogram whose buckets are inconsistent (no ``+Inf``,
counts going down as ``le`` grows, engines disagreeing on the bounds, a count that is not the
``+Inf`` bucket) is skipped with its reason, never half-read.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from prometheus_client.samples import Sample

MAX_MODELS = 4
MAX_BUCKETS = 40
OTHER = "other"

HISTOGRAMS: dict[str, tuple[str, ...]] = {
    # fleetd family (the stored series add _bucket / _sum / _count) -> vLLM names, newest first
    "fleetd_vllm_time_to_first_token_seconds": ("vllm:time_to_first_token_seconds",),
    "fleetd_vllm_inter_token_latency_seconds": (
        "vllm:inter_token_latency_seconds",
        "vllm:time_per_output_token_seconds",
    ),
    "fleetd_vllm_e2e_request_latency_seconds": ("vllm:e2e_request_latency_seconds",),
    "fleetd_vllm_request_queue_time_seconds": ("vllm:request_queue_time_seconds",),
    "fleetd_vllm_request_prefill_time_seconds": ("vllm:request_prefill_time_seconds",),
    "fleetd_vllm_request_decode_time_seconds": ("vllm:request_decode_time_seconds",),
}
COUNTERS: dict[str, tuple[str, ...]] = {
    # fleetd counter -> vLLM sample names, newest first
    "fleetd_vllm_prompt_tokens_total": ("vllm:prompt_tokens_total",),
    "fleetd_vllm_preemptions_total": ("vllm:num_preemptions_total",),
    "fleetd_vllm_prefix_cache_queries_total": (
        "vllm:prefix_cache_queries_total",
        "vllm:gpu_prefix_cache_queries_total",
    ),
    "fleetd_vllm_prefix_cache_hits_total": (
        "vllm:prefix_cache_hits_total",
        "vllm:gpu_prefix_cache_hits_total",
    ),
}
FINISHED = "fleetd_vllm_requests_finished_total"
FINISHED_SOURCE = "vllm:request_success_total"
FINISH_REASONS = frozenset({"stop", "length", "abort", "error", "repetition"})

_WANTED_HISTOGRAMS = {name: family for family, names in HISTOGRAMS.items() for name in names}
_WANTED_COUNTERS = {name: family for family, names in COUNTERS.items() for name in names}


def le_text(bound: float) -> str:
    """A bucket bound as Prometheus writes it ("+Inf", "0.005", "1.0"), whatever the server
    wrote ("1", "1e0"), so the stored ``le`` label is one series across scrapes and versions."""
    if bound == math.inf:
        return "+Inf"
    return repr(float(bound))


@dataclass(frozen=True, slots=True)
class Histogram:
    """One cumulative histogram: (upper bound, count) ascending, ending at +Inf."""

    buckets: tuple[tuple[float, float], ...]
    sum: float
    count: float


@dataclass(frozen=True, slots=True)
class ServingValues:
    """Per model: histograms by fleetd family, counters by fleetd name, finishes by reason;
    ``skipped`` says which histogram was left out and why."""

    histograms: Mapping[tuple[str, str], Histogram] = field(default_factory=dict)  # (family, model)
    counters: Mapping[tuple[str, str], float] = field(default_factory=dict)  # (name, model)
    finished: Mapping[tuple[str, str], float] = field(default_factory=dict)  # (model, reason)
    skipped: Mapping[tuple[str, str], str] = field(default_factory=dict)  # (family, model) -> why


class _Models:
    """At most MAX_MODELS model names per worker; the rest are ``other``."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def name(self, labels: Mapping[str, str]) -> str:
        model = labels.get("model_name") or labels.get("model") or ""
        if model in self.seen:
            return model
        if len(self.seen) < MAX_MODELS:
            self.seen.append(model)
            return model
        return OTHER


@dataclass
class _Raw:
    """A histogram's samples as read, per engine (engines summed once checked)."""

    buckets: dict[str, dict[float, float]] = field(default_factory=dict)  # engine -> le -> n
    sums: dict[str, float] = field(default_factory=dict)
    counts: dict[str, float] = field(default_factory=dict)
    source: str = ""
    problem: str | None = None


def _finite(value: float) -> bool:
    return math.isfinite(value) and value >= 0


def read_serving(samples: Iterable[Sample]) -> ServingValues:
    """Pick the serving histograms and counters out of parsed samples."""
    models = _Models()
    raw: dict[tuple[str, str], _Raw] = {}
    counters: dict[tuple[str, str], float] = {}
    counter_source: dict[tuple[str, str], str] = {}
    finished: dict[tuple[str, str], float] = {}
    for sample in samples:
        name, labels, value = sample.name, sample.labels, float(sample.value)
        base, _, part = name.rpartition("_")
        if part in ("bucket", "sum", "count") and base in _WANTED_HISTOGRAMS:
            family = _WANTED_HISTOGRAMS[base]
            key = (family, models.name(labels))
            entry = raw.setdefault(key, _Raw(source=base))
            if entry.source != base:
                # an older name next to the newer one: the newer wins (listed first)
                if HISTOGRAMS[family].index(base) > HISTOGRAMS[family].index(entry.source):
                    continue
                raw[key] = entry = _Raw(source=base)
            engine = labels.get("engine", "")
            if not math.isfinite(value) or value < 0:
                entry.problem = f"{name}: value {value!r}"
            elif part == "bucket":
                try:
                    bound = float(labels["le"])
                except (KeyError, ValueError):
                    entry.problem = f"{name}: bad le {labels.get('le')!r}"
                    continue
                per = entry.buckets.setdefault(engine, {})
                per[bound] = per.get(bound, 0.0) + value
            elif part == "sum":
                entry.sums[engine] = entry.sums.get(engine, 0.0) + value
            else:
                entry.counts[engine] = entry.counts.get(engine, 0.0) + value
        elif name in _WANTED_COUNTERS and _finite(value):
            target = _WANTED_COUNTERS[name]
            key = (target, models.name(labels))
            known = counter_source.get(key)
            if known is not None and known != name:
                order = COUNTERS[target]
                if order.index(name) > order.index(known):
                    continue
                counters[key] = 0.0
            counter_source[key] = name
            counters[key] = counters.get(key, 0.0) + value
        elif name == FINISHED_SOURCE and _finite(value):
            reason = labels.get("finished_reason", "")
            reason = reason if reason in FINISH_REASONS else OTHER
            fkey = (models.name(labels), reason)
            finished[fkey] = finished.get(fkey, 0.0) + value
    histograms: dict[tuple[str, str], Histogram] = {}
    skipped: dict[tuple[str, str], str] = {}
    for key, entry in raw.items():
        result = _check(entry)
        if isinstance(result, Histogram):
            histograms[key] = result
        else:
            skipped[key] = result
    return ServingValues(histograms, counters, finished, skipped)


def _check(entry: _Raw) -> Histogram | str:
    """The engines' histograms summed, or why they cannot be used."""
    if entry.problem is not None:
        return entry.problem
    if not entry.buckets:
        return f"{entry.source}: no buckets"
    layouts = {tuple(sorted(per)) for per in entry.buckets.values()}
    if len(layouts) != 1:
        return f"{entry.source}: engines disagree on the bucket bounds"
    bounds = layouts.pop()
    if len(bounds) > MAX_BUCKETS:
        return f"{entry.source}: {len(bounds)} buckets (at most {MAX_BUCKETS} are kept)"
    if bounds[-1] != math.inf:
        return f"{entry.source}: no +Inf bucket"
    summed = [(b, math.fsum(per[b] for per in entry.buckets.values())) for b in bounds]
    if any(later[1] < earlier[1] for earlier, later in itertools.pairwise(summed)):
        return f"{entry.source}: bucket counts decrease as le grows"
    count = math.fsum(entry.counts.values()) if entry.counts else summed[-1][1]
    if entry.counts and count != summed[-1][1]:
        return f"{entry.source}: _count {count:g} is not the +Inf bucket {summed[-1][1]:g}"
    return Histogram(tuple(summed), math.fsum(entry.sums.values()), count)
