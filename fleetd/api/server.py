"""A small threaded HTTP server with a path router.

The standard library's ThreadingHTTPServer is enough for a per-node agent (a Prometheus scrape
every few seconds, an occasional fleetctl): no framework, no extra attack surface. Handlers
are plain functions ``Request -> Response``; a handler that raises gets a 500 with a short
message and the error is logged, never the traceback on the wire.
"""

from __future__ import annotations

import json
import re
import ssl
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from fleetd.logs import get_logger

log = get_logger("http")

MAX_BODY_BYTES = 1 << 20
CONNECTION_TIMEOUT_S = 30.0  # per connection: TLS handshake, request line, headers, body


@dataclass(frozen=True, slots=True)
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]  # lower-case names
    body: bytes
    client: str
    params: dict[str, str] = field(default_factory=dict)

    def json(self) -> Any:
        """The body as JSON; raises HttpError(400) when it is not."""
        try:
            return json.loads(self.body or b"null")
        except (ValueError, UnicodeDecodeError) as exc:
            raise HttpError(400, f"request body is not valid JSON: {exc}") from None

    def arg(self, name: str, default: str | None = None) -> str | None:
        values = self.query.get(name)
        return values[-1] if values else default


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    body: bytes = b""
    content_type: str = "text/plain; charset=utf-8"
    headers: tuple[tuple[str, str], ...] = ()

    @classmethod
    def json(cls, data: Any, status: int = 200) -> Response:
        body = json.dumps(data, separators=(",", ":"), default=str).encode()
        return cls(status, body, "application/json")

    @classmethod
    def text(cls, text: str, status: int = 200) -> Response:
        return cls(status, text.encode())


class HttpError(Exception):
    """Raise from a handler to answer with a status and a JSON error message.

    ``details`` are extra fields of the JSON body (e.g. every problem of a rejected reload);
    ``headers`` extra response headers (e.g. ``WWW-Authenticate`` on a 401).
    """

    def __init__(
        self,
        status: int,
        message: str,
        *,
        details: dict[str, Any] | None = None,
        headers: tuple[tuple[str, str], ...] = (),
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.details = details or {}
        self.headers = headers

    def response(self) -> Response:
        body = Response.json({"error": self.message, **self.details}, self.status)
        return Response(body.status, body.body, body.content_type, self.headers)


Handler = Callable[[Request], Response]


class Router:
    """Maps (method, path pattern) to handlers; ``{name}`` in a pattern captures one segment."""

    def __init__(self) -> None:
        self._routes: list[tuple[str, re.Pattern[str], Handler]] = []

    def add(self, method: str, pattern: str, handler: Handler) -> None:
        regex = re.sub(r"\{(\w+)\}", r"(?P<\1>[^/]+)", pattern)
        self._routes.append((method.upper(), re.compile(f"^{regex}$"), handler))

    def dispatch(self, request: Request) -> Response:
        allowed: list[str] = []
        for method, regex, handler in self._routes:
            match = regex.match(request.path)
            if match is None:
                continue
            if method != request.method:
                allowed.append(method)
                continue
            routed = Request(
                request.method,
                request.path,
                request.query,
                request.headers,
                request.body,
                request.client,
                match.groupdict(),
            )
            try:
                return handler(routed)
            except HttpError as exc:
                return exc.response()
            except Exception as exc:  # a handler bug must not kill the server
                log.error("http_handler_failed", path=request.path, error=repr(exc))
                return Response.json({"error": "internal error"}, 500)
        if allowed:
            body = Response.json({"error": f"method {request.method} not allowed here"}, 405)
            return Response(
                405, body.body, body.content_type, (("Allow", ", ".join(sorted(allowed))),)
            )
        return Response.json({"error": f"no such path: {request.path}"}, 404)


class _Handler(BaseHTTPRequestHandler):
    router: Router
    server_version = "fleetd"
    sys_version = ""
    timeout = CONNECTION_TIMEOUT_S  # a client that stops talking frees its thread

    def setup(self) -> None:
        """The TLS handshake happens here, on this connection's own thread with its
        timeout: done in the accepting thread, one silent client would stall every other
        (Prometheus, fleetctl) and ``stop``."""
        self.request.settimeout(self.timeout)
        if isinstance(self.request, ssl.SSLSocket):
            self.request.do_handshake()
        super().setup()

    def _handle(self) -> None:
        parts = urlsplit(self.path)
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if length < 0:
            self._send(Response.json({"error": "invalid Content-Length"}, 400))
            return
        if length > MAX_BODY_BYTES:
            self._send(Response.json({"error": "request body too large"}, 413))
            return
        body = self.rfile.read(length) if length > 0 else b""
        request = Request(
            method=self.command,
            path=parts.path,
            query=parse_qs(parts.query),
            headers={k.lower(): v for k, v in self.headers.items()},
            body=body,
            client=self.client_address[0],
        )
        self._send(self.router.dispatch(request))

    def _send(self, response: Response) -> None:
        try:
            self.send_response(response.status)
            self.send_header("Content-Type", response.content_type)
            self.send_header("Content-Length", str(len(response.body)))
            for name, value in response.headers:
                self.send_header(name, value)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(response.body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (e.g. fleetctl's timeout): nothing left to tell it

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = _handle

    def __getattr__(self, name: str) -> Any:
        # any other method (OPTIONS, TRACE, …) gets the router's JSON 405/404, not a 501 page
        if name.startswith("do_"):
            return self._handle
        raise AttributeError(name)

    def log_message(self, format: str, *args: Any) -> None:
        return  # access logs would flood journald at one scrape per second


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        # a client that hangs up or speaks garbage is not worth a traceback on stderr
        log.debug("http_connection_error", client=str(client_address[0]))


class HttpServer:
    """Serves a Router on a background thread; port 0 picks a free port."""

    def __init__(
        self,
        router: Router,
        bind: str = "127.0.0.1",
        port: int = 0,
        *,
        tls_cert: Path | None = None,
        tls_key: Path | None = None,
    ) -> None:
        handler = type("BoundHandler", (_Handler,), {"router": router})
        self._server = _Server((bind, port), handler)
        if tls_cert is not None and tls_key is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.minimum_version = ssl.TLSVersion.TLSv1_2
            context.load_cert_chain(tls_cert, tls_key)
            self._server.socket = context.wrap_socket(
                self._server.socket, server_side=True, do_handshake_on_connect=False
            )
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def address(self) -> str:
        host = self._server.server_address[0]
        return f"{host!s}:{self.port}"

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.1},  # how long stop() may wait for the loop to notice
            name="fleetd-http",
            daemon=True,
        )
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
