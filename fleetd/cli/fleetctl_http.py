"""Talking to agents: one JSON request, or the same request to many agents at once.

Fan-out is asyncio: a thousand agents are a thousand sockets in one thread, each under its
own deadline (``asyncio.timeout``) that covers connecting, sending and reading the whole
answer — a node that accepts and then trickles or never answers costs exactly its timeout
and never stalls the rest. The HTTP/1.1 itself (framing, chunked answers, bad answers) is
h11's, the sans-I/O protocol library under httpcore; httpx itself was measured here and
lost: its connection pool costs O(n²) over a thousand hosts (4.2 s against 1.4 s for 1,000
agents, docs/performance.md).
"""

from __future__ import annotations

import asyncio
import json
import resource
import ssl
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode, urlsplit

import h11

MAX_RESPONSE_BYTES = 64 << 20
USER_AGENT = "fleetctl"


@dataclass(frozen=True, slots=True)
class Target:
    """One agent: its node name and the base URL of its API (``http://host:9477``).

    ``name_known`` is False for an agent named by its address on the command line: fleetctl
    does not know its node name, so it does not ask the agent to prove it (``?node=``).
    """

    name: str
    url: str
    name_known: bool = True

    def node_param(self) -> dict[str, str]:
        """``{"node": name}`` for every request when the name is known: an agent that is
        another node answers 404 ("wrong node"), never its own data under this name."""
        return {"node": self.name} if self.name_known else {}


@dataclass(frozen=True, slots=True)
class Reply:
    """What came back from one agent, or why nothing did."""

    target: Target
    status: int | None  # None: unreachable (refused, timed out, TLS failure, bad answer)
    data: Any = None
    error: str | None = None
    elapsed_s: float = 0.0

    @property
    def reachable(self) -> bool:
        return self.status is not None

    @property
    def node(self) -> str:
        """The node's name to show: the fleet's name for it, or, for an agent named by its
        address, the name it answered with (as on its pages), the address if none."""
        if not self.target.name_known and isinstance(self.data, dict):
            answered = self.data.get("node")
            if isinstance(answered, str) and answered:
                return answered
        return self.target.name

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300

    def message(self) -> str:
        """The agent's error message, or why it could not be reached."""
        if self.error is not None:
            return self.error
        if isinstance(self.data, dict) and "error" in self.data:
            return str(self.data["error"])
        return f"HTTP {self.status}"


@dataclass(frozen=True, slots=True)
class ClientOptions:
    timeout: float = 3.0
    token: str | None = None
    ca_file: str | None = None
    concurrency: int = 512


def _ssl_context(ca_file: str | None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=ca_file)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


class _TooLarge(ValueError):
    pass


