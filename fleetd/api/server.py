"""A small HTTP server with a path router, built to stay up on a hostile network.

A per-node agent answers a Prometheus scrape every few seconds and an occasional fleetctl,
but every scraper of a fleet may hit it at once and anything that can reach the port may
misbehave. So, without a framework:

* ``IO_THREADS`` I/O threads (one accepts, listen backlog ``BACKLOG``, and deals the
  connections round-robin) do the TLS handshake and read the request head and body
  *non-blocking*, with a deadline per connection: a client that never speaks, or dribbles a
  byte a second (slowloris), costs a socket and a few bytes of buffer, never a thread, and
  is answered 408 and closed at its deadline;
* a fixed pool of ``WORKERS`` threads takes complete requests from a bounded queue (the
  last thread to go idle first: ``fleetd.api.jobqueue``), runs the handler and writes the
  answer (with a write timeout); when the queue is full the I/O thread answers 503 with
  ``Retry-After`` at once instead of queueing without bound;
* request limits are enforced before a handler sees anything: request line over 8 KiB 414,
  header section over 64 KiB or more than 100 fields 431, body over 1 MiB 413, a body-carrying
  method without Content-Length 411, anything malformed 400 — every one a JSON error body
  like the API's own, never a 500 and never a traceback on the wire.

Handlers are plain functions ``Request -> Response``; a handler that raises gets a 500 with a
short message and the error is logged. One request per connection (``Connection: close``).
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import re
import selectors
import socket
import ssl
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from email.utils import formatdate
from http import HTTPStatus
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from fleetd.api.jobqueue import WarmQueue
from fleetd.logs import get_logger

log = get_logger("http")

BACKLOG = 512  # listen(2) backlog: every scraper of a fleet connecting at the same moment
WORKERS = 16  # handler threads
IO_THREADS = 2  # accept, TLS handshake, reading requests (non-blocking, a selector each)
QUEUE_SIZE = 512  # complete requests waiting for a handler thread; beyond it 503
MAX_CONNECTIONS = 768  # connections being read (handshake, head, body); beyond it 503
BODY_BUDGET_BYTES = 32 << 20  # request bodies being read or waiting for a handler; beyond 503
MAX_REQUEST_LINE = 8 * 1024
MAX_HEADER_BYTES = 64 * 1024
MAX_HEADERS = 100
MAX_BODY_BYTES = 1 << 20
IDLE_WAIT_S = 5.0  # the longest an I/O loop sleeps with no deadline due (_Loop._timeout)
MAX_JSON_DEPTH = 32  # nesting of arrays and objects in a request body
HEAD_TIMEOUT_S = 10.0  # from accept: TLS handshake, request line and headers complete
BODY_TIMEOUT_S = 30.0  # from accept: the whole body (at most MAX_BODY_BYTES) received
WRITE_TIMEOUT_S = 10.0  # a handler thread writing an answer to a client that does not read
LINGER_S = 2.0  # after an error answer: how long unread input is drained before closing
RETRY_AFTER_S = 1
ACCEPT_PAUSE_S = 0.1  # accept(2) failed (EMFILE): how long to leave connections in the backlog
SWITCH_INTERVAL_S = 0.001  # sys.setswitchinterval while serving (see HttpServer.start)
CONNECTION_TIMEOUT_S = BODY_TIMEOUT_S  # the longest a connection is read (kept for callers)
BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


TOO_DEEP = (
    f"request body is nested too deeply: at most {MAX_JSON_DEPTH} levels of arrays and objects"
)


def nested_deeper_than(value: Any, limit: int) -> bool:
    """Whether arrays/objects in decoded JSON nest more than ``limit`` levels (``{}`` is 1);
    iterative, so a deep value cannot exhaust the stack."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False


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
        """The body as JSON; raises HttpError(400) when it is not, or when arrays and objects
        nest more than MAX_JSON_DEPTH deep (the decoder's own recursion stops at ~1000 levels
        with a RecursionError: that is a 400 too, not a 500)."""
        try:
            data = json.loads(self.body or b"null")
        except RecursionError:
            raise HttpError(400, TOO_DEEP) from None
        except (ValueError, UnicodeDecodeError) as exc:
            raise HttpError(400, f"request body is not valid JSON: {exc}") from None
        if nested_deeper_than(data, MAX_JSON_DEPTH):
            raise HttpError(400, TOO_DEEP)
        return data

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


