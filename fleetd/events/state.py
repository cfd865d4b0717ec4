"""Small JSON state files written atomically (cursors of the event sources).

A cursor is written to a temporary file in the same directory, flushed to disk and renamed
over the old one, so a crash leaves the old cursor or the new one, never half of one. A file
that cannot be read or parsed reads as None (the caller starts afresh and counts it).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

MAX_STATE_BYTES = 64 * 1024


class StateFile:
    """One JSON object persisted at ``directory/name``."""

    def __init__(self, directory: str | Path, name: str) -> None:
        self.path = Path(directory) / name

    def load(self) -> dict[str, Any] | None:
        """The stored object; None when missing, unreadable, too large or not a JSON object."""
        try:
            with open(self.path, "rb") as handle:
                raw = handle.read(MAX_STATE_BYTES + 1)
        except OSError:
            return None
        if len(raw) > MAX_STATE_BYTES:
            return None
        try:
            data = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def exists(self) -> bool:
        return self.path.exists()

    def save(self, data: dict[str, Any]) -> None:
        """Replace the stored object atomically (raises OSError when the disk refuses)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        text = json.dumps(data, sort_keys=True, separators=(",", ":"))
        try:
            with open(tmp, "w", encoding="utf-8") as handle:
                handle.write(text)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, self.path)
        finally:
            if tmp.exists():
                tmp.unlink()
