"""An in-process stand-in for `vllm serve`, its systemd unit and a load balancer's rotation.

Tests and ``fleetd demo`` need vLLM workers that behave like the real thing where
remediation looks: real HTTP on loopback serving ``/health``, ``/v1/models``,
``/v1/completions`` and ``/metrics`` (``vllm:num_requests_running``,
``vllm:num_requests_waiting``, ``vllm:generation_tokens_total``,
``vllm:request_success_total``); in-flight requests that finish as the *injected* clock
moves; a unit that stops (aborting what is left, as vLLM without --shutdown-timeout does) and
starts (loading for ``startup_s`` before it answers); and a process registered on the
simulated GPUs so the release check sees it and a hive reset kills it.

A *hung engine* (``hang_engine``, or a scenario's ``workers`` step ``engine: hung``) is the
most reported vLLM hang (vllm-project/vllm#39863): ``/health`` and ``/v1/models`` still answer
200, but the running requests fall back to the queue (``Running: 0, Waiting: N``, KV cache
0 %), no token is generated, and a completion is queued and never answered.

``StandInFleet`` runs several workers plus one control server that a stand-in ``systemctl``
script (written into a ``bin`` directory the test puts first on PATH) and a load balancer
hook (HTTP ``/rotation/<worker>/out|in``) talk to.
"""

from __future__ import annotations

import json
import math
import shutil
import stat
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any, Literal, Protocol

from fleetd.clock import Clock
from fleetd.sim.loopback import LoopbackHTTPServer

UnitState = Literal["active", "activating", "inactive", "failed"]
EngineMode = Literal["ok", "hung"]
HUNG_REPLY_LIMIT_S = 30.0
"""Longest (real) time a completion sent to a hung engine is held before the connection drops;
the client's own timeout is normally far shorter."""


class ProcessTable(Protocol):
    """Where a worker registers its process: ``fleetd.sim`` SimNode has these."""

    def add_process(
        self,
        gpu: int,
        pid: int,
        name: str,
        vram_bytes: int,
        on_kill: Callable[[int], None] | None = None,
    ) -> None: ...

    def remove_process(self, pid: int) -> bool: ...


class WorkerPlan(Protocol):
    """A scenario's worker step (``fleetd.sim.scenario.WorkerStep``)."""

    @property
    def at(self) -> float: ...
    @property
    def worker(self) -> str: ...
    @property
    def engine(self) -> EngineMode | None: ...
    @property
    def speed(self) -> float | None: ...
    @property
    def prompt_tokens(self) -> int | None: ...


@dataclass
class _Request:
    duration: float  # what is left, in seconds at full GPU speed
    tokens_per_s: float  # at full speed
    arrived: float = 0.0
    started: float | None = None
    first_started: float | None = None
    speed: float = 1.0  # the GPUs' speed (0-1] when it (re)started
    decode_s: float = 0.0
    tokens: float = 0.0  # generated so far

    def finish_at(self) -> float:
        assert self.started is not None
        return self.started + self.duration / self.speed

    def rate(self) -> float:
        return self.tokens_per_s * self.speed


# vLLM's own bucket bounds (vllm/v1/metrics/loggers.py), so the stand-in's histograms have the
# layout fleetd meets in production
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
                7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)  # fmt: skip
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
               10.0, 20.0, 40.0, 80.0)  # fmt: skip
REQUEST_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
                   60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)  # fmt: skip
PREFILL_S = 0.08  # prefill of the stand-in's prompt at full speed
PROMPT_TOKENS = 512
# a streamed completion (the readmission benchmark's probe) takes real time, at the GPUs' speed
STREAM_TTFT_S = 0.03
STREAM_ITL_S = 0.008
PREFIX_HIT_SHARE = 0.25  # of prompt tokens found in the prefix cache (a shared system prompt)
HISTOGRAMS = (
    ("vllm:time_to_first_token_seconds", TTFT_BUCKETS),
    ("vllm:inter_token_latency_seconds", ITL_BUCKETS),
    ("vllm:e2e_request_latency_seconds", REQUEST_BUCKETS),
    ("vllm:request_queue_time_seconds", REQUEST_BUCKETS),
    ("vllm:request_prefill_time_seconds", REQUEST_BUCKETS),
    ("vllm:request_decode_time_seconds", REQUEST_BUCKETS),
)


