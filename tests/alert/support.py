"""Helpers for the alert delivery tests: alerts and transitions, a dispatcher harness on a
fake clock, and a recording HTTP handler for pytest-httpserver."""

from __future__ import annotations

import io
import json
import random
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from werkzeug import Request, Response

from fleetd.alert.config import AlertingConfig
from fleetd.alert.dispatch import Dispatcher
from fleetd.clock import FakeClock
from fleetd.model import Alert, AlertKey, AlertState, Severity, Transition, make_labels
from fleetd.store.db import Database

NODE = "node7"


def alert(
    rule: str,
    state: AlertState = AlertState.FIRING,
    *,
    at: float,
    severity: Severity = Severity.CRITICAL,
    gpu: int | None = 3,
    labels: Mapping[str, object] | None = None,
    annotations: Mapping[str, str] | None = None,
    value: float | None = 97.0,
    fired_at: float | None = None,
) -> Alert:
    """An alert as the rules engine would hand it over."""
    key_labels: dict[str, object] = {"node": NODE}
    if gpu is not None:
        key_labels["gpu"] = gpu
    key_labels.update(labels or {})
    key = AlertKey(rule, make_labels(key_labels))
    full = dict(key_labels, alertname=rule, severity=str(severity))
    firing = state == AlertState.FIRING
    return Alert(
        key=key,
        state=state,
        severity=severity,
        labels=make_labels(full),
        annotations=make_labels(annotations or {"summary": f"{rule} on GPU {gpu}"}),
        value=value,
        active_at=fired_at if fired_at is not None else at,
        fired_at=fired_at if fired_at is not None else at,
        resolved_at=None if firing else at,
        last_eval_at=at,
    )


def fire(rule: str, *, at: float, **kwargs: Any) -> Transition:
    a = alert(rule, AlertState.FIRING, at=at, **kwargs)
    return Transition(a, AlertState.PENDING, AlertState.FIRING, at)


def resolve(rule: str, *, at: float, fired_at: float, **kwargs: Any) -> Transition:
    a = alert(rule, AlertState.RESOLVED, at=at, fired_at=fired_at, **kwargs)
    return Transition(a, AlertState.FIRING, AlertState.RESOLVED, at)


def config(data: Mapping[str, Any]) -> AlertingConfig:
    return AlertingConfig.model_validate(data)


@dataclass
class Harness:
    """A dispatcher on a database, with a fake clock and a console buffer."""

    db: Database
    clock: FakeClock
    stream: io.StringIO = field(default_factory=io.StringIO)
    seed: int = 7

    def dispatcher(self, cfg: AlertingConfig) -> Dispatcher:
        return Dispatcher(
            cfg,
            self.db,
            node=NODE,
            now=self.clock.now(),
            rng=random.Random(self.seed),
            stream=self.stream,
        )

    def lines(self) -> list[str]:
        return [line for line in self.stream.getvalue().splitlines() if line]


@dataclass
class Seen:
    path: str
    headers: dict[str, str]
    body: Any


Reply = tuple[int, str, dict[str, str]]


class Recorder:
    """A pytest-httpserver handler that records every request and answers from a script.

    ``script`` is consulted first (one reply per request, in order); after it runs out the
    ``default`` reply answers. Thread-safe: the server runs in its own thread.
    """

    def __init__(self, default: Reply = (200, "ok", {})) -> None:
        self.default = default
        self.script: list[Reply] = []
        self.seen: list[Seen] = []
        self.replies: Callable[[Seen], Reply | None] | None = None
        self._lock = threading.Lock()

    def __call__(self, request: Request) -> Response:
        raw = request.get_data(as_text=True)
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw
        seen = Seen(request.path, dict(request.headers), body)
        with self._lock:
            self.seen.append(seen)
            reply = self.replies(seen) if self.replies is not None else None
            if reply is None:
                reply = self.script.pop(0) if self.script else self.default
        status, text, headers = reply
        return Response(text, status=status, headers=headers)

    def bodies(self, path: str | None = None) -> list[Any]:
        with self._lock:
            return [s.body for s in self.seen if path is None or s.path == path]
