"""Blind spots: rules whose GPU inputs this node never provided, judged again as inputs come."""

from __future__ import annotations

from pathlib import Path

from fleetd.model import Reading, make_labels
from fleetd.rules.coverage import SUPPORTED_METRIC, BlindSpot, InputCoverage
from fleetd.rules.loader import RuleSet, load_rule_set

RULES = """
rules:
  - name: XgmiDown
    expr: xgmi_status == 0
    severity: warning
  - name: Hot
    expr: temp > 90
    severity: critical
"""


def rule_set(tmp_path: Path, text: str = RULES) -> RuleSet:
    path = tmp_path / f"rules{len(list(tmp_path.iterdir()))}.yaml"
    path.write_text(text)
    return load_rule_set([path])


def poll(coverage: InputCoverage, **values: float | None) -> None:
    coverage.observe(
        [Reading(name, make_labels({"gpu": 0}), value, 1.0) for name, value in values.items()]
    )


def test_nothing_is_judged_before_enough_polls(tmp_path: Path) -> None:
    coverage = InputCoverage({"xgmi_status", "temp"}, min_polls=3)
    rules = rule_set(tmp_path)
    poll(coverage, temp=60.0)
    poll(coverage, temp=60.0)
    assert coverage.blind_spots(rules) == [] and coverage.readings(rules, 5.0) == []


def test_a_blind_spot_goes_once_its_input_carries_a_value_and_a_reload_is_judged_afresh(
    tmp_path: Path,
) -> None:
    coverage = InputCoverage({"xgmi_status", "temp", "power"}, min_polls=1)
    rules = rule_set(tmp_path)
    poll(coverage, temp=60.0, xgmi_status=None)  # missing readings do not count
    assert coverage.blind_spots(rules) == [BlindSpot("XgmiDown", ("xgmi_status",))]
    assert coverage.blind_spots(rules) == [BlindSpot("XgmiDown", ("xgmi_status",))]  # asked again
    supported = {dict(r.labels)["rule"]: r.value for r in coverage.readings(rules, 5.0)}
    assert supported == {"XgmiDown": 0.0, "Hot": 1.0}
    power = "  - name: Power\n    expr: power > 700\n    severity: info\n"
    reloaded = rule_set(tmp_path, RULES + power)
    assert [b.rule for b in coverage.blind_spots(reloaded)] == ["XgmiDown", "Power"]
    poll(coverage, xgmi_status=1.0)
    assert [b.rule for b in coverage.blind_spots(reloaded)] == ["Power"]
    assert {r.metric for r in coverage.readings(reloaded, 6.0)} == {SUPPORTED_METRIC}
    assert coverage.blind_spots(rules) == []


def test_a_rule_on_a_metric_fleetd_never_writes_is_blind_from_the_start(tmp_path: Path) -> None:
    """A misspelled name is not a question of the hardware: no poll is needed to judge it,
    and no value of any judged GPU metric makes it fire."""
    coverage = InputCoverage({"temp"}, min_polls=2, written={"fleetd_gpu_up"})
    rules = rule_set(
        tmp_path,
        "rules:\n"
        "  - name: Typo\n    expr: tmep > 90 and temp > 0\n    severity: info\n"
        "  - name: Hot\n    expr: temp > 90\n    severity: info\n",
    )
    blind = BlindSpot("Typo", ("tmep",), ("tmep",))
    assert coverage.blind_spots(rules) == [blind]  # not observed yet: only the unwritten name
    assert blind.describe() == "Typo can never fire: fleetd never writes tmep"
    poll(coverage, temp=60.0)
    poll(coverage, temp=60.0)
    assert coverage.blind_spots(rules) == [blind]
    supported = {dict(r.labels)["rule"]: r.value for r in coverage.readings(rules, 5.0)}
    assert supported == {"Typo": 0.0, "Hot": 1.0}
    mixed = BlindSpot("X", ("a", "tmep"), ("tmep",))
    assert mixed.describe() == "X can never fire: fleetd never writes tmep; a never provided"
