"""What the RAS counters say about the reset: did it zero them, and which errors are new."""

from __future__ import annotations

from typing import Literal

from fleetd.remedy.run import Run


def lowest_counts(
    low: tuple[tuple[int, float], ...], counts: tuple[tuple[int, float], ...]
) -> tuple[tuple[int, float], ...]:
    """The lowest count seen per GPU since the reset."""
    merged = dict(low)
    for gpu, count in counts:
        merged[gpu] = min(count, merged.get(gpu, count))
    return tuple(sorted(merged.items()))


ResetEffect = Literal["zeroed", "kept", "unknown"]
EFFECT_TEXT = {
    "zeroed": "zeroed (a counter of the unit fell below its pre-reset value: the reset happened)",
    "kept": "kept (non-zero correctable counts did not drop: the driver keeps them across a reset)",
}


def reset_effect(run: Run) -> ResetEffect:
    """What the reset did to the RAS counters, read off the whole unit.

    Whether amdgpu zeroes them on a reset is not documented, so fleetd looks: any counter
    of the unit seen below its pre-reset value means this reset zeroed them (``zeroed``); a
    non-zero correctable count that never dropped means they were kept (``kept``: a healthy
    GPU's correctable count does not climb back to the same number in seconds). With every
    counter at zero but the faulty one, nothing tells (``unknown``).
    """
    for base, low in ((run.ue_baseline, run.ue_low), (run.ce_baseline, run.ce_low)):
        lowest = dict(low)
        if any(gpu in lowest and lowest[gpu] < count for gpu, count in base):
            return "zeroed"
    seen = dict(run.ce_low)
    if any(count > 0 and gpu in seen for gpu, count in run.ce_baseline):
        return "kept"
    return "unknown"


def new_errors(run: Run, counts: tuple[tuple[int, float], ...]) -> list[str]:
    """Uncorrectable errors the reset did not clear or that came after it, per GPU.

    Zeroed counters: every count since the reset is new. Kept counters: only the excess over
    the pre-reset baseline. Unknown: the excess, and errors counted before the reset that
    are still counted — the reset gave no sign it cleared them, so they cannot pass (a fault
    that came straight back looks exactly like this). A GPU without a baseline (its
    pre-reset read failed) is compared with the lowest count seen since the reset — unless the
    unit's counters were zeroed: then every count since is new on it too (the lowest would
    already hold an error counted before the first verification poll).
    """
    effect = reset_effect(run)
    before = dict(run.ue_baseline)
    lowest = dict(run.ue_low)
    found = []
    for gpu, count in counts:
        base = before.get(gpu)
        if effect == "zeroed":
            new = count
        elif base is None:
            new = count - lowest.get(gpu, count)
        else:
            new = count - base
        if new > 0:
            found.append(f"GPU {gpu}: {new:g} new uncorrectable error(s) since the reset")
        elif effect == "unknown" and base is not None and count > 0:
            found.append(
                f"GPU {gpu}: {count:g} uncorrectable error(s) still counted after the reset, "
                "which gave no sign it cleared them"
            )
    return found
