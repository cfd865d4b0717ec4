"""Why a GPU is in its state: which rule, which readings, what has been done, what is next.

An SRE paged at night should not have to read rule files, the journal and the event log to
understand one GPU: this puts the answer in one document. Every statement is derived from
the engine's alert state, the rule that produced it, the stored readings that rule reads,
the remediation journal and the event log; nothing is guessed.
"""

from __future__ import annotations

from collections.abc import Sequence

from fleetd.api.services import ApiServices
from fleetd.api.views import Json, event_view, run_view
from fleetd.configbase import format_duration
from fleetd.model import label_value
from fleetd.query import Matcher
from fleetd.remedy.machine import Run, RunState
from fleetd.remedy.service import RemediationStatus
from fleetd.rules.ast import metrics_used
from fleetd.rules.spec import Rule, Threshold

IDENTITY_LABELS = frozenset({"gpu", "uuid"})
RECENT_EVENTS = 20
RECENT_RUNS = 50
DRIVER_RESET_WINDOW = 86400.0
MILESTONES = frozenset(
    {
        "run_planned",
        "reset_intent",
        "reset_done",  # how the reset went, and how each worker left service
        "reboot_intent",
        "verified",
        "burn_in_passed",
        "done",
        "quarantined",  # the outcome; says why (verification failed, reset refused, …)
        "aborted",
        "drained",
    }
)
"""A run's steps that say what happened to the GPU: planned, reset, verification, outcome.
An 8-worker run logs many more (each worker out, idle, stopped, back in rotation), which
would push these out of any "last N events"."""

_NEXT_STEP = {
    RunState.PLANNED: "wait for the node's remediation slot and the fleet-wide lease",
    RunState.UNROUTING: "take the workers out of rotation",
    RunState.BALANCER_WAIT: "wait for the load balancer to stop sending requests",
    RunState.QUIESCING: "wait until in-flight requests reach 0 (or the drain timeout)",
    RunState.STOPPING: "stop the workers' units",
    RunState.RELEASE_CHECK: "confirm no process still holds the GPUs",
    RunState.RESETTING: "reset the GPUs once, then verify them",
    RunState.REBOOTING: "wait for the requested node reboot",
    RunState.VERIFYING: "verify every GPU of the unit (enumerates, healthy polls, links at max)",
    RunState.BURN_IN: "run the burn-in command",
    RunState.VALIDATING: "run the validation ladder before the workers start",
    RunState.STARTING: "start the workers' units",
    RunState.AWAIT_READY: "wait for /health and the model to answer, then re-admit",
    RunState.ROLLING_BACK: "put the workers back into rotation after aborting",
}


def explain_gpu(services: ApiServices, gpu: Json, alerts: Sequence[Json], now: float) -> Json:
    """The explanation for one GPU; ``gpu`` is its status entry, ``alerts`` the node's."""
    index = int(gpu["gpu"])
    mine = [a for a in alerts if a["gpu"] == index]
    rules = services.engine.rules
    model = gpu.get("model")
    rule_views = [_rule_view(a, rules.get(a["rule"]), model, now) for a in mine]
    readings = _readings(services, index, [rules.get(a["rule"]) for a in mine], now)
    runs = _runs(services, index)
    remedy_status = services.remedy.status() if services.remedy is not None else None
    events = services.query_events(gpu=index, limit=RECENT_EVENTS)
    focus = _focus_run(runs, remedy_status, index)
    return {
        "node": services.node,
        "gpu": index,
        "now": now,
        "health": gpu["health"],
        "summary": _summary(gpu, mine),
        "alerts": rule_views,
        "readings": readings,
        "remediation": {
            "mode": remedy_status.mode if remedy_status is not None else "off",
            "current": gpu.get("remediation"),
            "runs": [run_view(r) for r in runs],
            "milestones": _milestones(services, focus),
        },
        "events": [event_view(e) for e in events],
        "next": _next_steps(services, remedy_status, gpu, mine, runs, now),
        "blind_spots": [
            {"rule": b.rule, "missing": list(b.missing), "text": b.describe()}
            for b in services.blind_spots()
        ],
        "driver_resets": _driver_resets(services, index, now),
        "shadow": _shadow(services, index),
        "trust": _trust(services, {a["rule"] for a in mine}, now),
    }


def _shadow(services: ApiServices, index: int) -> list[Json]:
    """Shadow rules' alerts on the GPU: what they would have sent (never sent)."""
    out = []
    for alert in services.engine.shadow_alerts():
        gpu = label_value(alert.key.labels, "gpu")
        if gpu != str(index) or alert.state.value == "inactive":
            continue
        rule = services.engine.rules.get(alert.key.rule)
        plan = rule.remediation_plan if rule is not None else None
        out.append(
            {
                "rule": alert.key.rule,
                "state": alert.state.value,
                "value": alert.value,
                "would": f"notify and remediate ({plan})" if plan else "notify",
            }
        )
    return out


