"""A replay daemon ticked by hand on a fake clock, for the benchmarks that measure one part of a
tick or the whole process in this process (``bench/daemon.py --footprint-ticks`` and
``--breakdown-ticks``, ``bench/scale.py``).

Each tick runs every job the daemon scheduled, in this thread, when its own interval comes due.
These are the poll, alert delivery, remediation, store maintenance (every
``store.maintenance_interval``), the reliability KPIs and the CPER read: the same jobs, at the
same intervals, that ``fleetd run``'s job threads would run. /metrics is fetched every
``SCRAPE_S`` ticks, as a Prometheus would.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import urllib.request
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmark this checkout

from fleetd.clock import FakeClock
from fleetd.daemon import Daemon
from fleetd.logs import configure_logging
from fleetd.replay_wiring import DEFAULT_RECORDING, open_replay_backend, recording_config
from fleetd.sim.replay import Recording

SCRAPE_S = 5


def fetch(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        return str(response.read().decode())


class HandDriven:
    """A replay daemon on a fake clock (1 s a tick) whose jobs run in the caller's thread.

    Args:
        prefix: of the temporary state directory.
        recording: the amdsmi answers to replay (default: the shipped MI355X recording).
        rules_dir: site rules (``rules.local_dir``), beside the shipped ones.
    """

    def __init__(
        self,
        prefix: str,
        recording: Recording | Path = DEFAULT_RECORDING,
        rules_dir: Path | None = None,
    ) -> None:
        configure_logging("json", "warning", stream=sys.stderr)
        self.tmp = Path(tempfile.mkdtemp(prefix=prefix))
        backend, self.replay = open_replay_backend(self.tmp, recording)
        config = recording_config(self.tmp)
        config = config.model_copy(
            update={"rules": config.rules.model_copy(update={"local_dir": rules_dir})}
        )
        self.clock = FakeClock()
        self.daemon = Daemon(config, clock=self.clock, backend=backend, schedule_jobs=False)
        self.url = ""
        self.ticks = 0
        self.metrics_text = ""

    def start(self) -> None:
        self.daemon.start()  # its first poll included
        assert self.daemon.http is not None
        self.url = f"http://127.0.0.1:{self.daemon.http.port}/metrics"

    def run(self, ticks: int, after: Callable[[int], None] | None = None) -> None:
        """``ticks`` more ticks; ``after(n)`` after the n-th tick of the daemon's life."""
        jobs = self.daemon.scheduler
        due = [(name, max(1, round(jobs.interval(name)))) for name in jobs.names()]
        for _ in range(ticks):
            self.ticks += 1
            self.clock.advance(1.0)
            for name, every in due:
                if self.ticks % every == 0:
                    jobs.run_now(name)
            if self.ticks % SCRAPE_S == 0:
                self.metrics_text = fetch(self.url)
            if after is not None:
                after(self.ticks)

    def stop(self) -> None:
        self.daemon.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)
