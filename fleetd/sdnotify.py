"""systemd's notify protocol: READY, STATUS, WATCHDOG, RELOADING, STOPPING.

About fifteen lines of socket code, so no dependency: a datagram of ``KEY=VALUE`` lines to
``$NOTIFY_SOCKET`` (a leading ``@`` is the abstract namespace). Outside systemd it is a no-op.
"""

from __future__ import annotations

import os
import socket
import time


class SystemdNotify:
    """Sends notifications to the socket systemd gave us, if any."""

    def __init__(self, address: str | None = None) -> None:
        self._address = address if address is not None else os.environ.get("NOTIFY_SOCKET")

    @property
    def enabled(self) -> bool:
        return bool(self._address)

    def notify(self, *fields: str) -> bool:
        """Send ``fields`` as one datagram; False when not under systemd or the send failed."""
        if not self._address:
            return False
        target = "\0" + self._address[1:] if self._address.startswith("@") else self._address
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
                sock.connect(target)
                sock.sendall("\n".join(fields).encode())
        except OSError:
            return False
        return True

    def ready(self, status: str) -> bool:
        return self.notify("READY=1", f"STATUS={status}")

    def status(self, status: str) -> bool:
        return self.notify(f"STATUS={status}")

    def watchdog(self) -> bool:
        return self.notify("WATCHDOG=1")

    def reloading(self) -> bool:
        usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        return self.notify("RELOADING=1", f"MONOTONIC_USEC={usec}")

    def stopping(self) -> bool:
        return self.notify("STOPPING=1")


def watchdog_interval() -> float | None:
    """Half of systemd's WatchdogSec for this process, in seconds, or None when unset."""
    usec = os.environ.get("WATCHDOG_USEC")
    pid = os.environ.get("WATCHDOG_PID")
    if not usec or (pid and pid != str(os.getpid())):
        return None
    try:
        return int(usec) / 2_000_000
    except ValueError:
        return None
