"""The plain-data form of a run and of its events: what the journal stores and the API shows.

pydantic reads the frozen dataclasses' own annotations, so the form follows the types with
nothing written out by hand: enums by value, tuples as lists, nested dataclasses as objects
with every field in declaration order (the JSON the journal has always held). Loading is
lenient where the journal's history needs it: a field a row predates takes its default
(``ue_low``, ``held_gpus``, … were added over time) and a key no field knows is ignored.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import TypeAdapter

from fleetd.remedy.events import RemediationEvent
from fleetd.remedy.run import Run, Trigger

_RUN = TypeAdapter(Run)
_EVENT = TypeAdapter(RemediationEvent)
_TRIGGER = TypeAdapter(Trigger)

Data = dict[str, Any]


def run_to_dict(run: Run) -> Data:
    """JSON-able data for the journal (``json.dumps`` keeps an infinite value as-is)."""
    data: Data = _RUN.dump_python(run, mode="json")
    return data


def run_from_dict(data: Mapping[str, Any]) -> Run:
    """The inverse of ``run_to_dict``, for rows of every fleetd version."""
    return _RUN.validate_python(data)


def event_to_dict(event: RemediationEvent) -> Data:
    """JSON-able form of a step's event for the journal, the event log and webhooks."""
    data: Data = _EVENT.dump_python(event, mode="json")
    return data


def event_from_dict(data: Mapping[str, Any]) -> RemediationEvent:
    return _EVENT.validate_python(data)


def trigger_to_dict(trigger: Trigger, *, leave_out: frozenset[str] = frozenset()) -> Data:
    """The trigger as the run's own form has it, less the fields in ``leave_out``."""
    data: Data = _TRIGGER.dump_python(trigger, mode="json", exclude=set(leave_out))
    return data
