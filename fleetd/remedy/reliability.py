"""The node's reliability report: reads the journal, the alert history and the rules, and
hands them to ``fleetd.remedy.kpi`` (pure) for one window.

``report(now)`` reads afresh (the API, ``fleetctl report``); ``refresh(now)`` does too and
keeps it (the daemon's ``kpi`` job, every ``REFRESH_S``); ``readings(now)`` and
``summary(now)`` (``/metrics`` after each poll, the registry heartbeat) reuse the kept report
and read afresh only when the journal's concluded runs changed (a run just ended: one small
count query per call), so a poll never reads a week of history on its own schedule.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from fleetd.model import GpuIdentity, Reading
from fleetd.remedy.journal import RunJournal
from fleetd.remedy.kpi import (
    SHADOW_ALERT_KIND,
    HistoryEntry,
    Report,
    RuleMode,
    build_report,
    report_readings,
)
from fleetd.remedy.run import Run

MAX_RUNS = 5000
"""Runs read per report (newest first): a node with more in its window reports on these."""
MAX_HISTORY = 50_000
"""Alert-history entries read per report (newest first)."""
REFRESH_S = 30.0
"""How often the daemon's ``kpi`` job computes the report the metrics and heartbeat show."""


class ReliabilityReporter:
    """One node's KPIs and rule precision over ``window_s`` (``remediation.kpi_window``).

    Args:
        history: ``(since, now) -> entries`` of the event log's ``alert`` and ``shadow_alert``
            kinds (``ResilientStore.query_events``).
        identities: the node's GPUs (serial, hive) now.
        rules: each loaded rule's trust stage.
    """

    def __init__(
        self,
        *,
        node: str,
        journal: RunJournal,
        history: Callable[[float, float], Sequence[HistoryEntry]],
        identities: Callable[[], Sequence[GpuIdentity]],
        rules: Callable[[], Sequence[RuleMode]],
        window_s: float,
        probation_s: float,
    ) -> None:
        self.node = node
        self.window_s = window_s
        self.probation_s = probation_s
        self._journal = journal
        self._history = history
        self._identities = identities
        self._rules = rules
        self._lock = threading.Lock()
        self._last: Report | None = None
        self._last_key: object = None
        self._shown: tuple[Report, list[Reading]] | None = None  # what ``readings`` gave last

    def configure(self, *, window_s: float, probation_s: float) -> None:
        """A reload's window and probation (the next report uses them)."""
        with self._lock:
            self.window_s, self.probation_s = window_s, probation_s
            self._last = None

    def report(self, now: float, *, window_s: float | None = None) -> Report:
        """The figures of ``[now - window, now]``, read afresh (``window_s``: another window
        than the configured one, for this report only)."""
        window = self.window_s if window_s is None else window_s
        since = now - window
        runs = self._runs(since - self.probation_s)
        events = self._journal.events_of(r.run_id for r in runs)
        history = self._history(since, now)
        report = build_report(
            node=self.node,
            runs=runs,
            events=events,
            history=history,
            identities=self._identities(),
            rules=self._rules(),
            now=now,
            window_s=window,
            probation_s=self.probation_s,
        )
        if window_s is None:
            with self._lock:
                self._last, self._last_key = report, self._key()
        return report

    def _runs(self, since: float) -> list[Run]:
        seen: dict[str, Run] = {}
        batches = (
            self._journal.runs(self.node, since=since, limit=MAX_RUNS),
            self._journal.holding(self.node),
            self._journal.active(self.node),
        )
        for batch in batches:
            for run in batch:
                seen.setdefault(run.run_id, run)
        return list(seen.values())

    def _key(self) -> object:
        counts, resets = self._journal.counts(self.node)
        return (tuple(sorted(counts.items())), resets)

    def refresh(self, now: float) -> None:
        """Compute and keep the report (the daemon's ``kpi`` job)."""
        self.report(now)

    def cached(self, now: float) -> Report:
        """The kept report while no run concluded since it was computed; else a fresh one."""
        with self._lock:
            last, key = self._last, self._last_key
        if last is not None and key == self._key():
            return last
        return self.report(now)

    def readings(self, now: float) -> list[Reading]:
        """The report's series; the same report's are built once (every /metrics scrape
        asks, and the kept report changes every ``REFRESH_S`` at most): their values are the
        report's, only their timestamp, which /metrics does not show, is of the first ask."""
        report = self.cached(now)
        shown = self._shown
        if shown is not None and shown[0] is report:
            return list(shown[1])
        readings = report_readings(report, now)
        self._shown = (report, readings)
        return list(readings)

    def summary(self, now: float) -> dict[str, Any]:
        """The figures without the per-run list (what the registry heartbeat publishes)."""
        return self.cached(now).summary(compact=True)


def history_reader(
    query: Callable[..., Sequence[HistoryEntry]], node: str
) -> Callable[[float, float], Sequence[HistoryEntry]]:
    """``(since, now) -> entries`` over ``ResilientStore.query_events``."""

    def read(since: float, now: float) -> Sequence[HistoryEntry]:
        return query(
            node=node,
            kinds=("alert", SHADOW_ALERT_KIND),
            since=since,
            until=now,
            limit=MAX_HISTORY,
            newest_first=True,
        )

    return read
