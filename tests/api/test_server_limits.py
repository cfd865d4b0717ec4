"""The HTTP server's limits, on a real server on 127.0.0.1 and raw sockets: every refusal is
a JSON error with the right status (never a 500, never a hang), a slow or silent client
holds no handler thread, and a full queue is a quick 503 with Retry-After."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from fleetd.api import server as srv
from fleetd.api.server import HttpError, HttpServer, Request, Response, Router


def echo_router(gate: threading.Event | None = None) -> Router:
    router = Router()

    def ping(_request: Request) -> Response:
        if gate is not None:
            gate.wait(10)
        return Response.text("pong")

    def echo(request: Request) -> Response:
        return Response.json({"got": request.json()})

    def boom(_request: Request) -> Response:
        raise HttpError(418, "teapot")

    router.add("GET", "/ping", ping)
    router.add("POST", "/echo", echo)
    router.add("GET", "/teapot", boom)
    return router


@pytest.fixture
def server() -> Iterator[HttpServer]:
    running = HttpServer(echo_router(), "127.0.0.1", 0)
    running.start()
    try:
        yield running
    finally:
        running.stop()


def exchange(port: int, data: bytes, timeout: float = 5.0) -> tuple[int, dict[str, str], bytes]:
    """Send ``data`` on a fresh connection; the answer's status, headers and body."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(data)
        return read_answer(sock)


