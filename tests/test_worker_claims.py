"""Workers and partitions in fleetd.yaml: a worker may own one or more GPUs (partitions, on a
partitioned node), two workers never the same one — checked by ``fleetd config check``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ALERTING = "alerting: {receivers: [{name: console, console: [{}]}]}\n"


def check(tmp_path: Path, text: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "fleetd.yaml"
    path.write_text(ALERTING + text, encoding="utf-8")
    return subprocess.run(
        [sys.executable, "-m", "fleetd", "config", "check", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_worker_may_own_several_partitions(tmp_path: Path) -> None:
    workers = "".join(
        f"    - {{name: w{i}, url: 'http://127.0.0.1:{8000 + i}', gpus: [{2 * i}, {2 * i + 1}]}}\n"
        for i in range(32)  # 64 CPX partitions, two per worker
    )
    done = check(tmp_path, "vllm:\n  workers:\n" + workers)
    assert done.returncode == 0, done.stdout + done.stderr


def test_two_workers_claiming_one_partition_is_an_error_at_the_second_claim(
    tmp_path: Path,
) -> None:
    text = (
        "vllm:\n"
        "  workers:\n"
        "    - {name: a, url: 'http://127.0.0.1:8000', gpus: [0, 1]}\n"
        "    - name: b\n"
        "      url: 'http://127.0.0.1:8001'\n"
        "      gpus: [2, 1]\n"
        "    - {name: c, url: 'http://127.0.0.1:8002', gpus: [1]}\n"
    )
    done = check(tmp_path, text)
    assert done.returncode != 0
    path = tmp_path / "fleetd.yaml"
    lines = [line for line in (done.stdout + done.stderr).splitlines() if "claimed" in line]
    assert lines == [
        f"{path}:7:17: vllm.workers[1].gpus[1]: GPU 1 is claimed by worker 'a' and worker 'b': "
        "a GPU or partition has one worker",
        f"{path}:8:54: vllm.workers[2].gpus[0]: GPU 1 is claimed by worker 'a' and worker 'c': "
        "a GPU or partition has one worker",
    ], done.stdout + done.stderr
