"""Storage cost of the serving series: one node's vLLM series in the local store.

An 8-GPU node with one vLLM worker per GPU (one model) scraped every ``--scrape`` seconds: the
readings come from vLLM's own exposition text (the stand-in's bucket layouts, vLLM's names)
through fleetd's parser and ``worker_readings``, as the daemon stores them — gauges per GPU
copy, six latency histograms and the serving counters per worker and model, plus the derived
tokens per second and tokens per joule. Counters and buckets grow as under steady traffic
(a few requests per second per worker, latency spread over the buckets). ``--seconds`` of
scrapes go into a temporary SQLite store with the default ``StoreConfig``, then compaction and
1-minute rollups, measured as in ``bench/store.py``: bytes per raw sample and per rollup
bucket, and the disk a day (raw, at the default 24 h retention) and 30 days (with the rollup
tiers) take. Prints one JSON line.

    python bench/serving_store.py [--seconds 3600] [--scrape 5]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from store import T0, live_bytes, run_maintenance

from fleetd.model import Reading, make_labels
from fleetd.sim.vllm_worker import HISTOGRAMS
from fleetd.store.config import StoreConfig
from fleetd.store.db import Database, sqlite_url
from fleetd.store.maintenance import Maintenance
from fleetd.store.samples import SampleStore
from fleetd.vllm.collector import TOKENS_PER_JOULE, TOKENS_PER_SECOND, worker_readings
from fleetd.vllm.config import VllmWorkerConfig
from fleetd.vllm.metrics import VllmValues, parse_vllm_metrics
from fleetd.vllm.serving import COUNTERS

GPUS = 8
MODEL = "meta-llama/Llama-3.3-70B-Instruct"


class Worker:
    """One worker's cumulative histograms and counters under steady traffic."""

    def __init__(self, index: int, rng: random.Random) -> None:
        self.config = VllmWorkerConfig(name=f"w{index}", url="http://127.0.0.1:1", gpus=[index])
        self.rng = rng
        self.buckets = {name: [0] * (len(bounds) + 1) for name, bounds in HISTOGRAMS}
        self.sums = {name: 0.0 for name, _ in HISTOGRAMS}
        self.counters = {names[0]: 0 for names in COUNTERS.values()}
        self.finished = {"stop": 0, "length": 0, "abort": 0}
        self.tokens = 0.0

    def advance(self, seconds: float) -> None:
        r = self.rng
        requests = max(0, round(r.gauss(3.0 * seconds, 2.0)))
        for name, bounds in HISTOGRAMS:
            per = 200 if "inter_token" in name else 1  # one ITL observation per token
            for _ in range(min(requests, 40)):
                value = r.lognormvariate(-1.5, 1.0)
                i = next((k for k, b in enumerate(bounds) if value <= b), len(bounds))
                self.buckets[name][i] += per * max(1, requests // 40)
                self.sums[name] += value * per * max(1, requests // 40)
        for name in self.counters:
            self.counters[name] += requests * r.randint(100, 700)
        self.finished["stop"] += requests
        self.finished["length"] += r.random() < 0.1
        self.tokens += requests * 200

    def text(self) -> str:
        labels = f'engine="0",model_name="{MODEL}"'
        lines: list[str] = []
        for name, bounds in HISTOGRAMS:
            lines.append(f"# TYPE {name} histogram")
            total = 0
            for bound, n in zip((*map(str, bounds), "+Inf"), self.buckets[name], strict=True):
                total += n
                lines.append(f'{name}_bucket{{{labels},le="{bound}"}} {total}')
            lines += [
                f"{name}_sum{{{labels}}} {self.sums[name]}",
                f"{name}_count{{{labels}}} {total}",
            ]
        for name, value in self.counters.items():
            lines += [
                f"# TYPE {name.removesuffix('_total')} counter",
                f"{name}{{{labels}}} {value}",
            ]
        lines.append("# TYPE vllm:request_success counter")
        for reason, n in self.finished.items():
            lines.append(f'vllm:request_success_total{{{labels},finished_reason="{reason}"}} {n}')
        return "\n".join(lines) + "\n"

    def readings(self, now: float) -> list[Reading]:
        serving = parse_vllm_metrics(self.text()).serving
        values = VllmValues(self.rng.randint(4, 12), self.rng.randint(0, 3),
                            round(self.rng.uniform(0.3, 0.8), 2), self.tokens, serving)  # fmt: skip
        out = worker_readings(self.config, True, values, None, now)
        gpu = make_labels({"gpu": self.config.gpus[0], "uuid": f"GPU-{self.config.gpus[0]}"})
        out.append(Reading(TOKENS_PER_JOULE, gpu, self.rng.uniform(1.5, 3.5), now))
        who = make_labels({"worker": self.config.name})
        out.append(Reading(TOKENS_PER_SECOND, who, self.rng.uniform(1500, 2500), now))
        return out


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seconds", type=int, default=3600)
    parser.add_argument("--scrape", type=float, default=5.0)
    args = parser.parse_args()
    cfg = StoreConfig()
    rng = random.Random(7)
    workers = [Worker(i, rng) for i in range(GPUS)]
    with tempfile.TemporaryDirectory(prefix="fleetd-bench-serving-") as tmp:
        db = Database.open(sqlite_url(Path(tmp) / "fleetd.db"), busy_timeout=cfg.busy_timeout,
                           synchronous=cfg.synchronous)  # fmt: skip
        store = SampleStore(db)
        jobs = Maintenance(store, cfg)
        empty = live_bytes(db)
        written = 0
        keys: set[object] = set()
        scrapes = int(args.seconds / args.scrape)
        for k in range(scrapes):
            now = T0 + k * args.scrape
            batch = []
            for w in workers:
                w.advance(args.scrape)
                batch += w.readings(now)
            keys.update(r.key for r in batch)
            written += store.append(batch)
        end = T0 + args.seconds
        run_maintenance(jobs, "compact", end + 2 * cfg.chunk_span)
        raw_bytes = live_bytes(db) - empty
        run_maintenance(jobs, "rollup", end + 2 * cfg.chunk_span)
        series = len(keys)
        minute_per_bucket = (live_bytes(db) - empty - raw_bytes) / (series * (args.seconds // 60))
        db.dispose()
    per_sample = raw_bytes / written
    samples_per_day = series * 86_400 / args.scrape
    raw_day = per_sample * samples_per_day
    minute_30d = minute_per_bucket * series * 30 * 24 * 60
    print(
        json.dumps(
            {
                "bench": "serving_store",
                "series": series,
                "series_per_worker": round(series / GPUS),
                "scrape_s": args.scrape,
                "samples_written": written,
                "bytes_per_raw_sample": round(per_sample, 3),
                "bytes_per_1m_rollup": round(minute_per_bucket, 2),
                "raw_mib_per_day": round(raw_day / 2**20, 1),
                "rollup_1m_mib_30d": round(minute_30d / 2**20, 1),
                "disk_mib_30d_default_tiers": round((raw_day + minute_30d) / 2**20, 1),
            }
        )
    )


if __name__ == "__main__":
    main()
