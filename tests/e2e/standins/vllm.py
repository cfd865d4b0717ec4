"""Eight vLLM-like workers with a drain model, their systemd units, and a load balancer.

Each ``Worker`` is its own HTTP server on loopback (a thread server in the test process,
independent of the daemon) serving ``/health``, ``/v1/models``, ``/v1/completions`` (a
1-token completion) and ``/metrics`` (``vllm:num_requests_running``,
``vllm:num_requests_waiting``, ``vllm:kv_cache_usage_perc``, ``vllm:generation_tokens_total``,
``vllm:request_success_total{finished_reason}``, labelled ``model_name`` and ``engine`` as
vLLM's V1 engine does — what fleetd/vllm/metrics.py reads for the collector and the drain).

The drain model, on real (monotonic) time: while a worker is in rotation the balancer keeps
``concurrency`` requests on it (``max_running`` run, the rest wait), each taking
``request_s``; once it is out of rotation no new request arrives and the in-flight ones finish
over time. ``systemctl stop`` aborts whatever is left (vLLM's default --shutdown-timeout 0);
``start`` loads for ``startup_s`` before the server answers; a stopped or loading server
drops every connection. With ``enforce_drain`` the worker itself rejects completions (503)
while out of rotation, as a vLLM behind a drain-aware router would.

``WorkerFleet`` adds one control server and two scripts in ``bin/``: ``systemctl``
(``stop|start|is-active UNIT``, the argument vectors fleetd/remedy/workers/systemd.py runs)
and ``vllm-rotation`` (``out|in WORKER URL``, the example config's rotation hook). Every call
is recorded with its time and exit code; an argument vector of any other shape is refused
(exit 2) and recorded as a problem.
"""

from __future__ import annotations

import json
import shutil
import stat
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

from fleetd.sim.loopback import LoopbackHTTPServer


@dataclass(frozen=True)
class Command:
    """One run of a stand-in script, as the control server saw it."""

    at: float
    argv: tuple[str, ...]
    code: int
    stdout: str = ""
    problem: str | None = None


@dataclass
class WorkerOptions:
    concurrency: int = 3
    max_running: int = 2
    request_s: float = 2.0
    startup_s: float = 1.0
    enforce_drain: bool = False
    model: str = "meta-llama/Llama-3.3-70B-Instruct"


@dataclass
class WorkerStats:
    completed: int = 0
    aborted: int = 0
    starts: int = 0
    stops: int = 0
    stopped_in_rotation: int = 0
    completions_served: int = 0
    completions_rejected: int = 0
    timeline: list[tuple[float, str]] = field(default_factory=list)  # (time.time(), what)


