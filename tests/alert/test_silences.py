"""Silences and acknowledgements: stored (SQLite and PostgreSQL), applied on a fake clock."""

from __future__ import annotations

import pytest

from fleetd.alert.matchers import parse_matcher
from fleetd.alert.silence_store import SilenceStore
from fleetd.clock import FakeClock
from fleetd.store.db import Database
from tests.alert.support import Harness, config, fire, resolve

CONSOLE = {
    "receivers": [{"name": "ops", "console": [{}]}],
    "route": {
        "receiver": "ops",
        "group_by": ["alertname", "gpu"],
        "group_wait": "0s",
        "group_interval": "1m",
        "repeat_interval": "10m",
    },
    "inhibit_rules": [],
}


class TestStore:
    def test_create_list_expire(self, any_db_url: str, clock: FakeClock) -> None:
        db = Database.open(any_db_url)
        store = SilenceStore(db)
        t0 = clock.now()
        later = store.create(
            (parse_matcher('gpu="3"'),),
            starts_at=t0 + 600,
            ends_at=t0 + 3600,
            created_by="alice",
            comment="swap scheduled",
            now=t0,
        )
        now_on = store.create(
            (parse_matcher('alertname=~"Gpu.*"'), parse_matcher('severity!="info"')),
            starts_at=t0,
            ends_at=t0 + 1200,
            created_by="bob",
            comment="maintenance",
            now=t0,
        )
        assert later.state(t0) == "pending" and now_on.state(t0) == "active"
        assert {s.id for s in store.all(t0, "active")} == {now_on.id}
        assert {s.id for s in store.all(t0 + 700, "active")} == {now_on.id, later.id}
        assert store.get(now_on.id) == now_on

        expired = store.expire(later.id, t0 + 60)  # a pending silence ends before it began
        assert expired.state(t0 + 60) == "expired"
        assert expired.ends_at == t0 + 60
        assert [s.id for s in store.all(t0 + 60, "expired")] == [later.id]
        view = store.get(now_on.id).to_dict(t0)  # type: ignore[union-attr]
        assert view["matchers"] == ['alertname=~"Gpu.*"', 'severity!="info"']
        assert view["createdBy"] == "bob" and view["status"] == {"state": "active"}
        with pytest.raises(KeyError):
            store.expire("no-such-id", t0)
        db.dispose()

    @pytest.mark.parametrize(
        ("matchers", "starts", "ends", "author", "message"),
        [
            ((), 0, 60, "a", "at least one matcher"),
            (('gpu=~".*"',), 0, 60, "a", "empty label set"),
            (('gpu="1"',), 60, 30, "a", "end after it starts"),
            (('gpu="1"',), -120, -60, "a", "end in the future"),
            (('gpu="1"',), 0, 60, " ", "author"),
        ],
    )
    def test_rejects_silences_that_make_no_sense(
        self,
        sqlite_db: Database,
        matchers: tuple[str, ...],
        starts: float,
        ends: float,
        author: str,
        message: str,
    ) -> None:
        with pytest.raises(ValueError, match=message):
            SilenceStore(sqlite_db).create(
                tuple(parse_matcher(m) for m in matchers),
                starts_at=1000 + starts,
                ends_at=1000 + ends,
                created_by=author,
                comment="",
                now=1000,
            )


