"""A real ``fleetd run --simulate healthy`` whose wall clock is stepped under it.

libfaketime fakes the wall clock only (``FAKETIME_DONT_FAKE_MONOTONIC=1``) and re-reads its
offset from a file on every call (``FAKETIME_NO_CACHE=1``), so rewriting the file steps the
daemon's ``time.time()`` while its monotonic clock runs on: what an NTP step or an
operator's ``date -s`` does. Steps of −1 h, then +1 h (back), then +1 h again: through each,
polls keep their one-second cadence, /healthz stays 200 "ok" with a small non-negative age,
WATCHDOG=1 keeps coming, and the daemon's own clock neither jumps nor loses the step (the
offset shows on /metrics). SIGTERM still stops it promptly.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import sysconfig
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from fleetd.clock import SLEW_RATE
from tests.chaos.config_corpus import ALERTING
from tests.test_cli_run import free_port, metrics

PHASE_S = 6.0  # real seconds watched after each step; polls run every second
STEP_S = 3600.0
MIN_POLLS = 4  # of the ~6 a phase holds: slack for a loaded two-core machine
MAX_AGE_S = 3.0  # /healthz's poll age: three intervals at most


def _faketime_library() -> Path | None:
    """libfaketimeMT (the pthread-safe build: fleetd is multithreaded), where Debian puts it."""
    arch = sysconfig.get_config_var("MULTIARCH") or "x86_64-linux-gnu"
    for folder in (f"/usr/lib/{arch}/faketime", "/usr/lib/faketime", "/usr/local/lib/faketime"):
        path = Path(folder) / "libfaketimeMT.so.1"
        if path.exists():
            return path
    return None


LIBFAKETIME = _faketime_library()
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        LIBFAKETIME is None,
        reason="libfaketime is not installed (Debian package faketime); cannot step the clock",
    ),
]


def faked_env(rc: Path) -> dict[str, str]:
    assert LIBFAKETIME is not None
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAKETIME")}
    env.update(
        LD_PRELOAD=str(LIBFAKETIME),
        FAKETIME_TIMESTAMP_FILE=str(rc),
        FAKETIME_NO_CACHE="1",
        FAKETIME_DONT_FAKE_MONOTONIC="1",
        # on this glibc libfaketime turns a timed-wait workaround on by itself, which makes
        # every GIL hand-over between threads take milliseconds (polls would overrun)
        FAKETIME_FORCE_MONOTONIC_FIX="0",
    )
    return env


def set_offset(rc: Path, seconds: float) -> None:
    """The wall-clock offset from real time libfaketime reports from now on."""
    tmp = rc.with_suffix(".new")
    tmp.write_text(f"{seconds:+.0f}\n")
    tmp.replace(rc)  # never a half-written file for the daemon to read


def libfaketime_steps(rc: Path) -> bool:
    """Whether a process under these settings sees the offset change (then back to 0)."""
    seen = []
    for offset in (0.0, -STEP_S, 0.0):
        set_offset(rc, offset)
        out = subprocess.run(
            [sys.executable, "-c", "import time; print(time.time())"],
            env=faked_env(rc),
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        seen.append(float(out.stdout) - time.time() - offset)
    return all(abs(error) < 5 for error in seen)


class Notifications:
    """The datagram socket systemd would listen on, read as systemd does: at once, always.

    (An unread socket would block the daemon's sends: Linux queues only
    ``net.unix.max_dgram_qlen`` datagrams, 10 on some machines.)
    """

    def __init__(self, path: Path) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.sock.settimeout(0.2)
        self._lock = threading.Lock()
        self._lines: list[str] = []
        self._closed = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while not self._closed.is_set():
            try:
                data = self.sock.recv(4096)
            except TimeoutError:
                continue
            except OSError:
                return
            with self._lock:
                self._lines += data.decode().splitlines()

    @property
    def seen(self) -> list[str]:
        with self._lock:
            return list(self._lines)

    def wait_for(self, field: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while field not in self.seen:
            assert time.monotonic() < deadline, f"no {field} from fleetd; got {self.seen[-20:]}"
            time.sleep(0.1)

    def close(self) -> None:
        self._closed.set()
        self._reader.join(5)
        self.sock.close()


def gauge(text: str, name: str) -> float:
    found = re.search(rf"^{name} (\S+)$", text, re.MULTILINE)
    assert found is not None, f"{name} not on /metrics"
    return float(found.group(1))


def healthz(port: int) -> tuple[int, dict[str, object]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@dataclass
class Phase:
    """What the daemon did in the real seconds after one step."""

    offset: float
    polls: int
    watchdog_pings: int
    health: list[tuple[int, dict[str, object]]]
    clock_offset: float
    clock_steps: float


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], Notifications, Path, int]]:
    rc = tmp_path / "faketime.rc"
    if not libfaketime_steps(rc):
        pytest.skip("libfaketime is installed but does not step time.time() here")
    port = free_port()
    config = tmp_path / "fleetd.yaml"
    config.write_bytes(
        f"state_dir: {tmp_path}\nhttp: {{port: {port}}}\npoll: {{interval: 1s}}\n".encode()
        + ALERTING
    )
    notify = Notifications(tmp_path / "notify.sock")
    env = faked_env(rc)
    env.update(NOTIFY_SOCKET=str(tmp_path / "notify.sock"), WATCHDOG_USEC="2000000")
    command = [sys.executable, "-m", "fleetd", "run", "--config", str(config)]
    with open(tmp_path / "fleetd.log", "w") as log:  # the child keeps its own copy
        proc = subprocess.Popen(
            [*command, "--simulate", "healthy"],
            stdout=subprocess.DEVNULL,
            stderr=log,
            env=env,
        )
    try:
        yield proc, notify, rc, port
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)
        notify.close()


def watch(port: int, notify: Notifications, offset: float) -> Phase:
    """Poll /healthz for a phase; count polls (from /metrics) and watchdog pings in it."""
    seen = len(notify.seen)
    before = gauge(metrics(port), "fleetd_polls_total")
    deadline = time.monotonic() + PHASE_S
    health = []
    while time.monotonic() < deadline:
        health.append(healthz(port))
        time.sleep(0.5)
    text = metrics(port)
    return Phase(
        offset=offset,
        polls=int(gauge(text, "fleetd_polls_total") - before),
        watchdog_pings=notify.seen[seen:].count("WATCHDOG=1"),
        health=health,
        clock_offset=gauge(text, "fleetd_clock_offset_seconds"),
        clock_steps=gauge(text, "fleetd_clock_steps_total"),
    )


def test_polls_health_and_watchdog_survive_wall_clock_steps(
    daemon: tuple[subprocess.Popen[bytes], Notifications, Path, int],
) -> None:
    proc, notify, rc, port = daemon
    notify.wait_for("READY=1", timeout=60)
    phases = [watch(port, notify, 0.0)]
    for offset in (-STEP_S, 0.0, STEP_S):  # steps of −1 h, +1 h (back), +1 h
        set_offset(rc, offset)
        phases.append(watch(port, notify, offset))

    for n, phase in enumerate(phases):
        where = f"after the step to {phase.offset:+.0f}s: {phase}"
        assert phase.polls >= MIN_POLLS, where
        assert phase.polls <= PHASE_S + 3, where  # no burst of catch-up polls either
        assert phase.watchdog_pings >= MIN_POLLS, where
        for status, body in phase.health:
            assert status == 200 and body["status"] == "ok", where
            age = body["last_poll_age_seconds"]
            assert isinstance(age, float | int) and 0 <= age <= MAX_AGE_S, where
        # the daemon's clock kept running steadily: the step shows as an offset to slew
        # away (SLEW_RATE of the time since the first step at most), never as a jump
        slewed = SLEW_RATE * (PHASE_S + 1) * n
        assert abs(phase.clock_offset - phase.offset) < 1.0 + slewed, where
        assert phase.clock_steps == n, where

    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=15) == 0
    notify.wait_for("STOPPING=1", timeout=5)
