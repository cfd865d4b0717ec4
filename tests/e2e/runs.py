"""Scenario runs watched from outside, as the on-call engineer would: what arrived at the
stand-ins and when, what ``fleetctl status``, /metrics and /api/v1/status said during and
after the run.

A run is one daemon on one scenario. ``start_run`` starts it and its observer on a thread,
so the two scenarios of the suite run side by side; each test then reads the ``Observed``
record (``ScenarioRun.result``) and asserts one property. An observer never asserts: when
something does not happen within its deadline it writes that down in ``notes`` and moves on,
so every test can still report its own failure.
"""

from __future__ import annotations

import json
import re
import subprocess
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import requests
import yaml

from fleetd.configbase import parse_duration
from tests.e2e.harness import SCENARIOS, Node
from tests.e2e.standins import alertmanager as am

ECC_RULE = "GpuEccUncorrectableError"
FAULT_RULES = (
    ECC_RULE,
    "GpuKernelUncorrectableError",
    "GpuCperUncorrectedError",
    "GpuCperFatalError",
)
"""The rules that page for an uncorrectable fault: one fault is one incident, paged by the
rule of whichever report came first (the kernel's RAS line, the CPER record, the counters)."""
HELD_ALERT = "GpuRemediationHeld"
FAULT_GPU = 3
LOOK_EVERY_S = 1.0
SIBLING_WAIT_S = 5.0  # after the first page, how long more pages of the same flush may take


# ----------------------------------------------------------------------------- one look
@dataclass
class Look:
    """The node seen from three sides within a moment: API, /metrics and fleetctl."""

    at: float
    status: dict[str, Any]
    metrics: str
    by_address: subprocess.CompletedProcess[str]  # fleetctl status <address>
    by_name: subprocess.CompletedProcess[str]  # fleetctl --inventory FILE status <node name>
    status_after: dict[str, Any]

    @property
    def stable(self) -> bool:
        """The status did not change in what the three sides are compared on."""
        return compared(self.status) == compared(self.status_after)


def compared(status: dict[str, Any]) -> tuple[Any, ...]:
    return (
        status["health"]["state"],
        status["gpus_healthy"],
        status["gpus_total"],
        status["remediation"]["gpus_out_of_service"],
        status["remediation"]["in_progress"],
    )


def take_look(node: Node, inventory: Path, tries: int = 4) -> Look:
    """A look in which the status did not change while fleetctl ran (a few tries)."""
    look: Look | None = None
    for _ in range(tries):
        status = node.api("/status")
        metrics = node.metrics()
        by_address = node.fleetctl("status", node.address, "--timeout", "10")
        by_name = node.fleetctl("status", status["node"], "--inventory", str(inventory),
                                "--timeout", "10")  # fmt: skip
        look = Look(time.time(), status, metrics, by_address, by_name, node.api("/status"))
        if look.stable:
            return look
    assert look is not None
    return look


# ----------------------------------------------------------------------------- a run
@dataclass
class Observed:
    """Everything a run's tests assert on."""

    node: Node
    scenario: str
    fault_at: float | None = None  # latest time the fault can have happened (from the log)
    during: list[Look] = field(default_factory=list)  # while workers were out of rotation
    after: Look | None = None  # once the run and the alert were over (ecc) / at the end
    runs: list[dict[str, Any]] = field(default_factory=list)  # /api/v1/remediation/runs
    alertmanager_seen: list[set[tuple[str, str]]] = field(default_factory=list)
    generator_urls: set[str] = field(default_factory=set)  # seen in the Alertmanagers
    notes: list[str] = field(default_factory=list)  # what did not happen in time
    ended_at: float = 0.0

    @property
    def routing(self) -> dict[str, Any]:
        return dict(self.node.config["alerting"])

    def paging_route(self) -> dict[str, Any]:
        """The first child route whose receiver pages (has PagerDuty), as configured."""
        receivers = {r["name"]: r for r in self.routing["receivers"]}
        for route in self.routing["route"].get("routes", []):
            if receivers.get(route.get("receiver"), {}).get("pagerduty"):
                return dict(route)
        raise AssertionError("no route of the example config pages through PagerDuty")

    def timer(self, name: str) -> float:
        """A paging-route timer (group_wait, group_interval), inherited as Alertmanager does."""
        value = self.paging_route().get(name, self.routing["route"].get(name))
        assert value is not None, f"{name} is set on neither the paging route nor the root"
        return parse_duration(value)

    @property
    def poll_s(self) -> float:
        return parse_duration(self.node.config["poll"]["interval"])

    def describe(self) -> str:
        """Context for a failure message."""
        pd = self.node.pagerduty
        kinds: dict[str, int] = {}
        for event in pd.accepted():
            kinds[event.kind] = kinds.get(event.kind, 0) + 1
        return (
            f"[{self.scenario}] PagerDuty accepted {kinds or 'nothing'} "
            f"({len(pd.records)} requests); Slack {len(self.node.slack.records)} requests; "
            f"audit {len(self.node.audit.records)}; notes: {self.notes or 'none'}"
        )


