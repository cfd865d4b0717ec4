"""The expression parser: what it accepts, where it says a problem is, and that no input,
however odd, gets anything but a tree or a clear ``ExprError``."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleetd.query import Matcher
from fleetd.rules.ast import Binary, Call, Card, RangeSelector, Selector
from fleetd.rules.lexer import MAX_EXPR_LENGTH, ExprError
from fleetd.rules.parser import MAX_DEPTH, parse, parse_rule_expr
from fleetd.rules.render import render

VALID = [
    'fleetd_gpu_temperature_celsius{sensor="hotspot"} > 95',
    'increase(fleetd_gpu_ecc_errors_total{type=~"uncorrectable|deferred"}[10m]) > 0',
    "rate(x[5m]) * 60 > 10",
    "avg_over_time(x[1h30m]) / y",
    "a - ignoring(limit) b",
    "a > on(gpu, uuid) b",
    "a * on(gpu) group_left(model) b",
    "a / on(gpu) group_right() b",
    "a and on(gpu) b unless c or d",
    "max by (gpu) (x) > 3",
    "count(x == 0) by (gpu)",
    "sum without (link) (x)",
    "a > bool 3",
    "1 > bool 2",
    "-2 ^ 2",
    "(-2) ^ 2",
    "2 ^ 3 ^ 2",
    "a - -2",
    "(a + b) * c % d",
    "abs(x) > 1",
    "clamp_min(x, 1 - 2)",
    'absent(fleetd_gpu_up{gpu="3"})',
    "stale(fleetd_gpu_up, 3)",
    'x{a=\'single\', b!="d", c!~"e.*",}',
    "x{}",
    "x == 1e3",
    "x > .5",
    "x:recorded_name > 1",
]


@pytest.mark.parametrize("text", VALID)
def test_valid_expressions_round_trip_through_render(text: str) -> None:
    """Rendering a tree gives text that parses back to the same tree (the export relies on it)."""
    tree = parse(text)
    assert parse(render(tree)) == tree


def test_precedence_follows_promql() -> None:
    """``and`` binds tighter than ``or``, comparison than ``and``, ``*`` than ``+``."""
    tree = parse("a > 1 and b or c + d * e")
    assert isinstance(tree, Binary) and tree.op == "or"
    assert isinstance(tree.lhs, Binary) and tree.lhs.op == "and"
    assert isinstance(tree.rhs, Binary) and tree.rhs.op == "+"
    assert isinstance(tree.rhs.rhs, Binary) and tree.rhs.rhs.op == "*"


def test_unary_minus_binds_looser_than_power() -> None:
    assert render(parse("-2^2")) == "-(2 ^ 2)"


def test_selector_and_range_fields() -> None:
    tree = parse('increase(m{a="1", b=~"x|y"}[1h30m])')
    assert isinstance(tree, Call) and tree.func == "increase"
    rng = tree.args[0]
    assert isinstance(rng, RangeSelector) and rng.range_s == 5400
    assert rng.selector == Selector("m", (Matcher("a", "=", "1"), Matcher("b", "=~", "x|y")))


def test_vector_matching_is_recorded() -> None:
    tree = parse("a * on(gpu) group_left(model) b")
    assert isinstance(tree, Binary) and tree.matching is not None
    assert tree.matching.card == Card.MANY_TO_ONE
    assert tree.matching.on and tree.matching.labels == ("gpu",)
    assert tree.matching.include == ("model",)


def test_positions_are_not_part_of_equality() -> None:
    """The same sub-expression written in two places is one node to the evaluator."""
    assert parse("x > 1") == parse("   x   >   1")


def test_escapes_in_strings() -> None:
    tree = parse(r'x{a="q\"uote\\", b="tab\t"}')
    assert isinstance(tree, Selector)
    assert tree.matchers[0].value == 'q"uote\\'
    assert tree.matchers[1].value == "tab\t"


ERRORS = [
    ("", 0, "expression is empty"),
    ("   ", 0, "expression is empty"),
    ("a[5m]", 1, "range selector"),
    ("rate(a)", 0, "rate() needs a range selector"),
    ("1 > 2", 2, "needs 'bool'"),
    ("a{", 2, "expected a label name"),
    ('a{b="c"', 7, "expected ',' or '}'"),
    ('a{b "c"}', 4, "expected one of = != =~ !~"),
    ("a{b=c}", 4, "expected a quoted value"),
    ("foo(a)", 0, "unknown function 'foo'"),
    ("((a)", 4, "expected ')'"),
    ('a{x=~"("}', 5, "invalid regular expression"),
    ("sum(1)", 3, "sum() needs series"),
    ('"x"', 0, "a string is not allowed here"),
    ("1e999", 0, "number is too large"),
    ("stale(a, 0)", 0, "whole number of polls"),
    ("stale(a, 1.5)", 0, "whole number of polls"),
    ("stale(rate(a[1m]), 3)", 0, "stale() takes a selector"),
    ("absent(a + 1)", 0, "absent() takes a selector"),
    ("a and 1", 2, "needs series on both sides"),
    ("a +", 3, "unexpected end of expression"),
    ("#x", 0, "comments are not allowed"),
    ('a{__name__="x"}', 2, "not with __name__"),
    ("a[0s]", 2, "longer than zero"),
    ("a[5x]", 2, "expected a duration"),
    ("x bool 3", 2, "unexpected 'bool'"),
    ("a + bool b", 4, "'bool' is only allowed after a comparison"),
    ("a + group_left b", 4, "need on(...) or ignoring(...)"),
    ("a and on(x) group_left b", 12, "group_left is not allowed with 'and'"),
    ("a * on(x) group_left(x) b", 10, "both on(...) and group_x(...)"),
    ("1 + on(x) 2", 2, "need series on both sides"),
    ("a @ b", 2, "unexpected character '@'"),
    ("on", 0, "unexpected keyword 'on'"),
    ('{a="b"}', 0, "needs a metric name"),
    ("abs(1)", 0, "abs() needs series"),
    ("abs(a, b)", 0, "abs() takes 1 argument, got 2"),
    ("clamp_min(a, b)", 0, "must be a number"),
    ('x{a="b\nc"}', 4, "unterminated string"),
    ('x{a="\\d"}', 5, "unknown escape"),
    ("12abc", 2, "unexpected 'a' after number"),
    ("a offset 5", 2, "unexpected 'offset'"),
    ("sum by (a, a) (x)", 11, "listed twice"),
    ("inf", 0, "not a metric name"),
]


@pytest.mark.parametrize(("text", "offset", "message"), ERRORS)
def test_errors_say_what_and_where(text: str, offset: int, message: str) -> None:
    with pytest.raises(ExprError) as info:
        parse(text)
    assert message in info.value.message
    assert info.value.offset == offset


def test_a_rule_expression_must_produce_series() -> None:
    with pytest.raises(ExprError, match="must produce series"):
        parse_rule_expr("1 + 2")
    assert isinstance(parse_rule_expr("x > 1"), Binary)


def test_deep_nesting_is_an_error_not_a_crash() -> None:
    with pytest.raises(ExprError, match="nested more than"):
        parse("(" * 500 + "x" + ")" * 500)
    with pytest.raises(ExprError, match="nested more than"):
        parse("-" * 500 + "x")
    with pytest.raises(ExprError, match="nested more than"):
        parse("abs(" * 200 + "x" + ")" * 200)
    assert isinstance(parse("(" * (MAX_DEPTH - 2) + "x" + ")" * (MAX_DEPTH - 2)), Selector)


def test_overlong_expression_is_refused() -> None:
    with pytest.raises(ExprError, match="longer than"):
        parse("x + " * (MAX_EXPR_LENGTH // 4) + "x")


# ---------------------------------------------------------------------------------- properties
_TOKENS = [
    "x",
    "fleetd_gpu_up",
    "rate",
    "increase",
    "sum",
    "max",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "bool",
    "and",
    "or",
    "unless",
    "stale",
    "absent",
    "abs",
    "(",
    ")",
    "{",
    "}",
    "[",
    "]",
    ",",
    "5m",
    "0s",
    "1",
    "2.5",
    "-",
    "+",
    "*",
    "/",
    "%",
    "^",
    "==",
    "!=",
    ">",
    "<",
    ">=",
    "<=",
    "=",
    "=~",
    "!~",
    '"a"',
    "'b'",
    '"(',
    "gpu",
    "1e400",
]


def _parse_or_error(text: str) -> None:
    try:
        node = parse(text)
    except ExprError as exc:
        assert exc.message
        assert 0 <= exc.offset <= len(text)
        return
    assert node.type in ("scalar", "vector")
    assert parse(render(node)) == node


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=200))
def test_any_text_gives_a_tree_or_a_clear_error(text: str) -> None:
    _parse_or_error(text)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(_TOKENS), max_size=30).map(" ".join))
def test_any_token_soup_gives_a_tree_or_a_clear_error(text: str) -> None:
    _parse_or_error(text)


_selector_text = st.builds(
    lambda name, pairs: name + "{" + ", ".join(f'{k}{op}"{v}"' for k, op, v in pairs) + "}",
    st.sampled_from(["a", "b", "gpu_up", "x:y"]),
    st.lists(
        st.tuples(
            st.sampled_from(["gpu", "uuid", "sensor"]),
            st.sampled_from(["=", "!=", "=~", "!~"]),
            st.sampled_from(["", "a", "b.*", "a|b", "0"]),
        ),
        max_size=2,
    ),
)


def _compound(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    binary = st.builds(
        lambda lhs, op, mod, rhs: f"({lhs}) {op}{mod} ({rhs})",
        children,
        st.sampled_from(["+", "-", "*", "/", "%", "^", "and", "or", "unless", ">", "<=", "=="]),
        st.sampled_from(["", " on(gpu)", " ignoring(sensor)", " bool"]),
        children,
    )
    ranged = st.builds(
        lambda fn, sel, minutes: f"{fn}({sel}[{minutes}m])",
        st.sampled_from(["rate", "increase", "avg_over_time", "changes", "last_over_time"]),
        _selector_text,
        st.integers(1, 90),
    )
    aggregate = st.builds(
        lambda op, by, inner: f"{op} by ({', '.join(by)}) ({inner})",
        st.sampled_from(["sum", "min", "max", "avg", "count"]),
        st.lists(st.sampled_from(["gpu", "uuid"]), unique=True, max_size=2),
        children,
    )
    unary = children.map(lambda inner: f"-({inner})")
    return st.one_of(binary, ranged, aggregate, unary)


_expression_text = st.recursive(
    st.one_of(_selector_text, st.integers(0, 1000).map(str)), _compound, max_leaves=10
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_expression_text)
def test_grammar_shaped_text_parses_or_fails_clearly_and_round_trips(text: str) -> None:
    """Well-formed text from the grammar either parses (and round-trips) or is ill-typed."""
    _parse_or_error(text)
