"""The evaluator against a real MemoryWindow, with answers computed by hand."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest

from fleetd.model import Labels, Sample, SeriesKey, make_labels
from fleetd.query import Matcher, WindowFn
from fleetd.rules.evaluate import EvalError, Evaluation, Interner, Vector
from fleetd.rules.parser import parse
from fleetd.store.memory import MemoryWindow

T0 = 1_767_225_600.0


def lab(**pairs: object) -> Labels:
    return make_labels(pairs)


def ev(window: MemoryWindow, at: float = 100.0, **kwargs: object) -> Evaluation:
    options: dict[str, object] = {"lookback": 17.5, "poll_interval": 5.0}
    options.update(kwargs)
    return Evaluation(window, T0 + at, **options)  # type: ignore[arg-type]


def vec(window: MemoryWindow, text: str, at: float = 100.0) -> Vector:
    return ev(window, at).vector(parse(text))


@pytest.fixture
def node(feed) -> None:  # type: ignore[no-untyped-def]
    """Two GPUs polled every 5 s for 100 s."""
    for gpu in (0, 1):
        g = {"gpu": gpu, "uuid": f"U{gpu}"}
        feed("up", g, [(t, 1.0) for t in range(0, 101, 5)])
        feed("temp", {**g, "sensor": "hotspot"}, [(t, 60.0 + 10 * gpu) for t in range(0, 101, 5)])
        feed("temp", {**g, "sensor": "hbm"}, [(t, 50.0 + 10 * gpu) for t in range(0, 101, 5)])
        feed(
            "limit",
            {**g, "sensor": "hotspot", "limit": "critical"},
            [(t, 100.0) for t in range(0, 101, 5)],
        )
        feed("width", g, [(t, 16.0 - 8 * gpu) for t in range(0, 101, 5)])
        feed("max_width", g, [(t, 16.0) for t in range(0, 101, 5)])
    # a counter that resets at t=50 (a GPU reset): 0,10,...,40, then 0,10,...
    feed("errors", {"gpu": 0, "uuid": "U0"}, [(t, float((t % 50) * 2)) for t in range(0, 101, 5)])
    feed("info", {"gpu": 0, "uuid": "U0", "model": "MI300X"}, [(100, 1.0)])
    feed("info", {"gpu": 1, "uuid": "U1", "model": "MI355X"}, [(100, 1.0)])


@pytest.mark.usefixtures("node")
class TestSelection:
    def test_instant_selector_returns_the_newest_sample_per_series(
        self, window: MemoryWindow
    ) -> None:
        assert vec(window, 'temp{sensor="hotspot"}') == {
            lab(gpu=0, uuid="U0", sensor="hotspot"): 60.0,
            lab(gpu=1, uuid="U1", sensor="hotspot"): 70.0,
        }

    def test_series_older_than_the_lookback_are_stale_and_vanish(
        self, window: MemoryWindow
    ) -> None:
        """The last sample is at 100 s; with a 17.5 s lookback it is gone at 118 s."""
        assert len(vec(window, "up", at=117.0)) == 2
        assert vec(window, "up", at=118.0) == {}

    def test_range_functions_are_reset_aware(self, window: MemoryWindow) -> None:
        """Window (50, 100]: 10,20,...,40,0(reset at 100)... computed by the store's maths."""
        got = vec(window, "increase(errors[50s])")
        # samples in (50,100]: t=55..95 → 10..90 step 10, t=100 → 0 (a reset counts as +0)
        assert got == {lab(gpu=0, uuid="U0"): 80.0}
        assert vec(window, "changes(up[1m])") == {
            lab(gpu=0, uuid="U0"): 0.0,
            lab(gpu=1, uuid="U1"): 0.0,
        }

    def test_selector_matchers(self, window: MemoryWindow) -> None:
        assert set(vec(window, 'temp{sensor=~"hot.*", gpu!="1"}')) == {
            lab(gpu=0, uuid="U0", sensor="hotspot")
        }


