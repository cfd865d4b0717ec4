"""The AFID → action table: shipped entries and their sources, lookups, operator overrides."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetd.errors import ConfigError
from fleetd.events.afid import ORDER, AfidTable


@pytest.fixture(scope="module")
def table() -> AfidTable:
    return AfidTable.load()


def test_the_shipped_table_covers_the_public_afid_list(table: AfidTable) -> None:
    assert sorted(table.entries) == list(range(1, 31))  # 31-34: no public action (see file)
    for afid, entry in table.entries.items():
        assert entry.sources, afid
        assert any("error_map.c" in s for s in entry.sources), afid
        assert entry.message, afid
        if entry.confidence == "documented" and entry.action in ("physical", "reboot"):
            assert any("gpu-operator" in s for s in entry.sources), afid


def test_the_shipped_classes_take_the_actions_their_sources_give(table: AfidTable) -> None:
    assert table.action_for([18]).action == "physical"  # XGMI fatal: re-torque the OAMs
    assert table.action_for([19]).action == "physical"  # bad-page threshold: RMA
    assert table.action_for([27]).action == "reboot"  # watchdog timeout
    assert table.action_for([22]).action == "reset"  # HBM UE, non-fatal: the driver resets
    assert table.action_for([24]).action == "none"  # corrected HBM
    assert "torqued" in table.action_for([16]).message


def test_the_most_severe_afid_of_a_record_wins(table: AfidTable) -> None:
    decision = table.action_for([24, 22, 18, 27])
    assert (decision.action, decision.decided_by, decision.unknown) == ("physical", 18, ())
    assert decision.needs_human and not decision.resets
    assert [ORDER[a] for a in ("none", "reset", "reboot", "physical")] == [0, 1, 2, 3]


def test_unknown_afids_take_the_default_and_are_reported(table: AfidTable) -> None:
    decision = table.action_for([24, 9001])
    assert (decision.action, decision.unknown, decision.decided_by) == ("reset", (9001,), None)
    assert table.action_for([]).action == table.default.action  # no AFID decoded at all
    assert table.action_for([29]).unknown == ()


def test_an_operator_file_extends_and_overrides(tmp_path: Path) -> None:
    mine = tmp_path / "afids.yaml"
    mine.write_text(
        "version: 1\n"
        "default:\n  action: physical\n  message: page the on-call\n"
        "afids:\n"
        "  27:\n    name: WDT\n    action: physical\n    message: our vendor wants an RMA\n"
        "  9001:\n    name: ours\n    action: none\n"
    )
    table = AfidTable.load(mine)
    assert table.action_for([27]).message == "our vendor wants an RMA"
    assert table.action_for([9001]).action == "none"
    assert table.action_for([4242]).action == "physical"  # their default
    assert table.action_for([18]).action == "physical"  # shipped entries stay


@pytest.mark.parametrize(
    ("text", "where", "says"),
    [
        ("afids:\n  5:\n    name: x\n    action: rma\n", ":4:", "afids.5.action"),
        ("afids:\n  5:\n    name: x\n    action: physical\n", ":2:3:", "needs a message"),
        ("afids:\n  0:\n    name: x\n    action: none\n", ":1:", "AFIDs are 1"),
        ("afids:\n  5:\n    name: x\n    action: none\n    colour: red\n", ":5:", "unknown key"),
        ("version: 2\n", ":1:", "version"),
    ],
)
def test_a_bad_operator_file_is_an_error_with_its_position(
    tmp_path: Path, text: str, where: str, says: str
) -> None:
    mine = tmp_path / "afids.yaml"
    mine.write_text(text)
    with pytest.raises(ConfigError) as caught:
        AfidTable.load(mine)
    message = str(caught.value)
    assert f"{mine}{where}" in message and says in message, message
