"""The readmission benchmark: a short fixed probe per worker, its baseline and the comparison.

``fleetctl baseline capture NODE`` runs the probe on a healthy hive and the node stores the
figures per worker and model; after a reset, remediation runs the same probe before the worker
goes back into rotation and quarantines one that falls below the baseline × tolerance (a GPU
whose clocks stay latched low answers health and a 1-token completion, only slowly).
The probe streams each completion so the time to the first token and between tokens are the
client's own measurements, taken with an injectable timer.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import requests

from fleetd.vllm.client import base_url
from fleetd.vllm.config import BenchmarkConfig, VllmWorkerConfig

BASELINE_FILE = "vllm-baselines.json"
"""Under the state dir: the node's baselines, one per worker."""


class ProbeError(Exception):
    """The probe could not measure (HTTP error, no tokens): the worker is not serving."""


@dataclass(frozen=True, slots=True)
class ProbeResult:
    """One probe's figures: tokens/s (the median request's: tokens over its whole time, so
    one hiccup does not move it), p99 TTFT and TPOT in seconds."""

    model: str
    tokens_per_s: float
    ttft_p99_s: float
    tpot_p99_s: float
    requests: int
    tokens: int

    def text(self) -> str:
        return (
            f"{self.tokens_per_s:.1f} tok/s, TTFT p99 {self.ttft_p99_s * 1000:.1f} ms, "
            f"TPOT p99 {self.tpot_p99_s * 1000:.1f} ms"
        )


@dataclass(frozen=True, slots=True)
class Baseline:
    """A probe result recorded on a healthy hive, and when."""

    worker: str
    captured_at: float
    result: ProbeResult


@dataclass(frozen=True, slots=True)
class BenchmarkVerdict:
    """The comparison: ``ok`` False names each figure that fell short, with both values."""

    ok: bool
    detail: str


def p99(values: Sequence[float]) -> float:
    """Nearest-rank 99th percentile (a probe has few samples: the worst one, mostly)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.99 * len(ordered)) - 1)]


def compare(result: ProbeResult, baseline: ProbeResult, cfg: BenchmarkConfig) -> BenchmarkVerdict:
    """Tokens/s must reach baseline × ``tolerance``; the p99 latencies may be at most
    baseline × ``latency_factor`` (when set). The detail gives now against baseline for each
    figure that fell short, or both probes' figures."""
    short: list[str] = []
    floor = baseline.tokens_per_s * cfg.tolerance
    if result.tokens_per_s < floor:
        short.append(
            f"{result.tokens_per_s:.1f} tok/s < {floor:.1f} "
            f"(baseline {baseline.tokens_per_s:.1f} × {cfg.tolerance:g})"
        )
    latencies = (
        ("TTFT p99", result.ttft_p99_s, baseline.ttft_p99_s),
        ("TPOT p99", result.tpot_p99_s, baseline.tpot_p99_s),
    )
    factor = cfg.latency_factor
    for label, now_s, base_s in latencies:
        if factor is None:
            break
        ceiling = base_s * factor
        if now_s > ceiling:
            short.append(
                f"{label} {now_s * 1000:.1f} ms > {ceiling * 1000:.1f} ms "
                f"(baseline {base_s * 1000:.1f} ms × {factor:g})"
            )
    if short:
        return BenchmarkVerdict(False, "below baseline: " + "; ".join(short))
    return BenchmarkVerdict(True, f"benchmark {result.text()} (baseline {baseline.text()})")


def run_probe(
    session: requests.Session,
    worker: VllmWorkerConfig,
    cfg: BenchmarkConfig,
    *,
    model: str | None = None,
    timer: Callable[[], float] = time.perf_counter,
) -> ProbeResult:
    """``cfg.warmup`` uncounted, then ``cfg.requests`` streamed completions of
    ``cfg.max_tokens`` over the fixed prompts, one at a time (the figures are the GPU's, not
    the batcher's); raises ProbeError."""
    name = model or worker.model
    if name is None:
        raise ProbeError("no model known to probe")
    url = base_url(worker) + "/v1/completions"
    ttfts: list[float] = []
    tpots: list[float] = []
    tokens = 0
    rates: list[float] = []  # each request's tokens over its whole time
    for i in range(-cfg.warmup, cfg.requests):
        payload = {
            "model": name,
            "prompt": cfg.prompts[i % len(cfg.prompts)],
            "max_tokens": cfg.max_tokens,
            "temperature": 0,
            "ignore_eos": True,
            "stream": True,
        }
        start = timer()
        stamps = _stream(session, url, payload, cfg.timeout, timer)
        end = timer()
        if not stamps:
            raise ProbeError(f"request {i + 1}: no token streamed")
        if i < 0:
            continue  # warm-up: not counted
        first = stamps[0] - start
        ttfts.append(first)
        if len(stamps) > 1:
            tpots.append((stamps[-1] - stamps[0]) / (len(stamps) - 1))
        tokens += len(stamps)
        rates.append(len(stamps) / (end - start) if end > start else math.inf)
    return ProbeResult(
        model=name,
        tokens_per_s=statistics.median(rates),
        ttft_p99_s=p99(ttfts),
        tpot_p99_s=p99(tpots) if tpots else 0.0,
        requests=cfg.requests,
        tokens=tokens,
    )


