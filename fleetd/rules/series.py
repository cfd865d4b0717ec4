"""The compact input-series notation of rule unit tests (as in ``promtool test rules``).

    "1 2 3"      three samples
    "0+10x5"     0 10 20 30 40 50   (start, step, then 5 more)
    "100-5x3"    100 95 90 85
    "7x4"        7 7 7 7 7
    "_"          no sample at this step; "_x3" three steps without a sample
    "stale"      no sample (fleetd never stores a staleness marker)

Each value belongs to one step of the test's ``interval``, the first at time 0.
"""

from __future__ import annotations

import re

from fleetd.model import Labels
from fleetd.rules.ast import Selector
from fleetd.rules.lexer import ExprError, TextError
from fleetd.rules.parser import parse

MAX_VALUES = 1_000_000

_NUM = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_EXPAND = re.compile(
    rf"^(?P<start>{_NUM})(?:(?P<sign>[-+])(?P<step>(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?))?x(?P<n>\d+)$"
)
_PLAIN = re.compile(rf"^{_NUM}$")
_BLANKS = re.compile(r"^_(?:x(?P<n>\d+))?$")


class SeriesError(TextError):
    """Bad notation; ``offset`` is where in the text the problem is."""


def parse_values(text: str) -> list[float | None]:
    """Expand the notation into one value (or None for no sample) per step."""
    out: list[float | None] = []
    for match in re.finditer(r"\S+", text):
        token, at = match.group(), match.start()
        if token == "stale":
            out.append(None)
        elif _PLAIN.match(token):
            out.append(float(token))
        elif (blank := _BLANKS.match(token)) is not None:
            count = int(blank.group("n")) if blank.group("n") else 1
            _guard(len(out) + count, at)
            out.extend([None] * count)
        elif (expand := _EXPAND.match(token)) is not None:
            start = float(expand.group("start"))
            step = float(expand.group("step") or 0.0)
            if expand.group("sign") == "-":
                step = -step
            count = int(expand.group("n"))
            _guard(len(out) + count + 1, at)
            out.extend(start + step * i for i in range(count + 1))
        else:
            raise SeriesError(
                f"cannot read {token!r}: use numbers, a+bxn, a-bxn, axn, _ , _xn or stale", at
            )
    if not out:
        raise SeriesError("no values given", 0)
    return out


def _guard(total: int, at: int) -> None:
    if total > MAX_VALUES:
        raise SeriesError(f"more than {MAX_VALUES} values", at)


def parse_series(text: str) -> tuple[str, Labels]:
    """``metric{label="value",...}`` → metric name and labels (only ``=`` is allowed)."""
    try:
        node = parse(text)
    except ExprError as exc:
        raise SeriesError(exc.message, exc.offset) from None
    if not isinstance(node, Selector):
        raise SeriesError('a series is written metric{label="value", ...}', 0)
    pairs: dict[str, str] = {}
    for matcher in node.matchers:
        if matcher.op != "=":
            raise SeriesError(f"label {matcher.name!r} needs '=' in an input series", 0)
        pairs[matcher.name] = matcher.value
    return node.metric, tuple(sorted(pairs.items()))
