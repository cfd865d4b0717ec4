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


# Loaded on demand only (docs/performance.md, "Footprint: lazy imports"): the other `fleetd`
# subcommands (looked up by name), the fleet registry's client (registry.url), the vendors'
# notifiers (a receiver using them), the vLLM peer comparison (vLLM workers), the simulated
# kernel log (--simulate), the remediation steps (a first run). fleetd.registry.config stays:
# it is a section of the config.
_LAZY = (
    "fleetd.cli.config_cmd",
    "fleetd.cli.demo_cmd",
    "fleetd.cli.doctor_cmd",
    "fleetd.cli.rules_cmd",
    "fleetd.rules.ruletest",
    "fleetd.rules.export",
    "fleetd.rules.render",
    "fleetd.registry.heartbeat",
    "fleetd.registry.drift",
    "fleetd.registry.store",
    "fleetd.registry.reader",
    "fleetd.registry.report",
    "fleetd.registry.serving",
    "fleetd.registry.silences",
    "fleetd.alert.pagerduty",
    "fleetd.alert.slack",
    "fleetd.alert.webhook",
    "fleetd.alert.alertmanager",
    "fleetd.vllm.peers",
    "fleetd.vllm.fleet",
    "fleetd.events.simlog",
    "fleetd.remedy.steps.drain",
    "fleetd.remedy.steps.readmit",
    "fleetd.remedy.steps.reset",
    "fleetd.remedy.steps.terminal",
    "fleetd.remedy.steps.validate",
)


def test_a_node_daemon_loads_no_code_its_configuration_does_not_use() -> None:
    code = (
        "import sys, fleetd.cli.fleetd_main, fleetd.daemon, fleetd.cli.run_cmd; "
        f"print(sorted(m for m in {_LAZY!r} if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[]"


def test_fleetd_still_lists_and_runs_every_subcommand_it_loads_on_demand() -> None:
    from click.testing import CliRunner

    from fleetd.cli.fleetd_main import main

    listed = CliRunner().invoke(main, ["--help"])
    assert listed.exit_code == 0, listed.output
    for name in ("config", "demo", "doctor", "rules", "run"):
        assert f"\n  {name} " in listed.output
        shown = CliRunner().invoke(main, [name, "--help"])
        assert shown.exit_code == 0, shown.output
    assert CliRunner().invoke(main, ["nosuch"]).exit_code == 2


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