def read_answer(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    chunks = []
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    raw = b"".join(chunks)
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    assert lines[0].startswith("HTTP/1."), f"not an HTTP answer: {raw[:200]!r}"
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(lines[0].split()[1]), headers, body


def error_of(status: int, headers: dict[str, str], body: bytes, want: int) -> Any:
    assert status == want, (status, body)
    assert headers["content-type"] == "application/json"
    assert int(headers["content-length"]) == len(body)
    data = json.loads(body)
    assert isinstance(data["error"], str) and data["error"]
    return data["error"]


def test_a_plain_get_works_and_closes(server: HttpServer) -> None:
    status, headers, body = exchange(server.port, b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n")
    assert (status, body) == (200, b"pong")
    assert headers["connection"] == "close"
    status, headers, body = exchange(server.port, b"HEAD /ping HTTP/1.0\r\n\r\n")
    assert body == b"" and int(headers["content-length"]) > 0  # the router's 405, headers only
    status, headers, body = exchange(server.port, b"GET /teapot HTTP/1.1\r\n\r\n")
    assert error_of(status, headers, body, 418) == "teapot"


def test_a_request_line_over_8_kib_is_414(server: HttpServer) -> None:
    line = b"GET /" + b"a" * (9 * 1024) + b" HTTP/1.1\r\n\r\n"
    assert "too long" in error_of(*exchange(server.port, line), 414)
    # without any line end at all: refused as soon as 8 KiB have arrived
    assert "too long" in error_of(*exchange(server.port, b"G" * (8 * 1024 + 10)), 414)


def test_header_section_over_64_kib_or_too_many_fields_is_431(server: HttpServer) -> None:
    big = b"GET /ping HTTP/1.1\r\n" + b"".join(
        b"X-Pad-%d: %s\r\n" % (n, b"v" * 1000) for n in range(70)
    )
    assert "too large" in error_of(*exchange(server.port, big + b"\r\n"), 431)
    many = b"GET /ping HTTP/1.1\r\n" + b"".join(b"X-%d: 1\r\n" % n for n in range(101))
    assert "too many" in error_of(*exchange(server.port, many + b"\r\n"), 431)
    ok = b"GET /ping HTTP/1.1\r\n" + b"".join(b"X-%d: 1\r\n" % n for n in range(100))
    assert exchange(server.port, ok + b"\r\n")[0] == 200


def test_a_body_over_1_mib_is_413_before_it_is_read(server: HttpServer) -> None:
    head = b"POST /echo HTTP/1.1\r\nContent-Length: %d\r\n\r\n" % (srv.MAX_BODY_BYTES + 1)
    assert "too large" in error_of(*exchange(server.port, head), 413)


def test_the_413_reaches_a_client_that_keeps_sending(server: HttpServer) -> None:
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        sock.sendall(b"POST /echo HTTP/1.1\r\nContent-Length: 2000000\r\n\r\n" + b"x" * 200_000)
        assert error_of(*read_answer(sock), 413)


def test_post_without_content_length_is_411(server: HttpServer) -> None:
    assert "Content-Length" in error_of(*exchange(server.port, b"POST /echo HTTP/1.1\r\n\r\n"), 411)
    chunked = b"POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n"
    assert error_of(*exchange(server.port, chunked), 411)


@pytest.mark.parametrize(
    "data",
    [
        b"HELLO\r\n\r\n",
        b"GET /ping\r\n\r\n",  # HTTP/0.9
        b"GET  /ping HTTP/1.1\r\n\r\n",
        b"G(T /ping HTTP/1.1\r\n\r\n",
        b"GET ping HTTP/1.1\r\n\r\n",
        b"GET /ping HTTX/1.1\r\n\r\n",
        b"GET /p\x00ng HTTP/1.1\r\n\r\n",
        b"GET /ping HTTP/1.1\r\nNoColon\r\n\r\n",
        b"GET /ping HTTP/1.1\r\nBad Name: 1\r\n\r\n",
        b"GET /ping HTTP/1.1\r\nX: 1\r\n folded\r\n\r\n",
        b"POST /echo HTTP/1.1\r\nContent-Length: abc\r\n\r\n",
        b"POST /echo HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
        b"POST /echo HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}",
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n",  # TLS to the plain port
    ],
)
def test_malformed_requests_are_400(server: HttpServer, data: bytes) -> None:
    assert "malformed" in error_of(*exchange(server.port, data), 400) or data.startswith(b"POST")


def test_http_2_is_505(server: HttpServer) -> None:
    assert error_of(*exchange(server.port, b"GET /ping HTTP/2.0\r\n\r\n"), 505)


def test_bad_json_and_deep_json_are_400(server: HttpServer) -> None:
    def post(body: bytes) -> tuple[int, dict[str, str], bytes]:
        head = b"POST /echo HTTP/1.1\r\nContent-Length: %d\r\n\r\n" % len(body)
        return exchange(server.port, head + body)

    assert "not valid JSON" in error_of(*post(b"{nope"), 400)
    for depth in (33, 1000, 100_000):
        assert "nested too deeply" in error_of(*post(b"[" * depth + b"]" * depth), 400)
    deep_object = b'{"a":' * 50_000 + b"1" + b"}" * 50_000
    assert "nested too deeply" in error_of(*post(deep_object), 400)
    status, _, body = post(b"[" * 32 + b"]" * 32)
    assert status == 200 and json.loads(body)["got"] is not None
    status, _, body = post(b'{"s": "' + b"[" * 5000 + b'"}')  # brackets in a string
    assert status == 200


def test_expect_100_continue_gets_the_interim_answer(server: HttpServer) -> None:
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        sock.sendall(b"POST /echo HTTP/1.1\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n")
        assert sock.recv(100).startswith(b"HTTP/1.1 100 Continue\r\n\r\n")
        sock.sendall(b"{}")
        status, _, body = read_answer(sock)
        assert (status, json.loads(body)) == (200, {"got": {}})


def test_a_slow_client_gets_408_at_its_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(srv, "HEAD_TIMEOUT_S", 1.0)
    monkeypatch.setattr(srv, "BODY_TIMEOUT_S", 1.5)
    server = HttpServer(echo_router(), "127.0.0.1", 0)
    server.start()
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
            started = time.monotonic()
            sock.sendall(b"GET /ping HTTP/1.1\r\n")  # and never the blank line
            assert "in time" in error_of(*read_answer(sock), 408)
            assert 0.9 < time.monotonic() - started < 3
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
            sock.sendall(b"POST /echo HTTP/1.1\r\nContent-Length: 10\r\n\r\n{")  # body stalls
            assert error_of(*read_answer(sock), 408)
    finally:
        server.stop()


def test_slowloris_holds_no_handler_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """50 connections dribbling a header byte a second, two handler threads: a normal
    request is still answered at once."""
    server = HttpServer(echo_router(), "127.0.0.1", 0, workers=2)
    server.start()
    stop = threading.Event()
    slow = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(50)]

    def dribble() -> None:
        payload = b"GET /ping HTTP/1.1\r\nX-Slow: " + b"a" * 100
        for i in range(len(payload)):
            for sock in slow:
                sock.send(payload[i : i + 1])
            if stop.wait(1.0):
                return

    dribbler = threading.Thread(target=dribble, daemon=True)
    dribbler.start()
    try:
        time.sleep(1.5)
        for _ in range(3):
            started = time.monotonic()
            status, _, body = exchange(server.port, b"GET /ping HTTP/1.1\r\n\r\n", timeout=2)
            assert (status, body) == (200, b"pong")
            assert time.monotonic() - started < 1.0
    finally:
        stop.set()
        dribbler.join(5)
        for sock in slow:
            sock.close()
        server.stop()


def test_a_full_queue_is_a_quick_503_with_retry_after() -> None:
    gate = threading.Event()
    server = HttpServer(echo_router(gate), "127.0.0.1", 0, workers=1, queue_size=1)
    server.start()
    held = []
    try:
        for _ in range(2):  # one in the handler thread, one in the queue
            sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
            sock.sendall(b"GET /ping HTTP/1.1\r\n\r\n")
            held.append(sock)
            time.sleep(0.2)
        started = time.monotonic()
        status, headers, body = exchange(server.port, b"GET /ping HTTP/1.1\r\n\r\n")
        assert time.monotonic() - started < 1.0
        assert "busy" in error_of(status, headers, body, 503)
        assert headers["retry-after"] == "1"
        assert server.rejected == 1
        gate.set()
        for sock in held:  # the held requests are still answered
            assert read_answer(sock)[:1] == (200,)
    finally:
        gate.set()
        for sock in held:
            sock.close()
        server.stop()


def test_too_many_open_connections_is_503() -> None:
    server = HttpServer(echo_router(), "127.0.0.1", 0, max_connections=2)
    server.start()
    idle = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(2)]
    try:
        time.sleep(0.3)
        status, headers, body = exchange(server.port, b"GET /ping HTTP/1.1\r\n\r\n")
        assert error_of(status, headers, body, 503) and headers["retry-after"] == "1"
    finally:
        for sock in idle:
            sock.close()
        server.stop()