@pytest.mark.usefixtures("node")
class TestArithmeticAndMatching:
    def test_scalar_arithmetic_and_comparison_filter(self, window: MemoryWindow) -> None:
        assert vec(window, 'temp{sensor="hotspot"} * 2 - 100') == {
            lab(gpu=0, uuid="U0", sensor="hotspot"): 20.0,
            lab(gpu=1, uuid="U1", sensor="hotspot"): 40.0,
        }
        assert vec(window, 'temp{sensor="hotspot"} > 65') == {
            lab(gpu=1, uuid="U1", sensor="hotspot"): 70.0
        }
        assert vec(window, '65 < temp{sensor="hotspot"}') == {
            lab(gpu=1, uuid="U1", sensor="hotspot"): 70.0
        }
        assert vec(window, 'temp{sensor="hotspot"} > bool 65') == {
            lab(gpu=0, uuid="U0", sensor="hotspot"): 0.0,
            lab(gpu=1, uuid="U1", sensor="hotspot"): 1.0,
        }

    def test_division_by_zero_is_ieee_not_an_exception(self, window: MemoryWindow) -> None:
        got = vec(window, "(up - 1) / (up - 1)")
        assert all(math.isnan(v) for v in got.values())
        assert all(math.isinf(v) and v > 0 for v in vec(window, "up / (up - 1)").values())
        assert all(math.isnan(v) for v in vec(window, "up % (up - 1)").values())
        assert all(math.isinf(v) for v in vec(window, "(up * 10) ^ 400").values())

    def test_one_to_one_matching_on_identical_labels(self, window: MemoryWindow) -> None:
        assert vec(window, "width < max_width") == {lab(gpu=1, uuid="U1"): 8.0}

    def test_ignoring_joins_a_reading_with_its_limit(self, window: MemoryWindow) -> None:
        got = vec(window, 'limit{limit="critical"} - ignoring(limit) temp')
        assert got == {
            lab(gpu=0, uuid="U0", sensor="hotspot"): 40.0,
            lab(gpu=1, uuid="U1", sensor="hotspot"): 30.0,
        }

    def test_on_keeps_only_the_matching_labels(self, window: MemoryWindow) -> None:
        got = vec(window, 'temp{sensor="hotspot"} - on(gpu) width')
        assert got == {lab(gpu=0): 44.0, lab(gpu=1): 62.0}

    def test_group_left_copies_labels_from_the_one_side(self, window: MemoryWindow) -> None:
        got = vec(window, 'temp * on(gpu) group_left(model) info{model!=""}', at=100.0)
        assert got[lab(gpu=0, uuid="U0", sensor="hbm", model="MI300X")] == 50.0
        assert got[lab(gpu=1, uuid="U1", sensor="hotspot", model="MI355X")] == 70.0
        assert len(got) == 4

    def test_group_right_mirrors_group_left(self, window: MemoryWindow) -> None:
        got = vec(window, "width * on(gpu, uuid) group_right() temp")
        assert got[lab(gpu=1, uuid="U1", sensor="hbm")] == 8.0 * 60.0

    def test_ambiguous_matching_is_an_error_not_a_guess(self, window: MemoryWindow) -> None:
        with pytest.raises(EvalError, match="group_left"):
            vec(window, "temp - on(gpu) width")
        with pytest.raises(EvalError, match="many-to-many"):
            vec(window, "width - on(gpu) temp")

    def test_set_operators(self, window: MemoryWindow) -> None:
        assert vec(window, "width and on(gpu) (temp > 65)") == {lab(gpu=1, uuid="U1"): 8.0}
        assert vec(window, "width unless on(gpu) (temp > 65)") == {lab(gpu=0, uuid="U0"): 16.0}
        got = vec(window, '(width < 10) or temp{sensor="hbm"}')
        assert got == {
            lab(gpu=1, uuid="U1"): 8.0,
            lab(gpu=0, uuid="U0", sensor="hbm"): 50.0,
            lab(gpu=1, uuid="U1", sensor="hbm"): 60.0,
        }
        # with on(gpu) the right side only fills GPUs the left side lacks
        assert vec(window, '(width < 10) or on(gpu) temp{sensor="hbm"}') == {
            lab(gpu=1, uuid="U1"): 8.0,
            lab(gpu=0, uuid="U0", sensor="hbm"): 50.0,
        }

    def test_aggregations(self, window: MemoryWindow) -> None:
        assert vec(window, "max by (gpu) (temp)") == {lab(gpu=0): 60.0, lab(gpu=1): 70.0}
        assert vec(window, "sum without (sensor) (temp)") == {
            lab(gpu=0, uuid="U0"): 110.0,
            lab(gpu=1, uuid="U1"): 130.0,
        }
        assert vec(window, "count(temp)") == {(): 4.0}
        assert vec(window, "avg(temp)") == {(): 60.0}
        assert vec(window, "min by (sensor) (temp)") == {
            lab(sensor="hbm"): 50.0,
            lab(sensor="hotspot"): 60.0,
        }

    def test_functions(self, window: MemoryWindow) -> None:
        assert vec(window, "clamp_max(width, 10)") == {
            lab(gpu=0, uuid="U0"): 10.0,
            lab(gpu=1, uuid="U1"): 8.0,
        }
        assert vec(window, "clamp_min(width, 10)") == {
            lab(gpu=0, uuid="U0"): 16.0,
            lab(gpu=1, uuid="U1"): 10.0,
        }
        assert vec(window, "abs(width - 20)") == {
            lab(gpu=0, uuid="U0"): 4.0,
            lab(gpu=1, uuid="U1"): 12.0,
        }
        assert vec(window, "-width") == {lab(gpu=0, uuid="U0"): -16.0, lab(gpu=1, uuid="U1"): -8.0}

    def test_absent_returns_the_equality_labels_when_nothing_is_fresh(
        self, window: MemoryWindow
    ) -> None:
        assert vec(window, 'absent(up{gpu="7", uuid=~"U.*"})') == {lab(gpu=7): 1.0}
        assert vec(window, 'absent(up{gpu="0"})') == {}


