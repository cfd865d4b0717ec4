"""A copy-on-write view of this machine to install the Debian package into.

``OverlayMachine`` mounts an overlayfs over ``/`` (writes go to a tmpfs) in a private mount
namespace and runs commands chrooted into it, so ``apt-get install ./fleetd_*.deb`` runs
exactly as on a node — this machine's dpkg database, Debian's python3.11, the real
deb-systemd-helper and systemd-analyze — while the machine itself is never touched: the
namespace, its mounts and every write vanish when the machine is closed. It has a network
namespace of its own too, with nothing but its loopback (up where ``ip`` is installed):
whatever would fetch from outside (apt-get downloading a dependency) fails there. It needs
root with CAP_SYS_ADMIN (``unshare --mount --net``); ``OverlayMachine.unavailable()`` says
why not.

Inside, systemd "runs" (``/run/systemd/system`` exists, as the maintainer scripts test), and
``systemctl`` is a recorder: unit-file verbs (preset, is-enabled, enable, …) go to the real
systemctl offline, the manager's verbs (start, stop, restart, is-active, daemon-reload)
are recorded and keep a per-unit "active" file. ``/usr/sbin/policy-rc.d`` (which container
images install to forbid starting services) is removed, and man-db's index rebuild is off.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

# A mount namespace whose mounts stay in it, and a network namespace of its own
_NAMESPACES = ("unshare", "--mount", "--net", "--propagation", "private")

_SETUP = r"""
set -e
scratch=$1
! command -v ip >/dev/null || ip link set lo up
mount -t tmpfs -o mode=0755 tmpfs "$scratch"
mkdir "$scratch/upper" "$scratch/work" "$scratch/root"
root=$scratch/root
mount -t overlay overlay -o "lowerdir=/,upperdir=$scratch/upper,workdir=$scratch/work" "$root"
mount -t proc proc "$root/proc"
mount --rbind /dev "$root/dev"
mount -t tmpfs -o mode=0755 tmpfs "$root/run"
mount -t tmpfs -o mode=1777 tmpfs "$root/tmp"
mkdir -p "$root/run/systemd/system"
rm -f "$root/usr/sbin/policy-rc.d" "$root/var/lib/man-db/auto-update"
mv "$root/usr/bin/systemctl" "$root/usr/bin/systemctl.real"
echo ready
exec sleep infinity
"""

RECORDING_SYSTEMCTL = r"""#!/bin/sh
# systemctl stand-in (tests/deb/machine.py): records each call in /run/systemctl.calls
echo "$*" >>/run/systemctl.calls
verb=""
for arg; do case "$arg" in -*) ;; *) verb=$arg; break ;; esac; done
for unit; do :; done
mkdir -p /run/fake-systemd
case "$verb" in
preset | is-enabled | enable | disable | reenable | mask | unmask)
	case " $* " in *" --root="*) exec /usr/bin/systemctl.real "$@" ;; esac
	exec /usr/bin/systemctl.real --root=/ "$@" ;;
start | restart) touch "/run/fake-systemd/$unit" ;;
stop) rm -f "/run/fake-systemd/$unit" ;;
is-active) [ -e "/run/fake-systemd/$unit" ] || exit 3 ;;
esac
exit 0
"""

ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "HOME": "/root",
    "LANG": "C.UTF-8",
    "DEBIAN_FRONTEND": "noninteractive",
}


class OverlayMachine:
    """This machine, copy-on-write; ``run`` executes a shell script chrooted into it."""

    def __init__(self, scratch: Path) -> None:
        scratch.mkdir(parents=True, exist_ok=True)
        self._process = subprocess.Popen(
            [*_NAMESPACES, "sh", "-c", _SETUP, "sh", scratch],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self._process.stdout is not None
        if self._process.stdout.readline().strip() != "ready":
            self._process.kill()
            _, err = self._process.communicate(timeout=10)
            raise RuntimeError(f"cannot set up the overlay machine: {err.strip()}")
        self.root = scratch / "root"  # its / as seen from inside the namespace
        self.put_text("/usr/bin/systemctl", RECORDING_SYSTEMCTL, mode=0o755)

    @staticmethod
    def unavailable() -> str | None:
        """Why no overlay machine can be made here (None: it can)."""
        if os.geteuid() != 0:
            return "needs root (dpkg installs the package; overlayfs and chroot need root)"
        for tool in ("unshare", "nsenter", "chroot", "apt-get"):
            if shutil.which(tool) is None:
                return f"{tool} is not installed"
        probe = subprocess.run(
            [*_NAMESPACES, "true"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        if probe.returncode != 0:
            reason = probe.stderr.strip()
            return f"no private mount and network namespace (CAP_SYS_ADMIN?): {reason}"
        return None

    def _enter(self) -> list[str]:
        return ["nsenter", "--target", str(self._process.pid), "--mount", "--net", "--"]

    def put(self, source: Path, target: str) -> None:
        """Copy a file of this machine to ``target`` inside the overlay."""
        subprocess.run(
            [*self._enter(), "cp", str(source), f"{self.root}{target}"], check=True, timeout=60
        )

    def put_text(self, target: str, text: str, mode: int = 0o644) -> None:
        subprocess.run(
            [*self._enter(), "sh", "-c", f'cat >"$1" && chmod {mode:o} "$1"', "sh",
             f"{self.root}{target}"],
            input=text, text=True, check=True, timeout=60,
        )  # fmt: skip

    def run(
        self, script: str, env: dict[str, str] | None = None, timeout: float = 300
    ) -> subprocess.CompletedProcess[str]:
        """``sh -c script`` chrooted into the overlay (stdout and stderr captured)."""
        return subprocess.run(
            [*self._enter(), "chroot", str(self.root), "/bin/sh", "-c", script],
            env={**ENV, **(env or {})},
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def systemctl_calls(self) -> list[str]:
        """The recorded systemctl calls since the last ``forget_calls``."""
        return self.run("cat /run/systemctl.calls 2>/dev/null || true").stdout.splitlines()

    def forget_calls(self) -> None:
        self.run("rm -f /run/systemctl.calls")

    def close(self) -> None:
        """End the namespace: its mounts and everything written go with it."""
        self._process.kill()
        self._process.communicate(timeout=30)
