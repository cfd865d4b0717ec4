"""Regenerate ``journal_rows.json``: journal rows as fleetd's own history wrote them.

Each version's ``fleetd/remedy/machine.py`` and ``events.py`` is read from git (``git show``)
and its own ``run_to_dict`` / ``RemediationEvent.to_dict`` write the rows, exactly as the
journal stores them (``json.dumps`` with compact separators). The rows are data for
``test_journal_rows.py``; this script only documents and repeats how they were made::

    python tests/remedy/data/capture_journal_rows.py > tests/remedy/data/journal_rows.json
"""

from __future__ import annotations

import json
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
# (commit, what its runs lack compared with the newest rows)
VERSIONS = [
    (
        "fb8e52b",
        "first journal: no ue_low, ce_baseline, ce_low, reset_effect, held_gpus; "
        "events without actor and outcome",
    ),
    ("b39fdf2", "held_gpus, but no ue_low, ce_baseline, ce_low, reset_effect"),
    ("17b2068", "ue_low, but no ce_baseline, ce_low, reset_effect"),
    ("509827f", "every field (the code before the pydantic journal form)"),
]


def _module(commit: str, path: str, name: str) -> types.ModuleType:
    source = subprocess.run(
        ["git", "show", f"{commit}:{path}"], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout
    module = types.ModuleType(name)
    sys.modules[name] = module  # dataclasses look their module up while decorating
    exec(compile(source, f"{commit}:{path}", "exec"), module.__dict__)
    return module


def _load(commit: str) -> tuple[types.ModuleType, types.ModuleType]:
    machine = _module(commit, "fleetd/remedy/machine.py", f"machine_{commit}")
    saved = sys.modules.get("fleetd.remedy.machine")
    sys.modules["fleetd.remedy.machine"] = machine  # what that events.py imports
    try:
        events = _module(commit, "fleetd/remedy/events.py", f"events_{commit}")
    finally:
        if saved is None:
            sys.modules.pop("fleetd.remedy.machine", None)
        else:
            sys.modules["fleetd.remedy.machine"] = saved
    return machine, events


def _make(cls: Any, **values: Any) -> Any:
    """``cls(**values)`` with only the fields that version of ``cls`` has."""
    return cls(**{k: v for k, v in values.items() if k in cls.__dataclass_fields__})


def _runs(m: Any) -> list[tuple[str, Any]]:
    settings = _make(
        m.RunSettings,
        balancer_delay=5.0,
        idle_reads=3,
        drain_timeout=120.0,
        on_drain_timeout="abort",
        verify_polls=2,
        burn_in=True,
        escalate_to_reboot=True,
    )
    alert = _make(
        m.Trigger,
        kind="alert",
        at=1_767_225_600.25,
        rule="GpuUncorrectableEcc",
        fingerprint="9f2c1e",
        gpu=3,
        severity="critical",
        value=float("inf"),  # a PromQL ratio over zero: json writes Infinity
        labels=(("alertname", "GpuUncorrectableEcc"), ("gpu", "3"), ("hive", "0")),
    )
    verifying = _make(
        m.Run,
        run_id="r-verify",
        node="node-a",
        plan=m.Plan.RESET,
        trigger=alert,
        gpus=tuple(
            _make(m.UnitGpu, index=i, uuid=f"uuid-{i}", bdf=f"0000:{i + 5:02x}:00.0")
            for i in range(4)
        ),
        workers=(
            _make(
                m.WorkerProgress,
                name="w0",
                phase=m.WorkerPhase.STOPPED,
                idle_reads=3,
                in_flight=0.0,
                detail="running 0, waiting 0",
            ),
            _make(
                m.WorkerProgress,
                name="w1",
                phase=m.WorkerPhase.STOP_FAILED,
                idle_reads=1,
                in_flight=2.0,
                detail="systemctl stop timed out",
            ),
            _make(m.WorkerProgress, name="w2"),
        ),
        settings=settings,
        created_at=1_767_225_600.5,
        state=m.RunState.VERIFYING,
        entered_at=1_767_225_700.75,
        deadline=1_767_226_000.75,
        next_at=None,
        lease_held=True,
        resumed=1,
        reset_count=1,
        rediscovered=True,
        healthy_polls=1,
        ue_baseline=((2, 0.0), (3, 5.0)),
        ue_low=((2, 0.0), (3, 0.0)),
        ce_baseline=((3, 40.0),),
        ce_low=((3, 0.0),),
        reset_effect="zeroed",
        last_problems=("GPU 1: XGMI link 2 down",),
        evidence=("uncorrectable errors before the reset: GPU 3: 5", "café … ≥ 2 — ünicode"),
        lease_note="queued behind run r-0",
        held_gpus=(1,),
    )
    manual = _make(
        m.Trigger, kind="manual", at=1_767_230_000.0, gpu=5, who="ops@example", why="DIMM swap"
    )
    drained = _make(
        m.Run,
        run_id="r-drain",
        node="node-b",
        plan=m.Plan.DRAIN,
        trigger=manual,
        gpus=(_make(m.UnitGpu, index=5),),
        workers=(_make(m.WorkerProgress, name="w5", phase=m.WorkerPhase.STOPPED),),
        settings=m.RunSettings(),
        created_at=1_767_230_000.0,
        state=m.RunState.DRAINED,
        dry_run=True,
        entered_at=1_767_230_042.0,
        holding=True,
        outcome="drained on request",
        page_on_abort=True,
    )
    planned, _ = m.plan_run(
        run_id="r-planned",
        node="node-c",
        plan=m.Plan.QUARANTINE,
        trigger=_make(
            m.Trigger, kind="alert", at=1_767_240_000.125, rule="GpuXgmiLinkDown", gpu=0, value=1.0
        ),
        gpus=(_make(m.UnitGpu, index=0, uuid="uuid-0"),),
        workers=("w0",),
        settings=m.RunSettings(),
        now=1_767_240_000.125,
    )
    return [("verifying", verifying), ("drained", drained), ("planned", planned)]


def _events(e: Any, run: Any) -> list[tuple[str, Any]]:
    step = _make(
        e.RemediationEvent,
        event_id=f"{run.run_id}:7",
        node=run.node,
        kind="quarantined",
        message="GPUs 0-3 quarantined: verification failed",
        at=1_767_225_800.5,
        severity="critical",
        run_id=run.run_id,
        seq=7,
        state="quarantined",
        phase="quarantined",
        plan="reset",
        dry_run=False,
        gpus=(0, 1, 2, 3),
        workers=("w0", "w1"),
        trigger=run.trigger,
        evidence=("verification failed: GPU 3: 2 new uncorrectable error(s)",),
        raise_alert=True,
        alert_key="fleetd-remediation/node-a/gpus-0-1-2-3",
        actor="ops@example",
        outcome="verification failed",
    )
    node_level = _make(
        e.RemediationEvent,
        event_id="node-a:pause:1767225900",
        node="node-a",
        kind="paused",
        message="remediation paused by ops@example: maintenance",
        at=1_767_225_900.0,
    )
    return [("run step", step), ("node level", node_level)]


def main() -> None:
    runs, events = [], []
    for commit, lacks in VERSIONS:
        machine, ev = _load(commit)
        samples = _runs(machine)
        for what, run in samples:
            row = json.dumps(machine.run_to_dict(run), separators=(",", ":"))
            runs.append({"written_by": commit, "what": what, "lacks": lacks, "row": row})
        for what, event in _events(ev, samples[0][1]):
            row = json.dumps(event.to_dict(), separators=(",", ":"))
            events.append({"written_by": commit, "what": what, "lacks": lacks, "row": row})
    # No commit wrote a run without outcome and page_on_abort (the first journal had both);
    # the oldest row less those two stands for a row older still.
    oldest = json.loads(runs[0]["row"])
    for key in ("outcome", "page_on_abort"):
        del oldest[key]
    runs.append(
        {
            "written_by": "synthetic",
            "what": "the first journal's verifying row less outcome and page_on_abort",
            "lacks": "every field added after ue_baseline",
            "row": json.dumps(oldest, separators=(",", ":")),
        }
    )
    doc = {"about": __doc__.strip().splitlines()[0], "runs": runs, "events": events}
    json.dump(doc, sys.stdout, indent=1, ensure_ascii=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
