"""The event → page part of bench/events.py (see its docstring): the daemon on the simulator,
a loopback PagerDuty that stamps each POST, and injections into the simulated driver."""

from __future__ import annotations

import io
import json
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from fleetd.clock import SteadyClock
from fleetd.config import FleetdConfig
from fleetd.daemon import Daemon, open_backend
from fleetd.logs import configure_logging
from fleetd.sim import wrapper as w

POLL_S = 5.0
ROUTING_KEY = "b" * 32
BENCH_RULE = """\
rules:
  - name: BenchKfdVmFault
    rationale: The bench's copy of GpuVmFault with a 3 s window and critical severity, so
      50 KFD events can be timed to a page in a few minutes (same path as the shipped rule).
    expr: fleetd_gpu_driver_event_age_seconds{event="vmfault"}
    op: "<"
    threshold: 3
    severity: critical
    labels: {component: driver, delivery: immediate}
    annotations:
      summary: "GPU {{ $labels.gpu }}: VM fault (bench)"
      description: "bench"
    runbook: docs/runbooks/GpuVmFault.md
"""


class PagerDutySink:
    """A loopback PagerDuty Events v2 endpoint: every POST is kept with its arrival time."""

    def __init__(self) -> None:
        self.posts: list[tuple[float, dict[str, Any]]] = []
        self.lock = threading.Lock()
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                at = time.time()
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with sink.lock:
                    sink.posts.append((at, json.loads(body or b"{}")))
                self.send_response(202)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(b'{"status":"success","dedup_key":"x"}')

            def log_message(self, *_args: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}/v2/enqueue"

    def find(self, action: str, rule: str, gpu: int, after: float) -> float | None:
        """Arrival time of the first ``action`` POST about ``rule`` on ``gpu`` after ``after``."""
        with self.lock:
            posts = list(self.posts)
        for at, body in posts:
            details = body.get("payload", {}).get("custom_details", {})
            labels = details.get("labels", {})
            if (
                at >= after
                and body.get("event_action") == action
                and labels.get("alertname", details.get("alertname")) == rule
                and str(labels.get("gpu")) == str(gpu)
            ):
                return at
        return None

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _config(state: Path, rules: Path, pd_url: str) -> FleetdConfig:
    data: dict[str, Any] = {
        "node": {"name": "bench-events"},
        "state_dir": str(state),
        "backend": {"kind": "simulator", "scenario": "healthy"},
        "poll": {"interval": f"{POLL_S:g}s", "gpu_timeout": "2s"},
        "http": {"bind": "127.0.0.1", "port": 0},
        "rules": {"local_dir": str(rules)},
        "remediation": {"mode": "off"},
        "events": {"incident": {"max_age": "1s"}},
        "alerting": {
            "receivers": [
                {"name": "quiet"},
                {
                    "name": "oncall",
                    "pagerduty": [
                        {
                            "routing_key": ROUTING_KEY,
                            "url": pd_url,
                            "change_url": pd_url,
                            "send_changes": False,
                        }
                    ],
                },
            ],
            "route": {
                "receiver": "quiet",
                "routes": [
                    {  # the shipped example's paging route
                        "matchers": ['severity="critical"'],
                        "receiver": "oncall",
                        "group_by": ["alertname", "node", "gpu"],
                        "group_wait": "10s",
                        # the example's 1m would hold each GPU's group (and so its next
                        # injection) a minute after its resolve: the first page of a new
                        # group, which is what is timed, does not depend on it
                        "group_interval": "2s",
                        "repeat_interval": "1h",
                        "routes": [{"matchers": ['delivery="immediate"'], "group_wait": "0s"}],
                    }
                ],
            },
        },
    }
    return FleetdConfig.model_validate(data)


Inject = Callable[[Any, int], None]
SOURCES: dict[str, tuple[str, Inject]] = {
    "cper_record": (
        "GpuCperFatalError",
        lambda node, gpu: node.add_cper_record(gpu, fatal=True, block="MP1", afid=30),
    ),
    "kernel_line": (
        "GpuKernelUncorrectableError",
        lambda node, gpu: node.print_ras_line(gpu, kind="uncorrectable", block="UMC"),
    ),
    "amdsmi_event": (
        "BenchKfdVmFault",
        lambda node, gpu: node.emit_event(gpu, w.AMDSMI_EVT_NOTIF_VMFAULT, "1092:python3"),
    ),
}


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(q * (len(ordered) - 1))))
    return ordered[rank]


def time_to_page(injections: int) -> dict[str, Any]:
    configure_logging("json", "warning", stream=sys.stderr)  # stdout is the one JSON line
    out: dict[str, Any] = {"poll_interval_s": POLL_S, "injections_per_source": injections}
    sink = PagerDutySink()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        rules = root / "rules"
        rules.mkdir()
        (rules / "bench.yaml").write_text(BENCH_RULE)
        config = _config(root / "state", rules, sink.url)
        clock = SteadyClock()
        backend, sim = open_backend(config, clock)
        assert sim is not None
        daemon = Daemon(config, clock=clock, backend=backend, sim=sim,
                        console_stream=io.StringIO())  # fmt: skip
        daemon.start()
        try:
            time.sleep(2 * POLL_S)  # first polls, CPER cursors primed, readers open
            for source, (rule, inject) in SOURCES.items():
                out[source] = _measure(sink, sim.node, rule, inject, injections)
                print(json.dumps({source: out[source]}), file=sys.stderr, flush=True)
        finally:
            daemon.stop()
            sink.close()
    return out


def _measure(sink: PagerDutySink, node: Any, rule: str, inject: Inject, n: int) -> dict[str, Any]:
    latencies: list[float] = []
    missed = 0
    last_page: dict[int, float] = {}
    for i in range(n):
        gpu = i % 8
        if gpu in last_page:  # its previous alert must have resolved first
            deadline = time.time() + 4 * POLL_S
            while sink.find("resolve", rule, gpu, last_page[gpu]) is None:
                if time.time() > deadline:
                    break
                time.sleep(0.05)
        t0 = time.time()
        inject(node, gpu)
        deadline = t0 + 15.0
        page = None
        while page is None and time.time() < deadline:
            page = sink.find("trigger", rule, gpu, t0)
            if page is None:
                time.sleep(0.005)
        if page is None:
            missed += 1
            continue
        latencies.append(page - t0)
        last_page[gpu] = page
        time.sleep(0.2)
    return {
        "rule": rule,
        "pages": len(latencies),
        "missed": missed,
        "median_s": round(statistics.median(latencies), 3) if latencies else None,
        "p99_s": round(_percentile(latencies, 0.99), 3) if latencies else None,
        "max_s": round(max(latencies), 3) if latencies else None,
    }
