"""The remediation case of bench/alerts.py: one reset run of an 8-worker hive, announced
through every integration of the shipped example routing (docs/fleetd.example.yaml), on a
fake clock, with PagerDuty limited to 20 requests per minute (429 + Retry-After above).

It counts the requests each integration received, how long the page for the fault waited
after its group became due (and how many PagerDuty requests went out in between: the target
is none — pages go first), and how long the whole run took to be told (fake seconds from the
fault to its last change event, to the page's resolve, and to the last notification of any
kind, which the chat routes' 5-minute group_interval sets). Everything is real but the
clock: the dispatcher with its outbox in SQLite, the remediation with the simulated hive and
eight stand-in vLLM workers, loopback HTTP receivers.
"""

from __future__ import annotations

import io
import json
import os
import random
import tempfile
import threading
from collections import Counter
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, cast

import yaml

from fleetd.alert.config import AlertingConfig
from fleetd.alert.dispatch import Dispatcher
from fleetd.clock import FakeClock
from fleetd.collect.amdsmi_backend import AmdSmiBackend
from fleetd.collect.collectors import default_collectors
from fleetd.collect.poller import Poller
from fleetd.config import FleetdConfig
from fleetd.model import Alert, AlertKey, AlertState, Severity, Transition, make_labels
from fleetd.remedy.notify import DispatcherSink
from fleetd.remedy_wiring import build_remediation
from fleetd.sim import SimulatedAmdSmi, build_node
from fleetd.sim.vllm_worker import StandInFleet
from fleetd.store.db import Database, sqlite_url

ROOT = Path(__file__).resolve().parents[1]
NODE = "bench-node"
PD_PER_MINUTE = 20
RULE = "GpuEccUncorrectableError"


class Receivers:
    """One loopback server for every integration; each request is recorded with the fake
    time it arrived. PagerDuty answers 429 above ``PD_PER_MINUTE`` in any 60 s."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.log: list[tuple[float, str, int, dict[str, Any]]] = []  # (at, path, status, body)
        self.lock = threading.Lock()
        self._ts = 0
        receivers = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                body = json.loads(raw or b"{}")
                status, headers, reply = receivers.answer(self.path, body)
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                data = reply.encode() if isinstance(reply, str) else json.dumps(reply).encode()
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def base(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}"

    def answer(self, path: str, body: Any) -> tuple[int, dict[str, str], Any]:
        now = self.clock.now()
        with self.lock:
            if path.startswith("/pd/"):
                recent = [at for at, p, s, _ in self.log if p.startswith("/pd/") and s == 202]
                recent = [at for at in recent if now - at < 60]
                if len(recent) >= PD_PER_MINUTE:
                    wait = max(1, int(60 - (now - min(recent))) + 1)
                    self.log.append((now, path, 429, body))
                    return 429, {"Retry-After": str(wait)}, {"status": "throttled"}
                self.log.append((now, path, 202, body))
                return 202, {}, {"status": "success", "dedup_key": body.get("dedup_key", "")}
            self.log.append((now, path, 200, body))
            if path.startswith("/slack/"):
                return 200, {}, "ok"  # an incoming webhook answers plain text
            if path.startswith("/slack-api/"):
                self._ts += 1
                return 200, {}, {"ok": True, "channel": "C1", "ts": f"1.{self._ts:06d}"}
            return 200, {}, {}

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def example_alerting(base: str) -> AlertingConfig:
    """The example's alerting section as shipped, its endpoints pointed at ``base``."""
    doc = yaml.safe_load((ROOT / "docs" / "fleetd.example.yaml").read_text(encoding="utf-8"))
    alerting = doc["alerting"]
    alerting.pop("external_url", None)
    for receiver in alerting["receivers"]:
        for entry in receiver.get("pagerduty", []):
            entry.pop("routing_key_file", None)
            entry.update(routing_key="R" * 32, url=f"{base}/pd/enqueue")
            entry.update(change_url=f"{base}/pd/change")
        for entry in receiver.get("slack", []):
            if "channel" in entry:
                entry.pop("bot_token_env", None)
                entry.update(bot_token="xoxb-bench", api_url=f"{base}/slack-api")
            else:
                entry.pop("webhook_url_file", None)
                entry["webhook_url"] = f"{base}/slack/{receiver['name']}"
        for i, entry in enumerate(receiver.get("alertmanager", [])):
            entry.pop("bearer_token_file", None)
            entry["url"] = f"{base}/am{i}"
        for entry in receiver.get("webhook", []):
            entry.pop("url_file", None)
            entry["url"] = f"{base}/audit"
    return AlertingConfig.model_validate(alerting)


def ecc_alert(state: AlertState, at: float, fired_at: float) -> Alert:
    labels = {"gpu": 3, "uuid": "GPU-3"}
    return Alert(
        key=AlertKey(RULE, make_labels(labels)),
        state=state,
        severity=Severity.CRITICAL,
        labels=make_labels({**labels, "alertname": RULE, "severity": "critical", "node": NODE}),
        annotations=make_labels({"summary": "GPU 3: 1 new uncorrectable ECC error(s)"}),
        value=1.0,
        active_at=fired_at,
        fired_at=fired_at,
        resolved_at=at if state is AlertState.RESOLVED else None,
        remediation_plan="reset",
    )


