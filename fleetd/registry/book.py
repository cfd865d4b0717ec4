"""What every book of the fleet's shared tables has: its engine (its own, or the heartbeat's,
shared), its tables created on first use, reads and writes that fail as ``RegistryError``,
the audit row of every change, and closing."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from sqlalchemy import Engine, Executable, Insert, RowMapping, Table, insert, inspect
from sqlalchemy.exc import SQLAlchemyError

from fleetd.model import make_labels
from fleetd.query import Matcher, matches_all
from fleetd.registry.reader import RegistryError, describe_error
from fleetd.registry.store import REGISTRY_METADATA, _engine, audit_table, registry_errors


def audit(now: float, actor: str, action: str, subject: str, detail: Any) -> Insert:
    """The audit row of a change (``detail`` as JSON)."""
    return insert(audit_table).values(
        at=now, actor=actor[:255], action=action, subject=subject, detail=json.dumps(detail)
    )


def selects_node(node_matchers: Sequence[Matcher], node: str, labels: Mapping[str, str]) -> bool:
    """Whether a row's node matchers accept this node (its name and ``node.labels``)."""
    return matches_all(make_labels({**labels, "node": node}), node_matchers)


class RegistryBook:
    """A reader and writer of some of the registry's tables (``TABLES``; ``WHAT`` names them
    in the error when they cannot be created)."""

    TABLES: ClassVar[tuple[Table, ...]] = ()
    WHAT: ClassVar[str] = ""

    def __init__(self, url: str, *, timeout: float = 5.0, engine: Engine | None = None) -> None:
        self._own = engine is None
        self._engine = engine if engine is not None else _engine(url, timeout)
        self._ready = False

    def _ensure(self) -> None:
        if self._ready:
            return
        tables = list(self.TABLES)
        try:
            REGISTRY_METADATA.create_all(self._engine, tables=tables, checkfirst=True)
        except SQLAlchemyError as exc:  # two creators at once: the loser finds them there
            if not all(inspect(self._engine).has_table(t.name) for t in tables):
                raise RegistryError(
                    f"cannot create the {self.WHAT}: {describe_error(exc)}"
                ) from None
        self._ready = True

    def _rows(self, stmt: Executable) -> list[RowMapping]:
        """The rows ``stmt`` reads (its tables created first)."""
        self._ensure()
        with registry_errors("read the registry"), self._engine.connect() as conn:
            return list(conn.execute(stmt).mappings())

    def _write(self, statements: Sequence[Executable]) -> None:
        """Run ``statements`` in one transaction (a change and its audit row)."""
        self._ensure()
        with registry_errors("write the registry"), self._engine.begin() as conn:
            for stmt in statements:
                conn.execute(stmt)

    def close(self) -> None:
        if self._own:
            self._engine.dispose()
