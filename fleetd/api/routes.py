"""The /api/v1 endpoints: reads of status, GPUs, alerts, silences, remediation and events, and
the actions a human may take. docs/api/openapi.yaml describes every one of them.

Every endpoint accepts ``?node=NAME``: a request meant for another node (a stale inventory,
a wrong port) gets 404 instead of this node's data. Mutations need the bearer token, say why
(``reason``) and are recorded in the event log with who asked, from where, and the outcome.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Callable
from typing import Any, Literal

from fleetd.alert.notification import iso8601
from fleetd.alert.silence_store import SilenceState
from fleetd.api.alerts import alert_detail, current_alerts
from fleetd.api.auth import Actor, TokenAuth
from fleetd.api.bodies import ActionBody, SilenceBody, parse_body
from fleetd.api.coalesce import Coalesced
from fleetd.api.explain import explain_gpu
from fleetd.api.history import gpu_history
from fleetd.api.server import Handler, HttpError, Request, Response, Router
from fleetd.api.services import ApiServices, RemediationControl
from fleetd.api.status import node_status, remediation_summary
from fleetd.api.views import (
    Json,
    breaker_view,
    event_view,
    pause_view,
    remediation_event_view,
    rule_status_view,
    run_view,
    silence_view,
)
from fleetd.configbase import Secret, parse_duration
from fleetd.errors import ConfigError, RemedyError, StoreError
from fleetd.logs import get_logger
from fleetd.vllm.benchmark import baseline_dict

API_PREFIX = "/api/v1"
ACTION_EVENT_KIND = "operator_action"
EVIDENCE_PHASES = frozenset({"pre_reset", "failure", "quarantine"})
ALERT_STATES = frozenset({"firing", "pending", "resolved"})
SILENCE_STATES: dict[str, SilenceState] = {
    "pending": "pending",
    "active": "active",
    "expired": "expired",
}

log = get_logger("api")


def build_api_router(
    services: ApiServices,
    *,
    token: Secret | None,
    token_name: str = "operator",
    router: Router | None = None,
) -> Router:
    """Mount every /api/v1 endpoint on ``router`` (a new one by default) and return it."""
    api = _Api(services, TokenAuth(token, token_name))
    target = router if router is not None else Router()
    for method, path, handler in api.routes():
        target.add(method, API_PREFIX + path, _scoped(services, handler))
    return target


def _scoped(services: ApiServices, handler: Handler) -> Handler:
    def scoped(request: Request) -> Response:
        wanted = request.arg("node")
        if wanted is not None and wanted != services.node:
            raise HttpError(404, f"unknown node {wanted!r}: this agent is {services.node!r}")
        try:
            return handler(request)
        except StoreError as exc:
            raise HttpError(503, f"storage unavailable: {exc}") from None

    return scoped


# ------------------------------------------------------------------------------ query arguments
def _int_arg(request: Request, name: str, default: int, lo: int, hi: int) -> int:
    raw = request.arg(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise HttpError(400, f"query parameter {name} must be an integer") from None
    if not lo <= value <= hi:
        raise HttpError(400, f"query parameter {name} must be between {lo} and {hi}")
    return value


def _time_arg(request: Request, name: str) -> float | None:
    raw = request.arg(name)
    if raw is None or raw == "":
        return None
    try:
        value = float(raw)
    except ValueError:
        raise HttpError(400, f"query parameter {name} must be Unix seconds") from None
    if not math.isfinite(value):
        raise HttpError(400, f"query parameter {name} must be a finite number")
    return value


def _duration_arg(request: Request, name: str, default: float, maximum: float) -> float:
    raw = request.arg(name)
    if raw is None or raw == "":
        return default
    try:
        value = parse_duration(float(raw) if _is_number(raw) else raw)
    except ValueError as exc:
        raise HttpError(400, f"query parameter {name}: {exc}") from None
    if not 0 < value <= maximum:
        raise HttpError(400, f"query parameter {name} must be more than 0 and at most {maximum:g}s")
    return value


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _choice(request: Request, name: str, allowed: frozenset[str] | set[str]) -> str | None:
    raw = request.arg(name)
    if raw is None or raw == "":
        return None
    if raw not in allowed:
        raise HttpError(400, f"query parameter {name} must be one of {', '.join(sorted(allowed))}")
    return raw


def _bool_arg(request: Request, name: str) -> bool | None:
    raw = request.arg(name)
    if raw is None or raw == "":
        return None
    if raw.lower() in ("1", "true", "yes"):
        return True
    if raw.lower() in ("0", "false", "no"):
        return False
    raise HttpError(400, f"query parameter {name} must be true or false")


# ------------------------------------------------------------------------------------- the API
class _Api:
    def __init__(self, services: ApiServices, auth: TokenAuth) -> None:
        self.s = services
        self.auth = auth
        # the status document, shared by requests that overlap (fleetd.api.coalesce)
        self._status = Coalesced(lambda: Response.json(node_status(services, services.now())))

    def routes(self) -> list[tuple[str, str, Handler]]:
        return [
            ("GET", "/status", self.status),
            ("GET", "/gpus", self.gpus),
            ("GET", "/gpus/{gpu}", self.gpu_detail),
            ("GET", "/gpus/{gpu}/explain", self.explain),
            ("POST", "/gpus/{gpu}/drain", self.drain),
            ("POST", "/gpus/{gpu}/undrain", self.undrain),
            ("GET", "/alerts", self.alerts),
            ("GET", "/alerts/{fingerprint}", self.alert),
            ("POST", "/alerts/{fingerprint}/ack", self.acknowledge),
            ("GET", "/silences", self.silences),
            ("POST", "/silences", self.create_silence),
            ("GET", "/silences/{silence_id}", self.silence),
            ("POST", "/silences/{silence_id}/expire", self.expire_silence),
            ("GET", "/remediation", self.remediation),
            ("GET", "/remediation/runs", self.runs),
            ("GET", "/remediation/runs/{run_id}", self.run),
            ("GET", "/remediation/runs/{run_id}/evidence", self.evidence),
            ("POST", "/remediation/runs/{run_id}/cancel", self.cancel),
            ("POST", "/remediation/pause", self.pause),
            ("POST", "/remediation/resume", self.resume),
            ("POST", "/remediation/breaker/reset", self.reset_breaker),
            ("GET", "/remediation/baseline", self.baseline),
            ("GET", "/rma", self.rma_list),
            ("GET", "/rma/{serial}", self.rma_one),
            ("POST", "/remediation/baseline/capture", self.capture_baseline),
            ("GET", "/events", self.events),
            ("GET", "/rules", self.rules),
            ("GET", "/report", self.report),
            ("POST", "/reload", self.reload),
        ]

    # ---- helpers -----------------------------------------------------------------------
    def _gpu(self, request: Request) -> int:
        raw = request.params["gpu"]
        if not (raw.isascii() and raw.isdigit()) or len(raw) > 4:
            raise HttpError(400, f"GPU must be an index (0, 1, …), not {raw!r}")
        index = int(raw)
        known = self.s.known_gpus(self.s.latest_snapshot(), self.s.health())
        if index not in known:
            raise HttpError(404, f"unknown GPU {index} on node {self.s.node}")
        return index

    def _remedy(self) -> RemediationControl:
        if self.s.remedy is None:
            raise HttpError(409, "remediation is not available on this node")
        return self.s.remedy

    def _mutation(self, request: Request, model: type[Any]) -> tuple[Any, Actor]:
        token = self.auth.check(request)
        body = parse_body(request, model)
        return body, Actor(token=token, client=request.client, user=body.actor)

    def _record(
        self,
        action: str,
        actor: Actor,
        body: ActionBody,
        *,
        message: str,
        gpu: int | None = None,
        outcome: str = "ok",
    ) -> bool:
        """Write the action to the event log; False (and an error log) if that failed."""
        try:
            self.s.record_event(
                ACTION_EVENT_KIND,
                now=self.s.now(),
                gpu=gpu,
                message=f"{message}; reason: {body.reason}",
                actor=actor.describe(),
                data={
                    "action": action,
                    "reason": body.reason,
                    "user": actor.user,
                    "client": actor.client,
                    "token": actor.token,
                    "outcome": outcome,
                },
            )
        except Exception as exc:
            log.error("api_action_not_recorded", action=action, error=type(exc).__name__)
            return False
        log.info("api_action", action=action, who=actor.describe(), outcome=outcome, gpu=gpu)
        return True

    def _act(
        self,
        action: str,
        actor: Actor,
        body: ActionBody,
        message: str,
        do: Callable[[], Json],
        *,
        gpu: int | None = None,
        status: int = 200,
    ) -> Response:
        """Run ``do``; record the outcome (done or refused) and answer."""
        try:
            result = do()
        except HttpError as exc:
            self._record(action, actor, body, message=message, gpu=gpu, outcome=exc.message)
            raise
        except RemedyError as exc:
            self._record(action, actor, body, message=message, gpu=gpu, outcome=f"refused: {exc}")
            raise HttpError(409, str(exc)) from None
        except KeyError as exc:
            self._record(action, actor, body, message=message, gpu=gpu, outcome="not found")
            raise HttpError(404, f"not found: {exc.args[0] if exc.args else action}") from None
        except ValueError as exc:
            self._record(action, actor, body, message=message, gpu=gpu, outcome=f"invalid: {exc}")
            raise HttpError(400, str(exc)) from None
        recorded = self._record(action, actor, body, message=message, gpu=gpu)
        return Response.json({**result, "recorded": recorded}, status)

    @staticmethod
    def _run_view(remedy: RemediationControl, run_id: str) -> Json:
        run = remedy.run(run_id)
        if run is None:  # journaled before drain() returned; absent only if it vanished
            raise HttpError(409, f"run {run_id} was started but cannot be read back")
        return run_view(run)

    # ---- reads -------------------------------------------------------------------------
    def status(self, request: Request) -> Response:
        return self._status()

    def gpus(self, request: Request) -> Response:
        now = self.s.now()
        status = node_status(self.s, now)
        return Response.json({"node": self.s.node, "now": now, "gpus": status["gpus"]})

    def gpu_detail(self, request: Request) -> Response:
        index = self._gpu(request)
        cfg = self.s.config
        window = _duration_arg(request, "window", cfg.history_window, cfg.max_history_window)
        points = _int_arg(request, "points", cfg.history_points, 2, 10_000)
        now = self.s.now()
        status = node_status(self.s, now)
        entry = next(g for g in status["gpus"] if g["gpu"] == index)
        alerts = [a for a in current_alerts(self.s, now) if a["gpu"] == index]
        runs = []
        if self.s.remedy is not None:
            runs = [run_view(r) for r in self.s.remedy.runs(limit=50) if index in r.gpu_indices]
        events = self.s.query_events(gpu=index, limit=50)
        return Response.json(
            {
                "node": self.s.node,
                "now": now,
                "gpu": entry,
                "alerts": alerts,
                "remediation_runs": runs,
                "events": [event_view(e) for e in events],
                "history": gpu_history(self.s.query, index, now=now, window=window, points=points),
            }
        )

    def explain(self, request: Request) -> Response:
        index = self._gpu(request)
        now = self.s.now()
        status = node_status(self.s, now)
        entry = next(g for g in status["gpus"] if g["gpu"] == index)
        return Response.json(explain_gpu(self.s, entry, current_alerts(self.s, now), now))

    def alerts(self, request: Request) -> Response:
        state = _choice(request, "state", ALERT_STATES)
        severity = _choice(request, "severity", {"critical", "warning", "info"})
        gpu = _int_arg(request, "gpu", -1, 0, 9999) if request.arg("gpu") else None
        now = self.s.now()
        out = [
            a
            for a in current_alerts(self.s, now)
            if (state is None or a["state"] == state)
            and (severity is None or a["severity"] == severity)
            and (gpu is None or a["gpu"] == gpu)
        ]
        return Response.json({"node": self.s.node, "now": now, "alerts": out})

    def alert(self, request: Request) -> Response:
        fingerprint = request.params["fingerprint"]
        now = self.s.now()
        found = alert_detail(self.s, fingerprint, now)
        if found is None:
            raise HttpError(404, f"no alert with fingerprint {fingerprint!r} on {self.s.node}")
        return Response.json({"node": self.s.node, "now": now, "alert": found})

    def silences(self, request: Request) -> Response:
        state = _choice(request, "state", set(SILENCE_STATES))
        now = self.s.now()
        found = self.s.dispatcher.list_silences(
            now, SILENCE_STATES[state] if state is not None else None
        )
        return Response.json(
            {"node": self.s.node, "now": now, "silences": [silence_view(x, now) for x in found]}
        )

    def silence(self, request: Request) -> Response:
        found = self.s.dispatcher.get_silence(request.params["silence_id"])
        if found is None:
            raise HttpError(404, f"no silence {request.params['silence_id']!r}")
        return Response.json({"silence": silence_view(found, self.s.now())})

    def remediation(self, request: Request) -> Response:
        summary, _ = remediation_summary(self.s)
        return Response.json({"node": self.s.node, "now": self.s.now(), **summary})

    def runs(self, request: Request) -> Response:
        limit = _int_arg(request, "limit", 50, 1, 1000)
        gpu = _int_arg(request, "gpu", -1, 0, 9999) if request.arg("gpu") else None
        active = _bool_arg(request, "active")
        found = self.s.remedy.runs(limit=limit) if self.s.remedy is not None else []
        out = [
            run_view(r)
            for r in found
            if (gpu is None or gpu in r.gpu_indices) and (active is None or active != r.terminal)
        ]
        return Response.json({"node": self.s.node, "now": self.s.now(), "runs": out})

    def run(self, request: Request) -> Response:
        run_id = request.params["run_id"]
        found = self.s.remedy.run(run_id) if self.s.remedy is not None else None
        if found is None or self.s.remedy is None:
            raise HttpError(404, f"no remediation run {run_id!r}")
        events = self.s.remedy.events(run_id)
        return Response.json(
            {"run": run_view(found), "events": [remediation_event_view(e) for e in events]}
        )

    def evidence(self, request: Request) -> Response:
        """The run's evidence bundle, base64 in JSON with the digest journaled when it was
        written (fleetctl checks the bytes against it)."""
        run_id = request.params["run_id"]
        phase = _choice(request, "phase", EVIDENCE_PHASES)
        remedy = self.s.remedy
        if remedy is None or remedy.run(run_id) is None:
            raise HttpError(404, f"no remediation run {run_id!r}")
        found = remedy.evidence_bundle(run_id, phase)
        if found is None:
            what = f" for phase {phase}" if phase else ""
            raise HttpError(404, f"run {run_id!r} has no evidence bundle{what} on this node")
        return Response.json(
            {
                "node": self.s.node,
                "run_id": found.run_id,
                "phase": found.phase,
                "name": found.name,
                "size": len(found.data),
                "sha256": found.sha256,
                "encoding": "base64",
                "data": base64.b64encode(found.data).decode(),
            }
        )

    def events(self, request: Request) -> Response:
        gpu = _int_arg(request, "gpu", -1, 0, 9999) if request.arg("gpu") else None
        limit = _int_arg(request, "limit", 200, 1, 5000)
        since = _time_arg(request, "since")
        until = _time_arg(request, "until")
        if request.arg("window"):
            window = _duration_arg(request, "window", 0.0, 10 * 365 * 86400.0)
            since = max(since or 0.0, self.s.now() - window)
        kinds = request.query.get("kind")
        try:
            found = self.s.query_events(gpu=gpu, kinds=kinds, since=since, until=until, limit=limit)
        except ValueError as exc:
            raise HttpError(400, str(exc)) from None
        return Response.json(
            {
                "node": self.s.node,
                "now": self.s.now(),
                "events": [event_view(e) for e in found],
            }
        )

    def rules(self, request: Request) -> Response:
        engine = self.s.engine
        reload = engine.reload_status
        return Response.json(
            {
                "node": self.s.node,
                "now": self.s.now(),
                "last_eval_at": engine.last_eval_at,
                "reload": {
                    "successes": reload.successes,
                    "failures": reload.failures,
                    "last_ok": reload.last_ok,
                    "last_problems": list(reload.last_problems),
                },
                "rules": [rule_status_view(x) for x in engine.rule_statuses()],
            }
        )

    def report(self, request: Request) -> Response:
        """Reliability KPIs and rule precision over a window (``fleetd.remedy.kpi``)."""
        reporter = self.s.reliability
        if reporter is None:
            raise HttpError(409, "the reliability report is not available on this node")
        window = _duration_arg(request, "window", reporter.window_s, 90 * 86400.0)
        chosen = None if request.arg("window") in (None, "") else window
        return Response.json(reporter.report(self.s.now(), window_s=chosen).to_dict())

    # ---- actions -----------------------------------------------------------------------
    def drain(self, request: Request) -> Response:
        return self._gpu_run(request, "drain")

    def undrain(self, request: Request) -> Response:
        return self._gpu_run(request, "undrain")

    def _gpu_run(self, request: Request, action: Literal["drain", "undrain"]) -> Response:
        """Start a drain or undrain run on the request's GPU (202 with the run)."""
        body, actor = self._mutation(request, ActionBody)
        index = self._gpu(request)

        def do() -> Json:
            remedy = self._remedy()
            start = remedy.drain if action == "drain" else remedy.undrain
            run_id = start(index, who=actor.describe(), why=body.reason, now=self.s.now())
            return {"run": self._run_view(remedy, run_id)}

        return self._act(
            action, actor, body, f"{action} GPU {index} requested", do, gpu=index, status=202
        )

    def cancel(self, request: Request) -> Response:
        body, actor = self._mutation(request, ActionBody)
        run_id = request.params["run_id"]

        def do() -> Json:
            remedy = self._remedy()
            if remedy.run(run_id) is None:
                raise HttpError(404, f"no remediation run {run_id!r}")
            run = remedy.cancel(run_id, who=actor.describe(), why=body.reason, now=self.s.now())
            return {"run": run_view(run)}

        return self._act("cancel", actor, body, f"cancel remediation run {run_id}", do)

    def pause(self, request: Request) -> Response:
        return self._pause(request, paused=True)

    def _pause(self, request: Request, *, paused: bool) -> Response:
        """Pause or resume automatic remediation (with the pause state after)."""
        body, actor = self._mutation(request, ActionBody)

        def do() -> Json:
            remedy = self._remedy()
            change = remedy.pause if paused else remedy.resume
            change(who=actor.describe(), why=body.reason, now=self.s.now())
            return {"pause": pause_view(remedy.status().paused)}

        if paused:
            return self._act("pause", actor, body, "remediation paused", do)
        return self._act("resume", actor, body, "remediation resumed", do)

    def rma_list(self, request: Request) -> Response:
        """This node's RMA records (one per physical GPU, by serial); ``physical=true``: only
        those that need physical action."""
        physical = _bool_arg(request, "physical")
        remedy = self.s.remedy
        found = [] if remedy is None else remedy.rma_records(physical_only=bool(physical))
        return Response.json({"node": self.s.node, "records": [r.to_dict() for r in found]})

    def rma_one(self, request: Request) -> Response:
        serial = request.params["serial"]
        if not serial or len(serial) > 128:
            raise HttpError(400, "serial must be 1 to 128 characters")
        remedy = self.s.remedy
        found = None if remedy is None else remedy.rma_record(serial)
        if found is None:
            raise HttpError(404, f"no RMA record for serial {serial!r} on node {self.s.node}")
        return Response.json({"node": self.s.node, "record": found.to_dict()})

    def baseline(self, request: Request) -> Response:
        remedy = self._remedy()
        return Response.json({"baselines": [baseline_dict(b) for b in remedy.baselines()]})

    def capture_baseline(self, request: Request) -> Response:
        body, actor = self._mutation(request, ActionBody)

        def do() -> Json:
            remedy = self._remedy()
            taken = remedy.capture_baseline(who=actor.describe(), why=body.reason, now=self.s.now())
            return {"baselines": [baseline_dict(b) for b in taken]}

        return self._act("baseline_capture", actor, body, "benchmark baseline captured", do)

    def resume(self, request: Request) -> Response:
        return self._pause(request, paused=False)

    def reset_breaker(self, request: Request) -> Response:
        body, actor = self._mutation(request, ActionBody)

        def do() -> Json:
            remedy = self._remedy()
            remedy.reset_breaker(who=actor.describe(), now=self.s.now())
            return {"breaker": breaker_view(remedy.status().breaker)}

        return self._act("reset_breaker", actor, body, "circuit breaker reset", do)

    def acknowledge(self, request: Request) -> Response:
        body, actor = self._mutation(request, ActionBody)
        fingerprint = request.params["fingerprint"]

        def do() -> Json:
            try:
                ack = self.s.dispatcher.acknowledge(
                    fingerprint, author=actor.describe(), comment=body.reason, now=self.s.now()
                )
            except KeyError:
                raise HttpError(404, f"no firing alert with fingerprint {fingerprint!r}") from None
            return {
                "acknowledgement": {
                    "fingerprint": ack.fingerprint,
                    "author": ack.author,
                    "comment": ack.comment,
                    "created_at": ack.created_at,
                }
            }

        return self._act("acknowledge", actor, body, f"alert {fingerprint} acknowledged", do)

    def create_silence(self, request: Request) -> Response:
        body, actor = self._mutation(request, SilenceBody)
        now = self.s.now()
        starts, ends = body.window(now)

        def do() -> Json:
            silence = self.s.dispatcher.create_silence(
                body.matchers,
                starts_at=starts,
                ends_at=ends,
                created_by=actor.describe(),
                comment=body.reason,
                now=now,
            )
            return {"silence": silence_view(silence, now)}

        message = f"silence {', '.join(body.matchers)} until {iso8601(ends)}"
        return self._act("silence", actor, body, message, do, status=201)

    def expire_silence(self, request: Request) -> Response:
        body, actor = self._mutation(request, ActionBody)
        silence_id = request.params["silence_id"]

        def do() -> Json:
            now = self.s.now()
            try:
                silence = self.s.dispatcher.expire_silence(silence_id, now)
            except KeyError:
                raise HttpError(404, f"no silence {silence_id!r}") from None
            return {"silence": silence_view(silence, now)}

        return self._act("expire_silence", actor, body, f"silence {silence_id} expired", do)

    def reload(self, request: Request) -> Response:
        body, actor = self._mutation(request, ActionBody)
        callback = self.s.reload

        def do() -> Json:
            if callback is None:
                raise HttpError(409, "this agent cannot reload its configuration")
            failures_before = self.s.engine.reload_status.failures
            try:
                callback()
            except ConfigError as exc:
                raise HttpError(
                    422,
                    "reload rejected; the previous configuration keeps running",
                    details={"problems": [str(p) for p in exc.problems]},
                ) from None
            reload = self.s.engine.reload_status
            if reload.failures > failures_before:
                raise HttpError(
                    422,
                    "rules reload rejected; the previous rules keep running",
                    details={"problems": list(reload.last_problems)},
                )
            return {
                "reloaded": True,
                "rules": {"last_ok": reload.last_ok, "last_problems": list(reload.last_problems)},
            }

        return self._act("reload", actor, body, "configuration reload requested", do)
