"""The simulator's kernel log: what the simulated driver prints, in a file the follower reads."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from fleetd.logs import get_logger

log = get_logger("events")

SIM_LOG = "sim-kernel.log"


class SimKernelLog:
    """The kernel lines the simulated driver printed (``SimNode.kernel_lines_after``: RAS
    reports, resets, ring timeouts, page faults, AER, firmware failures, per fault class), as
    journal JSON lines in a file the follower reads, stamped with the node's model time."""

    def __init__(self, node: Any, path: str | Path, *, interval: float = 0.05) -> None:
        self.node = node
        self.path = Path(path)
        self.interval = interval
        self._seq = node.last_kernel_seq
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.touch()

    def lines(self) -> list[tuple[float, str]]:
        """New kernel messages since the last call: (model time, text)."""
        out = []
        for line in self.node.kernel_lines_after(self._seq):
            self._seq = max(self._seq, line.seq)
            out.append((line.at, line.text))
        return out

    def write(self, messages: list[tuple[float, str]]) -> None:
        if not messages:
            return
        text = "".join(
            json.dumps(
                {
                    "MESSAGE": m,
                    "__REALTIME_TIMESTAMP": str(int(at * 1e6)),
                    "_TRANSPORT": "kernel",
                }
            )
            + "\n"
            for at, m in messages
        )
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(text)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="sim-kernel-log", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2.0)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.node.sync()
                self.write(self.lines())
            except Exception as exc:
                log.warning("sim_kernel_log_failed", error=repr(exc)[:200])
