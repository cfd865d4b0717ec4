"""A real ``fleetd run --simulate`` whose storage is attacked while it runs.

Each test starts the daemon on a scenario that raises an uncorrectable ECC error (a critical
page) at ``FAULT_AT_S``, breaks storage before that, and watches a loopback webhook receiver:

* (a) another process holds ``BEGIN EXCLUSIVE`` on ``fleetd.db``;
* (b) the disk is full (``RLIMIT_FSIZE`` lowered on the running daemon with ``prlimit``: root
  ignores file permissions, not that) or the database files are immutable (``chattr +i``;
  skipped where it is unavailable);

and asserts that the page and ``FleetdStorageDegraded`` reach the receiver *during* the
fault, that polls keep their cadence (at least ``MIN_CADENCE`` of the expected count), that
/healthz answers 200 with storage degraded, and that after the fault each notification has
arrived exactly once. (c) garbage over the WAL's frames is found within the integrity check
interval, logged, and the file moved aside; (d) a state directory that cannot be written at
start (immutable) leaves a running daemon that says so on /healthz and pages.

Every wait polls a real process with a deadline; the figures measured are printed (``-s``).
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.standins.webhook import WebhookStandIn
from tests.test_cli_run import free_port, metrics

pytestmark = pytest.mark.slow

FAULT_AT_S = 14  # the scenario's page, seconds after start: storage is broken before it
INTERVAL_S = 1.0
MIN_CADENCE = 0.8
# The fault pages once, under the name of whichever report of it arrived first: the ECC
# counters, the kernel's RAS line or the CPER record (one incident, rules/events.yaml).
PAGES = frozenset(
    {"GpuEccUncorrectableError", "GpuKernelUncorrectableError", "GpuCperUncorrectedError"}
)
PAGE = "the fault's page"
DEGRADED = "FleetdStorageDegraded"

SCENARIO = f"""\
description: GPU 3 reports an uncorrectable HBM error at {FAULT_AT_S} s.
model: MI355X
duration: 10m
steps:
  - {{at: 0s, load: 0.5}}
  - {{at: {FAULT_AT_S}s, gpu: 3, inject: ecc_uncorrectable, params: {{count: 1, block: UMC}}}}
"""

# the shipped rule waits a minute; the test cannot
STORAGE_RULE = """\
rules:
  - name: FleetdStorageDegraded
    expr: fleetd_store_degraded == 1
    for: 2s
    severity: warning
    health: false
    labels: {component: fleetd}
    annotations: {summary: "fleetd storage is degraded"}
