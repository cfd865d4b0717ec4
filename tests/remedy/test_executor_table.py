"""The executor's one table covers every command the machine can give."""

from __future__ import annotations

from typing import get_args

from fleetd.remedy import executor
from fleetd.remedy import machine as m


def test_every_command_but_record_has_one_row() -> None:
    assert set(executor._WAYS) == set(get_args(m.Command)) - {m.Record}


def test_only_commands_for_one_worker_run_side_by_side() -> None:
    for kind, way in executor._WAYS.items():
        assert way.per_worker == ("worker" in kind.__dataclass_fields__), kind
