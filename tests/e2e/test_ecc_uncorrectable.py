"""ecc_uncorrectable end to end: an uncorrectable HBM error on GPU 3 (at 5 s), on the shipped
example config — one page, the hive drained, reset once and re-admitted, the page resolved,
and every view of the node telling the same story."""

from __future__ import annotations

import re

import pytest

from tests.e2e import expect
from tests.e2e.expect import MAX_REQUESTS_PER_INTEGRATION, show, triggers
from tests.e2e.runs import FAULT_GPU, FAULT_RULES, Observed
from tests.e2e.standins import alertmanager as am
from tests.e2e.standins.pagerduty import Event
from tests.e2e.standins.slack import API_PREFIX

pytestmark = pytest.mark.slow  # a real daemon through a whole remediation run


def the_page(o: Observed) -> Event:
    """The fault's one page: its first report's rule (the kernel line, the CPER record or the
    ECC counters, whichever fleetd saw first)."""
    pages = [p for rule in FAULT_RULES for p in triggers(o, rule, FAULT_GPU)]
    assert len(pages) == 1, f"{len(pages)} fault triggers for GPU 3; {o.describe()}"
    return pages[0]


def paged_rule(o: Observed) -> str:
    page = the_page(o)
    return next(rule for rule in FAULT_RULES if page.about(rule, FAULT_GPU))


def test_one_page_for_the_error_within_group_wait_and_a_poll(ecc_run: Observed) -> None:
    page = the_page(ecc_run)
    assert ecc_run.fault_at is not None, "the fault step never showed in the daemon's log"
    allowed = ecc_run.timer("group_wait") + ecc_run.poll_s + 2.0
    late = page.at - ecc_run.fault_at
    assert late <= allowed, f"the page came {late:.1f}s after the fault (allowed {allowed:g}s)"
    assert page.payload["severity"] == "critical"
    every = ecc_run.node.pagerduty.triggers()
    assert len(every) == 1, f"paged {len(every)} times: {[e.summary for e in every]}"


def test_the_page_resolves_after_the_workers_are_back(ecc_run: Observed) -> None:
    page = the_page(ecc_run)
    resolves = ecc_run.node.pagerduty.resolves(page.dedup_key)
    assert len(resolves) == 1, f"{len(resolves)} resolves for {page.dedup_key}"
    assert resolves[0].closed_alert, "the resolve did not match the open alert's keys"
    runs = ecc_run.runs
    back_in = [c.at for c in ecc_run.node.fleet.recorded("vllm-rotation") if c.argv[1] == "in"]
    assert len(back_in) == len(ecc_run.node.fleet.workers), "not every worker was re-admitted"
    assert resolves[0].at >= max(back_in), (
        f"resolved {max(back_in) - resolves[0].at:.1f}s before the last worker was back"
    )
    assert runs and runs[0]["state"] == "done", f"the run ended {runs[:1]}"
    assert resolves[0].at >= runs[0]["entered_at"], "resolved before the run was done"


def test_the_hive_was_drained_gracefully_reset_once_and_readmitted(ecc_run: Observed) -> None:
    runs = ecc_run.runs
    assert len(runs) == 1 and runs[0]["state"] == "done", f"runs: {runs}"
    assert runs[0]["gpus"] == list(range(8)), f"the run took GPUs {runs[0]['gpus']}"
    fleet = ecc_run.node.fleet
    bad = [c for c in fleet.recorded() if c.problem]
    assert not bad, f"scripts called with unexpected arguments: {bad}"
    for name, worker in fleet.workers.items():
        s = worker.stats
        assert s.stops == 1 and s.starts == 1, f"{name}: {s.stops} stops, {s.starts} starts"
        assert s.stopped_in_rotation == 0, f"{name} was stopped while still in rotation"
        assert s.aborted == 0, f"{name}: {s.aborted} requests aborted (stopped before idle)"
        assert worker.in_rotation and worker.state() == "active", f"{name} is not serving"
    resets = expect.samples(ecc_run.after.metrics if ecc_run.after else "",
                            "fleetd_remediation_resets_total")  # fmt: skip
    assert [v for _, v in resets] == [1.0], f"fleetd_remediation_resets_total {resets}"


