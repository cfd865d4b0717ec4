"""The Grafana dashboards: well-formed for current Grafana, fleetd's vocabulary only, valid PromQL.

Each check also runs against deliberately broken copies of a real dashboard, so a check that
could never fail would show up here as a failing test.
"""

from __future__ import annotations

import copy
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from dashlint import (
    Expression,
    all_panels,
    catalog_problems,
    dashboard_link_problems,
    expressions,
    lint,
    load_dashboards,
    metrics_used,
    promtool_problems,
    scan,
    structure_problems,
    substitute,
)

from fleetd.collect import catalog as catalog_module
from fleetd.collect.catalog import CATALOG

DASHBOARD_DIR = Path(__file__).resolve().parents[2] / "dashboards"
DASHBOARDS = load_dashboards(DASHBOARD_DIR)
EXPECTED_UIDS = {
    "fleetd-fleet-overview",
    "fleetd-node-detail",
    "fleetd-gpu-detail",
    "fleetd-alerts-remediation",
}
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None,
    reason="promtool is not installed, so PromQL syntax is not checked here (CI installs it)",
)

# Catalog metrics deliberately on no dashboard, with the reason.
NOT_ON_DASHBOARDS = {
    "process_virtual_memory_bytes": "resident memory is the figure that matters",
    "process_open_fds": "fleetd holds a handful of files; not worth a panel",
    "process_max_fds": "only meaningful beside process_open_fds",
    "fleetd_gpu_xgmi_error_status": "unreadable on MI300X/MI355X; the XGMI_WAFL panels show it",
}
# Catalog groups every metric of which must be on a dashboard (or listed above). A group added
# to the catalog later joins this list when its panels are built.
COVERED_GROUPS = (
    "GPU_METRICS",
    "EVENT_METRICS",
    "VLLM_METRICS",
    "SERVING_METRICS",
    "SELF_METRICS",
    "RULE_METRICS",
    "ALERT_METRICS",
    "STORE_METRICS",
    "REMEDIATION_METRICS",
    "KPI_METRICS",
)


def dashboard_named(uid: str) -> tuple[str, dict[str, Any]]:
    for name, dashboard in DASHBOARDS.items():
        if dashboard.get("uid") == uid:
            return name, copy.deepcopy(dashboard)
    raise AssertionError(f"no dashboard with uid {uid}")


def first_data_panel(dashboard: dict[str, Any]) -> dict[str, Any]:
    return next(p for p in all_panels(dashboard) if p.get("targets"))


def with_expr(expr: str, legend: str = "", uid: str = "fleetd-node-detail") -> tuple[str, dict]:
    """A real dashboard whose first query is replaced by ``expr``."""
    name, dashboard = dashboard_named(uid)
    target = first_data_panel(dashboard)["targets"][0]
    target["expr"] = expr
    target["legendFormat"] = legend
    return name, dashboard


def problems_of(name: str, dashboard: dict[str, Any]) -> list[str]:
    return lint(name, dashboard, CATALOG)[1]


def all_expressions() -> list[Expression]:
    found: list[Expression] = []
    for name, dashboard in DASHBOARDS.items():
        found.extend(expressions(name, dashboard)[0])
    return found


# --- the shipped dashboards --------------------------------------------------------------------


def test_the_four_dashboards_are_there() -> None:
    assert {d.get("uid") for d in DASHBOARDS.values()} == EXPECTED_UIDS
    titles = [d.get("title") for d in DASHBOARDS.values()]
    assert len(set(titles)) == len(titles)


@pytest.mark.parametrize("name", sorted(DASHBOARDS))
def test_dashboard_is_well_formed_for_current_grafana(name: str) -> None:
    assert structure_problems(name, DASHBOARDS[name]) == []


