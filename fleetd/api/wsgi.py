"""The API as a WSGI application (PEP 3333), so any WSGI server can serve it and tests can
call it in-process, as client_python does for /metrics.

fleetd's own server (``fleetd.api.server.HttpServer``) stays the default: it bounds every
connection's time and size, pauses accept(2) on EMFILE and answers 503 when its handler pool
is full (docs/security.md), which the standard library's wsgiref does not. Both end in the
same ``Router.dispatch``, so a handler cannot tell which server called it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import parse_qs

from fleetd.api.server import MAX_BODY_BYTES, HttpError, Request, Router, reason

StartResponse = Callable[..., Any]
WsgiApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


def wsgi_app(router: Router) -> WsgiApp:
    """``router`` as a WSGI callable."""

    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        try:
            request = request_from_environ(environ)
        except HttpError as exc:
            response = exc.response()
        else:
            response = router.dispatch(request)
        headers = [("Content-Type", response.content_type)]
        headers += [("Content-Length", str(len(response.body))), *response.headers]
        start_response(f"{response.status} {reason(response.status)}", headers)
        return [b"" if environ.get("REQUEST_METHOD") == "HEAD" else response.body]

    return app


def request_from_environ(environ: dict[str, Any]) -> Request:
    """A ``Request`` from a WSGI environ; a body over MAX_BODY_BYTES is a 413, as on the wire."""
    try:
        length = int(environ.get("CONTENT_LENGTH") or 0)
    except ValueError:
        raise HttpError(400, "Content-Length is not a number") from None
    if length > MAX_BODY_BYTES:
        raise HttpError(413, f"request body over {MAX_BODY_BYTES} bytes")
    body = environ["wsgi.input"].read(length) if length else b""
    headers = {
        key[5:].replace("_", "-").lower(): str(value)
        for key, value in environ.items()
        if key.startswith("HTTP_")
    }
    for key in ("CONTENT_TYPE", "CONTENT_LENGTH"):
        if environ.get(key):
            headers[key.replace("_", "-").lower()] = str(environ[key])
    return Request(
        method=str(environ.get("REQUEST_METHOD", "GET")).upper(),
        path=str(environ.get("PATH_INFO") or "/"),
        query=parse_qs(str(environ.get("QUERY_STRING", ""))),
        headers=headers,
        body=body,
        client=str(environ.get("REMOTE_ADDR", "")),
    )
