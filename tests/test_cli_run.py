"""``fleetd run`` as systemd runs it: a real process, real signals, the notify socket."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

ALERTING = "alerting: {receivers: [{name: console, console: [{}]}]}\n"  # a file needs it


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def fleetd(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "fleetd", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )


def test_missing_amdsmi_library_is_one_clear_line(tmp_path: Path) -> None:
    """amdsmi installed (CI installs the package) but no libamd_smi.so: no traceback."""
    config = tmp_path / "fleetd.yaml"
    config.write_text(f"state_dir: {tmp_path}\nhttp: {{port: 0}}\n{ALERTING}")
    proc = fleetd("run", "--config", str(config), env={"ROCM_PATH": str(tmp_path / "rocm")})
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("fleetd: ") and "libamd_smi.so" in lines[0]
    assert "Traceback" not in err


def test_an_unsafe_amdsmi_pair_is_refused_in_one_line(tmp_path: Path) -> None:
    """A node whose libamd_smi.so is ROCm 7.13's under the 7.0.2 package: refused, exit 2."""
    scenario = tmp_path / "rocm713.yaml"
    scenario.write_text("model: MI355X\nlibrary_version: 26.4.0\nsteps: []\n")
    config = tmp_path / "fleetd.yaml"
    config.write_text(f"state_dir: {tmp_path}\nhttp: {{port: 0}}\n{ALERTING}")
    proc = fleetd("run", "--config", str(config), "--simulate", str(scenario))
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert "is unsafe" in lines[0] and "backend.allow_unsafe_library" in lines[0]


def test_bad_config_lists_every_problem_and_exits_1(tmp_path: Path) -> None:
    config = tmp_path / "fleetd.yaml"
    config.write_text(f"poll: {{interval: 0s}}\nhttp: {{port: http}}\nbogus: true\n{ALERTING}")
    proc = fleetd("run", "--config", str(config))
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1
    assert err.count(str(config)) == 3 and "Traceback" not in err


def test_a_bad_rule_file_lists_its_problems_and_exits_1(tmp_path: Path) -> None:
    rules = tmp_path / "rules.d"
    rules.mkdir()
    (rules / "bad.yaml").write_text("rules:\n  - name: X\n    expr: up > 1\n")
    config = tmp_path / "fleetd.yaml"
    config.write_text(
        f"state_dir: {tmp_path}\nhttp: {{port: 0}}\nrules: {{local_dir: {rules}}}\n{ALERTING}"
    )
    proc = fleetd("run", "--config", str(config), "--simulate", "healthy")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1
    assert f"{rules / 'bad.yaml'}:2:5: rules[0].severity: required key is missing" in err
    assert "Traceback" not in err


def test_a_port_in_use_is_one_clear_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = tmp_path / "fleetd.yaml"
        config.write_text(f"state_dir: {tmp_path}\nhttp: {{port: {port}}}\n{ALERTING}")
        proc = fleetd("run", "--config", str(config), "--simulate", "healthy")
        _, err = proc.communicate(timeout=60)
    assert proc.returncode != 0
    assert f"fleetd: cannot serve HTTP on 127.0.0.1:{port}" in err
    assert "Traceback" not in err


class Notifications:
    """The datagram socket systemd would listen on."""

    def __init__(self, path: Path) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.seen: list[str] = []

    def wait_for(self, field: str, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while not any(line == field or line.startswith(field) for line in self.seen):
            left = deadline - time.monotonic()
            assert left > 0, f"no {field} from fleetd; got {self.seen}"
            self.sock.settimeout(left)
            self.seen += self.sock.recv(4096).decode().splitlines()


@pytest.fixture
def running(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], Notifications, Path, int]]:
    port = free_port()
    config = tmp_path / "fleetd.yaml"
    config.write_text(
        f"state_dir: {tmp_path}\nhttp: {{port: {port}}}\npoll: {{interval: 1s}}\n{ALERTING}"
    )
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
        yield proc, notify, config, port
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=30)
        notify.sock.close()