@pytest.mark.parametrize("name", sorted(DASHBOARDS))
def test_dashboard_has_datasource_node_and_gpu_variables(name: str) -> None:
    variables = {v["name"]: v for v in DASHBOARDS[name]["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    assert "instance" in variables["node"]["definition"]
    if DASHBOARDS[name]["uid"] in ("fleetd-node-detail", "fleetd-gpu-detail"):
        assert variables["gpu"]["definition"].startswith("label_values(")
        assert variables["gpu"]["definition"].rstrip(")").endswith("gpu")
    if DASHBOARDS[name]["uid"] == "fleetd-gpu-detail":
        assert variables["gpu"]["multi"] is False and variables["node"]["multi"] is False


@pytest.mark.parametrize("name", sorted(DASHBOARDS))
def test_expressions_use_only_catalog_metrics_and_labels(name: str) -> None:
    found, problems = lint(name, DASHBOARDS[name], CATALOG)
    assert problems == []
    assert len(found) > 10


def test_links_between_dashboards_resolve() -> None:
    assert dashboard_link_problems(DASHBOARDS) == []


def test_every_catalog_metric_of_the_covered_groups_is_on_a_dashboard() -> None:
    used = metrics_used(all_expressions(), CATALOG)
    expected = {
        spec.name
        for group in COVERED_GROUPS
        for spec in getattr(catalog_module, group)
        if spec.name not in NOT_ON_DASHBOARDS
    }
    assert sorted(expected - used) == []
    assert set(NOT_ON_DASHBOARDS) <= set(CATALOG)


@needs_promtool
def test_every_expression_is_valid_promql(tmp_path: Path) -> None:
    assert PROMTOOL is not None
    found = all_expressions()
    assert len(found) > 100
    assert promtool_problems(found, PROMTOOL, tmp_path) == []


# --- the checker catches mistakes ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("fleetd_gpu_hotness_celsius", "unknown metric fleetd_gpu_hotness_celsius"),
        (
            "rate(fleetd_polls[$__rate_interval])",
            "the counter is exported as fleetd_polls_total",
        ),
        ("fleetd_poll_duration_seconds", "is a histogram"),
        ('{__name__="fleetd_gpu_up"}', "without a metric name"),
    ],
)
def test_an_unknown_metric_is_caught(expr: str, expected: str) -> None:
    problems = problems_of(*with_expr(expr))
    assert len(problems) == 1 and expected in problems[0], problems


@pytest.mark.parametrize(
    ("expr", "legend", "expected"),
    [
        ('fleetd_gpu_power_watts{sensor="hotspot"}', "", "has no label 'sensor'"),
        ("sum by (sensor) (fleetd_gpu_power_watts)", "", "by (sensor)"),
        ("sum(fleetd_gpu_power_watts) by (sensor)", "", "by (sensor)"),
        ("max without (state) (fleetd_gpu_up)", "", "without (state)"),
        (
            "fleetd_gpu_power_watts / on (instance, sensor) fleetd_gpu_power_cap_watts",
            "",
            "on (sensor)",
        ),
        ("fleetd_gpu_power_watts", "GPU {{gpu}} {{sensor}}", "legend uses {{sensor}}"),
        ('fleetd_polls_total_bucket{le="1"}', "", "unknown metric"),
        (
            "sum by (le) (rate(fleetd_poll_duration_seconds_count[5m]))",
            "",
            "by (le)",
        ),
        ('label_replace(fleetd_gpu_up, "node", "$1", "host", "(.*)")', "", "reads 'host'"),
    ],
)
def test_an_unknown_label_is_caught(expr: str, legend: str, expected: str) -> None:
    problems = problems_of(*with_expr(expr, legend))
    assert len(problems) == 1 and expected in problems[0], problems


@pytest.mark.parametrize(
    "expr",
    [
        'fleetd_gpu_ecc_errors_total{type="uncorrectable"}',
        "sum(fleetd_polls_total)",
        "max_over_time(fleetd_polls_total[5m])",
        "fleetd_poll_duration_seconds_bucket",
        "deriv(fleetd_gpu_energy_joules_total[5m])",
    ],
)
def test_a_raw_counter_is_caught(expr: str) -> None:
    problems = problems_of(*with_expr(expr))
    assert len(problems) == 1 and "only ever grows" in problems[0], problems


