"""structlog set-up: JSON lines by default (journald), a console renderer for people.

Event names are stable snake_case identifiers (``poll_overrun``, ``config_reload_failed``);
context goes in key/value fields, never in the event text.
"""

from __future__ import annotations

import logging
import sys
from typing import Any, Literal, TextIO


def _import_structlog_without_rich() -> Any:
    """structlog imports rich (and pygments) at import time, only to pretty-print exceptions
    in its console renderer: ~3 MB of a node daemon's RSS that JSON logging never uses
    (docs/performance.md, footprint). Import it with rich hidden; the console renderer then
    prints plain tracebacks, and fleetd's own CLI still imports rich when it draws."""
    if "structlog" in sys.modules or "rich" in sys.modules:
        import structlog as loaded

        return loaded
    sys.modules["rich"] = None  # type: ignore[assignment]  # makes `import rich` fail
    try:
        import structlog as loaded
    finally:
        if sys.modules.get("rich", ...) is None:
            del sys.modules["rich"]
    return loaded


structlog = _import_structlog_without_rich()

LogFormat = Literal["json", "console"]

_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}


def configure_logging(
    fmt: LogFormat = "json", level: str = "info", stream: TextIO | None = None
) -> None:
    """Configure structlog once for the process; safe to call again on reload."""
    renderer: Any
    if fmt == "console":
        renderer = structlog.dev.ConsoleRenderer(colors=(stream or sys.stderr).isatty())
    else:
        renderer = structlog.processors.JSONRenderer(sort_keys=False)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS.get(level, logging.INFO)),
        logger_factory=structlog.PrintLoggerFactory(file=stream or sys.stderr),
        cache_logger_on_first_use=False,
    )


def get_logger(component: str) -> Any:
    """A logger whose every line carries ``component``.

    It is a lazy proxy: safe to create at import time, it follows whatever
    ``configure_logging`` set up when a line is actually logged.
    """
    return structlog.get_logger(component=component)
