"""AFID classes end to end: the real daemon on the example config, and what the on-call
engineer's PagerDuty receives. GPU 6's fatal HBM error (AFID 20, physical: replace the OAM)
pages once and quarantines GPU 6 alone without any reset, the page saying what a person must
do; GPU 3's poison (AFID 22, the reset class) pages once, is remediated by one hive reset and
its page resolves when the run has verified the hive. ``fleetctl rma list`` names GPU 6 alone
as needing a person, and exits 3."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fleetd.cli.fleetctl_rma import EXIT_PHYSICAL
from tests.e2e.harness import SCENARIOS, Node
from tests.e2e.standins.pagerduty import Event

pytestmark = pytest.mark.slow  # a real daemon through a whole remediation run

FAULT_RULES = (
    "GpuEccUncorrectableError",
    "GpuKernelUncorrectableError",
    "GpuCperFatalError",
    "GpuCperUncorrectedError",
)
HELD = "GpuRemediationHeld"
PHYSICAL_GPU, RESET_GPU = 6, 3


def fault_pages(node: Node, gpu: int) -> list[Event]:
    return [e for rule in FAULT_RULES for e in node.pagerduty.triggers(rule, gpu)]


def run_of(node: Node, gpu: int, *states: str) -> dict[str, Any] | None:
    for run in node.api("/remediation/runs")["runs"]:
        if run["trigger"].get("gpu") == gpu and run["state"] in states:
            return dict(run)
    return None


def test_each_afid_class_takes_its_action_and_pages_once(tmp_path: Path) -> None:
    with Node(tmp_path, SCENARIOS / "afid_classes_early.yaml") as node:
        node.start()
        quarantined = node.wait_for(
            lambda: run_of(node, PHYSICAL_GPU, "quarantined"), 90, "GPU 6 quarantined"
        )
        done = node.wait_for(lambda: run_of(node, RESET_GPU, "done"), 240, "GPU 3's run done")
        page3 = node.wait_for(lambda: fault_pages(node, RESET_GPU), 30, "GPU 3's fault page")[0]
        node.wait_for(lambda: node.pagerduty.resolves(page3.dedup_key), 60, "GPU 3's page resolved")
        held6 = node.wait_for(
            lambda: node.pagerduty.triggers(HELD, PHYSICAL_GPU), 30, "GPU 6's quarantine page"
        )
        status = node.fleetctl("status", node.address, "--timeout", "10")
        explain = node.fleetctl("explain", node.address, str(PHYSICAL_GPU), "--timeout", "10")
        rma = node.fleetctl("rma", "list", node.address, "--physical", "--timeout", "10")
        rma_json = node.fleetctl("rma", "list", node.address, "--json", "--timeout", "10")
        log = node.log_tail(400)

    # GPU 6, physical: one fault page, one quarantine page naming the action; no reset
    pages6 = fault_pages(node, PHYSICAL_GPU)
    assert len(pages6) == 1, [p.summary for p in pages6]
    assert quarantined["plan"] == "quarantine" and quarantined["reset_count"] == 0, quarantined
    assert quarantined["gpus"] == [PHYSICAL_GPU], quarantined["gpus"]
    assert len(held6) == 1, [p.summary for p in held6]
    assert "AFID 20" in held6[0].summary and "OAM" in held6[0].summary, held6[0].summary
    assert held6[0].payload["severity"] == "critical"
    assert not node.pagerduty.resolves(held6[0].dedup_key)  # a person has to act first

    # GPU 3, reset class: one fault page, one reset, verified, the page resolved after it
    pages3 = fault_pages(node, RESET_GPU)
    assert len(pages3) == 1, [p.summary for p in pages3]
    assert done["plan"] == "reset" and done["reset_count"] == 1, done
    assert not node.pagerduty.triggers(HELD, RESET_GPU)
    [resolve] = node.pagerduty.resolves(page3.dedup_key)
    assert resolve.at >= done["entered_at"] - 1.0, (resolve.at, done["entered_at"])
    classified = [c for c in node.pagerduty.changes() if "AFID 22" in c.summary]
    assert classified, "no change event names the fault's AFID class"

    # the engineer's view: GPU 6 is out of service, and explain says why
    assert status.returncode != 0, status.stdout
    assert "quarantin" in (explain.stdout + explain.stderr).lower(), explain.stdout + log[-2000:]

    # the RMA book: GPU 6 alone needs a person (exit 3), its decision names the physical class
    assert rma.returncode == EXIT_PHYSICAL, rma.stdout + rma.stderr
    records = json.loads(rma_json.stdout)["records"]
    needing = {r["gpu"]: r for r in records if r["physical_action_needed"]}
    assert set(needing) == {PHYSICAL_GPU}, [(r["gpu"], r["open_decision"]) for r in records]
    decision = needing[PHYSICAL_GPU]["open_decision"]
    assert 20 in decision["afids"], decision
    assert needing[PHYSICAL_GPU]["serial"] in rma.stdout and "NEEDED" in rma.stdout, rma.stdout
