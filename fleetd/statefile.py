"""Small JSON state files written atomically: the event sources' cursors and incidents, the
XGMI/PCIe port baselines a node has learned, the GPU identity ledger, the vLLM baselines.

A file is written to a temporary file in the same directory, flushed to disk and renamed over
the old one, so a crash leaves the old content or the new one, never half of one. A file that
cannot be read or parsed reads as None (the caller starts afresh, and may be told why).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

MAX_STATE_BYTES = 64 * 1024


class StateFile:
    """One JSON object persisted at ``directory/name``."""

    def __init__(self, directory: str | Path, name: str) -> None:
        self.path = Path(directory) / name

    def load(self, problem: Callable[[str], None] | None = None) -> dict[str, Any] | None:
        """The stored object; None when missing, unreadable, too large or not a JSON object.

        ``problem`` is told why a file that is there could not be used (a missing file is no
        problem: nothing was stored yet).
        """
        try:
            return self._read()
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:  # a UnicodeDecodeError or a JSON error included
            if problem is not None:
                problem(str(exc))
            return None

    def _read(self) -> dict[str, Any]:
        with open(self.path, "rb") as handle:
            raw = handle.read(MAX_STATE_BYTES + 1)
        if len(raw) > MAX_STATE_BYTES:
            raise ValueError(f"larger than {MAX_STATE_BYTES} bytes")
        data = json.loads(raw.decode("utf-8"))
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        return data

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
