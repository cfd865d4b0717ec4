"""fleetctl's HTTP client against raw loopback servers: chunked answers, hangs, bad answers."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from fleetd.cli.fleetctl_http import (
    MAX_RESPONSE_BYTES,
    ClientOptions,
    Target,
    fan_out,
    request,
)

Answer = Callable[[socket.socket], None]


@pytest.fixture
def serve() -> Iterator[Callable[[Answer], Target]]:
    """Start a raw TCP server that runs ``answer`` on every connection it accepts."""
    listeners: list[socket.socket] = []

    def start(answer: Answer) -> Target:
        listener = socket.create_server(("127.0.0.1", 0), backlog=128)
        listeners.append(listener)

        def loop() -> None:
            while True:
                try:
                    conn, _ = listener.accept()
                except OSError:
                    return
                threading.Thread(target=_run, args=(answer, conn), daemon=True).start()

        threading.Thread(target=loop, daemon=True).start()
        return Target("n1", f"http://127.0.0.1:{listener.getsockname()[1]}", name_known=False)

    yield start
    for listener in listeners:
        listener.close()


def _run(answer: Answer, conn: socket.socket) -> None:
    with conn:
        conn.settimeout(5)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(4096)
            if not chunk:
                return
            data += chunk
        with contextlib.suppress(OSError):
            answer(conn)


def chunked(conn: socket.socket) -> None:
    conn.sendall(
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n"
        b'\r\n5\r\n{"a":\r\n3\r\n 1}\r\n0\r\n\r\n'
    )


def hang(conn: socket.socket) -> None:
    time.sleep(3)


OPTIONS = ClientOptions(timeout=0.5)


def test_a_chunked_answer_is_decoded(serve: Callable[[Answer], Target]) -> None:
    reply = request(serve(chunked), "GET", "/api/v1/status", options=OPTIONS)
    assert (reply.status, reply.data, reply.error) == (200, {"a": 1}, None)


def test_an_agent_that_never_answers_costs_its_timeout(
    serve: Callable[[Answer], Target],
) -> None:
    started = time.monotonic()
    reply = request(serve(hang), "GET", "/x", options=OPTIONS)
    assert reply.status is None and reply.error == "timed out after 0.5s"
    assert time.monotonic() - started < 2.0


def test_bad_answers_are_reasons_not_exceptions(serve: Callable[[Answer], Target]) -> None:
    garbage = serve(lambda c: c.sendall(b"SSH-2.0-OpenSSH_9.2\r\n\r\n"))
    cut = serve(lambda c: c.sendall(b'HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{"a"'))
    huge = serve(
        lambda c: c.sendall(
            f"HTTP/1.1 200 OK\r\nContent-Length: {MAX_RESPONSE_BYTES + 1}\r\n\r\n".encode()
        )
    )
    not_json = serve(lambda c: c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi"))
    assert "not an HTTP answer" in str(request(garbage, "GET", "/", options=OPTIONS).error)
    assert request(cut, "GET", "/", options=OPTIONS).error == (
        "connection closed before the answer was complete"
    )
    assert "answer too large" in str(request(huge, "GET", "/", options=OPTIONS).error)
    assert request(not_json, "GET", "/", options=OPTIONS).error == (
        "HTTP 200 with a body that is not JSON"
    )


def test_refused() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    reply = request(Target("n", f"http://127.0.0.1:{port}"), "GET", "/", options=OPTIONS)
    assert reply.error == "connection refused"


def test_one_hanging_agent_never_stalls_the_fan_out(serve: Callable[[Answer], Target]) -> None:
    good = [serve(chunked) for _ in range(20)]
    targets = [*good[:10], serve(hang), *good[10:]]
    started = time.monotonic()
    replies = fan_out(targets, "/api/v1/status", options=OPTIONS, per_target_params=False)
    assert time.monotonic() - started < 2.0
    assert [r.ok for r in replies] == [True] * 10 + [False] + [True] * 10
    assert replies[10].error == "timed out after 0.5s"
