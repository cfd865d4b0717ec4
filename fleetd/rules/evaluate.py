"""Evaluates expression trees against a ``Query`` at one instant, with PromQL semantics.

One ``Evaluation`` is made per tick and shared by every rule: results are cached per node,
and rule sets are interned (``Interner``) so that a sub-expression written in ten rules is
read from the store once. A vector is ``dict[Labels, float]``; metric names are dropped, as
an alert never carries them. Runtime problems (PromQL's matching errors) raise ``EvalError``,
which the engine turns into rule health, never into a page.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace

from fleetd.model import Labels
from fleetd.query import Matcher, Query, WindowFn, matches_all
from fleetd.rules.ast import (
    ARITHMETIC_OPS,
    COMPARISON_OPS,
    RANGE_FUNCTIONS,
    Aggregate,
    Binary,
    Call,
    Card,
    Node,
    Number,
    RangeSelector,
    Selector,
    Unary,
    VectorMatching,
    children,
    walk,
)
from fleetd.rules.quantile import histogram_quantile
from fleetd.rules.ranges import RangeMirror

Vector = dict[Labels, float]


class EvalError(Exception):
    """An expression could not be evaluated on the data at hand (e.g. ambiguous matching)."""


class Interner:
    """Makes equal sub-expressions the same object, so the per-tick cache can key on ``id``."""

    def __init__(self) -> None:
        self._pool: dict[Node, Node] = {}

    def intern(self, node: Node) -> Node:
        kids = children(node)
        if kids:
            node = _with_children(node, tuple(self.intern(k) for k in kids))
        return self._pool.setdefault(node, node)


def range_needs(nodes: Iterable[Node]) -> dict[tuple[str, tuple[Matcher, ...]], float]:
    """The longest window each (metric, matchers) is read over by range functions."""
    needs: dict[tuple[str, tuple[Matcher, ...]], float] = {}
    for root in nodes:
        for node in walk(root):
            if isinstance(node, Call) and node.func in RANGE_FUNCTIONS:
                rng = node.args[0]
                assert isinstance(rng, RangeSelector)
                key = (rng.selector.metric, rng.selector.matchers)
                needs[key] = max(needs.get(key, 0.0), rng.range_s)
    return needs


def _with_children(node: Node, kids: tuple[Node, ...]) -> Node:
    if isinstance(node, RangeSelector):
        assert isinstance(kids[0], Selector)
        return replace(node, selector=kids[0])
    if isinstance(node, Call):
        return replace(node, args=kids)
    if isinstance(node, Aggregate | Unary):
        return replace(node, expr=kids[0])
    if isinstance(node, Binary):
        return replace(node, lhs=kids[0], rhs=kids[1])
    return node


class Evaluation:
    """Everything one tick needs: the data, the instant, and a cache of sub-results.

    ``lookback`` bounds how old the newest sample of a series may be for an instant
    selector to see it (a few polls): older data is stale, and stale series simply vanish.
    A metric read only every N polls (``polls_per_read``, the slow tier) gets N times that,
    and ``stale(x, n)`` counts its reads, not polls: its data age is honest, not stale.
    ``synthetic`` serves metrics fleetd computes itself (``fleetd_gpu_health``) for instant
    selection, so rules can ask "is this GPU healthy?".
    """

    def __init__(
        self,
        query: Query,
        now: float,
        *,
        lookback: float,
        poll_interval: float,
        synthetic: Mapping[str, Vector] | None = None,
        ranges: RangeMirror | None = None,
        polls_per_read: Mapping[str, int] | None = None,
    ) -> None:
        self.query = query
        self.polls_per_read = polls_per_read or {}
        self.ranges = ranges
        self.now = now
        self.lookback = lookback
        self.poll_interval = poll_interval
        self.synthetic = synthetic or {}
        # Keyed on id(node) (hashing a deep frozen tree costs more than evaluating it); the
        # node is held beside its result, so its id cannot be reused by another node (a
        # caller's temporary tree freed mid-evaluation) while this Evaluation lives.
        self._cache: dict[int, tuple[Node, Vector | float]] = {}
        self._fresh_cache: dict[tuple[int, float], tuple[Node, Vector]] = {}
        self._group_keys: dict[tuple[Labels, tuple[str, ...], bool], Labels] = {}

    # ------------------------------------------------------------------------------ entry points
    def vector(self, node: Node) -> Vector:
        result = self.value(node)
        if not isinstance(result, dict):
            raise EvalError("expected series, got a single number")
        return result

    def value(self, node: Node) -> Vector | float:
        held = self._cache.get(id(node))
        if held is not None:
            return held[1]
        result = self._compute(node)
        self._cache[id(node)] = (node, result)
        return result

    def has_data(self, node: Node, labels: Labels) -> bool:
        """Whether the inputs ``node`` reads have fresh data that could concern ``labels``.

        Used for an alert that is active but no longer in the result: if its inputs are
        gone (stale, missing) the alert is *unknown*, not resolved. ``unless`` only needs its
        left side, ``or`` either side; ``stale()``/``absent()`` are about missing data and
        always count as having it.
        """
        if isinstance(node, Number):
            return True
        if isinstance(node, Selector):
            return _compatible_any(self._fresh(node, None), labels)
        if isinstance(node, RangeSelector):
            return _compatible_any(self._fresh(node.selector, node.range_s), labels)
        if isinstance(node, Call) and node.func in ("stale", "absent"):
            return True
        if isinstance(node, Binary):
            if node.op == "unless":
                return self.has_data(node.lhs, labels)
            if node.op == "or":
                return self.has_data(node.lhs, labels) or self.has_data(node.rhs, labels)
        return all(self.has_data(child, labels) for child in children(node))

    # ------------------------------------------------------------------------------ nodes
    def _compute(self, node: Node) -> Vector | float:
        if isinstance(node, Number):
            return node.value
        if isinstance(node, Selector):
            return self._select(node)
        if isinstance(node, Call):
            return self._call(node)
        if isinstance(node, Aggregate):
            return _aggregate(node, self.vector(node.expr), self._group_keys)
        if isinstance(node, Unary):
            inner = self.value(node.expr)
            if isinstance(inner, dict):
                return {labels: -v for labels, v in inner.items()}
            return -inner
        if isinstance(node, Binary):
            return self._binary(node)
        raise EvalError("a range selector can only be the argument of a range function")

    def _select(self, node: Selector) -> Vector:
        synthetic = self.synthetic.get(node.metric)
        if synthetic is not None:
            return {ls: v for ls, v in synthetic.items() if matches_all(ls, node.matchers)}
        lookback = self.lookback * self.polls_per_read.get(node.metric, 1)
        found = self.query.latest(node.metric, node.matchers, now=self.now, max_age=lookback)
        return {key.labels: sample.value for key, sample in found.items()}

    def _fresh(self, node: Selector, window: float | None) -> Vector:
        if window is None:
            return self.vector(node)
        key = (id(node), window)
        held = self._fresh_cache.get(key)
        if held is not None:
            return held[1]
        if node.metric in self.synthetic:
            fresh = self._select(node)
        else:
            found = self.query.latest(node.metric, node.matchers, now=self.now, max_age=window)
            fresh = {k.labels: s.value for k, s in found.items()}
        self._fresh_cache[key] = (node, fresh)
        return fresh

    def _call(self, node: Call) -> Vector:
        func, args = node.func, node.args
        if func in RANGE_FUNCTIONS:
            rng = args[0]
            assert isinstance(rng, RangeSelector)
            if rng.selector.metric in self.synthetic:
                raise EvalError(f"{rng.selector.metric} can only be read as an instant value")
            fn: WindowFn = RANGE_FUNCTIONS[func]  # type: ignore[assignment]
            sel = rng.selector
            if self.ranges is not None:
                return self.ranges.window(
                    self.query, fn, sel.metric, sel.matchers, window=rng.range_s, now=self.now
                )
            found = self.query.window(
                fn, sel.metric, sel.matchers, window=rng.range_s, now=self.now
            )
            return {key.labels: value for key, value in found.items()}
        if func == "abs":
            return {ls: abs(v) for ls, v in self.vector(args[0]).items()}
        if func in ("clamp_min", "clamp_max"):
            bound = self.value(args[1])
            assert isinstance(bound, float)
            pick = max if func == "clamp_min" else min
            return {ls: pick(v, bound) for ls, v in self.vector(args[0]).items()}
        if func == "histogram_quantile":
            q = self.value(args[0])
            assert isinstance(q, float)
            return histogram_quantile(q, self.vector(args[1]))
        if func == "absent":
            selector = args[0]
            assert isinstance(selector, Selector)
            if self.vector(selector):
                return {}
            return {_absent_labels(selector.matchers): 1.0}
        if func == "stale":
            return self._stale(node)
        raise EvalError(f"unknown function {func}")

    def _stale(self, node: Call) -> Vector:
        """Series known to the store whose newest sample is more than N polls old → its age."""
        selector, polls = node.args
        assert isinstance(selector, Selector) and isinstance(polls, Number)
        if selector.metric in self.synthetic:
            raise EvalError(f"{selector.metric} is computed by fleetd and is never stale")
        limit = (
            (polls.value + 0.5) * self.poll_interval * self.polls_per_read.get(selector.metric, 1)
        )
        known = self.query.series(selector.metric, selector.matchers)
        newest = self.query.latest(selector.metric, selector.matchers, now=self.now)
        out: Vector = {}
        for key in known:
            sample = newest.get(key)
            age = math.inf if sample is None else self.now - sample.ts
            if age > limit:
                out[key.labels] = age
        return out

    def _binary(self, node: Binary) -> Vector | float:
        lhs = self.value(node.lhs)
        rhs = self.value(node.rhs)
        op = node.op
        if isinstance(lhs, float) and isinstance(rhs, float):
            if op in COMPARISON_OPS:
                return 1.0 if _compare(op, lhs, rhs) else 0.0
            return _arith(op, lhs, rhs)
        if isinstance(lhs, dict) and isinstance(rhs, dict):
            assert node.matching is not None
            return _vector_binary(op, lhs, rhs, node.matching, node.bool_mode)
        return _scalar_binary(op, lhs, rhs, node.bool_mode)


# ---------------------------------------------------------------------------------- maths
def _arith(op: str, a: float, b: float) -> float:
    """IEEE arithmetic as PromQL (Go) does it: x/0 is ±Inf or NaN, never an exception."""
    try:
        if op == "+":
            return a + b
        if op == "-":
            return a - b
        if op == "*":
            return a * b
        if op == "/":
            if b == 0:
                return math.nan if a == 0 or math.isnan(a) else math.copysign(math.inf, a)
            return a / b
        if op == "%":
            return math.fmod(a, b) if b != 0 and not math.isinf(a) else math.nan
        if op == "^":
            return math.pow(a, b)
    except OverflowError:
        return math.inf
    except ValueError:
        return math.nan
    raise EvalError(f"unknown operator {op}")


def _compare(op: str, a: float, b: float) -> bool:
    if op == "==":
        return a == b
    if op == "!=":
        return a != b
    if op == ">":
        return a > b
    if op == "<":
        return a < b
    if op == ">=":
        return a >= b
    return a <= b


def compare(op: str, a: float, b: float) -> bool:
    """``a op b`` for a comparison operator (used for rule thresholds too)."""
    return _compare(op, a, b)


def _scalar_binary(op: str, lhs: Vector | float, rhs: Vector | float, bool_mode: bool) -> Vector:
    vector_left = isinstance(lhs, dict)
    vec = lhs if isinstance(lhs, dict) else rhs
    scalar = rhs if isinstance(rhs, float) else lhs
    assert isinstance(vec, dict) and isinstance(scalar, float)
    out: Vector = {}
    if op in COMPARISON_OPS:
        for labels, v in vec.items():
            hit = _compare(op, v, scalar) if vector_left else _compare(op, scalar, v)
            if bool_mode:
                out[labels] = 1.0 if hit else 0.0
            elif hit:
                out[labels] = v
        return out
    if op not in ARITHMETIC_OPS:
        raise EvalError(f"{op!r} needs series on both sides")
    for labels, v in vec.items():
        out[labels] = _arith(op, v, scalar) if vector_left else _arith(op, scalar, v)
    return out


def _signature(matching: VectorMatching) -> Callable[[Labels], Labels]:
    names = frozenset(matching.labels)
    if matching.on:
        return lambda labels: tuple(p for p in labels if p[0] in names)
    if names:
        return lambda labels: tuple(p for p in labels if p[0] not in names)
    return lambda labels: labels


def _vector_binary(
    op: str, lhs: Vector, rhs: Vector, matching: VectorMatching, bool_mode: bool
) -> Vector:
    sig = _signature(matching)
    if op in ("and", "unless", "or"):
        return _set_op(op, lhs, rhs, sig)
    many_right = matching.card == Card.ONE_TO_MANY
    many, one = (rhs, lhs) if many_right else (lhs, rhs)
    by_sig: dict[Labels, tuple[Labels, float]] = {}
    for labels, v in one.items():
        key = sig(labels)
        if key in by_sig:
            side = "left" if many_right else "right"
            raise EvalError(
                f"many-to-many matching is not allowed: several series on the {side} side "
                f"share the labels {_show(key)}"
            )
        by_sig[key] = (labels, v)
    out: Vector = {}
    seen: set[Labels] = set()
    comparison = op in COMPARISON_OPS
    for labels, v in many.items():
        key = sig(labels)
        match = by_sig.get(key)
        if match is None:
            continue
        one_labels, one_value = match
        if matching.card == Card.ONE_TO_ONE:
            if key in seen:
                raise EvalError(
                    f"several series on the left side share the labels {_show(key)}: "
                    "use group_left/group_right for many-to-one matching"
                )
            seen.add(key)
            result_labels = key
        else:
            result_labels = _include(labels, one_labels, matching.include)
        lv, rv = (one_value, v) if many_right else (v, one_value)
        if comparison:
            hit = _compare(op, lv, rv)
            if bool_mode:
                value = 1.0 if hit else 0.0
            elif hit:
                value = lv
            else:
                continue
        else:
            value = _arith(op, lv, rv)
        if result_labels in out:
            raise EvalError(f"the result has two series with the labels {_show(result_labels)}")
        out[result_labels] = value
    return out


def _include(many_labels: Labels, one_labels: Labels, include: tuple[str, ...]) -> Labels:
    if not include:
        return many_labels
    merged = dict(many_labels)
    one = dict(one_labels)
    for name in include:
        if name in one:
            merged[name] = one[name]
        else:
            merged.pop(name, None)
    return tuple(sorted(merged.items()))


def _set_op(op: str, lhs: Vector, rhs: Vector, sig: Callable[[Labels], Labels]) -> Vector:
    if op == "or":
        left_sigs = {sig(labels) for labels in lhs}
        out = dict(lhs)
        for labels, v in rhs.items():
            if sig(labels) not in left_sigs and labels not in out:
                out[labels] = v
        return out
    right_sigs = {sig(labels) for labels in rhs}
    keep = op == "and"
    return {labels: v for labels, v in lhs.items() if (sig(labels) in right_sigs) == keep}


def _aggregate(
    node: Aggregate, vec: Vector, memo: dict[tuple[Labels, tuple[str, ...], bool], Labels]
) -> Vector:
    names = frozenset(node.grouping)
    groups: dict[Labels, list[float]] = {}
    grouping, without = node.grouping, node.without
    for labels, v in vec.items():
        memo_key = (labels, grouping, without)
        key = memo.get(memo_key)
        if key is None:
            if without:
                key = tuple(p for p in labels if p[0] not in names)
            else:
                key = tuple(p for p in labels if p[0] in names)
            memo[memo_key] = key
        groups.setdefault(key, []).append(v)
    op = node.op
    out: Vector = {}
    for key, values in groups.items():
        if op == "sum":
            out[key] = math.fsum(values)
        elif op == "min":
            out[key] = min(values)
        elif op == "max":
            out[key] = max(values)
        elif op == "avg":
            out[key] = math.fsum(values) / len(values)
        else:
            out[key] = float(len(values))
    return out


def _absent_labels(matchers: tuple[Matcher, ...]) -> Labels:
    pairs: dict[str, str] = {}
    for m in matchers:
        if m.op == "=":
            pairs[m.name] = m.value
    return tuple(sorted(pairs.items()))


def _compatible_any(vec: Vector, labels: Labels) -> bool:
    wanted = dict(labels)
    return any(all(wanted.get(k, v) == v for k, v in series) for series in vec)


def _show(labels: Labels) -> str:
    return "{" + ", ".join(f'{k}="{v}"' for k, v in labels) + "}"
