"""The notify protocol against a real datagram socket, as systemd would receive it."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from fleetd.sdnotify import SystemdNotify, watchdog_interval


@pytest.fixture
def listener(tmp_path: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(tmp_path / "notify.sock"))
    sock.settimeout(2)
    return sock


def test_ready_sends_ready_and_status(listener: socket.socket, tmp_path: Path) -> None:
    notifier = SystemdNotify(str(tmp_path / "notify.sock"))
    assert notifier.ready("8/8 GPUs healthy")
    assert listener.recv(4096).decode().splitlines() == ["READY=1", "STATUS=8/8 GPUs healthy"]


def test_reloading_carries_monotonic_usec(listener: socket.socket, tmp_path: Path) -> None:
    SystemdNotify(str(tmp_path / "notify.sock")).reloading()
    lines = listener.recv(4096).decode().splitlines()
    assert lines[0] == "RELOADING=1"
    assert lines[1].startswith("MONOTONIC_USEC=") and int(lines[1].split("=")[1]) > 0


def test_abstract_namespace_address() -> None:
    name = f"fleetd-test-{os.getpid()}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind("\0" + name)
    sock.settimeout(2)
    assert SystemdNotify("@" + name).watchdog()
    assert sock.recv(64) == b"WATCHDOG=1"
    sock.close()


def test_without_systemd_it_is_a_no_op(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    notifier = SystemdNotify()
    assert not notifier.enabled
    assert notifier.ready("x") is False


def test_dead_socket_does_not_raise(tmp_path: Path) -> None:
    assert SystemdNotify(str(tmp_path / "gone.sock")).stopping() is False


def test_watchdog_interval_is_half_of_watchdog_usec(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WATCHDOG_USEC", "30000000")
    monkeypatch.setenv("WATCHDOG_PID", str(os.getpid()))
    assert watchdog_interval() == 15.0
    monkeypatch.setenv("WATCHDOG_PID", "1")
    assert watchdog_interval() is None