def log_events(node: Node, event: str) -> list[dict[str, Any]]:
    """The daemon's JSON log lines with this ``event``."""
    found = []
    try:
        lines = node.log_path.read_text(errors="replace").splitlines()
    except OSError:
        return []
    for line in lines:
        if f'"{event}"' not in line:
            continue
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if entry.get("event") == event:
            found.append(entry)
    return found


def fault_time(node: Node, step_at_s: float) -> float | None:
    """The latest moment the scenario's fault can have happened.

    The scenario clock starts before the first tick (which logs the step at 0 s), and a tick
    applies a due step at once; so the fault happened by min(first tick + its time, the tick
    that applied it).
    """
    steps = log_events(node, "scenario_step")
    if not steps:
        return None
    first = _when(steps[0]["timestamp"])
    applied = [_when(s["timestamp"]) for s in steps if "inject" in str(s.get("step"))]
    return min([first + step_at_s, *applied[:1]])


def _when(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def inventory_for(node: Node, name: str) -> Path:
    path = node.tmp / "inventory.yaml"
    path.write_text(f"- {{name: {name}, address: '{node.address}'}}\n")
    return path


class Watch:
    """Waiting with deadlines while also noting what the Alertmanagers hold."""

    def __init__(self, observed: Observed) -> None:
        self.o = observed
        self.o.alertmanager_seen = [set() for _ in observed.node.alertmanagers]

    def note_alertmanagers(self) -> None:
        """What each Alertmanager holds as active now, and the generatorURLs it was given."""
        for seen, peer in zip(self.o.alertmanager_seen, self.o.node.alertmanagers, strict=True):
            try:
                alerts = peer.alerts() if isinstance(peer, am.RealAlertmanager) else []
            except requests.RequestException:
                continue
            for alert in alerts:
                if alert.get("generatorURL"):
                    self.o.generator_urls.add(str(alert["generatorURL"]))
                if alert.get("status", {}).get("state") == "active":
                    labels = alert.get("labels", {})
                    seen.add((labels.get("alertname", ""), labels.get("gpu", "")))

    def until(self, probe: Callable[[], Any], timeout: float, what: str) -> Any:
        """``probe()`` once it is truthy; None (and a note) after ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            self.note_alertmanagers()
            try:
                value = probe()
            except (requests.RequestException, AssertionError) as exc:
                value = None
                last = f"{type(exc).__name__}: {exc}"
            else:
                last = ""
            if value:
                return value
            if not self.o.node.alive():
                self.o.notes.append(f"fleetd exited while waiting for {what}")
                return None
            if time.monotonic() > deadline:
                self.o.notes.append(f"no {what} within {timeout:g}s {last}".strip())
                return None
            time.sleep(0.25)


def _runs(node: Node) -> list[dict[str, Any]]:
    runs: list[dict[str, Any]] = node.api("/remediation/runs")["runs"]
    return runs


def _workers_out(node: Node) -> bool:
    return any(not w.in_rotation for w in node.fleet.workers.values())


def _run_active(node: Node) -> bool:
    return bool(node.api("/status")["remediation"]["in_progress"])


def inject_at(scenario: str) -> float:
    """When the scenario file injects its fault (seconds from its start)."""
    steps = yaml.safe_load(Path(scenario).read_text(encoding="utf-8"))["steps"]
    return min(parse_duration(step["at"]) for step in steps if "inject" in step)


def _started(node: Node, observed: Observed, watch: Watch) -> None:
    node.start()
    step_at_s = inject_at(node.scenario)
    observed.fault_at = watch.until(
        lambda: fault_time(node, step_at_s), step_at_s + 30, "fault step in the daemon's log"
    )


# ----------------------------------------------------------------------------- observers
def observe_ecc(observed: Observed) -> None:
    """Fault → one page → drain, reset, re-admit → resolve; looks during and after."""
    node, watch = observed.node, Watch(observed)
    _started(node, observed, watch)
    fault = observed.fault_at or time.time()
    inventory = inventory_for(node, node.api("/status")["node"])
    if watch.until(lambda: _workers_out(node) and _run_active(node), 45, "run with workers out"):
        # looks through the whole run: draining, stopped, reset, starting again
        while _workers_out(node) and time.time() < fault + 90:
            watch.note_alertmanagers()
            look = take_look(node, inventory)
            if _workers_out(node):  # still out when the look was done: it counts
                observed.during.append(look)
            time.sleep(LOOK_EVERY_S)  # paced: fleetctl is a process start each time
    # the resolve can only go out on the paging group's next group_interval flush
    end = fault + observed.timer("group_wait") + observed.timer("group_interval") + 25

    def over() -> bool:
        runs = _runs(node)
        triggers = [t for r in FAULT_RULES for t in node.pagerduty.triggers(r, FAULT_GPU)]
        resolved = all(node.pagerduty.resolves(t.dedup_key) for t in triggers)
        firing = [a for a in node.api("/alerts")["alerts"]
                  if a["rule"] in FAULT_RULES and a["state"] == "firing"]  # fmt: skip
        return bool(runs and runs[0]["terminal"] and triggers and resolved and not firing)

    watch.until(over, max(5.0, end - time.time()), "end of the run with its page resolved")
    observed.runs = _runs(node)
    observed.after = take_look(node, inventory)


def observe_persistent(observed: Observed) -> None:
    """Fault → reset → fault again → quarantine and one page; a look at the end."""
    node, watch = observed.node, Watch(observed)
    _started(node, observed, watch)
    fault = observed.fault_at or time.time()
    inventory = inventory_for(node, node.api("/status")["node"])
    end = fault + 90
    page = watch.until(
        lambda: node.pagerduty.triggers(HELD_ALERT), max(5.0, end - time.time()),
        f"{HELD_ALERT} page",
    )  # fmt: skip
    if page:
        time.sleep(SIBLING_WAIT_S)  # pages of the same flush (waiting for the other process)
    observed.runs = _runs(node)
    observed.after = take_look(node, inventory)


OBSERVERS: dict[str, tuple[str, Callable[[Observed], None]]] = {
    "ecc": ("ecc_uncorrectable_early.yaml", observe_ecc),
    "persistent": ("persistent_ecc_early.yaml", observe_persistent),
}


class ScenarioRun:
    """A node and its observer thread."""

    def __init__(self, name: str, tmp: Path) -> None:
        scenario, self._observe = OBSERVERS[name]
        self.node = Node(tmp, SCENARIOS / scenario, pagerduty_per_minute=120)
        self.observed = Observed(self.node, name)
        self._error: str | None = None
        self._thread = threading.Thread(target=self._main, name=f"e2e-{name}", daemon=True)
        self._thread.start()

    def _main(self) -> None:
        try:
            self._observe(self.observed)
        except Exception:
            self._error = traceback.format_exc()
        finally:
            self.observed.ended_at = time.time()

    def result(self, timeout: float = 240.0) -> Observed:
        """The finished observation; fails (never hangs) when the observer could not finish."""
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise AssertionError(f"the observer did not finish within {timeout:g}s")
        if self._error is not None:
            raise AssertionError(
                f"observing the run failed:\n{self._error}\n{self.node.log_tail(30)}"
            )
        return self.observed

    def close(self) -> None:
        self.node.close()
        self._thread.join(30)


HEAD = re.compile(r"^(?P<node>\S+): (?P<state>[\w-]+) · (?P<healthy>\d+)/(?P<total>\d+) GPUs")


def head_of(output: str) -> dict[str, str] | None:
    """The node line of ``fleetctl status NODE``: node, state, healthy, total."""
    for line in output.splitlines():
        match = HEAD.match(line.strip())
        if match:
            return match.groupdict()
    return None
