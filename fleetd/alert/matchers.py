"""Alertmanager-style label matchers as text: ``severity="critical"``, ``gpu=~"[0-3]"``.

Routes, inhibition rules and silences all select alerts with these. The matcher itself is
``fleetd.query.Matcher`` (one matcher type in the whole code base); this module only parses
and prints the text form, with Alertmanager's semantics: a missing label equals ``""`` and a
regular expression must match the whole value.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from typing import Any, cast

from fleetd.model import Labels
from fleetd.query import Matcher, MatchOp, matches_all

__all__ = ["Matcher", "format_matcher", "matcher_from_dict", "matches_all", "parse_matcher"]

_NAME = r"[a-zA-Z_][a-zA-Z0-9_]*"
_MATCHER = re.compile(rf"^\s*({_NAME})\s*(=~|!~|!=|=)\s*(.*?)\s*$", re.DOTALL)


def parse_matcher(text: str) -> Matcher:
    """``name="value"`` (also ``!=``, ``=~``, ``!~``; quotes optional) → Matcher.

    Raises ValueError naming the text when it is not a matcher or its regex does not compile.
    """
    match = _MATCHER.match(text)
    if match is None:
        raise ValueError(
            f'invalid matcher {text!r}: expected name="value", name!="value", '
            'name=~"regex" or name!~"regex"'
        )
    name, op, raw = match.groups()
    value = _unquote(raw, text)
    if op in ("=~", "!~"):
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"invalid regular expression in matcher {text!r}: {exc}") from None
    return Matcher(name, cast(MatchOp, op), value)


def _unquote(raw: str, text: str) -> str:
    if len(raw) >= 2 and raw[0] == raw[-1] == '"':
        body = raw[1:-1]
        out = []
        escaped = False
        for char in body:
            if escaped:
                out.append({"n": "\n", "t": "\t"}.get(char, char))
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                raise ValueError(f"invalid matcher {text!r}: unescaped quote in value")
            else:
                out.append(char)
        return "".join(out)
    if '"' in raw:
        raise ValueError(f"invalid matcher {text!r}: unbalanced quotes")
    return raw


def format_matcher(matcher: Matcher) -> str:
    """The text form ``parse_matcher`` reads back."""
    value = matcher.value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'{matcher.name}{matcher.op}"{value}"'


def matcher_from_dict(data: dict[str, Any]) -> Matcher:
    """Alertmanager API form ``{name, value, isRegex, isEqual}`` → Matcher."""
    try:
        name = str(data["name"])
        value = str(data["value"])
    except KeyError as exc:
        raise ValueError(f"matcher is missing {exc.args[0]!r}") from None
    regex = bool(data.get("isRegex", False))
    equal = bool(data.get("isEqual", True))
    op = ("=~" if equal else "!~") if regex else ("=" if equal else "!=")
    return parse_matcher(format_matcher(Matcher(name, cast(MatchOp, op), value)))


def parse_matchers(texts: Iterable[str]) -> tuple[Matcher, ...]:
    return tuple(parse_matcher(t) for t in texts)


def matchers_column(matchers: Iterable[Matcher]) -> str:
    """Matchers as a table column: a JSON list of their text."""
    return json.dumps([format_matcher(m) for m in matchers])


def matchers_from_column(text: str) -> tuple[Matcher, ...]:
    """``matchers_column``'s inverse."""
    return parse_matchers(json.loads(text))


def matches(labels: Labels, matchers: Sequence[Matcher]) -> bool:
    """True when every matcher accepts ``labels`` (an empty list accepts everything)."""
    return matches_all(labels, matchers)
