"""How the daemon builds and runs the event sources (kept out of fleetd/daemon.py; a top-level
module like remedy_wiring, as it composes events, rules and remedy).

``EventWiring.build(daemon)`` makes the ``EventService`` from the ``events:`` section; with
the simulator it also starts ``SimKernelLog``, which writes the simulated driver's kernel
lines to ``<state_dir>/sim-kernel.log``, and the follower reads that file. Events call
``daemon.evaluate_now`` (the rules at once); the daemon's ``cper`` job calls ``poll_cper``;
each poll's counters go to ``readings(now, snapshot)`` (a rise is one more report of an
incident). Remediation is given the service as its incident view and reset evidence
(``Remediation.attach_events``), and the service asks remediation whether a run verified a
GPU (closing its incident).
"""

from __future__ import annotations

import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from fleetd.collect.amdsmi_backend import AmdSmiBackend
from fleetd.config import FleetdConfig
from fleetd.events.service import EventService, gpus_of
from fleetd.logs import get_logger
from fleetd.model import Reading
from fleetd.remedy.service import Remediation
from fleetd.rules.health import out_of_service

if TYPE_CHECKING:  # the simulated kernel log loads only with the simulator (footprint)
    from fleetd.events.simlog import SimKernelLog

log = get_logger("events")


class _Poller(Protocol):
    @property
    def lock(self) -> threading.Lock: ...


class DaemonParts(Protocol):
    """What the event sources need of the daemon (a protocol, so fleetd.daemon is never
    imported here: the composition stays one-way, tests/test_layering.py)."""

    @property
    def config(self) -> FleetdConfig: ...
    @property
    def sim(self) -> Any: ...  # fleetd.daemon.SimContext: ``.node`` is the simulated node
    @property
    def remediation(self) -> Remediation | None: ...
    @property
    def backend(self) -> AmdSmiBackend: ...
    @property
    def store(self) -> Any: ...  # fleetd.store.resilient.ResilientStore: ``append_event``
    @property
    def poller(self) -> _Poller: ...

    def evaluate_now(self) -> object: ...

    def now(self) -> float: ...


class EventWiring:
    """The event service and (simulator) its kernel log writer, as the daemon runs them."""

    def __init__(
        self, service: EventService, sim_log: SimKernelLog | None, amdsmi_lock: Any
    ) -> None:
        self.service = service
        self.sim_log = sim_log
        self.amdsmi_lock = amdsmi_lock  # amdsmi calls stay off a running poll (amdsmi.md)

    @classmethod
    def build(cls, daemon: DaemonParts) -> EventWiring | None:
        config = daemon.config.events
        if (
            config.kernel_log.source == "off"
            and not config.cper.enabled
            and not config.amdsmi_events.enabled
        ):
            return None
        sim_log = None
        path = None
        if daemon.sim is not None and config.kernel_log.source != "off":
            from fleetd.events.simlog import SIM_LOG, SimKernelLog

            path = daemon.config.state_dir / SIM_LOG
            try:
                sim_log = SimKernelLog(daemon.sim.node, path)
            except OSError as exc:  # an unwritable state dir: the simulated log goes to /tmp
                path = Path(tempfile.mkdtemp(prefix="fleetd-sim-")) / SIM_LOG
                log.warning("sim_kernel_log_moved", path=str(path), error=exc.strerror)
                sim_log = SimKernelLog(daemon.sim.node, path)

        def fleetd_has_gpu(gpu: int) -> bool:
            remedy = daemon.remediation
            if remedy is None:
                return False
            return gpu in gpus_of(out_of_service(remedy.holds(), remedy.run))

        def verified_since(gpu: int, since: float) -> str | None:
            remedy = daemon.remediation
            return None if remedy is None else run_verified(remedy, gpu, since)

        service = EventService(
            config,
            state_dir=daemon.config.state_dir,
            backend=daemon.backend,
            append_event=daemon.store.append_event,
            on_arrival=daemon.evaluate_now,
            fleetd_has_gpu=fleetd_has_gpu,
            verified_since=verified_since,
            kernel_log_path=path,
            now=daemon.now,
            amdsmi_lock=daemon.poller.lock,
            query_events=daemon.store.query_events,
        )
        if daemon.remediation is not None:
            daemon.remediation.attach_events(service)
        return cls(service, sim_log, daemon.poller.lock)

    def start(self) -> None:
        if self.sim_log is not None:
            self.sim_log.start()
        self.service.start()
        follower = self.service.follower
        log.info(
            "event_sources_started",
            kernel_log=None if follower is None else follower.config.source,
            cper=self.service.cper is not None,
        )

    def stop(self) -> None:
        if self.sim_log is not None:
            self.sim_log.stop()
        self.service.stop()

    def poll_cper(self) -> None:
        with self.amdsmi_lock:
            batches = self.service.read_cper()
        self.service.take_cper(batches)

    def readings(self, now: float, polled: Sequence[Reading] = ()) -> list[Reading]:
        """The event series at ``now``; ``polled`` (a poll's readings) feeds the incidents."""
        if polled:
            self.service.observe_counters(polled, now)
        return self.service.readings(now)


def run_verified(remedy: Remediation, gpu: int, since: float) -> str | None:
    """The run (not a dry run) that has reset ``gpu`` since ``since``, described; else None.

    The reset is what a fault's incident waited for: from there the run's verification
    decides (the trigger must be seen clear, and a fault that comes back opens a new
    incident, which fails it), and the GPU stays out of service until the run concludes."""
    for run in remedy.runs(limit=20):
        if (
            not run.dry_run
            and run.reset_at is not None
            and run.reset_at >= since
            and gpu in run.verify_gpus
        ):
            return f"run {run.run_id} reset GPU {gpu}; its verification decides"
    return None