class TestStale:
    def test_stale_reports_series_silent_for_n_polls_with_their_age(
        self, window: MemoryWindow, feed
    ) -> None:  # type: ignore[no-untyped-def]
        feed("power", {"gpu": 0}, [(t, 500.0) for t in range(0, 101, 5)])
        feed("power", {"gpu": 1}, [(t, 500.0) for t in range(0, 61, 5)])
        # poll interval 5 s, 6 polls → stale after 32.5 s without a sample
        assert vec(window, "stale(power, 6)", at=90.0) == {}
        assert vec(window, "stale(power, 6)", at=95.0) == {lab(gpu=1): 35.0}
        assert vec(window, "stale(power, 6)", at=100.0) == {lab(gpu=1): 40.0}


class TestCacheIdentity:
    """The per-tick cache keys on ``id(node)``: a caller's temporary tree, freed between two
    calls, must not hand its cached answer to the next tree CPython puts at the same address."""

    def test_freed_trees_never_answer_for_new_ones(self, feed, window: MemoryWindow) -> None:  # type: ignore[no-untyped-def]
        feed("temp", {"gpu": 0}, [(100, 60.0)])
        feed("limit", {"gpu": 0}, [(100, 100.0)])
        e = ev(window)
        for _ in range(50):
            assert e.vector(parse("temp")) == {lab(gpu=0): 60.0}
            assert e.vector(parse("limit")) == {lab(gpu=0): 100.0}
            assert e.has_data(parse("limit - temp"), lab(gpu=0))
            assert not e.has_data(parse("temp"), lab(gpu=1))


class TestHasData:
    """An active alert that left the result: is it false (data present) or unknown (data gone)?"""

    @pytest.fixture(autouse=True)
    def _data(self, feed) -> None:  # type: ignore[no-untyped-def]
        feed("temp", {"gpu": 0, "sensor": "hotspot"}, [(t, 60.0) for t in range(0, 101, 5)])
        feed("temp", {"gpu": 1, "sensor": "hotspot"}, [(t, 60.0) for t in range(0, 51, 5)])
        feed("limit", {"gpu": 0, "sensor": "hotspot"}, [(t, 100.0) for t in range(0, 101, 5)])
        feed("limit", {"gpu": 1, "sensor": "hotspot"}, [(t, 100.0) for t in range(0, 101, 5)])

    def test_fresh_inputs_mean_data(self, window: MemoryWindow) -> None:
        e = ev(window)
        assert e.has_data(parse("limit - temp < 5"), lab(gpu=0, sensor="hotspot"))

    def test_one_stale_input_means_no_data(self, window: MemoryWindow) -> None:
        e = ev(window)
        assert not e.has_data(parse("limit - temp < 5"), lab(gpu=1, sensor="hotspot"))

    def test_labels_must_be_compatible(self, window: MemoryWindow) -> None:
        e = ev(window)
        assert not e.has_data(parse("limit"), lab(gpu=7))
        assert e.has_data(parse("max by (gpu) (limit)"), lab(gpu=1))

    def test_unless_needs_only_its_left_side_and_or_either(self, window: MemoryWindow) -> None:
        e = ev(window)
        assert e.has_data(parse("limit unless on(gpu) temp"), lab(gpu=1, sensor="hotspot"))
        assert e.has_data(parse("temp or limit"), lab(gpu=1, sensor="hotspot"))
        assert not e.has_data(parse("temp and limit"), lab(gpu=1, sensor="hotspot"))

    def test_range_inputs_count_when_the_window_has_samples(self, window: MemoryWindow) -> None:
        e = ev(window)
        assert e.has_data(parse("max_over_time(temp[1m]) > 90"), lab(gpu=1, sensor="hotspot"))
        assert not e.has_data(parse("max_over_time(temp[30s]) > 90"), lab(gpu=1, sensor="hotspot"))

    def test_staleness_functions_always_have_data(self, window: MemoryWindow) -> None:
        e = ev(window)
        assert e.has_data(parse("stale(temp, 3)"), lab(gpu=1, sensor="hotspot"))
        assert e.has_data(parse("absent(nothing)"), ())


