"""The shared window maths: hand-computed answers and summaries that combine exactly."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fleetd.model import Sample
from fleetd.store import functions as f

T0 = 1_767_225_600.0


def test_increase_counts_post_reset_value_from_zero() -> None:
    assert f.increase_of([10, 15, 3, 8]) == 5 + 3 + 5
    assert f.increase_of([5, 0, 0, 2]) == 2
    assert f.increase_of([7]) is None
    assert f.increase_of([1, 2, 4]) == 3


def test_sample_list_functions_keep_their_contract() -> None:
    samples = [Sample(T0, 10.0), Sample(T0 + 10, 15.0), Sample(T0 + 20, 3.0)]
    assert f.increase(samples) == 8.0
    assert f.rate(samples) == pytest.approx(0.4)
    assert f.changes(samples) == 2.0
    assert f.avg([]) is None and f.count([]) is None and f.changes([]) is None
    assert f.WINDOW_FUNCTIONS["max"](samples) == 15.0


def test_rate_needs_a_positive_span() -> None:
    assert f.evaluate("rate", [T0, T0], [1.0, 2.0]) is None


def test_unknown_function_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown window function"):
        f.evaluate("median", [T0], [1.0])


def test_bucket_summaries_use_half_open_buckets() -> None:
    ts = [T0, T0 + 30, T0 + 60, T0 + 61, T0 + 120]
    values = [1.0, 2.0, 3.0, 4.0, 5.0]
    buckets = f.bucket_summaries(ts, values, 60_000)
    ends = [end - f.to_ms(T0) for end, _ in buckets]
    assert ends == [0, 60_000, 120_000]
    assert [s.count for _, s in buckets] == [1, 2, 2]
    assert [s.value("avg") for _, s in buckets] == [1.0, 2.5, 4.5]
    coarse = f.regroup(buckets, 120_000)
    assert [(end - f.to_ms(T0), s.count) for end, s in coarse] == [(0, 1), (120_000, 4)]


values_strategy = st.lists(st.integers(min_value=0, max_value=50), min_size=1, max_size=40)


@given(values=values_strategy, cuts=st.lists(st.integers(min_value=1, max_value=39), max_size=4))
def test_summaries_combine_to_the_same_answer_as_the_raw_samples(
    values: list[int], cuts: list[int]
) -> None:
    ts = [T0 + i for i in range(len(values))]
    fl = [float(v) for v in values]
    bounds = sorted({0, len(values), *(c for c in cuts if c < len(values))})
    parts = [f.summarize(ts[a:b], fl[a:b]) for a, b in itertools.pairwise(bounds)]
    combined = f.combine(parts)
    assert combined is not None
    for fn in f.WINDOW_FUNCTION_NAMES:
        assert combined.value(fn) == f.evaluate(fn, ts, fl), fn