def test_the_listen_backlog_is_512(server: HttpServer) -> None:
    assert srv.BACKLOG == 512
    # many connections at once, none refused
    socks = [socket.create_connection(("127.0.0.1", server.port), timeout=5) for _ in range(300)]
    for sock in socks:
        sock.sendall(b"GET /ping HTTP/1.1\r\n\r\n")
    try:
        assert all(read_answer(sock)[0] == 200 for sock in socks)
    finally:
        for sock in socks:
            sock.close()


def test_stop_returns_promptly_with_clients_connected() -> None:
    server = HttpServer(echo_router(), "127.0.0.1", 0)
    server.start()
    idle = socket.create_connection(("127.0.0.1", server.port))
    try:
        started = time.monotonic()
        server.stop()
        assert time.monotonic() - started < 2
    finally:
        idle.close()


def test_a_client_that_does_not_read_frees_the_handler_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(srv, "WRITE_TIMEOUT_S", 1.0)
    router = echo_router()
    router.add("GET", "/big", lambda _r: Response(200, b"x" * (32 << 20)))
    server = HttpServer(router, "127.0.0.1", 0, workers=1)
    server.start()
    stuck = socket.socket()
    try:
        stuck.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        stuck.connect(("127.0.0.1", server.port))
        stuck.sendall(b"GET /big HTTP/1.1\r\n\r\n")  # and never reads the 32 MiB
        time.sleep(0.3)
        started = time.monotonic()
        status, _, body = exchange(server.port, b"GET /ping HTTP/1.1\r\n\r\n", timeout=5)
        assert (status, body) == (200, b"pong")
        assert time.monotonic() - started < 2.5
    finally:
        stuck.close()
        server.stop()


def answered_within(deadline_s: float, port: int, request: bytes) -> tuple[int, bytes]:
    """The first answer that is not the budget's 503: the server frees a reservation on its
    own threads, a moment after the client's side of the exchange is over."""
    until = time.monotonic() + deadline_s
    while True:
        status, _, body = exchange(port, request)
        if status != 503 or time.monotonic() > until:
            return status, body
        time.sleep(0.05)


def test_bodies_being_read_share_a_memory_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    """768 connections each sending 1 MiB slowly would hold 768 MiB: bodies share a budget
    (32 MiB), and a request whose body does not fit is a 503 until others finish."""
    monkeypatch.setattr(srv, "BODY_BUDGET_BYTES", 100)
    server = HttpServer(echo_router(), "127.0.0.1", 0)
    server.start()
    head = b"POST /echo HTTP/1.1\r\nContent-Length: 80\r\n\r\n"
    try:
        holder = socket.create_connection(("127.0.0.1", server.port), timeout=5)
        holder.sendall(head + b"[")  # 80 bytes reserved, body still coming
        time.sleep(0.3)
        status, headers, body = exchange(server.port, head + b"[" + b" " * 78 + b"]")
        assert error_of(status, headers, body, 503) and headers["retry-after"] == "1"
        holder.close()  # its reservation is given back once the server reads the close
        status, body = answered_within(5.0, server.port, head + b"[" + b" " * 78 + b"]")
        assert (status, json.loads(body)) == (200, {"got": []})
        # released by the handler thread after the answer, so the next one fits again
        assert answered_within(5.0, server.port, head + b"[" + b" " * 78 + b"]")[0] == 200
    finally:
        server.stop()


def test_out_of_descriptors_pauses_accepting_then_serves() -> None:
    """accept(2) failing with EMFILE leaves the connection in the backlog for a moment
    (no busy loop on the still-readable listening socket), then it is served."""

    class Flaky:
        def __init__(self, sock: socket.socket) -> None:
            self.sock, self.failures = sock, 3

        def fileno(self) -> int:
            return self.sock.fileno()

        def accept(self) -> tuple[socket.socket, Any]:
            if self.failures:
                self.failures -= 1
                raise OSError(24, "Too many open files")
            return self.sock.accept()

        def close(self) -> None:
            self.sock.close()

    server = HttpServer(echo_router(), "127.0.0.1", 0)
    loop = server._listener.loops[0]
    assert loop.listener is not None
    loop.selector.unregister(loop.listener)
    flaky = Flaky(loop.listener)
    loop.listen(flaky)  # type: ignore[arg-type]
    server.start()
    try:
        started = time.monotonic()
        status, _, body = exchange(server.port, b"GET /ping HTTP/1.1\r\n\r\n")
        assert (status, body) == (200, b"pong")
        assert flaky.failures == 0
        assert 0.25 < time.monotonic() - started < 2.0  # three pauses of 0.1 s
    finally:
        server.stop()
