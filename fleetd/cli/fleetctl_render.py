"""Tables for people: aligned columns, colour on a terminal, nothing else.

A fleet table can have 10,000 rows; a general table layout engine takes seconds for that,
so rows are laid out here in one pass (column widths, then padding) and colour is added to
the padded cell with rich's styles, which changes nothing about the alignment.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from rich.color import ColorSystem
from rich.style import Style

HEALTH_STYLES = {
    "healthy": "green",
    "degraded": "yellow",
    "unhealthy": "bold red",
    "unknown": "magenta",
    "out_of_service": "bold blue",
    "unreachable": "bold red",
    "stale": "bold magenta",
    "wrong node": "bold red",
}


@dataclass(frozen=True, slots=True)
class Cell:
    text: str
    style: str | None = None


@dataclass(frozen=True, slots=True)
class Column:
    title: str
    align: str = "left"  # left | right


class Painter:
    """Applies styles when colour is on; the identity otherwise."""

    def __init__(self, colour: bool) -> None:
        self.colour = colour
        self._cache: dict[str, Style] = {}

    def paint(self, text: str, style: str | None) -> str:
        if not self.colour or not style:
            return text
        parsed = self._cache.get(style)
        if parsed is None:
            parsed = self._cache[style] = Style.parse(style)
        return parsed.render(text, color_system=ColorSystem.STANDARD)


def render_table(
    columns: Sequence[Column], rows: Sequence[Sequence[Cell]], painter: Painter
) -> str:
    """Rows under a header, columns two spaces apart; the last column is not padded."""
    widths = [len(c.title) for c in columns]
    for row in rows:
        for i, cell in enumerate(row):
            if len(cell.text) > widths[i]:
                widths[i] = len(cell.text)
    last = len(columns) - 1
    pads = [
        (str.rjust if c.align == "right" else str.ljust, widths[i]) for i, c in enumerate(columns)
    ]
    colour = painter.colour

    def line(cells: Sequence[Cell], header: bool = False) -> str:
        out = []
        for i, cell in enumerate(cells):
            text = cell.text
            if i < last:
                pad, width = pads[i]
                text = pad(text, width)
            if colour:
                text = painter.paint(text, "bold" if header else cell.style)
            out.append(text)
        return "  ".join(out).rstrip()

    lines = [line([Cell(c.title) for c in columns], header=True)]
    lines.extend(line(row) for row in rows)
    return "\n".join(lines)


# ------------------------------------------------------------------------------ formatting
def health_cell(state: str) -> Cell:
    return Cell(state, HEALTH_STYLES.get(state))


def age(seconds: float | None) -> str:
    """``4s``, ``3m``, ``2h``, ``5d``; ``-`` when unknown."""
    if seconds is None or not math.isfinite(seconds):
        return "-"
    s = max(0.0, seconds)
    if s < 60:
        return f"{s:.0f}s"
    if s < 3600:
        return f"{s / 60:.0f}m"
    if s < 86400:
        return f"{s / 3600:.0f}h"
    return f"{s / 86400:.0f}d"


def age_cell(seconds: float | None, stale_after: float) -> Cell:
    style = "bold red" if seconds is not None and seconds > stale_after else None
    return Cell(age(seconds), style)


def number(value: float | None, unit: str = "", digits: int = 0) -> str:
    if value is None:
        return "-"
    return f"{value:.{digits}f}{unit}"


def power(watts: float | None) -> str:
    if watts is None:
        return "-"
    return f"{watts / 1000:.1f}kW" if watts >= 10_000 else f"{watts:.0f}W"


def temperature_cell(celsius: float | None, limit: float | None = None) -> Cell:
    if celsius is None:
        return Cell("-")
    style = None
    if limit is not None and celsius >= limit - 5:
        style = "bold red"
    elif limit is not None and celsius >= limit - 15:
        style = "yellow"
    return Cell(f"{celsius:.0f}", style)


def alerts_cell(critical: int, warning: int, info: int) -> Cell:
    """``crit/warn/info`` counts, red when anything critical fires."""
    style = "bold red" if critical else "yellow" if warning else None
    return Cell(f"{critical}/{warning}/{info}", style)


def clock(ts: float | None) -> str:
    if ts is None:
        return "-"
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def size(count: float | None) -> str:
    if count is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(count) < 1024 or unit == "TiB":
            return f"{count:.0f}{unit}" if unit == "B" else f"{count:.1f}{unit}"
        count /= 1024
    return f"{count:.1f}TiB"
