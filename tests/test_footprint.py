"""What a node's daemon loads: nothing it may never use (docs/performance.md, footprint)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from fleetd.clock import FakeClock
from fleetd.collect.amdsmi_backend import AmdSmiBackend, ReadError
from fleetd.sim import SimulatedAmdSmi, build_node


def test_the_daemon_does_not_load_the_postgresql_dialect_until_it_uses_postgresql() -> None:
    code = (
        "import sys, fleetd.daemon, fleetd.cli.run_cmd; "
        "print(sorted(m for m in sys.modules if 'dialects.postgresql' in m or 'psycopg' in m))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[]"


def test_a_node_daemon_loads_neither_the_simulator_nor_rich() -> None:
    """fleetd.sim only runs under --simulate; rich/pygments came with structlog for console
    tracebacks a JSON-logging daemon never prints."""
    code = (
        "import sys, fleetd.cli.fleetd_main, fleetd.daemon, fleetd.cli.run_cmd; "
        "print(sorted(m for m in sys.modules if m.startswith(('fleetd.sim', 'rich', 'pygments'))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[]"


def _depth(error: BaseException) -> int:
    depth, tb = 0, error.__traceback__
    while tb is not None:
        depth, tb = depth + 1, tb.tb_next
    return depth


def test_a_remembered_gpu_error_raised_every_poll_does_not_keep_each_polls_frames(
    tmp_path: Path,
) -> None:
    """Raising a stored exception again appends frames to its traceback: one raised every poll
    kept every poll's frames (and their readings) alive — the daemon grew ~0.2 MB per tick."""
    clock = FakeClock()
    node = build_node("MI355X", clock=clock)
    backend = AmdSmiBackend(SimulatedAmdSmi(node), pci_root=node.attach_sysfs(tmp_path))
    gpu = backend.sources()[0]

    def unsupported() -> None:
        raise ReadError("not_supported", "this SKU")

    def failed() -> None:
        raise ReadError("io_error", "once")

    reads: dict[str, Callable[[str], object]] = {
        "feature": lambda key: gpu.feature(key, unsupported),
        "static": lambda key: gpu.static(key, unsupported),
        "per_poll": lambda key: gpu.per_poll(key, clock.now(), failed),
    }
    for name, read in reads.items():
        depths = []
        for _ in range(50):
            with pytest.raises(ReadError) as caught:
                read(f"test.{name}")
            depths.append(_depth(caught.value))
        assert max(depths[1:]) == depths[1], f"{name}: traceback grew {depths[1]} → {depths[-1]}"
