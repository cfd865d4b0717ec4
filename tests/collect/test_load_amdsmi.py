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

from fleetd.collect.amdsmi_backend import load_amdsmi, rocm_python_dir
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
    assert f"nor in {rocm_python_dir()}" in message
    assert "fleetd[amd]" in message


# ---------------------------------------------------------------- the node's ROCm package
@pytest.fixture
def isolated_imports(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """sys.path and sys.modules restored after the test; no ROCm variables inherited."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setattr(sys, "modules", dict(sys.modules))
    monkeypatch.delenv("ROCM_HOME", raising=False)
    monkeypatch.delenv("ROCM_PATH", raising=False)
    return monkeypatch


def _package(parent: Path, name: str, origin: str) -> None:
    (parent / name).mkdir(parents=True)
    (parent / name / "__init__.py").write_text(f"ORIGIN = {origin!r}\n", encoding="utf-8")


def test_the_rocm_package_is_used_when_none_is_installed(
    tmp_path: Path, isolated_imports: pytest.MonkeyPatch
) -> None:
    """The Debian package ships no amdsmi: ROCm's own (<ROCM_PATH>/share/amd_smi) is found."""
    rocm = tmp_path / "rocm-7.0.2"
    _package(rocm / "share" / "amd_smi", "fleetd_rocm_amdsmi", "rocm")
    isolated_imports.setenv("ROCM_PATH", str(rocm))
    module = load_amdsmi("fleetd_rocm_amdsmi")
    assert module.ORIGIN == "rocm"
    assert sys.path[-1] == str(rocm / "share" / "amd_smi")  # appended: shadows nothing


def test_rocm_home_wins_over_rocm_path_as_in_the_wrapper(
    tmp_path: Path, isolated_imports: pytest.MonkeyPatch
) -> None:
    """amdsmi's wrapper loads the library from $ROCM_HOME first: the package must follow."""
    _package(tmp_path / "path" / "share" / "amd_smi", "fleetd_rocm_amdsmi", "rocm_path")
    isolated_imports.setenv("ROCM_PATH", str(tmp_path / "path"))
    isolated_imports.setenv("ROCM_HOME", str(tmp_path / "home"))
    with pytest.raises(BackendError) as info:
        load_amdsmi("fleetd_rocm_amdsmi")
    assert f"nor in {tmp_path / 'home' / 'share' / 'amd_smi'}" in str(info.value)


def test_an_installed_package_wins_over_the_rocm_one(
    tmp_path: Path, isolated_imports: pytest.MonkeyPatch
) -> None:
    _package(tmp_path / "rocm" / "share" / "amd_smi", "fleetd_rocm_amdsmi", "rocm")
    _package(tmp_path / "site", "fleetd_rocm_amdsmi", "installed")
    isolated_imports.syspath_prepend(str(tmp_path / "site"))
    isolated_imports.setenv("ROCM_PATH", str(tmp_path / "rocm"))
    assert load_amdsmi("fleetd_rocm_amdsmi").ORIGIN == "installed"
    assert str(tmp_path / "rocm" / "share" / "amd_smi") not in sys.path
