"""A real ``fleetd run --simulate healthy`` given a hostile fleetd.yaml on SIGHUP: an alias
bomb, a file cut to nothing. The bounded loader rejects both fast; the daemon keeps its
running config, its memory and its reload loop, and still stops promptly on SIGTERM."""

from __future__ import annotations

import signal
import time
from pathlib import Path

from tests.chaos.config_corpus import ALERTING
from tests.test_cli_run import Notifications, fleetd, free_port, metrics

BOMB = (
    b"l0: &l0 ["
    + b", ".join([b"lol"] * 9)
    + b"]\n"
    + b"".join(f"l{n}: &l{n} [{', '.join([f'*l{n - 1}'] * 9)}]\n".encode() for n in range(1, 9))
)
MEMORY_GROWTH_KIB = 64 * 1024  # the bomb expands to ~10^9 values unbounded: gigabytes


def peak_rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM in /proc/PID/status")


def test_a_bomb_and_an_empty_file_on_sighup_change_nothing(tmp_path: Path) -> None:
    port = free_port()
    config = tmp_path / "fleetd.yaml"
    good = f"state_dir: {tmp_path}\nhttp: {{port: {port}}}\npoll: {{interval: 1s}}\n"
    config.write_bytes(good.encode() + ALERTING)
    notify = Notifications(tmp_path / "notify.sock")
    proc = fleetd(
        "run",
        "--config",
        str(config),
        "--simulate",
        "healthy",
        env={"NOTIFY_SOCKET": str(tmp_path / "notify.sock")},
    )
    try:
        notify.wait_for("READY=1")
        before = peak_rss_kib(proc.pid)
        for attempt, hostile in enumerate([BOMB, b""], start=1):
            config.write_bytes(hostile)
            notify.seen.clear()
            started = time.monotonic()
            proc.send_signal(signal.SIGHUP)
            notify.wait_for("RELOADING=1")
            notify.wait_for("READY=1")  # rejected: the running config stays
            assert time.monotonic() - started < 20
            text = metrics(port)
            assert f'fleetd_config_reloads_total{{result="failure"}} {attempt}.0' in text
            assert "fleetd_config_last_reload_success 0.0" in text
        growth = peak_rss_kib(proc.pid) - before
        assert growth < MEMORY_GROWTH_KIB, f"peak resident set grew by {growth} KiB"
        # the reload loop still works: a good file is applied
        config.write_bytes(good.replace("1s", "2s").encode() + ALERTING)
        notify.seen.clear()
        proc.send_signal(signal.SIGHUP)
        notify.wait_for("RELOADING=1")
        notify.wait_for("READY=1")
        assert 'fleetd_config_reloads_total{result="success"} 1.0' in metrics(port)
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        assert time.monotonic() - started < 15
    finally:
        if proc.poll() is None:
            proc.kill()
        _, err = proc.communicate(timeout=30)
        notify.sock.close()
    assert "Traceback" not in err
    assert err.count("config_reload_failed") == 2
    assert "more than 20000 values once aliases are expanded" in err
    assert "the file is empty: it needs at least alerting:" in err