# ------------------------------------------------------------------------------ the wire
_TOKEN = re.compile(rb"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
_VERSION = re.compile(rb"^HTTP/(\d)\.(\d)$")
_END_OF_HEAD = re.compile(rb"\r?\n\r?\n")
_LINE = re.compile(rb"\r?\n")
_TARGET = re.compile(rb"^[\x21-\x7e]+$")


def reason(status: int) -> str:
    """The reason phrase of ``status`` (empty for a code HTTP does not name)."""
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return ""


def render(response: Response, *, head_only: bool = False) -> bytes:
    """The bytes of ``response`` on the wire (HTTP/1.1, ``Connection: close``)."""
    lines = [
        f"HTTP/1.1 {response.status} {reason(response.status)}",
        "Server: fleetd",
        f"Date: {formatdate(usegmt=True)}",
        f"Content-Type: {response.content_type}",
        f"Content-Length: {len(response.body)}",
        "Connection: close",
    ]
    lines += [f"{name}: {value}" for name, value in response.headers]
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1", "replace")
    return head if head_only else head + response.body


def error_response(status: int, message: str, *headers: tuple[str, str]) -> Response:
    body = Response.json({"error": message}, status)
    return Response(status, body.body, body.content_type, tuple(headers))


class _Reject(Exception):
    """A request refused before any handler sees it."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(slots=True)
class _Head:
    method: str
    target: str
    headers: list[tuple[str, str]]
    length: int
    expect_continue: bool


def parse_head(raw: bytes) -> _Head:
    """Request line and header fields (without the blank line); raises _Reject."""
    lines = _LINE.split(raw)
    parts = lines[0].split(b" ")
    if len(parts) != 3:
        raise _Reject(400, "malformed request line: want METHOD TARGET HTTP/1.x")
    method, target, version = parts
    if not _TOKEN.match(method):
        raise _Reject(400, "malformed request line: bad method")
    if not _TARGET.match(target) or not (target.startswith(b"/") or b"://" in target):
        raise _Reject(400, "malformed request line: bad request target")
    match = _VERSION.match(version)
    if match is None:
        raise _Reject(400, "malformed request line: bad HTTP version")
    if match.group(1) != b"1":
        raise _Reject(505, "only HTTP/1.0 and HTTP/1.1 are supported")
    if len(lines) - 1 > MAX_HEADERS:
        raise _Reject(431, f"too many header fields: at most {MAX_HEADERS}")
    headers: list[tuple[str, str]] = []
    for line in lines[1:]:
        if line[:1] in (b" ", b"\t"):
            raise _Reject(400, "malformed header: obsolete line folding")
        name, colon, value = line.partition(b":")
        if not colon or not _TOKEN.match(name):
            raise _Reject(400, "malformed header field")
        headers.append((name.decode("ascii"), value.strip(b" \t").decode("latin-1")))
    lowered = [(name.lower(), value) for name, value in headers]
    verb = method.decode("ascii")
    if any(name == "transfer-encoding" for name, _ in lowered):
        raise _Reject(411, "Transfer-Encoding is not supported: send the body with Content-Length")
    lengths = {value for name, value in lowered if name == "content-length"}
    if len(lengths) > 1:
        raise _Reject(400, "conflicting Content-Length headers")
    if not lengths:
        if verb in BODY_METHODS:
            raise _Reject(411, f"{verb} needs a Content-Length header")
        length = 0
    else:
        text = lengths.pop()
        if not (text.isascii() and text.isdigit()) or len(text) > 18:
            raise _Reject(400, "invalid Content-Length")
        length = int(text)
    if length > MAX_BODY_BYTES:
        raise _Reject(413, f"request body too large: at most {MAX_BODY_BYTES} bytes")
    expect = any(n == "expect" and v.lower() == "100-continue" for n, v in lowered)
    return _Head(verb, target.decode("ascii"), headers, length, expect and length > 0)


# -------------------------------------------------------------------------- connections
_HANDSHAKE, _HEAD, _BODY, _WRITE, _DRAIN = range(5)


class _Conn:
    __slots__ = (
        "accepted", "buf", "client", "deadline", "head", "out", "reads", "reserved", "sock", "state"
    )  # fmt: skip

    def __init__(self, sock: socket.socket, client: str, tls: bool, now: float) -> None:
        self.sock = sock
        self.client = client
        self.state = _HANDSHAKE if tls else _HEAD
        self.buf = bytearray()
        self.accepted = now
        self.deadline = now + HEAD_TIMEOUT_S
        self.head: _Head | None = None
        self.out = b""
        self.reads = True  # the selector waits for input (else for room to write)
        self.reserved = 0  # bytes of BODY_BUDGET_BYTES held for this request's body


@dataclass(slots=True)
class _Job:
    sock: socket.socket
    client: str
    head: _Head
    body: bytes
    reserved: int = 0


class _Listener:
    """The I/O threads and the handler pool behind HttpServer."""

    def __init__(
        self,
        router: Router,
        bind: str,
        port: int,
        context: ssl.SSLContext | None,
        *,
        workers: int,
        queue_size: int,
        backlog: int,
        max_connections: int,
        io_threads: int,
    ) -> None:
        self.router = router
        self.context = context
        family = socket.AF_INET6 if ":" in bind else socket.AF_INET
        self.sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.sock.bind((bind, port))
            self.sock.listen(backlog)
        except OSError:
            self.sock.close()
            raise
        self.sock.setblocking(False)
        self.workers = workers
        self.jobs: WarmQueue[_Job | None] = WarmQueue(queue_size)
        self.stopping = False
        self.rejected = 0  # answered 503 (queue, connection table or body budget full)
        self.body_budget = BODY_BUDGET_BYTES
        self._reserved = 0
        self._budget_lock = threading.Lock()
        count = max(1, io_threads)
        per_loop = max(1, max_connections // count)
        self.loops = [_Loop(self, n, per_loop) for n in range(count)]
        self.loops[0].listen(self.sock)
        self.threads: list[threading.Thread] = []

    def reserve(self, size: int) -> bool:
        """Hold ``size`` bytes of the body budget (False: it is spent)."""
        with self._budget_lock:
            if self._reserved + size > self.body_budget:
                return False
            self._reserved += size
            return True

    def release(self, size: int) -> None:
        if size:
            with self._budget_lock:
                self._reserved -= size

    # ---- lifecycle ---------------------------------------------------------------------
    def start(self) -> None:
        for loop in self.loops:
            self.threads.append(loop.thread())
        for n in range(self.workers):
            self.threads.append(
                threading.Thread(target=self._work, name=f"fleetd-http-{n}", daemon=True)
            )
        for thread in self.threads:
            thread.start()

    def stop(self) -> None:
        self.stopping = True
        for loop in self.loops:
            loop.wake()
        deadline = time.monotonic() + 5.0
        for thread in self.threads[: len(self.loops)]:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        while True:  # jobs nobody will serve now
            try:
                job = self.jobs.get_nowait()
            except queue.Empty:
                break
            if job is not None:
                _close(job.sock)
        for _ in range(self.workers):
            try:
                self.jobs.put_nowait(None)
            except queue.Full:
                break
        for thread in self.threads[len(self.loops) :]:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        for loop in self.loops:
            if not self.threads:
                loop.close_all()
            loop.close_pipe()
        if not self.threads:
            self.sock.close()

    # ---- the handler threads -----------------------------------------------------------
    def _work(self) -> None:
        while True:
            job = self.jobs.get()
            if job is None:
                return
            try:
                self._serve(job)
            except Exception as exc:
                log.debug("http_connection_error", client=job.client, error=repr(exc))
            finally:
                _close(job.sock, graceful=True)
                self.release(job.reserved)

    def _serve(self, job: _Job) -> None:
        head = job.head
        parts = urlsplit(head.target)
        request = Request(
            method=head.method,
            path=parts.path,
            query=parse_qs(parts.query),
            headers={name.lower(): value for name, value in head.headers},
            body=job.body,
            client=job.client,
        )
        try:
            response = self.router.dispatch(request)
        except Exception as exc:  # a router bug must not cost the client its answer
            log.error("http_handler_failed", path=request.path, error=repr(exc))
            response = Response.json({"error": "internal error"}, 500)
        data = memoryview(render(response, head_only=head.method == "HEAD"))
        deadline = time.monotonic() + WRITE_TIMEOUT_S  # for the whole answer, not per send
        while data:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("client did not read its answer in time")
            job.sock.settimeout(left)
            sent = job.sock.send(data[:65536])
            data = data[sent:]


class _Loop:
    """One I/O thread: its own selector and connections. Loop 0 also accepts, and deals the
    accepted connections round-robin to every loop, so TLS handshakes (which release the
    GIL) run on several cores."""

    def __init__(self, server: _Listener, number: int, max_connections: int) -> None:
        self.server = server
        self.number = number
        self.context = server.context
        self.max_connections = max_connections
        self.conns: dict[int, _Conn] = {}
        self.selector = selectors.DefaultSelector()
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(self.wake_w, False)
        self.selector.register(self.wake_r, selectors.EVENT_READ, "wake")
        self.inbox: queue.SimpleQueue[tuple[socket.socket, str]] = queue.SimpleQueue()
        self.listener: socket.socket | None = None
        self.paused_until: float | None = None  # accepting paused (out of descriptors)
        self.dealt = 0

    def listen(self, sock: socket.socket) -> None:
        self.listener = sock
        self.selector.register(sock, selectors.EVENT_READ, "listen")

    def thread(self) -> threading.Thread:
        name = "fleetd-http" if self.number == 0 else f"fleetd-http-io-{self.number}"
        return threading.Thread(target=self._loop, name=name, daemon=True)

    def wake(self) -> None:
        with contextlib.suppress(OSError):
            os.write(self.wake_w, b"x")

    def close_pipe(self) -> None:
        for fd in (self.wake_r, self.wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)

    def close_all(self) -> None:
        for conn in list(self.conns.values()):
            _close(conn.sock)
        self.conns.clear()
        while True:
            try:
                sock, _ = self.inbox.get_nowait()
            except queue.Empty:
                break
            _close(sock)
        with contextlib.suppress(OSError, ValueError):
            self.selector.close()
        if self.listener is not None:
            self.listener.close()

    # ---- the I/O thread ----------------------------------------------------------------
    def _loop(self) -> None:
        try:
            while not self.server.stopping:
                for key, events in self.selector.select(timeout=self._timeout()):
                    if key.data == "listen":
                        self._accept()
                    elif key.data == "wake":
                        with contextlib.suppress(OSError):
                            os.read(self.wake_r, 4096)
                    else:
                        self._service(key.data, events)
                self._adopt()
                now = time.monotonic()
                if self.paused_until is not None and now >= self.paused_until:
                    self.paused_until = None
                    assert self.listener is not None
                    self.selector.register(self.listener, selectors.EVENT_READ, "listen")
                self._expire(now)
        except Exception as exc:  # never expected: log it, the server is unusable now
            log.error("http_io_loop_failed", error=repr(exc))
        finally:
            self.close_all()

    def _timeout(self) -> float:
        """Until the next deadline (a connection's, the end of an accept pause), at most
        IDLE_WAIT_S: new connections, connections handed over and ``stop`` wake the loop
        themselves, so an idle server does not wake four times a second for nothing."""
        now = time.monotonic()
        due = now + IDLE_WAIT_S
        if self.paused_until is not None:
            due = min(due, self.paused_until)
        for conn in self.conns.values():
            due = min(due, conn.deadline)
        return max(0.0, due - now)

    def _pause_accepting(self, now: float) -> None:
        """Out of descriptors (or another accept failure): the listening socket stays
        readable, so stop watching it for ACCEPT_PAUSE_S instead of spinning on it."""
        if self.paused_until is None and self.listener is not None:
            self.selector.unregister(self.listener)
            self.paused_until = now + ACCEPT_PAUSE_S

    def _adopt(self) -> None:
        """Connections loop 0 dealt to this loop."""
        while True:
            try:
                sock, client = self.inbox.get_nowait()
            except queue.Empty:
                return
            self._add(sock, client)

    def _accept(self) -> None:
        for _ in range(128):
            try:
                assert self.listener is not None
                sock, address = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # e.g. EMFILE: leave them in the backlog for a moment
                log.warning("http_accept_failed", error=exc.strerror or repr(exc))
                self._pause_accepting(time.monotonic())
                return
            sock.setblocking(False)
            loops = self.server.loops
            target = loops[self.dealt % len(loops)]
            self.dealt += 1
            if target is self:
                self._add(sock, str(address[0]))
            else:
                target.inbox.put((sock, str(address[0])))
                target.wake()

    def _add(self, sock: socket.socket, client: str) -> None:
        if len(self.conns) >= self.max_connections:
            self.server.rejected += 1
            if self.context is None:  # plain HTTP: the answer fits the empty send buffer
                with contextlib.suppress(OSError):
                    sock.send(render(self._busy()))
            _close(sock)
            return
        if self.context is not None:
            try:
                sock = self.context.wrap_socket(
                    sock, server_side=True, do_handshake_on_connect=False
                )
            except (OSError, ValueError):
                _close(sock)
                return
        conn = _Conn(sock, client, self.context is not None, time.monotonic())
        self.conns[sock.fileno()] = conn
        self.selector.register(sock, selectors.EVENT_READ, conn)
        self._service(conn, selectors.EVENT_READ)  # data may already be there

    @staticmethod
    def _busy() -> Response:
        return error_response(
            503, "the server is busy: retry shortly", ("Retry-After", str(RETRY_AFTER_S))
        )

    def _service(self, conn: _Conn, events: int) -> None:
        self._guarded(conn, self._step)

    def _step(self, conn: _Conn) -> None:
        if conn.state == _HANDSHAKE:
            self._handshake(conn)
        if conn.state in (_HEAD, _BODY):
            self._read(conn)
        elif conn.state == _WRITE:
            self._write(conn)
        elif conn.state == _DRAIN:
            self._drain(conn)

    def _guarded(self, conn: _Conn, step: Callable[[_Conn], None]) -> None:
        """Run one step of a connection: "would block" waits for the socket, errors close it."""
        try:
            step(conn)
        except (ssl.SSLWantReadError, BlockingIOError, InterruptedError):
            self._want(conn, reads=True)
        except ssl.SSLWantWriteError:
            self._want(conn, reads=False)
        except (OSError, ValueError):  # reset, TLS garbage, closed: nothing to answer
            self._forget(conn)

    def _want(self, conn: _Conn, *, reads: bool) -> None:
        if conn.reads != reads and conn.sock.fileno() in self.conns:
            conn.reads = reads
            event = selectors.EVENT_READ if reads else selectors.EVENT_WRITE
            self.selector.modify(conn.sock, event, conn)

    def _handshake(self, conn: _Conn) -> None:
        assert isinstance(conn.sock, ssl.SSLSocket)
        conn.sock.do_handshake()
        conn.state = _HEAD
        self._want(conn, reads=True)

    def _read(self, conn: _Conn) -> None:
        while conn.state in (_HEAD, _BODY):
            data = conn.sock.recv(65536)  # raises when nothing is there (non-blocking)
            if not data:  # the client hung up before its request was complete
                self._forget(conn)
                return
            conn.buf += data
            try:
                self._progress(conn)
            except _Reject as exc:
                headers = (("Retry-After", str(RETRY_AFTER_S)),) if exc.status == 503 else ()
                self._answer(conn, error_response(exc.status, exc.message, *headers))
                return

    def _progress(self, conn: _Conn) -> None:
        if conn.state == _HEAD:
            while conn.buf[:2] == b"\r\n" or conn.buf[:1] == b"\n":  # RFC 9112: ignore
                del conn.buf[: 2 if conn.buf[:1] == b"\r" else 1]
            line_end = conn.buf.find(b"\n")
            if (line_end < 0 and len(conn.buf) > MAX_REQUEST_LINE) or line_end > MAX_REQUEST_LINE:
                raise _Reject(414, f"request line too long: at most {MAX_REQUEST_LINE} bytes")
            if line_end < 0:
                return
            end = _END_OF_HEAD.search(conn.buf, line_end - 1 if line_end > 0 else 0)
            limit = line_end + 1 + MAX_HEADER_BYTES
            if len(conn.buf) > limit if end is None else end.start() > limit:
                raise _Reject(431, f"header fields too large: at most {MAX_HEADER_BYTES} bytes")
            if end is None:
                return
            conn.head = parse_head(bytes(conn.buf[: end.start()]))
            if conn.head.length:  # bounded memory: at most BODY_BUDGET_BYTES of bodies at once
                if not self.server.reserve(conn.head.length):
                    self.server.rejected += 1
                    raise _Reject(503, "the server is busy: retry shortly")
                conn.reserved = conn.head.length
            del conn.buf[: end.end()]
            conn.state = _BODY
            conn.deadline = conn.accepted + BODY_TIMEOUT_S
            if conn.head.expect_continue and len(conn.buf) < conn.head.length:
                with contextlib.suppress(OSError, ValueError):  # tiny: fits the send buffer
                    conn.sock.send(b"HTTP/1.1 100 Continue\r\n\r\n")
        if conn.state == _BODY:
            assert conn.head is not None
            if len(conn.buf) < conn.head.length:
                return
            body = bytes(conn.buf[: conn.head.length])
            fd = conn.sock.fileno()
            self.selector.unregister(conn.sock)  # the handler thread owns the socket now
            self.conns.pop(fd, None)
            try:
                job = _Job(conn.sock, conn.client, conn.head, body, conn.reserved)
                self.server.jobs.put_nowait(job)
            except queue.Full:  # still ours: refuse it
                self.conns[fd] = conn
                self.selector.register(conn.sock, selectors.EVENT_READ, conn)
                conn.reads = True
                self.server.rejected += 1
                raise _Reject(503, "the server is busy: retry shortly") from None
            conn.state = -1
            conn.reserved = 0  # the handler thread releases it when done

    def _answer(self, conn: _Conn, response: Response) -> None:
        """Answer from the I/O thread (a refusal), then linger-close."""
        self.server.release(conn.reserved)
        conn.reserved = 0
        conn.out = render(response, head_only=conn.head is not None and conn.head.method == "HEAD")
        conn.state = _WRITE
        conn.deadline = time.monotonic() + LINGER_S
        conn.buf = bytearray()
        self._write(conn)

    def _write(self, conn: _Conn) -> None:
        while conn.out:
            sent = conn.sock.send(conn.out)
            conn.out = conn.out[sent:]
        # all out: half-close, then read and discard what the client still sends, so that
        # closing with unread input does not reset the connection before it reads the answer
        conn.sock.shutdown(socket.SHUT_WR)
        conn.state = _DRAIN
        self._want(conn, reads=True)
        self._drain(conn)

    def _drain(self, conn: _Conn) -> None:
        while True:
            if not socket.socket.recv(conn.sock, 65536):
                self._forget(conn)
                return

    def _expire(self, now: float) -> None:
        for conn in list(self.conns.values()):
            if now < conn.deadline:
                continue
            if conn.state in (_HEAD, _BODY):
                self._guarded(conn, self._late)
            else:  # a handshake that never finished, or an answer nobody reads
                self._forget(conn)

    def _late(self, conn: _Conn) -> None:
        self._answer(conn, error_response(408, "request not received in time"))

    def _forget(self, conn: _Conn) -> None:
        self.server.release(conn.reserved)
        conn.reserved = 0
        if self.conns.pop(conn.sock.fileno(), None) is not None:
            with contextlib.suppress(KeyError, ValueError):
                self.selector.unregister(conn.sock)
        _close(conn.sock)


def _close(sock: socket.socket, *, graceful: bool = False) -> None:
    if graceful:
        with contextlib.suppress(OSError, ValueError):
            sock.shutdown(socket.SHUT_WR)
    with contextlib.suppress(OSError):
        sock.close()


class HttpServer:
    """Serves a Router on background threads; port 0 picks a free port."""

    def __init__(
        self,
        router: Router,
        bind: str = "127.0.0.1",
        port: int = 0,
        *,
        tls_cert: Path | None = None,
        tls_key: Path | None = None,
        workers: int = WORKERS,
        queue_size: int = QUEUE_SIZE,
        backlog: int = BACKLOG,
        max_connections: int = MAX_CONNECTIONS,
        io_threads: int = IO_THREADS,
    ) -> None:
        context: ssl.SSLContext | None = None
        if tls_cert is not None and tls_key is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.minimum_version = ssl.TLSVersion.TLSv1_2
            context.load_cert_chain(tls_cert, tls_key)
            # one request per connection: no resumption to offer, so no session tickets to
            # mint and send on every handshake
            context.num_tickets = 0
        self._listener = _Listener(
            router,
            bind,
            port,
            context,
            workers=workers,
            queue_size=queue_size,
            backlog=backlog,
            max_connections=max_connections,
            io_threads=io_threads,
        )
        self._started = False

    @property
    def port(self) -> int:
        return int(self._listener.sock.getsockname()[1])

    @property
    def address(self) -> str:
        host = self._listener.sock.getsockname()[0]
        return f"{host!s}:{self.port}"

    @property
    def rejected(self) -> int:
        """Connections answered 503 because the queue or the connection table was full."""
        return self._listener.rejected

    def start(self) -> None:
        self._started = True
        # The I/O thread gives up the GIL on every socket call; while a handler or the poll
        # loop computes, getting it back waits for the switch interval (5 ms by default),
        # which under a burst of connections throttles accept and TLS to a crawl. 1 ms cut
        # the slowest of 300 concurrent answers by about a third (docs/performance.md).
        if sys.getswitchinterval() > SWITCH_INTERVAL_S:
            sys.setswitchinterval(SWITCH_INTERVAL_S)
        self._listener.start()

    def stop(self) -> None:
        self._listener.stop()