def integration_of(path: str) -> str:
    if path.startswith("/pd/"):
        return "pagerduty"
    if path.startswith("/slack-api/"):
        return "slack_bot"
    if path.startswith("/slack/"):
        return "slack_webhook"
    if path.startswith("/am"):
        return "alertmanager"
    return "webhook"


def remediation_case() -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="fleetd-bench-alerts-"))
    clock = FakeClock()
    receivers = Receivers(clock)
    sim = build_node("MI355X", seed=11, clock=clock)
    fleet = StandInFleet(tmp / "standin", clock=clock, processes=sim)
    for gpu in range(8):
        fleet.add(f"gpu{gpu}", [gpu], model="bench/llama-70b")
    os.environ["PATH"] = f"{fleet.bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"
    out_url, in_url = fleet.rotation_urls()
    example = yaml.safe_load((ROOT / "docs" / "fleetd.example.yaml").read_text(encoding="utf-8"))
    remediation = example["remediation"]
    remediation.update(mode="on")
    remediation["workers"].update(rotation={"http": {"out_url": out_url, "in_url": in_url}})
    config = FleetdConfig.model_validate(
        {
            "node": {"name": NODE, "labels": example["node"]["labels"]},
            "state_dir": str(tmp),
            "alerting": {"receivers": [{"name": "console", "console": [{}]}]},
            "vllm": {"workers": fleet.worker_config()},
            "remediation": remediation,
        }
    )
    db = Database.open(sqlite_url(tmp / "fleetd.db"))
    dispatcher = Dispatcher(
        example_alerting(receivers.base),
        db,
        node=NODE,
        now=clock.now(),
        rng=random.Random(1),
        stream=io.StringIO(),
        external_labels=config.node.labels,
    )
    backend = AmdSmiBackend(SimulatedAmdSmi(sim))
    poller = Poller(backend, default_collectors(), node=NODE, gpu_timeout=5.0,
                    timer=clock.monotonic)  # fmt: skip
    remedy = build_remediation(
        config, db=db, backend=backend, poller=poller, clock=clock,
        sink=DispatcherSink(dispatcher),
    )  # fmt: skip
    try:
        return _drive(clock, receivers, sim, dispatcher, remedy.handle, remedy.tick, remedy)
    finally:
        dispatcher.close()
        db.dispose()
        fleet.close()
        receivers.close()


def _drive(
    clock: FakeClock,
    receivers: Receivers,
    sim: Any,
    dispatcher: Dispatcher,
    handle: Callable[[list[Transition], float], list[str]],
    tick: Callable[[float], None],
    remedy: Any,
) -> dict[str, Any]:
    fault = clock.now()
    sim.inject(3, "ecc_uncorrectable")
    firing = Transition(
        ecc_alert(AlertState.FIRING, fault, fault), AlertState.PENDING, AlertState.FIRING, fault
    )
    dispatcher.submit([firing], fault)
    [run_id] = handle([firing], fault)
    run_end: float | None = None
    for _ in range(3 * 3600):
        now = clock.now()
        tick(now)
        run = remedy.run(run_id)
        if run_end is None and run is not None and run.terminal:
            run_end = now  # the rules would resolve the held alert once its run is over
            resolved = ecc_alert(AlertState.RESOLVED, now, fault)
            dispatcher.submit(
                [Transition(resolved, AlertState.FIRING, AlertState.RESOLVED, now)], now
            )
        dispatcher.tick(now)
        settled = run_end is not None and now - run_end > 300  # resolves flush per group_interval
        if settled and not dispatcher.status(now)["outbox_pending"]:
            break
        clock.advance(1.0)
    log = receivers.log
    pd = [(at, s, b) for at, p, s, b in log if p == "/pd/enqueue" and s == 202]
    page_at = next(at for at, _, b in pd if b.get("event_action") == "trigger")
    due = fault + 10.0  # the critical route's group_wait in the example
    before_page = [1 for at, p, s, _ in log if p.startswith("/pd/") and due <= at < page_at]
    accepted = Counter(integration_of(p) for _, p, s, _ in log if s in (200, 202))
    throttled = Counter(integration_of(p) for _, p, s, _ in log if s == 429)
    # Alertmanager is re-posted every resend_interval; resolves go out at their group's next
    # flush (group_interval: 1m for the critical route, 5m for the chat and audit routes)
    last = max(at for at, p, *_ in log if integration_of(p) != "alertmanager")
    changes = [at for at, p, s, b in log if p == "/pd/change" and s == 202]
    pd_resolve = next(at for at, _, b in pd if b.get("event_action") == "resolve")
    status = dispatcher.status(clock.now())
    return {
        "requests_per_integration": dict(sorted(accepted.items())),
        "answered_429": dict(sorted(throttled.items())),
        "pagerduty_limit_per_minute": PD_PER_MINUTE,
        "page_delay_after_group_due_s": round(page_at - due, 1),
        "pagerduty_requests_before_the_page_once_due": len(before_page),
        "run_state": remedy.run(run_id).state.value,
        "run_length_s": round((run_end or last) - fault, 1),
        "last_run_message_s": round(max(changes) - fault, 1),
        "page_resolved_s": round(pd_resolve - fault, 1),
        "everything_delivered_s": round(last - fault, 1),
        "rejected": {
            i["receiver"] + "/" + i["kind"]: i.get("last_error")
            for i in cast(list[dict[str, Any]], status["integrations"])
            if i.get("config_errors")
        },
        "fake_clock": True,
    }
