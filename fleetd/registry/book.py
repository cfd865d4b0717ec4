"""What every book of the fleet's shared tables has: its engine (its own, or the heartbeat's,
shared), its tables created on first use, and closing."""

from __future__ import annotations

from typing import ClassVar

from sqlalchemy import Engine, Table, inspect
from sqlalchemy.exc import SQLAlchemyError

from fleetd.registry.reader import RegistryError, describe_error
from fleetd.registry.store import REGISTRY_METADATA, _engine


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

    def close(self) -> None:
        if self._own:
            self._engine.dispose()
