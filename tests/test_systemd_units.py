"""The shipped systemd units: valid for systemd, and saying what fleetd relies on.

``systemd-analyze verify`` checks each unit the way systemd would load it (it also insists
that ExecStart's program exists, so the checks run on copies whose ExecStart points at this
Python). The other tests pin the settings the daemon and remediation depend on: the notify
protocol, the watchdog, reload by SIGHUP, the directories, GPU device access, and a vLLM
worker that systemd never kills in the middle of its drain.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fleetd.config import DEFAULT_CONFIG_PATH, DEFAULT_STATE_DIR, PollConfig
from fleetd.remedy.config import WorkersConfig

ROOT = Path(__file__).resolve().parents[1]
FLEETD_UNIT = ROOT / "systemd" / "fleetd.service"
VLLM_TEMPLATE = ROOT / "systemd" / "vllm@.service"
SECURITY_DOC = ROOT / "docs" / "security.md"
DOCUMENTED_SYSTEMD = 252  # the version whose exposure score docs/security.md records

SYSTEMD_ANALYZE = shutil.which("systemd-analyze")
needs_analyze = pytest.mark.skipif(
    SYSTEMD_ANALYZE is None,
    reason="systemd-analyze is not installed (Debian package systemd); cannot verify units",
)

Unit = dict[str, dict[str, list[str]]]


# ------------------------------------------------------------------------------------ helpers
def parse_unit(text: str) -> Unit:
    """Sections → key → every value in order (systemd keys may repeat, e.g. DeviceAllow)."""
    unit: Unit = {}
    section: dict[str, list[str]] | None = None
    pending = ""
    for raw in text.splitlines():
        line = pending + raw.strip()
        pending = ""
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = unit.setdefault(line[1:-1], {})
            continue
        assert section is not None, f"setting outside a section: {line}"
        key, _, value = line.partition("=")
        section.setdefault(key.strip(), []).append(value.strip())
    return unit


def one(unit: Unit, section: str, key: str) -> str:
    values = unit.get(section, {}).get(key, [])
    assert len(values) == 1, f"[{section}] {key}= should be set once, found {values}"
    return values[0]


_SPAN = re.compile(
    r"(\d+(?:\.\d+)?)\s*(us|ms|seconds|second|sec|s|minutes|minute|min|m|hours|hour|hr|h)?"
)
_SPAN_SECONDS = {
    None: 1.0, "us": 1e-6, "ms": 1e-3, "s": 1.0, "sec": 1.0, "second": 1.0, "seconds": 1.0,
    "m": 60.0, "min": 60.0, "minute": 60.0, "minutes": 60.0,
    "h": 3600.0, "hr": 3600.0, "hour": 3600.0, "hours": 3600.0,
}  # fmt: skip


def timespan(text: str) -> float:
    """systemd.time(7) spans such as ``90s``, ``30min``, ``2min 30s`` → seconds."""
    total, pos = 0.0, 0
    for match in _SPAN.finditer(text):
        if text[pos : match.start()].strip():
            break
        total += float(match.group(1)) * _SPAN_SECONDS[match.group(2)]
        pos = match.end()
    assert text[pos:].strip() == "", f"not a time span: {text!r}"
    return total


def runnable_copy(source: Path, target: Path) -> Path:
    """``source`` with ExecStart's program replaced by this Python (which exists)."""
    lines = []
    for line in source.read_text(encoding="utf-8").splitlines():
        if line.startswith("ExecStart="):
            program, _, args = line.removeprefix("ExecStart=").partition(" ")
            assert program.startswith("/"), "ExecStart needs an absolute path"
            line = f"ExecStart={sys.executable} {args}"
        lines.append(line)
    target.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return target


