"""Real Alertmanagers (the Debian package's binary) for the ``alertmanager`` receiver.

The example lists two Alertmanagers (one entry per HA peer), so two are started, clustering
off, on free loopback ports. Without the binary, ``AlertmanagerRecorder`` stand-ins take
their place so the rest of the run is unchanged, and the tests that need the real one skip.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import requests

from tests.e2e.standins.ports import free_port

BINARY = shutil.which("prometheus-alertmanager") or "/usr/bin/prometheus-alertmanager"
CONFIG = """\
route:
  receiver: blackhole
  group_by: [alertname]
receivers:
  - name: blackhole
"""


def available() -> bool:
    return Path(BINARY).exists()


SKIP_REASON = f"prometheus-alertmanager is not installed ({BINARY})"


class RealAlertmanager:
    """One Alertmanager process; ``alerts()`` reads its API v2."""

    def __init__(self, work: Path) -> None:
        work.mkdir(parents=True, exist_ok=True)
        (work / "am.yml").write_text(CONFIG)
        self.work = work
        self.log_path = work / "am.log"
        self._log = self.log_path.open("wb")
        self._spawn()

    def _spawn(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [
                BINARY,
                f"--config.file={self.work / 'am.yml'}",
                f"--storage.path={self.work / 'data'}",
                "--cluster.listen-address=",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def wait_ready(self, timeout: float = 20.0) -> None:
        """Wait for the external binary to serve (not for fleetd's behaviour). A free port
        can be taken by another process (a peer started a moment before, another test
        worker) before the binary binds it: then it starts again on another port."""
        deadline = time.monotonic() + timeout
        attempts = 3
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                output = self.log_path.read_text(errors="replace")
                attempts -= 1
                if "address already in use" in output and attempts > 0:
                    self._spawn()
                    continue
                raise RuntimeError(
                    f"alertmanager exited with {self.proc.returncode}: {output[-500:]}"
                )
            try:
                if requests.get(f"{self.url}/-/ready", timeout=1).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"alertmanager at {self.url} not ready within {timeout:g}s")

    def alerts(self, **filters: str) -> list[dict[str, Any]]:
        """Its alerts (active, silenced and inhibited) matching label equality ``filters``."""
        params = [("filter", f'{k}="{v}"') for k, v in filters.items()]
        response = requests.get(f"{self.url}/api/v2/alerts", params=params, timeout=5)
        response.raise_for_status()
        found: list[dict[str, Any]] = response.json()
        return found

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self._log.close()