def test_an_undefined_variable_is_caught() -> None:
    problems = problems_of(*with_expr('fleetd_gpu_up{instance=~"$nodes"}'))
    assert len(problems) == 1 and "$nodes is not a dashboard variable" in problems[0]


@pytest.mark.parametrize(
    ("expr", "legend"),
    [
        (
            "histogram_quantile(0.99, sum by (le, instance) "
            "(rate(fleetd_poll_duration_seconds_bucket[$__rate_interval])))",
            "{{instance}}",
        ),
        (
            'label_replace(fleetd_gpu_up, "node", "$1", "instance", "(.*):.*")',
            "{{node}} GPU {{gpu}}",
        ),
        (
            "sum by (gpu) (fleetd_gpu_power_watts) / on (gpu) group_left (model) "
            "max by (gpu, model) (fleetd_gpu_info)",
            "{{model}}",
        ),
        ('count_values("version", fleetd_build_info)', "{{version}}"),
        ("sum(rate(fleetd_polls_total[5m] offset 1h))", ""),
        ("max_over_time(rate(fleetd_polls_total[5m])[1h:1m])", ""),
    ],
)
def test_correct_expressions_pass(expr: str, legend: str) -> None:
    assert problems_of(*with_expr(expr, legend)) == []


def test_grouping_scans_see_their_own_argument() -> None:
    result = scan(
        "sum by (le) (rate(fleetd_poll_duration_seconds_bucket[5m])) "
        "/ on () group_left sum(fleetd_gpu_power_watts)"
    )
    by = next(g for g in result.groupings if g.keyword == "by")
    assert by.labels == ("le",)
    assert by.scope is not None
    assert [s.name for s in by.scope] == ["fleetd_poll_duration_seconds_bucket"]
    assert result.selectors[0].function == "rate" and result.selectors[0].has_range


def test_variables_are_substituted_with_concrete_values() -> None:
    text, unknown = substitute(
        'rate(x{a=~"$node", b="${gpu}", c="[[job]]"}[$__rate_interval])',
        {"node": "n1", "gpu": "0", "job": "fleetd", "__rate_interval": "5m"},
    )
    assert text == 'rate(x{a=~"n1", b="0", c="fleetd"}[5m])'
    assert unknown == []


def _mutate(change: Callable[[dict[str, Any]], None]) -> list[str]:
    name, dashboard = dashboard_named("fleetd-node-detail")
    change(dashboard)
    return structure_problems(name, dashboard)


