"""One daemon per state directory.

``fleetd run`` holds an exclusive ``flock`` on ``<state_dir>/fleetd.lock`` for as long as it
runs, as Prometheus locks its data directory. Without the lock, a second daemon on the same
directory would write the same database, deliver the same outbox and remediate the same hive.
That second daemon might be a ``fleetd run --simulate`` started by hand beside the systemd
unit, or a copy of the unit. With the lock, it refuses to start and names the process that
holds the directory. The kernel drops the lock when the holder's process ends, so a daemon that
crashed or was killed leaves nothing to clean up. A state directory fleetd cannot write to yet
gets no lock: the store reports that problem itself and runs on memory.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path
from typing import TextIO

from fleetd.errors import StateDirInUse
from fleetd.logs import get_logger

LOCK_FILE = "fleetd.lock"
log = get_logger("statelock")


def lock_state_dir(state_dir: Path) -> TextIO | None:
    """Take the state directory's lock; it is held while the returned file stays open.

    Returns None, with a warning, when the lock file cannot be opened (the directory is not
    writable). Raises ``StateDirInUse`` naming the holder's pid when another process holds it.
    """
    path = state_dir / LOCK_FILE
    try:
        state_dir.mkdir(parents=True, exist_ok=True)
        handle = open(path, "a+", encoding="utf-8")  # noqa: SIM115 - held for the process's life
    except OSError as exc:
        log.warning("state_dir_not_locked", path=str(path), error=str(exc))
        return None
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "unknown"
        handle.close()
        raise StateDirInUse(
            f"state directory {state_dir} is in use by another fleetd (pid {holder}); "
            "stop that one, or give this one a state_dir of its own"
        ) from None
    with contextlib.suppress(OSError):  # the pid is for the message only
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
    return handle
