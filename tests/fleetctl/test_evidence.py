"""The evidence bundle end to end: a real daemon on the simulator resets a hive, the bundle is
under ``<state_dir>/evidence/`` with the unit's raw reads, the run's journal and alerts, its
path and digest are in the journal and the reset's notification, and ``fleetctl evidence``
fetches the same bytes through the API."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleetd.remedy.bundle import decode
from tests.fleetctl.conftest import Fleet, acting_fleet, run_after_fault


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    with acting_fleet(tmp_path, {"mode": "on"}) as built:
        yield built


def test_a_reset_run_leaves_a_bundle_that_fleetctl_fetches(fleet: Fleet, tmp_path: Path) -> None:
    agent = fleet.agents[0]
    run_id = run_after_fault(agent, "done")
    remedy = agent.remedy
    assert remedy is not None
    run = remedy.run(run_id)
    assert run is not None
    [bundle] = run.bundles
    path = Path(bundle.path)
    assert bundle.phase == "pre_reset"
    assert path.parent == tmp_path / "acting" / "evidence" and path.exists()
    raw = path.read_bytes()
    assert hashlib.sha256(raw).hexdigest() == bundle.sha256

    body = decode(raw)
    assert body["run_id"] == run_id and body["phase"] == "pre_reset"
    assert body["unit"] == list(range(8)) and sorted(body["gpus"]["gpus"]) == [
        str(i) for i in range(8)
    ]
    gpu3 = body["gpus"]["gpus"]["3"]
    calls = gpu3["calls"]
    for name in (
        "amdsmi_get_gpu_metrics_info",
        "amdsmi_get_gpu_bad_page_info",
        "amdsmi_get_pcie_info",
        "amdsmi_get_gpu_xgmi_link_status",
        "amdsmi_get_fw_info",
        "amdsmi_get_gpu_driver_info",
        "amdsmi_get_gpu_compute_partition",
    ):
        assert name in calls
    assert gpu3["ecc_per_block"]  # ECC per RAS block, raw
    assert any(v.get("uncorrectable_count", 0) > 0 for v in gpu3["ecc_per_block"].values()), gpu3[
        "ecc_per_block"
    ]  # the fault the reset is about to wipe is in the bundle
    kinds = [e["kind"] for e in body["journal"]["events"]]
    assert "run_planned" in kinds and "reset_intent" not in kinds  # captured before the reset
    assert body["alerts"]["trigger"]["gpu"] == 3
    assert len(body["config_sha256"]) == 64
    assert isinstance(body["events"], list)

    # the journal and the reset's notification name the bundle and its digest
    line = f"evidence bundle (pre-reset): {path} sha256:{bundle.sha256}"
    events = remedy.events(run_id)
    assert any(e.kind == "evidence_captured" and line in e.message for e in events)
    reset_done = next(e for e in events if e.kind == "reset_done")
    assert reset_done.evidence == (line,)

    shown, _ = fleet.run("remediation", "show", agent.name, run_id)
    assert f"evidence (pre_reset): {path} sha256:{bundle.sha256}" in shown.output

    out = tmp_path / "copy.json.gz"
    result, _ = fleet.run("evidence", agent.name, run_id, "-o", str(out))
    assert result.exit_code == 0, result.output
    assert out.read_bytes() == raw and f"sha256:{bundle.sha256}" in result.output
    missing, _ = fleet.run("evidence", agent.name, run_id, "--phase", "quarantine")
    assert missing.exit_code == 1 and "no evidence bundle for phase quarantine" in missing.output
    unknown, _ = fleet.run("evidence", agent.name, "nope")
    assert unknown.exit_code == 1 and "no remediation run 'nope'" in unknown.output