class _Hist:
    """A cumulative histogram as vLLM's prometheus_client one renders it."""

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0.0] * (len(self.bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float, times: float = 1.0) -> None:
        index = next((i for i, b in enumerate(self.bounds) if value <= b), len(self.bounds))
        self.counts[index] += times
        self.sum += value * times

    def text(self, name: str, labels: str) -> str:
        lines = [f"# HELP {name} Histogram.", f"# TYPE {name} histogram"]
        running = 0.0
        for bound, count in zip((*self.bounds, math.inf), self.counts, strict=True):
            running += count
            le = "+Inf" if bound == math.inf else repr(float(bound))
            lines.append(f'{name}_bucket{{{labels},le="{le}"}} {running}')
        lines.append(f"{name}_sum{{{labels}}} {self.sum}")
        lines.append(f"{name}_count{{{labels}}} {running}")
        return "\n".join(lines) + "\n"


def sim_speed(node: object, gpus: Sequence[int], *, busy: bool = False) -> float:
    """How fast the worker's GPUs run now, 0-1, for the slowest GPU (a tensor-parallel step
    waits for it): its gfx clock over what it would be at its load unthrottled, times the host
    link's share of its full bandwidth (a link trained down to half costs a quarter: the
    stand-in's model of the host traffic in every decode step). ``busy``: as the GPU would run
    the request being answered even when the node's load says idle (a probe right after a
    reset, whose clocks may be latched low)."""
    speeds = [1.0]
    sim_gpus = getattr(node, "gpus", None)
    clock_of = getattr(node, "gfx_clock_mhz", None)
    factor_of = getattr(node, "throttle_factor", None)
    link_of = getattr(node, "pcie_link", None)
    if sim_gpus is None or clock_of is None:
        return 1.0
    # the node as of its last poll: advancing it from an HTTP thread would race the poller
    for index in gpus:
        if not 0 <= index < len(sim_gpus):
            continue
        gpu = sim_gpus[index]
        lo, hi = gpu.spec.gfx_clk_mhz
        if gpu.load < 0.02:
            if not busy or factor_of is None:
                continue
            speed = min(1.0, max(0.05, factor_of(gpu)))
        else:
            nominal = lo + (hi - lo) * (0.55 + 0.45 * gpu.load)
            speed = min(1.0, max(0.05, clock_of(gpu) / nominal))
        if link_of is not None:
            width, mts = link_of(index)
            full = gpu.spec.pcie_max_width * gpu.spec.pcie_max_speed_mts
            speed *= 0.5 + 0.5 * min(1.0, width * mts / full)
        speeds.append(speed)
    return min(speeds)


class StandInVllm:
    """One stand-in vLLM server. Thread-safe: HTTP threads and the test both touch it."""

    def __init__(
        self,
        name: str,
        gpus: Sequence[int],
        *,
        clock: Clock,
        model: str = "stand-in/llama",
        unit: str | None = None,
        processes: ProcessTable | None = None,
        pid_base: int = 40_000,
        startup_s: float = 0.0,
        max_running: int = 8,
        tokens_per_s: float = 40.0,
        vram_bytes: int = 150 * 2**30,
    ) -> None:
        self.name = name
        self.gpus = tuple(gpus)
        self.model = model
        self.unit = unit or f"vllm-{name}.service"
        self.startup_s = startup_s
        self.max_running = max_running
        self.tokens_per_s = tokens_per_s
        self.fail_start = False  # a worker that never comes back after a start
        # a worker that enforces its own drain (or a broken engine) refuses completions
        self.refuse_completions_while: Callable[[], bool] = lambda: False
        self.in_rotation = True
        self.starts = 0
        self.stops = 0
        self.aborted = 0
        self.completed = 0
        self._clock = clock
        self._processes = processes
        self._pid_base = pid_base
        self._vram = vram_bytes
        self._lock = threading.RLock()
        self._state: UnitState = "inactive"
        self._ready_at = 0.0
        self._pid: int | None = None
        self._running: list[_Request] = []
        self._waiting: deque[_Request] = deque()
        self._done_tokens = 0.0
        self._engine: EngineMode = "ok"
        # (clock time, engine mode or a change of speed/prompt length), sorted by time
        self._engine_plan: list[tuple[float, EngineMode | Callable[[], None]]] = []
        self.held_completions = 0  # completions a hung engine has queued and never answered
        self._closed = False
        self.speed: Callable[[], float] = lambda: 1.0  # the GPUs' speed now, 0-1
        # a streamed reply's speed (the GPUs busy with it); unset: ``speed``
        self.probe_speed: Callable[[], float] | None = None
        self.engine_speed = 1.0  # < 1: a slow engine on healthy GPUs (a bad build, a setting)
        self.batch_penalty = 0.0  # per extra running request: bigger batches decode slower
        self.prompt_tokens = PROMPT_TOKENS  # per request; prefill time grows with it
        self._hists = {name: _Hist(bounds) for name, bounds in HISTOGRAMS}
        self._prompt_tokens = 0.0
        self._server = LoopbackHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), name=f"standin-{name}", daemon=True
        )
        self._thread.start()

    # ---- identity ------------------------------------------------------------------------
    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def pid(self) -> int | None:
        with self._lock:
            return self._pid

    def close(self) -> None:
        with self._lock:
            self._closed = True  # a completion held by a hung engine is let go
            self._unregister()
            self._state = "inactive"
        self._server.shutdown()
        self._server.server_close()

    # ---- the unit ------------------------------------------------------------------------
    def state(self) -> UnitState:
        with self._lock:
            ready = self._clock.now() >= self._ready_at
            if self._state == "activating" and not self.fail_start and ready:
                self._state = "active"
            return self._state

    def start_unit(self) -> None:
        """``systemctl start``: a new process; serves once the model has loaded."""
        with self._lock:
            if self._state in ("active", "activating"):
                return
            self.starts += 1
            self._pid = self._pid_base + self.starts
            self._ready_at = self._clock.now() + self.startup_s
            self._state = "activating"
            if self._processes is not None:
                for gpu in self.gpus:
                    self._processes.add_process(
                        gpu, self._pid, "python3 -m vllm serve", self._vram, self._killed
                    )
        self.state()

    def stop_unit(self) -> None:
        """``systemctl stop``: whatever is still in flight is aborted; the process exits."""
        with self._lock:
            if self._state == "inactive":
                return
            self._advance()
            self.stops += 1
            self.aborted += len(self._running) + len(self._waiting)
            self._running.clear()
            self._waiting.clear()
            self._unregister()
            self._state = "inactive"

    def _killed(self, pid: int) -> None:
        """A hive reset tore the process down: the unit fails (vLLM's engine died)."""
        with self._lock:
            if pid != self._pid:
                return
            self._advance()
            self.aborted += len(self._running) + len(self._waiting)
            self._running.clear()
            self._waiting.clear()
            self._pid = None
            self._state = "failed"

    def _unregister(self) -> None:
        if self._pid is not None and self._processes is not None:
            self._processes.remove_process(self._pid)
        self._pid = None

    # ---- the engine ----------------------------------------------------------------------
    def hang_engine(self, at: float | None = None) -> None:
        """The engine hangs at ``at`` (default now) while the server keeps answering health."""
        self.plan_engine("hung", at)

    def resume_engine(self, at: float | None = None) -> None:
        """The engine makes progress again at ``at`` (default now)."""
        self.plan_engine("ok", at)

    def plan_engine(self, mode: EngineMode, at: float | None = None) -> None:
        with self._lock:
            when = self._clock.now() if at is None else at
            self._engine_plan.append((when, mode))
            self._engine_plan.sort(key=lambda item: item[0])
            self._advance()

    def plan_change(self, at: float, change: Callable[[], None]) -> None:
        """Apply ``change`` (e.g. a slower engine, longer prompts) at clock time ``at``."""
        with self._lock:
            self._engine_plan.append((at, change))
            self._engine_plan.sort(key=lambda item: item[0])
            self._advance()

    def engine_mode(self) -> EngineMode:
        with self._lock:
            self._advance()
            return self._engine

    def _set_engine(self, mode: EngineMode, at: float) -> None:
        if mode == self._engine:
            return
        if mode == "hung":
            # what ran until now is generated; the rest goes back to the head of the queue
            for req in sorted(self._running, key=lambda r: r.started or at, reverse=True):
                ran = max(0.0, at - (req.started or at))
                self._done_tokens += req.rate() * ran
                req.tokens += req.rate() * ran
                req.decode_s += ran
                req.duration = max(0.0, req.duration - ran * req.speed)
                req.started = None
                self._waiting.appendleft(req)
            self._running.clear()
        else:
            while self._waiting and len(self._running) < self.max_running:
                self._start(self._waiting.popleft(), at)
        self._engine = mode

    def _start(self, req: _Request, at: float) -> None:
        req.started = at
        batch = 1.0 + self.batch_penalty * len(self._running)
        req.speed = self.speed() * self.engine_speed / batch
        if req.first_started is None:
            req.first_started = at
        self._running.append(req)

    def _observe(self, req: _Request, at: float) -> None:
        """A finished request's latencies, as vLLM records them (prefill at the GPUs' speed)."""
        assert req.first_started is not None
        queue = req.first_started - req.arrived
        prefill = PREFILL_S * self.prompt_tokens / PROMPT_TOKENS / req.speed
        hists = self._hists
        hists["vllm:time_to_first_token_seconds"].observe(queue + prefill)
        if req.tokens > 0:
            hists["vllm:inter_token_latency_seconds"].observe(req.decode_s / req.tokens, req.tokens)
        hists["vllm:e2e_request_latency_seconds"].observe(at - req.arrived + prefill)
        hists["vllm:request_queue_time_seconds"].observe(queue)
        hists["vllm:request_prefill_time_seconds"].observe(prefill)
        hists["vllm:request_decode_time_seconds"].observe(req.decode_s)
        self._prompt_tokens += self.prompt_tokens

    # ---- requests ------------------------------------------------------------------------
    def add_requests(self, count: int, duration_s: float) -> None:
        """Requests arriving now, each taking ``duration_s`` of clock time once running."""
        with self._lock:
            if self.state() != "active":
                raise ConnectionError(f"{self.name} is not serving")
            self._advance()
            now = self._clock.now()
            for _ in range(count):
                req = _Request(duration_s, self.tokens_per_s, arrived=now)
                if self._engine == "ok" and len(self._running) < self.max_running:
                    self._start(req, now)
                else:
                    self._waiting.append(req)

    def load(self) -> tuple[int, int]:
        """(running, waiting) now."""
        with self._lock:
            self._advance()
            return len(self._running), len(self._waiting)

    def generation_tokens(self) -> float:
        with self._lock:
            self._advance()
            now = self._clock.now()
            partial = sum(r.rate() * (now - (r.started or now)) for r in self._running)
            return self._done_tokens + partial

    def _advance(self) -> None:
        """Finish every request whose time has come, starting queued ones in their place;
        engine mode changes take effect at their own time."""
        now = self._clock.now()
        while self._engine_plan and self._engine_plan[0][0] <= now:
            at, mode = self._engine_plan.pop(0)
            self._progress(at)
            if callable(mode):
                mode()
            else:
                self._set_engine(mode, at)
        self._progress(now)

    def _progress(self, now: float) -> None:
        if self._engine == "hung":
            return
        while self._running:
            first = min(self._running, key=lambda r: r.finish_at())
            at = first.finish_at()
            if at > now:
                break
            self._running.remove(first)
            assert first.started is not None
            ran = at - first.started
            self._done_tokens += first.rate() * ran
            first.tokens += first.rate() * ran
            first.decode_s += ran
            self.completed += 1
            self._observe(first, at)
            if self._waiting:
                self._start(self._waiting.popleft(), at)

    def wait_for_engine(self, limit_s: float = HUNG_REPLY_LIMIT_S) -> bool:
        """A completion's wait for the engine (an HTTP thread): True at once while it works;
        held in the queue while it is hung — for as long as the client waits, up to
        ``limit_s`` of real time — and False if it never came back."""
        if self.engine_mode() == "ok":
            return True
        with self._lock:
            self.held_completions += 1
        try:
            stop = threading.Event()
            deadline = time.monotonic() + limit_s
            while time.monotonic() < deadline and not self._closed:
                if self.engine_mode() == "ok":
                    return True
                stop.wait(0.05)  # another thread (the test's clock) decides; not a test sleep
            return False
        finally:
            with self._lock:
                self.held_completions -= 1

    # ---- HTTP views ----------------------------------------------------------------------
    def metrics_text(self) -> str:
        running, waiting = self.load()
        waiting += self.held_completions
        labels = f'model_name="{self.model}",engine="0"'
        tokens = self.generation_tokens()
        kv = round(0.9 * running / self.max_running, 4) if self.max_running else 0.0
        return (
            "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
            "# TYPE vllm:num_requests_running gauge\n"
            f"vllm:num_requests_running{{{labels}}} {float(running)}\n"
            "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n"
            "# TYPE vllm:num_requests_waiting gauge\n"
            f"vllm:num_requests_waiting{{{labels}}} {float(waiting)}\n"
            "# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.\n"
            "# TYPE vllm:kv_cache_usage_perc gauge\n"
            f"vllm:kv_cache_usage_perc{{{labels}}} {kv}\n"
            "# HELP vllm:generation_tokens_total Number of generation tokens processed.\n"
            "# TYPE vllm:generation_tokens_total counter\n"
            f"vllm:generation_tokens_total{{{labels}}} {tokens}\n"
            "# HELP vllm:request_success_total Count of successfully processed requests.\n"
            "# TYPE vllm:request_success_total counter\n"
            f'vllm:request_success_total{{{labels},finished_reason="stop"}} '
            f"{float(self.completed)}\n"
            f'vllm:request_success_total{{{labels},finished_reason="abort"}} '
            f"{float(self.aborted)}\n"
            "# HELP vllm:prompt_tokens_total Number of prefill tokens processed.\n"
            "# TYPE vllm:prompt_tokens_total counter\n"
            f"vllm:prompt_tokens_total{{{labels}}} {self._prompt_tokens}\n"
            "# HELP vllm:prefix_cache_queries_total Prefix-cache queries, in tokens.\n"
            "# TYPE vllm:prefix_cache_queries_total counter\n"
            f"vllm:prefix_cache_queries_total{{{labels}}} {self._prompt_tokens}\n"
            "# HELP vllm:prefix_cache_hits_total Prefix-cache hits, in tokens.\n"
            "# TYPE vllm:prefix_cache_hits_total counter\n"
            f"vllm:prefix_cache_hits_total{{{labels}}} {self._prompt_tokens * PREFIX_HIT_SHARE}\n"
            "# HELP vllm:num_preemptions_total Cumulative number of preemptions.\n"
            "# TYPE vllm:num_preemptions_total counter\n"
            f"vllm:num_preemptions_total{{{labels}}} 0.0\n" + self._histograms_text(labels)
        )

    def _histograms_text(self, labels: str) -> str:
        with self._lock:
            return "".join(h.text(name, labels) for name, h in self._hists.items())


