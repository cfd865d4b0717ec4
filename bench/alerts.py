"""Benchmark: a storm of 1,000 alert transitions through routing, grouping and the outbox to a
real loopback HTTP receiver (a generic webhook); and one remediation run announced through
every integration of the shipped routing (bench/alerts_remediation.py).

Group timers run on a fake clock: the storm's transitions arrive over 5 fake seconds, then
the clock jumps past group_wait (30 s) so the figure measures fleetd's own work (durable
submit, routing, grouping, planning, outbox writes, HTTP delivery), not the configured wait.
The time is wall-clock from the first ``submit`` to the receiver's arrival of the last
notification. Prints ONE JSON line.

    python bench/alerts.py [--transitions 1000] [--rules 10]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout and bench/

from bench.alerts_remediation import remediation_case
from fleetd.alert.config import AlertingConfig
from fleetd.alert.dispatch import Dispatcher
from fleetd.clock import FakeClock
from fleetd.logs import configure_logging
from fleetd.model import (
    Alert,
    AlertKey,
    AlertState,
    Severity,
    Transition,
    make_labels,
)
from fleetd.store.db import Database, sqlite_url


class Receiver:
    """A loopback webhook receiver counting requests and the alerts they carry."""

    def __init__(self) -> None:
        self.requests = 0
        self.alerts = 0
        self.last_arrival = 0.0
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                count = len(json.loads(body).get("alerts", []))
                with receiver.lock:
                    receiver.requests += 1
                    receiver.alerts += count
                    receiver.last_arrival = time.perf_counter()
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}/hook"

    def __enter__(self) -> Receiver:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def storm(count: int, rules: int, start: float) -> list[list[Transition]]:
    """``count`` firing transitions over 5 seconds: ``rules`` rules × GPUs × links."""
    batches: list[list[Transition]] = [[] for _ in range(5)]
    for i in range(count):
        rule = f"Rule{i % rules}"
        n = i // rules
        labels = {"node": "node7", "gpu": n % 8, "link": n // 8}
        key = AlertKey(rule, make_labels(labels))
        at = start + (i * 5 // count)
        alert = Alert(
            key=key,
            state=AlertState.FIRING,
            severity=Severity.CRITICAL,
            labels=make_labels({**labels, "alertname": rule, "severity": "critical"}),
            annotations=make_labels({"summary": f"{rule} on GPU {n % 8} link {n // 8}"}),
            value=float(i),
            active_at=at,
            fired_at=at,
        )
        batches[i * 5 // count].append(Transition(alert, AlertState.PENDING, AlertState.FIRING, at))
    return batches


def run(count: int, rules: int) -> dict[str, object]:
    clock = FakeClock()
    with tempfile.TemporaryDirectory() as tmp, Receiver() as receiver:
        db = Database.open(sqlite_url(Path(tmp) / "bench.db"))
        cfg = AlertingConfig.model_validate(
            {
                "receivers": [{"name": "hook", "webhook": [{"url": receiver.url}]}],
                "route": {"receiver": "hook", "group_by": ["alertname"], "group_wait": "30s"},
                "inhibit_rules": [],
            }
        )
        d = Dispatcher(
            cfg, db, node="node7", now=clock.now(), rng=random.Random(1), stream=io.StringIO()
        )
        t0 = clock.now()
        batches = storm(count, rules, t0)
        began = time.perf_counter()
        for second, batch in enumerate(batches):
            clock.set(t0 + second)
            d.submit(batch, clock.now())
            d.tick(clock.now())
        submitted = time.perf_counter()
        clock.set(t0 + 35)  # past group_wait of every group
        ticks = 0
        while d.status(clock.now())["outbox_pending"] or receiver.alerts < count:
            d.tick(clock.now())
            clock.advance(1)
            ticks += 1
            if ticks > 600:
                raise RuntimeError("the storm was not delivered within 600 fake seconds")
        elapsed = receiver.last_arrival - began
        d.close()
        db.dispose()
    return {
        "bench": "alerts",
        "transitions": count,
        "groups": rules,
        "http_requests": receiver.requests,
        "alerts_delivered": receiver.alerts,
        "seconds_first_transition_to_last_delivery": round(elapsed, 3),
        "seconds_submitting": round(submitted - began, 3),
        "target_seconds": 5.0,
        "fake_clock_for_group_timers": True,
        "group_wait_s": 30,
        "receiver": "webhook on 127.0.0.1",
        "database": "sqlite",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transitions", type=int, default=1000)
    parser.add_argument("--rules", type=int, default=10)
    parser.add_argument("--skip-remediation", action="store_true")
    args = parser.parse_args()
    result = run(args.transitions, args.rules)
    if not args.skip_remediation:
        with open(os.devnull, "w") as devnull:  # the remediation's logs are not the figure
            configure_logging("json", "warning", stream=devnull)
            result["remediation"] = remediation_case()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
