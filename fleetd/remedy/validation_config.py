"""``remediation.validation``: the validation ladder before readmission, and the RMA ticket.

Validators are named; ``plans`` and ``fault_classes`` say which run, in order, for a run of a
plan or a fault of a class (docs/remediation.md, "Validation ladder"). Nothing is
configured by default: a unit is readmitted after verification (and the optional burn-in)
as before.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import Field, StrictBool, StrictFloat, StrictInt, model_validator

from fleetd.configbase import Duration, Span, StrictModel, documents
from fleetd.model import label_value
from fleetd.remedy.validators import INFERENCE

if TYPE_CHECKING:
    from fleetd.events.afid import AfidTable
    from fleetd.remedy.run import Trigger

_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
VALIDATOR_PLACEHOLDERS = frozenset({"node", "gpus"})
LADDER_PLANS = ("reset", "reboot", "proactive")

ValidatorName = Annotated[str, Field(pattern=r"^[A-Za-z0-9_.\-]{1,48}$")]


class ValidatorConfig(StrictModel):
    """One command validator: an AMD tool run on the unit's GPUs, its verdict parsed from its
    output."""

    name: ValidatorName
    """The validator's name, as the ladders (`plans`, `fault_classes`) refer to it."""
    kind: Literal["rvs", "transferbench", "agfhc"]
    """Which parser reads the output: `rvs` (ROCm Validation Suite `[RESULT]` lines),
    `transferbench` (the a2a summary table), `agfhc` (the result summary; AGFHC needs AMD's
    authorisation). Output the parser does not understand fails the validator."""
    command: list[str]
    """The command (argument vector, no shell); `{gpus}` (e.g. `0,1,2`) and `{node}` are
    replaced. Its exit code must be 0 and its output must pass."""
    timeout: Annotated[Duration, Span(0, "1d")] = 1800.0
    """How long it may run; at the timeout it is killed with its whole process group and fails.
    """
    min_average_gbps: StrictFloat | StrictInt | None = Field(default=None, ge=0)
    """`transferbench`: the lowest acceptable `Average bandwidth (GPU Timed)`, GB/s."""
    min_rtotal_gbps: StrictFloat | StrictInt | None = Field(default=None, ge=0)
    """`transferbench`: the lowest acceptable `RTotal` of each GPU (what it received from all the
    others), GB/s; AMD's CVS MI300X health config uses 320."""

    @model_validator(mode="after")
    @documents(
        "command must be a non-empty list: [program, arg, ...]",
        "only {gpus} and {node} are replaced in a validator's command",
        "min_average_gbps and min_rtotal_gbps are for kind transferbench; transferbench needs "
        "at least one of them",
    )
    def _check(self) -> ValidatorConfig:
        if not self.command or not self.command[0]:
            raise ValueError("command must be a non-empty list: [program, arg, ...]")
        for arg in self.command:
            for name in _PLACEHOLDER.findall(arg):
                if name not in VALIDATOR_PLACEHOLDERS:
                    raise ValueError(
                        f"only {{gpus}} and {{node}} are replaced in a validator's command, "
                        f"not {{{name}}} in {arg!r}"
                    )
        floors = self.min_average_gbps is not None or self.min_rtotal_gbps is not None
        if self.kind == "transferbench" and not floors:
            raise ValueError(
                "min_average_gbps and min_rtotal_gbps are for kind transferbench; transferbench "
                "needs at least one of them"
            )
        if self.kind != "transferbench" and floors:
            raise ValueError(
                "min_average_gbps and min_rtotal_gbps are for kind transferbench; "
                f"not for kind {self.kind}"
            )
        return self


class TicketConfig(StrictModel):
    """The RMA ticket: sent once per new physical-action decision on a GPU (by serial)."""

    enabled: StrictBool = True
    """Queue a ticket (a `rma_ticket` change event for the alerting receivers' `ticket`
    integrations) when a GPU's RMA record gets a new physical-action decision."""