def _request_events(
    method: str, host: str, path: str, body: bytes | None, token: str | None
) -> list[h11.Request | h11.Data | h11.EndOfMessage]:
    headers = [
        ("Host", host),
        ("User-Agent", USER_AGENT),
        ("Accept", "application/json"),
        ("Connection", "close"),
    ]
    if token is not None:
        headers.append(("Authorization", f"Bearer {token}"))
    if body is not None:
        headers += [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
    events: list[h11.Request | h11.Data | h11.EndOfMessage] = [
        h11.Request(method=method, target=path, headers=headers)
    ]
    if body:
        events.append(h11.Data(data=body))
    events.append(h11.EndOfMessage())
    return events


async def _read_answer(conn: h11.Connection, reader: asyncio.StreamReader) -> tuple[int, bytes]:
    """Feed h11 until the whole answer is in: (status, body), at most MAX_RESPONSE_BYTES."""
    status: int | None = None
    chunks: list[bytes] = []
    size = 0
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            conn.receive_data(await reader.read(1 << 16))  # b"": the agent closed
        elif isinstance(event, h11.Response):
            status = event.status_code
            length = dict(event.headers).get(b"content-length", b"")
            if length.isdigit() and int(length) > MAX_RESPONSE_BYTES:
                raise _TooLarge(f"answer too large ({int(length)} bytes)")
        elif isinstance(event, h11.Data):
            size += len(event.data)
            if size > MAX_RESPONSE_BYTES:
                raise _TooLarge(f"answer too large (over {MAX_RESPONSE_BYTES} bytes)")
            chunks.append(bytes(event.data))
        elif isinstance(event, h11.EndOfMessage) and status is not None:
            return status, b"".join(chunks)
        elif isinstance(event, h11.ConnectionClosed):
            raise asyncio.IncompleteReadError(b"".join(chunks), None)
        # an InformationalResponse (1xx) is skipped: the real answer follows


async def _exchange(
    target: Target,
    method: str,
    path: str,
    body: bytes | None,
    options: ClientOptions,
    context: ssl.SSLContext | None,
) -> tuple[int, bytes]:
    parts = urlsplit(target.url)
    tls = parts.scheme == "https"
    host = parts.hostname or ""
    port = parts.port or (443 if tls else 80)
    reader, writer = await asyncio.open_connection(
        host,
        port,
        ssl=(context or _ssl_context(options.ca_file)) if tls else None,
        server_hostname=host if tls else None,
        limit=1 << 16,
    )
    try:
        host_header = parts.netloc.rsplit("@", 1)[-1]
        conn = h11.Connection(h11.CLIENT)
        for event in _request_events(method, host_header, path, body, options.token):
            writer.write(conn.send(event) or b"")
        await writer.drain()
        return await _read_answer(conn, reader)
    finally:
        writer.close()


async def request_async(
    target: Target,
    method: str,
    path: str,
    *,
    params: Mapping[str, Any] | Sequence[tuple[str, Any]] | None = None,
    body: Any = None,
    options: ClientOptions,
    context: ssl.SSLContext | None = None,
) -> Reply:
    """One request; never raises: every failure is a Reply with ``status=None``."""
    query = urlencode([(k, v) for k, v in _pairs(params) if v is not None], doseq=True)
    full = f"{path}?{query}" if query else path
    data = None if body is None else json.dumps(body).encode()
    started = time.monotonic()
    try:
        async with asyncio.timeout(options.timeout):
            status, payload = await _exchange(target, method, full, data, options, context)
    except TimeoutError:
        return Reply(target, None, error=f"timed out after {options.timeout:g}s")
    except ConnectionRefusedError:
        return Reply(target, None, error="connection refused")
    except ssl.SSLError as exc:
        return Reply(target, None, error=f"TLS: {exc.reason or exc}")
    except asyncio.IncompleteReadError:
        return Reply(target, None, error="connection closed before the answer was complete")
    except h11.RemoteProtocolError as exc:
        if "complete message" in str(exc):  # closed in the middle of the body
            return Reply(target, None, error="connection closed before the answer was complete")
        return Reply(target, None, error=f"not an HTTP answer ({exc})")
    except (OSError, ValueError, asyncio.LimitOverrunError) as exc:
        text = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
        return Reply(target, None, error=text)
    elapsed = time.monotonic() - started
    try:
        decoded = json.loads(payload) if payload else None
    except ValueError:
        return Reply(target, None, error=f"HTTP {status} with a body that is not JSON")
    return Reply(target, status, decoded, None, elapsed)


def _pairs(params: Mapping[str, Any] | Sequence[tuple[str, Any]] | None) -> list[tuple[str, Any]]:
    if params is None:
        return []
    if isinstance(params, Mapping):
        return list(params.items())
    return list(params)


def request(
    target: Target,
    method: str,
    path: str,
    *,
    params: Mapping[str, Any] | Sequence[tuple[str, Any]] | None = None,
    body: Any = None,
    options: ClientOptions,
) -> Reply:
    """One request, synchronously."""
    return asyncio.run(
        request_async(target, method, path, params=params, body=body, options=options)
    )


def fan_out(
    targets: Iterable[Target],
    path: str,
    *,
    params: Mapping[str, Any] | None = None,
    options: ClientOptions,
    per_target_params: bool = True,
) -> list[Reply]:
    """GET ``path`` from every target at once, each under its own timeout; replies in order.

    With ``per_target_params`` each request carries ``node=<name>`` so an agent that is not
    the node the inventory says answers 404 instead of impersonating it.
    """
    chosen = list(targets)
    if not chosen:
        return []

    async def run() -> list[Reply]:
        limit = asyncio.Semaphore(max(1, min(options.concurrency, _fd_budget())))
        context = _ssl_context(options.ca_file) if any(_is_tls(t) for t in chosen) else None

        async def one(target: Target) -> Reply:
            extra = target.node_param() if per_target_params else {}
            async with limit:
                return await request_async(
                    target,
                    "GET",
                    path,
                    params={**(params or {}), **extra},
                    options=options,
                    context=context,
                )

        return list(await asyncio.gather(*(one(t) for t in chosen)))

    return asyncio.run(run())


def _is_tls(target: Target) -> bool:
    return target.url.startswith("https:")


def _fd_budget() -> int:
    """How many sockets may be open at once: half the process's file-descriptor limit."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return max(16, soft // 2) if soft > 0 else 512
