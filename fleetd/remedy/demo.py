"""Remediation for ``fleetd demo``: stand-in vLLM workers on the simulated node, a config
that acts (mode ``on``) with waits short enough to watch, and one line per step with timings.

The demo's scenario registers placeholder ``vllm-worker-N`` processes on the simulated GPUs;
the stand-in workers take their place (a placeholder would hold its GPU forever and the
reset would rightly be refused).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fleetd.clock import Clock
from fleetd.config import FleetdConfig, VllmWorkerConfig
from fleetd.remedy.config import RemediationConfig
from fleetd.remedy.events import ChangeSink, RemediationEvent
from fleetd.remedy.ports import GpuControl, HealthPoller
from fleetd.remedy.service import Remediation
from fleetd.remedy.wiring import build_remediation
from fleetd.sim import SimNode
from fleetd.sim.vllm_worker import StandInFleet
from fleetd.store.db import Database

DEMO_MODEL = "demo/llama-3.1-70b"


def demo_section(fleet: StandInFleet) -> dict[str, Any]:
    """A remediation section that acts, with waits of seconds (the demo clock may be scaled)."""
    out_url, in_url = fleet.rotation_urls()
    return {
        "mode": "on",
        "drain": {"balancer_delay": "5s", "poll_interval": "1s", "timeout": "60s"},
        "verify": {"healthy_polls": 3, "poll_interval": "5s", "timeout": "2m"},
        "readmit": {"timeout": "3m", "poll_interval": "2s", "completion_check": True},
        "workers": {
            "systemctl": str(fleet.systemctl),
            "rotation": {"http": {"out_url": out_url, "in_url": in_url}},
        },
    }


@dataclass
class Timeline:
    """A ChangeSink that keeps the latest steps as lines like ``+00:17 draining: …``."""

    forward: ChangeSink | None = None
    keep: int = 12
    events: list[RemediationEvent] = field(default_factory=list)
    _started: dict[str, float] = field(default_factory=dict)

    def submit_change(self, event: RemediationEvent, now: float) -> None:
        self.events = [*self.events, event][-self.keep :]
        if event.run_id is not None:
            self._started.setdefault(event.run_id, event.at)
        if self.forward is not None:
            self.forward.submit_change(event, now)

    def lines(self) -> list[str]:
        out = []
        for e in self.events:
            start = self._started.get(e.run_id or "", e.at)
            elapsed = max(0.0, e.at - start)
            minutes, seconds = divmod(int(elapsed), 60)
            mark = "!" if e.raise_alert else " "
            out.append(f"{mark}+{minutes:02d}:{seconds:02d} {e.kind}: {e.message}")
        return out


@dataclass
class DemoRemediation:
    fleet: StandInFleet
    remediation: Remediation
    timeline: Timeline
    workers: Sequence[VllmWorkerConfig]
    rng: random.Random

    def keep_busy(self, *, per_worker: int = 3, max_duration_s: float = 8.0) -> None:
        """Top every serving, in-rotation worker up to ``per_worker`` requests in flight."""
        for worker in self.fleet.workers.values():
            if not worker.in_rotation or worker.state() != "active":
                continue
            running, waiting = worker.load()
            missing = per_worker - running - waiting
            for _ in range(max(0, missing)):
                worker.add_requests(1, duration_s=self.rng.uniform(1.0, max_duration_s))

    def close(self) -> None:
        self.fleet.close()


def start_demo_remediation(
    config: FleetdConfig,
    *,
    node: SimNode,
    backend: GpuControl,
    poller: HealthPoller,
    db: Database,
    clock: Clock,
    directory: Path,
    sink: ChangeSink | None = None,
    gpus: Sequence[int] = tuple(range(8)),
    startup_s: float = 20.0,
    seed: int = 0,
) -> DemoRemediation:
    """Stand-in workers (one per GPU), their ``systemctl`` and balancer, and a Remediation."""
    fleet = StandInFleet(directory, clock=clock, processes=node)
    for gpu in gpus:
        for proc in node.processes(gpu):
            if proc.name.startswith("vllm"):
                node.remove_process(proc.pid)  # the scenario's placeholder for this worker
        fleet.add(f"vllm-{gpu}", [gpu], model=DEMO_MODEL, startup_s=startup_s)
    workers = [
        VllmWorkerConfig(name=n, url=w.url, gpus=list(w.gpus), unit=w.unit, model=w.model)
        for n, w in fleet.workers.items()
    ]
    section = RemediationConfig.model_validate(demo_section(fleet))
    vllm = config.vllm.model_copy(update={"workers": workers})
    demo_config = config.model_copy(update={"vllm": vllm, "remediation": section})
    timeline = Timeline(forward=sink)
    remediation = build_remediation(
        demo_config, db=db, backend=backend, poller=poller, clock=clock, sink=timeline
    )
    return DemoRemediation(fleet, remediation, timeline, workers, random.Random(seed))
