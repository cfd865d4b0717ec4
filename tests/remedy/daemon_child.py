"""A remediation daemon in its own process, for the SIGKILL tests.

Usage: python daemon_child.py SPEC.json. The spec names the database, the fleetd.yaml-shaped
config, the backend server URL, whether to raise the fault alert (first start only) and where
to kill itself: ``"crash": ["StopUnit", "after"]`` sends SIGKILL to this process just after
the first ``systemctl stop`` (``"during"``: one second into the call) — no cleanup, no
flush, exactly what a crash leaves behind.
Exits 0 once no run is active.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from fleetd.clock import SystemClock
from fleetd.config import FleetdConfig
from fleetd.logs import configure_logging
from fleetd.remedy import machine as m
from fleetd.remedy_wiring import build_remediation
from fleetd.store.db import Database
from tests.remedy.remote import RemoteBackend, RemotePoller
from tests.remedy.rig import ue_transition


def main() -> int:
    spec = json.loads(Path(sys.argv[1]).read_text())
    configure_logging("json", "warning", stream=sys.stderr)
    clock = SystemClock()
    db = Database.open(spec["db_url"])
    remediation = build_remediation(
        FleetdConfig.model_validate(spec["config"]),
        db=db,
        backend=RemoteBackend(spec["backend_url"]),
        poller=RemotePoller(spec["backend_url"]),
        clock=clock,
    )
    crash = spec.get("crash")
    if crash is not None:
        kind, when = getattr(m, crash[0]), crash[1]
        executor = remediation.executor
        original = executor._carry_out

        def carry_out(run: m.Run, cmd: m.Command, now: float) -> m.Event | None:
            if isinstance(cmd, kind) and when == "before":
                os.kill(os.getpid(), signal.SIGKILL)
            if isinstance(cmd, kind) and when == "during":  # killed inside a slow call
                threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGKILL)).start()
            result = original(run, cmd, now)
            if isinstance(cmd, kind) and when == "after":
                os.kill(os.getpid(), signal.SIGKILL)
            return result

        executor._carry_out = carry_out  # type: ignore[method-assign]
    if spec.get("fault"):
        remediation.handle([ue_transition(3, clock.now())], clock.now())
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        remediation.tick(clock.now())
        if not remediation.executor.active():
            return 0
        time.sleep(0.01)
    return 1


if __name__ == "__main__":
    sys.exit(main())
