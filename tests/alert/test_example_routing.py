"""The shipped example (docs/fleetd.example.yaml, ``alerting:``) against loopback receivers:
an uncorrectable ECC error pages even while the remediation run it started is in progress
for the same GPU, and the run's own consequences stay quiet."""

from __future__ import annotations

import io
import json
import random
from pathlib import Path
from typing import Any

import pytest
import yaml
from pytest_httpserver import HTTPServer

from fleetd.alert.config import AlertingConfig
from fleetd.alert.dispatch import Dispatcher
from fleetd.model import Severity
from tests.alert.support import NODE, Harness, Recorder, fire

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "fleetd.example.yaml"
KEY = "R0UT1NGKEY0123456789abcdefABCDEF"
OLD_DEFAULT = {  # the rule fleetd shipped before: every GPU alert of a GPU being remediated
    "source_matchers": ['alertname="GpuRemediationInProgress"'],
    "target_matchers": ['alertname!="GpuRemediationInProgress"', 'gpu=~".+"'],
    "equal": ["node", "gpu"],
}


def example_alerting(httpserver: HTTPServer, extra_inhibit: list[dict[str, Any]]) -> AlertingConfig:
    """The example's alerting section with every receiver pointed at the loopback server and
    secrets given inline."""
    section = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))["alerting"]
    for receiver in section["receivers"]:
        for pd in receiver.get("pagerduty", []):
            pd.pop("routing_key_file")
            pd.update(
                routing_key=KEY,
                url=httpserver.url_for("/pd"),
                change_url=httpserver.url_for("/pd-change"),
            )
        for slack in receiver.get("slack", []):
            if slack.pop("webhook_url_file", None) is not None:
                slack["webhook_url"] = httpserver.url_for("/slack-hook")
            if slack.pop("bot_token_env", None) is not None:
                slack.update(bot_token="xoxb-test", api_url=httpserver.url_for("/slack-api"))
        for i, am in enumerate(receiver.get("alertmanager", [])):
            am.pop("bearer_token_file", None)
            am["url"] = httpserver.url_for(f"/am{i}")
        for hook in receiver.get("webhook", []):
            hook.pop("url_file")
            hook["url"] = httpserver.url_for("/audit")
    section["inhibit_rules"] += extra_inhibit
    return AlertingConfig.model_validate(section)


class Receivers:
    def __init__(self, httpserver: HTTPServer) -> None:
        self.pd = Recorder((202, '{"status":"success"}', {}))
        self.slack_api = Recorder()
        self.slack_api.replies = lambda seen: (
            200,
            json.dumps({"ok": True, "channel": "C1", "ts": "1700000000.000100"}),
            {"Content-Type": "application/json"},
        )
        self.other = Recorder((200, "ok", {}))
        httpserver.expect_request("/pd").respond_with_handler(self.pd)
        httpserver.expect_request("/pd-change").respond_with_handler(self.other)
        httpserver.expect_request("/slack-hook").respond_with_handler(self.other)
        httpserver.expect_request("/slack-api/chat.postMessage").respond_with_handler(
            self.slack_api
        )
        httpserver.expect_request("/slack-api/chat.update").respond_with_handler(self.slack_api)
        for i in range(2):
            httpserver.expect_request(f"/am{i}/api/v2/alerts").respond_with_handler(self.other)
        httpserver.expect_request("/audit").respond_with_handler(self.other)


def test_the_example_repeats_the_default_inhibit_rules() -> None:
    section = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))["alerting"]
    defaults = AlertingConfig().inhibit_rules
    shipped = AlertingConfig.model_validate({"inhibit_rules": section["inhibit_rules"]})
    assert shipped.inhibit_rules[: len(defaults)] == defaults


@pytest.mark.parametrize(
    "extra_inhibit",
    [[], [OLD_DEFAULT]],
    ids=["as shipped", "with a site rule muting every alert of the GPU"],
)
def test_ecc_error_pages_while_its_remediation_is_in_progress(
    harness: Harness, httpserver: HTTPServer, extra_inhibit: list[dict[str, Any]]
) -> None:
    seen = Receivers(httpserver)
    d = Dispatcher(
        example_alerting(httpserver, extra_inhibit),
        harness.db,
        node=NODE,
        now=harness.clock.now(),
        rng=random.Random(5),
        stream=io.StringIO(),
        external_labels={"cluster": "inference-eu1", "rack": "r12"},
    )
    t0 = harness.clock.now()
    ecc = fire("GpuEccUncorrectableError", at=t0, gpu=3, value=1.0)
    d.submit([ecc], t0)
    # about a second later the run it started raises its in-progress alert, naming the fault
    in_progress = fire(
        "GpuRemediationInProgress",
        at=t0 + 1,
        gpu=3,
        severity=Severity.INFO,
        labels={"run_id": "run-1"},
        annotations={
            "summary": "remediation run run-1 holds GPU 3",
            "caused_by": ecc.alert.key.fingerprint(),
        },
    )
    d.submit([in_progress], t0 + 1)
    # the drain and reset then cause what the run is expected to cause
    d.submit(
        [
            fire("GpuMissing", at=t0 + 5, gpu=3),
            fire("GpuXgmiLinkDown", at=t0 + 5, gpu=3, labels={"link": 2}),
            fire("VllmWorkerDown", at=t0 + 6, gpu=None, labels={"worker": "gpu3"}),
        ],
        t0 + 6,
    )
    for step in range(0, 60):
        d.tick(t0 + step)
    pages = [b for b in seen.pd.bodies() if b["event_action"] == "trigger"]
    assert [p["payload"]["class"] for p in pages] == ["GpuEccUncorrectableError"]
    page = pages[0]
    assert page["dedup_key"].startswith(f"fleetd/{NODE}/gpu3/GpuEccUncorrectableError/")
    assert page["payload"]["severity"] == "critical"
    assert page["payload"]["custom_details"]["node_labels"]["cluster"] == "inference-eu1"
    incidents = [b["text"] for b in seen.slack_api.bodies()]
    assert any("GpuEccUncorrectableError" in t for t in incidents)
    assert not any("GpuMissing" in t or "VllmWorkerDown" in t for t in incidents)
    views = {a.alert.alertname: a for a in d.alerts(t0 + 60)}
    assert views["GpuEccUncorrectableError"].inhibited_by == ()
    for muted in ("GpuMissing", "GpuXgmiLinkDown", "VllmWorkerDown"):
        assert views[muted].inhibited_by == (in_progress.alert.key.fingerprint(),), muted