class _QuietHandler(BaseHTTPRequestHandler):
    """HTTP/1.1 keep-alive, no Nagle delay, and no line per request on stderr."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out in two writes

    def log_message(self, format: str, *args: Any) -> None:
        pass


def _handler_for(worker: StandInVllm) -> type[BaseHTTPRequestHandler]:
    class Handler(_QuietHandler):
        def _serving(self) -> bool:
            if worker.state() == "active":
                return True
            # not listening (stopped, loading, dead): the client sees the connection drop
            self.close_connection = True
            return False

        def _send(self, code: int, body: bytes, ctype: str = "application/json") -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            if not self._serving():
                return
            if self.path == "/health":
                self._send(200, b"")
            elif self.path == "/v1/models":
                data = {
                    "object": "list",
                    "data": [{"id": worker.model, "object": "model", "owned_by": "vllm"}],
                }
                self._send(200, json.dumps(data).encode())
            elif self.path == "/metrics":
                self._send(200, worker.metrics_text().encode(), "text/plain; version=0.0.4")
            else:
                self._send(404, b'{"error": "not found"}')

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            if not self._serving():
                return
            if self.path != "/v1/completions":
                self._send(404, b'{"error": "not found"}')
                return
            try:
                request = json.loads(body or b"{}")
            except json.JSONDecodeError:
                self._send(400, b'{"error": "invalid JSON"}')
                return
            if request.get("model") != worker.model:
                self._send(404, b'{"error": "model not found"}')
                return
            if worker.refuse_completions_while():
                self._send(503, b'{"error": "draining: not accepting requests"}')
                return
            if not worker.wait_for_engine():
                self.close_connection = True  # queued behind a hung engine: never answered
                return
            if request.get("stream"):
                self._stream(int(request.get("max_tokens") or 16))
                return
            reply = {
                "id": "cmpl-standin",
                "object": "text_completion",
                "model": worker.model,
                "choices": [{"index": 0, "text": " ok", "finish_reason": "length"}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            }
            self._send(200, json.dumps(reply).encode())

        def _stream(self, tokens: int) -> None:
            """Server-sent events, one token a chunk, paced by the simulated GPUs' speed now
            (clocks latched low make it slower), as vLLM streams a completion."""
            gpus = worker.probe_speed() if worker.probe_speed is not None else worker.speed()
            speed = max(0.05, gpus * worker.engine_speed)
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")  # as uvicorn streams it
            self.end_headers()
            pause = threading.Event()
            for i in range(min(tokens, 4096)):
                # pacing a reply in wall time is the stand-in's model of the GPU, not a test wait
                pause.wait((STREAM_TTFT_S if i == 0 else STREAM_ITL_S) / speed)
                chunk = {
                    "object": "text_completion",
                    "model": worker.model,
                    "choices": [{"index": 0, "text": f" t{i}"}],
                }
                self._chunk(f"data: {json.dumps(chunk)}\n\n".encode())
            self._chunk(b"data: [DONE]\n\n")
            self._chunk(b"")

        def _chunk(self, data: bytes) -> None:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

    return Handler


# ---------------------------------------------------------------------------------- the fleet
class StandInFleet:
    """Stand-in workers on one node plus their unit/rotation control server and ``systemctl``.

    The control server answers ``POST /units/<unit>/<start|stop|restart>``,
    ``GET /units/<unit>/is-active`` and ``POST /rotation/<worker>/<out|in>``.
    """

    def __init__(
        self, directory: Path, *, clock: Clock, processes: ProcessTable | None = None
    ) -> None:
        self.workers: dict[str, StandInVllm] = {}
        self.rotation_log: list[tuple[str, str]] = []
        self._clock = clock
        self._processes = processes
        self._control = LoopbackHTTPServer(("127.0.0.1", 0), _control_handler(self))
        threading.Thread(
            target=self._control.serve_forever, args=(0.05,), name="standin-control", daemon=True
        ).start()
        self.bin_dir = Path(directory) / "bin"
        self.bin_dir.mkdir(parents=True, exist_ok=True)
        self.systemctl = self.bin_dir / "systemctl"
        script = (
            _SYSTEMCTL_SH.format(url=self.control_url, curl=curl)
            if (curl := shutil.which("curl"))
            else _SYSTEMCTL.format(python=sys.executable, url=self.control_url)
        )
        self.systemctl.write_text(script)
        self.systemctl.chmod(self.systemctl.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP)

    @property
    def control_url(self) -> str:
        host, port = self._control.server_address[:2]
        return f"http://{host!s}:{port}"

    def add(self, name: str, gpus: Sequence[int], **kwargs: Any) -> StandInVllm:
        """A worker whose unit is already started (and, with ``startup_s`` 0, serving)."""
        kwargs.setdefault("unit", f"vllm@{name}.service")
        kwargs.setdefault("pid_base", 40_000 + 1_000 * len(self.workers))
        worker = StandInVllm(name, gpus, clock=self._clock, processes=self._processes, **kwargs)
        if self._processes is not None:
            node, served = self._processes, tuple(gpus)
            worker.speed = lambda: sim_speed(node, served)
            worker.probe_speed = lambda: sim_speed(node, served, busy=True)
        self.workers[name] = worker
        worker.start_unit()
        return worker

    def follow(self, steps: Sequence[WorkerPlan], start: float) -> list[str]:
        """Schedule a scenario's ``workers`` steps (scenario time from ``start``); returns the
        steps naming no worker of this fleet (they are skipped)."""
        unknown: list[str] = []
        for step in steps:
            worker = self.workers.get(step.worker)
            if worker is None:
                unknown.append(step.worker)
                continue
            at = start + step.at
            if step.engine is not None:
                worker.plan_engine(step.engine, at)
            if step.speed is not None:
                worker.plan_change(at, _setter(worker, "engine_speed", step.speed))
            if step.prompt_tokens is not None:
                worker.plan_change(at, _setter(worker, "prompt_tokens", step.prompt_tokens))
        return unknown

    def by_unit(self, unit: str) -> StandInVllm | None:
        for worker in self.workers.values():
            if worker.unit == unit or worker.unit == f"{unit}.service":
                return worker
        return None

    def rotation_urls(self) -> tuple[str, str]:
        """(out_url, in_url) templates for the rotation hook's HTTP form."""
        return (
            f"{self.control_url}/rotation/{{worker}}/out",
            f"{self.control_url}/rotation/{{worker}}/in",
        )

    def worker_config(self) -> list[dict[str, Any]]:
        """The stand-ins as fleetd.yaml's ``vllm.workers`` lists them."""
        return [
            {"name": name, "url": w.url, "gpus": list(w.gpus), "unit": w.unit, "model": w.model}
            for name, w in self.workers.items()
        ]

    def close(self) -> None:
        for worker in self.workers.values():
            worker.close()
        self._control.shutdown()
        self._control.server_close()


