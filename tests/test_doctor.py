"""``fleetd doctor``: each check on a fake node tree, and the command end to end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from fleetd.collect.abi import check_pair
from fleetd.doctor import (
    Check,
    check_debugfs,
    check_hive,
    check_holders,
    check_library,
    check_root,
    check_rules,
    check_state_dir,
    check_workers,
    exit_code,
    render_text,
)
from fleetd.model import GpuIdentity
from fleetd.remedy.holders import KfdInspector
from fleetd.rules.config import shipped_rules_dir
from fleetd.rules.coverage import BlindSpot
from fleetd.rules.loader import load_rule_set
from fleetd.vllm.config import VllmWorkerConfig


def gpu(index: int, hive: str | None = "0x5fbe") -> GpuIdentity:
    return GpuIdentity(index=index, uuid=f"u{index}", bdf=f"0000:0{index}:00.0", hive_id=hive)


def fake_node(root: Path, gpus: list[GpuIdentity], *, recover: set[int]) -> None:
    """/sys/bus/pci/devices/<bdf>/drm/card<N> and debugfs dri/<N>/amdgpu_gpu_recover."""
    for g in gpus:
        (root / "sys/bus/pci/devices" / g.bdf / "drm" / f"card{g.index + 1}").mkdir(parents=True)
        debug = root / "sys/kernel/debug/dri" / str(g.index + 1)
        debug.mkdir(parents=True)
        if g.index in recover:
            (debug / "amdgpu_gpu_recover").touch()


def test_debugfs_names_each_gpu_whose_reset_cannot_be_issued(tmp_path: Path) -> None:
    gpus = [gpu(i) for i in range(3)]
    fake_node(tmp_path, gpus, recover={0, 2})
    result = check_debugfs(tmp_path, gpus)
    assert result.status == "fail"
    assert result.items[0] == (
        "GPU 1 (0000:01:00.0): sys/kernel/debug/dri/2/amdgpu_gpu_recover absent"
    )
    (tmp_path / "sys/kernel/debug/dri/2/amdgpu_gpu_recover").touch()
    assert check_debugfs(tmp_path, gpus).status == "ok"
    assert check_debugfs(tmp_path / "empty", gpus).status == "fail"  # no sysfs at all


def test_root_is_a_failure_only_when_resets_are_on() -> None:
    assert check_root(0, resets=True).status == "ok"
    assert check_root(1000, resets=True).status == "fail"
    assert check_root(1000, resets=False).status == "warn"


def test_an_unknown_hive_warns_that_the_whole_node_is_the_reset_unit() -> None:
    assert check_hive([gpu(0), gpu(1)]).status == "ok"
    result = check_hive([gpu(0), gpu(1, hive=None)])
    assert result.status == "warn" and "whole node" in result.detail and result.items == ("GPU 1",)
    # the backend knows which GPUs' amdsmi_get_xgmi_info failed: a GPU in no hive is not one
    assert check_hive([gpu(0, hive=None), gpu(1, hive=None)], unknown_hive=[]).status == "ok"
    assert check_hive([gpu(0), gpu(1)], unknown_hive=[1]).items == ("GPU 1",)


def test_library_verdicts_map_to_statuses() -> None:
    assert check_library(check_pair("7.0.2", (26, 1, 0))).status == "ok"
    assert check_library(check_pair("7.13.0", (26, 4, 0))).status == "warn"
    assert check_library(check_pair("7.0.2", (26, 4, 0))).status == "fail"


def test_kfd_holders_leave_fleetd_itself_and_agents_out(tmp_path: Path) -> None:
    """The same judgement as remediation's (tests/remedy/test_holders.py)."""
    inspector = KfdInspector(tmp_path)
    (tmp_path / "proc/31").mkdir(parents=True)
    (tmp_path / "proc/31/comm").write_text("gpuagent\n")
    ok = check_holders([4242], 4242, inspector=inspector)
    assert ok.status == "ok" and "fleetd itself" in ok.detail
    held = check_holders([4242, 777, 31], 4242, inspector=inspector)
    assert held.status == "warn"
    assert held.items == ("pid 777 (name unknown): VRAM unknown, queues unknown",)
    assert "pid 31: monitoring agent gpuagent" in held.detail
    assert check_holders(None, 1, "no_perm").status == "warn"