def _second_panel(d: dict[str, Any]) -> dict[str, Any]:
    return all_panels(d)[1]


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda d: d.pop("schemaVersion"), "'schemaVersion' missing"),
        (lambda d: d.update(schemaVersion=27), "older than 39"),
        (lambda d: d.update(uid="has spaces"), "uid"),
        (lambda d: d.update(id=12), "'id' must be null"),
        (lambda d: _second_panel(d).update(id=all_panels(d)[0]["id"]), "also used by"),
        (lambda d: _second_panel(d).pop("gridPos"), "gridPos"),
        (lambda d: _second_panel(d)["gridPos"].update(x=20, w=8), "gridPos"),
        (lambda d: _second_panel(d).update(type="graph"), "deprecated"),
        (
            lambda d: _second_panel(d).update(datasource={"type": "prometheus", "uid": "abc"}),
            "is not the $datasource variable",
        ),
        (
            lambda d: _second_panel(d)["targets"][0].update(
                datasource={"type": "prometheus", "uid": "abc"}
            ),
            "datasource is not the datasource variable",
        ),
        (lambda d: _second_panel(d)["targets"][0].update(refId="B") or None, None),
        (lambda d: _second_panel(d).update(targets=[]), "no targets"),
        (lambda d: d["templating"]["list"].pop(0), "exactly one datasource variable"),
        (
            lambda d: d["templating"]["list"][2].update(datasource={"uid": "x"}),
            "variable 'node': datasource",
        ),
        (lambda d: d["templating"]["list"][3].update(refresh=0), "refresh"),
        (lambda d: d["templating"]["list"][3].pop("allValue"), "includeAll without an allValue"),
        (
            lambda d: d["templating"]["list"].insert(1, d["templating"]["list"].pop(3)),
            "uses $job, which is not defined before it",
        ),
        (lambda d: _second_panel(d)["gridPos"].update(all_panels(d)[2]["gridPos"]), "overlaps"),
        (
            lambda d: _second_panel(d)["fieldConfig"]["defaults"].update(unit="celcius"),
            "unit 'celcius' is not a Grafana unit id",
        ),
        (
            lambda d: _second_panel(d)["fieldConfig"]["overrides"].append(
                {
                    "matcher": {"id": "byName", "options": "x"},
                    "properties": [{"id": "unit", "value": "W"}],
                }
            ),
            "unit 'W' is not a Grafana unit id",
        ),
        (lambda d: _second_panel(d)["fieldConfig"]["defaults"].update(unit="suffix: tok/J"), None),
        (
            lambda d: d["templating"]["list"][3].update(definition="label_values(x, gpu)"),
            "'definition' differs",
        ),
    ],
)
def test_structure_problems_are_caught(
    change: Callable[[dict[str, Any]], None], expected: str | None
) -> None:
    problems = _mutate(change)
    if expected is None:  # a harmless change stays clean
        assert problems == []
    else:
        assert any(expected in p for p in problems), problems


def test_a_link_to_an_unknown_dashboard_is_caught() -> None:
    broken = copy.deepcopy(DASHBOARDS)
    name = sorted(broken)[0]
    broken[name]["links"].append({"type": "link", "url": "/d/no-such-board/x", "title": "x"})
    problems = dashboard_link_problems(broken)
    assert problems == [f"{name}: links to unknown dashboard uid 'no-such-board'"]


def test_a_variable_query_with_an_unknown_label_is_caught() -> None:
    name, dashboard = dashboard_named("fleetd-node-detail")
    gpu = next(v for v in dashboard["templating"]["list"] if v["name"] == "gpu")
    gpu["definition"] = 'label_values(fleetd_gpu_info{instance=~"$node"}, sensor)'
    gpu["query"]["query"] = gpu["definition"]
    problems = problems_of(name, dashboard)
    assert len(problems) == 1 and "label_values of 'sensor'" in problems[0], problems


@needs_promtool
@pytest.mark.parametrize(
    "expr",
    [
        "sum by (gpu) (rate(fleetd_polls_total[$__rate_interval])",
        "rate(fleetd_polls_total)",
        "fleetd_gpu_up{gpu=0}",
        "fleetd_gpu_up + on (gpu) group_left",
        "avg_over_tim(fleetd_gpu_up[5m])",
    ],
)
def test_a_broken_expression_is_caught(expr: str, tmp_path: Path) -> None:
    assert PROMTOOL is not None
    name, dashboard = with_expr(expr)
    found, _ = expressions(name, dashboard)
    problems = promtool_problems(found, PROMTOOL, tmp_path)
    assert len(problems) == 1, problems
    assert "promtool:" in problems[0] and expr in problems[0]


def test_catalog_problems_name_the_dashboard_panel_and_expression() -> None:
    name, dashboard = with_expr("fleetd_nope")
    found, _ = expressions(name, dashboard)
    broken = next(e for e in found if e.raw == "fleetd_nope")
    (problem,) = catalog_problems(broken, CATALOG)
    assert problem.startswith(f"{name}: panel ")
    assert "target A" in problem and "'fleetd_nope'" in problem
