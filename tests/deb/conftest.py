"""The two release artifacts, built once for tests/deb by scripts/build-deb.sh.

Building takes most of these tests' time, so it happens once per session; lintian (the other
slow part) starts on the package as soon as it exists and runs while the install tests do.
Everything skips, with the Debian package to install, where the tools are missing, and with
the command that makes it where the wheelhouse is missing.

Tests never reach outside this machine: the package is built offline, from the wheelhouse
that scripts/test.sh's install step fills (scripts/wheelhouse.sh), with pip told to use no
index, every proxy pointing at a closed loopback port and, where this user can make one, in
a network namespace of its own with no interface but a loopback that is down. A build that
would fetch anything fails.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO / "scripts" / "build-deb.sh"
WHEELHOUSE = Path(os.environ.get("FLEETD_WHEELHOUSE") or REPO / ".wheelhouse")
CLOSED_PORT = "http://127.0.0.1:9"  # discard: nothing listens there, a fetch fails at once
OFFLINE_ENV = {
    "PIP_NO_INDEX": "1",
    **{name: CLOSED_PORT for name in ("http_proxy", "https_proxy", "all_proxy")},
    **{name.upper(): CLOSED_PORT for name in ("http_proxy", "https_proxy", "all_proxy")},
}
DEB_PYTHON = Path("/usr/bin/python3.11")
TOOLS = {  # tool → the Debian package that has it (.ci/run installs them)
    "dpkg-deb": "dpkg",
    "dpkg-shlibdeps": "dpkg-dev",
    "strip": "binutils",
    "lintian": "lintian",
}


@dataclass
class Built:
    """scripts/build-deb.sh's output, and lintian running on the package."""

    wheel: Path
    deb: Path
    version: str
    _lintian: subprocess.Popen[str]
    _lintian_result: tuple[int, str] | None = field(default=None)

    def lintian(self) -> tuple[int, str]:
        """lintian's exit status (non-zero on an error or a warning) and its report."""
        if self._lintian_result is None:
            out, _ = self._lintian.communicate(timeout=600)
            self._lintian_result = (self._lintian.returncode, out)
        return self._lintian_result


def missing_tools() -> str | None:
    """Why the package cannot be built here (None: it can)."""
    for tool, package in TOOLS.items():
        if shutil.which(tool) is None:
            return f"{tool} is not installed (Debian package {package}); cannot build the .deb"
    if not DEB_PYTHON.exists():
        return f"{DEB_PYTHON}, the package's interpreter, is not installed (Debian python3.11)"
    probe = subprocess.run(
        [str(DEB_PYTHON), "-c", "import venv, ensurepip"], capture_output=True, check=False
    )
    if probe.returncode != 0:
        return f"{DEB_PYTHON} cannot make a venv (Debian package python3-venv)"
    if importlib.util.find_spec("build") is None:
        return "the 'build' package is not installed (pip install -c constraints.txt -e '.[test]')"
    if not any(WHEELHOUSE.glob("*.whl")):
        where = WHEELHOUSE.relative_to(REPO) if WHEELHOUSE.is_relative_to(REPO) else WHEELHOUSE
        return (
            f"no wheelhouse at {where} to build the package offline: make it with"
            f" ./scripts/wheelhouse.sh {where} (scripts/test.sh's install step runs it)"
        )
    return None


def offline_env() -> dict[str, str]:
    """This environment with pip's index off and every proxy on a closed port."""
    env = {name: value for name, value in os.environ.items() if name.lower() != "no_proxy"}
    return {**env, **OFFLINE_ENV}


def without_network(command: list[str]) -> list[str]:
    """``command`` in a network namespace of its own, where this user can make one."""
    if shutil.which("unshare") is None:
        return command
    probe = subprocess.run(["unshare", "--net", "true"], capture_output=True, check=False)
    return ["unshare", "--net", *command] if probe.returncode == 0 else command


@pytest.fixture(scope="session")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Built]:
    reason = missing_tools()
    if reason is not None:
        pytest.skip(reason)
    out = tmp_path_factory.mktemp("dist")
    result = subprocess.run(
        without_network([str(BUILD_SCRIPT), "--wheelhouse", str(WHEELHOUSE), str(out)]),
        env={**offline_env(), "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert result.returncode == 0, f"scripts/build-deb.sh failed:\n{result.stderr[-6000:]}"
    wheel, deb = (Path(line) for line in result.stdout.split())
    version = deb.name.split("_")[1]
    lintian = subprocess.Popen(
        ["lintian", "--fail-on", "error,warning", str(deb)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    built = Built(wheel, deb, version, lintian)
    yield built
    if lintian.poll() is None:
        lintian.kill()
        lintian.communicate()
