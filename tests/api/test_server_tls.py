"""The TLS listener: a client that connects and never speaks must not block the others."""

from __future__ import annotations

import shutil
import socket
import subprocess
import threading
from pathlib import Path

import pytest
import requests

from fleetd.api.server import HttpServer, Request, Response, Router


def self_signed(tmp_path: Path) -> tuple[Path, Path]:
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("openssl is not installed")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-nodes", "-days", "1", "-subj", "/CN=fleetd-test", "-keyout", str(key),
            "-out", str(cert), "-addext", "subjectAltName=IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return cert, key


def test_a_silent_client_neither_blocks_other_clients_nor_stop(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path)
    router = Router()

    def ping(_request: Request) -> Response:
        return Response(200, b"pong")

    router.add("GET", "/ping", ping)
    server = HttpServer(router, "127.0.0.1", 0, tls_cert=cert, tls_key=key)
    server.start()
    silent = socket.create_connection(("127.0.0.1", server.port))  # no ClientHello, ever
    try:
        answer = requests.get(f"https://127.0.0.1:{server.port}/ping", verify=str(cert), timeout=5)
        assert answer.status_code == 200 and answer.text == "pong"
    finally:
        stopping = threading.Thread(target=server.stop, daemon=True)
        stopping.start()
        stopping.join(10)
        silent.close()
    assert not stopping.is_alive(), "stop() waited for the silent client"
