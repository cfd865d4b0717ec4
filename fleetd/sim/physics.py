"""Closed-form helpers for the node's physics: exponential relaxation and hashed noise.

Between two moments when an input changes (load set, fault injected or cleared), every
modelled quantity either relaxes exponentially toward a constant target (power, temperatures)
or grows at a constant rate (counters). Both have exact closed forms, so advancing the model
by one second or by a day costs the same and gives the same answer.
"""

from __future__ import annotations

import math

_MASK64 = (1 << 64) - 1


def relax(value: float, target: float, tau: float, dt: float) -> float:
    """Where a first-order system starting at ``value`` is after ``dt`` seconds."""
    return target + (value - target) * math.exp(-dt / tau)


def relax_integral(value: float, target: float, tau: float, dt: float) -> float:
    """∫ of the relaxing quantity over ``dt`` seconds (e.g. joules from watts)."""
    return target * dt + (value - target) * tau * (1.0 - math.exp(-dt / tau))


def time_above(value: float, target: float, tau: float, dt: float, threshold: float) -> float:
    """Seconds of ``dt`` a quantity relaxing from ``value`` spends at/above ``threshold``."""
    if value >= threshold and target >= threshold:
        return dt
    if value < threshold and target <= threshold:
        return 0.0
    if value < threshold:  # rising through the threshold
        cross = tau * math.log((target - value) / (target - threshold))
        return max(0.0, dt - cross)
    cross = tau * math.log((value - target) / (threshold - target))  # falling through it
    return min(dt, cross)


def crossing_time(value: float, target: float, tau: float, threshold: float) -> float | None:
    """Seconds until a quantity rising from below reaches ``threshold`` (None if never)."""
    if value >= threshold or target <= threshold:
        return None
    return tau * math.log((target - value) / (target - threshold))


def _splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def noise(seed: int, gpu: int, channel: int, t: float) -> float:
    """A deterministic value in [-1, 1) for (seed, gpu, channel, whole second of t)."""
    x = _splitmix64((seed & _MASK64) ^ (gpu << 48) ^ (channel << 40))
    x = _splitmix64(x ^ (math.floor(t) & _MASK64))
    return (x / 2.0**63) - 1.0
