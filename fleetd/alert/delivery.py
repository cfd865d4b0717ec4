"""Delivering the outbox: per integration, by lane, in order, within its rate limit, with retries.

Each integration's pending entries go out urgent lane first (pages, resolves, acks; see
``fleetd.alert.entries``), each lane strictly in the order it was queued; the next entry
blocks those behind it while it waits for a retry, so an outage followed by recovery delivers
everything once and in order. A receiver's 429 pauses the whole integration, not just the
entry it answered: until its ``Retry-After`` (or the backoff when it gives none) nothing is
sent, and the token bucket starts again empty at half its pace (back to full within ten
seconds), so a burst ends in at most one 429 instead of a series of them. An attempt is
recorded before the HTTP call (``sending_since``), and the outcome after it:

* success: delivered (plus, in the same transaction, whatever the success implies: the sync
  log, the chat message reference, a follow-up edit of the parent message);
* retryable (5xx, 429, 408, timeout, network): retried after capped exponential backoff with
  jitter, or exactly after the server's Retry-After; given up after ``give_up_after``; a 429
  pauses the integration until then;
* not retryable (any other 4xx, a Slack ``ok: false``): a configuration error — failed at
  once, logged once, counted, shown in ``status()`` and raised as a fleetd alert.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from enum import Enum
from typing import Protocol

from sqlalchemy import Connection

from fleetd.alert.base import HttpNotifyError, redact
from fleetd.alert.config import DeliveryConfig
from fleetd.alert.integrations import Integration
from fleetd.alert.notification import Notification, Receipt
from fleetd.alert.outbox_store import RATE_LIMITED, OutboxEntry
from fleetd.alert.retry import backoff_delay
from fleetd.alert.stats import IntegrationStats
from fleetd.errors import NotifyError
from fleetd.logs import get_logger

MAX_PER_TICK = 50  # entries one integration may send in one tick, rate limit permitting
_NOW = float("-inf")
_NEVER = float("inf")


class Outcome(Enum):
    DELIVERED = "delivered"
    RETRY = "retry"
    FAILED = "failed"


class Queue(Protocol):
    """Where entries wait: the durable outbox (``OutboxStore``) or its memory lane
    (``fleetd.alert.memlane.MemoryOutbox``)."""

    def pending(self, integration: str, limit: int) -> list[OutboxEntry]: ...

    def rate_limited_until(self, integration: str) -> float | None: ...

    def mark_sending(self, entry_id: int, now: float) -> None: ...

    def mark_delivered(self, conn: Connection | None, entry_id: int, now: float) -> None: ...

    def mark_retry(self, entry_id: int, due_at: float, error: str, code: int | None) -> None: ...

    def mark_failed(self, entry_id: int, now: float, error: str, code: int | None) -> None: ...

    def transaction(self) -> AbstractContextManager[Connection | None]: ...


@dataclass(frozen=True, slots=True)
class Sent:
    """A notification the receiver accepted: what ``DeliveryHooks.delivered`` records."""

    integration: Integration
    notification: Notification
    receipt: Receipt | None
    at: float


class DeliveryHooks(Protocol):
    """What the dispatcher does around deliveries."""

    def prepare(self, integration: Integration, notification: Notification) -> Notification:
        """Last-moment additions (the chat thread to reply in)."""
        ...

    def delivered(self, conn: Connection | None, sent: Sent) -> None:
        """Record what a success implies, in the transaction that marks it delivered
        (None: the memory lane's, where it is recorded once storage is back)."""
        ...

    def rejected(self, integration: Integration, error: str, now: float) -> None:
        """The receiver rejected a notification: raise the configuration-error alert."""
        ...

    def recovered(self, integration: Integration, now: float) -> None:
        """The receiver accepted a notification after rejecting one."""
        ...


@dataclass
class DeliveryReport:
    delivered: int = 0
    retried: int = 0
    failed: int = 0


class Delivery:
    """Runs the outbox for a set of integrations; holds their counters."""

    def __init__(
        self,
        store: Queue,
        config: DeliveryConfig,
        rng: random.Random,
        stats_for: Callable[[Integration], IntegrationStats],
    ) -> None:
        self._store = store
        self._config = config
        self._rng = rng
        self._stats_for = stats_for
        self._log = get_logger("alert.delivery")  # after logging is configured, not at import
        # integration id → the earliest time its queue is worth reading again; an idle tick
        # then costs no query. Missing means "look now" (so a restart looks everywhere).
        self._wake: dict[str, float] = {}

    def queued(self, integration_ids: Iterable[str]) -> None:
        """Entries were committed for these integrations: look at their queues again."""
        for integration_id in integration_ids:
            self._wake[integration_id] = _NOW

    def _later(self, integration_id: str, when: float) -> None:
        self._wake[integration_id] = min(self._wake.get(integration_id, _NEVER), when)

    def run(
        self, integrations: Sequence[Integration], now: float, hooks: DeliveryHooks
    ) -> DeliveryReport:
        report = DeliveryReport()
        for integration in integrations:
            self._run_one(integration, now, hooks, report)
        return report

    def _run_one(
        self, integration: Integration, now: float, hooks: DeliveryHooks, report: DeliveryReport
    ) -> None:
        key = integration.id
        if self._wake.get(key, _NOW) > now:
            return
        self._wake[key] = _NEVER  # until we learn otherwise (or something is queued)
        paused = self._store.rate_limited_until(key)
        if paused is not None and paused > now:
            self._pause(integration, paused)
            return
        limit = MAX_PER_TICK
        if integration.limiter is not None:
            limit = min(limit, integration.limiter.available(now))
            if limit <= 0:
                self._later(key, _NOW)
                return
        entries = self._store.pending(key, limit)
        for entry in entries:
            if entry.due_at > now:
                self._later(key, entry.due_at)
                return
            if integration.limiter is not None and not integration.limiter.take(now):
                self._later(key, _NOW)
                return
            outcome, retry_at = self._attempt(integration, entry, now, hooks)
            if outcome is Outcome.DELIVERED:
                report.delivered += 1
            elif outcome is Outcome.FAILED:
                report.failed += 1
            else:
                report.retried += 1
                self._later(key, _NOW)  # the head waits; later entries wait behind it
                if retry_at is not None:  # rate limited: everything waits
                    self._pause(integration, retry_at)
                return
        if len(entries) == limit:
            self._later(key, _NOW)

    def _pause(self, integration: Integration, until: float) -> None:
        """Send nothing before ``until``, then one message, then the steady rate."""
        self._wake[integration.id] = until
        if integration.limiter is not None:
            integration.limiter.hold(until)

    def _attempt(
        self, integration: Integration, entry: OutboxEntry, now: float, hooks: DeliveryHooks
    ) -> tuple[Outcome, float | None]:
        """The outcome, and when a receiver that rate-limited us lets us send again."""
        stats = self._stats_for(integration)
        notification = hooks.prepare(integration, Notification.from_json(entry.payload))
        if entry.sending_since is not None:
            self._log.warning(
                "notify_resumed_interrupted_send",
                receiver=integration.receiver,
                integration=integration.name,
                entry=entry.id,
            )
        self._store.mark_sending(entry.id, now)
        try:
            receipt = integration.notifier.send(notification)
        except NotifyError as exc:
            return self._failed(integration, entry, exc, now, hooks)
        except Exception as exc:  # a bug in a notifier must not stop the others
            error = NotifyError(f"notifier crashed ({type(exc).__name__})", retryable=False)
            return self._failed(integration, entry, error, now, hooks)
        with self._store.transaction() as conn:
            self._store.mark_delivered(conn, entry.id, now)
            hooks.delivered(conn, Sent(integration, notification, receipt, now))
        stats.sent += 1
        stats.last_success_at = now
        stats.logged_error = None
        if stats.rejecting:
            stats.rejecting = False
            self._log.info(
                "notify_recovered", receiver=integration.receiver, integration=integration.name
            )
            hooks.recovered(integration, now)
        return Outcome.DELIVERED, None

    def _failed(
        self,
        integration: Integration,
        entry: OutboxEntry,
        exc: NotifyError,
        now: float,
        hooks: DeliveryHooks,
    ) -> tuple[Outcome, float | None]:
        stats = self._stats_for(integration)
        error = redact(str(exc), integration.secrets)
        code = exc.status if isinstance(exc, HttpNotifyError) else None
        attempts = entry.attempts + 1
        stats.last_error, stats.last_error_at = error, now
        gave_up = now - entry.created_at >= self._config.give_up_after
        if exc.retryable and not gave_up:
            delay = self._retry_delay(exc, attempts)
            self._store.mark_retry(entry.id, now + delay, error, code)
            stats.retried += 1
            self._log_once(
                stats, "notify_retry", integration, error, attempt=attempts, retry_in=delay
            )
            return Outcome.RETRY, (now + delay if code == RATE_LIMITED else None)
        self._store.mark_failed(entry.id, now, error, code)
        stats.failed += 1
        if exc.retryable:  # gave up
            self._log.error(
                "notify_gave_up",
                receiver=integration.receiver,
                integration=integration.name,
                attempts=attempts,
                error=error,
            )
            return Outcome.FAILED, None
        stats.config_errors += 1
        first = not stats.rejecting
        stats.rejecting = True
        self._log_once(stats, "notify_rejected", integration, error, status=code)
        if first:
            hooks.rejected(integration, error, now)
        return Outcome.FAILED, None

    def _retry_delay(self, exc: NotifyError, attempts: int) -> float:
        if exc.retry_after is not None:
            return min(exc.retry_after, self._config.max_retry_after)
        return backoff_delay(
            attempts,
            initial=self._config.initial_backoff,
            cap=self._config.max_backoff,
            rng=self._rng,
        )

    def _log_once(
        self,
        stats: IntegrationStats,
        event: str,
        integration: Integration,
        error: str,
        **fields: object,
    ) -> None:
        """Log a failure when its text changes; repeats of the same failure go to debug."""
        if stats.logged_error == error:
            emit = self._log.debug
        elif event == "notify_rejected":
            emit = self._log.error
        else:
            emit = self._log.warning
        stats.logged_error = error
        emit(
            event,
            receiver=integration.receiver,
            integration=integration.name,
            error=error,
            **fields,
        )