def _stream(
    session: requests.Session,
    url: str,
    payload: dict[str, Any],
    timeout: float,
    timer: Callable[[], float] = time.perf_counter,
) -> list[float]:
    """The arrival time of each streamed chunk that carries text (server-sent events)."""
    stamps: list[float] = []
    try:
        with session.post(url, json=payload, timeout=timeout, stream=True) as reply:
            if reply.status_code != 200:
                raise ProbeError(f"HTTP {reply.status_code}")
            # chunk_size None: each chunk as it arrives (a fixed size would batch the tokens
            # and time them together)
            for raw in reply.iter_lines(chunk_size=None):
                line = raw.decode(errors="replace").strip()
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                try:
                    chunk = json.loads(data)
                except json.JSONDecodeError:
                    raise ProbeError("unparsable stream chunk") from None
                choices = chunk.get("choices") or [{}]
                if choices[0].get("text"):
                    stamps.append(timer())
    except requests.RequestException as exc:
        raise ProbeError(type(exc).__name__) from None
    return stamps


class BaselineStore:
    """The node's baselines in one JSON file under the state dir (written atomically)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> dict[str, Baseline]:
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError):
            return {}  # unreadable: as if none (the gate says so, never fails on it)
        out: dict[str, Baseline] = {}
        for name, item in (data.get("workers") or {}).items():
            try:
                result = ProbeResult(**item["result"])
                out[name] = Baseline(name, float(item["captured_at"]), result)
            except (KeyError, TypeError, ValueError):
                continue
        return out

    def get(self, worker: str, model: str | None) -> Baseline | None:
        """The worker's baseline when it was taken with the same model."""
        found = self.load().get(worker)
        if found is None or (model is not None and found.result.model != model):
            return None
        return found

    def save(self, baselines: Sequence[Baseline]) -> None:
        """Record these (replacing the same workers' earlier ones)."""
        current = self.load()
        for b in baselines:
            current[b.worker] = b
        body = {
            "version": 1,
            "workers": {
                n: {"captured_at": b.captured_at, "result": asdict(b.result)}
                for n, b in sorted(current.items())
            },
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(body, indent=1, sort_keys=True))
        os.replace(tmp, self.path)


def baseline_dict(b: Baseline) -> dict[str, Any]:
    """JSON form for the API and fleetctl."""
    return {"worker": b.worker, "captured_at": b.captured_at, **asdict(b.result)}


class BenchmarkGate:
    """What re-admission asks after the completion check: probe, compare, say why."""

    def __init__(
        self,
        cfg: BenchmarkConfig,
        store: BaselineStore,
        *,
        timer: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.cfg = cfg
        self.store = store
        self._timer = timer

    def capture(self, workers: Sequence[VllmWorkerConfig], now: float) -> list[Baseline]:
        """Probe each worker and store the figures (raises ProbeError naming the worker)."""
        taken: list[Baseline] = []
        for w in workers:
            try:
                with requests.Session() as session:
                    result = run_probe(session, w, self.cfg, timer=self._timer)
            except ProbeError as exc:
                raise ProbeError(f"{w.name}: {exc}") from None
            taken.append(Baseline(w.name, now, result))
        self.store.save(taken)
        return taken

    def check(self, worker: VllmWorkerConfig, model: str | None) -> BenchmarkVerdict | None:
        """None when the gate is off; ok with "skipped" when there is no baseline."""
        if not self.cfg.enabled:
            return None
        model = model or worker.model
        baseline = self.store.get(worker.name, model)
        if baseline is None:
            return BenchmarkVerdict(
                True, f"benchmark skipped: no baseline for {worker.name} ({model})"
            )
        try:
            # a session per probe: the executor may check several workers side by side
            with requests.Session() as session:
                result = run_probe(session, worker, self.cfg, model=model, timer=self._timer)
        except ProbeError as exc:
            return BenchmarkVerdict(False, f"benchmark probe failed: {exc}")
        return compare(result, baseline.result, self.cfg)