def _trust(services: ApiServices, names: set[str], now: float) -> list[Json]:
    """The precision figures (``fleetd.remedy.kpi``) of the GPU's rules and every shadow rule;
    none when the report cannot be read (storage down)."""
    reporter = services.reliability
    if reporter is None:
        return []
    try:
        report = reporter.cached(now)
    except Exception:  # the explanation never fails for want of the KPI figures
        return []
    return [t.to_dict() for t in report.rules if t.rule in names or t.mode == "shadow"]


def _driver_resets(services: ApiServices, index: int, now: float) -> list[Json]:
    """Resets the driver made on its own (fleetd.events marks them ``initiator: driver``),
    one entry per reset: the event log keeps the first report of each as the message."""
    found = services.query_events(
        gpu=index, kinds=["kernel_event", "driver_event"], since=now - DRIVER_RESET_WINDOW,
        limit=1000,
    )  # fmt: skip
    return [
        {
            "at": e.ts,
            "source": "amdsmi_event" if e.kind == "driver_event" else "kernel_log",
            "message": e.message,
        }
        for e in found
        if e.data.get("initiator") == "driver" and "reset by the driver" in e.message
    ][-10:]


def _summary(gpu: Json, alerts: Sequence[Json]) -> str:
    health = gpu["health"]
    state = health["state"]
    head = f"GPU {gpu['gpu']} is {state}"
    on = [a for a in alerts if a["state"] == "firing"]
    hold = health.get("out_of_service")
    if hold is not None:
        head = (
            f"GPU {gpu['gpu']} is out of service: {hold['reason']} by run {hold['run_id']} "
            f"({hold['plan']}, {hold['run_state']}"
            + (f": {hold['detail']}" if hold["detail"] else "")
            + ")"
        )
        if health["rules_state"] != "healthy":
            head += f"; its readings say {health['rules_state']}"
        if not on:
            return head
    if on:
        parts = []
        for a in on:
            since = a["fired_at"]
            text = f"{a['rule']} ({a['severity']})"
            if since is not None:
                text += f" firing since {_clock(since)}"
            if a["value"] is not None:
                text += f", value {a['value']:g}"
            parts.append(text)
        return f"{head}: " + "; ".join(parts)
    if health["reasons"]:
        return f"{head}: " + "; ".join(health["reasons"])
    pending = [a for a in alerts if a["state"] == "pending"]
    if pending:
        return f"{head}; pending: " + ", ".join(a["rule"] for a in pending)
    return f"{head}: no alert is pending or firing for it"


def _rule_view(alert: Json, rule: Rule | None, model: str | None, now: float) -> Json:
    view: Json = {
        "rule": alert["rule"],
        "state": alert["state"],
        "severity": alert["severity"],
        "value": alert["value"],
        "summary": alert["annotations"].get("summary"),
        "description": alert["annotations"].get("description"),
        "active_at": alert["active_at"],
        "fired_at": alert["fired_at"],
        "resolved_at": alert["resolved_at"],
        "silenced_by": alert["silenced_by"],
        "acknowledged": alert["acknowledged"],
    }
    if rule is None:
        view["source"] = alert["source"]
        return view
    view.update(
        {
            "expr": rule.expr_text,
            "op": rule.op,
            "threshold": _level(rule.threshold, model),
            "clear": _level(rule.clear, model),
            "for_s": rule.for_s,
            "keep_firing_for_s": rule.keep_firing_for_s,
            "runbook": rule.runbook,
            "rationale": rule.rationale,
            "remediation_plan": rule.remediation_plan,
            "mode": rule.mode,
            "defined_at": rule.source,
        }
    )
    if alert["state"] == "pending" and alert["active_at"] is not None:
        view["fires_at"] = alert["active_at"] + rule.for_s
    return view


def _level(threshold: Threshold | None, model: str | None) -> float | None:
    return None if threshold is None else threshold.for_model(model)


def _readings(
    services: ApiServices, gpu: int, rules: Sequence[Rule | None], now: float
) -> list[Json]:
    """The latest value of every series the GPU's alerting rules read (or its health input)."""
    metrics: list[str] = []
    for rule in rules:
        if rule is not None:
            metrics.extend(sorted(metrics_used(rule.expr) - set(metrics)))
    if not metrics:
        metrics = ["fleetd_gpu_up"]
    out: list[Json] = []
    matchers = [Matcher("gpu", "=", str(gpu))]
    for metric in metrics:
        latest = services.query.latest(metric, matchers, now=now)
        for key, sample in sorted(latest.items(), key=lambda kv: kv[0].labels):
            out.append(
                {
                    "metric": metric,
                    "labels": {k: v for k, v in key.labels if k not in IDENTITY_LABELS},
                    "value": sample.value,
                    "at": sample.ts,
                    "age_s": round(max(0.0, now - sample.ts), 3),
                }
            )
        if not latest:
            out.append({"metric": metric, "labels": {}, "value": None, "at": None, "age_s": None})
    return out