def _setter(worker: StandInVllm, name: str, value: float) -> Callable[[], None]:
    def apply() -> None:
        setattr(worker, name, value)

    return apply


def _control_handler(fleet: StandInFleet) -> type[BaseHTTPRequestHandler]:
    class Handler(_QuietHandler):
        def _send(self, code: int, text: str) -> None:
            body = text.encode()
            self.send_response(code)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _parts(self) -> list[str]:
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            return [p for p in self.path.split("/") if p]

        def do_GET(self) -> None:
            parts = self._parts()
            if len(parts) == 3 and parts[0] == "units" and parts[2] == "is-active":
                worker = fleet.by_unit(parts[1])
                self._send(200, worker.state() if worker is not None else "inactive")
                return
            self._send(404, "not found")

        def do_POST(self) -> None:
            parts = self._parts()
            if len(parts) == 3 and parts[0] == "units":
                worker = fleet.by_unit(parts[1])
                if worker is None:
                    self._send(404, f"Unit {parts[1]} not found.")
                    return
                verb = parts[2]
                if verb in ("stop", "restart"):
                    worker.stop_unit()
                if verb in ("start", "restart"):
                    worker.start_unit()
                if verb not in ("start", "stop", "restart"):
                    self._send(400, f"unknown verb {verb}")
                    return
                self._send(200, worker.state())
                return
            if len(parts) == 3 and parts[0] == "rotation" and parts[2] in ("out", "in"):
                found = fleet.workers.get(parts[1])
                if found is None:
                    self._send(404, f"no worker {parts[1]}")
                    return
                found.in_rotation = parts[2] == "in"
                fleet.rotation_log.append((parts[1], parts[2]))
                self._send(200, parts[2])
                return
            self._send(404, "not found")

    return Handler


