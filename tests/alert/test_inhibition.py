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


def test_remediation_in_progress_mutes_follow_on_alerts_of_that_gpu(harness: Harness) -> None:
    d = harness.dispatcher(config(CONSOLE))
    t0 = harness.clock.now()
    d.submit(
        [
            fire("GpuRemediationInProgress", at=t0, gpu=3, severity=Severity.INFO),
            fire("VllmWorkerDown", at=t0 + 5, gpu=3),
            fire("VllmWorkerDown", at=t0 + 5, gpu=4),
        ],
        t0 + 5,
    )
    d.tick(t0 + 35)
    lines = harness.lines()
    assert any("GpuRemediationInProgress" in line for line in lines)
    down = [line for line in lines if "VllmWorkerDown" in line]
    assert len(down) == 1 and "gpu=4" in down[0]
    # remediation ends but the worker is still down: now it is news
    d.submit(
        [
            resolve(
                "GpuRemediationInProgress", at=t0 + 100, fired_at=t0, gpu=3, severity=Severity.INFO
            )
        ],
        t0 + 100,
    )
    d.tick(t0 + 100)
    d.tick(t0 + 160)
    down = [line for line in harness.lines() if "VllmWorkerDown" in line]
    assert len(down) == 2 and "gpu=3" in down[1]


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
    views = {a["labels"]["alertname"]: a for a in d.alerts(t0 + 30)}  # type: ignore[index]
    assert views["GpuHot"]["inhibitedBy"] == [views["NodePowerLost"]["fingerprint"]]
