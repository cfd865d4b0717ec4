"""Turns expression text into tokens; every failure is an ``ExprError`` with its offset."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

TokenKind = Literal["num", "ident", "str", "op", "dur", "eof"]

MAX_EXPR_LENGTH = 4096
"""Longer expressions are refused: rules are short, and a bound keeps parsing cheap."""

_DIGITS = frozenset("0123456789")
_NUMBER = re.compile(r"(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_:]*")
_DURATION = re.compile(r"(?:[0-9]+(?:ms|s|m|h|d|w))+")
_DURATION_PART = re.compile(r"([0-9]+)(ms|s|m|h|d|w)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_OPERATORS = ("==", "!=", "<=", ">=", "=~", "!~", "<", ">", "=", "+", "-", "*", "/", "%", "^")
_PUNCT = "(){}[],"
_ESCAPES = {"n": "\n", "t": "\t", "\\": "\\", '"': '"', "'": "'"}


class TextError(ValueError):
    """A problem in a rule's text (an expression, a template, series notation); ``offset`` is
    where in the text the problem is."""

    def __init__(self, message: str, offset: int) -> None:
        super().__init__(message)
        self.message = message
        self.offset = offset


class ExprError(TextError):
    """An expression could not be parsed; ``offset`` is where in the text the problem is."""


@dataclass(frozen=True, slots=True)
class Token:
    kind: TokenKind
    text: str
    pos: int
    value: float | str | None = None


def tokenize(text: str) -> list[Token]:
    """All tokens of ``text`` followed by one ``eof`` token."""
    if len(text) > MAX_EXPR_LENGTH:
        raise ExprError(f"expression is longer than {MAX_EXPR_LENGTH} characters", 0)
    tokens: list[Token] = []
    pos = 0
    end = len(text)
    while pos < end:
        char = text[pos]
        if char.isspace():
            pos += 1
            continue
        if char == "#":
            raise ExprError("comments are not allowed in expressions", pos)
        if tokens and tokens[-1].text == "[" and tokens[-1].kind == "op":
            pos = _duration(text, pos, tokens)
            continue
        if char in _DIGITS or (char == "." and pos + 1 < end and text[pos + 1] in _DIGITS):
            match = _NUMBER.match(text, pos)
            assert match is not None
            if match.end() < end and (text[match.end()].isalpha() or text[match.end()] == "_"):
                raise ExprError(
                    f"unexpected {text[match.end()]!r} after number {match.group()!r}",
                    match.end(),
                )
            tokens.append(Token("num", match.group(), pos, float(match.group())))
            pos = match.end()
            continue
        if char.isascii() and (char.isalpha() or char == "_"):
            match = _IDENT.match(text, pos)
            assert match is not None
            tokens.append(Token("ident", match.group(), pos, match.group()))
            pos = match.end()
            continue
        if char in "\"'":
            pos = _string(text, pos, tokens)
            continue
        if char in _PUNCT:
            tokens.append(Token("op", char, pos))
            pos += 1
            continue
        for op in _OPERATORS:
            if text.startswith(op, pos):
                tokens.append(Token("op", op, pos))
                pos += len(op)
                break
        else:
            raise ExprError(f"unexpected character {char!r}", pos)
    tokens.append(Token("eof", "", end))
    return tokens


def _duration(text: str, pos: int, tokens: list[Token]) -> int:
    match = _DURATION.match(text, pos)
    if match is None:
        raise ExprError("expected a duration such as 5m, 30s or 1h30m after '['", pos)
    seconds = sum(int(n) * _UNIT_SECONDS[unit] for n, unit in _DURATION_PART.findall(match.group()))
    tokens.append(Token("dur", match.group(), pos, seconds))
    return match.end()


def _string(text: str, pos: int, tokens: list[Token]) -> int:
    quote = text[pos]
    out: list[str] = []
    i = pos + 1
    while i < len(text):
        char = text[i]
        if char == quote:
            tokens.append(Token("str", text[pos : i + 1], pos, "".join(out)))
            return i + 1
        if char == "\n":
            break
        if char == "\\":
            if i + 1 >= len(text) or text[i + 1] not in _ESCAPES:
                raise ExprError("unknown escape in string (use \\\\, \\\", \\', \\n or \\t)", i)
            out.append(_ESCAPES[text[i + 1]])
            i += 2
            continue
        out.append(char)
        i += 1
    raise ExprError("unterminated string", pos)
