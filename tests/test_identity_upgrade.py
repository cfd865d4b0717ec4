"""A ROCm upgrade that changes every GPU's UUID (amdsmi 7.13: HIP/rocminfo's format) neither
splits the stored history nor re-pages an alert that was firing across it."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

from pytest_httpserver import HTTPServer

from fleetd.clock import FakeClock
from fleetd.collect.amdsmi_backend import AmdSmiBackend
from fleetd.collect.identities import LEDGER_FILE, IdentityLedger, stable_key
from fleetd.daemon import Daemon, SimContext
from fleetd.model import GpuIdentity, label_value
from fleetd.sim import SimulatedAmdSmi, build_node
from fleetd.store.db import Database, sqlite_url
from fleetd.store.series import decode_labels, encode_labels, relabel_series
from fleetd.store.tables import series_table
from tests.test_daemon import config, daemon_on, firing, run

# The fault pages once, under the name of whichever report of it was read first: the ECC
# counters of a poll or the kernel's RAS line (one incident, rules/events.yaml).
FAULT_PAGES = {"GpuEccUncorrectableError", "GpuKernelUncorrectableError"}


def gpu(
    index: int, uuid: str, *, serial: str | None = "692000000007", bdf: str = ""
) -> GpuIdentity:
    return GpuIdentity(index, uuid, bdf or f"0000:{index:02x}:00.0", serial=serial)


def test_the_key_is_the_serial_and_partition_or_the_bdf() -> None:
    assert stable_key(gpu(0, "u", bdf="0000:0c:00.3")) == "serial:692000000007/fn3"
    assert stable_key(gpu(0, "u", serial="N/A", bdf="0000:0c:00.0")) == "bdf:0000:0c:00.0"
    assert stable_key(gpu(0, "u", serial=None, bdf="0000:0c:00.0")) == "bdf:0000:0c:00.0"


def test_the_ledger_reports_a_changed_uuid_once(tmp_path: Path) -> None:
    ledger = IdentityLedger(tmp_path / LEDGER_FILE)
    assert ledger.reconcile([gpu(0, "old")]) == []
    [change] = ledger.reconcile([gpu(0, "new")])
    assert (change.gpu, change.old, change.new) == (0, "old", "new")
    assert ledger.reconcile([gpu(0, "new")]) == []
    (tmp_path / LEDGER_FILE).write_text("{not json")
    assert ledger.reconcile([gpu(0, "newer")]) == []  # unreadable: starts afresh


def test_relabel_renames_and_leaves_a_clash_alone(tmp_path: Path) -> None:
    db = Database.open(sqlite_url(tmp_path / "f.db"))
    t = series_table
    with db.begin() as conn:
        for metric, labels in (
            ("a", (("gpu", "0"), ("uuid", "old"))),
            ("b", (("gpu", "0"), ("uuid", "old"))),
            ("b", (("gpu", "0"), ("uuid", "new"))),
            ("c", (("gpu", "1"), ("uuid", "other"))),
        ):
            conn.execute(t.insert().values(metric=metric, labels=encode_labels(labels)))
    with db.begin() as conn:
        assert relabel_series(conn, "uuid", "old", "new") == (1, 1)
    with db.read() as conn:
        rows = {
            (m, decode_labels(lb))
            for m, lb in conn.execute(t.select().with_only_columns(t.c.metric, t.c.labels))
        }
    assert ("a", (("gpu", "0"), ("uuid", "new"))) in rows
    assert ("c", (("gpu", "1"), ("uuid", "other"))) in rows
    db.dispose()


def test_an_upgrade_that_changes_every_uuid_keeps_history_and_the_incident(
    tmp_path: Path, clock: FakeClock, httpserver: HTTPServer, webhook: list[dict[str, Any]]
) -> None:
    alerting = {
        "receivers": [{"name": "hook", "webhook": [{"url": httpserver.url_for("/hook")}]}],
        "route": {"receiver": "hook", "group_wait": "0s", "group_interval": "10s"},
    }
    cfg = config(tmp_path, alerting=alerting)
    node = build_node("MI300X", seed=1, clock=clock)
    first = daemon_on(node, clock, cfg)
    first.start()
    run(first, clock, 2)
    node.inject(3, "ecc_uncorrectable", persistent=True)
    run(first, clock, 4)
    assert firing(first) & FAULT_PAGES
    before = {str(label_value(g.labels, "uuid")) for g in first.backend.gpus()}
    first.stop()

    # ROCm upgraded to 7.13 with its own amdsmi package: the library's new UUID format
    node.library_version = (26, 4, 0, "7.13.0")
    amdsmi = SimulatedAmdSmi(node)
    amdsmi.__version__ = "7.13.0"
    second = Daemon(
        cfg,
        clock=clock,
        backend=AmdSmiBackend(amdsmi),
        sim=SimContext(node, None),
        console_stream=io.StringIO(),
        schedule_jobs=False,
    )
    second.start()
    after = {str(label_value(g.labels, "uuid")) for g in second.backend.gpus()}
    assert before.isdisjoint(after) and len(after) == 8
    run(second, clock, 6)
    assert firing(second) & FAULT_PAGES
    sent = [a for body in webhook for a in body["alerts"]]
    assert [a["status"] for a in sent].count("firing") == 1  # not paged again
    assert len({a["fingerprint"] for a in sent}) == 1  # one incident, whatever the UUID

    # one series per GPU for fleetd_gpu_up, under the new UUIDs, with the old samples in it
    assert second.store.samples is not None
    keys = second.store.samples.series("fleetd_gpu_up")
    assert {str(label_value(k.labels, "uuid")) for k in keys} == after
    ledger = json.loads((tmp_path / LEDGER_FILE).read_text())
    assert sorted(ledger.values()) == sorted(after)
    second.stop()
