"""Workers run as systemd units (``vllm@3.service``) behind a load balancer.

Out: rotation hook → (the machine waits the balancer delay and for two idle reads of the
worker's own /metrics) → ``systemctl stop`` → the unit must report inactive. In: ``systemctl
start`` → /health, /v1/models (and optionally a 1-token completion) → rotation hook.
``systemctl`` is whatever the configured name resolves to on PATH.
"""

from __future__ import annotations

from fleetd.errors import RemedyError
from fleetd.remedy.commands import run_command
from fleetd.remedy.workers.base import AdapterBase, placeholders
from fleetd.remedy.workers.rotation import RotationHook
from fleetd.vllm.client import Load, Readiness, check_ready, read_load
from fleetd.vllm.config import VllmWorkerConfig

_STOPPED = frozenset({"inactive", "failed", "unknown"})


class SystemdWorkers(AdapterBase):
    def _configure(self) -> None:
        self._rotation = RotationHook(
            self._cfg.rotation, command_timeout=self._cfg.command_timeout, session=self._session
        )

    def unroute(self, worker: VllmWorkerConfig) -> None:
        self._rotation.move("out", placeholders(worker, self._node))

    def reroute(self, worker: VllmWorkerConfig) -> None:
        self._rotation.move("in", placeholders(worker, self._node))

    def load(self, worker: VllmWorkerConfig) -> Load:
        return read_load(self._session, worker, self._cfg.http_timeout)

    def stop(self, worker: VllmWorkerConfig) -> str | None:
        unit = self._unit(worker)
        run_command([self._cfg.systemctl, "stop", unit], timeout=self._cfg.stop_timeout)
        state = self.unit_state(worker)
        if state not in _STOPPED:
            raise RemedyError(f"{unit} is still {state} after systemctl stop")
        return None

    def start(self, worker: VllmWorkerConfig) -> None:
        unit = self._unit(worker)
        run_command([self._cfg.systemctl, "start", unit], timeout=self._cfg.command_timeout)

    def ready(self, worker: VllmWorkerConfig) -> Readiness:
        return check_ready(
            self._session,
            worker,
            timeout=self._cfg.http_timeout,
            completion=self._readmit.completion_check,
        )

    def unit_state(self, worker: VllmWorkerConfig) -> str:
        """``systemctl is-active`` output: active, inactive, failed, activating, …"""
        result = run_command(
            [self._cfg.systemctl, "is-active", self._unit(worker)],
            timeout=self._cfg.command_timeout,
            check=False,
        )
        return result.stdout.strip() or "unknown"

    @staticmethod
    def _unit(worker: VllmWorkerConfig) -> str:
        if not worker.unit:
            raise RemedyError(f"worker {worker.name} has no systemd unit configured (vllm.workers)")
        return worker.unit
