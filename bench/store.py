"""Store benchmark: ingest rate, bytes per sample, 30-day disk projection, query latency.

Prints one JSON line (last line of output). Runs on a temporary SQLite file with the default
``StoreConfig`` (WAL, synchronous=FULL):

1. ingest: an 8-GPU node's polls (``--series`` per GPU, half of them changing every poll:
   temperatures, power, energy and byte counters, clocks, utilisation; the rest constant),
   one batched transaction per poll, for ``--seconds`` of simulated 1 s polling;
2. compaction and 1-minute rollups over that hour, measuring the bytes each raw sample and
   each rollup bucket takes in the database file (live pages);
3. a 1-hour raw range query (one metric, 8 GPUs; the last minutes still in head rows);
4. 30 days of rollups for one metric (1-minute buckets for 30 days, 1-hour buckets up to the
   last day boundary, as retention leaves them) and a 30-day range query at a 1-hour step;
5. the projection for 30 days of an 8-GPU node polled every second with the default tiers:
   24 h of raw samples + 30 days of 1-minute rollups + 30 days of 1-hour rollups + the head
   rows waiting for compaction;
6. the periodic integrity check (``PRAGMA quick_check``) over the file of 1 and 2 (an hour of
   the node's samples): its time and how far it lifts the RSS high-water mark of a process
   that has imported fleetd.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fleetd.model import Reading, make_labels
from fleetd.query import Matcher
from fleetd.store.config import StoreConfig
from fleetd.store.db import Database, sqlite_url
from fleetd.store.functions import Buckets, Summary
from fleetd.store.maintenance import Maintenance
from fleetd.store.reader import encode_buckets
from fleetd.store.samples import SampleStore
from fleetd.store.tables import rollup_table
from fleetd.store.watermarks import DELETED_UNTIL, ROLLUP_UNTIL

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z
GPUS = 8
DAY = 86_400
QUERY_METRIC = "fleetd_gpu_power_watts"


class SeriesGen:
    """One series' next value each poll."""

    def __init__(
        self, metric: str, labels: tuple[tuple[str, str], ...], kind: str, rng: random.Random
    ):
        self.metric, self.labels, self.kind, self.rng = metric, labels, kind, rng
        self.v = {"temp": 60.0, "power": 650.0, "energy": 1.2e8, "bytes": 1e12, "util": 0.9}.get(
            kind, float(rng.randint(0, 10**6))
        )

    def next(self) -> float:
        r = self.rng
        k = self.kind
        if k == "temp":
            self.v = min(95.0, max(30.0, self.v + r.choice((-1.0, 0.0, 0.0, 1.0))))
        elif k == "power":
            self.v = float(int(650 + r.gauss(0, 40)))
        elif k == "energy":  # accumulator ticks of 15.259 µJ, as amdsmi reports
            self.v += r.randint(40_000_000, 46_000_000) * 15.259e-6
        elif k == "bytes":
            self.v += float(r.randint(0, 60 * 10**9))
        elif k == "util":
            self.v = r.randint(80, 100) / 100
        elif k == "clock":
            self.v = float(r.choice((2100, 2100, 2100, 1900, 1500)) * 10**6)
        return self.v


def build_series(per_gpu: int, seed: int) -> list[SeriesGen]:
    rng = random.Random(seed)
    changing = ("temp", "temp", "power", "energy", "bytes", "util", "clock")
    out = []
    for gpu in range(GPUS):
        base = {"gpu": gpu, "uuid": f"GPU-{gpu:04x}-bench"}
        out.append(SeriesGen(QUERY_METRIC, make_labels(base), "power", rng))
        for i in range(1, per_gpu):
            if i < per_gpu // 2:
                kind = changing[i % len(changing)]
                metric = f"fleetd_bench_{kind}_{i}"
            else:
                kind = "const"
                metric = f"fleetd_bench_const_{i}"
            out.append(SeriesGen(metric, make_labels(base), kind, rng))
    return out


def live_bytes(db: Database) -> int:
    """Live pages of the file after a full checkpoint (the WAL folded in and truncated)."""
    with db.engine.connect() as conn:
        conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    size = db.size_bytes()
    assert size is not None
    return size


def table_bytes(db: Database) -> dict[str, int]:
    """Bytes per table and index (SQLite dbstat), for the breakdown."""
    with db.engine.connect() as conn:
        rows = conn.exec_driver_sql(
            "SELECT name, SUM(pgsize) FROM dbstat GROUP BY name ORDER BY 2 DESC"
        ).all()
    return {name: int(size) for name, size in rows}


