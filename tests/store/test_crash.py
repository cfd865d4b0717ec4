"""A writer killed (SIGKILL) mid-batch: on reopen the database is consistent and holds every
poll whose commit completed, each poll entirely or not at all."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from store_helpers import T0

from fleetd.model import Sample
from fleetd.query import Matcher
from fleetd.store.db import Database, sqlite_url
from fleetd.store.headrows import unpack_ids
from fleetd.store.samples import SampleStore

ROOT = Path(__file__).resolve().parents[2]
SERIES = 300

WRITER = textwrap.dedent(
    f"""
    import sys
    from fleetd.model import Reading, make_labels
    from fleetd.store.db import Database, sqlite_url
    from fleetd.store.samples import SampleStore

    store = SampleStore(Database.open(sqlite_url(sys.argv[1])))
    i = 0
    while True:
        # every poll brings new series, so its transaction does real work (many statements)
        poll = [
            Reading("fleetd_crash", make_labels({{"s": s, "p": i}}), float(i), {T0} + i)
            for s in range({SERIES})
        ]
        store.append(poll)
        print(i, flush=True)  # only after the commit returned
        i += 1
    """
)


@pytest.mark.parametrize("kill_after", [3, 11, 25])
def test_sigkill_mid_batch_loses_at_most_the_poll_being_written(
    tmp_path: Path, kill_after: int
) -> None:
    path = tmp_path / "fleetd.db"
    Database.open(sqlite_url(path)).dispose()  # schema first, so the child only writes polls
    child = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert child.stdout is not None
    committed = -1
    try:
        for line in child.stdout:
            committed = int(line)
            if committed >= kill_after:
                child.send_signal(signal.SIGKILL)  # the child is busy with the next poll
                break
    finally:
        child.kill()
        child.wait(timeout=30)
    assert committed == kill_after

    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    conn.close()
    # every completed poll is there, whole; at most the one in flight also made it, whole
    counts = store_counts(path)
    times = sorted(counts)
    assert times[: committed + 1] == [T0 + i for i in range(committed + 1)]
    assert len(times) in (committed + 1, committed + 2)
    assert all(n == SERIES for n in counts.values())
    db = Database.open(sqlite_url(path))
    last = SampleStore(db).range(
        "fleetd_crash",
        [Matcher("p", "=", str(committed))],
        start=T0 + committed,
        end=T0 + committed,
    )
    db.dispose()
    assert len(last) == SERIES
    assert all(samples == [Sample(T0 + committed, float(committed))] for samples in last.values())


def store_counts(path: Path) -> dict[float, int]:
    """Samples per poll time, straight from the head rows (each poll is one row)."""
    conn = sqlite3.connect(path)
    rows = conn.execute("SELECT ts, sids FROM fleetd_samples_head").fetchall()
    conn.close()
    out: dict[float, int] = {}
    for ts, sids in rows:
        out[ts / 1000.0] = out.get(ts / 1000.0, 0) + len(unpack_ids(sids))
    return out
