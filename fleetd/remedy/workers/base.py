"""The adapter interface and the vLLM HTTP checks every adapter shares.

Each method either succeeds or raises ``RemedyError`` with a message that goes into the run's
evidence as is; ``ready`` answers not-ready (with why) instead of raising, because a worker
that is still loading is not an error.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

import requests
from prometheus_client.parser import text_string_to_metric_families

from fleetd.config import VllmWorkerConfig
from fleetd.errors import RemedyError

RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"


@dataclass(frozen=True, slots=True)
class Load:
    """Requests a worker still has: in model batches, and queued."""

    running: float
    waiting: float

    @property
    def idle(self) -> bool:
        return self.running == 0 and self.waiting == 0


@dataclass(frozen=True, slots=True)
class Readiness:
    ready: bool
    detail: str = ""


class WorkerAdapter(Protocol):
    """Take one worker out of service and bring it back."""

    def unroute(self, worker: VllmWorkerConfig) -> None:
        """Out of rotation (the load balancer or scheduler stops sending it work)."""
        ...

    def load(self, worker: VllmWorkerConfig) -> Load:
        """In-flight work now."""
        ...

    def stop(self, worker: VllmWorkerConfig) -> None:
        """Stop the worker's process so nothing holds its GPUs."""
        ...

    def start(self, worker: VllmWorkerConfig) -> None: ...

    def ready(self, worker: VllmWorkerConfig) -> Readiness:
        """Serving again (health, model listed, optionally a 1-token completion)."""
        ...

    def reroute(self, worker: VllmWorkerConfig) -> None:
        """Back into rotation."""
        ...


def placeholders(worker: VllmWorkerConfig, node: str) -> Mapping[str, str]:
    """Values for ``{worker}``, ``{unit}``, … in commands, URLs and bodies."""
    return {
        "worker": worker.name,
        "unit": worker.unit or "",
        "url": worker.url,
        "gpus": ",".join(str(g) for g in worker.gpus),
        "node": node,
        "model": worker.model or "",
    }


class WorkerGone(RemedyError):
    """The worker's server is not there (connection refused): its engine serves nothing."""


def read_load(session: requests.Session, worker: VllmWorkerConfig, timeout: float) -> Load:
    """Sum the running and waiting gauges of the worker's own /metrics."""
    url = worker.url.rstrip("/") + "/metrics"
    try:
        response = session.get(url, timeout=timeout)
    except requests.ConnectionError as exc:
        if isinstance(exc, requests.ConnectTimeout):
            raise RemedyError(f"{url}: {type(exc).__name__}") from None
        raise WorkerGone(f"{url}: {type(exc).__name__}") from None
    except requests.RequestException as exc:
        raise RemedyError(f"{url}: {type(exc).__name__}") from None
    if response.status_code != 200:
        raise RemedyError(f"{url}: HTTP {response.status_code}")
    running = waiting = 0.0
    seen = set()
    try:
        for family in text_string_to_metric_families(response.text):
            for sample in family.samples:
                if sample.name == RUNNING:
                    running += sample.value
                    seen.add(RUNNING)
                elif sample.name == WAITING:
                    waiting += sample.value
                    seen.add(WAITING)
    except ValueError as exc:
        raise RemedyError(f"{url}: unparsable metrics ({exc})") from None
    if seen != {RUNNING, WAITING}:
        missing = ", ".join(sorted({RUNNING, WAITING} - seen))
        raise RemedyError(f"{url}: {missing} not exported")
    return Load(running, waiting)


def check_ready(
    session: requests.Session,
    worker: VllmWorkerConfig,
    *,
    timeout: float,
    completion: bool,
) -> Readiness:
    """/health 200, the model in /v1/models, and optionally a 1-token completion."""
    base = worker.url.rstrip("/")
    try:
        health = session.get(base + "/health", timeout=timeout)
        if health.status_code != 200:
            return Readiness(False, f"/health {health.status_code}")
        models = session.get(base + "/v1/models", timeout=timeout)
        if models.status_code != 200:
            return Readiness(False, f"/v1/models {models.status_code}")
        ids = [m.get("id") for m in models.json().get("data", []) if isinstance(m, dict)]
        if not ids:
            return Readiness(False, "no model listed")
        model = worker.model or ids[0]
        if worker.model is not None and worker.model not in ids:
            return Readiness(False, f"model {worker.model} not listed ({', '.join(map(str, ids))})")
        if completion:
            reply = session.post(
                base + "/v1/completions",
                json={"model": model, "prompt": "ping", "max_tokens": 1},
                timeout=timeout,
            )
            if reply.status_code != 200:
                return Readiness(False, f"1-token completion: HTTP {reply.status_code}")
    except requests.RequestException as exc:
        return Readiness(False, f"{type(exc).__name__}")
    except ValueError:
        return Readiness(False, "/v1/models: invalid JSON")
    return Readiness(True, f"serving {model}")
