"""The RMA ticket through the real dispatcher and its durable outbox to a ticket receiver on
loopback: the documented body, once; a receiver that is down is retried like any
notification; a ticket receiver never gets alerts or other change events, and other
receivers never get tickets. The RMA book's decisions: one per physical-action episode, from
an AFID that calls for it or from the ladder, closed by a run that re-admits the GPU."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from pytest_httpserver import HTTPServer

from fleetd.alert.ticket import TICKET_KIND, TICKET_VERSION
from fleetd.clock import FakeClock
from fleetd.events.afid import AfidTable
from fleetd.model import make_labels
from fleetd.remedy import machine as m
from fleetd.remedy.codec import event_to_dict
from fleetd.remedy.events import RemediationEvent
from fleetd.remedy.notify import DispatcherSink
from fleetd.remedy.rma import PhysicalAction, RmaBook, RmaRecord, ticket_record
from fleetd.store.db import Database, sqlite_url
from tests.alert.support import Harness, Recorder, config, fire

NODE = "node7"
SERIAL = "695094548560"


def alerting(ticket_url: str, hook_url: str) -> dict[str, object]:
    return {
        "receivers": [
            {"name": "ops", "webhook": [{"url": hook_url, "send_changes": True}]},
            {"name": "rma", "ticket": [{"url": ticket_url, "token": "t0ken-for-the-desk"}]},
        ],
        # alerts go to both receivers: the ticket integration must still never see one
        "route": {
            "receiver": "ops",
            "group_wait": "0s",
            "routes": [{"receiver": "rma", "continue": True}, {"receiver": "ops"}],
        },
        "inhibit_rules": [],
        "delivery": {"initial_backoff": "2s", "max_backoff": "10s"},
    }


def unit_run(**changes: object) -> m.Run:
    run, _ = m.plan_run(
        run_id="run-1",
        node=NODE,
        plan=m.Plan.RESET,
        trigger=m.Trigger("alert", 1000.0, rule="GpuUncorrectableEcc", gpu=3),
        gpus=tuple(m.UnitGpu(i, f"uuid-{i}", f"0000:0{i}:00.0", f"SER{i}") for i in range(4)),
        workers=("w3",),
        settings=m.RunSettings(),
        now=1000.0,
    )
    return replace(run, **changes)


def ticket_event(run: m.Run) -> RemediationEvent:
    rec = RmaRecord(NODE, SERIAL, 3, "uuid-3", "0000:03:00.0")
    decision = PhysicalAction(
        f"{SERIAL}:run-1",
        1100.0,
        "run-1",
        "afid",
        "AFID 18 calls for physical (Fatal XGMI link error)",
        fault_class="Off-Package Link Errors",
        afids=(18,),
        message="Fatal XGMI link error: remove the GPU tray, …",
        bundle_phase="quarantine",
        bundle_path="/var/lib/fleetd/evidence/run-1.quarantine.1.json.gz",
        bundle_sha256="ab" * 32,
        ticket=f"{TICKET_KIND}:{NODE}:{SERIAL}:run-1",
    )
    record = ticket_record(rec, decision, run.gpus[3])
    return RemediationEvent(
        event_id="run-1:17",
        node=NODE,
        kind=record.kind,
        message=record.message,
        at=1100.0,
        severity=record.severity,
        run_id="run-1",
        seq=17,
        state="quarantined",
        plan="quarantine",
        gpus=run.gpu_indices,
        trigger=run.trigger,
        details=record.details,
    )


def test_one_ticket_with_the_documented_body_retried_while_the_receiver_is_down(
    tmp_path: Path, clock: FakeClock, httpserver: HTTPServer
) -> None:
    desk, hook = Recorder(), Recorder()
    desk.script = [(503, "maintenance", {}), (503, "maintenance", {})]  # down at first
    httpserver.expect_request("/tickets").respond_with_handler(desk)
    httpserver.expect_request("/hook").respond_with_handler(hook)
    db = Database.open(sqlite_url(tmp_path / "fleetd.db"))
    try:
        harness = Harness(db, clock)
        cfg = config(alerting(httpserver.url_for("/tickets"), httpserver.url_for("/hook")))
        dispatcher = harness.dispatcher(cfg)
        sink = DispatcherSink(dispatcher)
        run = unit_run()
        event = ticket_event(run)
        t0 = clock.now()
        sink.submit_change(event, t0)
        sink.submit_change(event, t0)  # delivered again after a crash: queued once
        dispatcher.submit([fire("GpuUncorrectableEcc", at=t0, gpu=3)], t0)
        for _ in range(40):
            clock.advance(1)
            dispatcher.tick(clock.now())
        tickets = desk.bodies("/tickets")
        assert len(tickets) == 3  # two 503s, then delivered; nothing after
        assert tickets[0] == tickets[1] == tickets[2]  # every retry the same, same eventId
        body = tickets[-1]
        assert body == {
            "version": TICKET_VERSION,
            "eventId": body["eventId"],
            "ticketId": f"rma_ticket:{NODE}:{SERIAL}:run-1",
            "node": NODE,
            "serial": SERIAL,
            "gpu": 3,
            "gpuUuid": "uuid-3",
            "gpuBdf": "0000:03:00.0",
            "faultClass": "Off-Package Link Errors",
            "afids": [18],
            "source": "afid",
            "operatorMessage": "Fatal XGMI link error: remove the GPU tray, …",
            "reason": "AFID 18 calls for physical (Fatal XGMI link error)",
            "runId": "run-1",
            "decidedAt": body["decidedAt"],
            "bundle": {
                "phase": "quarantine",
                "path": "/var/lib/fleetd/evidence/run-1.quarantine.1.json.gz",
                "sha256": "ab" * 32,
                "api": "/api/v1/remediation/runs/run-1/evidence",
                "fetch": f"fleetctl evidence {NODE} run-1",
            },
        }
        assert body["eventId"]
        assert desk.seen[-1].headers["Authorization"] == "Bearer t0ken-for-the-desk"
        # the other receiver got the alert and no ticket; the desk got no alert
        kinds = [b.get("version") for b in hook.bodies("/hook")]
        assert "4" in kinds
        assert all(b.get("labels", {}).get("kind") != TICKET_KIND for b in hook.bodies("/hook"))
        # an ordinary change event goes to the webhook, never to the ticket desk
        change = replace(event, event_id="run-1:18", kind="done", details=())
        sink.submit_change(change, clock.now())
        for _ in range(3):
            clock.advance(1)
            dispatcher.tick(clock.now())
        assert len(desk.bodies("/tickets")) == 3
        assert any(b.get("version") == "fleetd-change-1" for b in hook.bodies("/hook"))
        dispatcher.close()
    finally:
        db.dispose()


# ------------------------------------------------------------------------------------ the book
def book(tmp_path: Path) -> tuple[RmaBook, Database]:
    db = Database.open(sqlite_url(tmp_path / "rma.db"))
    return RmaBook(db, NODE, afids=AfidTable.load), db


def write(db: Database, book_: RmaBook, run: m.Run, now: float) -> list[str]:
    update = book_.plan(run, now)
    with db.begin() as conn:
        update.write(conn)
    return [t.kind for t in update.tickets]


def test_an_afid_that_calls_for_physical_action_opens_one_decision_and_one_ticket(
    tmp_path: Path,
) -> None:
    rma, db = book(tmp_path)
    try:
        labels = make_labels({"afid": "18", "action": "physical"})
        trig = m.Trigger("alert", 1000.0, rule="GpuCperFatal", gpu=3, labels=labels)
        outcome = "AFID 18 calls for physical (Fatal XGMI link error…): the AFID table asks for"
        run = unit_run(
            plan=m.Plan.QUARANTINE,
            trigger=trig,
            state=m.RunState.QUARANTINED,
            outcome=outcome,
            entered_at=1010.0,
        )
        assert write(db, rma, run, 1010.0) == [TICKET_KIND]
        rec = rma.record("SER3")
        assert rec is not None and rec.physical_action_needed
        decision = rec.open_decision
        assert decision is not None and decision.source == "afid" and decision.afids == (18,)
        assert decision.fault_class == "Off-Package Link Errors"
        assert decision.message.startswith("Fatal XGMI link error")
        assert rec.faults[0].afid == "18" and rec.faults[0].fault_class == decision.fault_class
        assert write(db, rma, run, 1011.0) == []  # the same run again: nothing changes
        # another quarantine of the same GPU while the decision is open: no new ticket
        again = replace(run, run_id="run-2")
        assert write(db, rma, again, 1020.0) == []
        rec2 = rma.record("SER3")
        assert rec2 is not None and len(rec2.decisions) == 1 and len(rec2.runs) == 2
        # the GPU re-seated, reset, validated and re-admitted: the decision closes
        ok = m.ValidatorOutcome("rvs", "rvs", True, "8 result(s), all TRUE")
        done = unit_run(run_id="run-3", state=m.RunState.DONE, validation=(ok,), reset_count=1)
        assert write(db, rma, done, 2000.0) == []
        rec3 = rma.record("SER3")
        assert rec3 is not None and not rec3.physical_action_needed
        assert rec3.decisions[0].resolved_by == "run run-3 re-admitted it (rvs)"
        # a new fault needing the hardware later is a new decision and a new ticket
        later = replace(run, run_id="run-4")
        assert write(db, rma, later, 3000.0) == [TICKET_KIND]
        assert [r.serial for r in rma.records(physical_only=True)] == ["SER3"]
    finally:
        db.dispose()


def test_dry_runs_and_runs_still_under_way_change_no_record(tmp_path: Path) -> None:
    rma, db = book(tmp_path)
    try:
        assert write(db, rma, unit_run(dry_run=True, state=m.RunState.QUARANTINED), 1.0) == []
        assert write(db, rma, unit_run(state=m.RunState.VALIDATING), 1.0) == []
        assert rma.records() == []
    finally:
        db.dispose()


def test_a_gpu_without_a_serial_is_recorded_under_its_uuid(tmp_path: Path) -> None:
    rma, db = book(tmp_path)
    try:
        run = unit_run(
            gpus=tuple(m.UnitGpu(i, f"uuid-{i}") for i in range(4)), state=m.RunState.DONE
        )
        write(db, rma, run, 5.0)
        [rec] = rma.records()
        assert rec.serial == "unknown:uuid-3"
        assert event_to_dict(ticket_event(unit_run()))["details"]  # the fields travel as pairs
    finally:
        db.dispose()
