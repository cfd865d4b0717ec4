"""The Debian package and the wheel, built from this tree (scripts/build-deb.sh), as an
operator meets them.

* lintian has nothing to say (each override in packaging/deb/lintian-overrides says why);
* the wheel carries the daemon, its rule packs and scenarios, both commands;
* ``dpkg --root`` into a scratch root, maintainer scripts run chrootless (``DPKG_ROOT``, as
  image builders do): the layout, then, on the same root, upgrade → remove → purge keep or
  remove the configuration and the state directory as Debian does, touching nothing outside
  the root;
* on a copy-on-write view of this machine (tests/deb/machine.py) with a systemd that "runs"
  and no network: ``apt-get install ./fleetd_*.deb`` enables fleetd but does not start it on
  the unedited example; the installed units pass ``systemd-analyze verify`` where they are;
  ``fleetd config check`` and ``fleetd doctor`` run from /usr/bin; an upgrade restarts the
  daemon, remove stops it, purge cleans up.

Two install → upgrade → remove → purge cycles, because they test different things: the
chrootless one that the maintainer scripts keep to ``DPKG_ROOT`` and what dpkg keeps of an
operator's files; the one on this machine what the scripts do with systemd and byte-code
(each install and upgrade there byte-compiles the environment in the postinst, as on a node).
"""

from __future__ import annotations

import email.parser
import filecmp
import importlib.util
import os
import re
import subprocess
import tomllib
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement

from .conftest import REPO, Built
from .machine import OverlayMachine

pytestmark = pytest.mark.slow  # one build (~15 s of CPU) and lintian (~19 s) for the module

PREFIX = "/usr/lib/fleetd/venv"
SITE = f"{PREFIX}/lib/python3.11/site-packages"
UNIT = "/lib/systemd/system/fleetd.service"
WANTS = "/etc/systemd/system/multi-user.target.wants/fleetd.service"
HOST_PATHS = ("/var/lib/fleetd", "/etc/fleetd", "/usr/lib/fleetd", UNIT, WANTS)

# What an operator writes before fleetd can start on the shipped example (docs/operations.md)
SECRETS = {
    "api-token": "s3cr3t-api-token-of-32-characters",
    "pagerduty-routing-key": "R0UT1NGKEY0123456789abcdef012345",
    "alertmanager-token": "am-bearer-token-0123456789abcdef",
    "slack-webhook-url": "https://hooks.slack.example/services/T000/B000/XXXX",
    "audit-webhook-url": "https://audit.example.com/hooks/fleetd",
    "registry-url": "postgresql://fleetd_agent:s3cr3t@db.example/fleet",
}
SECRET_ENV = {"FLEETD_SLACK_BOT_TOKEN": "xoxb-0123456789-abcdefghijklmnop"}


def project_version() -> str:
    with open(REPO / "pyproject.toml", "rb") as f:
        return str(tomllib.load(f)["project"]["version"])


def deb_field(deb: Path, name: str) -> str:
    out = subprocess.run(["dpkg-deb", "-f", str(deb), name], capture_output=True, text=True)
    return out.stdout.strip()


