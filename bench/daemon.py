"""The whole daemon's own cost: ``fleetd run --simulate healthy`` polling 8 GPUs every second.

Everything runs — poll, rules, store (SQLite), alert delivery, remediation ticks, /metrics
scraped every 5 s — in a child process; after a warm-up this reads the child's CPU time and
RSS from /proc over a measuring window. The simulator's own CPU is included (it runs in the
daemon), so this is an upper bound for a real node. Prints one JSON line.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

WARMUP_S = float(os.environ.get("FLEETD_BENCH_WARMUP", "20"))
MEASURE_S = float(os.environ.get("FLEETD_BENCH_MEASURE", "60"))


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks  # utime + stime


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp, socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
        probe.close()
        config = Path(tmp) / "fleetd.yaml"
        config.write_text(
            f"state_dir: {tmp}\nhttp: {{port: {port}}}\npoll: {{interval: 1s}}\n"
            "alerting: {receivers: [{name: console, console: [{}]}]}\n"
        )
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "fleetd",
                "run",
                "--config",
                str(config),
                "--simulate",
                "healthy",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            url = f"http://127.0.0.1:{port}/metrics"
            deadline = time.monotonic() + 60
            while True:
                try:
                    urllib.request.urlopen(url, timeout=2).read()
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.5)
            time.sleep(WARMUP_S)
            cpu0, t0 = cpu_seconds(proc.pid), time.monotonic()
            scrapes = 0
            while time.monotonic() - t0 < MEASURE_S:
                urllib.request.urlopen(url, timeout=5).read()
                scrapes += 1
                time.sleep(5)
            cpu1, t1 = cpu_seconds(proc.pid), time.monotonic()
            text = urllib.request.urlopen(url, timeout=5).read().decode()
            missed = next(
                float(line.split()[-1])
                for line in text.splitlines()
                if line.startswith("fleetd_polls_missed_total ")
            )
            result = {
                "bench": "daemon",
                "gpus": 8,
                "poll_interval_s": 1.0,
                "measure_s": round(t1 - t0, 1),
                "cpu_percent_of_one_core": round(100 * (cpu1 - cpu0) / (t1 - t0), 2),
                "rss_mb": round(rss_mb(proc.pid), 1),
                "polls_missed": missed,
                "metrics_scrapes": scrapes,
                "note": "whole daemon incl. the simulator's own CPU, SQLite store, rules",
            }
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
