"""Annotation templates: a small, safe subset of Prometheus' Go templates.

Supported inside ``{{ ... }}``: ``$value``, ``$labels.NAME``, the functions ``humanize``,
``humanizePercentage`` and ``humanizeDuration`` (called as ``humanize $value`` or piped as
``$value | humanize``) and ``printf "%.1f" $value``. The subset is chosen so that every
template means the same thing to fleetd and to Prometheus (for the rule export), and it is
compiled once at load time: a bad template is a load error with its position, never a
surprise when an alert fires.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal

from fleetd.rules.lexer import TextError

_ACTION = re.compile(r"\{\{(.*?)\}\}", re.S)
_TOKEN = re.compile(
    r'\s*(?:(\$value)|\$labels\.([A-Za-z_][A-Za-z0-9_]*)|(\|)|"((?:[^"\\]|\\.)*)"|([A-Za-z]+))'
)
_PRINTF = re.compile(r"%[-+ 0#]*\d*(?:\.\d+)?[feg]")


class TemplateError(TextError):
    """A template could not be compiled; ``offset`` is where in the text the problem is."""


def go_float(value: float) -> str:
    """A float as Go's ``fmt`` prints it with ``%v`` (what Prometheus' ``$value`` shows)."""
    if not math.isfinite(value):
        return _go_non_finite(value)
    if value == 0:
        return "0"
    sign, digits, exponent = Decimal(repr(value)).normalize().as_tuple()
    assert isinstance(exponent, int)
    text = "".join(str(d) for d in digits)
    exp10 = len(text) + exponent - 1
    prefix = "-" if sign else ""
    if exp10 < -4 or exp10 >= 6:  # strconv 'g' with the shortest precision
        mantissa = text[0] + ("." + text[1:] if len(text) > 1 else "")
        return f"{prefix}{mantissa}e{'-' if exp10 < 0 else '+'}{abs(exp10):02d}"
    return prefix + format(abs(value), "f").rstrip("0").rstrip(".")


def _go_non_finite(value: float) -> str:
    """NaN or an infinity as Go prints it."""
    if math.isnan(value):
        return "NaN"
    return "+Inf" if value > 0 else "-Inf"


def humanize(value: float) -> str:
    if value == 0 or math.isnan(value) or math.isinf(value):
        return _g4(value)
    prefix = ""
    if abs(value) >= 1:
        for p in ("k", "M", "G", "T", "P", "E", "Z", "Y"):
            if abs(value) < 1000:
                break
            prefix = p
            value /= 1000
        return _g4(value) + prefix
    value, prefix = _below_one(value)
    return _g4(value) + prefix


def humanize_percentage(value: float) -> str:
    return _g4(value * 100) + "%"


def humanize_duration(value: float) -> str:
    if math.isnan(value) or math.isinf(value):
        return _g4(value)
    if value == 0:
        return "0s"
    if abs(value) >= 1:
        sign = "-" if value < 0 else ""
        value = abs(value)
        whole = int(value)
        seconds, minutes = whole % 60, (whole // 60) % 60
        hours, days = (whole // 3600) % 24, whole // 86400
        if days:
            return f"{sign}{days}d {hours}h {minutes}m {seconds}s"
        if hours:
            return f"{sign}{hours}h {minutes}m {seconds}s"
        if minutes:
            return f"{sign}{minutes}m {seconds}s"
        return f"{sign}{_g4(value)}s"
    value, prefix = _below_one(value)
    return f"{_g4(value)}{prefix}s"


def _below_one(value: float) -> tuple[float, str]:
    """A value under 1 in size, scaled by thousands up to at least 1 (yocto at most), and the
    SI prefix that says so: 0.0025 → (2.5, "m")."""
    prefix = ""
    for p in ("m", "u", "n", "p", "f", "a", "z", "y"):
        if abs(value) >= 1:
            break
        prefix = p
        value *= 1000
    return value, prefix


def _g4(value: float) -> str:
    if not math.isfinite(value):
        return _go_non_finite(value)
    text = f"{value:.4g}"
    if "e" in text:  # Go writes at least two exponent digits, as Python does
        mantissa, exp = text.split("e")
        text = f"{mantissa}e{exp[0]}{int(exp[1:]):02d}"
    return text


_FUNCTIONS: dict[str, Callable[[float], str]] = {
    "humanize": humanize,
    "humanizePercentage": humanize_percentage,
    "humanizeDuration": humanize_duration,
}


@dataclass(frozen=True, slots=True)
class _Action:
    label: str | None  # None: $value
    funcs: tuple[str, ...]  # applied left to right; "printf:<fmt>" for printf

    def render(self, value: float | None, labels: Mapping[str, str]) -> str:
        if self.label is not None:
            return labels.get(self.label, "")
        if value is None:
            return ""
        if not self.funcs:
            return go_float(value)
        text = ""
        current = value
        for func in self.funcs:
            if func.startswith("printf:"):
                text = func[len("printf:") :].replace("%%", "\x00") % current
                text = text.replace("\x00", "%")
            else:
                text = _FUNCTIONS[func](current)
        return text


@dataclass(frozen=True, slots=True)
class Template:
    """A compiled annotation template."""

    source: str
    parts: tuple[str | _Action, ...]

    def render(self, value: float | None, labels: Mapping[str, str]) -> str:
        return "".join(
            part if isinstance(part, str) else part.render(value, labels) for part in self.parts
        )


def compile_template(text: str) -> Template:
    """Compile ``text``; raises ``TemplateError`` with the offset of the first problem."""
    parts: list[str | _Action] = []
    pos = 0
    for match in _ACTION.finditer(text):
        literal = text[pos : match.start()]
        _check_literal(literal, pos)
        if literal:
            parts.append(literal)
        parts.append(_compile_action(match.group(1), match.start(1)))
        pos = match.end()
    tail = text[pos:]
    _check_literal(tail, pos)
    if tail:
        parts.append(tail)
    return Template(text, tuple(parts))


def _check_literal(literal: str, offset: int) -> None:
    for marker in ("{{", "}}"):
        found = literal.find(marker)
        if found >= 0:
            raise TemplateError(f"unbalanced {marker!r} in template", offset + found)


def _compile_action(body: str, offset: int) -> _Action:
    tokens = _tokens(body, offset)
    if not tokens:
        raise TemplateError("empty {{ }} in template", offset)
    i = 0

    def take() -> tuple[str, str, int]:
        nonlocal i
        if i >= len(tokens):
            raise TemplateError("template action ends too early", offset + len(body))
        i += 1
        return tokens[i - 1]

    funcs: list[str] = []
    kind, val, where = take()
    label: str | None = None
    if kind == "ident":
        funcs.append(_func(val, where, take))
        kind, val, where = take()
    if kind == "value":
        pass
    elif kind == "label":
        label = val
    else:
        raise TemplateError("expected $value or $labels.NAME", where)
    while i < len(tokens):
        kind, val, where = take()
        if kind != "pipe":
            raise TemplateError("expected '|' or '}}'", where)
        kind, val, where = take()
        if kind != "ident":
            raise TemplateError("expected a function name after '|'", where)
        funcs.append(_func(val, where, take))
    if label is not None and funcs:
        raise TemplateError("functions apply to $value only; $labels.NAME is text", offset)
    return _Action(label, tuple(funcs))


def _func(name: str, where: int, take: Callable[[], tuple[str, str, int]]) -> str:
    if name == "printf":
        kind, fmt, fmt_at = take()
        if kind != "string":
            raise TemplateError('printf needs a format string such as "%.1f"', fmt_at)
        verbs = _PRINTF.findall(fmt.replace("%%", ""))
        stray = fmt.replace("%%", "").count("%")
        if len(verbs) != 1 or stray != 1:
            raise TemplateError(
                'printf takes a format with exactly one %f, %e or %g verb (e.g. "%.1f")', fmt_at
            )
        return "printf:" + fmt
    if name not in _FUNCTIONS:
        known = ", ".join([*_FUNCTIONS, "printf"])
        raise TemplateError(f"unknown template function {name!r} (known: {known})", where)
    return name


def _tokens(body: str, offset: int) -> list[tuple[str, str, int]]:
    out: list[tuple[str, str, int]] = []
    pos = 0
    while pos < len(body):
        if body[pos:].strip() == "":
            break
        match = _TOKEN.match(body, pos)
        if match is None:
            start = pos + (len(body[pos:]) - len(body[pos:].lstrip()))
            raise TemplateError("unsupported template syntax", offset + start)
        where = offset + match.start() + (len(match.group(0)) - len(match.group(0).lstrip()))
        if match.group(1):
            out.append(("value", "", where))
        elif match.group(2):
            out.append(("label", match.group(2), where))
        elif match.group(3):
            out.append(("pipe", "", where))
        elif match.group(4) is not None:
            out.append(("string", match.group(4).replace('\\"', '"'), where))
        else:
            out.append(("ident", match.group(5), where))
        pos = match.end()
    return out
