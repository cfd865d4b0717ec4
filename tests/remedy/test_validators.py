"""The validators' parsers on output in the tools' formats (fixtures/validators), and the
runner: a hung validator is killed at its timeout with its process group, a non-zero exit
fails, output no parser understands fails with the raw output kept."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest

from fleetd.remedy.validators import (
    execute,
    judge,
    parse_agfhc,
    parse_rvs,
    parse_transferbench,
    tail,
)

FIXTURES = Path(__file__).with_name("fixtures") / "validators"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def script(tmp: Path, name: str, body: str) -> Path:
    path = tmp / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


# ------------------------------------------------------------------------------------ RVS
def test_rvs_every_result_true_passes() -> None:
    parsed = parse_rvs(fixture("rvs_gst_pass.txt"))
    assert parsed.ok is True and parsed.summary == "8 result(s), all TRUE"
    assert parse_rvs(fixture("rvs_peqt_pass.txt")).ok is True


def test_rvs_one_gpu_below_its_target_fails_and_names_it() -> None:
    parsed = parse_rvs(fixture("rvs_gst_gpu5_below_target.txt"))
    assert parsed.ok is False
    assert "0000:75:00.0" in parsed.summary and "met: FALSE" in parsed.summary


def test_rvs_an_error_line_fails_even_when_the_results_pass() -> None:
    parsed = parse_rvs(fixture("rvs_mem_error.txt"))
    assert parsed.ok is False and "12 error(s) found" in parsed.summary


def test_rvs_without_any_verdict_is_not_understood() -> None:
    assert parse_rvs(fixture("rvs_no_verdict.txt")).ok is None
    assert parse_rvs("").ok is None


# ---------------------------------------------------------------------------- TransferBench
def test_transferbench_a2a_above_the_floors_passes_with_its_figures() -> None:
    parsed = parse_transferbench(
        fixture("transferbench_a2a_pass.txt"), min_average_gbps=40.0, min_rtotal_gbps=320.0
    )
    assert parsed.ok is True
    assert "over 8 GPUs" in parsed.summary and "average 48." in parsed.summary


def test_transferbench_a2a_a_slow_gpu_fails_on_its_rtotal() -> None:
    parsed = parse_transferbench(
        fixture("transferbench_a2a_gpu5_slow.txt"), min_average_gbps=None, min_rtotal_gbps=320.0
    )
    assert parsed.ok is False
    assert "GPU 05 received 113.66 GB/s < 320" in parsed.summary
    assert "GPU 04" not in parsed.summary  # the totals column is not a GPU


def test_transferbench_average_floor_alone() -> None:
    text = fixture("transferbench_a2a_gpu5_slow.txt")
    assert parse_transferbench(text, min_average_gbps=45.0, min_rtotal_gbps=None).ok is False
    assert parse_transferbench(text, min_average_gbps=44.0, min_rtotal_gbps=None).ok is True


@pytest.mark.parametrize("cut", ["RTotal", "Average   bandwidth", "SRC\\DST"])
def test_transferbench_summary_cut_short_is_not_understood(cut: str) -> None:
    text = "\n".join(
        line for line in fixture("transferbench_a2a_pass.txt").splitlines() if cut not in line
    )
    parsed = parse_transferbench(text, min_average_gbps=1.0, min_rtotal_gbps=1.0)
    assert parsed.ok is None and "missing" in parsed.summary


# ------------------------------------------------------------------------------------ AGFHC
def test_agfhc_every_check_success_passes() -> None:
    parsed = parse_agfhc(fixture("agfhc_all_lvl1_pass.json"))
    assert parsed.ok is True and parsed.summary == "10 checks, all success"


def test_agfhc_a_failure_fails_and_names_gpu_and_test() -> None:
    parsed = parse_agfhc("agfhc: running all_lvl1\n" + fixture("agfhc_all_lvl1_hbm_failure.json"))
    assert parsed.ok is False and "GPU 2 hbm_bw: failure" in parsed.summary


def test_agfhc_incomplete_or_foreign_output() -> None:
    assert parse_agfhc(
        '{"number":1,"suitesResult":{"0":{"x":"success"}},"status":"timeout"}'
    ).ok is (False)
    assert parse_agfhc("all tests PASSED").ok is None
    assert parse_agfhc('{"suitesResult": {"0": {}}}').ok is None


# ------------------------------------------------------------------------------------ running
def test_a_passing_tool_passes(tmp_path: Path) -> None:
    tool = script(tmp_path, "rvs", f"cat {FIXTURES / 'rvs_gst_pass.txt'}\n")
    ran = execute([str(tool)], timeout=20)
    verdict = judge("rvs", ran, timeout=20)
    assert verdict.ok and verdict.exit_code == 0 and not verdict.timed_out
    assert "met: TRUE" in verdict.output


def test_a_non_zero_exit_fails_even_with_passing_output(tmp_path: Path) -> None:
    tool = script(tmp_path, "rvs", f"cat {FIXTURES / 'rvs_gst_pass.txt'}\nexit 3\n")
    verdict = judge("rvs", execute([str(tool)], timeout=20), timeout=20)
    assert not verdict.ok and verdict.summary.startswith("exited 3")


def test_output_no_parser_understands_fails_with_the_raw_output_kept(tmp_path: Path) -> None:
    tool = script(tmp_path, "tb", "echo 'TransferBench: unknown preset a2b'\necho oops >&2\n")
    verdict = judge(
        "transferbench", execute([str(tool)], timeout=20), timeout=20, min_rtotal_gbps=320.0
    )
    assert not verdict.ok and verdict.summary.startswith("output not understood")
    assert "unknown preset a2b" in verdict.output and "oops" in verdict.output


def test_a_hung_validator_is_killed_at_its_timeout_with_its_process_group(tmp_path: Path) -> None:
    child_pid = tmp_path / "child.pid"
    tool = script(
        tmp_path,
        "hang",
        f"echo '[RESULT] [ 1.0] starting'\nsleep 300 &\necho $! > {child_pid}\nwait\n",
    )
    started = time.monotonic()
    ran = execute([str(tool)], timeout=0.5)
    assert time.monotonic() - started < 10
    verdict = judge("rvs", ran, timeout=0.5)
    assert not verdict.ok and verdict.timed_out and verdict.exit_code is None
    assert "timed out after 0.5s" in verdict.summary and "starting" in verdict.output
    pid = int(child_pid.read_text())
    for _ in range(100):  # the group got SIGKILL: the background child is gone too
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        if Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z":
            break  # a zombie awaiting its reaper: dead
        time.sleep(0.01)
    else:
        pytest.fail(f"child {pid} of the hung validator still runs")


def test_a_missing_program_fails_without_raising(tmp_path: Path) -> None:
    verdict = judge("rvs", execute([str(tmp_path / "nope")], timeout=5), timeout=5)
    assert not verdict.ok and "cannot run" in verdict.summary


def test_tail_keeps_the_end() -> None:
    assert tail("abcdef", 10) == "abcdef"
    assert tail("abcdef", 4) == "…def"
