"""The GPU backend and poller of a simulated node, served over loopback HTTP to a daemon that
runs in another process — so that process can be SIGKILLed while the hardware lives on.

``BackendServer`` (in the test process) wraps the real AmdSmiBackend and Poller;
``RemoteBackend`` and ``RemotePoller`` (in the daemon process) satisfy the remediation
protocols by calling it.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, urlparse

import requests

from fleetd.collect.amdsmi_backend import AmdSmiBackend
from fleetd.collect.poller import Poller
from fleetd.errors import BackendError
from fleetd.model import GpuIdentity, Reading, Snapshot
from fleetd.sim.loopback import LoopbackHTTPServer


class BackendServer:
    def __init__(self, backend: AmdSmiBackend, poller: Poller) -> None:
        self.backend = backend
        self.poller = poller
        self._lock = threading.Lock()
        self._server = LoopbackHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True).start()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def call(self, name: str, args: dict[str, list[str]]) -> Any:
        index = int(args["i"][0]) if "i" in args else None
        with self._lock:
            if name == "gpus":
                return [dataclasses.asdict(g) for g in self.backend.gpus()]
            if name == "rediscover":
                return [dataclasses.asdict(g) for g in self.backend.rediscover()]
            if name == "reset_unit":
                return self.backend.reset_unit(index)  # type: ignore[arg-type]
            if name == "reset_gpu":
                self.backend.reset_gpu(index)  # type: ignore[arg-type]
                return None
            if name == "processes":
                return [{"pid": p.pid, "name": p.name} for p in self.backend.processes(index)]  # type: ignore[arg-type]
            if name == "compute_processes":
                return self.backend.compute_processes()
            if name == "poll":
                snap = self.poller.poll(float(args["now"][0]))
                return [[r.metric, r.labels, r.value, r.ts, r.reason] for r in snap.readings]
        raise KeyError(name)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                url = urlparse(self.path)
                try:
                    body = {"ok": server.call(url.path.strip("/"), parse_qs(url.query))}
                except BackendError as exc:
                    body = {"error": str(exc)}
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler


class _Remote:
    def __init__(self, url: str) -> None:
        self._url = url
        self._session = requests.Session()

    def _call(self, name: str, **params: object) -> Any:
        reply = self._session.post(f"{self._url}/{name}", params=params, timeout=30).json()
        if "error" in reply:
            raise BackendError(reply["error"])
        return reply["ok"]


@dataclasses.dataclass(frozen=True)
class RemoteProcess:
    pid: int
    name: str | None


class RemoteBackend(_Remote):
    def gpus(self) -> list[GpuIdentity]:
        return [GpuIdentity(**g) for g in self._call("gpus")]

    def rediscover(self) -> list[GpuIdentity]:
        return [GpuIdentity(**g) for g in self._call("rediscover")]

    def reset_unit(self, index: int) -> list[int]:
        return [int(i) for i in self._call("reset_unit", i=index)]

    def reset_gpu(self, index: int) -> None:
        self._call("reset_gpu", i=index)

    def processes(self, index: int) -> list[RemoteProcess]:
        return [RemoteProcess(p["pid"], p["name"]) for p in self._call("processes", i=index)]

    def compute_processes(self) -> list[int]:
        return [int(p) for p in self._call("compute_processes")]


class RemotePoller(_Remote):
    def poll(self, now: float) -> Snapshot:
        rows = self._call("poll", now=repr(now))
        readings = tuple(
            Reading(metric, tuple((str(k), str(v)) for k, v in labels), value, ts, reason)
            for metric, labels, value, ts, reason in rows
        )
        return Snapshot(node="remote", ts=now, gpus=(), readings=readings)
