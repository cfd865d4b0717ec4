"""The shipped rule packs: their unit tests pass (this is how CI runs rules/tests), and every
rule is documented, tested, written over real metric names, and reads counters as rates."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from fleetd.collect.catalog import CATALOG
from fleetd.model import Severity
from fleetd.rules.ast import Binary, Call, RangeSelector, Selector, children
from fleetd.rules.config import shipped_rules_dir
from fleetd.rules.loader import load_rule_set
from fleetd.rules.ruletest import run_test_file

REPO = Path(__file__).resolve().parents[2]
RULES = load_rule_set([shipped_rules_dir()])
TEST_FILES = sorted((REPO / "rules" / "tests").glob("*.yaml"))


def _cases() -> list[tuple[Path, int, str]]:
    out = []
    for path in TEST_FILES:
        for index, case in enumerate(yaml.safe_load(path.read_text())["tests"]):
            out.append((path, index, case.get("name", f"tests[{index}]")))
    return out


@pytest.fixture(scope="module")
def results() -> dict[tuple[str, str], list[str]]:
    out = {}
    for path in TEST_FILES:
        for result in run_test_file(path):
            out[(path.name, result.name)] = result.failures
    return out


@pytest.mark.parametrize(
    ("path", "index", "name"), _cases(), ids=[f"{p.name}:{n}" for p, _, n in _cases()]
)
def test_shipped_rule_unit_test(
    results: dict[tuple[str, str], list[str]], path: Path, index: int, name: str
) -> None:
    failures = results[(path.name, name)]
    assert failures == [], "\n".join(failures)


def test_the_shipped_directory_is_the_repository_one() -> None:
    assert shipped_rules_dir().resolve() == (REPO / "rules").resolve()  # via fleetd/data/rules


@pytest.mark.parametrize("rule", RULES.rules, ids=[r.name for r in RULES.rules])
class TestEveryRule:
    def test_has_a_rationale_summary_description_and_runbook(self, rule) -> None:  # type: ignore[no-untyped-def]
        assert rule.rationale and len(rule.rationale) > 40
        names = {name for name, _ in rule.annotations}
        assert {"summary", "description", "runbook_url"} <= names
        assert rule.runbook == f"docs/runbooks/{rule.name}.md"
        runbook = REPO / rule.runbook
        assert runbook.is_file(), f"missing {runbook}"
        assert runbook.read_text().startswith(f"# {rule.name}")

    def test_fires_in_some_unit_test(self, rule) -> None:  # type: ignore[no-untyped-def]
        expected_to_fire = set()
        for path in TEST_FILES:
            for case in yaml.safe_load(path.read_text())["tests"]:
                for check in case.get("alert_rule_test", []):
                    if check.get("exp_alerts"):
                        expected_to_fire.add(check["alertname"])
        assert rule.name in expected_to_fire

    def test_reads_only_exported_metrics(self, rule) -> None:  # type: ignore[no-untyped-def]
        from fleetd.rules.ast import metrics_used

        assert metrics_used(rule.expr) <= set(CATALOG)

    def test_reads_counters_only_as_increase_or_rate(self, rule) -> None:  # type: ignore[no-untyped-def]
        """A raw counter compared with a threshold fires forever after the first error.

        One use is allowed: ``increase(c[w]) > 0 and c > 0`` — the raw counter as a guard
        that the errors are still there (a GPU reset zeroes ECC counters), next to an
        increase of the same counter that says they are new.
        """
        bad: list[str] = []

        def visit(node, inside: str | None, guarded: frozenset[str]) -> None:  # type: ignore[no-untyped-def]
            if isinstance(node, Selector):
                spec = CATALOG.get(node.metric)
                if (
                    spec is not None
                    and spec.type == "counter"
                    and inside not in ("increase", "rate", "stale")
                    and node.metric not in guarded
                ):
                    bad.append(node.metric)
                return
            if isinstance(node, Call):
                for child in children(node):
                    inner = child.selector if isinstance(child, RangeSelector) else child
                    visit(inner, node.func, guarded)
                return
            if isinstance(node, Binary) and node.op == "and":
                visit(node.lhs, None, guarded)
                visit(node.rhs, None, guarded | counted(node.lhs))
                return
            for child in children(node):
                visit(child, None, guarded)

        def counted(node) -> frozenset[str]:  # type: ignore[no-untyped-def]
            """Counters read through increase() or rate() anywhere under ``node``."""
            found: set[str] = set()
            if isinstance(node, Call) and node.func in ("increase", "rate"):
                for child in children(node):
                    inner = child.selector if isinstance(child, RangeSelector) else child
                    if isinstance(inner, Selector):
                        found.add(inner.metric)
            for child in children(node):
                found |= counted(child)
            return frozenset(found)

        visit(rule.expr, None, frozenset())
        assert bad == []


def test_gpu_rules_count_towards_health_and_others_do_not() -> None:
    """vLLM workers and fleetd itself are not GPU faults."""
    for rule in RULES.rules:
        assert rule.health == rule.name.startswith("Gpu"), rule.name


def test_only_uncorrectable_errors_trigger_remediation() -> None:
    assert {r.name: r.remediation_plan for r in RULES.rules if r.remediation_plan} == {
        "GpuEccUncorrectableError": "reset",
        # the record's AFID names the action; a kernel report without one takes the AFID
        # table's default (reset), unless the fault's CPER record names a further one
        "GpuCperFatalError": "afid",
        "GpuCperUncorrectedError": "afid",
        "GpuKernelUncorrectableError": "afid",
    }


def test_severities_are_deliberate() -> None:
    by_severity = {s: sorted(r.name for r in RULES.rules if r.severity == s) for s in Severity}
    assert by_severity[Severity.INFO] == [
        "FleetdRuleBlindSpots",
        "FleetdVersionDrift",
        "GpuPowerThrottling",
    ]
    assert "GpuEccUncorrectableError" in by_severity[Severity.CRITICAL]
    assert "GpuMissing" in by_severity[Severity.CRITICAL]
