"""Every dashboard query, asked of a real Prometheus that holds a real fleetd's metrics.

The static checks cannot see a join that matches nothing, a label value fleetd never exports
(``sensor="junction"``) or a many-to-many match that fails only when Prometheus evaluates it.
So ``fleetd demo``'s wiring runs on a fake clock: the real daemon on a simulated MI355X node
with faults on seven GPUs one after another, a stand-in vLLM worker per GPU, and remediation
on (the uncorrectable ECC error on GPU 3 is drained, reset, verified, re-admitted). Alerts go
to two webhooks on loopback, one accepting and one rejecting; a broken config file is
reloaded once; remediation is paused for a while. /metrics is scraped over HTTP every 15 s of
fake time for 10 minutes, the scrapes are backfilled into a Prometheus TSDB with promtool, and
a real Prometheus answers every dashboard query as Grafana asks it (range queries over the
run, instant queries at its end): each must succeed, and each must return data except the
few listed below that are empty by design in this run.
"""

from __future__ import annotations

import io
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
from dashlint import all_panels, expressions, load_dashboards, substitute
from prometheus_client.parser import text_string_to_metric_families
from pytest_httpserver import HTTPServer

PROMETHEUS = shutil.which("prometheus")
PROMTOOL = shutil.which("promtool")
pytestmark = pytest.mark.skipif(
    PROMETHEUS is None or PROMTOOL is None,
    reason="prometheus and promtool are not installed, so queries are not run (CI installs them)",
)

DASHBOARD_DIR = Path(__file__).resolve().parents[2] / "dashboards"
INSTANCE = "node-a:9477"
JOB = "fleetd"
POLL_S = 5.0
SCRAPE_S = 15.0
RUN_S = 600.0
RELOAD_AT_S = 120.0
PAUSE_S = (300.0, 360.0)
REMEDIATED_GPU = "3"  # the uncorrectable ECC error of the demo scenario
# A slow engine on one healthy GPU's worker from the start: a gray failure, so the peer
# comparison panels have an outlier to show (the demo's faults alone make none in 10 minutes).
SLOW_WORKER, SLOW_ENGINE_SPEED = "gpu6", 0.6

# Grafana's values for the variables: one node, every receiver, GPU 3 where one GPU is
# chosen and All (Grafana sends the allValue) on the node dashboard.
VALUES = {
    "job": JOB,
    "node": INSTANCE,
    "gpu": REMEDIATED_GPU,
    "receiver": ".*",
    "__rate_interval": "1m",
    "__interval": "15s",
    "__range": f"{RUN_S:g}s",
    "__range_s": f"{RUN_S:g}",
    "__range_ms": f"{RUN_S * 1000:g}",
    "__interval_ms": "15000",
}
VALUES_BY_DASHBOARD = {"fleetd-node-detail": {"gpu": ".*"}}

# Queries that may rightly return nothing in this run, by (dashboard uid, panel title or
# annotation name, refId), and why.
MAY_BE_EMPTY = {
    ("fleetd-node-detail", "Peer comparison: this node's hives against the fleet", "A"): (
        "no registry in the run: no fleet comparison"
    ),
    ("fleetd-node-detail", "Peer comparison: this node's hives against the fleet", "B"): (
        "no registry in the run: no fleet comparison"
    ),
    ("fleetd-gpu-detail", "Power vs cap", "B"): "MI300-class GPUs report no average power",
    ("fleetd-fleet-overview", "Nodes with degraded storage", "A"): "storage never fails here",
    ("fleetd-fleet-overview", "Nodes with degraded storage", "B"): "storage never fails here",
    ("fleetd-node-detail", "fleetd restarts", ""): "fleetd does not restart in the run",
    ("fleetd-fleet-overview", "GPUs held out of service", "A"): "the run succeeds: none held",
    ("fleetd-node-detail", "KV-cache usage", "A"): "the stand-in workers export no KV cache",
    ("fleetd-gpu-detail", "KV-cache usage", "A"): "the stand-in workers export no KV cache",
    ("fleetd-gpu-detail", "CPER records", "A"): "the run ticks by hand: no CPER job reads",
    ("fleetd-gpu-detail", "CPER records", "B"): "the run ticks by hand: no CPER job reads",
    ("fleetd-gpu-detail", "Resets not started by fleetd", "A"): "the run's reset is fleetd's",
    ("fleetd-gpu-detail", "Resets not started by fleetd", "B"): "the run's reset is fleetd's",
    ("fleetd-gpu-detail", "KFD events (amdsmi)", "A"): (
        "the run ticks by hand in well under a second: the reset's rediscovery reopens the "
        "event readers before their next read, and the reset's KFD events die with the old "
        "ones (the kernel lines carry the reset: 'Kernel-log faults')"
    ),
    ("fleetd-gpu-detail", "KFD events (amdsmi)", "B"): "as A",
    ("fleetd-alerts-remediation", "Incidents per GPU", "B"): (
        "one incident per GPU in the run: no time between incidents to measure"
    ),
    ("fleetd-alerts-remediation", "Incidents per hive", "B"): "as for the GPU: one incident",
    ("fleetd-alerts-remediation", "Alerts resolved with no action", "A"): (
        "whether an alert resolves with no run during the run depends on the demo's faults"
    ),
    ("fleetd-alerts-remediation", "Shadow-mode firings", "A"): "no rule is in shadow mode",
}


