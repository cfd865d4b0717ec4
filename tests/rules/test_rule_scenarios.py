"""The shipped rules against the simulator, end to end: sim → real backend and poller →
MemoryWindow → RuleEngine (and stand-in vLLM workers scraped over HTTP on loopback).

Every default rule fires on a scenario made for it — on the faulty GPU or worker and nowhere
else — and none fires during a simulated day of varying load on a healthy node.
"""

from __future__ import annotations

import http.server
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import requests

from fleetd.clock import FakeClock
from fleetd.collect.amdsmi_backend import AmdSmiBackend
from fleetd.collect.collectors import default_collectors
from fleetd.collect.poller import Poller
from fleetd.model import AlertState, HealthState
from fleetd.rules.config import shipped_rules_dir
from fleetd.rules.engine import EngineSettings, RuleEngine
from fleetd.rules.loader import load_rule_set
from fleetd.sim import SimulatedAmdSmi, start_scenario
from fleetd.sim.loopback import LoopbackHTTPServer
from fleetd.store.memory import MemoryWindow
from fleetd.vllm.collector import VllmScraper
from fleetd.vllm.config import VllmWorkerConfig

SCENARIOS = Path(__file__).parent / "scenarios"
RULES = load_rule_set([shipped_rules_dir()])

Fired = set[tuple[str, str]]  # (rule, gpu or worker)


