"""Every text is read once by a person: no GPU or node said twice, a resolved alert not shown as
if still true, one compact line per alert (or per alerts that say the same), nothing cut in the
middle of a word, PagerDuty's limits kept (summary ≤ 1024, dedup_key ≤ 255)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from pytest_httpserver import HTTPServer

from fleetd.alert.notification import AlertRecord, ChangeEvent, Notification
from fleetd.alert.pagerduty import dedup_key, summary
from fleetd.alert.slack import render
from fleetd.alert.wording import cut, gpu_phrase, headline
from fleetd.model import make_labels
from tests.alert.support import Harness, Recorder, config, fire, resolve

KEY = "R0UT1NGKEY0123456789abcdefABCDEF"
ECC = {"summary": "GPU 3: 1 new uncorrectable ECC error(s)"}
HOT = {"summary": "GPU 3 hotspot is 4 °C below its throttle limit"}
WORDS = "the quick brown fox jumps over the lazy dog "


def rec(
    name: str = "GpuEccUncorrectableError",
    gpu: str | None = "3",
    summary_text: str | None = "GPU 3: 1 new uncorrectable ECC error(s)",
    firing: bool = True,
    value: float | None = 1.0,
    fp: str = "f",
    **labels: str,
) -> AlertRecord:
    all_labels = {"alertname": name, "node": "node-b", **labels}
    if gpu is not None:
        all_labels["gpu"] = gpu
    return AlertRecord(
        fingerprint=fp,
        rule=name,
        status="firing" if firing else "resolved",
        severity="critical",
        labels=make_labels(all_labels),
        annotations=make_labels({"summary": summary_text} if summary_text else {}),
        value=value,
    )


@pytest.mark.parametrize(
    ("alert", "expected"),
    [
        (rec(), "node-b GPU 3: 1 new uncorrectable ECC error(s)"),
        (
            rec(summary_text="GPU 3 hotspot is 4 °C below its throttle limit"),
            "node-b GPU 3 hotspot is 4 °C below its throttle limit",
        ),
        (rec(summary_text="hotspot 105 °C for 5m"), "node-b GPU 3: hotspot 105 °C for 5m"),
        (rec(summary_text="GpuHot on GPU 3"), "node-b: GpuHot on GPU 3"),
        (rec(summary_text="GPU 31 is hot"), "node-b GPU 3: GPU 31 is hot"),  # not GPU 3
        (rec(summary_text="node-b: storage degraded", gpu=None), "node-b: storage degraded"),
        (rec(summary_text=None, gpu=None, name="NodeHot"), "node-b: NodeHot"),
    ],
)
def test_headline_says_node_and_gpu_once(alert: AlertRecord, expected: str) -> None:
    assert headline("node-b", alert) == expected
    assert summary("node-b", alert) == expected


def test_cut_keeps_whole_words() -> None:
    text = WORDS * 100
    out = cut(text, 1024)
    assert len(out) <= 1024 and out.endswith("…")
    assert text.startswith(out[:-1]) and text[len(out) - 1] == " "  # cut at a space
    assert cut("x" * 50, 10) == "x" * 9 + "…"  # one long word: cut it rather than nothing
    assert cut("short", 10) == "short"


def test_gpu_phrase() -> None:
    assert gpu_phrase(["3"]) == "GPU 3"
    assert gpu_phrase(["5", "0", "2"]) == "GPUs 0, 2, 5"
    assert gpu_phrase([str(g) for g in range(8)]) == "GPUs 0–7"
    assert gpu_phrase(["0", "1", "3", "4", "5"]) == "GPUs 0, 1, 3–5"


# ----------------------------------------------------------------------------- PagerDuty
@pytest.fixture
def pagerduty(httpserver: HTTPServer) -> Recorder:
    recorder = Recorder((202, '{"status":"success"}', {}))
    httpserver.expect_request("/v2/enqueue").respond_with_handler(recorder)
    return recorder


def pd_cfg(httpserver: HTTPServer) -> dict[str, Any]:
    pd = {"routing_key": KEY, "url": httpserver.url_for("/v2/enqueue")}
    return {
        "receivers": [{"name": "oncall", "pagerduty": [pd]}],
        "route": {"receiver": "oncall", "group_by": ["gpu"], "group_wait": "10s"},
        "inhibit_rules": [],
    }


def test_pagerduty_summary_names_the_gpu_once_and_stays_in_its_limits(
    harness: Harness, httpserver: HTTPServer, pagerduty: Recorder
) -> None:
    d = harness.dispatcher(config(pd_cfg(httpserver)))
    t0 = harness.clock.now()
    long = "GPU 4 " + WORDS * 60
    d.submit(
        [
            fire("GpuEccUncorrectableError", at=t0, gpu=3, annotations=ECC),
            fire("GpuHot", at=t0, gpu=4, annotations={"summary": long}),
        ],
        t0,
    )
    d.tick(t0 + 10)
    by_class = {b["payload"]["class"]: b for b in pagerduty.bodies()}
    ecc = by_class["GpuEccUncorrectableError"]["payload"]["summary"]
    assert ecc == "node7 GPU 3: 1 new uncorrectable ECC error(s)"
    hot = by_class["GpuHot"]["payload"]["summary"]
    assert len(hot) <= 1024 and hot.endswith("…")
    assert f"node7 {long}".startswith(hot[:-1].rstrip())
    assert re.search(r"\bdog|\bfox|\bthe|\bover|\blazy|\bjumps|\bbrown|\bquick", hot[-8:])


def test_dedup_key_is_stable_per_alert_and_at_most_255_characters() -> None:
    held = rec("GpuRemediationHeld", gpus="0,1,2,3,4,5,6,7", run_id="r-1", fp="a1b2c3d4e5f60718")
    again = rec("GpuRemediationHeld", gpus="0,1,2,3,4,5,6,7", run_id="r-2", fp="a1b2c3d4e5f60718")
    assert dedup_key("node-b", held) == dedup_key("node-b", again)  # run id is not in it
    assert dedup_key("node-b", held) == "fleetd/node-b/gpu3/GpuRemediationHeld/a1b2c3d4e5f60718"
    long_node = "n" * 400
    key = dedup_key(long_node, held)
    assert len(key) <= 255 and key.endswith("/gpu3/GpuRemediationHeld/a1b2c3d4e5f60718")


# --------------------------------------------------------------------------------- Slack
def notification(*alerts: AlertRecord, truncated: int = 0) -> Notification:
    return Notification(
        receiver="chat",
        integration="chat/slack/0",
        action="notify",
        status="firing" if any(a.firing for a in alerts) else "resolved",
        node="node-b",
        created_at=0.0,
        alerts=alerts,
        truncated_alerts=truncated,
        node_labels=make_labels({"cluster": "inference-eu1", "rack": "r12"}),
    )


def section(blocks: list[dict[str, Any]]) -> str:
    (only,) = [b for b in blocks if b["type"] == "section"]
    text = only["text"]["text"]
    assert isinstance(text, str)
    return text


def test_one_alert_per_unit_is_one_line() -> None:
    held = rec(
        "GpuRemediationHeld",
        summary_text="GPU 3 is out of service: the hive reset did not fix it; quarantined",
        gpus="0,1,2,3,4,5,6,7",
    )
    text, blocks = render(notification(held), 20)
    assert section(blocks) == (
        ":red_circle: *GpuRemediationHeld* GPU 3 (reset unit: GPUs 0–7): is out of service: "
        "the hive reset did not fix it; quarantined"
    )
    assert text.count("out of service") == 1
    assert "cluster *inference-eu1* · rack *r12*" in blocks[-1]["elements"][0]["text"]


def test_alerts_that_say_the_same_share_a_line() -> None:
    same = [
        rec(
            "GpuPcieLinkWidthDegraded",
            gpu=str(g),
            summary_text=f"GPU {g} PCIe link runs at x8",
            fp=f"p{g}",
            value=8.0,
        )
        for g in range(8)
    ]
    other = rec(fp="e3")
    text, blocks = render(notification(*same, other), 20)
    assert section(blocks).splitlines() == [
        ":red_circle: *GpuPcieLinkWidthDegraded* GPUs 0–7: PCIe link runs at x8",
        ":red_circle: *GpuEccUncorrectableError* GPU 3: 1 new uncorrectable ECC error(s)",
    ]
    assert text.splitlines()[1:] == [
        "- GpuPcieLinkWidthDegraded (critical) GPUs 0–7: PCIe link runs at x8",
        "- GpuEccUncorrectableError (critical) GPU 3: 1 new uncorrectable ECC error(s)",
    ]


def test_a_long_list_is_capped_and_counted_never_cut_mid_word() -> None:
    alerts = [
        rec("GpuHot", gpu=str(g), summary_text=f"GPU {g} at {g} dB: " + WORDS * 12, fp=f"h{g}")
        for g in range(40)
    ]
    text, blocks = render(notification(*alerts, truncated=3), 40)
    body = section(blocks)
    assert len(body) <= 3000 and len(text) <= 3000
    lines = body.splitlines()
    assert 0 < len(lines) < 40
    for line in lines:  # each line whole, or cut at a word with "…"
        assert line.endswith("…")
        assert line[:-1].rstrip().split()[-1] in WORDS.split()
    hidden = 40 - len(lines) + 3
    assert f"and {hidden} more alerts not listed" in blocks[-1]["elements"][0]["text"]
    assert text.endswith(f"(and {hidden} more alerts not listed)")
    assert [line.split(" at ")[0] for line in lines] == [
        f":red_circle: *GpuHot* GPU {g}:" for g in range(len(lines))
    ]


def test_resolved_says_so_and_shows_the_last_value_as_was() -> None:
    hot = rec("GpuHot", summary_text="GPU 3 hotspot is 4 °C below its throttle limit", value=97.0)
    resolved = rec(
        "GpuHot",
        summary_text="GPU 3 hotspot is 4 °C below its throttle limit",
        value=97.0,
        firing=False,
    )
    _, firing_blocks = render(notification(hot), 20)
    assert "hotspot is 4 °C below" in section(firing_blocks)
    text, blocks = render(notification(resolved), 20)
    assert section(blocks) == ":white_check_mark: *GpuHot* GPU 3: resolved (was 97)"
    assert "below its throttle limit" not in text and "value" not in text
    assert text.splitlines()[1] == "- GpuHot GPU 3: resolved (was 97)"  # "resolved" once


def test_console_resolved_line_and_change_texts_say_things_once(
    harness: Harness, httpserver: HTTPServer
) -> None:
    slack = Recorder((200, "ok", {}))
    httpserver.expect_request("/slack").respond_with_handler(slack)
    cfg = {
        "receivers": [
            {
                "name": "all",
                "console": [{}],
                "slack": [{"webhook_url": httpserver.url_for("/slack"), "send_resolved": True}],
            }
        ],
        "route": {"receiver": "all", "group_wait": "0s", "group_interval": "1m"},
        "inhibit_rules": [],
    }
    d = harness.dispatcher(config(cfg))
    t0 = harness.clock.now()
    d.submit([fire("GpuHot", at=t0, gpu=3, annotations=HOT, value=97.0)], t0)
    d.submit_change(ChangeEvent("node7: draining GPU 3", at=t0), t0)
    for step in range(3):
        d.tick(t0 + step)
    d.submit(
        [resolve("GpuHot", at=t0 + 10, fired_at=t0, gpu=3, annotations=HOT, value=97.0)], t0 + 10
    )
    for step in range(10, 80):
        d.tick(t0 + step)
    lines = harness.lines()
    (resolved_line,) = [line for line in lines if "RESOLVED" in line]
    assert resolved_line.endswith("was=97") and "below" not in resolved_line
    (fired_line,) = [line for line in lines if "FIRING" in line]
    assert fired_line.endswith("value=97: GPU 3 hotspot is 4 °C below its throttle limit")
    texts = [b["text"] for b in slack.bodies()]
    assert "node7: draining GPU 3" in texts  # not "node7: node7: ..."
    assert not any("node7: node7" in t or "GPU 3: GPU 3" in t for t in texts)