@dataclass
class Recording:
    """fleetd's /metrics at every scrape, as (fake time, exposition text)."""

    start: float
    scrapes: list[tuple[float, str]]


def _alerting(server: HTTPServer) -> Any:
    from fleetd.alert.config import AlertingConfig

    return AlertingConfig.model_validate(
        {
            "receivers": [
                {"name": "hook", "webhook": [{"url": server.url_for("/hook")}]},
                {"name": "broken", "webhook": [{"url": server.url_for("/broken")}]},
            ],
            "route": {
                "receiver": "hook",
                "group_wait": "0s",
                "group_interval": "10s",
                "routes": [
                    {"matchers": ['severity=~".+"'], "receiver": "hook", "continue": True},
                    {"matchers": ['severity=~".+"'], "receiver": "broken"},
                ],
            },
        }
    )


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Recording]:
    from fleetd.clock import FakeClock
    from fleetd.daemon import Daemon, open_backend
    from fleetd.demo import DEMO_MODEL, Demo, demo_config
    from fleetd.sim.scenario import WorkerStep
    from fleetd.sim.vllm_worker import StandInFleet
    from fleetd.vllm.config import VllmWorkerConfig

    base = tmp_path_factory.mktemp("fleetd")
    state = base / "state"
    state.mkdir()
    broken_config = base / "fleetd.yaml"
    broken_config.write_text("poll:\n  interval: -5s\n", encoding="utf-8")
    server = HTTPServer(host="127.0.0.1", port=0)
    server.expect_request("/hook", method="POST").respond_with_data("")
    server.expect_request("/broken", method="POST").respond_with_data("bad field", status=400)
    server.start()
    clock = FakeClock(float(int(time.time()) - 2 * RUN_S))
    backend, sim = open_backend(demo_config(state, port=0), clock)
    assert sim is not None
    fleet = StandInFleet(base / "standin", clock=clock, processes=sim.node)
    try:
        workers = []
        for gpu in range(8):
            worker = fleet.add(f"gpu{gpu}", [gpu], model=DEMO_MODEL, startup_s=3.0)
            workers.append(
                VllmWorkerConfig(
                    name=f"gpu{gpu}", url=worker.url, gpus=[gpu], unit=worker.unit, model=DEMO_MODEL
                )
            )
        config = demo_config(state, port=0, workers=workers, fleet=fleet)
        config = config.model_copy(
            update={
                "poll": config.poll.model_copy(update={"interval": POLL_S}),
                "vllm": config.vllm.model_copy(update={"scrape_interval": SCRAPE_S}),
                "alerting": _alerting(server),
            }
        )
        daemon = Daemon(
            config,
            clock=clock,
            backend=backend,
            sim=sim,
            config_path=broken_config,
            console_stream=io.StringIO(),
            schedule_jobs=False,
        )
        demo = Demo(daemon, fleet)
        daemon.start()
        try:
            start = clock.now()
            fleet.follow([WorkerStep(worker=SLOW_WORKER, at=0.0, speed=SLOW_ENGINE_SPEED)], start)
            yield Recording(start, _drive(demo, clock))
        finally:
            daemon.stop()
    finally:
        fleet.close()
        server.clear()
        server.stop()