def run_maintenance(jobs: Maintenance, fn: str, now: float) -> None:
    while True:
        done = jobs.compact(now) if fn == "compact" else jobs.rollup(60, now)
        if not done:
            return


def synthetic_minutes(kind: str, start_ms: int, n: int, rng: random.Random) -> Buckets:
    """Plausible 1-minute summaries of a gauge like power (for the 30-day query data)."""
    b = Buckets()
    for i in range(n):
        end = start_ms + (i + 1) * 60_000
        lo = float(int(650 + rng.gauss(0, 40)) - rng.randint(40, 120))
        hi = lo + rng.randint(60, 200)
        first = float(rng.randint(int(lo), int(hi)))
        last = float(rng.randint(int(lo), int(hi)))
        b.append(
            end,
            Summary(
                count=60,
                sum=float(rng.randint(int(lo) * 60, int(hi) * 60)),
                min=lo,
                max=hi,
                first=first,
                last=last,
                first_ts=(end - 59_000) / 1000.0,
                last_ts=end / 1000.0,
                inc=float(rng.randint(0, 3000)),
                changes=rng.randint(30, 59),
            ),
        )
    return b


CHECK_CHILD = """
import sys, time
from fleetd.store.db import Database, sqlite_url

def status_kb(key):
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith(key))

db = Database.open(sqlite_url(sys.argv[1]))
with open("/proc/self/clear_refs", "w") as refs:
    refs.write("5")  # the high-water mark restarts from the current RSS
before = status_kb("VmRSS")
t = time.perf_counter()
assert db.quick_check() is None, "the integrity check found a problem in a fresh file"
print(time.perf_counter() - t, (status_kb("VmHWM") - before) / 1024)
"""