"""


def chattr_works(tmp: Path) -> bool:
    if shutil.which("chattr") is None:
        return False
    probe = tmp / "chattr-probe"
    probe.write_text("x")
    ok = subprocess.run(["chattr", "+i", str(probe)], capture_output=True).returncode == 0
    if ok:
        subprocess.run(["chattr", "-i", str(probe)], check=True)
    probe.unlink()
    return ok


class Daemon:
    """``fleetd run`` with a webhook receiver; stderr read by a thread (never a file the
    daemon writes: a lowered RLIMIT_FSIZE must hit the database only)."""

    def __init__(self, tmp: Path, state: Path) -> None:
        self.tmp = tmp
        self.state = state
        self.hook = WebhookStandIn("/hook")
        self.port = free_port()
        rules = tmp / "rules"
        rules.mkdir()
        (rules / "storage.yaml").write_text(STORAGE_RULE)
        (tmp / "scenario.yaml").write_text(SCENARIO)
        config = {
            "state_dir": str(state),
            "http": {"port": self.port},
            "poll": {"interval": "1s"},
            "store": {"integrity_check_interval": "2s", "maintenance_interval": "1s"},
            "rules": {"local_dir": str(rules)},
            "remediation": {"mode": "off"},
            "alerting": {
                "receivers": [{"name": "hook", "webhook": [{"url": self.hook.hook_url}]}],
                "route": {
                    "receiver": "hook",
                    "group_by": ["alertname", "gpu"],
                    "group_wait": "1s",
                    "group_interval": "4s",
                    "repeat_interval": "4h",
                },
            },
        }
        self.config = tmp / "fleetd.yaml"
        self.config.write_text(json.dumps(config) + "\n")
        self.lines: list[str] = []
        self._lock = threading.Lock()
        self.proc: subprocess.Popen[bytes] | None = None
        self.started = 0.0

    def start(self) -> None:
        env = {k: v for k, v in os.environ.items() if k != "NOTIFY_SOCKET"}
        env["PYTHONUNBUFFERED"] = "1"
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "fleetd", "run", "--config", str(self.config),
             "--simulate", str(self.tmp / "scenario.yaml")],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=self.tmp,
        )  # fmt: skip
        threading.Thread(target=self._read, daemon=True).start()
        self.wait_for(lambda: self.healthz()[0] == 200, 40, "fleetd serving /healthz")

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for raw in self.proc.stdout:
            with self._lock:
                self.lines.append(raw.decode(errors="replace").rstrip())

    def log(self) -> list[str]:
        with self._lock:
            return list(self.lines)

    def logged(self, event: str) -> bool:
        return any(f'"{event}"' in line or f"event={event}" in line for line in self.log())

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def healthz(self) -> tuple[int, dict[str, Any]]:
        try:
            url = f"http://127.0.0.1:{self.port}/healthz"
            with urllib.request.urlopen(url, timeout=3) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())
        except OSError:
            return 0, {}

    def polls(self) -> float:
        try:
            text = metrics(self.port)
        except OSError as exc:  # the daemon died (a SIGBUS would show in the log)
            assert self.proc is not None
            self.proc.poll()
            tail = "\n".join(self.log()[-20:])
            code = self.proc.returncode
            raise AssertionError(f"/metrics: {exc!r}; exit {code}\n{tail}") from exc
        for line in text.splitlines():
            if line.startswith("fleetd_polls_total "):
                return float(line.split()[1])
        raise AssertionError("fleetd_polls_total not on /metrics")

    def notifications(self) -> list[tuple[str, str, str]]:
        """(alertname, status, startsAt) of every alert in every accepted message."""
        out = []
        for body in self.hook.payloads("4"):
            for alert in body["alerts"]:
                out.append((alert["labels"]["alertname"], alert["status"], alert["startsAt"]))
        return out

    def received(self, name: str, status: str = "firing") -> bool:
        names = PAGES if name == PAGE else {name}
        return any(n in names and s == status for n, s, _ in self.notifications())

    def wait_for(self, check: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            assert self.proc is not None
            if self.proc.poll() is not None:
                tail = "\n".join(self.log()[-30:])
                raise AssertionError(
                    f"fleetd exited ({self.proc.returncode}) before {what}\n{tail}"
                )
            if time.monotonic() > deadline:
                tail = "\n".join(self.log()[-30:])
                raise AssertionError(f"no {what} within {timeout} s\n{tail}")
            time.sleep(0.2)

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.hook.close()


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    node = Daemon(tmp_path, tmp_path / "state")
    try:
        yield node
    finally:
        node.close()


def during_fault(node: Daemon, label: str) -> dict[str, Any]:
    """With storage broken: the page and FleetdStorageDegraded arrive, polls keep going,
    /healthz says degraded. Returns the figures."""
    assert node.elapsed() < FAULT_AT_S - 1, "storage broke after the page was due: too slow"
    t0, p0 = time.monotonic(), node.polls()
    node.wait_for(lambda: node.healthz()[1].get("storage") == "degraded", 15, "storage degraded")
    node.wait_for(lambda: node.received(PAGE), FAULT_AT_S + 15, f"{PAGE} during the fault")
    node.wait_for(lambda: node.received(DEGRADED), 20, f"{DEGRADED} during the fault")
    status, body = node.healthz()
    assert status == 200 and body["status"] == "ok", body
    assert body["storage"] == "degraded", body
    t1, p1 = time.monotonic(), node.polls()
    expected = (t1 - t0) / INTERVAL_S
    figures = {
        "fault": label,
        "delivered_during_fault": len(node.notifications()),
        "polls": p1 - p0,
        "expected_polls": round(expected, 1),
        "cadence": round((p1 - p0) / expected, 2),
        "storage_reason": body.get("storage_reason"),
    }
    print(f"\nstorage fault {label}: {figures}")
    assert p1 - p0 >= MIN_CADENCE * expected - 1, figures
    return figures


def after_fault(node: Daemon) -> None:
    """Storage back: it recovers, the degraded alert resolves, and each notification (by
    alert, status and episode) arrived exactly once."""
    node.wait_for(lambda: node.healthz()[1].get("storage") == "ok", 30, "storage ok again")
    node.wait_for(lambda: node.received(DEGRADED, "resolved"), 20, f"{DEGRADED} resolved")
    node.wait_for(lambda: node.logged("alert_outbox_reconciled"), 10, "outbox reconciled")
    end = time.monotonic() + 3  # a duplicate would follow the reconciliation at once
    while time.monotonic() < end:
        time.sleep(0.2)
    counts = Counter(node.notifications())
    assert counts and all(n == 1 for n in counts.values()), counts
    assert node.received(PAGE) and node.received(DEGRADED)


def test_a_lock_held_by_another_process(daemon: Daemon) -> None:
    daemon.start()
    other = sqlite3.connect(daemon.state / "fleetd.db", isolation_level=None, timeout=5)
    other.execute("BEGIN EXCLUSIVE")
    try:
        during_fault(daemon, "BEGIN EXCLUSIVE elsewhere")
    finally:
        other.rollback()
        other.close()
    after_fault(daemon)


def test_disk_full(daemon: Daemon) -> None:
    daemon.start()
    assert daemon.proc is not None
    pid = daemon.proc.pid
    # no file may grow past 4 KiB: every WAL append and file extension fails (EFBIG; Python
    # ignores SIGXFSZ), which SQLite reports as a full disk
    # (the soft limit only: raising a hard limit again needs CAP_SYS_RESOURCE)
    inf = resource.RLIM_INFINITY
    resource.prlimit(pid, resource.RLIMIT_FSIZE, (4096, inf))
    try:
        during_fault(daemon, "disk full (RLIMIT_FSIZE)")
    finally:
        resource.prlimit(pid, resource.RLIMIT_FSIZE, (inf, inf))
    after_fault(daemon)


def test_immutable_database_files(daemon: Daemon, tmp_path: Path) -> None:
    if not chattr_works(tmp_path):
        pytest.skip("chattr +i is not available here (needs root and ext4/xfs/btrfs)")
    daemon.start()
    files = [p for p in daemon.state.glob("fleetd.db*") if p.is_file()]
    try:
        subprocess.run(["chattr", "+i", *map(str, files)], check=True)
        during_fault(daemon, "chattr +i on fleetd.db, -wal, -shm")
        assert daemon.proc is not None and daemon.proc.poll() is None  # no SIGBUS
    finally:
        subprocess.run(["chattr", "-i", *map(str, files)], check=False)
    after_fault(daemon)


def test_garbage_in_the_wal_is_found_and_moved_aside(daemon: Daemon) -> None:
    daemon.start()
    wal = daemon.state / "fleetd.db-wal"
    daemon.wait_for(lambda: wal.exists() and wal.stat().st_size > 8192, 20, "a WAL with frames")
    size = wal.stat().st_size
    with wal.open("r+b") as f:
        f.seek(32)  # keep the header: the frames are what readers trust the index for
        f.write(os.urandom(size - 32))
    found_at = time.monotonic()
    daemon.wait_for(lambda: daemon.logged("store_corrupt_moved_aside"), 12, "the damage found")
    took = time.monotonic() - found_at
    print(f"\nWAL garbage found and moved aside after {took:.1f} s")
    assert list(daemon.state.glob("fleetd.db.corrupt-*"))
    daemon.wait_for(lambda: daemon.healthz()[1].get("storage") == "ok", 20, "a fresh database")
    assert daemon.healthz()[0] == 200


def test_state_directory_unwritable_at_start(tmp_path: Path) -> None:
    if not chattr_works(tmp_path):
        pytest.skip("chattr +i is not available here (needs root and ext4/xfs/btrfs)")
    state = tmp_path / "state"
    state.mkdir()
    node = Daemon(tmp_path, state)
    subprocess.run(["chattr", "+i", str(state)], check=True)
    try:
        node.start()
        status, body = node.healthz()
        assert status == 200 and body["storage"] == "degraded", body
        assert str(body.get("storage_reason", "")).startswith("running without storage"), body
        assert node.logged("store_memory_only")
        node.wait_for(lambda: node.received(DEGRADED), 20, f"{DEGRADED} without storage")
        node.wait_for(lambda: node.received(PAGE), FAULT_AT_S + 15, f"{PAGE} without storage")
        print(f"\nno storage at start: delivered {len(node.notifications())} notifications")
        assert not (state / "fleetd.db").exists()
    finally:
        subprocess.run(["chattr", "-i", str(state)], check=False)
        node.close()
