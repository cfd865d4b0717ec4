"""The Notifier protocol and the HTTP plumbing every notifier shares.

A notifier formats and sends ONE payload and says, through ``NotifyError(retryable=…)``,
whether trying again can help. It never sleeps, retries or deduplicates: the dispatcher does
(Alertmanager's notify/ split: ``Notifier.Notify`` returns (retry bool, error) and the retry,
dedup and wait stages live around it).

Status codes are sorted by one rule, ``classify_status``: 2xx is success; 5xx, 429 (rate
limited) and 408 (request timeout) may succeed later; every other 4xx means the request or
the configuration is wrong and repeating it cannot help.

Secrets: error texts never include a request URL or an exception's own message (requests puts
the URL, which for a Slack or generic webhook *is* the secret, into its exception text), and
any response text is passed through ``redact`` first.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from email.utils import parsedate_to_datetime
from typing import Any, ClassVar, Generic, Literal, Protocol, TypeVar
from urllib.parse import parse_qsl, quote, urlsplit

import requests

from fleetd.alert.notification import Notification, Receipt
from fleetd.configbase import Secret
from fleetd.errors import NotifyError

DeliveryMode = Literal["group", "alert", "sync", "changes"]
"""group: one message per group notification (Slack, webhook, console);
alert: one event per alert that changed (PagerDuty, with a stable dedup key per alert);
sync: keep a remote alert store in step, re-sending while firing (Alertmanager);
changes: only the change events it takes, never alerts (the RMA ticket receiver)."""

RETRYABLE_4XX = frozenset({408, 429})
_BODY_SNIPPET = 200
USER_AGENT = "fleetd-alert"
C = TypeVar("C")


class Notifier(Protocol):
    """Formats and sends one notification; raises NotifyError on failure."""

    kind: ClassVar[str]
    mode: ClassVar[DeliveryMode]
    threads: bool  # replies and edits need a MessageRef from an earlier Receipt

    def send(self, notification: Notification) -> Receipt | None:
        """Deliver ``notification`` once; raise NotifyError(retryable=…) if it did not arrive."""
        ...


class PostingNotifier(Generic[C]):
    """A notifier that POSTs each notification on its own (no chat threads): it keeps its
    receiver's configuration and the HTTP session the integrations share."""

    threads = False

    def __init__(self, config: C, session: requests.Session) -> None:
        self._config = config
        self._session = session


class HttpNotifyError(NotifyError):
    """A notification failed at the HTTP level; ``status`` is the response code, if any."""

    def __init__(
        self,
        message: str,
        *,
        retryable: bool,
        retry_after: float | None = None,
        status: int | None = None,
    ) -> None:
        super().__init__(message, retryable=retryable, retry_after=retry_after)
        self.status = status


_MIN_SECRET_PART = 8


def _secret_forms(value: str) -> list[str]:
    """The ways a secret can show up in a server's answer, longest first.

    A URL secret (a Slack or generic webhook) is usually echoed without its scheme and host:
    its path, its query, or one path segment or query value alone.
    """
    forms = {value, quote(value, safe=""), quote(value)}
    parts = urlsplit(value)
    if parts.scheme in ("http", "https") and parts.netloc:
        pieces = [parts.path, parts.query, f"{parts.path}?{parts.query}"]
        pieces += parts.path.split("/")
        pieces += [v for _, v in parse_qsl(parts.query)]
        forms.update(p for p in pieces if len(p) >= _MIN_SECRET_PART)
    return sorted((f for f in forms if len(f) >= 4), key=len, reverse=True)


def redact(text: str, secrets: Iterable[Secret | str | None]) -> str:
    """``text`` with every secret (whole, URL-encoded, or a telling part of a secret URL)
    replaced by ``<secret>``."""
    for secret in secrets:
        if secret is None:
            continue
        value = secret.reveal() if isinstance(secret, Secret) else secret
        for form in _secret_forms(value):
            text = text.replace(form, "<secret>")
    return text


def is_retryable_status(status: int) -> bool:
    return status >= 500 or status in RETRYABLE_4XX


def parse_retry_after(headers: Mapping[str, str]) -> float | None:
    """Retry-After in seconds: a number, or an HTTP date measured against the response's Date."""
    raw = headers.get("Retry-After")
    if raw is None:
        return None
    raw = raw.strip()
    try:
        return max(0.0, float(raw))
    except ValueError:
        pass
    try:
        until = parsedate_to_datetime(raw)
        sent = parsedate_to_datetime(headers["Date"])
    except (KeyError, TypeError, ValueError, IndexError):
        return None
    return max(0.0, (until - sent).total_seconds())


def error_for_status(
    response: requests.Response, what: str, secrets: Iterable[Secret | str | None]
) -> HttpNotifyError:
    """The NotifyError a non-2xx response deserves, with a short redacted body."""
    status = response.status_code
    body = redact(response.text[:_BODY_SNIPPET].strip(), secrets)
    retryable = is_retryable_status(status)
    detail = f"{what}: HTTP {status}"
    if body:
        detail += f": {body}"
    if not retryable:
        detail += " (not retried: the request or the receiver's configuration is wrong)"
    return HttpNotifyError(
        detail,
        retryable=retryable,
        retry_after=parse_retry_after(response.headers) if retryable else None,
        status=status,
    )


def post_json(
    session: requests.Session,
    url: str,
    payload: Any,
    *,
    timeout: float,
    what: str,
    headers: Mapping[str, str] | None = None,
) -> requests.Response:
    """POST ``payload`` as JSON; network failures become retryable NotifyErrors without the URL."""
    all_headers = {"Content-Type": "application/json", "User-Agent": USER_AGENT}
    all_headers.update(headers or {})
    try:
        return session.post(
            url,
            data=json.dumps(payload, separators=(",", ":")).encode(),
            headers=all_headers,
            timeout=timeout,
            allow_redirects=False,
        )
    except requests.Timeout:
        raise HttpNotifyError(f"{what}: no answer within {timeout:g}s", retryable=True) from None
    except requests.RequestException as exc:
        raise HttpNotifyError(
            f"{what}: request failed ({type(exc).__name__})", retryable=True
        ) from None


def post_json_2xx(
    session: requests.Session,
    url: Secret | str,
    payload: Any,
    *,
    timeout: float,
    what: str,
    token: Secret | None = None,
    secrets: Iterable[Secret | None] = (),
) -> None:
    """POST ``payload`` as JSON to a receiver for which any 2xx answer is success, with
    ``token`` as a bearer token when set. Any other answer raises ``error_for_status``'s
    error, with the URL (when it is a secret), the token and ``secrets`` redacted."""
    headers = {} if token is None else {"Authorization": f"Bearer {token.reveal()}"}
    plain = url.reveal() if isinstance(url, Secret) else url
    response = post_json(session, plain, payload, timeout=timeout, what=what, headers=headers)
    if not 200 <= response.status_code < 300:
        hidden = [url if isinstance(url, Secret) else None, token, *secrets]
        raise error_for_status(response, what, hidden)


def truncate(text: str, limit: int, marker: str = "…") -> str:
    """``text`` cut to at most ``limit`` characters, ending in ``marker`` when cut."""
    if len(text) <= limit:
        return text
    return text[: max(0, limit - len(marker))] + marker
