"""Expression tree → PromQL text: for the Prometheus export and for showing rules to people.

``render(parse(text))`` parses back to the same tree. ``join_labels`` adds labels to every
``on(...)`` and ``by (...)`` list: fleetd evaluates one node, but a central Prometheus holds
every node's series, so its joins and groupings must also match on ``instance``.
"""

from __future__ import annotations

import math

from fleetd.configbase import format_duration
from fleetd.query import Matcher
from fleetd.rules.ast import (
    BINARY_LEVELS,
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

_PRECEDENCE = {op: level for level, ops in enumerate(BINARY_LEVELS, 1) for op in ops}
_UNARY_PRECEDENCE = len(BINARY_LEVELS) + 1
_PRECEDENCE["^"] = _UNARY_PRECEDENCE + 1


def render(node: Node, join_labels: tuple[str, ...] = ()) -> str:
    """PromQL text for ``node``."""
    return _Renderer(join_labels).node(node)


def render_number(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if math.isnan(value):
        return "NaN"
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return repr(value)


def render_string(value: str) -> str:
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return '"' + escaped.replace("\t", "\\t") + '"'


def render_matchers(matchers: tuple[Matcher, ...]) -> str:
    return ", ".join(f"{m.name}{m.op}{render_string(m.value)}" for m in matchers)


class _Renderer:
    def __init__(self, join_labels: tuple[str, ...]) -> None:
        self.join_labels = join_labels

    def node(self, node: Node) -> str:
        if isinstance(node, Number):
            return render_number(node.value)
        if isinstance(node, Selector):
            if not node.matchers:
                return node.metric
            return f"{node.metric}{{{render_matchers(node.matchers)}}}"
        if isinstance(node, RangeSelector):
            return f"{self.node(node.selector)}[{format_duration(node.range_s)}]"
        if isinstance(node, Call):
            return f"{node.func}({', '.join(self.node(a) for a in node.args)})"
        if isinstance(node, Aggregate):
            return self.aggregate(node)
        if isinstance(node, Unary):
            inner = self.node(node.expr)
            if isinstance(node.expr, Binary | Unary) or (
                isinstance(node.expr, Number) and node.expr.value < 0
            ):
                inner = f"({inner})"
            return f"-{inner}"
        return self.binary(node)

    def aggregate(self, node: Aggregate) -> str:
        grouping = ""
        labels = node.grouping
        if not node.without:
            labels = _merge(labels, self.join_labels)
        if labels or node.without:
            keyword = "without" if node.without else "by"
            grouping = f" {keyword} ({', '.join(labels)})"
        return f"{node.op}{grouping} ({self.node(node.expr)})"

    def binary(self, node: Binary) -> str:
        prec = _PRECEDENCE[node.op]
        right_assoc = node.op == "^"
        lhs = self.side(node.lhs, prec, tighter=right_assoc)
        rhs = self.side(node.rhs, prec, tighter=not right_assoc)
        modifiers = " bool" if node.bool_mode else ""
        if node.matching is not None:
            modifiers += self.matching(node.matching)
        return f"{lhs} {node.op}{modifiers} {rhs}"

    def side(self, child: Node, prec: int, *, tighter: bool) -> str:
        text = self.node(child)
        if isinstance(child, Binary):
            child_prec = _PRECEDENCE[child.op]
            if child_prec < prec or (child_prec == prec and tighter):
                return f"({text})"
            return text
        unary_inside = isinstance(child, Unary) and prec > _UNARY_PRECEDENCE
        negative_base = isinstance(child, Number) and child.value < 0 and prec == _PRECEDENCE["^"]
        return f"({text})" if unary_inside or negative_base else text

    def matching(self, matching: VectorMatching) -> str:
        if not matching.explicit and not (matching.on and self.join_labels):
            return ""
        labels = matching.labels
        if matching.on:
            labels = _merge(labels, self.join_labels)
        text = f" {'on' if matching.on else 'ignoring'}({', '.join(labels)})"
        if matching.card in (Card.MANY_TO_ONE, Card.ONE_TO_MANY):
            side = "group_left" if matching.card == Card.MANY_TO_ONE else "group_right"
            text += f" {side}({', '.join(matching.include)})"
        return text


def _merge(labels: tuple[str, ...], extra: tuple[str, ...]) -> tuple[str, ...]:
    return labels + tuple(label for label in extra if label not in labels)
