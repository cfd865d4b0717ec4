"""The ``fleetd demo`` live view (``fleetd/cli/live_view.py``) on real polls of a simulated node.

XGMI "down" must be judged as ``GpuXgmiLinkDown`` judges it (a link of the learned baseline
that now reads 0), not as the count of ports read "D": every GPU reads its port to itself down,
so that count is 1 on a healthy board. "Up" must match ``fleetctl status``'s XGMI column.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from fleetd.api.status import _indexed
from fleetd.cli.live_view import GpuRow, gpu_table, rows_from
from fleetd.clock import FakeClock
from fleetd.model import Snapshot
from tests.collect.conftest import Rig, make_rig

XGMI_COLUMN = 7  # GPU, util, hotspot, HBM, power, ECC, PCIe, XGMI up/down, alerts
FAULTY = 5
# the fault's link index is into the GPU's peer list ([0, 1, 2, 3, 4, 6, 7] for GPU 5)
LINK, PEER = 2, 2


@pytest.fixture
def rig(clock: FakeClock) -> Iterator[Rig]:
    r = make_rig(clock)
    try:
        yield r
    finally:
        r.close()


def _xgmi_cells(snapshot: Snapshot) -> dict[int, tuple[str, str]]:
    """Each GPU's XGMI cell in the rendered table: (text, style)."""
    rows = rows_from(snapshot)
    table = gpu_table(rows)
    cells = list(table.columns[XGMI_COLUMN].cells)
    out = {}
    for row, cell in zip(rows, cells, strict=True):
        out[row.index] = (str(cell), str(getattr(cell, "style", "")))
    return out


def test_a_healthy_hive_shows_no_link_down_and_nothing_in_red(rig: Rig) -> None:
    snapshot = rig.poll()
    # the raw port count the view used to show: the port to itself reads down on every GPU
    down_ports = {
        r.value
        for r in snapshot.readings
        if r.metric == "fleetd_gpu_xgmi_links" and dict(r.labels)["state"] == "down"
    }
    assert down_ports == {1.0}
    cells = _xgmi_cells(snapshot)
    assert sorted(cells) == list(range(8))
    for gpu, (text, style) in cells.items():
        assert text == "7/0", f"GPU {gpu}"
        assert "red" not in style, f"GPU {gpu}: {style}"


def test_a_link_down_shows_on_both_ends_in_red_and_matches_fleetctl_status(rig: Rig) -> None:
    rig.poll()  # the baseline: every link up
    rig.node.inject(FAULTY, "xgmi_link_down", link=LINK)
    snapshot = rig.poll()
    cells = _xgmi_cells(snapshot)
    for gpu, (text, style) in cells.items():
        if gpu in (FAULTY, PEER):
            assert text == "6/1", f"GPU {gpu}"
            assert "red" in style, f"GPU {gpu}: {style}"
        else:
            assert text == "7/0", f"GPU {gpu}"
            assert "red" not in style, f"GPU {gpu}: {style}"
    # fleetctl status's XGMI column (the API's xgmi_links_up) shows the same "up"
    by_gpu = {row.index: row for row in rows_from(snapshot)}
    keys = _indexed(snapshot)[1]
    for gpu, row in by_gpu.items():
        assert keys[gpu]["xgmi_links_up"] == row.xgmi_up
        assert keys[gpu]["xgmi_links_down"] == row.xgmi_down  # the API's, GET /api/v1/status
    # and the live view's "down" is what GpuXgmiLinkDown fires on
    firing = {
        int(dict(r.labels)["gpu"])
        for r in snapshot.readings
        if r.metric == "fleetd_gpu_xgmi_link_up" and r.value == 0
    }
    assert firing == {FAULTY, PEER}
    assert {g for g, row in by_gpu.items() if row.xgmi_down} == firing


def test_unread_links_show_unknown_not_healthy() -> None:
    row = GpuRow(index=0, up=True, xgmi_up=None, xgmi_down=None)
    table = gpu_table([row])
    assert str(next(iter(table.columns[XGMI_COLUMN].cells))) == "—/—"


ECC_COLUMN = 5


def test_ecc_reads_uncorrectable_first_as_fleetctl_status_does(rig: Rig) -> None:
    """``fleetctl status`` shows ECC as ue/ce; the live view showed ce/ue/def, so one GPU's
    "4/0" there was "0/4" in status. Both put uncorrectable first now."""
    rig.poll()
    rig.node.inject(FAULTY, "ecc_uncorrectable")
    snapshot = rig.poll()
    rows = rows_from(snapshot)
    table = gpu_table(rows)
    column = table.columns[ECC_COLUMN]
    assert str(column.header) == "ECC ue/ce/def"
    by_gpu = {row.index: (row, str(cell)) for row, cell in zip(rows, column.cells, strict=True)}
    row, text = by_gpu[FAULTY]
    assert row.ecc_ue and row.ecc_ue > 0, row
    ue, ce, _deferred = text.split("/")
    assert float(ue) == row.ecc_ue and float(ce) == (row.ecc_ce or 0), (text, row)