def test_at_most_12_notification_requests_per_integration(ecc_run: Observed) -> None:
    node = ecc_run.node
    counts = {
        "pagerduty": len(node.pagerduty.records),
        "slack webhook (chat)": len(node.slack.where(lambda r: r.path == node.slack.webhook_path)),
        "slack bot (incidents)": len(node.slack.where(lambda r: r.path.startswith(API_PREFIX))),
        "webhook (audit)": len(node.audit.records),
    }
    over = {k: v for k, v in counts.items() if v > MAX_REQUESTS_PER_INTEGRATION}
    assert not over, f"notification requests over {MAX_REQUESTS_PER_INTEGRATION}: {counts}"


def test_no_stand_in_answered_429_or_rejected_an_event(ecc_run: Observed) -> None:
    node = ecc_run.node
    servers = [node.pagerduty, node.slack, node.audit]
    servers += [p for p in node.alertmanagers if not isinstance(p, am.RealAlertmanager)]
    limited = {s.name: s.statuses().count(429) for s in servers if 429 in s.statuses()}
    assert not limited, f"429 answers: {limited} of {[len(s.records) for s in servers]} requests"
    rejected = [(s.name, r.path, r.problems) for s in servers for r in s.records if r.problems]
    assert not rejected, f"rejected as invalid: {rejected[:5]}"


STORY = (
    ("planned", re.compile(r"\bplanned\b", re.I), None),
    # the reset itself, not the budget line "reset 1 of 3 for GPU 3"
    ("reset", re.compile(r"\breset(ting)?\b", re.I), re.compile(r"\b\d+ of \d+\b")),
    ("back in service", re.compile(r"back in service", re.I), None),
)


def _in_order(summaries: list[str]) -> str | None:
    """Why the summaries do not read planned → reset → back in service (None: they do)."""
    at = -1
    for what, pattern, unless in STORY:
        found = next(
            (i for i, s in enumerate(summaries)
             if i > at and pattern.search(s) and not (unless and unless.search(s))),
            None,
        )  # fmt: skip
        if found is None:
            return f"no '{what}' message after message {at}: {summaries}"
        at = found
    return None


def test_change_events_tell_planned_reset_back_in_service(ecc_run: Observed) -> None:
    summaries = [e.summary for e in ecc_run.node.pagerduty.changes()]
    why = _in_order(summaries)
    assert why is None, why
    assert len(summaries) <= MAX_REQUESTS_PER_INTEGRATION, f"{len(summaries)} change events"


def test_chat_gets_the_same_story(ecc_run: Observed) -> None:
    node = ecc_run.node
    texts = [m.text for m in node.slack.accepted() if m.where == node.slack.webhook_path]
    why = _in_order([t for t in texts if not t.startswith("[")])  # not the alert messages
    assert why is None, why


def test_fleetctl_by_address_says_out_of_service_during_the_run_then_0(ecc_run: Observed) -> None:
    assert ecc_run.during, f"no look while the workers were out; {ecc_run.describe()}"
    for look in ecc_run.during:
        why = expect.fleetctl_says_out_of_service(look.by_address.returncode,
                                                  look.by_address.stdout)  # fmt: skip
        assert why is None, (
            f"fleetctl status {ecc_run.node.address} during the run "
            f"(API {look.status['health']['state']}, "
            f"{look.status['remediation']['gpus_out_of_service']} GPUs out): {why}; "
            f"{show(look.by_address)}"
        )
    assert ecc_run.after is not None
    why = expect.fleetctl_says_healthy(ecc_run.after.by_address.returncode,
                                       ecc_run.after.by_address.stdout)  # fmt: skip
    assert why is None, f"after the run: {why}; {show(ecc_run.after.by_address)}"


def test_fleetctl_by_name_says_out_of_service_during_the_run_then_0(ecc_run: Observed) -> None:
    assert ecc_run.during, f"no look while the workers were out; {ecc_run.describe()}"
    for look in ecc_run.during:
        why = expect.fleetctl_says_out_of_service(look.by_name.returncode, look.by_name.stdout)
        assert why is None, (
            f"fleetctl status NODE during the run (API {look.status['health']['state']}, "
            f"{look.status['remediation']['gpus_out_of_service']} GPUs out, run "
            f"{[r['state'] for r in look.status['remediation']['active']]}): {why}"
        )
    assert ecc_run.after is not None
    why = expect.fleetctl_says_healthy(ecc_run.after.by_name.returncode,
                                       ecc_run.after.by_name.stdout)  # fmt: skip
    assert why is None, f"after the run: {why}; {show(ecc_run.after.by_name)}"