def analyze(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    assert SYSTEMD_ANALYZE is not None
    env = {**os.environ, "SYSTEMD_UNIT_PATH": f"{cwd}:", "SYSTEMD_LOG_COLOR": "0"}
    return subprocess.run(
        [SYSTEMD_ANALYZE, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def complaints(result: subprocess.CompletedProcess[str], name: str) -> list[str]:
    """Lines about the unit (verify prints 'Failed to parse …, ignoring' and still exits 0)."""
    stem = name.split("@")[0]
    return [line for line in result.stderr.splitlines() if stem in line]


def systemd_version() -> int | None:
    if SYSTEMD_ANALYZE is None:
        return None
    out = subprocess.run(
        [SYSTEMD_ANALYZE, "--version"], capture_output=True, text=True, check=False
    ).stdout
    found = re.match(r"systemd (\d+)", out)
    return int(found.group(1)) if found else None


@pytest.fixture(scope="module")
def fleetd_unit() -> Unit:
    return parse_unit(FLEETD_UNIT.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def vllm_unit() -> Unit:
    return parse_unit(VLLM_TEMPLATE.read_text(encoding="utf-8"))


# ------------------------------------------------------------------------------------ verify
@needs_analyze
def test_fleetd_unit_passes_systemd_analyze_verify(tmp_path: Path) -> None:
    unit = runnable_copy(FLEETD_UNIT, tmp_path / "fleetd.service")
    result = analyze("verify", str(unit), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert complaints(result, "fleetd.service") == []


@needs_analyze
def test_vllm_template_instance_passes_systemd_analyze_verify(tmp_path: Path) -> None:
    runnable_copy(VLLM_TEMPLATE, tmp_path / "vllm@.service")
    result = analyze("verify", "vllm@3.service", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert complaints(result, "vllm@3.service") == []


@needs_analyze
def test_verify_catches_a_broken_unit(tmp_path: Path) -> None:
    """The check above can fail: a bad directive or a missing program is reported."""
    broken = tmp_path / "broken.service"
    runnable_copy(FLEETD_UNIT, broken)
    broken.write_text(broken.read_text().replace("Restart=on-failure", "Restart=sometimes"))
    result = analyze("verify", str(broken), cwd=tmp_path)
    assert complaints(result, "broken.service") != []
    missing = tmp_path / "missing.service"
    missing.write_text(FLEETD_UNIT.read_text())  # ExecStart=/usr/local/bin/fleetd absent here
    if not Path("/usr/local/bin/fleetd").exists():
        assert analyze("verify", str(missing), cwd=tmp_path).returncode != 0


# ------------------------------------------------------------------------------------ fleetd
def test_fleetd_unit_speaks_the_notify_protocol(fleetd_unit: Unit) -> None:
    assert one(fleetd_unit, "Service", "Type") == "notify"
    assert one(fleetd_unit, "Service", "NotifyAccess") == "main"
    watchdog = timespan(one(fleetd_unit, "Service", "WatchdogSec"))
    # WATCHDOG=1 comes from each finished poll: allow several default polls per period
    defaults = PollConfig()
    assert watchdog >= 3 * (defaults.interval + defaults.gpu_timeout)
    # READY=1 waits for the first poll, which must fit in the start timeout
    assert timespan(one(fleetd_unit, "Service", "TimeoutStartSec")) > watchdog


def test_fleetd_unit_starts_after_the_clock_is_synchronised(fleetd_unit: Unit) -> None:
    """Ordered after time-sync.target, which is passive (systemd.special(7): "ordered
    after this unit, but not pull it in"): pulling in a wait-for-NTP service would keep the
    health agent off a node whose NTP is unreachable, and fleetd slews later steps anyway."""
    after = one(fleetd_unit, "Unit", "After").split()
    assert "time-sync.target" in after
    wants = one(fleetd_unit, "Unit", "Wants").split()
    requires = fleetd_unit["Unit"].get("Requires", [])
    assert "time-sync.target" not in wants + requires
    assert not {"systemd-time-wait-sync.service", "chrony-wait.service"} & set(wants)


def test_fleetd_unit_restarts_reloads_and_runs_the_daemon(fleetd_unit: Unit) -> None:
    assert one(fleetd_unit, "Service", "Restart") == "on-failure"
    reload = one(fleetd_unit, "Service", "ExecReload")
    assert re.search(r"\bkill\b.*-(HUP|SIGHUP|s HUP)\b.*\$MAINPID", reload), reload
    program, *args = one(fleetd_unit, "Service", "ExecStart").split()
    assert Path(program).name == "fleetd"
    assert args == ["run", "--config", str(DEFAULT_CONFIG_PATH)]


def test_fleetd_unit_directories_match_the_defaults(fleetd_unit: Unit) -> None:
    assert Path("/var/lib") / one(fleetd_unit, "Service", "StateDirectory") == DEFAULT_STATE_DIR
    config_dir = one(fleetd_unit, "Service", "ConfigurationDirectory")
    assert Path("/etc") / config_dir == DEFAULT_CONFIG_PATH.parent


def test_fleetd_unit_reaches_the_gpus(fleetd_unit: Unit) -> None:
    service = fleetd_unit["Service"]
    allowed = service.get("DeviceAllow", [])
    assert "/dev/kfd rw" in allowed
    assert "char-drm rw" in allowed
    # PrivateDevices=yes would hide /dev/kfd and /dev/dri whatever DeviceAllow says
    private = [v.lower() for v in service.get("PrivateDevices", [])]
    assert not set(private) & {"yes", "true", "on", "1"}
    # reset and systemctl need root: no User= (and no DynamicUser=)
    assert "User" not in service and "DynamicUser" not in service
    assert "CAP_SYS_ADMIN" in one(fleetd_unit, "Service", "CapabilityBoundingSet").split()


# ------------------------------------------------------------------------------------ vllm@
def test_vllm_worker_is_killed_only_after_its_own_drain(vllm_unit: Unit) -> None:
    exec_start = one(vllm_unit, "Service", "ExecStart")
    found = re.search(r"--shutdown-timeout[= ](\d+)", exec_start)
    assert found is not None, "vLLM must be started with --shutdown-timeout"
    shutdown = float(found.group(1))
    stop = timespan(one(vllm_unit, "Service", "TimeoutStopSec"))
    assert stop > shutdown
    assert one(vllm_unit, "Service", "KillMode") == "mixed"
    # fleetd's `systemctl stop` must outwait systemd's own stop timeout
    assert WorkersConfig().stop_timeout > stop


def test_vllm_worker_serves_the_gpu_of_its_instance(vllm_unit: Unit) -> None:
    service = vllm_unit["Service"]
    assert "HIP_VISIBLE_DEVICES=%i" in service.get("Environment", [])
    assert "/dev/kfd rw" in service.get("DeviceAllow", [])
    assert "char-drm rw" in service.get("DeviceAllow", [])
    assert one(vllm_unit, "Service", "Restart") == "on-failure"


# ------------------------------------------------------------------------------------ security
@needs_analyze
def test_security_doc_records_the_measured_exposure_score(tmp_path: Path) -> None:
    version = systemd_version()
    if version != DOCUMENTED_SYSTEMD:
        pytest.skip(
            f"docs/security.md records systemd {DOCUMENTED_SYSTEMD}'s score; this is {version}"
        )
    unit = runnable_copy(FLEETD_UNIT, tmp_path / "fleetd.service")
    result = analyze("security", "--offline=true", "--no-pager", str(unit), cwd=tmp_path)
    found = re.search(r"Overall exposure level for fleetd\.service: (\d+\.\d+)", result.stdout)
    assert found is not None, result.stdout + result.stderr
    doc = SECURITY_DOC.read_text(encoding="utf-8")
    assert f"exposure level **{found.group(1)}**" in doc, (
        f"systemd-analyze now scores fleetd.service {found.group(1)}: update docs/security.md"
    )


def test_timespan_reads_systemd_spans() -> None:
    assert timespan("90s") == 90
    assert timespan("30min") == 1800
    assert timespan("2min 30s") == 150
    assert timespan("60") == 60
    with pytest.raises(AssertionError):
        timespan("soon")
