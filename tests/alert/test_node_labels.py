"""The node's labels (``node.labels``: cluster, rack) on every alert and change event, and the
GPU's identity in PagerDuty's custom_details; fingerprints, dedup keys and what receivers
already know do not change when labels are added."""

from __future__ import annotations

import io
import random
from collections.abc import Mapping
from typing import Any

from pytest_httpserver import HTTPServer

from fleetd.alert.dispatch import Dispatcher
from fleetd.alert.gpuinfo import GpuDetails, details_from
from fleetd.alert.notification import ChangeEvent
from fleetd.model import GpuIdentity
from tests.alert.support import NODE, Harness, Recorder, config, fire, resolve

KEY = "R0UT1NGKEY0123456789abcdefABCDEF"
NODE_LABELS = {"cluster": "inference-eu1", "rack": "r12"}
GPU3 = GpuIdentity(
    index=3,
    uuid="GPU-3b2c",
    bdf="0000:46:00.0",
    serial="PCB123456789",
    product="AMD Instinct MI355X",
    model="MI355X",
    vbios="113-D6660100-102",
    driver_version="6.12.12",
)


def make(
    harness: Harness,
    cfg: dict[str, Any],
    labels: Mapping[str, str] | None = None,
    gpu_details: GpuDetails | None = None,
) -> Dispatcher:
    return Dispatcher(
        config(cfg),
        harness.db,
        node=NODE,
        now=harness.clock.now(),
        rng=random.Random(1),
        stream=io.StringIO(),
        external_labels=labels,
        gpu_details=gpu_details,
    )


def everything(httpserver: HTTPServer, **route: Any) -> dict[str, Any]:
    return {
        "receivers": [
            {
                "name": "all",
                "pagerduty": [
                    {
                        "routing_key": KEY,
                        "url": httpserver.url_for("/pd"),
                        "change_url": httpserver.url_for("/pd-change"),
                    }
                ],
                "webhook": [{"url": httpserver.url_for("/hook"), "send_changes": True}],
                "alertmanager": [{"url": httpserver.url_for("/am")}],
            }
        ],
        "route": {
            "receiver": "all",
            "group_by": ["alertname"],
            "group_wait": "10s",
            "group_interval": "1m",
            **route,
        },
        "inhibit_rules": [],
    }


def recorders(httpserver: HTTPServer) -> dict[str, Recorder]:
    out = {
        "pd": Recorder((202, "{}", {})),
        "pd-change": Recorder((202, "{}", {})),
        "hook": Recorder((200, "", {})),
        "am": Recorder((200, "", {})),
    }
    for path, recorder in out.items():
        where = "/am/api/v2/alerts" if path == "am" else f"/{path}"
        httpserver.expect_request(where).respond_with_handler(recorder)
    return out


def run(harness: Harness, d: Dispatcher, seconds: int) -> None:
    for _ in range(seconds):
        d.tick(harness.clock.now())
        harness.clock.advance(1)


def test_every_alert_and_change_event_carries_the_node_labels(
    harness: Harness, httpserver: HTTPServer
) -> None:
    seen = recorders(httpserver)
    d = make(harness, everything(httpserver), NODE_LABELS)
    t0 = harness.clock.now()
    own = fire("GpuHot", at=t0, gpu=1, labels={"rack": "r99"})  # its own label wins
    d.submit([fire("GpuEccUncorrectableError", at=t0, gpu=3), own], t0)
    d.submit_change(ChangeEvent("draining GPU 3", at=t0, thread="run-1"), t0)
    run(harness, d, 15)
    by_rule = {b["payload"]["class"]: b["payload"]["custom_details"] for b in seen["pd"].bodies()}
    ecc = by_rule["GpuEccUncorrectableError"]
    assert ecc["labels"]["cluster"] == "inference-eu1" and ecc["labels"]["rack"] == "r12"
    assert ecc["node_labels"] == NODE_LABELS and ecc["node"] == NODE
    assert by_rule["GpuHot"]["labels"]["rack"] == "r99"
    hook_alerts = [a for b in seen["hook"].bodies() if "alerts" in b for a in b["alerts"]]
    assert {a["labels"]["cluster"] for a in hook_alerts} == {"inference-eu1"}
    (am_body,) = seen["am"].bodies()
    assert {a["labels"]["cluster"] for a in am_body} == {"inference-eu1"}
    (change,) = seen["pd-change"].bodies()
    assert change["payload"]["custom_details"]["labels"] == NODE_LABELS
    assert change["payload"]["custom_details"]["thread"] == "run-1"
    (hook_change,) = [b for b in seen["hook"].bodies() if b["version"] == "fleetd-change-1"]
    assert hook_change["labels"] == NODE_LABELS


