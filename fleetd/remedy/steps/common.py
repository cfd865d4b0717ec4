"""What every phase's handlers share: moving a run into a state, updating its workers and
evidence, and wording the GPUs and names in a message."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from fleetd.remedy.messages import Command, Event, Record, Resumed, WorkerResult
from fleetd.remedy.run import Run, RunState, WorkerPhase

Step = tuple[Run, list[Command]]
"""What a step returns: the new run and what to do next."""

Handler = Callable[[Run, Event, float], Step]
"""One state's answer to an event."""


def enter(
    run: Run,
    state: RunState,
    now: float,
    *,
    deadline: float | None = None,
    next_at: float | None = None,
    **changes: Any,
) -> Run:
    return replace(run, state=state, entered_at=now, deadline=deadline, next_at=next_at, **changes)


def set_worker(run: Run, name: str, **changes: Any) -> Run:
    return replace(
        run,
        workers=tuple(replace(w, **changes) if w.name == name else w for w in run.workers),
    )


def workers_in(run: Run, *phases: WorkerPhase) -> list[str]:
    return [w.name for w in run.workers if w.phase in phases]


def awaited(run: Run, worker: str, *phases: WorkerPhase) -> bool:
    """Whether ``worker`` is one of the run's and in one of ``phases`` (an answer for a
    worker that has moved on, or was never the run's, is ignored)."""
    w = run.worker(worker)
    return w is not None and w.phase in phases


def all_in(run: Run, *phases: WorkerPhase) -> bool:
    return all(w.phase in phases for w in run.workers)


def reissued(
    run: Run, event: Event, command: Callable[[str], Command], *phases: WorkerPhase
) -> Step:
    """After a restart (``Resumed``) each worker still in ``phases`` gets its command again:
    its answer may have been lost with the old process. Any other event changes nothing."""
    if isinstance(event, Resumed):
        return run, [command(n) for n in workers_in(run, *phases)]
    return run, []


def add_evidence(run: Run, *lines: str) -> Run:
    return replace(run, evidence=(*run.evidence, *lines)[-50:])


def worker_outcome(
    run: Run,
    result: WorkerResult,
    *,
    done: tuple[WorkerPhase, str, str],
    failed: tuple[WorkerPhase, str, str],
    evidence: str | None = None,
    **done_fields: Any,
) -> tuple[Run, list[Command]]:
    """One worker's command came back (``result``): move the worker to the done or failed
    phase and record it.

    ``done`` and ``failed`` are (phase, record kind, record text); a failure is a warning
    and, with ``evidence``, also a line of the run's evidence.
    """
    if result.error is not None:
        phase, kind, text = failed
        run = set_worker(run, result.worker, phase=phase, detail=result.error)
        if evidence is not None:
            run = add_evidence(run, evidence)
        return run, [Record(kind, text, severity="warning")]
    phase, kind, text = done
    return set_worker(run, result.worker, phase=phase, **done_fields), [Record(kind, text)]


def name_list(names: list[str] | tuple[str, ...]) -> str:
    return ", ".join(names) or "none"


def gpu_list(run: Run) -> str:
    return gpu_ranges(run.gpu_indices)


def gpu_ranges(gpus: Sequence[int]) -> str:
    """``0-7`` for a whole hive, ``0-2, 5`` otherwise: readable in a message."""
    out: list[str] = []
    ordered = sorted(set(gpus))
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        out.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ", ".join(out)


def plural(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def after(cmds: list[Command], step: Step) -> Step:
    """``step`` with ``cmds``, what led to it, said first."""
    run, more = step
    return run, [*cmds, *more]
