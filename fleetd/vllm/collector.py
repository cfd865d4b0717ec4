"""vLLM workers as time series: scrape each worker, map it to its GPUs, tokens per joule.

Each configured worker (``VllmWorkerConfig``) serves one or more GPUs; its readings carry
``worker`` and ``gpu`` labels, one copy per GPU it serves, so they join with the GPU series
on ``gpu``. A dead or slow worker never raises: ``fleetd_vllm_up`` is 0 and its other
readings are missing with a reason. The values come from ``fleetd.vllm.metrics``, the same
parser the drain reads load with.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import requests

from fleetd.collect import parse
from fleetd.logs import get_logger
from fleetd.model import GpuIdentity, Reading, Snapshot, label_value, make_labels
from fleetd.vllm.client import fetch_values
from fleetd.vllm.config import VllmWorkerConfig
from fleetd.vllm.metrics import VllmValues
from fleetd.vllm.serving import FINISHED, ServingValues, le_text

log = get_logger("vllm.collector")

UP = "fleetd_vllm_up"
RUNNING = "fleetd_vllm_requests_running"
WAITING = "fleetd_vllm_requests_waiting"
KV_CACHE = "fleetd_vllm_kv_cache_usage_ratio"
GENERATION_TOKENS = "fleetd_vllm_generation_tokens_total"
TOKENS_PER_JOULE = "fleetd_gpu_tokens_per_joule"
TOKENS_PER_SECOND = "fleetd_vllm_generation_tokens_per_second"
ENERGY = "fleetd_gpu_energy_joules_total"

REASON_NO_PREVIOUS = "no_previous_sample"
REASON_COUNTER_RESET = "counter_reset"
REASON_NO_ENERGY = "no_energy"


@dataclass(frozen=True, slots=True)
class VllmScrape:
    """One scrape of every worker: readings, and the workers that could not be scraped."""

    readings: tuple[Reading, ...]
    failed_workers: tuple[str, ...]


class VllmScraper:
    """Scrapes each worker's /health and /metrics with ``session`` (timeouts on every call)."""

    def __init__(
        self,
        workers: Sequence[VllmWorkerConfig],
        session: requests.Session,
        *,
        timeout: float = 2.0,
    ) -> None:
        self._workers = tuple(workers)
        self._session = session
        self._timeout = timeout
        self._reported: set[tuple[str, str, str, str]] = set()

    def scrape(self, now: float) -> VllmScrape:
        readings: list[Reading] = []
        failed: list[str] = []
        for worker in self._workers:
            up, values, reason = fetch_values(self._session, worker, self._timeout)
            if reason is not None:
                failed.append(worker.name)
            readings += worker_readings(worker, up, values, reason, now)
            self._report_skipped(worker, values.serving)
        return VllmScrape(tuple(readings), tuple(failed))

    def _report_skipped(self, worker: VllmWorkerConfig, serving: ServingValues) -> None:
        """A histogram left out is logged once per worker, family, model and reason."""
        for (family, model), why in serving.skipped.items():
            key = (worker.name, family, model, why)
            if key not in self._reported and len(self._reported) < 10_000:
                self._reported.add(key)
                log.warning("vllm_histogram_skipped", worker=worker.name, family=family,
                            model=model, reason=why)  # fmt: skip


def worker_readings(
    worker: VllmWorkerConfig,
    up: bool,
    values: VllmValues,
    reason: str | None,
    now: float,
) -> list[Reading]:
    """One worker's readings, one copy per GPU it serves."""
    readings: list[Reading] = []
    fields = (
        (RUNNING, values.running),
        (WAITING, values.waiting),
        (KV_CACHE, values.kv_cache_usage),
        (GENERATION_TOKENS, values.generation_tokens),
    )
    for gpu in worker.gpus:
        labels = make_labels({"worker": worker.name, "gpu": gpu})
        readings.append(Reading(UP, labels, 1.0 if up else 0.0, now))
        for metric, value in fields:
            why = None if value is not None else (reason or parse.REASON_ABSENT)
            readings.append(Reading(metric, labels, value, now, why))
    readings += serving_readings(worker, values.serving, now)
    return readings


def serving_readings(worker: VllmWorkerConfig, serving: ServingValues, now: float) -> list[Reading]:
    """Histogram buckets, sums and counts, serving counters, finishes by reason.

    One copy per worker and model, not per GPU: summing them over workers must not count a
    tensor-parallel worker once per GPU (join on ``worker`` with ``fleetd_vllm_up`` to reach
    the GPUs). A series the server did not export is simply absent, so it goes stale.
    """
    out: list[Reading] = []
    for (family, model), hist in sorted(serving.histograms.items()):
        base = {"worker": worker.name, "model": model}
        for bound, count in hist.buckets:
            labels = make_labels({**base, "le": le_text(bound)})
            out.append(Reading(f"{family}_bucket", labels, count, now))
        labels = make_labels(base)
        out.append(Reading(f"{family}_sum", labels, hist.sum, now))
        out.append(Reading(f"{family}_count", labels, hist.count, now))
    for (name, model), value in sorted(serving.counters.items()):
        out.append(Reading(name, make_labels({"worker": worker.name, "model": model}), value, now))
    for (model, reason), value in sorted(serving.finished.items()):
        labels = make_labels({"worker": worker.name, "model": model, "reason": reason})
        out.append(Reading(FINISHED, labels, value, now))
    return out


# --- tokens per joule ------------------------------------------------------------------