def _drive(demo: Any, clock: Any) -> list[tuple[float, str]]:
    daemon = demo.daemon
    assert daemon.http is not None and daemon.remediation is not None
    url = f"http://127.0.0.1:{daemon.http.port}/metrics"
    scrapes = []
    start = clock.now()
    while (elapsed := clock.now() - start) < RUN_S:
        clock.advance(POLL_S)
        elapsed += POLL_S
        demo.keep_busy()
        daemon.tick()
        daemon.deliver()
        daemon.remediate()
        if elapsed == RELOAD_AT_S:
            assert daemon.reload() is False  # the broken file is rejected, the old config runs
        if elapsed == PAUSE_S[0]:
            daemon.remediation.pause(who="test", why="maintenance window", now=clock.now())
        if elapsed == PAUSE_S[1]:
            daemon.remediation.resume(who="test", why="done", now=clock.now())
        if elapsed % SCRAPE_S == 0:
            daemon.scrape_vllm()
            daemon.maintain()
            response = requests.get(url, timeout=10)
            response.raise_for_status()
            scrapes.append((clock.now(), response.text))
    return scrapes


def _openmetrics(scrapes: list[tuple[float, str]]) -> str:
    """The scrapes as OpenMetrics with timestamps and the labels the scrape adds."""
    lines: dict[str, list[str]] = {}
    for ts, text in scrapes:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                labels = {**sample.labels, "instance": INSTANCE, "job": JOB}
                rendered = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(labels.items()))
                lines.setdefault(sample.name, []).append(
                    f"{sample.name}{{{rendered}}} {sample.value!r} {ts:.3f}"
                )
    body = [line for name in lines for line in lines[name]]
    return "\n".join([*body, "# EOF"]) + "\n"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def prometheus(recording: Recording, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    assert PROMETHEUS is not None and PROMTOOL is not None
    work = tmp_path_factory.mktemp("prometheus")
    (work / "scrapes.om").write_text(_openmetrics(recording.scrapes), encoding="utf-8")
    backfill = subprocess.run(
        [PROMTOOL, "tsdb", "create-blocks-from", "openmetrics", "scrapes.om", "data"],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert backfill.returncode == 0, backfill.stdout + backfill.stderr
    (work / "prometheus.yml").write_text("global:\n  scrape_interval: 15s\n", encoding="utf-8")
    port = _free_port()
    log = (work / "prometheus.log").open("w")
    process = subprocess.Popen(
        [
            PROMETHEUS,
            "--config.file=prometheus.yml",
            "--storage.tsdb.path=data",
            "--storage.tsdb.retention.time=100y",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        cwd=work,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(base, process)
        yield base
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()


def _wait_ready(base: str, process: subprocess.Popen[bytes]) -> None:
    """Prometheus is an outside process: poll its readiness endpoint, bounded."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert process.poll() is None, "prometheus exited at start-up"
        try:
            if requests.get(f"{base}/-/ready", timeout=1).status_code == 200:
                return
        except requests.ConnectionError:
            pass
        time.sleep(0.05)
    raise AssertionError("prometheus did not become ready within 60 s")


def _query(base: str, promql: str, instant: bool, recording: Recording) -> tuple[str | None, int]:
    """(error or None, number of series) of the query as Grafana would run it."""
    end = recording.scrapes[-1][0]
    if instant:
        url, params = f"{base}/api/v1/query", {"query": promql, "time": f"{end:.3f}"}
    else:
        params = {
            "query": promql,
            "start": f"{recording.start:.3f}",
            "end": f"{end:.3f}",
            "step": f"{SCRAPE_S:g}",
        }
        url = f"{base}/api/v1/query_range"
    body = requests.get(url, params=params, timeout=30).json()
    if body.get("status") != "success":
        return f"{body.get('errorType')}: {body.get('error')}", 0
    result = body["data"]["result"]
    return None, len(result) if isinstance(result, list) else 1


@dataclass(frozen=True)
class Query:
    uid: str
    where: str  # panel title or annotation name
    ref: str
    promql: str
    instant: bool
    text: str  # for messages


def _all_queries() -> list[Query]:
    """Every query of every dashboard, variables filled in for this run."""
    queries = []
    for name, dashboard in load_dashboards(DASHBOARD_DIR).items():
        uid = dashboard["uid"]
        for panel in all_panels(dashboard):
            for target in panel.get("targets") or []:
                queries.append(
                    _make(
                        uid,
                        panel["title"],
                        target["refId"],
                        target["expr"],
                        bool(target.get("instant")),
                        f"{name}: panel {panel['title']!r} {target['refId']}",
                    )
                )
        for annotation in dashboard["annotations"]["list"]:
            if "expr" in annotation:
                queries.append(
                    _make(
                        uid,
                        annotation["name"],
                        "",
                        annotation["expr"],
                        False,
                        f"{name}: annotation {annotation['name']!r}",
                    )
                )
        for expression in expressions(name, dashboard)[0]:
            if expression.metric_label is not None:
                queries.append(
                    _make(uid, expression.where, "", expression.raw, True, str(expression))
                )
    return queries


def _make(uid: str, where: str, ref: str, raw: str, instant: bool, text: str) -> Query:
    promql, unknown = substitute(raw, {**VALUES, **VALUES_BY_DASHBOARD.get(uid, {})})
    assert unknown == [], f"{text}: no test value for {unknown}"
    return Query(uid, where, ref, promql, instant, f"{text}: {promql}")


def test_the_run_shows_what_the_dashboards_are_for(recording: Recording) -> None:
    assert len(recording.scrapes) == int(RUN_S // SCRAPE_S)
    texts = "\n".join(text for _, text in recording.scrapes)
    assert 'fleetd_gpu_health{gpu="3"' in texts and 'state="unhealthy"} 1.0' in texts
    assert 'fleetd_remediation_runs_total{outcome="done",plan="reset"} 1.0' in texts
    assert 'fleetd_alert_notifications_sent_total{integration="webhook/0",receiver="hook"}' in texts
    assert 'fleetd_alert_receiver_rejecting{integration="webhook/0",receiver="broken"} 1.0' in texts
    assert 'fleetd_config_reloads_total{result="failure"} 1.0' in texts
    assert "fleetd_remediation_paused 1.0" in texts


def _check(
    queries: list[Query], prometheus: str, recording: Recording
) -> tuple[list[str], list[str]]:
    """(queries that failed, queries that returned nothing and are not allowed to)."""
    failed, empty = [], []
    for query in queries:
        error, series = _query(prometheus, query.promql, query.instant, recording)
        if error is not None:
            failed.append(f"{query.text}: {error}")
        elif series == 0 and (query.uid, query.where, query.ref) not in MAY_BE_EMPTY:
            empty.append(query.text)
    return failed, empty


def test_every_dashboard_query_succeeds_and_shows_data(
    prometheus: str, recording: Recording
) -> None:
    queries = _all_queries()
    assert len(queries) > 200
    failed, empty = _check(queries, prometheus, recording)
    assert failed == []
    assert empty == [], "queries that returned nothing:\n" + "\n".join(empty)


@pytest.mark.parametrize(
    ("expr", "failure"),
    [
        ('fleetd_gpu_temperature_celsius{sensor="junction"}', None),  # never exported
        ("fleetd_gpu_power_watts / fleetd_vllm_up", None),  # uuid vs worker labels: no match
        (
            "fleetd_gpu_temperature_limit_celsius - ignoring(limit) fleetd_gpu_temperature_celsius",
            "many-to-one matching must be explicit",
        ),
    ],
)
def test_an_empty_or_failing_query_is_caught(
    expr: str, failure: str | None, prometheus: str, recording: Recording
) -> None:
    query = _make("fleetd-node-detail", "a panel", "A", expr, False, "a panel")
    failed, empty = _check([query], prometheus, recording)
    if failure is None:
        assert failed == [] and len(empty) == 1
    else:
        assert len(failed) == 1 and failure in failed[0] and empty == []


def _label_names(base: str, promql: str, recording: Recording) -> set[frozenset[str]]:
    end = recording.scrapes[-1][0]
    body = requests.get(
        f"{base}/api/v1/query", params={"query": promql, "time": f"{end:.3f}"}, timeout=30
    ).json()
    # the metric name is a column too: rows of different metrics never merge
    return {
        frozenset(f"{k}={v}" if k == "__name__" else k for k, v in series["metric"].items())
        for series in body["data"]["result"]
    }


def _merged_tables() -> list[tuple[str, dict[str, Any]]]:
    tables = []
    for dashboard in load_dashboards(DASHBOARD_DIR).values():
        for panel in all_panels(dashboard):
            merges = any(t.get("id") == "merge" for t in panel.get("transformations") or [])
            if panel.get("type") == "table" and merges and len(panel["targets"]) > 1:
                tables.append((dashboard["uid"], panel))
    return tables


def _table_problems(uid: str, panel: dict[str, Any], base: str, rec: Recording) -> list[str]:
    """Grafana's merge joins rows on equal label columns: every query needs the same ones."""
    shapes = {}
    for target in panel["targets"]:
        query = _make(uid, panel["title"], target["refId"], target["expr"], True, "")
        shapes[target["refId"]] = _label_names(base, query.promql, rec)
    distinct = {shape for names in shapes.values() for shape in names}
    if len(distinct) <= 1:
        return []
    return [f"{uid}: table {panel['title']!r}: label columns differ between queries: {shapes}"]


def test_tables_merge_queries_with_the_same_label_columns(
    prometheus: str, recording: Recording
) -> None:
    tables = _merged_tables()
    assert len(tables) >= 4
    problems = [
        p for uid, panel in tables for p in _table_problems(uid, panel, prometheus, recording)
    ]
    assert problems == []


def test_a_table_whose_queries_do_not_merge_is_caught(
    prometheus: str, recording: Recording
) -> None:
    panel = {
        "title": "PCIe",
        "targets": [
            {"refId": "A", "expr": 'fleetd_gpu_pcie_link_width_lanes{instance=~"$node"}'},
            {"refId": "B", "expr": 'fleetd_gpu_pcie_link_max_width_lanes{instance=~"$node"}'},
        ],
    }
    (problem,) = _table_problems("fleetd-node-detail", panel, prometheus, recording)
    assert "label columns differ" in problem  # __name__ differs: Grafana cannot merge the rows


def _range(base: str, promql: str, recording: Recording) -> dict[str, dict[float, float]]:
    """Per GPU, the query's values over the run (time → value), as a range query."""
    params = {
        "query": promql,
        "start": f"{recording.start:.3f}",
        "end": f"{recording.scrapes[-1][0]:.3f}",
        "step": f"{SCRAPE_S:g}",
    }
    body = requests.get(f"{base}/api/v1/query_range", params=params, timeout=30).json()
    assert body.get("status") == "success", f"{promql}: {body}"
    return {
        series["metric"]["gpu"]: {float(ts): float(value) for ts, value in series["values"]}
        for series in body["data"]["result"]
    }


def _panel_expr(uid: str, title: str) -> str:
    (query,) = [q for q in _all_queries() if q.uid == uid and q.where == title]
    return query.promql


# The demo's XGMI fault: GPU 5's link 2 (its peer list skips itself: GPU 2) goes down on both
# ends at 120 s and clears at 10 min; every other GPU's links stay up.
XGMI_FAULT_ENDS = {"2", "5"}


def test_xgmi_links_down_counts_what_the_rule_fires_on_not_the_port_to_itself(
    prometheus: str, recording: Recording
) -> None:
    """Every GPU reads its XGMI port to itself down (fleetd_gpu_xgmi_links{state="down"} is
    1 on a healthy GPU); the panel must show 0 there and count the links GpuXgmiLinkDown
    fires on (fleetd_gpu_xgmi_link_up == 0), at every step of the run."""
    panel = _range(prometheus, _panel_expr("fleetd-node-detail", "XGMI links down"), recording)
    rule = _range(prometheus, "count by (gpu) (fleetd_gpu_xgmi_link_up == 0)", recording)
    raw = _range(prometheus, 'fleetd_gpu_xgmi_links{state="down"}', recording)
    assert sorted(panel) == [str(gpu) for gpu in range(8)]
    assert {min(values.values()) for values in raw.values()} == {1.0}  # the port to itself
    for gpu, values in panel.items():
        expected = {ts: rule.get(gpu, {}).get(ts, 0.0) for ts in values}
        assert values == expected, f"GPU {gpu}"
    bad = {gpu for gpu, values in panel.items() if max(values.values()) > 0}
    assert bad == XGMI_FAULT_ENDS
