"""The HTTP server under a fleet's scrapers: 300 clients connecting at the same instant.

Runs ``fleetd run --simulate healthy`` (1 s polls) twice - plain HTTP, then HTTPS with a
self-signed P-256 certificate (skipped without openssl) - and fires ROUNDS bursts of CLIENTS
concurrent connections, half asking for /metrics and half for /api/v1/status, each on its own
connection (as scrapers do: fleetd answers one request per connection). Latency is from the
burst's start to the last byte of the answer; it includes the clients' own TLS work, on the
same machine. Prints one JSON line.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

CLIENTS = int(os.environ.get("FLEETD_BENCH_CLIENTS", "300"))
ROUNDS = int(os.environ.get("FLEETD_BENCH_ROUNDS", "5"))
PATHS = ("/metrics", "/api/v1/status")


def fetch(port: int, context: ssl.SSLContext | None, path: str) -> int:
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    with context.wrap_socket(sock) if context is not None else sock as conn:
        conn.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
        first = b""
        while chunk := conn.recv(65536):
            first = first or chunk
    return int(first.split(b" ", 2)[1])


def burst(port: int, context: ssl.SSLContext | None) -> tuple[list[float], int]:
    barrier = threading.Barrier(CLIENTS + 1)
    latencies: list[float] = []
    failures = 0
    lock = threading.Lock()

    def client(n: int) -> None:
        nonlocal failures
        barrier.wait()
        started = time.monotonic()
        try:
            ok = fetch(port, context, PATHS[n % len(PATHS)]) == 200
        except (OSError, ValueError, IndexError):
            ok = False
        with lock:
            latencies.append(time.monotonic() - started)
            failures += not ok

    threads = [threading.Thread(target=client, args=(n,)) for n in range(CLIENTS)]
    for thread in threads:
        thread.start()
    barrier.wait()
    for thread in threads:
        thread.join()
    return sorted(latencies), failures


def run(tmp: Path, tls: bool) -> dict[str, object]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    http = f"port: {port}"
    context = None
    if tls:
        cert, key = tmp / "cert.pem", tmp / "key.pem"
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
             "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1", "-subj", "/CN=bench",
             "-keyout", str(key), "-out", str(cert), "-addext", "subjectAltName=IP:127.0.0.1"],
            check=True, capture_output=True,
        )  # fmt: skip
        http += f", tls_cert: {cert}, tls_key: {key}"
        context = ssl.create_default_context(cafile=str(cert))
        context.check_hostname = False
    state = tmp / ("tls" if tls else "plain")
    config = tmp / "fleetd.yaml"
    config.write_text(
        f"state_dir: {state}\nhttp: {{{http}}}\npoll: {{interval: 1s}}\n"
        "alerting: {receivers: [{name: console, console: [{}]}]}\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "fleetd", "run", "--config", str(config), "--simulate", "healthy"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if fetch(port, context, "/metrics") == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("fleetd did not come up")
            time.sleep(0.5)
        time.sleep(5)
        rounds = []
        for _ in range(ROUNDS):
            latencies, failures = burst(port, context)
            rounds.append(
                {
                    "p50_ms": round(1000 * statistics.median(latencies)),
                    "p99_ms": round(1000 * latencies[int(0.99 * (len(latencies) - 1))]),
                    "max_ms": round(1000 * latencies[-1]),
                    "failures": failures,
                }
            )
            time.sleep(2)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    return {
        "scheme": "https" if tls else "http",
        "median_of_rounds": {
            k: statistics.median(int(r[k]) for r in rounds) for k in ("p50_ms", "p99_ms", "max_ms")
        },
        "worst_max_ms": max(int(r["max_ms"]) for r in rounds),
        "failures": sum(int(r["failures"]) for r in rounds),
        "rounds": rounds,
    }


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        results = [run(Path(tmp), tls=False)]
        if shutil.which("openssl"):
            results.append(run(Path(tmp), tls=True))
    print(json.dumps({"bench": "http", "clients": CLIENTS, "paths": PATHS, "runs": results}))


if __name__ == "__main__":
    main()
