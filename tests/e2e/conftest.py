"""Fixtures of the end-to-end suite: the scenario runs, started side by side.

``scenario_runs`` looks at the collected tests once and starts a daemon for each scenario
they need (``ecc_run``, ``persistent_run``), so both runs (each about 1.5 minutes of real
time, set by the example's group_interval) overlap; each test then waits for its own run's
observation. Everything started is stopped at the end of the session, and a daemon is killed
if it does not stop.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.e2e.runs import OBSERVERS, Observed, ScenarioRun


@pytest.fixture(scope="session")
def scenario_runs(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, ScenarioRun]]:
    wanted = [
        name
        for name in OBSERVERS
        if any(f"{name}_run" in getattr(item, "fixturenames", ()) for item in request.session.items)
    ]
    runs: dict[str, ScenarioRun] = {}
    try:
        for name in wanted:
            runs[name] = ScenarioRun(name, tmp_path_factory.mktemp(f"e2e-{name}"))
        yield runs
    finally:
        for run in runs.values():
            run.close()


@pytest.fixture(scope="session")
def ecc_run(scenario_runs: dict[str, ScenarioRun]) -> Observed:
    """ecc_uncorrectable (fault at 5 s), watched to the end of its run and page."""
    return scenario_runs["ecc"].result()


@pytest.fixture(scope="session")
def persistent_run(scenario_runs: dict[str, ScenarioRun]) -> Observed:
    """persistent_ecc (fault at 5 s, back after every reset), watched until its page."""
    return scenario_runs["persistent"].result()
