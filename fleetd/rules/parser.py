"""Recursive-descent parser for rule expressions: text → ``fleetd.rules.ast`` nodes.

Precedence follows PromQL (lowest first): ``or``; ``and``/``unless``; comparisons;
``+ -``; ``* / %``; unary minus; ``^`` (right-associative). Types are checked while parsing,
so a range selector outside a range function or a scalar-only comparison without ``bool``
is a parse error with a position, never a surprise at evaluation time. Any input yields a
tree or an ``ExprError``; nesting is bounded so deep input cannot exhaust the stack.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import TypeVar

from fleetd.query import Matcher, MatchOp
from fleetd.rules.ast import (
    AGGREGATIONS,
    BINARY_LEVELS,
    COMPARISON_OPS,
    RANGE_FUNCTIONS,
    SET_OPS,
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
)
from fleetd.rules.lexer import ExprError, Token, tokenize

MAX_DEPTH = 50
_T = TypeVar("_T")
_KEYWORDS = frozenset(
    {"and", "or", "unless", "bool", "on", "ignoring", "group_left", "group_right", "by", "without"}
)
_MATCH_OPS: tuple[MatchOp, ...] = ("=", "!=", "=~", "!~")
FUNCTIONS = frozenset(
    {*RANGE_FUNCTIONS, "abs", "clamp_min", "clamp_max", "absent", "stale", "histogram_quantile"}
)


def parse(text: str) -> Node:
    """Parse ``text`` into an expression tree; raises ``ExprError`` on any problem."""
    return _Parser(text).parse()


def parse_rule_expr(text: str) -> Node:
    """Parse an alert expression, which must produce a vector (one alert per series)."""
    node = parse(text)
    if node.type != "vector":
        raise ExprError("an alert expression must produce series, not a single number", 0)
    return node


class _Parser:
    def __init__(self, text: str) -> None:
        if not text.strip():
            raise ExprError("expression is empty", 0)
        self.tokens = tokenize(text)
        self.i = 0
        self.depth = 0

    # ------------------------------------------------------------------------------ tokens
    def peek(self, ahead: int = 0) -> Token:
        return self.tokens[min(self.i + ahead, len(self.tokens) - 1)]

    def advance(self) -> Token:
        token = self.tokens[self.i]
        if token.kind != "eof":
            self.i += 1
        return token

    def at(self, text: str) -> bool:
        token = self.peek()
        return token.kind in ("op", "ident") and token.text == text

    def expect(self, text: str, what: str) -> Token:
        token = self.peek()
        if not self.at(text):
            raise ExprError(f"expected {what}, found {_describe(token)}", token.pos)
        return self.advance()

    # ------------------------------------------------------------------------------ grammar
    def parse(self) -> Node:
        node = self.binary(0)
        token = self.peek()
        if token.kind != "eof":
            raise ExprError(f"unexpected {_describe(token)}", token.pos)
        if node.type == "range":
            raise _range_error(node)
        return node

    def binary(self, level: int) -> Node:
        if level == len(BINARY_LEVELS):
            return self.unary()
        lhs = self.binary(level + 1)
        while self.peek().kind in ("op", "ident") and self.peek().text in BINARY_LEVELS[level]:
            token = self.advance()
            bool_mode, matching = self.modifiers(token)
            rhs = self.binary(level + 1)
            lhs = _make_binary(token, lhs, rhs, bool_mode, matching)
        return lhs

    def unary(self) -> Node:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise ExprError(
                f"expression is nested more than {MAX_DEPTH} levels deep", self.peek().pos
            )
        try:
            token = self.peek()
            if token.kind == "op" and token.text in ("-", "+"):
                self.advance()
                operand = self.unary()
                if operand.type == "range":
                    raise _range_error(operand)
                if token.text == "+":
                    return operand
                if isinstance(operand, Number):
                    return Number(-operand.value, token.pos)
                return Unary("-", operand, token.pos)
            return self.power()
        finally:
            self.depth -= 1

    def power(self) -> Node:
        base = self.primary()
        if self.at("^"):
            token = self.advance()
            bool_mode, matching = self.modifiers(token)
            exponent = self.unary()
            return _make_binary(token, base, exponent, bool_mode, matching)
        return base

    def primary(self) -> Node:
        token = self.peek()
        if token.kind == "num":
            self.advance()
            assert isinstance(token.value, float)
            if not math.isfinite(token.value):
                raise ExprError("number is too large", token.pos)
            return Number(token.value, token.pos)
        if token.kind == "str":
            raise ExprError("a string is not allowed here (strings go inside {...})", token.pos)
        if token.kind == "op" and token.text == "(":
            self.advance()
            node = self.binary(0)
            self.expect(")", "')'")
            return node
        if token.kind == "op" and token.text == "{":
            raise ExprError("a selector needs a metric name before '{'", token.pos)
        if token.kind == "ident":
            return self.identifier()
        if token.kind == "eof":
            raise ExprError("unexpected end of expression", token.pos)
        raise ExprError(f"unexpected {_describe(token)}", token.pos)

    def identifier(self) -> Node:
        token = self.advance()
        name = token.text
        if name in _KEYWORDS:
            raise ExprError(f"unexpected keyword {name!r}", token.pos)
        following = self.peek()
        if name in AGGREGATIONS and (self.at("(") or following.text in ("by", "without")):
            return self.aggregate(token)
        if self.at("("):
            if name not in FUNCTIONS:
                raise ExprError(
                    f"unknown function {name!r} (known: {', '.join(sorted(FUNCTIONS))})",
                    token.pos,
                )
            return self.call(token)
        if name in ("inf", "nan", "Inf", "NaN"):
            raise ExprError(f"{name!r} is not a metric name; write a finite number", token.pos)
        selector = Selector(name, self.matchers() if self.at("{") else (), token.pos)
        if self.at("["):
            return self.range(selector)
        return selector

    def listed(self, opening: str, closing: str, item: Callable[[], _T]) -> list[_T]:
        """``opening item, item, … closing``, a trailing comma allowed."""
        self.expect(opening, f"'{opening}'")
        found: list[_T] = []
        while not self.at(closing):
            found.append(item())
            if not self.at(closing):
                self.expect(",", f"',' or '{closing}'")
        self.advance()
        return found

    def label_name(self) -> Token:
        token = self.peek()
        if token.kind != "ident":
            raise ExprError(f"expected a label name, found {_describe(token)}", token.pos)
        return self.advance()

    def matchers(self) -> tuple[Matcher, ...]:
        return tuple(self.listed("{", "}", self.matcher))

    def matcher(self) -> Matcher:
        label = self.label_name()
        if label.text == "__name__":
            raise ExprError("select the metric by name, not with __name__", label.pos)
        op_token = self.peek()
        if op_token.kind != "op" or op_token.text not in _MATCH_OPS:
            raise ExprError(
                f"expected one of = != =~ !~ after {label.text!r}, found {_describe(op_token)}",
                op_token.pos,
            )
        self.advance()
        value = self.peek()
        if value.kind != "str":
            raise ExprError(f"expected a quoted value, found {_describe(value)}", value.pos)
        self.advance()
        assert isinstance(value.value, str)
        return _matcher(label.text, op_token.text, value)

    def range(self, selector: Selector) -> RangeSelector:
        bracket = self.advance()
        token = self.peek()
        if token.kind != "dur":
            raise ExprError("expected a duration such as 5m after '['", token.pos)
        self.advance()
        assert isinstance(token.value, float)
        if token.value <= 0:
            raise ExprError("a range must be longer than zero", token.pos)
        self.expect("]", "']'")
        return RangeSelector(selector, token.value, bracket.pos)

    def label_list(self) -> tuple[str, ...]:
        names: list[str] = []

        def label() -> str:
            token = self.label_name()
            if token.text in names:
                raise ExprError(f"label {token.text!r} is listed twice", token.pos)
            names.append(token.text)
            return token.text

        return tuple(self.listed("(", ")", label))

    def aggregate(self, token: Token) -> Aggregate:
        grouping: tuple[str, ...] = ()
        without = False
        seen_grouping = False
        if self.peek().text in ("by", "without"):
            without = self.advance().text == "without"
            grouping = self.label_list()
            seen_grouping = True
        open_paren = self.expect("(", f"'(' after {token.text}")
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise ExprError(f"expression is nested more than {MAX_DEPTH} levels deep", token.pos)
        inner = self.binary(0)
        self.depth -= 1
        self.expect(")", "')'")
        if self.peek().text in ("by", "without") and self.peek().kind == "ident":
            if seen_grouping:
                raise ExprError("give by/without only once", self.peek().pos)
            without = self.advance().text == "without"
            grouping = self.label_list()
        if inner.type != "vector":
            raise ExprError(f"{token.text}() needs series to aggregate", open_paren.pos)
        return Aggregate(token.text, inner, grouping, without, token.pos)

    def call(self, token: Token) -> Call:
        self.expect("(", "'('")
        args: list[Node] = []
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise ExprError(f"expression is nested more than {MAX_DEPTH} levels deep", token.pos)
        while not self.at(")"):
            args.append(self.binary(0))
            if not self.at(")"):
                self.expect(",", "',' or ')'")
        self.depth -= 1
        self.advance()
        return _check_call(Call(token.text, tuple(args), token.pos))

    def modifiers(self, op: Token) -> tuple[bool, VectorMatching | None]:
        bool_mode = False
        if self.at("bool"):
            token = self.advance()
            if op.text not in COMPARISON_OPS:
                raise ExprError("'bool' is only allowed after a comparison", token.pos)
            bool_mode = True
        if not (self.at("on") or self.at("ignoring")):
            if self.at("group_left") or self.at("group_right"):
                raise ExprError(
                    "group_left/group_right need on(...) or ignoring(...) first", self.peek().pos
                )
            return bool_mode, None
        on = self.advance().text == "on"
        labels = self.label_list()
        card = Card.MANY_TO_MANY if op.text in SET_OPS else Card.ONE_TO_ONE
        include: tuple[str, ...] = ()
        if self.at("group_left") or self.at("group_right"):
            group = self.advance()
            if op.text in SET_OPS:
                raise ExprError(f"{group.text} is not allowed with {op.text!r}", group.pos)
            card = Card.MANY_TO_ONE if group.text == "group_left" else Card.ONE_TO_MANY
            include = self.label_list() if self.at("(") else ()
            if on and set(include) & set(labels):
                raise ExprError("a label cannot be in both on(...) and group_x(...)", group.pos)
        return bool_mode, VectorMatching(card, on, labels, include, explicit=True)


# ---------------------------------------------------------------------------------- helpers
def _describe(token: Token) -> str:
    if token.kind == "eof":
        return "end of expression"
    return repr(token.text)


def _range_error(node: Node) -> ExprError:
    return ExprError(
        "a range selector such as x[5m] can only be the argument of a range function "
        f"({', '.join(sorted(RANGE_FUNCTIONS))})",
        getattr(node, "pos", 0),
    )


def _matcher(label: str, op: str, value: Token) -> Matcher:
    assert isinstance(value.value, str)
    try:
        return Matcher(label, op, value.value)  # type: ignore[arg-type]
    except (re.error, RecursionError, OverflowError) as exc:
        raise ExprError(f"invalid regular expression: {exc}", value.pos) from None


def _make_binary(
    token: Token, lhs: Node, rhs: Node, bool_mode: bool, matching: VectorMatching | None
) -> Binary:
    op = token.text
    for side in (lhs, rhs):
        if side.type == "range":
            raise _range_error(side)
    both_vectors = lhs.type == "vector" and rhs.type == "vector"
    if op in SET_OPS and not both_vectors:
        raise ExprError(f"{op!r} needs series on both sides", token.pos)
    if op in COMPARISON_OPS and lhs.type == "scalar" and rhs.type == "scalar" and not bool_mode:
        raise ExprError("a comparison of two numbers needs 'bool'", token.pos)
    if matching is not None and not both_vectors:
        raise ExprError("on(...)/ignoring(...) need series on both sides", token.pos)
    if both_vectors and matching is None:
        card = Card.MANY_TO_MANY if op in SET_OPS else Card.ONE_TO_ONE
        matching = VectorMatching(card)
    return Binary(op, lhs, rhs, bool_mode, matching, token.pos)


def _check_call(call: Call) -> Call:
    name, args = call.func, call.args

    def need(count: int) -> None:
        if len(args) != count:
            plural = "argument" if count == 1 else "arguments"
            raise ExprError(f"{name}() takes {count} {plural}, got {len(args)}", call.pos)

    if name in RANGE_FUNCTIONS:
        need(1)
        if not isinstance(args[0], RangeSelector):
            raise ExprError(f"{name}() needs a range selector such as metric[5m]", call.pos)
    elif name == "abs":
        need(1)
        _need_vector(call, args[0])
    elif name in ("clamp_min", "clamp_max"):
        need(2)
        _need_vector(call, args[0])
        if args[1].type != "scalar":
            raise ExprError(f"the second argument of {name}() must be a number", call.pos)
    elif name == "histogram_quantile":
        need(2)
        if args[0].type != "scalar":
            raise ExprError(
                "the first argument of histogram_quantile() is the quantile, a number such as 0.99",
                call.pos,
            )
        _need_vector(call, args[1])
    elif name == "absent":
        need(1)
        if not isinstance(args[0], Selector):
            raise ExprError('absent() takes a selector such as metric{label="x"}', call.pos)
    elif name == "stale":
        need(2)
        if not isinstance(args[0], Selector):
            raise ExprError("stale() takes a selector and a number of polls", call.pos)
        polls = args[1]
        if (
            not isinstance(polls, Number)
            or not math.isfinite(polls.value)
            or polls.value < 1
            or polls.value != int(polls.value)
        ):
            raise ExprError(
                "the second argument of stale() is a whole number of polls >= 1", call.pos
            )
    return call


def _need_vector(call: Call, arg: Node) -> None:
    if arg.type == "range":
        raise _range_error(arg)
    if arg.type != "vector":
        raise ExprError(f"{call.func}() needs series, not a number", call.pos)
