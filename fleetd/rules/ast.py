"""The expression tree a rule's ``expr`` is parsed into; nothing is ever ``eval``-ed.

The language is a small subset of PromQL (so rules export to Prometheus almost verbatim) plus
one fleetd function, ``stale()``. Nodes are frozen and compare by content, not by where they
were written (``pos`` is excluded from equality), so identical sub-expressions in different
rules can be merged and evaluated once per tick.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import ClassVar, Literal

from fleetd.query import Matcher

ValueType = Literal["scalar", "vector", "range"]

ARITHMETIC_OPS = ("+", "-", "*", "/", "%", "^")
COMPARISON_OPS = ("==", "!=", ">", "<", ">=", "<=")
SET_OPS = ("and", "or", "unless")
BINARY_LEVELS: tuple[tuple[str, ...], ...] = (
    ("or",),
    ("and", "unless"),
    COMPARISON_OPS,
    ("+", "-"),
    ("*", "/", "%"),
)
"""Left-associative binary operators, loosest first (PromQL's precedence); unary minus binds
tighter than all of them and ``^`` (right-associative) tighter still."""

RANGE_FUNCTIONS: dict[str, str] = {
    # function name → fleetd.query.WindowFn evaluated by the store over (now - range, now]
    "avg_over_time": "avg",
    "min_over_time": "min",
    "max_over_time": "max",
    "last_over_time": "last",
    "count_over_time": "count",
    "increase": "increase",
    "rate": "rate",
    "delta": "delta",
    "changes": "changes",
}
AGGREGATIONS = ("sum", "min", "max", "avg", "count")


class Card(StrEnum):
    """How many series on each side of a binary operator may share a match signature."""

    ONE_TO_ONE = "one-to-one"
    MANY_TO_ONE = "many-to-one"  # group_left
    ONE_TO_MANY = "one-to-many"  # group_right
    MANY_TO_MANY = "many-to-many"  # and / or / unless


@dataclass(frozen=True, slots=True)
class VectorMatching:
    """``on(...)`` / ``ignoring(...)`` and ``group_left(...)`` / ``group_right(...)``."""

    card: Card
    on: bool = False  # True: match on ``labels``; False: match on all labels except ``labels``
    labels: tuple[str, ...] = ()
    include: tuple[str, ...] = ()  # labels copied from the "one" side with group_left/right
    explicit: bool = False  # on()/ignoring() was written (affects rendering only)


@dataclass(frozen=True, slots=True)
class Number:
    value: float
    pos: int = field(default=0, compare=False)
    type: ClassVar[ValueType] = "scalar"


@dataclass(frozen=True, slots=True)
class Selector:
    """``metric{label="value", ...}``: the newest fresh sample of each matching series."""

    metric: str
    matchers: tuple[Matcher, ...] = ()
    pos: int = field(default=0, compare=False)
    type: ClassVar[ValueType] = "vector"


@dataclass(frozen=True, slots=True)
class RangeSelector:
    """``metric{...}[5m]``: only valid as the argument of a range function."""

    selector: Selector
    range_s: float
    pos: int = field(default=0, compare=False)
    type: ClassVar[ValueType] = "range"


@dataclass(frozen=True, slots=True)
class Call:
    """A function call: range functions, ``abs``, ``clamp_min/max``, ``absent``, ``stale``."""

    func: str
    args: tuple[Node, ...]
    pos: int = field(default=0, compare=False)
    type: ClassVar[ValueType] = "vector"


@dataclass(frozen=True, slots=True)
class Aggregate:
    """``max by (gpu) (expr)``: one output series per group."""

    op: str
    expr: Node
    grouping: tuple[str, ...] = ()
    without: bool = False
    pos: int = field(default=0, compare=False)
    type: ClassVar[ValueType] = "vector"


@dataclass(frozen=True, slots=True)
class Unary:
    op: str  # "-" (a leading "+" is dropped by the parser)
    expr: Node
    pos: int = field(default=0, compare=False)

    @property
    def type(self) -> ValueType:
        return self.expr.type


@dataclass(frozen=True, slots=True)
class Binary:
    op: str
    lhs: Node
    rhs: Node
    bool_mode: bool = False
    matching: VectorMatching | None = None  # set when both sides are vectors
    pos: int = field(default=0, compare=False)

    @property
    def type(self) -> ValueType:
        if self.lhs.type == "scalar" and self.rhs.type == "scalar":
            return "scalar"
        return "vector"


Node = Number | Selector | RangeSelector | Call | Aggregate | Unary | Binary


def children(node: Node) -> tuple[Node, ...]:
    """The direct sub-expressions of ``node``."""
    if isinstance(node, RangeSelector):
        return (node.selector,)
    if isinstance(node, Call):
        return node.args
    if isinstance(node, Aggregate | Unary):
        return (node.expr,)
    if isinstance(node, Binary):
        return (node.lhs, node.rhs)
    return ()


def walk(node: Node) -> list[Node]:
    """Every node of the tree, parents before children."""
    out: list[Node] = []
    stack = [node]
    while stack:
        current = stack.pop()
        out.append(current)
        stack.extend(reversed(children(current)))
    return out


def metrics_used(node: Node) -> set[str]:
    """Every metric name an expression reads."""
    return {n.metric for n in walk(node) if isinstance(n, Selector)}
