"""Talking to agents: one JSON request, or the same request to many agents at once.

Fan-out is asyncio: a thousand agents are a thousand sockets in one thread, each under its
own deadline (``asyncio.timeout``) that covers connecting, sending and reading the whole
answer — a node that accepts and then trickles or never answers costs exactly its timeout
and never stalls the rest. The client speaks the little HTTP/1.1 the agents need (JSON in,
JSON out, ``Connection: close``, optional TLS), with no dependency beyond the standard
library.
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

MAX_RESPONSE_BYTES = 64 << 20
USER_AGENT = "fleetctl"


@dataclass(frozen=True, slots=True)
class Target:
    """One agent: its node name and the base URL of its API (``http://host:9477``)."""

    name: str
    url: str


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


def _request_bytes(
    method: str, host: str, path: str, body: bytes | None, token: str | None
) -> bytes:
    lines = [
        f"{method} {path} HTTP/1.1",
        f"Host: {host}",
        f"User-Agent: {USER_AGENT}",
        "Accept: application/json",
        "Connection: close",
    ]
    if token is not None:
        lines.append(f"Authorization: Bearer {token}")
    if body is not None:
        lines.append("Content-Type: application/json")
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (body or b"")


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
        writer.write(_request_bytes(method, host_header, path, body, options.token))
        await writer.drain()
        head = await reader.readuntil(b"\r\n\r\n")
        status_line, *header_lines = head.decode("latin-1").split("\r\n")
        fields = status_line.split(" ", 2)
        if len(fields) < 2 or not fields[0].startswith("HTTP/") or not fields[1].isdigit():
            raise ValueError(f"not an HTTP answer: {status_line[:60]!r}")
        headers = {}
        for line in header_lines:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        length = headers.get("content-length")
        if length is not None:
            size = int(length)
            if size > MAX_RESPONSE_BYTES:
                raise ValueError(f"answer too large ({size} bytes)")
            payload = await reader.readexactly(size)
        else:
            payload = await reader.read(MAX_RESPONSE_BYTES)
        return int(fields[1]), payload
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
            extra = {"node": target.name} if per_target_params else {}
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