class Worker:
    """One stand-in ``vllm serve`` and its unit; thread-safe."""

    def __init__(self, name: str, unit: str, options: WorkerOptions) -> None:
        self.name = name
        self.unit = unit
        self.options = options
        self.stats = WorkerStats()
        self._lock = threading.RLock()
        self._state = "active"
        self._ready_at = 0.0
        self.in_rotation = True
        self._running: list[float] = []  # monotonic end times
        self._waiting = 0
        self._tokens = 0.0
        self._fill(time.monotonic(), stagger=True)
        self._server = LoopbackHTTPServer(("127.0.0.1", 0), _worker_handler(self))
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), name=f"vllm-{name}", daemon=True
        )
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)

    # ---- the model -------------------------------------------------------------------------
    def _note(self, what: str) -> None:
        self.stats.timeline.append((time.time(), what))

    def _fill(self, now: float, *, stagger: bool = False) -> None:
        """The balancer tops the worker up to ``concurrency`` requests."""
        o = self.options
        while len(self._running) + self._waiting < o.concurrency:
            if len(self._running) < o.max_running:
                share = (len(self._running) + 1) / o.max_running if stagger else 1.0
                self._running.append(now + o.request_s * share)
            else:
                self._waiting += 1

    def _advance(self, now: float) -> None:
        """Finish every request whose time has come; the balancer sends more while routed."""
        o = self.options
        while self._running:
            end = min(self._running)
            if end > now:
                break
            self._running.remove(end)
            self.stats.completed += 1
            self._tokens += 40.0 * o.request_s
            if self.in_rotation and self._state == "active":
                self._waiting += 1  # the next request from the balancer
            if self._waiting:
                self._waiting -= 1
                self._running.append(end + o.request_s)
        if self._state == "activating" and now >= self._ready_at:
            self._state = "active"
            self._note("active")

    def state(self) -> str:
        with self._lock:
            self._advance(time.monotonic())
            return self._state

    def load(self) -> tuple[int, int]:
        with self._lock:
            self._advance(time.monotonic())
            return len(self._running), self._waiting

    def rotate(self, direction: str) -> None:
        with self._lock:
            now = time.monotonic()
            self._advance(now)
            self.in_rotation = direction == "in"
            if self.in_rotation and self._state == "active":
                self._fill(now)
            self._note(f"rotation {direction}")

    def stop_unit(self) -> None:
        with self._lock:
            self._advance(time.monotonic())
            if self._state == "inactive":
                return
            self.stats.stops += 1
            if self.in_rotation:
                self.stats.stopped_in_rotation += 1
            self.stats.aborted += len(self._running) + self._waiting
            self._running.clear()
            self._waiting = 0
            self._state = "inactive"
            self._note("stopped")

    def start_unit(self) -> None:
        with self._lock:
            if self._state in ("active", "activating"):
                return
            self.stats.starts += 1
            self._ready_at = time.monotonic() + self.options.startup_s
            self._state = "activating"
            self._note("starting")

    # ---- HTTP views ----------------------------------------------------------------------
    def metrics_text(self) -> str:
        with self._lock:
            running, waiting = self.load()
            labels = f'model_name="{self.options.model}",engine="0"'
            kv = min(1.0, 0.1 * (running + waiting))
            lines = [
                "# HELP vllm:num_requests_running Number of requests in model execution batches.",
                "# TYPE vllm:num_requests_running gauge",
                f"vllm:num_requests_running{{{labels}}} {float(running)}",
                "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.",
                "# TYPE vllm:num_requests_waiting gauge",
                f"vllm:num_requests_waiting{{{labels}}} {float(waiting)}",
                "# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.",
                "# TYPE vllm:kv_cache_usage_perc gauge",
                f"vllm:kv_cache_usage_perc{{{labels}}} {kv}",
                "# HELP vllm:generation_tokens_total Number of generation tokens processed.",
                "# TYPE vllm:generation_tokens_total counter",
                f"vllm:generation_tokens_total{{{labels}}} {self._tokens}",
                "# HELP vllm:request_success_total Count of successfully processed requests.",
                "# TYPE vllm:request_success_total counter",
                f'vllm:request_success_total{{{labels},finished_reason="stop"}} '
                f"{float(self.stats.completed)}",
                f'vllm:request_success_total{{{labels},finished_reason="abort"}} '
                f"{float(self.stats.aborted)}",
            ]
            return "\n".join(lines) + "\n"

    def complete(self, request: Any) -> tuple[int, dict[str, Any]]:
        """A 1-token completion, or why not."""
        with self._lock:
            if not isinstance(request, dict) or request.get("model") != self.options.model:
                return 404, {"error": {"message": "model not found", "code": 404}}
            if self.options.enforce_drain and not self.in_rotation:
                self.stats.completions_rejected += 1
                return 503, {"error": {"message": "draining: out of rotation", "code": 503}}
            self.stats.completions_served += 1
            return 200, {
                "id": f"cmpl-{self.name}-{self.stats.completions_served}",
                "object": "text_completion",
                "model": self.options.model,
                "choices": [{"index": 0, "text": " ok", "finish_reason": "length"}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            }


def _worker_handler(worker: Worker) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _send(self, code: int, body: bytes, ctype: str = "application/json") -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _serving(self) -> bool:
            if worker.state() == "active":
                return True
            self.close_connection = True  # stopped or loading: nothing answers
            return False

        def do_GET(self) -> None:
            if not self._serving():
                return
            if self.path == "/health":
                self._send(200, b"")
            elif self.path == "/v1/models":
                model = {"id": worker.options.model, "object": "model", "owned_by": "vllm"}
                self._send(200, json.dumps({"object": "list", "data": [model]}).encode())
            elif self.path == "/metrics":
                self._send(200, worker.metrics_text().encode(), "text/plain; version=0.0.4")
            else:
                self._send(404, b'{"detail": "Not Found"}')

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            if not self._serving():
                return
            if self.path != "/v1/completions":
                self._send(404, b'{"detail": "Not Found"}')
                return
            try:
                request = json.loads(body or b"{}")
            except ValueError:
                self._send(400, b'{"error": {"message": "invalid JSON"}}')
                return
            code, reply = worker.complete(request)
            self._send(code, json.dumps(reply).encode())

    return Handler


# ---------------------------------------------------------------------------------- the fleet
class WorkerFleet:
    """The workers, the control server their units and rotation go through, the scripts."""

    def __init__(
        self, directory: Path, names: Sequence[tuple[str, str]], options: WorkerOptions
    ) -> None:
        """``names``: (worker name, systemd unit) pairs, as in ``vllm.workers``."""
        self.workers = {name: Worker(name, unit, options) for name, unit in names}
        self._lock = threading.Lock()
        self.commands: list[Command] = []
        self._control = LoopbackHTTPServer(("127.0.0.1", 0), _control_handler(self))
        self._thread = threading.Thread(
            target=self._control.serve_forever, args=(0.05,), name="vllm-control", daemon=True
        )
        self._thread.start()
        self.bin_dir = directory / "bin"
        self.bin_dir.mkdir(parents=True, exist_ok=True)
        self.systemctl = self._script("systemctl")
        self.rotation = self._script("vllm-rotation")

    @property
    def control_url(self) -> str:
        host, port = self._control.server_address[:2]
        return f"http://{host!s}:{port}"

    def _script(self, tool: str) -> Path:
        path = self.bin_dir / tool
        curl = shutil.which("curl")
        if curl is not None:
            text = _SCRIPT_SH.format(tool=tool, url=self.control_url, curl=curl)
        else:
            text = _SCRIPT_PY.format(tool=tool, url=self.control_url, python=sys.executable)
        path.write_text(text)
        path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP)
        return path

    def by_unit(self, unit: str) -> Worker | None:
        return next((w for w in self.workers.values() if w.unit == unit), None)

    def run(self, argv: tuple[str, ...]) -> Command:
        """One script call: what it prints and its exit code (recorded)."""
        tool, args = argv[0], argv[1:]
        if tool == "systemctl":
            command = self._systemctl(argv, args)
        elif tool == "vllm-rotation":
            command = self._rotation(argv, args)
        else:
            command = Command(time.time(), argv, 2, problem=f"unknown tool {tool}")
        with self._lock:
            self.commands.append(command)
        return command

    def _systemctl(self, argv: tuple[str, ...], args: tuple[str, ...]) -> Command:
        now = time.time()
        if len(args) != 2 or args[0] not in ("stop", "start", "is-active"):
            return Command(now, argv, 2, problem="expected: systemctl stop|start|is-active UNIT")
        verb, unit = args
        worker = self.by_unit(unit)
        if worker is None:
            if verb == "is-active":
                return Command(now, argv, 4, "inactive", problem=f"unknown unit {unit}")
            return Command(now, argv, 5, problem=f"Unit {unit} not loaded.")
        if verb == "stop":
            worker.stop_unit()
        elif verb == "start":
            worker.start_unit()
        else:
            state = worker.state()
            return Command(now, argv, 0 if state == "active" else 3, state)
        return Command(now, argv, 0)

    def _rotation(self, argv: tuple[str, ...], args: tuple[str, ...]) -> Command:
        now = time.time()
        if len(args) != 3 or args[0] not in ("out", "in"):
            return Command(now, argv, 2, problem="expected: vllm-rotation out|in WORKER URL")
        direction, name, url = args
        worker = self.workers.get(name)
        if worker is None or worker.url != url.rstrip("/"):
            return Command(now, argv, 1, problem=f"no backend {name} at {url}")
        worker.rotate(direction)
        return Command(now, argv, 0, direction)

    def recorded(self, tool: str | None = None) -> list[Command]:
        with self._lock:
            return [c for c in self.commands if tool is None or c.argv[0] == tool]

    def summary(self) -> dict[str, Any]:
        """Every worker's state, for failure messages."""
        return {
            name: {
                "state": w.state(),
                "in_rotation": w.in_rotation,
                "load": w.load(),
                **{k: v for k, v in vars(w.stats).items() if k != "timeline"},
            }
            for name, w in self.workers.items()
        }

    def close(self) -> None:
        for worker in self.workers.values():
            worker.close()
        self._control.shutdown()
        self._control.server_close()
        self._thread.join(5)


