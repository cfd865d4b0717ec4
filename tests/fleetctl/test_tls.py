"""An agent with a certificate and key serves its API over TLS; fleetctl verifies it."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.api.agent import Agent, start_agent
from tests.fleetctl.conftest import run_fleetctl, write_inventory


@pytest.fixture
def tls_agent(tmp_path: Path) -> Iterator[Agent]:
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("openssl is not installed")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-nodes", "-days", "1", "-subj", "/CN=fleetd-test", "-keyout", str(key),
            "-out", str(cert), "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    agent = start_agent(tmp_path / "agent", name="gpu-node-tls", tls=(cert, key))
    agent.tick()
    try:
        yield agent
    finally:
        agent.stop()


def test_fleetctl_over_tls_with_the_ca_and_refused_without(
    tls_agent: Agent, tmp_path: Path
) -> None:
    cert = tmp_path / "cert.pem"
    answer = requests.get(tls_agent.url + "/api/v1/status", verify=str(cert), timeout=10)
    assert answer.status_code == 200
    inventory = write_inventory(
        tmp_path / "tls.yaml", [(tls_agent.name, f"https://{tls_agent.address}")]
    )
    verified, _ = run_fleetctl("status", "--inventory", str(inventory), "--ca-file", str(cert))
    assert verified.exit_code == 0, verified.output
    assert "gpu-node-tls  healthy" in verified.output
    unverified, _ = run_fleetctl("status", "--inventory", str(inventory))
    assert unverified.exit_code == 2
    assert "TLS: CERTIFICATE_VERIFY_FAILED" in unverified.output
    plain, _ = run_fleetctl(
        "status",
        "--inventory",
        str(write_inventory(tmp_path / "p.yaml", [(tls_agent.name, tls_agent.address)])),
    )
    assert plain.exit_code == 2  # plain HTTP to a TLS port is not an answer


def test_a_silent_client_does_not_stall_other_tls_clients(tls_agent: Agent, tmp_path: Path) -> None:
    """The handshake runs on each connection's thread, not on the accepting one."""
    import socket

    idle = socket.create_connection(("127.0.0.1", tls_agent.server.port))  # says nothing
    try:
        answer = requests.get(
            tls_agent.url + "/healthz", verify=str(tmp_path / "cert.pem"), timeout=5
        )
        assert answer.status_code == 200
    finally:
        idle.close()
