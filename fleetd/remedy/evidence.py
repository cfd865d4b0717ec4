"""Capturing a run's evidence bundle, within a bounded time (docs/remediation.md, "Evidence").

What goes in: the raw reads of every GPU of the unit (``ports.GpuDumper``), the CPER records
and kernel events the event sources logged since the last bundle (bounded by
``events_lookback``), the run as journaled and its step events, the triggering alert and the
unit's health alerts, the config's hash. Each part that cannot be read is kept as its error:
a capture is never refused for a missing part.

The capture runs on its own thread and the run waits at most ``timeout``: past it the
capture is abandoned (it leaves no bundle behind, ``BundleStore.write``) and the run goes on
to the reset with the failure journaled.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from fleetd.logs import get_logger
from fleetd.remedy import machine as m
from fleetd.remedy.bundle import BundleError, BundleStore, bundle_name
from fleetd.remedy.codec import run_to_dict
from fleetd.remedy.config import EvidenceConfig
from fleetd.remedy.journal import RunJournal
from fleetd.remedy.ports import AlertView, FaultLog, GpuDumper

log = get_logger("remedy.evidence")

FORMAT = 1
FAULT_KINDS = ("cper_record", "kernel_event", "driver_event")
MAX_EVENTS = 5000


class EvidenceCapture:
    """Builds and writes bundles for one node's runs."""

    def __init__(
        self,
        *,
        node: str,
        config: EvidenceConfig,
        store: BundleStore,
        journal: RunJournal,
        dumper: GpuDumper | None = None,
        fault_log: FaultLog | None = None,
        alerts: AlertView | None = None,
        config_hash: str = "",
    ) -> None:
        self.node = node
        self.config = config
        self.store = store
        self._journal = journal
        self._dumper = dumper
        self._fault_log = fault_log
        self.alerts = alerts
        self._config_hash = config_hash
        self.last_capture_s = 0.0  # wall time of the last capture (the benchmark reads it)

    # ---- the bounded capture -------------------------------------------------------------
    def capture(self, run: m.Run, cmd: m.CaptureEvidence, now: float) -> m.EvidenceResult:
        """Write the bundle, waiting at most ``timeout``; never raises."""
        started = time.perf_counter()
        done = threading.Event()
        abandoned = threading.Event()
        box: list[m.EvidenceResult] = []

        def work() -> None:
            try:
                box.append(self._capture(run, cmd, now, abandoned.is_set))
            except Exception as exc:
                box.append(_failed(cmd, f"{type(exc).__name__}: {exc}"))
            finally:
                done.set()

        worker = threading.Thread(target=work, name=f"evidence-{run.run_id}", daemon=True)
        worker.start()
        finished = done.wait(self.config.timeout)
        if not finished:
            abandoned.set()
            finished = done.is_set()  # it may have finished between the wait and the flag
        self.last_capture_s = time.perf_counter() - started
        if not finished or not box:
            log.warning("evidence_capture_timed_out", run_id=run.run_id, phase=cmd.phase)
            return _failed(cmd, f"capture timed out after {self.config.timeout:g}s")
        return box[0]

    def _capture(
        self, run: m.Run, cmd: m.CaptureEvidence, now: float, abandoned: Callable[[], bool]
    ) -> m.EvidenceResult:
        content = self.content(run, cmd, now)
        try:
            ref = self.store.write(
                bundle_name(run.run_id, cmd.phase, cmd.attempt), content, abandoned=abandoned
            )
        except (BundleError, OSError, ValueError) as exc:
            log.warning(
                "evidence_capture_failed", run_id=run.run_id, phase=cmd.phase, error=str(exc)
            )
            return _failed(cmd, str(exc))
        return m.EvidenceResult(
            cmd.phase, cmd.attempt, path=ref.path, sha256=ref.sha256, size=ref.size, cut=ref.cut
        )

    # ---- what goes in ----------------------------------------------------------------------
    def content(self, run: m.Run, cmd: m.CaptureEvidence, now: float) -> dict[str, Any]:
        since = self._events_since(now)
        return {
            "format": FORMAT,
            "node": self.node,
            "run_id": run.run_id,
            "phase": cmd.phase,
            "attempt": cmd.attempt,
            "captured_at": now,
            "config_sha256": self._config_hash,
            "unit": list(run.gpu_indices),
            "gpus": self._gpus(run),
            "events": self._events(run, since),
            "events_since": since,
            "journal": self._run_journal(run),
            "alerts": self._alerts(run),
            "validation": [asdict(o) for o in run.validation],
        }

    def _events_since(self, now: float) -> float:
        floor = now - self.config.events_lookback
        last = self.store.last_capture_at()
        return floor if last is None else max(floor, min(last, now))

    def _gpus(self, run: m.Run) -> dict[str, Any]:
        if self._dumper is None:
            return {"error": "no GPU backend to read"}
        try:
            return self._dumper(run.gpu_indices)
        except Exception as exc:
            return {"error": f"{type(exc).__name__}: {exc}"}

    def _events(self, run: m.Run, since: float) -> Any:
        if self._fault_log is None:
            return {"error": "no event log"}
        unit = set(run.gpu_indices)
        try:
            found = self._fault_log(kinds=FAULT_KINDS, since=since, limit=MAX_EVENTS)
        except Exception as exc:
            return {"error": f"{type(exc).__name__}: {exc}"}
        return [
            {
                "ts": e.ts,
                "gpu": e.gpu,
                "kind": e.kind,
                "message": e.message,
                "data": dict(e.data),
                "actor": e.actor,
            }
            for e in found
            if e.gpu is None or e.gpu in unit
        ]

    def _run_journal(self, run: m.Run) -> dict[str, Any]:
        try:
            events: Any = [asdict(e) for e in self._journal.events(run_id=run.run_id)]
        except Exception as exc:
            events = {"error": f"{type(exc).__name__}: {exc}"}
        return {"run": run_to_dict(run), "events": events}

    def _alerts(self, run: m.Run) -> dict[str, Any]:
        out: dict[str, Any] = {"trigger": asdict(run.trigger)}
        if self.alerts is None:
            return out
        unit = {str(g) for g in run.gpu_indices}
        try:
            out["health_alerts"] = [
                {
                    "rule": a.key.rule,
                    "labels": dict(a.labels),
                    "state": a.state.value,
                    "severity": a.severity.value,
                    "value": a.value,
                    "active_at": a.active_at,
                    "fired_at": a.fired_at,
                }
                for a in self.alerts.health_alerts()
                if dict(a.labels).get("gpu") in unit
            ]
        except Exception as exc:
            out["health_alerts"] = {"error": f"{type(exc).__name__}: {exc}"}
        return out


def _failed(cmd: m.CaptureEvidence, error: str) -> m.EvidenceResult:
    return m.EvidenceResult(cmd.phase, cmd.attempt, error=error)