class ValidationConfig(StrictModel):
    """Which validators run before a reset or rebooted unit's workers come back."""

    validators: list[ValidatorConfig] = Field(default_factory=list, max_length=64)
    """The command validators. The name `inference` is reserved: the built-in per-model inference
    probe (`vllm.benchmark`), which runs once the workers serve again and before they go back into
    rotation."""
    plans: dict[Literal["reset", "reboot", "proactive"], list[ValidatorName]] = Field(
        default_factory=dict
    )
    """The ladder of each plan: validator names in the order they run (command validators first,
    in the order given; `inference` last). `proactive` is the ladder of the rolling proactive
    validation (`remediation.proactive`)."""
    fault_classes: dict[str, list[ValidatorName]] = Field(default_factory=dict)
    """A ladder per fault class, replacing the plan's: the key is an AFID as `afid:N`, an AFID
    category of the AFID table (e.g. `HBM Errors`, `Off-Package Link Errors`) or the name of
    the rule that triggered the run; the first that matches the trigger, in that order, wins."""
    output_bytes: StrictInt = Field(default=65536, ge=1024, le=16 * 1024 * 1024)
    """How much of a failed validator's output (its end) the run, the quarantine page's evidence
    bundle and the RMA record keep; a passing validator keeps 2 KiB."""
    ticket: TicketConfig = Field(default_factory=TicketConfig)
    """The RMA ticket hook."""

    @model_validator(mode="after")
    @documents(
        "a ladder names a validator that is not defined under validators (or inference)",
        "inference is the built-in probe and cannot be defined under validators",
        "a ladder names a validator twice",
        "validator names must be unique",
    )
    def _names(self) -> ValidationConfig:
        names = [v.name for v in self.validators]
        if len(set(names)) != len(names):
            twice = sorted({n for n in names if names.count(n) > 1})
            raise ValueError(f"validator names must be unique: {', '.join(twice)}")
        if INFERENCE in names:
            raise ValueError(
                f"{INFERENCE} is the built-in probe and cannot be defined under validators"
            )
        known = set(names) | {INFERENCE}
        ladders = [(f"plans.{k}", v) for k, v in self.plans.items()]
        ladders += [(f"fault_classes[{k!r}]", v) for k, v in self.fault_classes.items()]
        for where, names in ladders:
            unknown = [n for n in names if n not in known]
            if unknown:
                raise ValueError(
                    f"{where}: a ladder names a validator that is not defined under validators "
                    f"(or inference): {', '.join(unknown)}"
                )
            if len(set(names)) != len(names):
                raise ValueError(f"{where}: a ladder names a validator twice")
        return self

    def validator(self, name: str) -> ValidatorConfig | None:
        """The command validator called ``name`` (None: not configured)."""
        return next((v for v in self.validators if v.name == name), None)


def fault_class_keys(trigger: Trigger, afids: AfidTable | None) -> list[str]:
    """The keys of ``fault_classes`` that can name this trigger, most specific first: its AFIDs
    (``afid:N``), their categories in the AFID table, the rule's name."""
    keys: list[str] = []
    afid_text = label_value(trigger.labels, "afid") or ""
    numbers = [int(n) for n in re.findall(r"\d+", afid_text)]
    keys += [f"afid:{n}" for n in numbers]
    if afids is not None:
        for n in numbers:
            entry = afids.entries.get(n)
            if entry is not None and entry.category and entry.category not in keys:
                keys.append(entry.category)
    if trigger.rule:
        keys.append(trigger.rule)
    return keys


def ladder_for(
    config: ValidationConfig, plan: str, trigger: Trigger, afids: AfidTable | None
) -> tuple[str, ...]:
    """The validators a run must pass, in the order they run: the ladder of the trigger's
    fault class when one is configured, else the plan's; none for plans that do not readmit
    (quarantine, drain) or undrain. The inference probe, when listed, runs last."""
    if plan not in LADDER_PLANS:
        return ()
    names: list[str] | None = None
    for key in fault_class_keys(trigger, afids):
        if key in config.fault_classes:
            names = config.fault_classes[key]
            break
    if names is None:
        names = config.plans.get(plan, [])  # type: ignore[call-overload]
    ordered = [n for n in names if n != INFERENCE] + [n for n in names if n == INFERENCE]
    return tuple(ordered)