def tokens_per_joule(
    workers: Sequence[VllmWorkerConfig],
    tokens_before: Mapping[str, float | None],
    tokens_after: Mapping[str, float | None],
    energy_before: Mapping[int, float | None],
    energy_after: Mapping[int, float | None],
    gpus: Mapping[int, GpuIdentity],
    now: float,
) -> list[Reading]:
    """Generation tokens per joule for each GPU that serves a worker, over one interval.

    A worker's token increase is split evenly across its GPUs; a GPU serving several
    workers adds their shares. Missing energy, a counter that went backwards (a reset) or
    no energy spent gives a missing reading, never zero or infinity.
    """
    shares: dict[int, float] = {}
    blocked: dict[int, str] = {}
    for worker in workers:
        before, after = tokens_before.get(worker.name), tokens_after.get(worker.name)
        if before is None or after is None:
            reason = REASON_NO_PREVIOUS if before is None and after is not None else "no_tokens"
            for gpu in worker.gpus:
                blocked.setdefault(gpu, reason)
        elif after < before:
            for gpu in worker.gpus:
                blocked.setdefault(gpu, REASON_COUNTER_RESET)
        else:
            share = (after - before) / len(worker.gpus)
            for gpu in worker.gpus:
                shares[gpu] = shares.get(gpu, 0.0) + share

    readings: list[Reading] = []
    for index in sorted(shares.keys() | blocked.keys()):
        identity = gpus.get(index)
        if identity is None:
            continue
        e0, e1 = energy_before.get(index), energy_after.get(index)
        value: float | None = None
        why: str | None = None
        if index in blocked:
            why = blocked[index]
        elif e0 is None or e1 is None:
            why = REASON_NO_ENERGY
        elif e1 < e0:
            why = REASON_COUNTER_RESET
        elif e1 == e0:
            why = "no_energy_spent"
        else:
            value = shares[index] / (e1 - e0)
        readings.append(Reading(TOKENS_PER_JOULE, identity.labels, value, now, why))
    return readings


def tokens_per_second(
    workers: Sequence[VllmWorkerConfig],
    tokens_before: Mapping[str, float | None],
    tokens_after: Mapping[str, float | None],
    elapsed: float | None,
    now: float,
) -> list[Reading]:
    """Generation tokens per second of each worker over one interval (the peer comparison
    panel's series); a first scrape, a missing total or a counter reset gives a missing
    reading, never zero."""
    out = []
    for worker in workers:
        before, after = tokens_before.get(worker.name), tokens_after.get(worker.name)
        value: float | None = None
        why: str | None = None
        if after is None:
            why = "no_tokens"
        elif before is None or elapsed is None or elapsed <= 0:
            why = REASON_NO_PREVIOUS
        elif after < before:
            why = REASON_COUNTER_RESET
        else:
            value = (after - before) / elapsed
        labels = make_labels({"worker": worker.name})
        out.append(Reading(TOKENS_PER_SECOND, labels, value, now, why))
    return out


def worker_tokens(readings: Sequence[Reading]) -> dict[str, float | None]:
    """Generation-token totals per worker from scrape readings (copies per GPU agree)."""
    tokens: dict[str, float | None] = {}
    for reading in readings:
        if reading.metric == GENERATION_TOKENS:
            worker = label_value(reading.labels, "worker")
            if worker is not None:
                tokens[worker] = reading.value
    return tokens


def gpu_energy(snapshot: Snapshot) -> dict[int, float | None]:
    """Energy counter per GPU index from a poll's readings."""
    energy: dict[int, float | None] = {}
    for reading in snapshot.readings:
        if reading.metric == ENERGY:
            gpu = label_value(reading.labels, "gpu")
            if gpu is not None and gpu.isdigit():
                energy[int(gpu)] = reading.value
    return energy


class TokensPerJouleTracker:
    """Keeps the previous scrape's tokens and energy so each scrape yields tokens per joule
    (per GPU) and tokens per second (per worker) over the same interval.

    The daemon calls ``update`` after every vLLM scrape with that scrape's readings and the
    latest GPU snapshot; the interval runs from one scrape that saw a new poll to the next,
    so tokens and energy always cover the same stretch whatever the two cadences.
    """

    def __init__(self, workers: Sequence[VllmWorkerConfig]) -> None:
        self._workers = tuple(workers)
        self._tokens: dict[str, float | None] | None = None
        self._energy: dict[int, float | None] = {}
        self._poll_ts: float | None = None
        self._tokens_at: float | None = None
        self._last: list[Reading] = []

    def update(
        self, scrape_readings: Sequence[Reading], snapshot: Snapshot, now: float
    ) -> list[Reading]:
        if self._tokens is not None and snapshot.ts == self._poll_ts:
            # no poll since the last scrape, so no new energy reading: these tokens wait
            # for it (dividing them by energy over another interval would be wrong)
            return list(self._last)
        tokens = worker_tokens(scrape_readings)
        energy = gpu_energy(snapshot)
        gpus = {status.gpu.index: status.gpu for status in snapshot.gpus}
        before = self._tokens if self._tokens is not None else {}
        result = tokens_per_joule(self._workers, before, tokens, self._energy, energy, gpus, now)
        elapsed = now - self._tokens_at if self._tokens_at is not None else None
        result += tokens_per_second(self._workers, before, tokens, elapsed, now)
        self._tokens, self._energy, self._poll_ts = tokens, energy, snapshot.ts
        self._tokens_at = now
        self._last = result
        return result