_SYSTEMCTL_SH = """#!/bin/sh
# Stand-in systemctl for fleetd tests (curl form: a Python start-up per call is too slow).
URL="{url}"
quiet=0; verb=""; unit=""
for a in "$@"; do
  case "$a" in
    -q|--quiet) quiet=1 ;;
    -*) ;;
    *) if [ -z "$verb" ]; then verb="$a"; elif [ -z "$unit" ]; then unit="$a";
       else echo "usage: systemctl start|stop|restart|is-active UNIT" >&2; exit 2; fi ;;
  esac
done
if [ -z "$verb" ] || [ -z "$unit" ]; then
  echo "usage: systemctl start|stop|restart|is-active UNIT" >&2; exit 2
fi
if [ "$verb" = "is-active" ]; then
  state=$("{curl}" -sS --max-time 10 "$URL/units/$unit/is-active") || exit 1
  [ "$quiet" = 1 ] || echo "$state"
  [ "$state" = "active" ] && exit 0
  exit 3
fi
out=$("{curl}" -sS --max-time 10 -X POST -w '\\n%{{http_code}}' "$URL/units/$unit/$verb") || exit 1
code=$(printf '%s\\n' "$out" | tail -n 1)
[ "$code" = "200" ] && exit 0
printf '%s\\n' "$out" | sed '$d' >&2
exit 5
"""

_SYSTEMCTL = '''#!{python} -I
"""Stand-in systemctl for fleetd tests: start/stop/restart/is-active on stand-in vLLM units."""
import sys
import urllib.error
import urllib.request

URL = "{url}"
args = [a for a in sys.argv[1:] if not a.startswith("-")]
quiet = "--quiet" in sys.argv or "-q" in sys.argv
if len(args) != 2:
    print("usage: systemctl start|stop|restart|is-active UNIT", file=sys.stderr)
    sys.exit(2)
verb, unit = args
method = "GET" if verb == "is-active" else "POST"
request = urllib.request.Request(f"{{URL}}/units/{{unit}}/{{verb}}", method=method, data=None)
try:
    with urllib.request.urlopen(request, timeout=10) as response:
        state = response.read().decode()
except urllib.error.HTTPError as exc:
    print(exc.read().decode() or str(exc), file=sys.stderr)
    sys.exit(5)
if verb == "is-active":
    if not quiet:
        print(state)
    sys.exit(0 if state == "active" else 3)
sys.exit(0)
'''
