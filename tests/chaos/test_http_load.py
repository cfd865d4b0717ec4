"""The real ``fleetd run`` on the shipped example config (HTTPS when openssl is there) under
the load of a fleet's scrapers and a slowloris attack.

* 300 clients connect at the same instant and ask for /metrics or /api/v1/status: every one
  is answered 200 (none refused, reset or 5xx) within 2 s; p50/p99/max are printed. On a
  machine too slow for 2 s (a shared CI box, other suites on its cores) the bound is its own
  pace: the burst may not take longer than answering the same clients one after another on
  its cores (one answer's time, measured one client at a time just before). A refusal, a
  stall or a lock convoy still fails it.
* 50 slowloris connections (half dribbling a TLS ClientHello, half a request head, a byte a
  second) do not delay a normal request beyond 1 s.
"""

from __future__ import annotations

import contextlib
import os
import socket
import ssl
import statistics
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.harness import Node

CLIENTS = 300
PATHS = ("/metrics", "/api/v1/status")
LIMIT_S = 2.0
SLOW_CLIENTS = 50


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    running = Node(tmp_path_factory.mktemp("http-load"), "healthy")
    try:
        running.start()
        running.wait_for(lambda: "fleetd_gpu_health{" in running.metrics(), 30, "a first verdict")
        yield running
    finally:
        running.close()


def tls_context(node: Node) -> ssl.SSLContext | None:
    if node.ca_file is None:
        return None
    context = ssl.create_default_context(cafile=node.ca_file)
    context.check_hostname = False  # the certificate names 127.0.0.1; the CA check stays
    return context


def connect(node: Node, context: ssl.SSLContext | None, timeout: float) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", node.port), timeout=timeout)
    return context.wrap_socket(sock) if context is not None else sock


def fetch(node: Node, context: ssl.SSLContext | None, path: str, timeout: float = 10.0) -> int:
    """One GET on a fresh connection, read to the end; the status code."""
    with connect(node, context, timeout) as sock:
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
        chunks = []
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
    raw = b"".join(chunks)
    head, _, body = raw.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    assert len(body) == length, f"{path}: body cut short"
    return status


def test_300_concurrent_clients_are_all_answered_within_2s(node: Node) -> None:
    context = tls_context(node)
    for path in PATHS * 3:  # warm, as a scraped node is: first answers build caches
        assert fetch(node, context, path) == 200
    # this machine's pace: one client at a time, each on a fresh connection (no answer is
    # shared, so this over-counts the burst's work: concurrent answers share a computation)
    paced = time.monotonic()
    for path in PATHS * 5:
        assert fetch(node, context, path) == 200
    one = (time.monotonic() - paced) / (len(PATHS) * 5)
    limit = max(LIMIT_S, CLIENTS * one / (os.cpu_count() or 1))
    barrier = threading.Barrier(CLIENTS + 1)
    latencies: list[float] = []
    failures: list[str] = []
    lock = threading.Lock()

    def client(n: int) -> None:
        path = PATHS[n % len(PATHS)]
        barrier.wait()
        started = time.monotonic()
        try:
            status = fetch(node, context, path)
            outcome = None if status == 200 else f"{path}: {status}"
        except (OSError, ValueError, StopIteration, AssertionError) as exc:
            outcome = f"{path}: {exc!r}"
        took = time.monotonic() - started
        with lock:
            latencies.append(took)
            if outcome is not None:
                failures.append(outcome)

    threads = [threading.Thread(target=client, args=(n,), daemon=True) for n in range(CLIENTS)]
    for thread in threads:
        thread.start()
    barrier.wait()
    for thread in threads:
        thread.join(30)
    assert node.alive(), node.log_tail()
    assert len(latencies) == CLIENTS
    ordered = sorted(latencies)
    p50 = statistics.median(ordered)
    p99 = ordered[int(0.99 * (len(ordered) - 1))]
    print(
        f"\n{CLIENTS} concurrent clients ({'https' if context else 'http'}, "
        f"{'/'.join(PATHS)}): p50 {p50 * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms, "
        f"max {ordered[-1] * 1000:.0f} ms, failures {len(failures)}; one answer alone "
        f"{one * 1000:.1f} ms, bound {limit:.2f} s"
    )
    assert failures == [], failures[:10]
    assert ordered[-1] < limit, f"slowest answer took {ordered[-1]:.2f}s (bound {limit:.2f}s)"


def client_hello() -> bytes:
    """The bytes a TLS client sends first (a ClientHello), without a server."""
    context = ssl.create_default_context()
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname="fleetd")
    with contextlib.suppress(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


def test_slowloris_does_not_delay_a_normal_request(node: Node) -> None:
    context = tls_context(node)
    head = b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 200
    slow: list[tuple[socket.socket, bytes]] = []
    try:
        for n in range(SLOW_CLIENTS):
            if context is not None and n % 2 == 0:  # stuck in the TLS handshake
                raw = socket.create_connection(("127.0.0.1", node.port), timeout=10)
                slow.append((raw, client_hello()))
            else:  # a request head that never ends
                slow.append((connect(node, context, 10), head))
        stop = threading.Event()

        def dribble() -> None:
            for i in range(len(head)):
                for sock, payload in slow:
                    if i < len(payload):
                        with contextlib.suppress(OSError):
                            sock.send(payload[i : i + 1])
                if stop.wait(1.0):
                    return

        dribbler = threading.Thread(target=dribble, daemon=True)
        dribbler.start()
        try:
            time.sleep(2.0)  # every slow connection is open and has sent something
            worst = 0.0
            for path in (*PATHS, *PATHS, "/healthz"):
                started = time.monotonic()
                assert fetch(node, context, path, timeout=5) == 200
                worst = max(worst, time.monotonic() - started)
                time.sleep(0.5)
            print(
                f"\nwith {SLOW_CLIENTS} slowloris connections: "
                f"slowest request {worst * 1000:.0f} ms"
            )
            assert worst < 1.0
        finally:
            stop.set()
            dribbler.join(5)
    finally:
        for sock, _ in slow:
            sock.close()
    assert node.alive()


def test_results_are_documented() -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "performance.md").read_text()
    assert "300 concurrent clients" in text
