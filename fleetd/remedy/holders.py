"""Who would a hive reset hurt: the KFD processes that really hold a GPU, and who is ignored.

amdgpu terminates every process holding /dev/kfd when it resets a hive, so fleetd refuses a
reset while one runs. Not every KFD process is a workload: on ROCm before 7.12 fleetd itself
becomes one the first time amdsmi falls back to /dev/kfd for VRAM usage (ROCm/ROCm#4411),
and monitoring agents (DME's gpuagent before v1.5.1, rdcd, amd-smi, omnistat) keep it open
for their lifetime. Counting those would end every real run in quarantine.

So a process holds the GPUs when it is not fleetd, not a listed monitoring agent, and has
VRAM or queues (read from /sys/class/kfd/kfd/proc/<pid>, the numbers amdsmi itself reports,
without making fleetd a KFD client). Where the kernel does not say (no KFD sysfs entry), a
process counts as holding: refusing a reset costs a quarantine, a wrong reset kills a job.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

DEFAULT_MONITORING_AGENTS: tuple[str, ...] = (
    "gpuagent",
    "rdcd",
    "amd-smi",
    "amd-metrics-exporter",
    "omnistat",
    "omnistat-monitor",
    "rocm-smi",
)
"""Processes that hold /dev/kfd to watch the GPUs, not to compute (matched by process name,
executable or systemd unit/cgroup)."""

COMM_LENGTH = 15
"""The kernel keeps the first 15 bytes of a process name in /proc/<pid>/comm."""

GIB = 1024**3


@dataclass(frozen=True, slots=True)
class KfdProcess:
    """One KFD process as the kernel describes it; None where it did not say."""

    pid: int
    name: str | None = None
    unit: str | None = None  # the systemd unit or last cgroup component
    vram_bytes: int | None = None  # summed over the GPUs
    queues: int | None = None

    def describe(self) -> str:
        """``pid 4242 (python3, vllm@3.service): 12.0 GiB VRAM, 4 queues``."""
        who = ", ".join(x for x in (self.name, self.unit) if x) or "name unknown"
        vram = "VRAM unknown"
        if self.vram_bytes is not None:
            vram = f"{self.vram_bytes / GIB:.1f} GiB VRAM"
        queues = "queues unknown" if self.queues is None else f"{self.queues} queues"
        return f"pid {self.pid} ({who}): {vram}, {queues}"


@dataclass(frozen=True, slots=True)
class HolderVerdict:
    """The processes a reset would hurt, and the others with why they do not count."""

    holders: tuple[KfdProcess, ...]
    ignored: tuple[tuple[KfdProcess, str], ...]


class KfdInspector:
    """Reads a process's KFD footprint and identity under ``root`` (``/`` on a node)."""

    def __init__(self, root: Path = Path("/")) -> None:
        self.root = root

    def inspect(self, pid: int) -> KfdProcess:
        proc = self.root / "proc" / str(pid)
        kfd = self.root / "sys/class/kfd/kfd/proc" / str(pid)
        return KfdProcess(
            pid=pid,
            name=_read(proc / "comm"),
            unit=_unit(_read(proc / "cgroup")),
            vram_bytes=_vram(kfd),
            queues=_queues(kfd),
        )

    def kfd_pids(self) -> list[int]:
        """PIDs the kernel lists under /sys/class/kfd/kfd/proc (empty where it has none)."""
        base = self.root / "sys/class/kfd/kfd/proc"
        try:
            return sorted(int(p.name) for p in base.iterdir() if p.name.isdigit())
        except OSError:
            return []


def judge(
    processes: Iterable[KfdProcess],
    *,
    own_pid: int,
    agents: Sequence[str] = DEFAULT_MONITORING_AGENTS,
) -> HolderVerdict:
    holders: list[KfdProcess] = []
    ignored: list[tuple[KfdProcess, str]] = []
    for proc in processes:
        why = _why_not_holding(proc, own_pid, agents)
        if why is None:
            holders.append(proc)
        else:
            ignored.append((proc, why))
    return HolderVerdict(tuple(holders), tuple(ignored))


def _why_not_holding(proc: KfdProcess, own_pid: int, agents: Sequence[str]) -> str | None:
    if proc.pid == own_pid:
        return "fleetd itself (amdsmi opened /dev/kfd in this process)"
    agent = matching_agent(proc, agents)
    if agent is not None:
        return f"monitoring agent {agent}"
    if proc.vram_bytes == 0 and proc.queues == 0:
        return "holds /dev/kfd with no VRAM and no queues"
    return None


def matching_agent(proc: KfdProcess, agents: Sequence[str]) -> str | None:
    """The allow-list entry this process is, by name (as truncated by the kernel) or unit."""
    for agent in agents:
        if proc.name is not None and proc.name == agent[:COMM_LENGTH]:
            return agent
        if proc.unit is not None and proc.unit.removesuffix(".service") == agent:
            return agent
    return None


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip() or None
    except OSError:
        return None


def _unit(cgroup: str | None) -> str | None:
    """The last component of the process's cgroup v2 path (its systemd unit, usually)."""
    if not cgroup:
        return None
    for line in cgroup.splitlines():
        hierarchy, _, path = line.partition("::")
        if hierarchy == "0" and path:
            last = path.rstrip("/").rsplit("/", 1)[-1]
            return last or None
    return None


def _vram(kfd: Path) -> int | None:
    try:
        files = [p for p in kfd.iterdir() if p.name.startswith("vram_")]
    except OSError:
        return None
    total = 0
    for path in files:
        text = _read(path)
        if text is None or not text.isdigit():
            return None
        total += int(text)
    return total


def _queues(kfd: Path) -> int | None:
    try:
        return sum(1 for p in (kfd / "queues").iterdir() if p.is_dir())
    except FileNotFoundError:
        return 0 if kfd.is_dir() else None
    except OSError:
        return None