class _CountingQuery:
    """The real window, counting how often each method is asked (to prove sharing)."""

    def __init__(self, inner: MemoryWindow) -> None:
        self.inner = inner
        self.calls: list[str] = []

    def series(self, metric: str, matchers: Sequence[Matcher] = ()) -> list[SeriesKey]:
        self.calls.append(f"series:{metric}")
        return self.inner.series(metric, matchers)

    def latest(
        self,
        metric: str,
        matchers: Sequence[Matcher] = (),
        *,
        now: float,
        max_age: float | None = None,
    ) -> dict[SeriesKey, Sample]:
        self.calls.append(f"latest:{metric}")
        return self.inner.latest(metric, matchers, now=now, max_age=max_age)

    def window(
        self,
        fn: WindowFn,
        metric: str,
        matchers: Sequence[Matcher] = (),
        *,
        window: float,
        now: float,
    ) -> dict[SeriesKey, float]:
        self.calls.append(f"window:{fn}:{metric}")
        return self.inner.window(fn, metric, matchers, window=window, now=now)

    def range(
        self,
        metric: str,
        matchers: Sequence[Matcher] = (),
        *,
        start: float,
        end: float,
        step: float | None = None,
    ) -> dict[SeriesKey, list[Sample]]:
        return self.inner.range(metric, matchers, start=start, end=end, step=step)


@pytest.mark.usefixtures("node")
def test_shared_sub_expressions_are_read_once_per_tick(window: MemoryWindow) -> None:
    interner = Interner()
    rules = [
        interner.intern(parse("increase(errors[1m]) > 0")),
        interner.intern(parse("increase(errors[1m]) > 5")),
        interner.intern(parse("increase(errors[1m]) * 60 > 100 and on(gpu) up")),
    ]
    counting = _CountingQuery(window)
    e = Evaluation(counting, T0 + 100, lookback=17.5, poll_interval=5.0)
    for rule in rules:
        e.vector(rule)
    assert counting.calls.count("window:increase:errors") == 1
    assert counting.calls.count("latest:up") == 1


def test_synthetic_metrics_are_served_for_instant_selection_only(window: MemoryWindow) -> None:
    health = {lab(gpu=0, state="healthy"): 1.0, lab(gpu=0, state="unhealthy"): 0.0}
    e = Evaluation(
        window, T0, lookback=17.5, poll_interval=5.0, synthetic={"fleetd_gpu_health": health}
    )
    assert e.vector(parse('fleetd_gpu_health{state="healthy"} == 1')) == {
        lab(gpu=0, state="healthy"): 1.0
    }
    with pytest.raises(EvalError, match="instant"):
        e.vector(parse("max_over_time(fleetd_gpu_health[5m])"))


def test_a_slow_series_is_stale_after_its_own_reads_not_after_polls(feed, window) -> None:  # type: ignore[no-untyped-def]
    """A metric read every 12th poll (the slow tier) keeps its read time: 40 s old at 5 s
    polls is fresh for it, while a fast series that old is stale."""
    feed("cap", {"gpu": 0}, [(0, 750.0), (60, 750.0)])
    feed("power", {"gpu": 0}, [(0, 400.0), (60, 410.0)])
    at = 100.0  # 40 s after the last read of both
    plain = ev(window, at)
    assert plain.vector(parse("cap")) == {} and plain.vector(parse("power")) == {}
    tiered = ev(window, at, polls_per_read={"cap": 12})
    assert tiered.vector(parse("cap")) == {lab(gpu=0): 750.0}
    assert tiered.vector(parse("power")) == {}  # fast: stale as before
    assert tiered.vector(parse("stale(cap, 3)")) == {}
    assert ev(window, 300.0, polls_per_read={"cap": 12}).vector(parse("stale(cap, 3)")) == {
        lab(gpu=0): 240.0
    }
