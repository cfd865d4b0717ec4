"""The robust statistics both gray-failure comparisons use (node and fleet)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

MAD_SCALE = 1.4826
"""Scales the median absolute deviation to read as a standard deviation (normal data)."""


def robust_z(value: float, peers: Sequence[float], mad_floor: float) -> tuple[float, float]:
    """(median of ``peers``, robust z of ``value`` against them); the MAD is floored at
    ``mad_floor`` of the median so near-identical peers do not inflate a small wobble."""
    med = statistics.median(peers)
    mad = statistics.median(abs(p - med) for p in peers) * MAD_SCALE
    spread = max(mad, mad_floor * abs(med), 1e-12)
    return med, (value - med) / spread