def integrity_check_cost(path: Path) -> tuple[float, float]:
    """Seconds for ``Database.quick_check`` of ``path`` (the daemon's check every
    ``integrity_check_interval``) and how far it lifts the RSS high-water mark, in MB, in a
    process of its own (in this one, memory freed by the steps before would hide it)."""
    root = str(Path(__file__).resolve().parents[1])
    child = f"import sys; sys.path.insert(0, {root!r})\n{CHECK_CHILD}"
    out = subprocess.run(
        [sys.executable, "-c", child, str(path)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    return float(out[0]), round(float(out[1]), 2)


def median_ms(fn, runs: int) -> float:
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1000.0)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--series", type=int, default=60, help="series per GPU (40-70)")
    parser.add_argument("--seconds", type=int, default=3600, help="seconds of 1 s polls to ingest")
    parser.add_argument("--runs", type=int, default=15, help="runs per query latency")
    args = parser.parse_args()
    cfg = StoreConfig()
    gens = build_series(args.series, seed=7)
    series = len(gens)

    with tempfile.TemporaryDirectory(prefix="fleetd-bench-") as tmp:
        db = Database.open(
            sqlite_url(Path(tmp) / "fleetd.db"),
            busy_timeout=cfg.busy_timeout,
            synchronous=cfg.synchronous,
        )
        store = SampleStore(db)
        jobs = Maintenance(store, cfg)
        empty = live_bytes(db)

        # 1. ingest ----------------------------------------------------------------------
        polls = []
        for s in range(args.seconds):
            ts = T0 + s + random.random() * 0.004
            polls.append([Reading(g.metric, g.labels, g.next(), ts) for g in gens])
        t = time.perf_counter()
        written = 0
        for poll in polls:
            written += store.append(poll)
        ingest_s = time.perf_counter() - t
        head_bytes_per_row = (live_bytes(db) - empty) / written

        # 2. compaction and 1-minute rollups --------------------------------------------------
        end = T0 + args.seconds
        run_maintenance(jobs, "compact", end + 2 * cfg.chunk_span)
        raw_bytes = live_bytes(db) - empty
        raw_per_sample = raw_bytes / written
        run_maintenance(jobs, "rollup", end + 2 * cfg.chunk_span)
        minute_buckets = series * (args.seconds // 60)
        minute_per_bucket = (live_bytes(db) - empty - raw_bytes) / minute_buckets

        # 3. 1-hour raw query, last 10 minutes still in the head ------------------------------
        db.dispose()
        db = Database.open(sqlite_url(Path(tmp) / "raw.db"))
        store = SampleStore(db)
        jobs = Maintenance(store, cfg)
        power = [g for g in gens if g.metric == QUERY_METRIC]
        # the worst time of day for the 30-day query below: 1-hour rollups end at midnight,
        # so nearly a day of 1-minute buckets and the last hour of raw samples are read too
        base = T0 + DAY - 3600 - 60
        for s in range(3600):
            store.append([Reading(g.metric, g.labels, g.next(), base + s) for g in power])
        now = base + 3600
        run_maintenance(jobs, "compact", now)
        raw_query_ms = median_ms(
            lambda: store.range(
                QUERY_METRIC, [Matcher("gpu", "=~", ".*")], start=now - 3600, end=now
            ),
            args.runs,
        )
        got = store.range(QUERY_METRIC, start=now - 3600, end=now)
        assert sum(len(v) for v in got.values()) == 8 * 3600, "raw query lost samples"

        # 4. 30 days of rollups for one metric and a 30-day query -----------------------------
        now_ms = round(now * 1000)
        minute_until = (now_ms - 3_600_000) // 3_600_000 * 3_600_000  # rolled hourly
        hour_until = minute_until // (DAY * 1000) * DAY * 1000  # rolled daily
        start_ms = hour_until - 30 * DAY * 1000
        rng = random.Random(11)
        rows = []
        hour_bytes = 0
        hour_buckets = 0
        for sid in sorted(store.registry.all_ids()):
            minutes = synthetic_minutes("power", start_ms, (minute_until - start_ms) // 60_000, rng)
            for chunk_start in range(start_ms, minute_until, 3_600_000):
                part = minutes.between(chunk_start + 60_000, chunk_start + 3_600_000)
                rows.append(rollup_row(60, sid, chunk_start, part))
            for day_start in range(start_ms, hour_until, DAY * 1000):
                part = minutes.between(day_start + 60_000, day_start + DAY * 1000)
                hours = Buckets.from_pairs(part.regroup(3_600_000))
                row = rollup_row(3600, sid, day_start, hours)
                hour_bytes += len(row["data"]) + 40  # blob plus the row's key and columns
                hour_buckets += len(hours)
                rows.append(row)
        with db.begin() as conn:
            conn.execute(rollup_table.insert(), rows)
            store.marks.set(conn, ROLLUP_UNTIL[60], minute_until)
            store.marks.set(conn, ROLLUP_UNTIL[3600], hour_until)
            store.marks.set(conn, DELETED_UNTIL[0], minute_until - 60_000)
        rollup_query_ms = median_ms(
            lambda: store.range(QUERY_METRIC, start=now - 30 * DAY, end=now, step=3600),
            args.runs,
        )
        got = store.range(QUERY_METRIC, start=now - 30 * DAY, end=now, step=3600)
        assert min(len(v) for v in got.values()) >= 30 * 24, "rollup query lost buckets"
        hour_per_bucket = hour_bytes / hour_buckets

        # 6. the periodic integrity check over this file: time and how far it lifts RSS ------
        db.dispose()
        check_s, check_peak_mb = integrity_check_cost(Path(tmp) / "fleetd.db")
        check_file_mb = (Path(tmp) / "fleetd.db").stat().st_size / 2**20

    # 5. projection: 30 days of an 8-GPU node polled every second ----------------------------
    head_rows = series * (cfg.chunk_span + cfg.compact_delay + cfg.maintenance_interval)
    projected = (
        raw_per_sample * series * cfg.raw_retention
        + minute_per_bucket * series * 30 * 24 * 60
        + hour_per_bucket * series * 30 * 24
        + head_bytes_per_row * head_rows
    )
    print(
        json.dumps(
            {
                "bench": "store",
                "series": series,
                "series_per_gpu": args.series,
                "ingest_samples_per_s": round(written / ingest_s),
                "bytes_per_raw_sample": round(raw_per_sample, 3),
                "bytes_per_head_row": round(head_bytes_per_row, 1),
                "bytes_per_1m_rollup": round(minute_per_bucket, 2),
                "bytes_per_1h_rollup": round(hour_per_bucket, 2),
                "projected_30d_bytes": round(projected),
                "projected_30d_gib": round(projected / 2**30, 3),
                "raw_1h_range_query_ms": round(raw_query_ms, 2),
                "rollup_30d_range_query_ms": round(rollup_query_ms, 2),
                "integrity_check_file_mb": round(check_file_mb, 1),
                "integrity_check_s": round(check_s, 3),
                "integrity_check_rss_peak_rise_mb": check_peak_mb,
                "targets_met": written / ingest_s >= 100_000
                and projected <= 2**30
                and raw_query_ms <= 50
                and rollup_query_ms <= 50,
            }
        )
    )


def rollup_row(tier: int, sid: int, start: int, b: Buckets) -> dict[str, object]:
    return {
        "tier": tier,
        "series_id": sid,
        "start_ts": start,
        "first_ts": b.ends[0],
        "last_ts": b.ends[-1],
        "count": sum(b.count),
        "data": encode_buckets(b),
    }


if __name__ == "__main__":
    main()
