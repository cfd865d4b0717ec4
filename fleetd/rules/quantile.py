"""``histogram_quantile(q, buckets)`` with Prometheus' semantics, over classic histograms.

The input is a vector of cumulative bucket series that differ in their ``le`` label (normally
``rate(x_bucket[5m])``); series sharing every other label form one histogram, and the answer
carries those labels (``le`` dropped). As Prometheus does (promql/quantile.go,
``bucketQuantile``):

* q < 0 gives -Inf, q > 1 gives +Inf, q NaN gives NaN;
* a series without a parsable ``le`` is ignored; buckets with the same bound are added up;
* the highest bucket must be ``+Inf``, at least two buckets are needed, and the total must be
  above 0 — otherwise NaN;
* counts that go down as ``le`` grows (rates of buckets scraped at different moments) are
  made monotonic by carrying the largest count so far forward;
* the answer is linearly interpolated inside the bucket where the rank falls, the lowest
  bucket starting at 0 (unless its bound is <= 0, which is then the answer); a rank in the
  +Inf bucket gives the highest finite bound.

NaN results are kept in the vector, as in Prometheus: a comparison such as ``> 2`` drops them.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Mapping

from fleetd.model import Labels

LE = "le"
_SPLIT_CACHE_LIMIT = 200_000  # label sets remembered; far above a node's bucket series
_split_cache: dict[Labels, tuple[Labels, float] | None] = {}


def _split(labels: Labels) -> tuple[Labels, float] | None:
    """(labels without ``le``, its bound), or None without a parsable ``le``; the same bucket
    series come back every evaluation, so the answer is remembered."""
    found = _split_cache.get(labels, False)
    if found is not False:
        return found  # type: ignore[return-value]
    bound_text = next((v for k, v in labels if k == LE), None)
    result: tuple[Labels, float] | None = None
    if bound_text is not None:
        try:
            result = (tuple(p for p in labels if p[0] != LE), float(bound_text))
        except ValueError:
            result = None
    if len(_split_cache) >= _SPLIT_CACHE_LIMIT:
        _split_cache.clear()
    _split_cache[labels] = result
    return result


def histogram_quantile(q: float, vector: Mapping[Labels, float]) -> dict[Labels, float]:
    """The q-quantile of each histogram in ``vector`` (labels without ``le``)."""
    groups: dict[Labels, dict[float, float]] = {}
    for labels, value in vector.items():
        split = _split(labels)
        if split is None:
            continue
        key, bound = split
        buckets = groups.get(key)
        if buckets is None:
            groups[key] = {bound: value}
        else:
            buckets[bound] = buckets.get(bound, 0.0) + value
    return {key: bucket_quantile(q, sorted(b.items())) for key, b in groups.items()}


def bucket_quantile(q: float, buckets: list[tuple[float, float]]) -> float:
    """The q-quantile of one histogram given as (upper bound, cumulative count), ascending."""
    if math.isnan(q):
        return math.nan
    if q < 0:
        return -math.inf
    if q > 1:
        return math.inf
    if len(buckets) < 2 or buckets[-1][0] != math.inf:
        return math.nan
    raw = [c for _, c in buckets]
    if not raw[-1] > 0:  # zero observations, or a NaN count
        return math.nan
    counts = list(itertools.accumulate(raw, max))  # monotonic: the largest count so far
    total = counts[-1]
    if math.isnan(total):
        return math.nan
    rank = q * total
    b = bisect.bisect_left(counts, rank)
    if b == len(buckets) - 1:
        return buckets[-2][0]
    if b == 0 and buckets[0][0] <= 0:
        return buckets[0][0]
    start, end, count = 0.0, buckets[b][0], counts[b]
    if b > 0:
        start = buckets[b - 1][0]
        count -= counts[b - 1]
        rank -= counts[b - 1]
    if count == 0:
        return math.nan if rank == 0 else end
    return start + (end - start) * (rank / count)
