"""What the node's reliability report costs: ``ReliabilityReporter.report(now)`` over a busy
week in a real SQLite state database.

Seeds the run journal with ``--runs`` concluded reset runs (each with the ~30 journaled
entries of a real 8-worker run: drain, capture, reset, verify, workers back) and the event log
with ``--alerts`` alert-history entries (firing and resolving, some of them shadow), then times
the report the ``kpi`` job computes every 30 s (and the API on request). Prints ONE JSON line:
median and p99 wall seconds over ``--repeat`` reports, and what the report counted.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's fleetd, not an installed one

NODE = "bench-node"
STEPS = (
    ("planned", "run_planned"), ("unrouting", "lease_granted"), ("unrouting", "draining"),
    *((("unrouting", "worker_unrouted"),) * 8), ("balancer_wait", "balancer_wait"),
    ("quiescing", "quiescing"), *((("stopping", "worker_stopped"),) * 8),
    ("release_check", "release_check"), ("resetting", "evidence_captured"),
    ("resetting", "reset_intent"), ("verifying", "reset_done"), ("starting", "verified"),
    *((("await_ready", "worker_ready"),) * 8), ("done", "done"),
)  # fmt: skip


def seed(db_url: str, runs: int, alerts: int, now: float) -> None:
    from fleetd.remedy import machine as m
    from fleetd.remedy.events import RemediationEvent
    from fleetd.remedy.journal import RunJournal
    from fleetd.store.db import Database
    from fleetd.store.events import events_table

    db = Database.open(db_url)
    journal = RunJournal(db)
    week = 7 * 86400.0
    for i in range(runs):
        t0 = now - week + i * week / runs
        run = m.Run(
            run_id=f"run{i:05d}", node=NODE, plan=m.Plan.RESET,
            trigger=m.Trigger("alert", t0, rule="GpuEccUncorrectableError", gpu=i % 8,
                              fingerprint=f"fp{i}"),
            gpus=tuple(m.UnitGpu(g) for g in range(8)), workers=(), settings=m.RunSettings(),
            created_at=t0, state=m.RunState.DONE, entered_at=t0 + 120, reset_count=1,
            captures_started=(("pre_reset", t0 + 50),),
        )  # fmt: skip
        events = [
            RemediationEvent(f"{run.run_id}:{n}", NODE, kind, kind, t0 + n * 4, run_id=run.run_id,
                             seq=n, state=state, plan="reset")
            for n, (state, kind) in enumerate(STEPS, start=1)
        ]  # fmt: skip
        journal.save(run, events)
    rows = []
    for i in range(alerts):  # as EventLog.append writes them, in one transaction
        at = now - week + i * week / alerts
        kind = "shadow_alert" if i % 10 == 0 else "alert"
        state = "firing" if i % 2 == 0 else "resolved"
        data = {"rule": f"Rule{i % 40}", "state": state, "severity": "warning",
                "fingerprint": f"a{i // 2}", "fired_at": at - 60}  # fmt: skip
        rows.append({"ts": at, "node": NODE, "gpu": i % 8, "kind": kind, "message": "bench",
                     "data": json.dumps(data, sort_keys=True), "actor": "fleetd"})  # fmt: skip
    with db.begin() as conn:
        conn.execute(events_table.insert(), rows)
    db.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=500)
    parser.add_argument("--alerts", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args()

    from fleetd.model import GpuIdentity
    from fleetd.remedy.journal import RunJournal
    from fleetd.remedy.kpi import RuleMode
    from fleetd.remedy.reliability import ReliabilityReporter, history_reader
    from fleetd.store.db import Database, sqlite_url
    from fleetd.store.events import EventLog

    now = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        url = sqlite_url(Path(tmp) / "fleetd.db")
        started = time.perf_counter()
        seed(url, args.runs, args.alerts, now)
        seeded = time.perf_counter() - started
        db = Database.open(url)
        log = EventLog(db)
        gpus = [GpuIdentity(i, f"u{i}", f"0000:{i:02x}:00.0", serial=f"SN{i}", hive_id="h0")
                for i in range(8)]  # fmt: skip
        reporter = ReliabilityReporter(
            node=NODE,
            journal=RunJournal(db),
            history=history_reader(log.query, NODE),
            identities=lambda: gpus,
            rules=lambda: [RuleMode(f"Rule{i}", "alert") for i in range(40)],
            window_s=7 * 86400.0,
            probation_s=7200.0,
        )
        walls, report = [], None
        for _ in range(args.repeat):
            t = time.perf_counter()
            report = reporter.report(now)
            walls.append(time.perf_counter() - t)
        db.dispose()
    assert report is not None
    walls.sort()
    print(
        json.dumps(
            {
                "bench": "kpi",
                "runs": args.runs,
                "alert_entries": args.alerts,
                "report_median_s": round(statistics.median(walls), 3),
                "report_p99_s": round(walls[min(len(walls) - 1, int(len(walls) * 0.99))], 3),
                "succeeded": report.succeeded,
                "stages": len(report.stages),
                "rules": len(report.rules),
                "seed_s": round(seeded, 1),
                "repeat": args.repeat,
            }
        )
    )


if __name__ == "__main__":
    main()
