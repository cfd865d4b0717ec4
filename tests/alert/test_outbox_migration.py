"""A schema-version-2 outbox (no priority lanes) upgrades in place, on SQLite and PostgreSQL:
its pending rows load as the old version wrote them and go out pages first."""

from __future__ import annotations

import json
import random

from pytest_httpserver import HTTPServer
from sqlalchemy import (
    BigInteger,
    Column,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    create_engine,
    inspect,
)

from fleetd.alert.dispatch import Dispatcher
from fleetd.alert.outbox_store import OutboxStore
from fleetd.clock import FakeClock
from fleetd.store import schema
from fleetd.store.db import Database, engine_url
from tests.alert.support import NODE, Recorder, config

INTEGRATION = "oncall/pagerduty/0"
# Two pending entries exactly as fleetd with schema version 2 stored them: a change event
# queued first, then the page (rows have no priority; payloads have no thread or event id).
V2_CHANGE = {
    "action": "change",
    "alerts": [],
    "change": {
        "at": 1767225605.0,
        "details": {},
        "id": "run-1/drain",
        "labels": {},
        "links": [],
        "summary": "node7: draining GPU 3",
    },
    "created_at": 1767225605.0,
    "external_url": None,
    "group_key": "",
    "group_labels": {},
    "integration": INTEGRATION,
    "lease_until": None,
    "node": "node7",
    "reason": "change",
    "receiver": "oncall",
    "status": "firing",
    "thread": None,
    "truncated_alerts": 0,
}
V2_PAGE = {
    "action": "notify",
    "alerts": [
        {
            "annotations": {"summary": "GPU 3: 1 new uncorrectable ECC error(s)"},
            "ends_at": None,
            "fingerprint": "00000000000000aa",
            "labels": {
                "alertname": "GpuEccUncorrectableError",
                "gpu": "3",
                "node": "node7",
                "severity": "critical",
            },
            "received_at": 1767225600.0,
            "rule": "GpuEccUncorrectableError",
            "severity": "critical",
            "starts_at": 1767225600.0,
            "status": "firing",
            "value": 1.0,
        }
    ],
    "change": None,
    "created_at": 1767225610.0,
    "external_url": None,
    "group_key": "{}:{}",
    "group_labels": {},
    "integration": INTEGRATION,
    "lease_until": None,
    "node": "node7",
    "reason": "first_notification",
    "receiver": "oncall",
    "status": "firing",
    "thread": None,
    "truncated_alerts": 0,
}


def v2_database(url: str) -> None:
    """The outbox and the schema version as fleetd 0.x with schema version 2 created them."""
    meta = MetaData()
    version = Table(
        "fleetd_schema_version",
        meta,
        Column("id", Integer, primary_key=True),
        Column("version", Integer, nullable=False),
        Column("fleetd_version", String(32), nullable=False),
    )
    outbox = Table(
        "alert_outbox",
        meta,
        Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True),
        Column("integration", String(255), nullable=False),
        Column("receiver", String(255), nullable=False),
        Column("kind", String(32), nullable=False),
        Column("action", String(16), nullable=False),
        Column("group_key", Text, nullable=False),
        Column("dedup_id", String(255), nullable=True),
        Column("payload", Text, nullable=False),
        Column("status", String(16), nullable=False),
        Column("created_at", Float, nullable=False),
        Column("due_at", Float, nullable=False),
        Column("attempts", Integer, nullable=False, default=0),
        Column("sending_since", Float, nullable=True),
        Column("last_error", Text, nullable=True),
        Column("last_status_code", Integer, nullable=True),
        Column("finished_at", Float, nullable=True),
        UniqueConstraint("integration", "dedup_id", name="uq_alert_outbox_dedup"),
        Index("ix_alert_outbox_queue", "status", "integration", "id"),
    )
    engine = create_engine(engine_url(url))
    with engine.begin() as conn:
        meta.create_all(conn)
        conn.execute(version.insert().values(id=1, version=2, fleetd_version="0.9.0"))
        for payload, dedup in ((V2_CHANGE, "run-1/drain"), (V2_PAGE, None)):
            conn.execute(
                outbox.insert().values(
                    integration=INTEGRATION,
                    receiver="oncall",
                    kind="pagerduty",
                    action=payload["action"],
                    group_key=payload["group_key"],
                    dedup_id=dedup,
                    payload=json.dumps(payload),
                    status="pending",
                    created_at=payload["created_at"],
                    due_at=payload["created_at"],
                    attempts=0,
                )
            )
    engine.dispose()


def test_version_2_outbox_upgrades_and_delivers_the_page_first(
    any_db_url: str, clock: FakeClock, httpserver: HTTPServer
) -> None:
    v2_database(any_db_url)
    db = Database.open(any_db_url)
    try:
        assert db.schema_version() == schema.SCHEMA_VERSION
        columns = {c["name"] for c in inspect(db.engine).get_columns("alert_outbox")}
        assert "priority" in columns
        (index,) = [
            i
            for i in inspect(db.engine).get_indexes("alert_outbox")
            if i["name"] == "ix_alert_outbox_queue"
        ]
        assert index["column_names"] == ["status", "integration", "priority", "id"]
        store = OutboxStore(db)
        assert [(e.action, e.priority) for e in store.entries()] == [("change", 1), ("notify", 0)]
        assert [e.action for e in store.pending(INTEGRATION, 10)] == ["notify", "change"]

        recorder = Recorder((202, '{"status":"success"}', {}))
        httpserver.expect_request("/v2/enqueue").respond_with_handler(recorder)
        httpserver.expect_request("/v2/change/enqueue").respond_with_handler(recorder)
        pd = {
            "routing_key": "R0UT1NGKEY0123456789abcdefABCDEF",
            "url": httpserver.url_for("/v2/enqueue"),
            "change_url": httpserver.url_for("/v2/change/enqueue"),
        }
        cfg = config({"receivers": [{"name": "oncall", "pagerduty": [pd]}], "inhibit_rules": []})
        clock.advance(20)  # the entries were queued at t0 + 5 and t0 + 10
        d = Dispatcher(cfg, db, node=NODE, now=clock.now(), rng=random.Random(1))
        d.tick(clock.now())
        first, second = recorder.seen
        assert first.path == "/v2/enqueue" and first.body["event_action"] == "trigger"
        assert second.path == "/v2/change/enqueue"
        assert second.body["payload"]["summary"] == "node7: draining GPU 3"
        assert {e.status for e in store.entries()} == {"delivered"}
        d.close()
    finally:
        db.dispose()
    again = Database.open(any_db_url)  # opening again: already current
    assert again.schema_version() == schema.SCHEMA_VERSION
    again.dispose()