def test_state_dir_is_checked_without_being_created(tmp_path: Path) -> None:
    assert check_state_dir(tmp_path).status == "ok"
    missing = tmp_path / "not" / "yet"
    assert check_state_dir(missing).status == "ok" and not missing.exists()
    read_only = tmp_path / "ro"
    read_only.mkdir()
    read_only.chmod(0o500)
    try:
        if os.geteuid() != 0:  # root writes anywhere: the check cannot fail as root
            assert check_state_dir(read_only).status == "fail"
    finally:
        read_only.chmod(0o700)


def test_blind_rules_are_listed_and_the_worst_status_is_the_exit_code() -> None:
    rules = check_rules([BlindSpot("GpuXgmiError", ("fleetd_gpu_xgmi_error_status",))], 20)
    assert rules.status == "warn"
    assert rules.items == (
        "GpuXgmiError can never fire here: fleetd_gpu_xgmi_error_status never provided",
    )
    checks = [Check("a", "ok", ""), rules]
    assert exit_code(checks) == 1 and render_text(checks).endswith("doctor: warn (exit 1)")
    assert exit_code([*checks, Check("b", "fail", "")]) == 2


ALERTING = "alerting: {receivers: [{name: c, console: [{}]}]}\n"


def test_a_rule_on_a_metric_fleetd_never_writes_is_listed_as_never_firing() -> None:
    blind = [
        BlindSpot("Typo", ("fleetd_gpu_temprature_celsius",), ("fleetd_gpu_temprature_celsius",)),
        BlindSpot("GpuXgmiError", ("fleetd_gpu_xgmi_error_status",)),
    ]
    rules = check_rules(blind, 29)
    assert (rules.status, rules.detail) == (
        "warn",
        "2 of 29 rules can never fire on this node (1 read a metric fleetd never writes; "
        "1 an input never provided here)",
    )
    assert (
        rules.items[0] == "Typo can never fire: fleetd never writes fleetd_gpu_temprature_celsius"
    )


