"""The reliability series /metrics shows at every scrape: built once per kept report, and
a run concluded since (saved by the remediation's own journal, a second object over the
same database) is in the next scrape's."""

from __future__ import annotations

from dataclasses import replace

from fleetd.remedy import machine as m
from fleetd.remedy.journal import RunJournal
from fleetd.remedy.reliability import ReliabilityReporter
from fleetd.store.db import Database

from .machine_world import NOW, new_run

DAY = 86400.0


def _runs(reporter: ReliabilityReporter, now: float) -> dict[str, float | None]:
    return {
        dict(r.labels)["result"]: r.value
        for r in reporter.readings(now)
        if r.metric == "fleetd_kpi_remediation_runs"
    }


def test_a_run_concluded_since_the_last_scrape_is_in_the_next(sqlite_db: Database) -> None:
    db = sqlite_db
    remediation = RunJournal(db)
    reporter = ReliabilityReporter(
        node="node-a",
        journal=RunJournal(db),
        history=lambda since, now: [],
        identities=lambda: [],
        rules=lambda: [],
        window_s=DAY,
        probation_s=0.0,
    )
    reporter.refresh(NOW)
    assert _runs(reporter, NOW + 1) == {"succeeded": 0.0, "failed": 0.0}
    first = reporter.readings(NOW + 2)
    assert first == reporter.readings(NOW + 3)  # the same report: the same series
    run, _ = new_run()
    remediation.save(replace(run, state=m.RunState.QUARANTINED, entered_at=NOW + 5))
    assert _runs(reporter, NOW + 10) == {"succeeded": 0.0, "failed": 1.0}
