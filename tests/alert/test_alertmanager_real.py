"""fleetd's alerts in a REAL Alertmanager (the Debian package's binary), through its API v2."""

from __future__ import annotations

import io
import random
import time
from collections.abc import Iterator

import pytest
import requests

from fleetd.alert.dispatch import Dispatcher
from fleetd.store.db import Database
from tests.alert.support import NODE, config, fire, resolve
from tests.e2e.standins import alertmanager as am

pytestmark = pytest.mark.skipif(not am.available(), reason=am.SKIP_REASON)


@pytest.fixture(scope="module")
def alertmanagers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    """Two Alertmanagers on free loopback ports, clustering off, started in parallel (the
    e2e suite's ``RealAlertmanager``: it starts again on another port if its port was taken)."""
    peers = [am.RealAlertmanager(tmp_path_factory.mktemp(f"am{i}")) for i in range(2)]
    try:
        for peer in peers:
            peer.wait_ready()
        yield [peer.url for peer in peers]
    finally:
        for peer in peers:
            peer.close()


def am_alerts(url: str) -> list[dict[str, object]]:
    response = requests.get(f"{url}/api/v2/alerts", params={"filter": f'node="{NODE}"'}, timeout=5)
    response.raise_for_status()
    alerts: list[dict[str, object]] = response.json()
    return alerts


def test_alerts_appear_and_resolve_in_every_alertmanager(
    alertmanagers: list[str], sqlite_db: Database
) -> None:
    cfg = config(
        {
            "receivers": [{"name": "am", "alertmanager": [{"url": url} for url in alertmanagers]}],
            "route": {"receiver": "am"},
            "inhibit_rules": [],
        }
    )
    # Alertmanager compares endsAt with its own clock, so this test runs on real time.
    now = time.time()
    d = Dispatcher(cfg, sqlite_db, node=NODE, now=now, rng=random.Random(1), stream=io.StringIO())
    d.submit(
        [
            fire("GpuHot", at=now, gpu=3, annotations={"summary": "hotspot 105 °C"}),
            fire("EccUncorrectable", at=now, gpu=5),
        ],
        now,
    )
    report = d.tick(now)
    assert report.delivered == 2 and report.failed == 0
    for url in alertmanagers:
        found = {a["labels"]["alertname"]: a for a in am_alerts(url)}  # type: ignore[index]
        assert set(found) == {"GpuHot", "EccUncorrectable"}
        hot = found["GpuHot"]
        assert hot["labels"] == {
            "alertname": "GpuHot",
            "gpu": "3",
            "node": NODE,
            "severity": "critical",
        }
        assert hot["annotations"] == {"summary": "hotspot 105 °C"}
        assert hot["status"]["state"] == "active"  # type: ignore[index]

    later = time.time()
    d.submit([resolve("GpuHot", at=later, fired_at=now, gpu=3)], later)
    assert d.tick(later).delivered == 2
    for url in alertmanagers:
        names = [a["labels"]["alertname"] for a in am_alerts(url)]  # type: ignore[index]
        assert names == ["EccUncorrectable"]  # GpuHot resolved in Alertmanager itself
    d.close()