def metrics(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        return str(response.read().decode())


def test_ready_reload_and_graceful_stop(
    running: tuple[subprocess.Popen[str], Notifications, Path, int],
) -> None:
    proc, notify, config, port = running
    notify.wait_for("READY=1")  # sent after the first successful poll
    assert any(line.startswith("STATUS=8/8 GPUs") for line in notify.seen), notify.seen
    first = metrics(port)
    assert 'fleetd_gpu_up{gpu="0"' in first
    # the cost model: every amdsmi call counted by function, with its time
    assert 'fleetd_amdsmi_calls_total{function="amdsmi_get_gpu_metrics_info"}' in first
    assert 'fleetd_amdsmi_call_seconds_total{function="amdsmi_get_gpu_metrics_info"}' in first

    good = config.read_text()
    config.write_text(good + "bogus: 1\n")
    notify.seen.clear()
    proc.send_signal(signal.SIGHUP)
    notify.wait_for("RELOADING=1")
    notify.wait_for("READY=1")
    text = metrics(port)
    assert 'fleetd_config_reloads_total{result="failure"} 1.0' in text  # rejected, still up
    assert "fleetd_config_last_reload_success 0.0" in text

    config.write_text(good)
    notify.seen.clear()
    proc.send_signal(signal.SIGHUP)
    notify.wait_for("RELOADING=1")
    notify.wait_for("READY=1")
    assert 'fleetd_config_reloads_total{result="success"} 1.0' in metrics(port)

    notify.seen.clear()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    notify.wait_for("STOPPING=1")
    assert proc.stderr is not None
    log = proc.stderr.read()
    # --simulate holds across reloads: the file's backend is not "a change needing a restart"
    assert "config_reloaded" in log and "config_reload_needs_restart" not in log


def test_a_second_daemon_on_the_same_state_dir_is_refused_in_one_line(
    running: tuple[subprocess.Popen[str], Notifications, Path, int],
) -> None:
    """A hand-started ``fleetd run --simulate`` beside the unit would write the same database
    and remediate the same hive: it refuses at once, naming the daemon that holds the directory;
    once that one has stopped, a new one starts."""
    proc, notify, config, port = running
    notify.wait_for("READY=1")
    second = fleetd("run", "--config", str(config), "--simulate", "healthy")
    _, err = second.communicate(timeout=60)
    assert second.returncode == 2
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines == [
        f"fleetd: state directory {config.parent} is in use by another fleetd (pid {proc.pid}); "
        "stop that one, or give this one a state_dir of its own"
    ]
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    again = Notifications(config.parent / "notify-again.sock")
    third = fleetd(
        "run",
        "--config",
        str(config),
        "--simulate",
        "healthy",
        env={"NOTIFY_SOCKET": str(config.parent / "notify-again.sock")},
    )
    try:
        again.wait_for("READY=1")
        assert 'fleetd_gpu_up{gpu="0"' in metrics(port)
    finally:
        third.terminate()
        third.communicate(timeout=30)
        again.sock.close()


def test_a_simulated_node_without_a_config_keeps_its_state_apart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``fleetd run --simulate`` (or doctor) with no fleetd.yaml: the built-in defaults, but
    never the real node's /var/lib/fleetd; the same directory across reloads."""
    from fleetd.cli import run_cmd
    from fleetd.config import FleetdConfig

    monkeypatch.setattr(run_cmd, "DEFAULT_CONFIG_PATH", tmp_path / "absent.yaml")
    config, used = run_cmd.resolve_config(None, "healthy")
    again, _ = run_cmd.resolve_config(None, "healthy")
    assert used is None and config.backend.kind == "simulator"
    assert config.state_dir != FleetdConfig().state_dir
    assert config.state_dir.name.startswith("fleetd-simulated-") and config.state_dir.is_dir()
    assert again.state_dir == config.state_dir