class StandInVllm:
    """vLLM's /health and /metrics for several workers, driven by the simulated clock."""

    def __init__(self) -> None:
        self.now = 0.0
        self.behaviour: dict[str, Callable[[float], tuple[int, float, float] | None]] = {}
        self.tokens: dict[str, float] = {}
        stand_in = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                worker, _, path = self.path.strip("/").partition("/")
                state = stand_in.behaviour[worker](stand_in.now)
                if state is None:  # the process is gone: refuse like a closed port would
                    self.send_response(503)
                    self.end_headers()
                    return
                status, running, tokens = state
                if path == "health":
                    self.send_response(status)
                    self.end_headers()
                    return
                body = (
                    f'vllm:num_requests_running{{model_name="m"}} {running}\n'
                    f'vllm:num_requests_waiting{{model_name="m"}} 0\n'
                    f'vllm:kv_cache_usage_perc{{model_name="m"}} 0.4\n'
                    f'vllm:generation_tokens_total{{model_name="m"}} {tokens}\n'
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                return

        self.server = LoopbackHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def url(self, worker: str) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/{worker}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@dataclass
class Run:
    """What one scenario run produced."""

    fired: Fired = field(default_factory=set)
    first_fired: dict[tuple[str, str], float] = field(default_factory=dict)
    resolved: Fired = field(default_factory=set)
    engine: RuleEngine | None = None


def run_scenario(
    name: str,
    *,
    poll_s: float,
    workers: list[VllmWorkerConfig] | None = None,
    stand_in: StandInVllm | None = None,
    gpu_timeout: float = 3.0,  # real seconds, generous under CI load; a hung call costs it once
) -> Run:
    clock = FakeClock()
    start = clock.now()
    path = SCENARIOS / f"{name}.yaml" if (SCENARIOS / f"{name}.yaml").exists() else name
    node, runner = start_scenario(path, clock)
    sysfs = tempfile.TemporaryDirectory(prefix="fleetd-sysfs-")  # as on a node: /sys
    backend = AmdSmiBackend(SimulatedAmdSmi(node), pci_root=node.attach_sysfs(Path(sysfs.name)))
    poller = Poller(
        backend, default_collectors(), node="sim", gpu_timeout=gpu_timeout, timer=clock.monotonic
    )
    session = requests.Session()
    scraper = VllmScraper(workers or [], session, timeout=2.0)
    window = MemoryWindow(retention=3 * 3600.0)
    engine = RuleEngine(RULES, EngineSettings(poll_interval_s=poll_s), node="sim")
    result = Run(engine=engine)
    try:
        while True:
            now = clock.advance(poll_s)
            runner.advance()
            snapshot = poller.poll(now)
            window.append(snapshot.readings)
            if workers:
                assert stand_in is not None
                stand_in.now = now - start
                window.append(scraper.scrape(now).readings)
            window.prune(now)
            for t in engine.evaluate(window, now):
                labels = dict(t.alert.key.labels)
                who = labels.get("gpu") or labels.get("worker") or ""
                key = (t.alert.key.rule, who)
                if t.current == AlertState.FIRING:
                    result.fired.add(key)
                    result.first_fired.setdefault(key, now - start)
                elif t.current == AlertState.RESOLVED:
                    result.resolved.add(key)
            if runner.done and now - start >= runner.end - start:
                break
        assert all(s.health == "ok" for s in engine.rule_statuses()), engine.rule_statuses()
        return result
    finally:
        node.release_hangs()
        poller.close()
        backend.close()
        session.close()
        sysfs.cleanup()


# ------------------------------------------------------------------------------ fault scenarios
FAULTS = [
    pytest.param(
        "thermal",
        15.0,
        {
            ("GpuTemperatureNearThrottle", "1"),
            ("GpuTemperatureNearShutdown", "1"),
            ("GpuThermalThrottling", "1"),
        },
        id="thermal_runaway",
    ),
    pytest.param(
        "ecc_uncorrectable",
        15.0,
        {("GpuEccUncorrectableError", "3"), ("GpuEccUncorrectableError", "4")},
        id="ecc_uncorrectable_and_deferred",
    ),
    pytest.param("ecc_ce_storm", 15.0, {("GpuEccCorrectableErrorRate", "2")}, id="ecc_ce_storm"),
    pytest.param("bad_pages", 10.0, {("GpuRetiredPagesNearThreshold", "5")}, id="bad_pages"),
    pytest.param(
        "pcie_downgrade",
        10.0,
        {("GpuPcieLinkWidthDegraded", "0"), ("GpuPcieLinkSpeedDegraded", "0")},
        id="pcie_downgrade",
    ),
    pytest.param(
        "pcie_replay_storm",
        15.0,
        {("GpuPcieReplayRate", "7"), ("GpuPcieRecoveryRate", "7")},
        id="pcie_replay_storm",
    ),
    pytest.param(
        "xgmi_link_down",
        10.0,
        {
            ("GpuXgmiLinkDown", "6"),
            ("GpuXgmiLinkDown", "0"),
            # MI355X: the XGMI error status is unreadable; the fault is XGMI_WAFL RAS counts
            ("GpuXgmiError", "6"),
            ("GpuXgmiError", "0"),
            ("GpuEccUncorrectableError", "6"),
            ("GpuEccUncorrectableError", "0"),
        },
        id="xgmi_link_down",
    ),
    pytest.param("power_excursion", 30.0, {("GpuPowerThrottling", "6")}, id="power_excursion"),
    pytest.param("power_above_cap", 10.0, {("GpuPowerAboveCap", "5")}, id="power_above_cap"),
    pytest.param("gpu_off_bus", 10.0, {("GpuMissing", "2")}, id="gpu_off_bus"),
    pytest.param("hung_call", 10.0, {("GpuMissing", "4")}, id="hung_call"),
    pytest.param("telemetry_stale", 10.0, {("GpuTelemetryStale", "1")}, id="telemetry_stale"),
]


# GPU health at the end of the scenario, for the GPUs that are not healthy then
END_HEALTH: dict[str, dict[str, HealthState]] = {
    "ecc_uncorrectable": {},  # resolved ten minutes after the errors: healthy again
    "ecc_ce_storm": {"2": HealthState.DEGRADED},
    "xgmi_link_down": {"0": HealthState.UNHEALTHY, "6": HealthState.UNHEALTHY},
    "power_excursion": {},  # information only
    "gpu_off_bus": {"2": HealthState.UNHEALTHY},
    "hung_call": {"4": HealthState.UNHEALTHY},
    "telemetry_stale": {"1": HealthState.DEGRADED},
}


@pytest.mark.parametrize(("scenario", "poll_s", "expected"), FAULTS)
def test_each_fault_fires_its_rules_on_that_gpu_and_nothing_else(
    scenario: str, poll_s: float, expected: Fired
) -> None:
    run = run_scenario(scenario, poll_s=poll_s)
    assert run.fired == expected
    assert run.engine is not None
    report = run.engine.health()
    assert report is not None
    if scenario in END_HEALTH:
        unhealthy = {
            g.gpu: g.health.state for g in report.gpus if g.health.state != HealthState.HEALTHY
        }
        assert unhealthy == END_HEALTH[scenario]
    if scenario == "ecc_uncorrectable":
        assert run.resolved == expected


# ------------------------------------------------------------------------------ vLLM
@pytest.fixture
def stand_in() -> Iterator[StandInVllm]:
    server = StandInVllm()
    try:
        yield server
    finally:
        server.close()


def test_vllm_rules_fire_for_a_dead_and_a_stalled_worker_but_not_for_one_on_a_failed_gpu(
    stand_in: StandInVllm,
) -> None:
    def healthy(t: float) -> tuple[int, float, float]:
        return 200, 5.0, 800.0 * t

    def dies_at_1m(t: float) -> tuple[int, float, float]:
        return (200, 5.0, 800.0 * t) if t < 60 else (503, 0.0, 800.0 * 60)

    def stalls_at_1m(t: float) -> tuple[int, float, float]:
        return 200, 4.0, 800.0 * min(t, 60.0)

    def gone_with_its_gpu(t: float) -> tuple[int, float, float] | None:
        return (200, 5.0, 800.0 * t) if t < 60 else None

    stand_in.behaviour = {
        "w0": healthy,
        "w1": dies_at_1m,
        "w2": stalls_at_1m,
        "w5": gone_with_its_gpu,
    }
    workers = [
        VllmWorkerConfig(name="w0", url=stand_in.url("w0"), gpus=[0, 1]),
        VllmWorkerConfig(name="w1", url=stand_in.url("w1"), gpus=[2]),
        VllmWorkerConfig(name="w2", url=stand_in.url("w2"), gpus=[3]),
        VllmWorkerConfig(name="w5", url=stand_in.url("w5"), gpus=[5]),
    ]
    run = run_scenario("vllm", poll_s=10.0, workers=workers, stand_in=stand_in)
    assert run.fired == {("VllmWorkerDown", "w1"), ("VllmWorkerStalled", "w2"), ("GpuMissing", "5")}


# ------------------------------------------------------------------------------ a healthy day
@pytest.mark.slow
def test_a_simulated_day_of_varying_load_on_a_healthy_node_is_quiet(stand_in: StandInVllm) -> None:
    stand_in.behaviour = {"w0": lambda t: (200, 6.0, 900.0 * t)}
    workers = [VllmWorkerConfig(name="w0", url=stand_in.url("w0"), gpus=list(range(8)))]
    # a poll every 2 minutes keeps the day affordable in CI; fault scenarios poll every 10-30 s
    run = run_scenario("healthy", poll_s=120.0, workers=workers, stand_in=stand_in)
    assert run.fired == set()
    assert run.engine is not None
    report = run.engine.health()
    assert report is not None and report.node.state == HealthState.HEALTHY
    assert run.engine.evaluations_total == 24 * 30


def test_every_default_rule_has_a_scenario() -> None:
    """FleetdStorageDegraded is about fleetd's own database, not a GPU: the daemon's storage
    test (tests/test_daemon_storage.py) makes the disk fail and sees it fire.
    FleetdRuleBlindSpots is about the rules themselves: tests/test_daemon.py loads a rule on a
    reading MI3xx boards never provide and sees it fire.
    FleetdVersionDrift reads the fleet registry: tests/registry/test_fleet.py runs three
    agents' heartbeats against PostgreSQL and sees it fire on the odd one.
    The event rules (rules/events.yaml) fire on kernel lines, CPER records and KFD events,
    not polled readings: rules/tests/events_test.yaml tests each, tests/events/test_wiring.py
    and tests/events/test_incidents_daemon.py fire them through the daemon on the simulator's
    faults.
    VllmGrayFailure reads the peer comparison's verdicts: tests/vllm/test_peers.py finds and
    attributes the outliers over real HTTP on the simulator, tests/test_demo_gray.py fires the
    rule through the daemon."""
    covered = {rule for param in FAULTS for rule, _ in param.values[2]}  # type: ignore[union-attr]
    covered |= {"VllmWorkerDown", "VllmWorkerStalled", "VllmGrayFailure"}
    assert {r.name for r in RULES.rules} - covered == {
        "FleetdStorageDegraded",
        "FleetdRuleBlindSpots",
        "FleetdVersionDrift",
        "GpuCperFatalError",
        "GpuCperUncorrectedError",
        "GpuKernelUncorrectableError",
        "GpuRingTimeout",
        "GpuUnplannedReset",
        "GpuVmFault",
    }
