"""fleetd's alerts in a REAL Alertmanager (the Debian package's binary), through its API v2."""

from __future__ import annotations

import io
import random
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from fleetd.alert.dispatch import Dispatcher
from fleetd.store.db import Database
from tests.alert.support import NODE, config, fire, resolve

BINARY = shutil.which("prometheus-alertmanager") or "/usr/bin/prometheus-alertmanager"
AM_CONFIG = """\
route:
  receiver: blackhole
  group_by: [alertname]
receivers:
  - name: blackhole
"""

pytestmark = pytest.mark.skipif(
    not Path(BINARY).exists(), reason="prometheus-alertmanager is not installed"
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def alertmanagers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    """Two Alertmanagers on free loopback ports, clustering off, started in parallel."""
    procs: list[subprocess.Popen[bytes]] = []
    urls = []
    for i in range(2):
        work = tmp_path_factory.mktemp(f"am{i}")
        (work / "am.yml").write_text(AM_CONFIG)
        port = free_port()
        procs.append(
            subprocess.Popen(
                [
                    BINARY,
                    f"--config.file={work / 'am.yml'}",
                    f"--storage.path={work / 'data'}",
                    "--cluster.listen-address=",
                    f"--web.listen-address=127.0.0.1:{port}",
                ],
                stdout=(work / "am.log").open("wb"),
                stderr=subprocess.STDOUT,
            )
        )
        urls.append(f"http://127.0.0.1:{port}")
    try:
        for url, proc in zip(urls, procs, strict=True):
            _wait_ready(url, proc)
        yield urls
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _wait_ready(url: str, proc: subprocess.Popen[bytes]) -> None:
    """Poll the external process until it serves (this waits for a real binary, not for
    fleetd's behaviour)."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"alertmanager exited with {proc.returncode}")
        try:
            if requests.get(f"{url}/-/ready", timeout=1).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(0.1)
    raise RuntimeError("alertmanager did not become ready within 20s")


def am_alerts(url: str) -> list[dict[str, object]]:
    response = requests.get(f"{url}/api/v2/alerts", params={"filter": f'node="{NODE}"'}, timeout=5)
    response.raise_for_status()
    alerts: list[dict[str, object]] = response.json()
    return alerts


def test_alerts_appear_and_resolve_in_every_alertmanager(
    alertmanagers: list[str], sqlite_db: Database
) -> None:
    cfg = config(
        {
            "receivers": [{"name": "am", "alertmanager": [{"url": url} for url in alertmanagers]}],
            "route": {"receiver": "am"},
            "inhibit_rules": [],
        }
    )
    # Alertmanager compares endsAt with its own clock, so this test runs on real time.
    now = time.time()
    d = Dispatcher(cfg, sqlite_db, node=NODE, now=now, rng=random.Random(1), stream=io.StringIO())
    d.submit(
        [
            fire("GpuHot", at=now, gpu=3, annotations={"summary": "hotspot 105 °C"}),
            fire("EccUncorrectable", at=now, gpu=5),
        ],
        now,
    )
    report = d.tick(now)
    assert report.delivered == 2 and report.failed == 0
    for url in alertmanagers:
        found = {a["labels"]["alertname"]: a for a in am_alerts(url)}  # type: ignore[index]
        assert set(found) == {"GpuHot", "EccUncorrectable"}
        hot = found["GpuHot"]
        assert hot["labels"] == {
            "alertname": "GpuHot",
            "gpu": "3",
            "node": NODE,
            "severity": "critical",
        }
        assert hot["annotations"] == {"summary": "hotspot 105 °C"}
        assert hot["status"]["state"] == "active"  # type: ignore[index]

    later = time.time()
    d.submit([resolve("GpuHot", at=later, fired_at=now, gpu=3)], later)
    assert d.tick(later).delivered == 2
    for url in alertmanagers:
        names = [a["labels"]["alertname"] for a in am_alerts(url)]  # type: ignore[index]
        assert names == ["EccUncorrectable"]  # GpuHot resolved in Alertmanager itself
    d.close()