def _focus_run(runs: Sequence[Run], remedy: RemediationStatus | None, gpu: int) -> Run | None:
    """The run that explains the GPU now: one in progress, else one holding it, else the
    newest (``runs`` is newest first)."""
    for run in runs:
        if not run.terminal:
            return run
    held = {h.run_id for h in (remedy.held if remedy is not None else ()) if gpu in h.gpus}
    for run in runs:
        if run.run_id in held:
            return run
    return runs[0] if runs else None


def _milestones(services: ApiServices, run: Run | None) -> Json | None:
    """The focus run's milestones, in order, with the run they belong to."""
    if run is None or services.remedy is None:
        return None
    steps = [e for e in services.remedy.events(run.run_id) if e.kind in MILESTONES]
    return {
        "run_id": run.run_id,
        "plan": run.plan.value,
        "state": run.state.value,
        "dry_run": run.dry_run,
        "steps": [
            {"at": e.at, "kind": e.kind, "severity": e.severity, "message": e.message}
            for e in steps
        ],
    }


def _runs(services: ApiServices, gpu: int) -> list[Run]:
    if services.remedy is None:
        return []
    return [r for r in services.remedy.runs(limit=RECENT_RUNS) if gpu in r.gpu_indices]


def _next_steps(
    services: ApiServices,
    remedy: RemediationStatus | None,
    gpu: Json,
    alerts: Sequence[Json],
    runs: Sequence[Run],
    now: float,
) -> list[str]:
    steps: list[str] = []
    index = int(gpu["gpu"])
    active = [r for r in runs if not r.terminal]
    held = [h for h in (remedy.held if remedy is not None else ()) if index in h.gpus]
    for run in active:
        doing = _NEXT_STEP.get(run.state, run.state.value)
        mode = " (dry-run: steps are logged, nothing is done)" if run.dry_run else ""
        steps.append(
            f"run {run.run_id} ({run.plan.value}) is {run.state.phase}: next, {doing}{mode}"
        )
    for hold in held:
        steps.append(
            f"held out of service by run {hold.run_id} ({hold.state}"
            f"{': ' + hold.reason if hold.reason else ''}): a human decides; "
            f"`fleetctl undrain {services.node} {index} -r REASON` puts it back"
        )
    for alert in alerts:
        if alert["state"] == "pending" and alert.get("active_at") is not None:
            rule = services.engine.rules.get(alert["rule"])
            if rule is not None:
                fires = alert["active_at"] + rule.for_s
                steps.append(
                    f"{alert['rule']} fires at {_clock(fires)} "
                    f"(in {format_duration(max(0, round(fires - now)))}) if it still holds"
                )
        if alert["state"] != "firing":
            continue
        plan = alert.get("remediation_plan")
        if plan and not active and not held:
            if remedy is None or remedy.mode == "off":
                steps.append(
                    f"{alert['rule']} asks for remediation plan '{plan}' but remediation is off: "
                    "follow the runbook"
                )
            elif remedy.paused.paused:
                steps.append(
                    f"{alert['rule']} asks for remediation plan '{plan}' but remediation is "
                    f"paused: `fleetctl remediation resume {services.node} -r REASON` or act by "
                    "hand"
                )
            elif remedy.breaker.tripped:
                steps.append(
                    f"{alert['rule']} asks for remediation plan '{plan}' but the circuit breaker "
                    f"({remedy.lease_scope}) is tripped: a human resets it or acts by hand"
                )
            elif remedy.mode == "dry-run":
                steps.append(
                    f"{alert['rule']} asks for remediation plan '{plan}': mode is dry-run, so "
                    "fleetd only logs the plan; a human acts"
                )
            else:
                steps.append(f"{alert['rule']} triggers remediation plan '{plan}'")
        elif not plan:
            rule = services.engine.rules.get(alert["rule"])
            runbook = rule.runbook if rule is not None and rule.runbook else "its runbook"
            steps.append(f"{alert['rule']} has no automatic remediation: follow {runbook}")
        if alert["silenced_by"]:
            steps.append(f"{alert['rule']} is silenced ({', '.join(alert['silenced_by'])})")
    if gpu["health"]["state"] == "unknown" and not alerts:
        steps.append("waiting for fresh telemetry: health stays unknown until the GPU answers")
    if not steps:
        steps.append("nothing: the GPU is healthy and no alert is pending")
    return steps


def _clock(ts: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%SZ")
