"""Inhibition with Alertmanager's semantics, and the two rules fleetd ships by default."""

from __future__ import annotations

from fleetd.alert.config import InhibitRuleConfig
from fleetd.alert.inhibit import Inhibitions, InhibitRule
from fleetd.alert.notification import AlertRecord
from fleetd.model import Severity, make_labels
from tests.alert.support import Harness, config, fire, resolve


def record(name: str, fp: str, firing: bool = True, **labels: str) -> AlertRecord:
    return AlertRecord(
        fingerprint=fp,
        rule=name,
        status="firing" if firing else "resolved",
        severity=labels.get("severity", "critical"),
        labels=make_labels({"alertname": name, "node": "n1", **labels}),
    )


def rule(source: list[str], target: list[str], equal: list[str]) -> InhibitRule:
    return InhibitRule.from_config(
        InhibitRuleConfig(source_matchers=source, target_matchers=target, equal=equal)
    )


def test_source_mutes_targets_with_equal_labels_only() -> None:
    rules = [rule(['alertname="Reset"'], ['alertname="WorkerDown"'], ["gpu"])]
    reset = record("Reset", "a", gpu="3")
    down3 = record("WorkerDown", "b", gpu="3")
    down4 = record("WorkerDown", "c", gpu="4")
    inhibitions = Inhibitions(rules, [reset, down3, down4])
    assert inhibitions.muted_by(down3) == "a"
    assert inhibitions.muted_by(down4) is None
    assert inhibitions.muted_by(reset) is None


def test_resolved_source_mutes_nothing() -> None:
    rules = [rule(['alertname="Reset"'], ['alertname="WorkerDown"'], ["gpu"])]
    reset = record("Reset", "a", firing=False, gpu="3")
    down = record("WorkerDown", "b", gpu="3")
    assert Inhibitions(rules, [reset, down]).muted_by(down) is None


def test_missing_label_counts_as_equal_to_empty() -> None:
    rules = [rule(['alertname="NodeDown"'], ['alertname="GpuHot"'], ["rack"])]
    node = record("NodeDown", "a")
    gpu = record("GpuHot", "b", gpu="1")
    assert Inhibitions(rules, [node, gpu]).muted_by(gpu) == "a"


def test_alert_matching_both_sides_never_inhibits_itself_or_its_peers() -> None:
    rules = [rule(['severity="critical"'], ['severity=~"critical|warning"'], ["gpu"])]
    a = record("A", "a", gpu="1", severity="critical")
    b = record("B", "b", gpu="1", severity="critical")
    w = record("W", "w", gpu="1", severity="warning")
    inhibitions = Inhibitions(rules, [a, b, w])
    assert inhibitions.muted_by(a) is None
    assert inhibitions.muted_by(b) is None
    assert inhibitions.muted_by(w) in {"a", "b"}


CONSOLE = {
    "receivers": [{"name": "ops", "console": [{}]}],
    "route": {
        "receiver": "ops",
        "group_by": ["alertname"],
        "group_wait": "30s",
        "group_interval": "1m",
    },
}  # inhibit_rules left out: the defaults apply


def test_source_never_mutes_the_alert_it_names_as_its_cause() -> None:
    rules = [rule(['alertname="Reset"'], ['alertname=~".+"'], ["gpu"])]
    fault = record("EccFault", "f1", gpu="3")
    other = record("EccFault", "f2", gpu="3", type="correctable")
    reset = AlertRecord(
        fingerprint="r",
        rule="Reset",
        status="firing",
        severity="info",
        labels=make_labels({"alertname": "Reset", "node": "n1", "gpu": "3"}),
        annotations=make_labels({"caused_by": " f1 ,zz"}),
    )
    inhibitions = Inhibitions(rules, [reset, fault, other])
    assert inhibitions.muted_by(fault) is None  # named as the cause
    assert inhibitions.muted_by(other) == "r"  # not named: muted as before


