"""The RMA record: one per physical GPU (by board serial) — its faults, the runs that touched
it and how they ended, its validators' verdicts, and whether a person must act on the
hardware (docs/remediation.md, "RMA record and ticket").

A GPU needs physical action when a run on it is quarantined because the fault's AFID calls
for it (AMD's Service Action Guide: re-seat, re-torque, RMA) or because a validator of the
ladder failed. Each *new* decision — none open on that serial — queues exactly one ticket
(a ``rma_ticket`` event, journaled with the run in the same transaction, so delivered at
least once through the alerting outbox and de-duplicated there by its id). A later run on
the same serial that passes the ladder and re-admits it closes the decision; a replaced GPU
has a new serial and a new record.

The records are written in the journal's transaction that concludes the run
(``RunJournal.save(also=…)``); a daemon killed between the two finds the run concluded
without its record on the next start, and ``catch_up`` applies it then.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from pydantic import TypeAdapter
from sqlalchemy import Boolean, Column, Connection, Float, Index, String, Table, Text, select

from fleetd.alert.ticket import TICKET_KIND
from fleetd.events.afid import AfidTable
from fleetd.model import GpuIdentity, label_value
from fleetd.remedy.messages import Record
from fleetd.remedy.run import Plan, Run, RunState, UnitGpu
from fleetd.store.db import Database
from fleetd.store.rows import compact_json, json_row, json_rows
from fleetd.store.schema import METADATA
from fleetd.store.upsert import upsert

MAX_ENTRIES = 100  # per list of a record: the newest are kept
OUTPUT_IN_RECORD = 4096  # of a failed validator's output (the bundle holds more)

rma_table = Table(
    "remedy_rma",
    METADATA,
    Column("node", String(255), primary_key=True),
    Column("serial", String(128), primary_key=True),
    Column("physical_action", Boolean, nullable=False),
    Column("updated_at", Float, nullable=False),
    Column("data", Text, nullable=False),
    Index("ix_remedy_rma_node_updated", "node", "updated_at"),
)


@dataclass(frozen=True, slots=True)
class RmaFault:
    """A fault that opened a run on this GPU."""

    at: float
    run_id: str
    gpu: int
    rule: str = ""
    afid: str = ""
    action: str = ""
    fault_class: str = ""
    message: str = ""


@dataclass(frozen=True, slots=True)
class RmaRun:
    """A run that touched this GPU and how it ended."""

    run_id: str
    plan: str
    state: str
    outcome: str
    created_at: float
    ended_at: float
    resets: int = 0
    trigger: str = ""


@dataclass(frozen=True, slots=True)
class RmaValidation:
    """One validator's verdict in a run on this GPU's unit."""

    run_id: str
    name: str
    kind: str
    ok: bool
    summary: str
    at: float
    target: str = ""
    output: str = ""


@dataclass(frozen=True, slots=True)
class PhysicalAction:
    """A decision that a person must act on the hardware; open until a later run re-admits
    the GPU after passing the ladder."""

    decision_id: str
    decided_at: float
    run_id: str
    source: str  # afid | ladder
    reason: str
    fault_class: str = ""
    afids: tuple[int, ...] = ()
    message: str = ""
    bundle_phase: str = ""
    bundle_path: str = ""
    bundle_sha256: str = ""
    ticket: str = ""  # the ticket event's id ("" when tickets are off)
    resolved_at: float | None = None
    resolved_by: str = ""


@dataclass(frozen=True, slots=True)
class RmaRecord:
    node: str
    serial: str
    gpu: int
    uuid: str = ""
    bdf: str = ""
    first_seen: float = 0.0
    updated_at: float = 0.0
    faults: tuple[RmaFault, ...] = ()
    runs: tuple[RmaRun, ...] = ()
    validations: tuple[RmaValidation, ...] = ()
    decisions: tuple[PhysicalAction, ...] = ()

    @property
    def open_decision(self) -> PhysicalAction | None:
        for decision in reversed(self.decisions):
            if decision.resolved_at is None:
                return decision
        return None

    @property
    def physical_action_needed(self) -> bool:
        return self.open_decision is not None

    def has_run(self, run_id: str) -> bool:
        return any(r.run_id == run_id for r in self.runs)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = _RECORD.dump_python(self, mode="json")
        data["physical_action_needed"] = self.physical_action_needed
        open_ = self.open_decision
        data["open_decision"] = None if open_ is None else _DECISION.dump_python(open_, mode="json")
        return data


_RECORD = TypeAdapter(RmaRecord)
_DECISION = TypeAdapter(PhysicalAction)


def record_from_dict(data: Mapping[str, Any]) -> RmaRecord:
    known = {k: v for k, v in data.items() if k not in ("physical_action_needed", "open_decision")}
    return _RECORD.validate_python(known)


@dataclass(frozen=True, slots=True)
class RmaUpdate:
    """What a concluded run changes: the records to write and the tickets to queue."""

    records: tuple[RmaRecord, ...] = ()
    tickets: tuple[Record, ...] = ()

    def write(self, conn: Connection) -> None:
        for rec in self.records:
            upsert(
                conn,
                rma_table,
                {"node": rec.node, "serial": rec.serial},
                {
                    "physical_action": rec.physical_action_needed,
                    "updated_at": rec.updated_at,
                    "data": compact_json(rec.to_dict()),
                },
            )


_AFID_IN_TEXT = re.compile(r"\bAFID (\d+)")


class RmaBook:
    """This node's RMA records; the executor feeds it every concluded real run."""

    def __init__(
        self,
        db: Database,
        node: str,
        *,
        identities: Callable[[], Sequence[GpuIdentity]] | None = None,
        afids: Callable[[], AfidTable | None] | None = None,
        tickets: bool = True,
    ) -> None:
        self._db = db
        self.node = node
        self._identities = identities
        self._afids = afids
        self.tickets = tickets

    # ---- reads ---------------------------------------------------------------------------
    def records(self, *, physical_only: bool = False, limit: int = 500) -> list[RmaRecord]:
        query = select(rma_table.c.data).where(rma_table.c.node == self.node)
        if physical_only:
            query = query.where(rma_table.c.physical_action.is_(True))
        query = query.order_by(rma_table.c.updated_at.desc(), rma_table.c.serial).limit(limit)
        return json_rows(self._db, query, record_from_dict)

    def record(self, serial: str) -> RmaRecord | None:
        query = select(rma_table.c.data).where(
            rma_table.c.node == self.node, rma_table.c.serial == serial
        )
        return json_row(self._db, query, record_from_dict)

    # ---- what a run changes --------------------------------------------------------------
    def applied(self, run: Run) -> bool:
        """Whether ``run`` is already in the records of its GPUs."""
        serials = [self.serial_of(g) for g in self._gpus(run)]
        found = [self.record(s) for s in serials]
        return bool(found) and all(r is not None and r.has_run(run.run_id) for r in found)

    def plan(self, run: Run, now: float) -> RmaUpdate:
        """The records ``run`` changes (idempotent: a run already recorded changes nothing)."""
        if run.dry_run or not run.terminal:
            return RmaUpdate()
        records: list[RmaRecord] = []
        tickets: list[Record] = []
        for gpu in self._gpus(run):
            serial = self.serial_of(gpu)
            rec = self.record(serial) or RmaRecord(
                self.node, serial, gpu.index, gpu.uuid or "", gpu.bdf or "", first_seen=now
            )
            if rec.has_run(run.run_id):
                continue
            rec, ticket = self._apply(rec, run, gpu, now)
            records.append(rec)
            if ticket is not None:
                tickets.append(ticket)
        return RmaUpdate(tuple(records), tuple(tickets))

    def _apply(
        self, rec: RmaRecord, run: Run, gpu: UnitGpu, now: float
    ) -> tuple[RmaRecord, Record | None]:
        trig = run.trigger
        afid = label_value(trig.labels, "afid") or ""
        entry = self._afid_entry(afid)
        faults = rec.faults
        if trig.kind == "alert":
            faults = (
                *faults,
                RmaFault(
                    at=trig.at,
                    run_id=run.run_id,
                    gpu=gpu.index,
                    rule=trig.rule or "",
                    afid=afid,
                    action=label_value(trig.labels, "action") or "",
                    fault_class=entry[0] if entry else "",
                    message=entry[1] if entry else "",
                ),
            )
        runs = (
            *rec.runs,
            RmaRun(
                run.run_id,
                run.plan.value,
                run.state.value,
                run.outcome or "",
                run.created_at,
                run.entered_at,
                run.reset_count,
                trig.describe(),
            ),
        )
        validations = (
            *rec.validations,
            *(
                RmaValidation(
                    run.run_id,
                    o.name,
                    o.kind,
                    o.ok,
                    o.summary,
                    o.started_at,
                    o.target,
                    "" if o.ok else o.output[-OUTPUT_IN_RECORD:],
                )
                for o in run.validation
            ),
        )
        rec = replace(
            rec,
            gpu=gpu.index,
            uuid=gpu.uuid or rec.uuid,
            bdf=gpu.bdf or rec.bdf,
            updated_at=now,
            faults=faults[-MAX_ENTRIES:],
            runs=runs[-MAX_ENTRIES:],
            validations=validations[-MAX_ENTRIES:],
        )
        decisions = list(rec.decisions)
        ticket: Record | None = None
        open_ = rec.open_decision
        wanted = self._physical(run, afid, entry)
        if wanted is not None and open_ is None:
            decision = replace(wanted, decision_id=f"{rec.serial}:{run.run_id}")
            if self.tickets:
                decision = replace(
                    decision, ticket=f"{TICKET_KIND}:{self.node}:{decision.decision_id}"
                )
                ticket = ticket_record(rec, decision, gpu)
            decisions.append(decision)
        elif (
            open_ is not None
            and run.state is RunState.DONE
            and run.plan in (Plan.RESET, Plan.REBOOT)
        ):
            passed = ", ".join(o.name for o in run.validation if o.ok) or "verification"
            closed = replace(
                open_, resolved_at=now, resolved_by=f"run {run.run_id} re-admitted it ({passed})"
            )
            decisions = [closed if d.decision_id == open_.decision_id else d for d in decisions]
        return replace(rec, decisions=tuple(decisions[-MAX_ENTRIES:])), ticket

    def _physical(
        self, run: Run, afid: str, entry: tuple[str, str] | None
    ) -> PhysicalAction | None:
        """The decision ``run`` calls for, if any (its id is set by the caller)."""
        if run.state is not RunState.QUARANTINED:
            return None
        bundle = run.bundles[-1] if run.bundles else None
        phase, path, digest = (bundle.phase, bundle.path, bundle.sha256) if bundle else ("", "", "")
        outcome = run.outcome or ""
        afids = sorted({int(a) for a in re.findall(r"\d+", afid)} | _afids_in(outcome))
        label_action = label_value(run.trigger.labels, "action") or ""
        if label_action == "physical" or "calls for physical" in outcome:
            fault_class = entry[0] if entry else ""
            message = entry[1] if entry else ""
            if not message and afids:
                found = self._afid_entry(str(afids[0]))
                fault_class, message = found if found else ("", "")
            return PhysicalAction(
                "",
                run.entered_at,
                run.run_id,
                "afid",
                outcome or "the fault's AFID calls for physical action",
                fault_class=fault_class,
                afids=tuple(afids),
                message=message or "The AFID table calls for physical action: see AMD's SAG.",
                bundle_phase=phase,
                bundle_path=path,
                bundle_sha256=digest,
            )
        failed = [o for o in run.validation if not o.ok]
        if failed:
            first = failed[0]
            message = (
                f"Validator {first.name} ({first.kind}) failed after remediation: "
                f"{first.summary}. The GPU was reset and verified but does not pass; inspect "
                "the evidence bundle (the validator's output is in it), then re-seat or RMA "
                "per AMD's Service Action Guide."
            )
            return PhysicalAction(
                "",
                run.entered_at,
                run.run_id,
                "ladder",
                outcome,
                fault_class=(entry[0] if entry else "") or f"validation:{first.name}",
                afids=tuple(afids),
                message=message,
                bundle_phase=phase,
                bundle_path=path,
                bundle_sha256=digest,
            )
        return None

    # ---- helpers ---------------------------------------------------------------------------
    def _gpus(self, run: Run) -> list[UnitGpu]:
        if run.trigger.gpu is not None:
            found = [g for g in run.gpus if g.index == run.trigger.gpu]
            if found:
                return found
        return [g for g in run.gpus if g.index not in run.held_gpus]

    def serial_of(self, gpu: UnitGpu) -> str:
        if gpu.serial:
            return gpu.serial
        if self._identities is not None:
            try:
                known = list(self._identities())
            except Exception:
                known = []
            for ident in known:
                if gpu.uuid and ident.uuid == gpu.uuid and ident.serial:
                    return ident.serial
            for ident in known:
                if ident.index == gpu.index and ident.serial and not gpu.uuid:
                    return ident.serial
        return f"unknown:{gpu.uuid or f'gpu{gpu.index}'}"

    def _afid_entry(self, afid: str) -> tuple[str, str] | None:
        """(category, operator message) of ``afid`` in the AFID table in force."""
        first = re.findall(r"\d+", afid)
        if not first or self._afids is None:
            return None
        table = self._afids()
        if table is None:
            return None
        entry = table.entries.get(int(first[0]))
        return None if entry is None else (entry.category, entry.message)


def _afids_in(text: str) -> set[int]:
    return {int(a) for a in _AFID_IN_TEXT.findall(text)}


def ticket_record(rec: RmaRecord, decision: PhysicalAction, gpu: UnitGpu) -> Record:
    """The ticket's event: its fields are the documented body (``ticket_body``)."""
    details = {
        "ticket_id": decision.ticket,
        "serial": rec.serial,
        "gpu": str(gpu.index),
        "gpu_uuid": gpu.uuid or rec.uuid,
        "gpu_bdf": gpu.bdf or rec.bdf,
        "fault_class": decision.fault_class,
        "afids": ",".join(str(a) for a in decision.afids),
        "operator_message": decision.message,
        "reason": decision.reason,
        "source": decision.source,
        "decided_at": repr(decision.decided_at),
        "bundle_phase": decision.bundle_phase,
        "bundle_path": decision.bundle_path,
        "bundle_sha256": decision.bundle_sha256,
    }
    return Record(
        TICKET_KIND,
        f"physical action needed on GPU {gpu.index} (serial {rec.serial}): {decision.reason}",
        severity="warning",
        details=tuple(details.items()),
    )
