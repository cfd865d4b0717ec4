"""The validation ladder in the pure machine and its configuration: validators run in order
after verification and before the workers start; the first failure quarantines with its
output in the evidence; a restart runs the validator under way again, never skips it; the
inference probe is the last rung; which ladder a run gets, by fault class then plan."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import pytest
from pydantic import ValidationError

from fleetd.events.afid import AfidTable
from fleetd.model import make_labels
from fleetd.remedy import machine as m
from fleetd.remedy.config import RemediationConfig
from fleetd.remedy.validation_config import ValidationConfig, ladder_for

from .machine_world import NOW, World, drive, kinds, new_run


@dataclass
class LadderWorld(World):
    """The world, with validators that answer from ``verdicts`` (name → ok, summary)."""

    verdicts: dict[str, tuple[bool, str]] = field(default_factory=dict)
    ran: list[str] = field(default_factory=list)

    def answer(self, cmd: m.Command, run: m.Run, now: float) -> m.Event | None:
        if isinstance(cmd, m.RunValidator):
            self.ran.append(cmd.name)
            ok, summary = self.verdicts.get(cmd.name, (True, "fine"))
            output = "[RESULT] [ 1.0] [a] gst 1 pass: " + ("TRUE" if ok else "FALSE")
            return m.ValidatorResult(
                cmd.name, cmd.attempt, ok, summary, "rvs", 0, False, 2.5, output
            )
        return super().answer(cmd, run, now)


def test_validators_run_in_order_after_verification_and_before_the_workers_start() -> None:
    world = LadderWorld()
    run, cmds, _ = drive(world, new_run(validators=("rvs", "tb")), NOW)
    assert run.state is m.RunState.DONE, run.outcome
    assert world.ran == ["rvs", "tb"]
    order = [type(c) for c in cmds]
    first_validator = order.index(m.RunValidator)
    assert first_validator > max(i for i, t in enumerate(order) if t is m.PollHealth)
    assert first_validator < order.index(m.StartUnit)
    assert [o.name for o in run.validation] == ["rvs", "tb"]
    assert all(o.ok and o.duration == 2.5 for o in run.validation)
    assert kinds(cmds).count("validator_passed") == 2 and run.validated_at is not None


def test_the_first_failing_validator_quarantines_with_its_output_and_stops_the_ladder() -> None:
    world = LadderWorld(verdicts={"rvs": (False, "1 failed result(s): gst met: FALSE")})
    run, cmds, _ = drive(world, new_run(validators=("rvs", "tb")), NOW)
    assert run.state is m.RunState.QUARANTINED and run.holding
    assert world.ran == ["rvs"]  # tb never ran
    assert run.outcome == "validator rvs failed: 1 failed result(s): gst met: FALSE"
    assert not any(isinstance(c, m.StartUnit) for c in cmds)
    page = next(c for c in cmds if isinstance(c, m.Record) and c.kind == "quarantined")
    assert page.raise_alert and any("pass: FALSE" in line for line in page.evidence)
    [outcome] = run.validation
    assert not outcome.ok and "pass: FALSE" in outcome.output


def test_without_a_ladder_nothing_changes() -> None:
    world = LadderWorld()
    run, cmds, _ = drive(world, new_run(), NOW)
    assert run.state is m.RunState.DONE and world.ran == [] and run.validation == ()
    assert not any(isinstance(c, m.RunValidator) for c in cmds)


def _validating(**settings: object) -> m.Run:
    base, _ = new_run(validators=("rvs", "tb"), **settings)
    return replace(
        base,
        state=m.RunState.VALIDATING,
        validating="rvs",
        validate_attempt=1,
        reset_count=1,
        lease_held=True,
    )


def test_a_restart_during_a_validator_runs_it_again_never_skips_it() -> None:
    run = _validating()
    run2, cmds = m.step(run, m.Resumed(), NOW + 50)
    assert run2.validating == "rvs" and run2.validate_attempt == 2
    assert m.RunValidator("rvs", 2) in cmds and "validator_resumed" in kinds(cmds)
    # the answer of the attempt cut short is ignored; attempt 2's counts
    run3, cmds3 = m.step(run2, m.ValidatorResult("rvs", 1, True, "late"), NOW + 51)
    assert run3 == run2 and cmds3 == []
    run4, cmds4 = m.step(run2, m.ValidatorResult("rvs", 2, True, "fine"), NOW + 60)
    assert run4.validating == "tb" and m.RunValidator("tb", 1) in cmds4
    assert [o.attempt for o in run4.validation] == [2]


def test_a_validator_cut_short_by_restarts_twice_fails_closed() -> None:
    run, _ = m.step(_validating(), m.Resumed(), NOW + 10)
    run, _cmds = m.step(run, m.Resumed(), NOW + 20)
    assert run.state is m.RunState.QUARANTINED
    assert "interrupted by a restart 2 times" in (run.outcome or "")
    assert not run.validation[-1].ok


def test_resumed_between_two_validators_carries_on_with_the_next() -> None:
    ok = m.ValidatorOutcome("rvs", "rvs", True, "fine")
    run = replace(_validating(), validating="", validate_attempt=0, validation=(ok,))
    run2, cmds = m.step(run, m.Resumed(), NOW + 5)
    assert run2.validating == "tb" and m.RunValidator("tb", 1) in cmds


def test_the_inference_rung_records_each_workers_probe() -> None:
    world = LadderWorld(
        benchmark={"w0": ("tokens/s 101 (baseline 100)", False), "w1": ("tokens/s 99", False)}
    )
    run, _cmds, _ = drive(world, new_run(validators=("rvs", "inference")), NOW)
    assert run.state is m.RunState.DONE, run.outcome
    assert world.ran == ["rvs"]  # inference is not a command
    probes = [o for o in run.validation if o.name == "inference"]
    assert sorted(o.target for o in probes) == ["w0", "w1"] and all(o.ok for o in probes)


def test_a_required_inference_probe_that_cannot_run_fails_closed() -> None:
    world = LadderWorld(benchmark={"w0": ("benchmark skipped: no baseline for w0 (m)", False)})
    run, _cmds, _ = drive(world, new_run(validators=("inference",)), NOW)
    assert run.state is m.RunState.QUARANTINED
    assert "inference validator could not run" in (run.outcome or "")
    assert any(o.name == "inference" and not o.ok for o in run.validation)


def test_dry_run_answers_validators_without_running_them() -> None:
    from fleetd.remedy.executor import _WAYS

    way = _WAYS[m.RunValidator]
    answer = way.pretend(new_run()[0], m.RunValidator("rvs", 1))
    assert isinstance(answer, m.ValidatorResult) and answer.ok and "dry-run" in answer.summary
    assert way.acts  # journaled before it runs


# ------------------------------------------------------------------------------------ config
LADDERS = {
    "validators": [
        {"name": "rvs", "kind": "rvs", "command": ["rvs", "-c", "gst.conf"], "timeout": "20m"},
        {"name": "rvs_mem", "kind": "rvs", "command": ["rvs", "-c", "mem.conf", "-i", "{gpus}"]},
        {
            "name": "tb",
            "kind": "transferbench",
            "command": ["TransferBench", "a2a"],
            "min_rtotal_gbps": 320,
        },
    ],
    "plans": {"reset": ["inference", "rvs", "tb"], "reboot": ["rvs"]},
    "fault_classes": {"HBM Errors": ["rvs_mem"], "GpuXgmiLinkDown": ["tb", "inference"]},
}


def trigger(rule: str = "GpuUncorrectableEcc", afid: str | None = None) -> m.Trigger:
    labels = {"afid": afid} if afid is not None else {}
    return m.Trigger("alert", NOW, rule=rule, gpu=3, labels=make_labels(labels))


def test_ladder_by_plan_with_the_inference_probe_last() -> None:
    cfg = ValidationConfig.model_validate(LADDERS)
    assert ladder_for(cfg, "reset", trigger(), None) == ("rvs", "tb", "inference")
    assert ladder_for(cfg, "reboot", trigger(), None) == ("rvs",)
    assert ladder_for(cfg, "quarantine", trigger(), None) == ()
    assert ladder_for(cfg, "undrain", trigger(), None) == ()


def test_ladder_by_fault_class_afid_category_then_rule() -> None:
    cfg = ValidationConfig.model_validate(LADDERS)
    table = AfidTable.load()
    hbm = next(n for n, e in table.entries.items() if e.category == "HBM Errors")
    assert ladder_for(cfg, "reset", trigger(afid=str(hbm)), table) == ("rvs_mem",)
    assert ladder_for(cfg, "reset", trigger(rule="GpuXgmiLinkDown"), table) == (
        "tb",
        "inference",
    )
    by_afid = ValidationConfig.model_validate({**LADDERS, "fault_classes": {f"afid:{hbm}": ["tb"]}})
    assert ladder_for(by_afid, "reset", trigger(afid=str(hbm)), table) == ("tb",)


def test_empty_by_default() -> None:
    assert RemediationConfig().validation.plans == {}
    assert ladder_for(RemediationConfig().validation, "reset", trigger(), None) == ()


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"plans": {"reset": ["nope"]}}, "not defined under validators"),
        (
            {"validators": [{"name": "inference", "kind": "rvs", "command": ["x"]}]},
            "built-in probe",
        ),
        (
            {"validators": [{"name": "a", "kind": "rvs", "command": ["x"]}] * 2},
            "validator names must be unique: a",
        ),
        ({**LADDERS, "plans": {"reset": ["rvs", "rvs"]}}, "names a validator twice"),
        (
            {"validators": [{"name": "tb", "kind": "transferbench", "command": ["TransferBench"]}]},
            "needs at least one of them",
        ),
        (
            {
                "validators": [
                    {"name": "r", "kind": "rvs", "command": ["rvs"], "min_average_gbps": 3}
                ]
            },
            "not for kind rvs",
        ),
        (
            {"validators": [{"name": "r", "kind": "rvs", "command": ["rvs", "{worker}"]}]},
            "{worker}",
        ),
        ({"validators": [{"name": "r", "kind": "dcgm", "command": ["x"]}]}, "kind"),
        ({"plans": {"quarantine": []}}, "plans"),
    ],
)
def test_bad_ladders_are_refused(section: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message.replace("{", r"\{").replace("}", r"\}")):
        ValidationConfig.model_validate(section)