def test_remediation_in_progress_mutes_only_what_the_reset_and_drain_cause(
    harness: Harness,
) -> None:
    d = harness.dispatcher(config(CONSOLE))
    t0 = harness.clock.now()
    d.submit([fire("GpuEccUncorrectableError", at=t0, gpu=3)], t0)
    d.submit(
        [
            fire("GpuRemediationInProgress", at=t0 + 1, gpu=3, severity=Severity.INFO),
            fire("GpuMissing", at=t0 + 5, gpu=3),
            fire("GpuTelemetryStale", at=t0 + 5, gpu=3, severity=Severity.WARNING),
            fire("GpuXgmiLinkDown", at=t0 + 5, gpu=3, labels={"link": 1}),
            fire("GpuPcieLinkWidthDegraded", at=t0 + 5, gpu=3, severity=Severity.WARNING),
            fire("GpuPcieLinkSpeedDegraded", at=t0 + 5, gpu=3, severity=Severity.WARNING),
            fire("GpuMissing", at=t0 + 5, gpu=4),  # not being remediated: news
            # vLLM alerts carry worker, not gpu (the rules aggregate by worker)
            fire("VllmWorkerDown", at=t0 + 5, gpu=None, labels={"worker": "gpu3"}),
            fire("VllmWorkerStalled", at=t0 + 5, gpu=None, labels={"worker": "gpu3"}),
        ],
        t0 + 5,
    )
    d.tick(t0 + 35)
    printed = {(line.split()[3], "gpu=4" in line) for line in harness.lines()}
    assert printed == {
        ("GpuEccUncorrectableError", False),  # the fault itself pages
        ("GpuRemediationInProgress", False),
        ("GpuMissing", True),
    }
    views = {(a.alert.alertname, a.alert.label("gpu")): a for a in d.alerts(t0 + 35)}
    assert views[("GpuEccUncorrectableError", "3")].inhibited_by == ()
    assert views[("VllmWorkerDown", None)].inhibited_by
    # remediation ends but the GPU is still missing: now it is news
    d.submit(
        [
            resolve(
                "GpuRemediationInProgress",
                at=t0 + 100,
                fired_at=t0 + 1,
                gpu=3,
                severity=Severity.INFO,
            )
        ],
        t0 + 100,
    )
    d.tick(t0 + 100)
    d.tick(t0 + 160)
    missing = [line for line in harness.lines() if "GpuMissing" in line]
    assert len(missing) == 2 and "gpu=3" in missing[1]


def test_worker_and_remediation_alerts_do_not_mute_a_nodes_gpu_alerts(harness: Harness) -> None:
    """They are critical and node-level, but explain nothing about a GPU's own faults."""
    d = harness.dispatcher(config(CONSOLE))
    t0 = harness.clock.now()
    d.submit(
        [
            fire("VllmWorkerDown", at=t0, gpu=None, labels={"worker": "gpu5"}),
            fire("GpuRemediationBreakerOpen", at=t0, gpu=None),
            fire("GpuEccUncorrectableError", at=t0, gpu=3),
            fire("GpuRemediationHeld", at=t0, gpu=3, labels={"gpus": "0,1,2,3,4,5,6,7"}),
        ],
        t0,
    )
    d.tick(t0 + 30)
    names = {line.split()[3] for line in harness.lines()}
    assert names == {
        "VllmWorkerDown",
        "GpuRemediationBreakerOpen",
        "GpuEccUncorrectableError",
        "GpuRemediationHeld",
    }


def test_critical_node_alert_mutes_its_gpus_alerts(harness: Harness) -> None:
    d = harness.dispatcher(config(CONSOLE))
    t0 = harness.clock.now()
    d.submit(
        [
            fire("NodePowerLost", at=t0, gpu=None),
            fire("GpuHot", at=t0, gpu=1),
            fire("NodeClockSkew", at=t0, gpu=None, severity=Severity.WARNING),
        ],
        t0,
    )
    d.tick(t0 + 30)
    names = {line.split()[3] for line in harness.lines()}
    assert names == {"NodePowerLost", "NodeClockSkew"}
    views = {a.alert.alertname: a for a in d.alerts(t0 + 30)}
    assert views["GpuHot"].inhibited_by == (views["NodePowerLost"].alert.fingerprint,)
