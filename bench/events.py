"""Event sources: the time from an injected event to the page, and the CPU of following a
kernel log at 1,000 lines/s.

``event_to_page``: the real daemon (in this process, real clock, its jobs scheduled, 5 s
polls) on the simulator, with a loopback PagerDuty that records when each POST arrives. An
event is injected into the simulated driver — a fatal CPER record (AFID 30), a RAS line in the
kernel log, a KFD VMFAULT event — and the time to the PagerDuty trigger naming its GPU is
measured, ``--injections`` times per source (round robin over the 8 GPUs, each GPU's
previous alert resolved first). The routing is the shipped example's paging route (critical
→ PagerDuty, group_wait 10 s, its ``delivery="immediate"`` child with group_wait 0 s), with
a group_interval of 2 s instead of 1 min so each GPU's group is gone soon after its resolve. The
CPER record and the kernel line page through the shipped rules (GpuCperFatalError,
GpuKernelUncorrectableError; incidents close 1 s after their report so the next injection
starts clean); the KFD event's shipped rule (GpuVmFault) is a warning with a 10-minute
window, so a bench rule times the same path (event → series → rules at once → immediate
route → POST) as a critical alert with a 3 s window. Remediation is off: only paging is
timed.

A writer process produces kernel messages at ``--rate`` lines/s — 95 % other drivers' lines,
5 % amdgpu lines of several kinds (RAS, resets, ring timeouts, page faults, AER, routine) —
and the real ``KernelLogFollower`` follows them on its own thread, as in the daemon:

- ``file``: kmsg records appended to a file (the simulator's source; reads a regular file
  every ``poll_interval``);
- ``journal``: journal JSON lines on a pipe from a stand-in ``journalctl`` (the path a
  systemd host takes; the stand-in's own CPU, like journalctl's, is not counted).

The CPU counted is this process's (user + system, ``getrusage``) while following, which
is the follower alone. Prints one JSON line: per source, CPU seconds per 1,000 lines and per
second of following, lines read and events delivered.

    python -m bench.events [--seconds 15] [--rate 1000] [--sources file,journal]

    python -m bench.events --parts event_to_page [--injections 50]
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import stat
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.event_latency import time_to_page
from fleetd.events import KernelLogConfig, KernelLogFollower
from fleetd.events.model import KernelEvent

OTHER = [
    "EXT4-fs (nvme0n1p2): re-mounted. Quota mode: none.",
    'audit: type=1400 audit(1767225600.123:456): apparmor="DENIED" operation="open"',
    "IPv6: ADDRCONF(NETDEV_CHANGE): ens21f0np0: link becomes ready",
    "mlx5_core 0000:41:00.0: Port module event: module 0, Cable plugged",
    "nvme nvme3: I/O 412 QID 17 timeout, completion polled",
    "perf: interrupt took too long (2510 > 2500), lowering kernel.perf_event_max_sample_rate",
    "systemd-journald[1021]: Data hash table of /var/log/journal/x/system.journal has a "
    "fill level at 75.0",
    "bnxt_en 0000:c2:00.0 eth2: NIC Link is Up, 400000 Mbps full duplex",
    "kfd kfd: amdgpu: Allocated 3969056 bytes on gart",
    "docker0: port 3(veth1a2b3c) entered forwarding state",
]
AMDGPU = [
    "amdgpu 0000:c1:00.0: amdgpu: socket: 0, die: 1, 1 new correctable hardware errors "
    "detected in umc block",
    "amdgpu 0000:c1:00.0: amdgpu: socket: 0, die: 1, 7 correctable hardware errors detected "
    "in total in umc block",
    "amdgpu 0000:d1:00.0: amdgpu: GPU reset begin!",
    "amdgpu 0000:d1:00.0: amdgpu: GPU reset(3) succeeded!",
    "amdgpu 0000:11:00.0: amdgpu: ring comp_1.1.0 timeout, signaled seq=7, emitted seq=9",
    "amdgpu 0000:11:00.0: amdgpu:  Process python3 pid 4087 thread python3 pid 4213",
    "amdgpu 0000:21:00.0: amdgpu: [gfxhub0] retry page fault (src_id:0 ring:0 vmid:8 "
    "pasid:32772, for process python3 pid 51234 thread python3 pid 51240)",
    "amdgpu 0000:21:00.0: amdgpu:   in page starting at address 0x0000800000000000 from IH "
    "client 0x1b (UTCL2)",
    "pcieport 0000:c0:01.1: AER: Corrected error message received from 0000:c1:00.0",
    "amdgpu 0000:c1:00.0: PCIe Bus Error: severity=Corrected, type=Physical Layer, (Receiver ID)",
    "amdgpu 0000:31:00.0: amdgpu: ring gfx_0.0.0 uses VM inv eng 0 on hub 0",
    "[drm] PCIE GART of 512M enabled (table at 0x0000008000300000).",
]
GPUS = ["0000:c1:00.0", "0000:d1:00.0", "0000:11:00.0", "0000:21:00.0", "0000:31:00.0"]

WRITER = """\
    import json, random, sys, time
    mode, rate, seconds, path = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
    other, amdgpu = {other!r}, {amdgpu!r}
    rng = random.Random(7)
    out = open(path, "a", buffering=1) if path != "-" else sys.stdout
    tick, seq, start = 0.01, 0, time.monotonic()
    while time.monotonic() - start < seconds:
        batch = []
        for _ in range(max(1, int(rate * tick))):
            seq += 1
            msg = rng.choice(amdgpu) if rng.random() < 0.05 else rng.choice(other)
            if mode == "kmsg":
                batch.append("6,%d,%d,-;%s\\n" % (seq, seq * 1000, msg))
            else:
                batch.append(json.dumps({{"MESSAGE": msg, "__CURSOR": "s=b;i=%x" % seq,
                    "__REALTIME_TIMESTAMP": str(int(time.time() * 1e6)), "_TRANSPORT": "kernel",
                    "_BOOT_ID": "b", "PRIORITY": "6", "SYSLOG_FACILITY": "0",
                    "SYSLOG_IDENTIFIER": "kernel", "_HOSTNAME": "node-17"}}) + "\\n")
        out.write("".join(batch))
        out.flush()
        next_at = start + seq / rate
        time.sleep(max(0.0, next_at - time.monotonic()))
    """


def _writer_script(directory: Path) -> Path:
    script = directory / "writer.py"
    script.write_text(textwrap.dedent(WRITER).format(other=OTHER, amdgpu=AMDGPU))
    return script


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _follow(
    config: KernelLogConfig,
    state: Path,
    seconds: float,
    start_writer: Callable[[], subprocess.Popen[bytes] | None],
) -> dict[str, Any]:
    events: list[KernelEvent] = []
    follower = KernelLogFollower(
        config, state, gpus=GPUS, sink=events.append, boot_id="bench", boot_time=time.time() - 3600
    )
    writer = start_writer()
    cpu0, wall0 = _cpu(), time.monotonic()
    follower.start()
    time.sleep(seconds)
    follower.stop()
    cpu, wall = _cpu() - cpu0, time.monotonic() - wall0
    if writer is not None:
        writer.wait(timeout=30)
    stats = follower.stats()
    lines = stats.get("lines", 0) + stats.get("prefiltered", 0)
    follower.close()
    return {
        "lines": lines,
        "events": len(events),
        "wall_s": round(wall, 2),
        "cpu_s": round(cpu, 3),
        "cpu_s_per_1000_lines": round(cpu / lines * 1000, 5) if lines else None,
        "cpu_s_per_s": round(cpu / wall, 5),
        "lines_per_s": round(lines / wall, 1),
    }


def kernel_log(seconds: float, rate: int, sources: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {"rate_lines_s": rate, "amdgpu_share": 0.05}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        writer = _writer_script(root)
        if "file" in sources:
            log = root / "kmsg.log"
            log.write_text("")
            config = KernelLogConfig(source="file", path=str(log), file_format="kmsg")

            def start_file() -> subprocess.Popen[bytes]:
                argv = [sys.executable, str(writer), "kmsg", str(rate), str(seconds), str(log)]
                return subprocess.Popen(argv)

            out["file_kmsg"] = _follow(config, root / "s1", seconds, start_file)
        if "journal" in sources:
            fake = root / "journalctl"
            fake.write_text(
                f"#!/bin/sh\nexec {sys.executable} {writer} journal {rate} {seconds} -\n"
            )
            fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
            config = KernelLogConfig(source="journal", journalctl=str(fake))
            out["journal_json"] = _follow(config, root / "s2", seconds, lambda: None)
    return out


PARTS: dict[str, Callable[[argparse.Namespace], dict[str, Any]]] = {
    "kernel_log_follow": lambda a: kernel_log(a.seconds, a.rate, a.sources.split(",")),
    "event_to_page": lambda a: time_to_page(a.injections),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--rate", type=int, default=1000)
    parser.add_argument("--sources", default="file,journal")
    parser.add_argument("--parts", default=",".join(PARTS))
    parser.add_argument("--injections", type=int, default=50)
    args = parser.parse_args()
    random.seed(1)
    result = {"bench": "events", **{p: PARTS[p](args) for p in args.parts.split(",")}}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
