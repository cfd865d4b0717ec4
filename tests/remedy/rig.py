"""End-to-end harness: a simulated MI355X node polled through the real backend, stand-in vLLM
workers on loopback with a stand-in ``systemctl`` on PATH, a real SQLite journal, and the
real Remediation built from a fleetd.yaml-shaped config.

"Crashing" the daemon means dropping the Remediation (and its backend and poller) and building
new ones from the same database file, while the simulated hardware and the workers — which a
daemon crash would not touch — carry on.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fleetd.clock import FakeClock
from fleetd.collect.amdsmi_backend import AmdSmiBackend
from fleetd.collect.collectors import default_collectors
from fleetd.collect.poller import Poller
from fleetd.config import FleetdConfig
from fleetd.model import Alert, AlertKey, AlertState, Severity, Transition, make_labels
from fleetd.remedy import machine as m
from fleetd.remedy.events import RemediationEvent
from fleetd.remedy.holders import KfdInspector
from fleetd.remedy.lease import FleetLease
from fleetd.remedy.service import Remediation
from fleetd.remedy_wiring import build_remediation
from fleetd.sim import SimNode, SimulatedAmdSmi, build_node
from fleetd.sim.vllm_worker import StandInFleet
from fleetd.store.db import Database, sqlite_url

NODE = "sim-node"


def remediation_config(**overrides: Any) -> dict[str, Any]:
    """A fast but realistic remediation section (waits of seconds on the fake clock)."""
    config: dict[str, Any] = {
        "mode": "on",
        "drain": {
            "balancer_delay": "5s",
            "poll_interval": "1s",
            "timeout": "60s",
            "release_timeout": "10s",
            "release_poll_interval": "2s",
        },
        "verify": {"healthy_polls": 3, "poll_interval": "5s", "timeout": "120s"},
        "readmit": {"timeout": "60s", "poll_interval": "2s", "completion_check": True},
        "probation": "10m",
        "workers": {"adapter": "systemd", "command_timeout": "10s", "stop_timeout": "10s"},
    }
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(config.get(key), dict):
            config[key] = {**config[key], **value}
        else:
            config[key] = value
    return config


@dataclass
class Sink:
    """The dispatcher's side of ChangeSink: keeps what it was given."""

    events: list[RemediationEvent] = field(default_factory=list)

    def submit_change(self, event: RemediationEvent, now: float) -> None:
        self.events.append(event)

    def kinds(self) -> list[str]:
        return [e.kind for e in self.events]

    def alerts(self) -> list[RemediationEvent]:
        return [e for e in self.events if e.raise_alert]


@dataclass
class Rig:
    tmp: Path
    clock: FakeClock
    sim: SimNode
    fleet: StandInFleet
    db_url: str
    config: FleetdConfig
    sink: Sink
    lease: FleetLease | None = None
    node_name: str = NODE
    kfd: KfdInspector | None = None
    remediation: Remediation = field(init=False)
    backend: AmdSmiBackend = field(init=False)
    poller: Poller = field(init=False)
    db: Database = field(init=False)

    def __post_init__(self) -> None:
        self.start_daemon()

    # ---- the daemon ---------------------------------------------------------------------
    def start_daemon(self) -> None:
        self.db = Database.open(self.db_url)
        self.backend = AmdSmiBackend(SimulatedAmdSmi(self.sim))
        self.poller = Poller(
            self.backend,
            default_collectors(processes_interval=30.0),
            node=self.node_name,
            gpu_timeout=5.0,
            timer=self.clock.monotonic,
        )
        self.remediation = build_remediation(
            self.config,
            db=self.db,
            backend=self.backend,
            poller=self.poller,
            clock=self.clock,
            sink=self.sink,
            lease=self.lease,
            kfd=self.kfd,
        )

    def stop_daemon(self) -> None:
        self.poller.close()
        self.backend.close()
        self.db.dispose()

    def restart_daemon(self) -> None:
        self.stop_daemon()
        self.start_daemon()

    # ---- driving ------------------------------------------------------------------------
    def fault(self, gpu: int = 3, plan: str = "reset") -> list[str]:
        """The rules engine's transition for an uncorrectable-error alert on ``gpu``."""
        return self.remediation.handle(
            [ue_transition(gpu, self.clock.now(), plan)], self.clock.now()
        )

    def run_until_settled(self, *, step: float = 1.0, limit: float = 3600.0) -> None:
        """Advance time and tick until no run is active."""
        end = self.clock.now() + limit
        self.remediation.tick(self.clock.now())
        while self.remediation.executor.active() and self.clock.now() < end:
            self.clock.advance(step)
            self.remediation.tick(self.clock.now())

    def run(self, run_id: str) -> m.Run:
        run = self.remediation.run(run_id)
        assert run is not None
        return run

    def close(self) -> None:
        self.stop_daemon()
        self.fleet.close()


def ue_transition(gpu: int, at: float, plan: str | None = "reset") -> Transition:
    labels = make_labels(
        {"alertname": "GpuUncorrectableEcc", "gpu": gpu, "node": NODE, "severity": "critical"}
    )
    alert = Alert(
        key=AlertKey("GpuUncorrectableEcc", make_labels({"gpu": gpu})),
        state=AlertState.FIRING,
        severity=Severity.CRITICAL,
        labels=labels,
        value=1.0,
        active_at=at,
        fired_at=at,
        last_eval_at=at,
        remediation_plan=plan,
    )
    return Transition(alert, AlertState.PENDING, AlertState.FIRING, at)


def make_rig(
    tmp: Path,
    clock: FakeClock,
    *,
    workers_on: tuple[int, ...] = tuple(range(8)),
    db_url: str | None = None,
    remediation: dict[str, Any] | None = None,
    node_name: str = NODE,
    lease: FleetLease | None = None,
    startup_s: float = 20.0,
    own_systemctl: bool = False,
    model: str = "MI355X",
    kfd: KfdInspector | None = None,
) -> Rig:
    """``own_systemctl`` names this fleet's stand-in by path instead of relying on PATH (two
    rigs in one test would otherwise share whichever ``systemctl`` PATH finds first)."""
    sim = build_node(model, seed=3, clock=clock)
    sim.set_load(None, 0.5)
    fleet = StandInFleet(tmp / "standin", clock=clock, processes=sim)
    for gpu in workers_on:
        fleet.add(f"gpu{gpu}", [gpu], startup_s=startup_s, model="stand-in/llama-70b")
    clock.advance(startup_s)  # the workers finished loading before the daemon starts
    out_url, in_url = fleet.rotation_urls()
    section = remediation if remediation is not None else remediation_config()
    section = {**section}
    section["workers"] = {
        **section.get("workers", {}),
        "rotation": {"http": {"out_url": out_url, "in_url": in_url}},
    }
    if own_systemctl:
        section["workers"]["systemctl"] = str(fleet.systemctl)
    config = FleetdConfig.model_validate(
        {
            "node": {"name": node_name},
            "state_dir": str(tmp),
            "vllm": {"workers": fleet.worker_config()},
            "remediation": section,
        }
    )
    url = db_url or sqlite_url(tmp / "fleetd.db")
    return Rig(
        tmp, clock, sim, fleet, url, config, Sink(), lease=lease, node_name=node_name, kfd=kfd
    )


def path_with(bin_dir: Path) -> str:
    return f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"
