"""A vLLM server's HTTP face, as fleetd uses it: health, metrics, models, a 1-token probe.

Every call has a timeout. The scrape path turns failures into reasons (``fetch_values``);
the drain and re-admission paths raise ``RemedyError`` or answer not-ready with why, so the
run's evidence says what the server did.
"""

from __future__ import annotations

from dataclasses import dataclass

import requests

from fleetd.errors import RemedyError
from fleetd.vllm.config import VllmWorkerConfig
from fleetd.vllm.metrics import VllmValues, parse_vllm_metrics

REASON_UNREACHABLE = "unreachable"
REASON_TIMEOUT = "timeout"
REASON_BAD_METRICS = "bad_metrics"


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
    model: str | None = None  # the model it serves, once known


class WorkerGone(RemedyError):
    """The worker's server is not there (connection refused): its engine serves nothing."""


def base_url(worker: VllmWorkerConfig) -> str:
    return worker.url.rstrip("/")


def _get(
    session: requests.Session, url: str, timeout: float
) -> tuple[requests.Response | None, str | None]:
    try:
        return session.get(url, timeout=timeout), None
    except requests.Timeout:
        return None, REASON_TIMEOUT
    except requests.RequestException:
        return None, REASON_UNREACHABLE


def fetch_values(
    session: requests.Session, worker: VllmWorkerConfig, timeout: float
) -> tuple[bool, VllmValues, str | None]:
    """One scrape: (healthy, values, why values are missing) — never raises."""
    base = base_url(worker)
    health, reason = _get(session, base + "/health", timeout)
    if health is None:
        return False, VllmValues(), reason  # unreachable: /metrics would only wait again
    healthy = health.status_code == 200
    response, reason = _get(session, base + "/metrics", timeout)
    if response is None:
        return healthy, VllmValues(), reason
    if response.status_code != 200:
        return healthy, VllmValues(), f"http_{response.status_code}"
    try:
        values = parse_vllm_metrics(response.text)
    except (ValueError, TypeError, IndexError):
        return healthy, VllmValues(), REASON_BAD_METRICS
    return healthy, values, None if healthy else f"health_http_{health.status_code}"


def read_load(session: requests.Session, worker: VllmWorkerConfig, timeout: float) -> Load:
    """The running and waiting gauges of the worker's own /metrics (the scrape's parser)."""
    url = base_url(worker) + "/metrics"
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
    try:
        values = parse_vllm_metrics(response.text)
    except (ValueError, TypeError, IndexError) as exc:
        raise RemedyError(f"{url}: unparsable metrics ({exc})") from None
    if values.running is None or values.waiting is None:
        raise RemedyError(f"{url}: {', '.join(values.missing_load())} not exported")
    return Load(values.running, values.waiting)


def check_ready(
    session: requests.Session,
    worker: VllmWorkerConfig,
    *,
    timeout: float,
    completion: bool,
) -> Readiness:
    """/health 200, the model in /v1/models, and optionally a 1-token completion."""
    loaded = check_loaded(session, worker, timeout=timeout)
    if not loaded.ready or not completion:
        return loaded
    probe = probe_completion(session, worker, timeout=timeout, model=loaded.model)
    return probe if not probe.ready else loaded


def probe_completion(
    session: requests.Session,
    worker: VllmWorkerConfig,
    *,
    timeout: float,
    model: str | None = None,
) -> Readiness:
    """A 1-token completion: the engine really generates (health and models can lie)."""
    payload = {"model": model or worker.model, "prompt": "ping", "max_tokens": 1}
    try:
        reply = session.post(base_url(worker) + "/v1/completions", json=payload, timeout=timeout)
    except requests.RequestException as exc:
        return Readiness(False, f"1-token completion: {type(exc).__name__}")
    if reply.status_code != 200:
        return Readiness(False, f"1-token completion: HTTP {reply.status_code}")
    return Readiness(True, "1-token completion served")


def check_loaded(
    session: requests.Session, worker: VllmWorkerConfig, *, timeout: float
) -> Readiness:
    """/health 200 and the model listed in /v1/models: the server is up with its model."""
    base = base_url(worker)
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
    except requests.RequestException as exc:
        return Readiness(False, f"{type(exc).__name__}")
    except ValueError:
        return Readiness(False, "/v1/models: invalid JSON")
    return Readiness(True, f"serving {model}", model)