class TestMuting:
    def test_silenced_alert_is_not_notified_until_the_silence_ends(self, harness: Harness) -> None:
        d = harness.dispatcher(config(CONSOLE))
        t0 = harness.clock.now()
        silence = d.create_silence(
            ['gpu="3"'], starts_at=t0, ends_at=t0 + 300, created_by="alice", comment="", now=t0
        )
        d.submit([fire("GpuHot", at=t0, gpu=3), fire("GpuHot", at=t0, gpu=4)], t0)
        d.tick(t0)
        (line,) = harness.lines()
        assert "gpu=4" in line
        views = {a.alert.label("gpu"): a for a in d.alerts(t0)}
        assert views["3"].silenced_by == (silence.id,)
        assert views["4"].silenced_by == ()
        for step in range(1, 300, 10):
            d.tick(t0 + step)
        assert len(harness.lines()) == 1
        d.tick(t0 + 400)  # the silence has ended: the next flush notifies
        assert "gpu=3" in harness.lines()[1]

    def test_expiring_a_silence_unmutes_at_the_next_flush(self, harness: Harness) -> None:
        d = harness.dispatcher(config(CONSOLE))
        t0 = harness.clock.now()
        silence = d.create_silence(
            ['alertname="GpuHot"'],
            starts_at=t0,
            ends_at=t0 + 86400,
            created_by="a",
            comment="",
            now=t0,
        )
        d.submit([fire("GpuHot", at=t0)], t0)
        d.tick(t0)
        assert harness.lines() == []
        d.expire_silence(silence.id, t0 + 30)
        d.tick(t0 + 60)
        assert len(harness.lines()) == 1

    def test_pending_silence_does_not_mute(self, harness: Harness) -> None:
        d = harness.dispatcher(config(CONSOLE))
        t0 = harness.clock.now()
        d.create_silence(
            ['gpu="3"'], starts_at=t0 + 60, ends_at=t0 + 600, created_by="a", comment="", now=t0
        )
        d.submit([fire("GpuHot", at=t0)], t0)
        d.tick(t0)
        assert len(harness.lines()) == 1

    def test_silences_survive_a_restart(self, harness: Harness) -> None:
        d = harness.dispatcher(config(CONSOLE))
        t0 = harness.clock.now()
        d.create_silence(
            ['gpu="3"'], starts_at=t0, ends_at=t0 + 600, created_by="a", comment="", now=t0
        )
        d2 = harness.dispatcher(config(CONSOLE))
        d2.submit([fire("GpuHot", at=t0)], t0)
        d2.tick(t0)
        assert harness.lines() == []
        assert len(d2.list_silences(t0, "active")) == 1

    def test_bad_matcher_text_is_a_value_error(self, harness: Harness) -> None:
        d = harness.dispatcher(config(CONSOLE))
        t0 = harness.clock.now()
        with pytest.raises(ValueError, match="invalid matcher"):
            d.create_silence(
                ["gpu 3"], starts_at=t0, ends_at=t0 + 60, created_by="a", comment="", now=t0
            )


class TestAcknowledgement:
    def test_acknowledged_alert_is_not_repeated_but_resolves(self, harness: Harness) -> None:
        d = harness.dispatcher(config(CONSOLE))
        t0 = harness.clock.now()
        d.submit([fire("GpuHot", at=t0, gpu=1), fire("GpuHot", at=t0, gpu=2)], t0)
        d.tick(t0)
        by_gpu = {a.alert.label("gpu"): a.alert.fingerprint for a in d.alerts(t0)}
        ack = d.acknowledge(by_gpu["1"], author="alice", comment="replacing", now=t0 + 5)
        assert ack.author == "alice"
        for step in range(5, 1300, 10):
            d.tick(t0 + step)
        repeated = [line for line in harness.lines()[2:] if "FIRING" in line]
        assert repeated and all("gpu=2" in line for line in repeated)  # gpu1 is not repeated
        d.submit([resolve("GpuHot", at=t0 + 1300, fired_at=t0, gpu=1)], t0 + 1300)
        d.tick(t0 + 1400)  # the group's next flush
        assert "RESOLVED" in harness.lines()[-1] and "gpu=1" in harness.lines()[-1]
        assert d.acknowledgements() == []  # forgotten with the episode

    def test_only_firing_alerts_can_be_acknowledged(self, harness: Harness) -> None:
        d = harness.dispatcher(config(CONSOLE))
        with pytest.raises(KeyError):
            d.acknowledge("ffffffffffffffff", author="a", comment="", now=harness.clock.now())
