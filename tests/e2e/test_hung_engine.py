"""A hung vLLM engine end to end: the real ``fleetd run`` process scrapes a stand-in worker
over HTTP; the worker's engine hangs ("Running 0, Waiting N", no tokens) while /health keeps
answering 200 (vllm-project/vllm#39863), and ``VllmWorkerStalled`` fires.

The shipped rule's windows (2 minutes, ``for: 2m``) are shortened to seconds in a copy of the
pack so the run takes seconds; the expression itself is the shipped one, byte for byte."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from fleetd.clock import SystemClock
from fleetd.rules.config import shipped_rules_dir
from fleetd.sim.vllm_worker import StandInVllm
from tests.e2e.standins.ports import free_port

STALLED = "VllmWorkerStalled"
PROMTOOL = shutil.which("promtool")


def fast_pack(directory: Path) -> Path:
    """rules/vllm.yaml with its 2m windows and ``for`` as 2s and 1s; nothing else changed."""
    text = (shipped_rules_dir() / "vllm.yaml").read_text()
    assert "[2m]" in text and "for: 2m" in text, "the shipped stall rule changed shape"
    text = text.replace("[2m]", "[2s]").replace("for: 2m", "for: 1s")
    directory.mkdir()
    (directory / "vllm.yaml").write_text(text)
    return directory


@pytest.fixture
def worker() -> Iterator[StandInVllm]:
    w = StandInVllm("w0", [0], clock=SystemClock(), max_running=2, tokens_per_s=50.0)
    w.start_unit()
    w.add_requests(4, duration_s=3600.0)  # two running, two queued, tokens flowing
    try:
        yield w
    finally:
        w.close()


def alerts(port: int) -> list[dict[str, Any]]:
    try:
        reply = requests.get(f"http://127.0.0.1:{port}/api/v1/alerts", timeout=2)
    except requests.RequestException:
        return []
    if reply.status_code != 200:
        return []
    found: list[dict[str, Any]] = reply.json()["alerts"]
    return found


def wait_for(proc: subprocess.Popen[bytes], probe: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"fleetd exited with {proc.returncode} waiting for {what}"
        value = probe()
        if value:
            return value
        time.sleep(0.1)  # a wait for another process, not for behaviour in this one
    raise AssertionError(f"no {what} within {timeout:g}s")


def test_a_hung_engine_answering_health_fires_the_stall_rule(
    tmp_path: Path, worker: StandInVllm
) -> None:
    port = free_port()
    rules = fast_pack(tmp_path / "rules.d")
    config = tmp_path / "fleetd.yaml"
    config.write_text(
        f"state_dir: {tmp_path}\n"
        f"http: {{port: {port}}}\n"
        "poll: {interval: 1s}\n"
        f"rules: {{shipped: false, local_dir: {rules}}}\n"
        "vllm:\n"
        "  scrape_interval: 1s\n"
        f"  workers: [{{name: w0, url: '{worker.url}', gpus: [0]}}]\n"
        "alerting: {receivers: [{name: console, console: [{}]}]}\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "NOTIFY_SOCKET"}
    log = (tmp_path / "fleetd.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "fleetd", "run", "--config", str(config), "--simulate", "healthy"],
        stdout=log, stderr=subprocess.STDOUT, env=env, cwd=tmp_path,
    )  # fmt: skip
    try:
        metrics_url = f"http://127.0.0.1:{port}/metrics"

        def scraped_running() -> bool:
            try:
                text = requests.get(metrics_url, timeout=2).text
            except requests.RequestException:
                return False
            return (
                re.search(r'fleetd_vllm_requests_running\{gpu="0",worker="w0"\} 2', text)
                is not None
            )

        wait_for(proc, scraped_running, 30, "the worker's load on /metrics")
        assert not [a for a in alerts(port) if a["rule"] == STALLED]  # busy, not stalled
        worker.hang_engine()
        assert requests.get(worker.url + "/health", timeout=2).status_code == 200
        fired = wait_for(
            proc,
            lambda: [a for a in alerts(port) if a["rule"] == STALLED and a["state"] == "firing"],
            20,
            f"{STALLED} firing",
        )
        assert fired[0]["labels"]["worker"] == "w0"
        text = requests.get(metrics_url, timeout=2).text
        assert 'fleetd_vllm_requests_running{gpu="0",worker="w0"} 0.0' in text
        assert 'fleetd_vllm_requests_waiting{gpu="0",worker="w0"} 4.0' in text
        assert 'fleetd_vllm_up{gpu="0",worker="w0"} 1.0' in text  # health still 200
        # the worker's latency histograms, stored and exported as Prometheus histograms
        assert "# TYPE fleetd_vllm_time_to_first_token_seconds histogram" in text
        assert 'fleetd_vllm_inter_token_latency_seconds_bucket{le="+Inf",model=' in text
        if PROMTOOL is not None:
            lint = subprocess.run(
                [PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True,
                timeout=30, check=False,
            )  # fmt: skip
            assert lint.returncode == 0, lint.stderr
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        log.close()