def test_routes_match_and_group_by_node_labels(harness: Harness, httpserver: HTTPServer) -> None:
    seen = recorders(httpserver)
    cfg = everything(httpserver, group_by=["cluster"])
    cfg["receivers"].append({"name": "eu", "webhook": [{"url": httpserver.url_for("/eu")}]})
    cfg["route"]["routes"] = [{"matchers": ['cluster="inference-eu1"'], "receiver": "eu"}]
    eu = Recorder((200, "", {}))
    httpserver.expect_request("/eu").respond_with_handler(eu)
    d = make(harness, cfg, NODE_LABELS)
    t0 = harness.clock.now()
    d.submit([fire("GpuHot", at=t0, gpu=g) for g in range(4)], t0)
    run(harness, d, 15)
    (body,) = eu.bodies()
    assert body["groupLabels"] == {"cluster": "inference-eu1"}
    assert len(body["alerts"]) == 4
    assert seen["pd"].bodies() == []  # the cluster route took them


def test_alerts_announced_before_node_labels_existed_are_not_announced_again(
    harness: Harness, httpserver: HTTPServer
) -> None:
    """fleetd upgraded (or node.labels set) with alerts firing: no new page, no new
    Alertmanager alert, no new group message; the resolve closes the same incident."""
    seen = recorders(httpserver)
    cfg = everything(httpserver, group_by=["alertname", "cluster"])
    old = make(harness, cfg)  # before: no node labels
    t0 = harness.clock.now()
    d_fire = fire("GpuEccUncorrectableError", at=t0, gpu=3)
    old.submit([d_fire], t0)
    run(harness, old, 15)
    (trigger,) = seen["pd"].bodies()
    fingerprint = trigger["payload"]["custom_details"]["fingerprint"]
    old.close()

    new = make(harness, cfg, NODE_LABELS)  # restarted with node labels
    t1 = harness.clock.now()
    new.submit([d_fire], t1)  # the rules engine reports the same episode again
    new.submit([fire("GpuHot", at=t1, gpu=5)], t1)  # and a new alert fires
    run(harness, new, 90)
    triggers = [b for b in seen["pd"].bodies() if b["event_action"] == "trigger"]
    assert [b["payload"]["class"] for b in triggers] == ["GpuEccUncorrectableError", "GpuHot"]
    assert triggers[1]["payload"]["custom_details"]["labels"]["cluster"] == "inference-eu1"
    hook = [[a["labels"]["alertname"] for a in b["alerts"]] for b in seen["hook"].bodies()]
    assert hook == [["GpuEccUncorrectableError"], ["GpuHot"]]
    am_labels = {a["labels"]["alertname"]: a["labels"] for b in seen["am"].bodies()[1:] for a in b}
    assert "cluster" not in am_labels["GpuEccUncorrectableError"]  # the same label set
    assert am_labels["GpuHot"]["cluster"] == "inference-eu1"
    views = {a.alert.alertname: a for a in new.alerts(harness.clock.now())}
    assert views["GpuEccUncorrectableError"].alert.fingerprint == fingerprint

    t2 = harness.clock.now()
    new.submit([resolve("GpuEccUncorrectableError", at=t2, fired_at=t0, gpu=3)], t2)
    run(harness, new, 70)
    resolves = [b for b in seen["pd"].bodies() if b["event_action"] == "resolve"]
    assert [b["dedup_key"] for b in resolves] == [trigger["dedup_key"]]
    last_am = {a["labels"]["alertname"]: a for a in seen["am"].bodies()[-1]}
    assert "cluster" not in last_am["GpuEccUncorrectableError"]["labels"]

    t3 = harness.clock.now()  # the next episode carries the node labels
    new.submit([fire("GpuEccUncorrectableError", at=t3, gpu=3)], t3)
    run(harness, new, 15)
    latest = [b for b in seen["pd"].bodies() if b["event_action"] == "trigger"][-1]
    assert latest["payload"]["custom_details"]["labels"]["cluster"] == "inference-eu1"
    assert latest["dedup_key"] == trigger["dedup_key"]  # same alert, same key


def test_pagerduty_carries_the_gpus_identity(harness: Harness, httpserver: HTTPServer) -> None:
    seen = recorders(httpserver)

    def flaky(gpu: str) -> Mapping[str, str]:
        if gpu == "6":
            raise RuntimeError("amdsmi went away")
        return details_from(lambda: [GPU3])(gpu)

    d = make(harness, everything(httpserver, group_by=["gpu"]), gpu_details=flaky)
    t0 = harness.clock.now()
    d.submit(
        [
            fire("GpuEccUncorrectableError", at=t0, gpu=3),
            fire("GpuHot", at=t0, gpu=4),  # unknown to the backend
            fire("GpuMissing", at=t0, gpu=6),  # the lookup fails
            fire("NodeHot", at=t0, gpu=None),
        ],
        t0,
    )
    run(harness, d, 15)
    details = {b["payload"]["class"]: b["payload"]["custom_details"] for b in seen["pd"].bodies()}
    assert details["GpuEccUncorrectableError"]["gpu"] == {
        "serial": "PCB123456789",
        "bdf": "0000:46:00.0",
        "product": "AMD Instinct MI355X",
        "model": "MI355X",
        "vbios": "113-D6660100-102",
        "driver_version": "6.12.12",
        "uuid": "GPU-3b2c",
    }
    assert {"GpuHot", "GpuMissing", "NodeHot"} <= set(details)
    assert not any("gpu" in details[n] for n in ("GpuHot", "GpuMissing", "NodeHot"))
    assert "node_labels" not in details["GpuHot"]  # none configured