def _control_handler(fleet: WorkerFleet) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length).decode() if length else ""
            argv = tuple(raw.split("\n")[:-1] if raw.endswith("\n") else raw.split("\n"))
            if self.path != "/cmd" or not argv:
                body = b"2\nbad control request"
            else:
                command = fleet.run(argv)
                body = f"{command.code}\n{command.stdout or command.problem or ''}".encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    return Handler


_SCRIPT_SH = """#!/bin/sh
# Stand-in {tool} for fleetd's end-to-end tests: hands its argument vector to the workers'
# control server, prints what it answers and exits with its code.
out=$({{ echo "{tool}"; for a in "$@"; do printf '%s\\n' "$a"; done; }} |
  "{curl}" -sS --max-time 10 --data-binary @- -H 'Content-Type: text/plain' "{url}/cmd") ||
  {{ echo "{tool}: stand-in control server unreachable" >&2; exit 1; }}
code=$(printf '%s\\n' "$out" | head -n 1)
printf '%s\\n' "$out" | tail -n +2 | sed '/^$/d'
exit "$code"
"""

_SCRIPT_PY = '''#!{python} -I
"""Stand-in {tool} for fleetd's end-to-end tests (no curl on this machine)."""
import sys
import urllib.request

body = "\\n".join(["{tool}", *sys.argv[1:]]).encode() + b"\\n"
try:
    with urllib.request.urlopen("{url}/cmd", data=body, timeout=10) as response:
        code, _, out = response.read().decode().partition("\\n")
except OSError as exc:
    print(f"{tool}: stand-in control server unreachable: {{exc}}", file=sys.stderr)
    sys.exit(1)
if out.strip():
    print(out.strip())
sys.exit(int(code))
'''
