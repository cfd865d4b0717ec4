"""``/metrics`` and ``/healthz``: what scrapers and load balancers ask of every agent.

Both answer from what the daemon hands in (a renderer, the age of the last poll, the store's
health); neither knows how the node is polled.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from fleetd.api.coalesce import Coalesced
from fleetd.api.server import HttpServer, Request, Response, Router
from fleetd.polltiming import PollTiming
from fleetd.store.resilient import StoreHealth

METRICS_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def mount_node_endpoints(
    router: Router,
    *,
    render_metrics: Callable[[], bytes],
    poll_age: Callable[[], float | None],
    timing: Callable[[], PollTiming],
    storage: Callable[[], StoreHealth],
) -> None:
    """Add ``GET /metrics`` and ``GET /healthz`` to ``router``."""
    # coalesced: 300 scrapers at once cost about two renderings, and each still sees a view
    # at least as new as its own request
    scrape = Coalesced(render_metrics)

    def metrics(_request: Request) -> Response:
        return Response(200, scrape(), METRICS_TYPE)

    def healthz(_request: Request) -> Response:
        return healthz_response(poll_age(), timing(), storage())

    router.add("GET", "/metrics", metrics)
    router.add("GET", "/healthz", healthz)


def healthz_response(age: float | None, timing: PollTiming, storage: StoreHealth) -> Response:
    """200 while polls keep finishing; 503 before the first and once they stopped. ``age`` is
    monotonic time since the last finished poll, so no wall-clock step makes it look fresh."""
    if age is None:
        return Response.json({"status": "starting"}, 503)
    fresh = age <= timing.healthz_after_s
    body: dict[str, object] = {
        "status": "ok" if fresh else "stalled",
        "last_poll_age_seconds": round(age, 3),
        "storage": "degraded" if storage.degraded else "ok",
    }
    if storage.degraded:
        body["storage_reason"] = storage.reason
    return Response.json(body, 200 if fresh else 503)


class Listen(Protocol):
    """Where to serve (``fleetd.config.HttpConfig``, the ``http:`` section)."""

    @property
    def bind(self) -> str: ...
    @property
    def port(self) -> int: ...
    @property
    def tls_cert(self) -> Path | None: ...
    @property
    def tls_key(self) -> Path | None: ...


def open_server(router: Router, http: Listen) -> HttpServer:
    """The listening server, or one clear line (SystemExit) for a port in use, an address not
    on this host or unreadable TLS files."""
    try:
        return HttpServer(
            router, http.bind, http.port, tls_cert=http.tls_cert, tls_key=http.tls_key
        )
    except OSError as exc:
        why = exc.strerror or str(exc)
        raise SystemExit(
            f"fleetd: cannot serve HTTP on {http.bind}:{http.port}: {why} (http: in the config)"
        ) from None
