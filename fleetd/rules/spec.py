"""What a rule file may say (strict pydantic models) and the compiled ``Rule`` the engine runs.

A rule is either a *condition* (``expr`` alone, PromQL style: every series in the result
is an alert) or a *value with a threshold* (``expr`` + ``op`` + ``threshold``), which adds
per-product thresholds and a separate ``clear`` level (hysteresis) that PromQL cannot say.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from fleetd.configbase import Duration, StrictModel
from fleetd.model import Labels, Severity
from fleetd.rules.ast import Node
from fleetd.rules.templates import Template

PRODUCTS = ("MI300X", "MI325X", "MI350X", "MI355X")
"""Products a threshold can be given for; ``default`` covers the rest (and unknown models)."""

RESERVED_LABELS = frozenset({"alertname", "severity", "node"})
_LABEL_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
CompareOp = Literal[">", ">=", "<", "<=", "==", "!="]
RuleMode = Literal["shadow", "alert", "remediate"]
RULE_MODES: tuple[RuleMode, ...] = ("shadow", "alert", "remediate")


class RemediationModel(StrictModel):
    """Whether the alert may trigger automatic remediation, and with which plan."""

    plan: str = Field(pattern=r"^[a-z][a-z0-9_-]*$")


class RuleModel(StrictModel):
    """One rule as written in YAML."""

    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", max_length=128)
    rationale: str | None = Field(default=None, min_length=1)
    expr: str = Field(min_length=1)
    op: CompareOp | None = None
    threshold_by: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    """Key per-series thresholds by this label's value (e.g. ``model``, the served model name)
    instead of by GPU product; ``default`` covers every other value."""
    threshold: float | dict[str, float] | None = None
    clear: float | dict[str, float] | None = None
    for_: Duration = Field(default=0.0, alias="for")
    keep_firing_for: Duration = 0.0
    severity: Severity
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    runbook: str | None = Field(default=None, min_length=1)
    remediation: RemediationModel | None = None
    mode: RuleMode | None = None
    """The rule's trust stage: ``shadow`` (fires internally, logged and counted; no
    notification, no remediation), ``alert`` (notifies, never remediates) or ``remediate``
    (notifies, and its ``remediation`` plan may run). Default: ``remediate`` when the rule has a
    ``remediation`` plan, else ``alert`` (what every rule did before modes existed)."""
    health: bool = True

    @field_validator("labels", "annotations")
    @classmethod
    def _names(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            if not _LABEL_NAME.match(name):
                raise ValueError(f"{name!r} is not a valid name (letters, digits, _)")
        return value

    @field_validator("labels")
    @classmethod
    def _not_reserved(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            if name in RESERVED_LABELS:
                raise ValueError(f"label {name!r} is set by fleetd and cannot be given here")
        return value

    @field_validator("mode")
    @classmethod
    def _mode_needs_plan(cls, value: RuleMode | None, info: ValidationInfo) -> RuleMode | None:
        if value == "remediate" and info.data.get("remediation") is None:
            raise ValueError("mode remediate needs a remediation plan (remediation: {plan: …})")
        return value

    @field_validator("threshold", "clear")
    @classmethod
    def _per_key(cls, value: Any, info: ValidationInfo) -> Any:
        if not isinstance(value, dict):
            return value
        label = info.data.get("threshold_by")
        if label is None:
            unknown = sorted(set(value) - {*PRODUCTS, "default"})
            if unknown:
                raise ValueError(
                    f"unknown product {unknown[0]!r}: use {', '.join(PRODUCTS)} or default"
                )
            if "default" not in value:
                raise ValueError("a per-product threshold needs a 'default' for other GPUs")
        elif "default" not in value:
            raise ValueError(f"a threshold by {label} needs a 'default' for other values")
        return value

    @model_validator(mode="after")
    def _by_label_needs_levels(self) -> RuleModel:
        if self.threshold_by is not None and not isinstance(self.threshold, dict):
            raise ValueError("threshold_by needs a threshold per value: {VALUE: n, default: n}")
        return self

    @model_validator(mode="after")
    def _consistent(self) -> RuleModel:
        if (self.op is None) != (self.threshold is None):
            raise ValueError("give op and threshold together (or neither, for a condition expr)")
        if self.clear is not None:
            if self.threshold is None or self.op is None:
                raise ValueError("clear needs op and threshold")
            if self.op in ("==", "!="):
                raise ValueError("clear only works with <, <=, > or >=")
            _check_clear_side(self.op, self.threshold, self.clear)
        return self


def _check_clear_side(
    op: str, threshold: float | dict[str, float], clear: float | dict[str, float]
) -> None:
    fire = Threshold.of(threshold)
    stop = Threshold.of(clear)
    keys = {*PRODUCTS, *(k for k, _ in fire.per_model), *(k for k, _ in stop.per_model)}
    for model in (*sorted(keys), None):
        hi, lo = fire.for_model(model), stop.for_model(model)
        wrong = lo > hi if op in (">", ">=") else lo < hi
        if wrong:
            side = "at or below" if op in (">", ">=") else "at or above"
            raise ValueError(f"clear ({lo:g}) must be {side} the threshold ({hi:g}) for hysteresis")


class RuleFileModel(StrictModel):
    """A rule file: rules, and (in the local directory) names of shipped rules to switch off."""

    rules: list[Any] = Field(default_factory=list)
    disable: list[str] = Field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Threshold:
    """A number, or one per product with a default."""

    default: float
    per_model: tuple[tuple[str, float], ...] = ()

    @classmethod
    def of(cls, value: float | dict[str, float]) -> Threshold:
        if isinstance(value, dict):
            rest = tuple(sorted((k, float(v)) for k, v in value.items() if k != "default"))
            return cls(float(value["default"]), rest)
        return cls(float(value))

    def for_model(self, model: str | None) -> float:
        for name, value in self.per_model:
            if name == model:
                return value
        return self.default

    def to_yaml(self) -> float | dict[str, float]:
        if not self.per_model:
            return self.default
        return {**dict(self.per_model), "default": self.default}


@dataclass(frozen=True, slots=True)
class Rule:
    """A loaded, validated rule with its expression parsed and its templates compiled."""

    name: str
    expr: Node
    expr_text: str
    severity: Severity
    op: str | None = None
    threshold: Threshold | None = None
    clear: Threshold | None = None
    threshold_by: str | None = None  # None: thresholds per GPU product
    for_s: float = 0.0
    keep_firing_for_s: float = 0.0
    labels: Labels = ()
    annotations: tuple[tuple[str, Template], ...] = ()
    runbook: str | None = None
    remediation_plan: str | None = None
    health: bool = True
    rationale: str | None = None
    mode: RuleMode = "alert"  # shadow | alert | remediate (the loader fills the default)
    source: str = ""  # file:line where the rule is defined

    @property
    def remediates(self) -> bool:
        """Whether its alerts may start remediation (mode ``remediate`` with a plan)."""
        return self.mode == "remediate" and self.remediation_plan is not None

    @property
    def identity(self) -> tuple[str, Labels]:
        """What must stay the same for alert state to survive a reload (as in Prometheus)."""
        return (self.name, self.labels)