def test_metrics_and_status_agree_with_fleetctl(ecc_run: Observed) -> None:
    looks = [look for look in [*ecc_run.during, ecc_run.after] if look and look.stable]
    assert ecc_run.after in looks, "the status kept changing after the run"
    assert len(looks) >= 2, "no stable look during the run"
    for look in looks:
        why = expect.disagreement(look)
        assert why is None, why


def test_the_fleetd_link_of_the_page_answers(ecc_run: Observed) -> None:
    page = the_page(ecc_run)
    node = ecc_run.node
    hrefs = [link["href"] for link in page.body.get("links", [])]
    hrefs += [page.body["client_url"]] if "client_url" in page.body else []
    alert_links = [h for h in hrefs if h.startswith(node.address + "/api/v1/alerts/")]
    assert alert_links, f"no link to /api/v1/alerts/{{fingerprint}} on this daemon: {hrefs}"
    for href in alert_links:
        answer = node.fetch(href)
        assert answer.status_code == 200, f"GET {href}: {answer.status_code} {answer.text[:200]}"


def test_generator_urls_handed_out_answer(ecc_run: Observed) -> None:
    node = ecc_run.node
    urls = {a["generatorURL"] for p in node.audit.payloads("4") for a in p["alerts"]}
    urls |= ecc_run.generator_urls
    for peer in node.alertmanagers:  # the recorders, when there is no real Alertmanager
        if not isinstance(peer, am.RealAlertmanager):
            posted = [r.json() for r in peer.records if r.method == "POST"]
            urls |= {a.get("generatorURL", "") for body in posted for a in body or []}
    urls.discard("")
    assert urls, "no alert with a generatorURL reached the webhook or the Alertmanagers"
    for url in sorted(urls):
        assert url.startswith(node.address), f"generatorURL {url} is not this daemon"
        answer = node.fetch(url)
        assert answer.status_code == 200, f"GET {url}: {answer.status_code} {answer.text[:200]}"


def test_the_page_names_the_gpu_its_serial_bdf_and_the_node_labels(ecc_run: Observed) -> None:
    page = the_page(ecc_run)
    assert ecc_run.after is not None
    gpu = expect.gpu_entry(ecc_run.after.status, FAULT_GPU)
    values = {str(v) for _, v in expect.walk(page.details)}
    pairs = set(expect.walk(page.details))
    assert gpu["serial"] and gpu["serial"] in values, (
        f"serial {gpu['serial']} not in custom_details {page.details}"
    )
    assert gpu["bdf"] and gpu["bdf"] in values, f"BDF {gpu['bdf']} not in {page.details}"
    for key, value in ecc_run.node.config["node"]["labels"].items():
        assert (key, value) in pairs, f"node label {key}={value} not in {page.details}"


def test_the_summary_names_gpu_3_once(ecc_run: Observed) -> None:
    summary = the_page(ecc_run).summary
    mentions = expect.GPU_MENTION.findall(summary)
    assert mentions == [str(FAULT_GPU)], f"summary {summary!r} names GPUs {mentions}"


def test_both_alertmanagers_saw_the_alert_and_its_end(ecc_run: Observed) -> None:
    peers = ecc_run.node.alertmanagers
    if not all(isinstance(p, am.RealAlertmanager) for p in peers):
        pytest.skip(am.SKIP_REASON)
    rule = paged_rule(ecc_run)
    for i, seen in enumerate(ecc_run.alertmanager_seen):
        assert (rule, str(FAULT_GPU)) in seen, f"Alertmanager {i} never had it: {seen}"
    for i, peer in enumerate(peers):
        active = [a for a in peer.alerts(alertname=rule)
                  if a.get("status", {}).get("state") == "active"]  # fmt: skip
        assert not active, f"Alertmanager {i} still has {rule} active after the run"
