"""AFID → action: what a CPER record's AMD Field IDs call for (none, reset, reboot, physical).

The table ships as ``fleetd/data/afid_actions.yaml`` (every entry names its public source;
AMD's Service Action Guide itself is not public). An operator's file in the same format
extends or overrides it per AFID; both are validated by fleetd's strict loader, so a mistake
reads ``file:line:col: key: message``. ``action_for(afids)`` takes the most severe action
among a record's AFIDs; AFIDs the table lacks take the configured default and are listed
in ``AfidDecision.unknown`` so they can be reported.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from fleetd.configbase import StrictModel, load_file

ActionKind = Literal["none", "reset", "reboot", "physical"]
ORDER: dict[str, int] = {"none": 0, "reset": 1, "reboot": 2, "physical": 3}
"""How severe each action is: a record takes its most severe AFID's action."""
MAX_AFID = 2**64 - 1


class AfidEntry(StrictModel):
    name: str = Field(min_length=1, max_length=200)
    category: str = Field(default="", max_length=200)
    severity: str = Field(default="", max_length=100)
    action: ActionKind
    message: str = Field(default="", max_length=2000)
    confidence: Literal["documented", "inferred"] = "documented"
    sources: list[str] = Field(default_factory=list, max_length=20)

    @model_validator(mode="after")
    def _physical_says_what(self) -> AfidEntry:
        if self.action == "physical" and not self.message.strip():
            raise ValueError("a physical action needs a message telling the operator what to do")
        return self


class AfidDefault(StrictModel):
    action: ActionKind = "reset"
    message: str = Field(default="", max_length=2000)


class AfidFile(StrictModel):
    version: Literal[1] = 1
    default: AfidDefault | None = None
    afids: dict[int, AfidEntry] = Field(default_factory=dict)

    @field_validator("afids")
    @classmethod
    def _afid_range(cls, value: dict[int, AfidEntry]) -> dict[int, AfidEntry]:
        bad = [k for k in value if not 0 < k <= MAX_AFID]
        if bad:
            raise ValueError(f"AFIDs are 1..2^64-1, not {bad[0]}")
        return value


@dataclass(frozen=True, slots=True)
class AfidDecision:
    """The action for one record: its kind, the operator-facing message, the AFIDs that
    called for it, the AFIDs the table does not know, and where the rule comes from."""

    action: ActionKind
    message: str
    afids: tuple[int, ...]
    unknown: tuple[int, ...]
    decided_by: int | None  # the AFID whose entry won; None: the default
    sources: tuple[str, ...] = ()

    @property
    def resets(self) -> bool:
        return self.action == "reset"

    @property
    def needs_human(self) -> bool:
        return self.action == "physical"


class AfidTable:
    """The shipped table merged with an operator's file (their entries win)."""

    def __init__(self, entries: dict[int, AfidEntry], default: AfidDefault) -> None:
        self.entries = entries
        self.default = default

    @classmethod
    def load(cls, override: str | Path | None = None) -> AfidTable:
        """The shipped table, extended/overridden by ``override`` (ConfigError on mistakes)."""
        shipped = resources.files("fleetd").joinpath("data/afid_actions.yaml")
        with resources.as_file(shipped) as path:
            base = load_file(AfidFile, path, top="a mapping with version, default and afids")
        entries = dict(base.afids)
        default = base.default or AfidDefault()
        if override is not None:
            extra = load_file(AfidFile, override, top="a mapping with version, default and afids")
            entries.update(extra.afids)
            default = extra.default or default
        return cls(entries, default)

    def action_for(self, afids: Iterable[int]) -> AfidDecision:
        """The most severe action among ``afids`` (unknown ones count as the default)."""
        ids = tuple(dict.fromkeys(int(a) for a in afids))
        unknown = tuple(a for a in ids if a not in self.entries)
        Candidate = tuple[int, ActionKind, str, int | None, tuple[str, ...]]
        best: Candidate | None = None
        for afid in ids:
            entry = self.entries.get(afid)
            candidate: Candidate
            if entry is None:
                d = self.default
                candidate = (ORDER[d.action], d.action, d.message, None, ())
            else:
                sources = tuple(entry.sources)
                candidate = (ORDER[entry.action], entry.action, entry.message, afid, sources)
            if best is None or candidate[0] > best[0]:
                best = candidate
        if best is None:  # no AFID at all (decoder missing or failed): the default
            return AfidDecision(self.default.action, self.default.message, ids, (), None)
        _rank, action, message, by, sources = best
        return AfidDecision(action, message, ids, unknown, by, sources)
