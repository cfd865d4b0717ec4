"""What the follower needs to know of the running kernel: this boot's id and start time."""

from __future__ import annotations

BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"
STAT_PATH = "/proc/stat"


def read_boot_id(path: str = BOOT_ID_PATH) -> str | None:
    """The kernel's boot id (a UUID, new on every boot), or None where there is none."""
    try:
        with open(path, encoding="ascii") as handle:
            text = handle.read().strip()
    except (OSError, UnicodeDecodeError):
        return None
    return text or None


def read_boot_time(path: str = STAT_PATH) -> float | None:
    """Wall time (Unix seconds) the machine booted, from ``btime`` in /proc/stat."""
    try:
        with open(path, encoding="ascii", errors="replace") as handle:
            for line in handle:
                if line.startswith("btime "):
                    return float(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None
