"""Workers managed by something else (Slurm, Kubernetes, a router): user commands.

``drain`` takes the worker out of service, ``status`` prints how many requests or jobs it
still has (0 = idle), ``stop``/``start`` handle the process (or ``drain_stops_worker`` says
the drain ends it), ``ready`` exits 0 once it serves again (without one, the worker's vLLM
/health and /v1/models are checked, then the 1-token probe at the point ``probe`` names),
and ``undrain`` puts it back. Placeholders: {worker} {unit} {url} {gpus} {node} {model}.
"""

from __future__ import annotations

from fleetd.errors import RemedyError
from fleetd.remedy.commands import render, run_command
from fleetd.remedy.config import WorkerCommandsConfig
from fleetd.remedy.workers.base import AdapterBase, placeholders
from fleetd.vllm.client import Load, Readiness, check_loaded, probe_completion
from fleetd.vllm.config import VllmWorkerConfig


class CommandWorkers(AdapterBase):
    _cmds: WorkerCommandsConfig

    def _configure(self) -> None:
        if self._cfg.commands is None:
            raise ValueError("the command adapter needs remediation.workers.commands")
        self._cmds = self._cfg.commands

    @property
    def undrained_when_ready(self) -> bool:
        """A ready worker is already undrained (the probe ran ``after_undrain``): one that then
        fails the benchmark gate must be drained again (fleetd.remedy.executor)."""
        return (
            self._cmds.ready is None
            and self._readmit.completion_check
            and self._cmds.probe == "after_undrain"
        )

    def _run(self, argv: list[str], worker: VllmWorkerConfig, timeout: float) -> str:
        return run_command(render(argv, placeholders(worker, self._node)), timeout=timeout).stdout

    def unroute(self, worker: VllmWorkerConfig) -> None:
        self._run(self._cmds.drain, worker, self._cfg.command_timeout)

    def reroute(self, worker: VllmWorkerConfig) -> None:
        self._run(self._cmds.undrain, worker, self._cfg.command_timeout)

    def load(self, worker: VllmWorkerConfig) -> Load:
        out = self._run(self._cmds.status, worker, self._cfg.command_timeout).strip()
        first = out.split()[0] if out else ""
        try:
            in_flight = float(first)
        except ValueError:
            raise RemedyError(
                f"status command for {worker.name} printed {out[:80]!r}, not a number"
            ) from None
        return Load(running=in_flight, waiting=0.0)

    def stop(self, worker: VllmWorkerConfig) -> str | None:
        if self._cmds.stop is None:  # drain_stops_worker: the drain already ended it
            return "the drain command ends the worker (drain_stops_worker)"
        self._run(self._cmds.stop, worker, self._cfg.stop_timeout)
        return None

    def start(self, worker: VllmWorkerConfig) -> None:
        if self._cmds.start is not None:
            self._run(self._cmds.start, worker, self._cfg.command_timeout)

    def ready(self, worker: VllmWorkerConfig) -> Readiness:
        if self._cmds.ready is None:
            return self._probe(worker)
        argv = render(self._cmds.ready, placeholders(worker, self._node))
        result = run_command(argv, timeout=self._cfg.command_timeout, check=False)
        if result.returncode == 0:
            return Readiness(True, result.stdout.strip()[:200])
        detail = (result.stderr.strip() or result.stdout.strip())[:200]
        return Readiness(False, f"ready command exited {result.returncode} {detail}".strip())

    def _probe(self, worker: VllmWorkerConfig) -> Readiness:
        """Loaded (health, model) first, while still drained; then the 1-token completion
        before or after ``undrain`` as configured. A worker that fails it after ``undrain``
        is drained again at once, so it does not keep taking traffic while it is retried."""
        loaded = check_loaded(self._session, worker, timeout=self._cfg.http_timeout)
        if not loaded.ready or not self._readmit.completion_check:
            return loaded
        when = self._cmds.probe.replace("_", " ")
        if self._cmds.probe == "after_undrain":
            self.reroute(worker)
        probe = probe_completion(
            self._session, worker, timeout=self._cfg.http_timeout, model=loaded.model
        )
        if probe.ready:
            return Readiness(True, f"{loaded.detail}; {probe.detail} ({when})")
        if self._cmds.probe == "after_undrain":
            self.unroute(worker)
            return Readiness(False, f"probe {when} failed: {probe.detail}; drained again")
        return Readiness(False, f"probe {when} failed: {probe.detail}")
