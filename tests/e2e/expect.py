"""Reading what the stand-ins and the daemon said, for the assertions of the e2e tests."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from fleetd.cli import fleetctl_context
from fleetd.cli.fleetctl_context import EXIT_OK, EXIT_UNREACHABLE
from tests.e2e.runs import Look, Observed, head_of
from tests.e2e.standins.pagerduty import Event

OUT_OF_SERVICE: int | None = getattr(fleetctl_context, "EXIT_OUT_OF_SERVICE", None)
"""fleetctl's exit code for a node with GPUs out of service, once fleetctl defines one."""

MAX_REQUESTS_PER_INTEGRATION = 12


def triggers(o: Observed, alertname: str, gpu: int | None = None) -> list[Event]:
    """The run's accepted PagerDuty triggers about ``alertname`` (on ``gpu``)."""
    return o.node.pagerduty.triggers(alertname, gpu)


def walk(value: Any) -> Iterator[tuple[str, Any]]:
    """Every (key, leaf value) pair in nested dicts and lists ("" as key in lists)."""
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(item, dict | list):
                yield from walk(item)
            else:
                yield str(key), item
    elif isinstance(value, list):
        for item in value:
            if isinstance(item, dict | list):
                yield from walk(item)
            else:
                yield "", item


def gpu_entry(status: dict[str, Any], gpu: int) -> dict[str, Any]:
    entry = next((g for g in status["gpus"] if g["gpu"] == gpu), None)
    assert entry is not None, f"GPU {gpu} not in /api/v1/status"
    return dict(entry)


# ------------------------------------------------------------------------------- fleetctl
def fleetctl_says_out_of_service(code: int, output: str) -> str | None:
    """Why this ``fleetctl status NODE`` answer does not say "out of service" (None: it does)."""
    head = head_of(output)
    if OUT_OF_SERVICE is not None and code != OUT_OF_SERVICE:
        return f"exit {code}, expected EXIT_OUT_OF_SERVICE={OUT_OF_SERVICE}"
    if code in (EXIT_OK, EXIT_UNREACHABLE):
        return f"exit {code} (0 is healthy, 2 unreachable)"
    if head is None:
        return "no node line in the output"
    if head["state"] == "healthy":
        return "the node line says healthy"
    return None


def fleetctl_says_healthy(code: int, output: str) -> str | None:
    head = head_of(output)
    if code != EXIT_OK:
        return f"exit {code}"
    if head is None or head["state"] != "healthy":
        return f"node line {head}"
    return None


def show(result: Any) -> str:
    return f"exit {result.returncode}: {(result.stdout + result.stderr).strip()[:600]}"


# ------------------------------------------------------------------------------- /metrics
def samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    out = []
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                out.append((dict(sample.labels), float(sample.value)))
    return out


def metrics_view(text: str) -> dict[str, Any]:
    """Node health, healthy GPUs and GPUs out of service as /metrics says them."""
    node_state = [s["state"] for s, v in samples(text, "fleetd_node_health") if v == 1]
    healthy = sum(
        1 for s, v in samples(text, "fleetd_gpu_health") if s.get("state") == "healthy" and v == 1
    )
    out = [v for s, v in samples(text, "fleetd_remediation_gpus_out_of_service")
           if str(s.get("scope", "")).startswith("node:")]  # fmt: skip
    return {
        "state": node_state[0] if len(node_state) == 1 else node_state,
        "gpus_healthy": healthy,
        "gpus_out_of_service": int(out[0]) if len(out) == 1 else out,
    }


def disagreement(look: Look) -> str | None:
    """Where /metrics, /api/v1/status and fleetctl (by name) disagree in one look."""
    status = look.status
    api = {
        "state": status["health"]["state"],
        "gpus_healthy": status["gpus_healthy"],
        "gpus_out_of_service": status["remediation"]["gpus_out_of_service"],
    }
    metrics = metrics_view(look.metrics)
    head = head_of(look.by_name.stdout)
    problems = [f"/metrics {k}={metrics[k]!r}, API {v!r}" for k, v in api.items()
                if metrics[k] != v]  # fmt: skip
    if head is None:
        problems.append(f"fleetctl printed no node line ({show(look.by_name)})")
    else:
        if head["state"] != api["state"]:
            problems.append(f"fleetctl state {head['state']}, API {api['state']}")
        if int(head["healthy"]) != api["gpus_healthy"]:
            problems.append(f"fleetctl {head['healthy']} GPUs healthy, API {api['gpus_healthy']}")
    return "; ".join(problems) or None


GPU_MENTION = re.compile(r"\bGPU\s*#?(\d+)\b", re.IGNORECASE)
