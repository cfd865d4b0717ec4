"""load_amdsmi turns every way `import amdsmi` fails into one clear line.

Run in subprocesses: a failed `import amdsmi` leaves nothing behind in this process, and the
real wrapper prints to stdout, which must be swallowed.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from fleetd.collect.amdsmi_backend import load_amdsmi
from fleetd.errors import BackendError

ROOT = Path(__file__).resolve().parents[2]

PROBE = textwrap.dedent(
    """
    import sys
    from fleetd.collect.amdsmi_backend import load_amdsmi
    from fleetd.errors import BackendError
    try:
        load_amdsmi()
    except BackendError as exc:
        print(exc)
        sys.exit(3)
    print("loaded")
    """
)

needs_amdsmi = pytest.mark.skipif(
    importlib.util.find_spec("amdsmi") is None,
    reason="the amdsmi 7.0.2 package is not installed (CI: pip install amdsmi==7.0.2)",
)


def _probe(tmp_path: Path, rocm: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("ROCM_HOME", "LD_LIBRARY_PATH")}
    env["ROCM_PATH"] = str(rocm)
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@needs_amdsmi
def test_missing_library_gives_one_clear_line(tmp_path: Path) -> None:
    rocm = tmp_path / "rocm"
    (rocm / "lib").mkdir(parents=True)
    result = _probe(tmp_path, rocm)
    if result.stdout.strip() == "loaded":
        pytest.skip("this host has a working libamd_smi.so")
    assert result.returncode == 3, result.stderr
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1, result.stdout  # the wrapper's own prints are swallowed
    line = lines[0]
    assert "libamd_smi.so was not found" in line
    assert "amd-smi-lib 7.0" in line and "ROCM_PATH" in line and "fleetd[amd]" in line
    assert "Traceback" not in result.stdout + result.stderr


@needs_amdsmi
@pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is needed to build a stub library")
def test_mismatched_library_gives_one_clear_line(tmp_path: Path) -> None:
    """A libamd_smi.so without amdsmi 7.0.2's symbols (e.g. an older ROCm)."""
    rocm = tmp_path / "rocm"
    (rocm / "lib").mkdir(parents=True)
    source = tmp_path / "stub.c"
    source.write_text("int fleetd_stub_symbol(void) { return 0; }\n")
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-o", str(rocm / "lib" / "libamd_smi.so"), str(source)],
        check=True,
        timeout=60,
    )
    result = _probe(tmp_path, rocm)
    assert result.returncode == 3, result.stderr
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1, result.stdout
    assert "does not match amdsmi 7.0.2" in lines[0]
    assert "undefined symbol" in lines[0]
    assert "amd-smi-lib 7.0" in lines[0]


def test_missing_python_package_gives_one_clear_line() -> None:
    with pytest.raises(BackendError) as info:
        load_amdsmi("fleetd_no_such_amdsmi_package")
    message = str(info.value)
    assert "\n" not in message
    assert "Python package is not installed" in message
    assert "fleetd[amd]" in message
