"""A loopback HTTP server on its own thread that records every request with a timestamp.

Each stand-in (PagerDuty, Slack, a webhook, the Alertmanager fallback) subclasses
``RecordingServer`` and answers in ``respond``; the base keeps one ``Record`` per request,
whatever the answer, so a test can count requests, read bodies and check that no 429 was
ever answered.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from fleetd.sim.loopback import LoopbackHTTPServer


@dataclass(frozen=True)
class Reply:
    """What a stand-in answers: status, body, extra headers."""

    status: int
    body: bytes = b""
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)

    @staticmethod
    def json(status: int, data: object, headers: dict[str, str] | None = None) -> Reply:
        return Reply(status, json.dumps(data).encode(), "application/json", headers or {})

    @staticmethod
    def text(status: int, text: str, headers: dict[str, str] | None = None) -> Reply:
        return Reply(status, text.encode(), "text/plain; charset=utf-8", headers or {})


@dataclass(frozen=True)
class Incoming:
    """One request as it arrived."""

    at: float  # time.time() on arrival
    method: str
    path: str
    headers: dict[str, str]  # lower-case names
    raw: bytes

    def json(self) -> Any:
        """The body as JSON; raises ValueError when it is not."""
        return json.loads(self.raw)


@dataclass(frozen=True)
class Record:
    """One request as the stand-in saw it, and what it answered."""

    at: float  # time.time() when the request arrived
    method: str
    path: str
    headers: dict[str, str]
    raw: bytes
    status: int
    problems: tuple[str, ...] = ()

    def json(self) -> Any:
        """The body as JSON (None when it is not JSON)."""
        try:
            return json.loads(self.raw or b"null")
        except ValueError:
            return None


class RecordingServer:
    """A ThreadingHTTPServer on 127.0.0.1 (free port) recording every request."""

    name = "stand-in"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._records: list[Record] = []
        self._server = LoopbackHTTPServer(("127.0.0.1", 0), _handler(self))
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), name=self.name, daemon=True
        )
        self._thread.start()

    # ---- what subclasses provide ----------------------------------------------------------
    def respond(self, request: Incoming, problems: list[str]) -> Reply:
        """The answer to one request; why it was rejected goes into ``problems``."""
        return Reply.text(200, "ok")

    # ---- recording -----------------------------------------------------------------------
    def _handle(self, request: Incoming) -> Reply:
        problems: list[str] = []
        with self._lock:  # one request at a time: rate limits and records stay consistent
            reply = self.respond(request, problems)
            self._records.append(
                Record(
                    request.at,
                    request.method,
                    request.path,
                    request.headers,
                    request.raw,
                    reply.status,
                    tuple(problems),
                )
            )
        return reply

    @property
    def records(self) -> list[Record]:
        with self._lock:
            return list(self._records)

    def where(self, predicate: Callable[[Record], bool]) -> list[Record]:
        return [r for r in self.records if predicate(r)]

    def statuses(self) -> list[int]:
        return [r.status for r in self.records]

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


def _handler(owner: RecordingServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            headers = {k.lower(): v for k, v in self.headers.items()}
            reply = owner._handle(Incoming(time.time(), self.command, self.path, headers, raw))
            self.send_response(reply.status)
            self.send_header("Content-Type", reply.content_type)
            self.send_header("Content-Length", str(len(reply.body)))
            for key, value in reply.headers.items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(reply.body)

        do_GET = do_POST = do_PUT = do_DELETE = _serve

    return Handler