@pytest.fixture(scope="session")
def upgrade_deb(built: Built, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same package as version <v>+1: what the next release looks like to dpkg."""
    work = tmp_path_factory.mktemp("upgrade")
    subprocess.run(["dpkg-deb", "-R", str(built.deb), str(work / "tree")], check=True)
    control = work / "tree" / "DEBIAN" / "control"
    text = control.read_text(encoding="utf-8")
    control.write_text(text.replace(f"Version: {built.version}\n", f"Version: {built.version}+1\n"))
    target = work / f"fleetd_{built.version}+1.deb"
    subprocess.run(
        ["dpkg-deb", "--root-owner-group", "-Znone", "-b", str(work / "tree"), str(target)],
        check=True,
        capture_output=True,
    )
    return target


# ---------------------------------------------------------------------- the two artifacts
def test_the_wheel_carries_the_daemon_its_data_and_both_commands(built: Built) -> None:
    assert built.wheel.name == f"fleetd-{project_version()}-py3-none-any.whl"
    with zipfile.ZipFile(built.wheel) as wheel:
        names = set(wheel.namelist())
        info = f"fleetd-{project_version()}.dist-info"
        metadata = email.parser.Parser().parsestr(wheel.read(f"{info}/METADATA").decode())
        entry_points = wheel.read(f"{info}/entry_points.txt").decode()
    for shipped in (
        "fleetd/py.typed",
        "fleetd/data/afid_actions.yaml",
        "fleetd/data/rules/gpu.yaml",
        "fleetd/sim/scenarios/healthy.yaml",
    ):
        assert shipped in names
    assert "fleetd = fleetd.cli.fleetd_main:main" in entry_points
    assert "fleetctl = fleetd.cli.fleetctl_main:main" in entry_points
    assert metadata["Version"] == project_version()
    with open(REPO / "pyproject.toml", "rb") as f:
        declared = tomllib.load(f)["project"]["dependencies"]
    required = {Requirement(r) for r in metadata.get_all("Requires-Dist") or []}
    assert {Requirement(d) for d in declared} <= required


def test_the_package_declares_what_it_needs(built: Built) -> None:
    assert deb_field(built.deb, "Package") == "fleetd"
    assert deb_field(built.deb, "Version") == project_version()
    arch = subprocess.run(["dpkg", "--print-architecture"], capture_output=True, text=True)
    assert deb_field(built.deb, "Architecture") == arch.stdout.strip()  # compiled wheels inside
    depends = deb_field(built.deb, "Depends")
    for needed in ("python3.11", "ca-certificates", "libc6 (>= "):
        assert needed in depends
    recommends = deb_field(built.deb, "Recommends")
    assert "amd-smi-lib" in recommends and "python3-psycopg2" in recommends
    conffiles = subprocess.run(
        ["dpkg-deb", "-I", str(built.deb), "conffiles"], capture_output=True, text=True
    )
    assert conffiles.stdout.split() == ["/etc/fleetd/fleetd.yaml"]


# ---------------------------------------------------------------- dpkg --root, chrootless
def dpkg_root(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """dpkg on a scratch root; maintainer scripts run on this machine with DPKG_ROOT=root."""
    for sub in ("info", "updates", "triggers"):
        (root / "var/lib/dpkg" / sub).mkdir(parents=True, exist_ok=True)
    for name in ("status", "available"):
        (root / "var/lib/dpkg" / name).touch()
    return subprocess.run(
        ["dpkg", f"--root={root}", "--force-script-chrootless", "--force-depends", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.fixture(scope="module")
def host_before() -> dict[str, bool]:
    return {path: os.path.lexists(path) for path in HOST_PATHS}


@pytest.fixture(scope="module")
def scratch(
    built: Built, tmp_path_factory: pytest.TempPathFactory, host_before: dict[str, bool]
) -> Path:
    """A root the package is installed into chrootless: the layout test reads it, the cycle
    test then upgrades, removes and purges it."""
    if os.geteuid() != 0:
        pytest.skip("dpkg --root installs as root")
    root = tmp_path_factory.mktemp("root")
    result = dpkg_root(root, "-i", str(built.deb))
    assert result.returncode == 0, result.stdout + result.stderr
    return root


def test_the_installed_layout(scratch: Path, built: Built) -> None:
    venv = scratch / PREFIX.lstrip("/")
    site = scratch / SITE.lstrip("/")
    for program in ("fleetd", "fleetctl"):
        link = scratch / "usr/bin" / program
        assert os.readlink(link) == f"../lib/fleetd/venv/bin/{program}"  # relative, into the venv
        script = venv / "bin" / program
        assert script.read_text().splitlines()[0] == f"#!{PREFIX}/bin/python3"
        assert script.stat().st_mode & 0o777 == 0o755
    assert sorted(p.name for p in (venv / "bin").iterdir()) == [
        "fleetctl", "fleetd", "python", "python3", "python3.11"
    ]  # fmt: skip
    interpreter = venv / "bin/python3.11"
    assert os.path.normpath(interpreter.parent / os.readlink(interpreter)) == str(
        scratch / "usr/bin/python3.11"
    )  # Debian's, by a relative link
    assert "include-system-site-packages = true" in (venv / "pyvenv.cfg").read_text()
    # amdsmi comes from the node's ROCm, psycopg2 from python3-psycopg2; no static libyaml
    assert not (site / "amdsmi").exists() and not list(site.glob("psycopg2*"))
    assert not list(site.glob("yaml/_yaml*.so"))
    assert os.readlink(site / "certifi/cacert.pem") == "/etc/ssl/certs/ca-certificates.crt"
    assert not list(venv.rglob("__pycache__"))  # compiled by the postinst, outside DPKG_ROOT
    assert (site / f"fleetd-{built.version}.dist-info").is_dir()

    unit = (scratch / UNIT.lstrip("/")).read_text()
    shipped = (REPO / "systemd/fleetd.service").read_text()
    assert "ExecStart=/usr/bin/fleetd run --config /etc/fleetd/fleetd.yaml\n" in unit
    settings = [ln for ln in unit.splitlines() if ln and not ln.startswith(("#", "ExecStart="))]
    shipped_settings = [
        ln for ln in shipped.splitlines() if ln and not ln.startswith(("#", "ExecStart="))
    ]
    assert settings == shipped_settings  # the tree's unit, only run from the package's path
    documentation = re.search(r"^Documentation=file://(\S+)", unit, re.MULTILINE)
    assert documentation is not None and (scratch / documentation.group(1).lstrip("/")).is_file()

    config = scratch / "etc/fleetd/fleetd.yaml"
    assert filecmp.cmp(config, REPO / "docs/fleetd.example.yaml", shallow=False)
    assert config.stat().st_mode & 0o777 == 0o640
    assert yaml.safe_load(config.read_text())["remediation"]["mode"] == "dry-run"
    assert (scratch / "etc/fleetd/secrets").stat().st_mode & 0o777 == 0o700
    assert (scratch / "etc/fleetd/rules.d").is_dir()
    assert (scratch / "var/lib/fleetd").stat().st_mode & 0o777 == 0o750  # made by the postinst
    assert not (scratch / "var/log/fleetd").exists()  # fleetd logs to the journal only

    doc = scratch / "usr/share/doc/fleetd"
    for name in ("copyright", "changelog.gz", "README.md", "docs/operations.md"):
        assert (doc / name).is_file(), name
    assert (doc / "examples/vllm@.service").is_file()
    assert "pydantic" in (doc / "copyright").read_text()  # the bundled distributions listed
    for page in ("fleetd.1.gz", "fleetctl.1.gz"):
        assert (scratch / "usr/share/man/man1" / page).is_file()
    # enabled as deb-systemd-helper does, inside the root
    assert os.readlink(scratch / WANTS.lstrip("/")) == UNIT


def test_chrootless_install_upgrade_remove_purge(
    scratch: Path, upgrade_deb: Path, host_before: dict[str, bool]
) -> None:
    """After the layout test: it takes the package away from the scratch root."""
    root = scratch
    database = root / "var/lib/fleetd/fleetd.db"
    database.write_text("the node's history")
    secret = root / "etc/fleetd/secrets/api-token"
    secret.write_text(SECRETS["api-token"])
    config = root / "etc/fleetd/fleetd.yaml"
    edited = config.read_text().replace("rack: r12", "rack: r13")
    config.write_text(edited)

    upgrade = dpkg_root(root, "-i", str(upgrade_deb))
    assert upgrade.returncode == 0, upgrade.stderr
    assert database.read_text() == "the node's history"  # upgrade keeps the state
    assert config.read_text() == edited  # and the operator's edit of the conffile
    assert secret.exists()

    removal = dpkg_root(root, "-r", "fleetd")
    assert removal.returncode == 0, removal.stderr
    assert not (root / "usr/lib/fleetd").exists() and not (root / "usr/bin/fleetd").exists()
    assert not (root / UNIT.lstrip("/")).exists()
    assert database.exists() and config.read_text() == edited  # remove keeps both
    status = dpkg_root(root, "-s", "fleetd").stdout
    assert "Status: deinstall ok config-files" in status

    purge = dpkg_root(root, "-P", "fleetd")
    assert purge.returncode == 0, purge.stderr
    assert not (root / "var/lib/fleetd").exists()  # purge removes the state directory
    assert not config.exists()
    assert not os.path.lexists(root / WANTS.lstrip("/"))
    helper_state = root / "var/lib/systemd/deb-systemd-helper-enabled"
    assert not (helper_state / "fleetd.service.dsh-also").exists()
    assert secret.exists()  # an operator's secret is theirs: dpkg keeps the directory, and says so
    assert "/etc/fleetd/secrets' not empty" in purge.stdout + purge.stderr
    # the maintainer scripts ran on this machine, and wrote only under DPKG_ROOT
    assert {path: os.path.lexists(path) for path in HOST_PATHS} == host_before


# --------------------------------------------------------------------- on this machine
@dataclass
class Node:
    machine: OverlayMachine
    install: subprocess.CompletedProcess[str]  # what `apt-get install` said


@pytest.fixture(scope="module")
def installed(built: Built, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    """This machine, copy-on-write, after `apt-get install ./fleetd_<v>_<arch>.deb`."""
    reason = OverlayMachine.unavailable()
    if reason is not None:
        pytest.skip(f"cannot make a copy-on-write view of this machine: {reason}")
    if any(os.path.lexists(path) for path in HOST_PATHS):
        pytest.skip("fleetd is installed on this machine itself")
    machine = OverlayMachine(tmp_path_factory.mktemp("node"))
    try:
        machine.put(built.deb, f"/tmp/{built.deb.name}")
        # Offline: the machine has no network, and apt no package source either (nor its
        # lists to parse), so a dependency this machine lacks fails the install, loudly,
        # instead of being fetched. (Not --no-download: apt 2.6 then refuses a local .deb,
        # "Pathname to install is not absolute".)
        install = machine.run(
            "cd /tmp && apt-get install -y --no-install-recommends"
            " -o Dir::Etc::SourceList=/dev/null -o Dir::Etc::SourceParts=/dev/null"
            f" ./{built.deb.name}"
        )
        yield Node(machine, install)
    finally:
        machine.close()


def test_apt_install_enables_fleetd_but_leaves_the_unedited_example_stopped(
    installed: Node,
) -> None:
    node, install = installed.machine, installed.install
    said = install.stdout + install.stderr
    assert install.returncode == 0, said
    assert "Setting up fleetd" in said
    calls = node.systemctl_calls()
    assert any(" preset fleetd.service" in c for c in calls), calls  # enabled, Debian's way
    assert "--system daemon-reload" in calls
    assert not [c for c in calls if re.search(r"\b(start|restart)\b", c)], calls
    # the operator is told why, and what to do
    assert "fleetd.service is enabled but not started" in said
    assert "routing_key_file: cannot read /etc/fleetd/secrets/pagerduty-routing-key" in said
    assert "fleetd config check /etc/fleetd/fleetd.yaml && systemctl start fleetd" in said
    enabled = node.run("systemctl.real --root=/ is-enabled fleetd.service")
    assert enabled.stdout.strip() == "enabled"
    compiled = node.run(f"find {PREFIX}/lib -name '*.pyc' | wc -l")
    assert int(compiled.stdout) > 500  # the postinst byte-compiled the environment


def test_the_installed_units_pass_systemd_analyze_verify(installed: Node) -> None:
    node = installed.machine
    if node.run("command -v systemd-analyze").returncode != 0:
        pytest.skip("systemd-analyze is not installed (Debian package systemd)")
    verify = node.run(f"systemd-analyze verify {UNIT}")
    assert verify.returncode == 0, verify.stderr
    assert [ln for ln in verify.stderr.splitlines() if "fleetd" in ln] == []
    # The shipped vLLM worker example, installed as docs/systemd.md says, on a node with vLLM
    worker = node.run(
        "install -D -m 0755 /bin/true /opt/vllm/venv/bin/vllm"
        " && cp /usr/share/doc/fleetd/examples/vllm@.service /etc/systemd/system/"
        " && systemd-analyze verify vllm@3.service"
    )
    assert worker.returncode == 0, worker.stderr
    assert [ln for ln in worker.stderr.splitlines() if "vllm@" in ln] == []


def test_config_check_and_doctor_run_from_the_installed_tree(installed: Node, built: Built) -> None:
    node = installed.machine
    config = "/etc/fleetd/fleetd.yaml"
    assert node.run("command -v fleetd; command -v fleetctl").stdout.split() == [
        "/usr/bin/fleetd", "/usr/bin/fleetctl"
    ]  # fmt: skip
    version = node.run("fleetctl --version")
    assert version.returncode == 0 and built.version in version.stdout

    unedited = node.run(f"fleetd config check {config}")
    assert unedited.returncode == 1
    assert "api.token_file: cannot read /etc/fleetd/secrets/api-token" in unedited.stderr

    for name, value in SECRETS.items():  # what the operator does next (docs/operations.md)
        node.put_text(f"/etc/fleetd/secrets/{name}", value + "\n", mode=0o600)
    check = node.run(f"fleetd config check {config}", env=SECRET_ENV)
    assert check.returncode == 0, check.stderr
    assert f"{config}: OK" in check.stdout
    assert yaml.safe_load(node.run(f"cat {config}").stdout)["remediation"]["mode"] == "dry-run"

    simulated = node.run(f"fleetd doctor --simulate healthy --config {config}", env=SECRET_ENV)
    assert simulated.returncode == 0, simulated.stdout + simulated.stderr
    assert "state_dir   /var/lib/fleetd is writable" in simulated.stdout
    assert "doctor: ok (exit 0)" in simulated.stdout

    # On the real backend, without ROCm: one line naming where amdsmi was looked for
    bare = node.run(f"fleetd doctor --config {config}", env=SECRET_ENV)
    assert bare.returncode == 2
    assert (
        "cannot load amdsmi: the Python package is not installed (nor in /opt/rocm/share/amd_smi)"
        in bare.stderr
    )
    # With ROCm's own Python package in place (here the amdsmi 7.0.2 sources, no library),
    # the package is found there: what is missing now is libamd_smi.so
    spec = importlib.util.find_spec("amdsmi")
    if spec is None or spec.origin is None:
        pytest.skip("amdsmi 7.0.2 is not installed here to stand in for ROCm's package")
    package = Path(spec.origin).parent
    node.run("mkdir -p /opt/rocm/share/amd_smi/amdsmi")
    for source in package.glob("*.py"):
        node.put(source, f"/opt/rocm/share/amd_smi/amdsmi/{source.name}")
    rocm = node.run(f"fleetd doctor --config {config}", env=SECRET_ENV)
    assert rocm.returncode == 2
    assert "cannot load amdsmi: libamd_smi.so was not found (/opt/rocm/lib/libamd_smi.so" in (
        rocm.stderr
    )
    node.run("rm -rf /opt/rocm")


def test_upgrade_restarts_remove_stops_purge_cleans(installed: Node, upgrade_deb: Path) -> None:
    """Last: it takes the package away."""
    node = installed.machine
    node.run("systemctl start fleetd.service")  # the operator, once the config checks
    node.run("echo history > /var/lib/fleetd/fleetd.db")
    node.put(upgrade_deb, f"/tmp/{upgrade_deb.name}")
    node.forget_calls()

    upgrade = node.run(f"dpkg -i /tmp/{upgrade_deb.name}")
    assert upgrade.returncode == 0, upgrade.stdout + upgrade.stderr
    calls = node.systemctl_calls()
    assert "--quiet --system restart fleetd.service" in calls, calls
    assert not [c for c in calls if re.search(r"\bstop\b", c)]  # watched during the upgrade
    assert node.run("cat /var/lib/fleetd/fleetd.db").stdout == "history\n"
    assert node.run("test -e /run/fake-systemd/fleetd.service").returncode == 0

    node.forget_calls()
    removal = node.run("dpkg -r fleetd")
    assert removal.returncode == 0, removal.stdout + removal.stderr
    assert "stop fleetd.service" in node.systemctl_calls()
    assert "not empty" not in removal.stdout + removal.stderr  # no byte-code left behind
    assert node.run("test -e /usr/lib/fleetd || test -e /usr/bin/fleetd").returncode != 0
    assert node.run("cat /var/lib/fleetd/fleetd.db").stdout == "history\n"
    assert node.run("test -f /etc/fleetd/fleetd.yaml").returncode == 0

    purge = node.run("dpkg -P fleetd")
    assert purge.returncode == 0, purge.stdout + purge.stderr
    assert node.run("test -e /var/lib/fleetd").returncode != 0
    assert node.run(f"test -e /etc/fleetd/fleetd.yaml || test -L {WANTS}").returncode != 0
    assert node.run("test -f /etc/fleetd/secrets/api-token").returncode == 0  # the operator's


# ------------------------------------------------------------------------------- lintian
def test_lintian_reports_no_error_and_no_warning(built: Built) -> None:
    """Last in the file: lintian started with the build and ran while the tests above did."""
    status, report = built.lintian()
    findings = [ln for ln in report.splitlines() if re.match(r"[EW]: ", ln)]
    assert status == 0 and findings == [], report