def doctor(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fleetd", "doctor", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_doctor_on_a_simulated_node(tmp_path: Path) -> None:
    config = tmp_path / "fleetd.yaml"
    config.write_text(f"state_dir: {tmp_path / 'state'}\n{ALERTING}")
    result = doctor("--config", str(config), "--simulate", "healthy", "--json")
    # every rule has its inputs on an MI355X, although it never provides the XGMI error
    # status (INVAL): GpuXgmiError reads the XGMI_WAFL counts instead
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    by_name = {c["name"]: c for c in report["checks"]}
    assert by_name["amdsmi"]["status"] == "ok" and by_name["hive"]["status"] == "ok"
    assert by_name["rules"]["detail"].startswith("every one of")
    # the XGMI error status answered INVAL on every GPU: listed, not a fault
    unsupported = by_name["unsupported"]
    assert unsupported["status"] == "ok"
    assert unsupported["items"] == [
        "amdsmi_gpu_xgmi_error_status (invalid_argument): GPU 0, 1, 2, 3, 4, 5, 6, 7"
    ]
    assert "root" not in by_name  # host checks are for a real node
    # a check leaves no trace where a running daemon keeps its state (simulated port
    # baselines, a simulated sysfs tree): the state directory is not even created
    assert not (tmp_path / "state").exists()


def test_doctor_lists_a_local_rule_on_a_misspelled_metric(tmp_path: Path) -> None:
    local = tmp_path / "rules.d"
    local.mkdir()
    (local / "site.yaml").write_text(
        "rules:\n  - name: HotspotTooHot\n"
        '    expr: fleetd_gpu_temprature_celsius{sensor="hotspot"} > 90\n'
        "    severity: warning\n"
    )
    config = tmp_path / "fleetd.yaml"
    config.write_text(f"state_dir: {tmp_path / 'state'}\nrules: {{local_dir: {local}}}\n{ALERTING}")
    result = doctor("--config", str(config), "--simulate", "healthy", "--json")
    assert result.returncode == 1, result.stdout + result.stderr
    rules = {c["name"]: c for c in json.loads(result.stdout)["checks"]}["rules"]
    assert rules["status"] == "warn"
    total = len(load_rule_set([shipped_rules_dir()])) + 1
    assert rules["detail"].startswith(f"1 of {total} rules can never fire on this node")
    assert rules["items"] == [
        "HotspotTooHot can never fire: fleetd never writes fleetd_gpu_temprature_celsius"
    ]


def test_doctor_refuses_nothing_but_reports_an_unsafe_library(tmp_path: Path) -> None:
    scenario = tmp_path / "rocm713.yaml"
    scenario.write_text("model: MI300X\nlibrary_version: 26.4.0\nsteps: []\n")
    config = tmp_path / "fleetd.yaml"
    config.write_text(f"state_dir: {tmp_path / 'state'}\n{ALERTING}")
    result = doctor("--config", str(config), "--simulate", str(scenario))
    assert result.returncode == 2, result.stdout + result.stderr
    assert "FAIL  amdsmi" in result.stdout and "176 bytes" in result.stdout
    assert "not polled (unsafe library)" in result.stdout


def partition(physical: int, part: int, per_gpu: int = 4) -> GpuIdentity:
    return GpuIdentity(
        index=physical * per_gpu + part,
        uuid=f"u{physical}.{part}",
        bdf=f"0000:{0x10 * (physical + 1):02x}:00.{part}",
        serial=f"SN{physical}",
        partition_id=part,
        compute_partition="QPX",
        memory_partition="NPS1",
    )


def worker(name: str, *gpus: int) -> VllmWorkerConfig:
    return VllmWorkerConfig(name=name, url="http://127.0.0.1:8000", gpus=list(gpus))


def test_workers_covering_every_partition_are_ok_with_the_layout_per_physical_gpu() -> None:
    gpus = [partition(p, i) for p in range(2) for i in range(4)]
    found = check_workers(gpus, [worker("a", 0, 1), worker("b", 2, 3), worker("c", 4, 5, 6, 7)])
    assert found.status == "ok", found
    assert found.detail == "the workers cover every one of 8 partitions"
    assert found.items == (
        "physical GPU 0 (GPU 0-3): 2 worker(s): a, b",
        "physical GPU 1 (GPU 4-7): 1 worker(s): c",
    )


def test_a_partition_without_a_worker_or_a_claim_of_an_absent_one_warns() -> None:
    gpus = [partition(p, i) for p in range(2) for i in range(4)]
    found = check_workers(gpus, [worker("a", 0, 1, 2, 3), worker("b", 4, 5), worker("z", 9)])
    assert found.status == "warn"
    assert found.detail == "the workers cover 6 of 8 partitions; 1 claimed partition(s) absent"
    assert found.items[:2] == (
        "no worker on partition 6, 7",
        "worker z claims GPU 9, which this node does not have",
    )
    # an unpartitioned node speaks of GPUs; no workers at all is not judged
    spx = check_workers([gpu(i) for i in range(2)], [worker("a", 0)])
    assert spx.status == "warn" and spx.items == ("no worker on GPU 1",)
    assert check_workers([gpu(0)], []).status == "ok"


def test_doctor_on_a_cpx_node_reports_the_layout_and_the_workers_coverage(
    tmp_path: Path,
) -> None:
    """A config written for 62 of the 64 partitions, and one worker for a GPU index the node
    does not have, through ``fleetd doctor`` as a real process."""
    workers = "".join(
        f"    - {{name: w{i}, url: 'http://127.0.0.1:{8000 + i}', gpus: [{2 * i}, {2 * i + 1}]}}\n"
        for i in range(31)
    )
    config = tmp_path / "fleetd.yaml"
    config.write_text(
        f"state_dir: {tmp_path / 'state'}\n{ALERTING}vllm:\n  workers:\n{workers}"
        "    - {name: w99, url: 'http://127.0.0.1:9000', gpus: [70]}\n"
    )
    result = doctor("--config", str(config), "--simulate", "cpx_uncorrectable", "--json")
    assert result.returncode == 1, result.stdout + result.stderr
    by_name = {c["name"]: c for c in json.loads(result.stdout)["checks"]}
    layout = by_name["partitions"]
    assert layout["detail"] == "8 physical GPUs partitioned into 64 logical devices"
    assert layout["items"][3] == "physical GPU 3 (0000:65:00.0): GPU 24-31, CPX+NPS1"
    coverage = by_name["workers"]
    assert coverage["status"] == "warn"
    assert coverage["items"][:2] == [
        "no worker on partition 62, 63",
        "worker w99 claims GPU 70, which this node does not have",
    ]
    assert coverage["items"][-1] == "physical GPU 7 (GPU 56-63): 3 worker(s): w28, w29, w30"
