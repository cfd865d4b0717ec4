"""One GPU node as the on-call engineer sees it: the real ``fleetd run`` process on the
shipped example config, every stand-in it talks to, and the ways to look at it
(/metrics, /api/v1, ``fleetctl``).

Every wait has a deadline (``wait_for``); a short sleep between looks is only ever a wait for
another process. ``Node.close`` stops the daemon (SIGTERM, then SIGKILL) and every stand-in,
whatever happened before.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import requests

from tests.e2e.example_config import (
    LocalMachine,
    assert_nothing_leaves_the_machine,
    assert_routing_unchanged,
    load_example,
    rewrite_example,
    write_config,
)
from tests.e2e.standins import alertmanager as am
from tests.e2e.standins.pagerduty import PagerDutyStandIn
from tests.e2e.standins.ports import free_port
from tests.e2e.standins.slack import SlackStandIn
from tests.e2e.standins.vllm import WorkerFleet, WorkerOptions
from tests.e2e.standins.webhook import AlertmanagerRecorder, WebhookStandIn

T = TypeVar("T")
SCENARIOS = Path(__file__).resolve().parent / "scenarios"
BOT_TOKEN_ENV = "FLEETD_SLACK_BOT_TOKEN"


class Node:
    """The daemon on the example config, with its stand-ins; use as a context manager."""

    def __init__(
        self,
        tmp: Path,
        scenario: str | Path,
        *,
        workers: WorkerOptions | None = None,
        pagerduty_per_minute: int | None = None,
    ) -> None:
        self.tmp = tmp
        self.scenario = str(scenario)
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = tmp / "fleetd.log"
        self.started_at: float | None = None
        self._closers: list[Callable[[], None]] = []
        try:
            self._build(workers or WorkerOptions(), pagerduty_per_minute)
        except BaseException:
            self.close()
            raise

    # ---- building ----------------------------------------------------------------------
    def _build(self, workers: WorkerOptions, pagerduty_per_minute: int | None) -> None:
        self.example = load_example()
        self.routing_key = secrets.token_hex(16)  # 32 characters, like an integration key
        self.bot_token = "xoxb-e2e-" + secrets.token_hex(8)
        self.api_token = secrets.token_hex(16)
        self.pagerduty = self._own(
            PagerDutyStandIn(self.routing_key, per_minute=pagerduty_per_minute)
        )
        self.slack = self._own(
            SlackStandIn(webhook_path="/services/T0E2E/B0E2E/" + secrets.token_hex(8),
                         bot_token=self.bot_token)
        )  # fmt: skip
        self.audit = self._own(WebhookStandIn("/audit"))
        self.real_alertmanager = am.available()
        self.alertmanagers: list[Any] = []
        for i in range(2):  # the example lists two HA peers
            if self.real_alertmanager:
                peer = am.RealAlertmanager(self.tmp / f"am{i}")
                self._closers.append(peer.close)
                self.alertmanagers.append(peer)
            else:
                self.alertmanagers.append(self._own(AlertmanagerRecorder()))
        for peer in self.alertmanagers:  # serving before their URLs go into the config
            if isinstance(peer, am.RealAlertmanager):
                peer.wait_ready()
        shipped_workers = self.example.get("vllm", {}).get("workers", [])
        self.fleet = WorkerFleet(
            self.tmp, [(w["name"], w["unit"]) for w in shipped_workers], workers
        )
        self._closers.append(self.fleet.close)
        self.port = free_port()
        machine = LocalMachine(
            tmp=self.tmp,
            port=self.port,
            pagerduty_url=self.pagerduty.url,
            routing_key=self.routing_key,
            slack_webhook_url=self.slack.webhook_url,
            slack_api_url=self.slack.api_url,
            webhook_url=self.audit.url,
            alertmanager_urls=[peer.url for peer in self.alertmanagers],
            worker_urls={name: w.url for name, w in self.fleet.workers.items()},
            systemctl=self.fleet.systemctl,
            rotation=self.fleet.rotation,
            api_token=self.api_token,
        )
        self.config = rewrite_example(self.example, machine)
        assert_routing_unchanged(self.example, self.config)
        assert_nothing_leaves_the_machine(self.config, self.tmp)
        self.config_path = write_config(self.config, self.tmp / "fleetd.yaml")
        http = self.config["http"]
        self.ca_file: str | None = http.get("tls_cert")
        self.address = f"{'https' if self.ca_file else 'http'}://127.0.0.1:{self.port}"

    def _own(self, server: Any) -> Any:
        self._closers.append(server.close)
        return server

    # ---- the daemon --------------------------------------------------------------------
    def start(self, ready_timeout: float = 60.0) -> None:
        """``python -m fleetd run --config FILE --simulate SCENARIO``; waits for /healthz."""
        env = {k: v for k, v in os.environ.items() if k != "NOTIFY_SOCKET"}
        env[BOT_TOKEN_ENV] = self.bot_token
        env["PYTHONUNBUFFERED"] = "1"
        self._log = self.log_path.open("wb")
        self.started_at = time.time()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "fleetd", "run", "--config", str(self.config_path),
             "--simulate", self.scenario],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=self.tmp,
        )  # fmt: skip
        self.wait_for(lambda: self._answers("/healthz"), ready_timeout, "fleetd serving /healthz")

    def _answers(self, path: str) -> bool:
        try:
            return self.get(path, timeout=2).status_code == 200
        except requests.RequestException:
            return False

    def stop(self, timeout: float = 20.0) -> int | None:
        """SIGTERM, then SIGKILL after ``timeout``; the exit code (None if never started)."""
        proc, self.proc = self.proc, None
        if proc is None:
            return None
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        self._log.close()
        return proc.returncode

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.stop()
        for closer in reversed(self._closers):
            with contextlib.suppress(Exception):
                closer()
        self._closers.clear()

    def __enter__(self) -> Node:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(line[:300] for line in text.splitlines()[-lines:])

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    # ---- looking at it -----------------------------------------------------------------
    def get(self, path: str, timeout: float = 5.0) -> requests.Response:
        """GET on the daemon's own HTTP server (TLS verified against its certificate)."""
        return requests.get(self.address + path, timeout=timeout, verify=self.ca_file or True)

    def fetch(self, url: str, timeout: float = 5.0) -> requests.Response:
        """GET any URL the daemon handed out (its own certificate is trusted)."""
        return requests.get(url, timeout=timeout, verify=self.ca_file or True)

    def api(self, path: str) -> Any:
        response = self.get("/api/v1" + path)
        assert response.status_code == 200, f"GET /api/v1{path}: {response.status_code}"
        return response.json()

    def metrics(self) -> str:
        response = self.get("/metrics")
        assert response.status_code == 200, f"/metrics answered {response.status_code}"
        return response.text

    def fleetctl(self, *args: str, timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
        """``fleetctl ARGS`` (the installed entry point, else the module), TLS trusted."""
        entry = Path(sys.executable).with_name("fleetctl")
        argv = (
            [str(entry)] if entry.exists() else [sys.executable, "-m", "fleetd.cli.fleetctl_main"]
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETCTL_")}
        env["NO_COLOR"] = "1"
        if self.ca_file:
            env["FLEETCTL_CA_FILE"] = self.ca_file
        return subprocess.run(
            [*argv, *args], capture_output=True, text=True, timeout=timeout, env=env,
            cwd=self.tmp, check=False,
        )  # fmt: skip

    def wait_for(
        self, probe: Callable[[], T | None], timeout: float, what: str, every: float = 0.2
    ) -> T:
        """Poll ``probe`` until it returns something truthy, or fail after ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(
                    f"fleetd exited with {self.proc.returncode} while waiting for {what}\n"
                    + self.log_tail()
                )
            value = probe()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"no {what} within {timeout:g}s\n" + self.log_tail(20))
            time.sleep(every)
