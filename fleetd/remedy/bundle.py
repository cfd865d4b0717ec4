"""Evidence bundles on disk: one gzip'd JSON file per run and phase, a size cap, retention.

A bundle is written to a temporary name and renamed into place, so a bundle under its final
name is always whole; a process killed mid-write leaves only a ``.tmp`` file, which the next
``prune`` removes. The digest returned is the sha256 of the file's bytes, what an engineer
checks a copy against (``fleetctl evidence`` does).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SUFFIX = ".json.gz"
TMP_SUFFIX = ".tmp"
CUT_ORDER = ("events", "gpus", "journal")
"""Sections cut (largest pieces first) when a bundle is over the cap."""
_NAME = re.compile(r"[A-Za-z0-9_.-]{1,128}\Z")


@dataclass(frozen=True, slots=True)
class BundleRef:
    """Where a bundle went and what it is."""

    path: str
    sha256: str
    size: int
    cut: tuple[str, ...] = ()  # sections dropped to fit the cap


class BundleError(Exception):
    """The bundle could not be written (disk full even after pruning, unwritable directory)."""


def bundle_name(run_id: str, phase: str, attempt: int) -> str:
    for part in (run_id, phase):
        if not _NAME.match(part):
            raise ValueError(f"not a safe file name part: {part!r}")
    return f"{run_id}.{phase}.{attempt}{SUFFIX}"


def encode(content: Mapping[str, Any]) -> bytes:
    """The compressed form; ``mtime=0`` so equal content gives equal bytes."""
    raw = json.dumps(content, sort_keys=True, default=str, separators=(",", ":")).encode()
    return gzip.compress(raw, compresslevel=6, mtime=0)


def decode(data: bytes) -> dict[str, Any]:
    out = json.loads(gzip.decompress(data))
    if not isinstance(out, dict):
        raise ValueError("an evidence bundle is a JSON object")
    return out


def fit(content: Mapping[str, Any], cap: int) -> tuple[bytes, tuple[str, ...]]:
    """``content`` encoded within ``cap`` bytes: sections of ``CUT_ORDER`` are replaced by a
    note, one at a time, until it fits (the note says what was cut, never silently)."""
    body = dict(content)
    data = encode(body)
    cut: list[str] = []
    for section in CUT_ORDER:
        if len(data) <= cap:
            break
        if section not in body:
            continue
        body[section] = {"cut": f"dropped: the bundle was over its {cap}-byte cap"}
        cut.append(section)
        body["cut"] = list(cut)
        data = encode(body)
    if len(data) > cap:
        raise BundleError(f"bundle is {len(data)} bytes even with {cut} cut (cap {cap})")
    return data, tuple(cut)


class BundleStore:
    """``<state_dir>/evidence/``: write, list, read and prune bundles."""

    def __init__(
        self,
        directory: str | Path,
        *,
        max_bundle_bytes: int,
        max_total_bytes: int,
        keep: int,
    ) -> None:
        self.directory = Path(directory)
        self.max_bundle_bytes = max_bundle_bytes
        self.max_total_bytes = max_total_bytes
        self.keep = keep
        # why the last write failed for want of room (None: it succeeded), and how many bundles
        # were dropped to make room on a full disk: the storage alert reads both
        self.write_failure: str | None = None
        self.dropped_for_space = 0
        self._needed = 0  # the size of the bundle that did not fit

    def write(
        self,
        name: str,
        content: Mapping[str, Any],
        *,
        abandoned: Callable[[], bool] = lambda: False,
    ) -> BundleRef:
        """Write one bundle atomically; ``abandoned`` (the capture timed out) is asked last,
        before the rename, so an abandoned capture leaves no bundle behind."""
        data, cut = fit(content, self.max_bundle_bytes)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.prune(room_for=len(data))
        final = self.directory / name
        tmp = final.with_name(name + TMP_SUFFIX)
        try:
            self._write_file(tmp, data)
        except OSError as first:  # a full disk: drop the oldest bundles and try once more
            self.dropped_for_space += len(self.prune(room_for=len(data), drop_one=True))
            try:
                self._write_file(tmp, data)
            except OSError as exc:
                tmp.unlink(missing_ok=True)
                self.write_failure, self._needed = exc.strerror or str(exc), len(data)
                raise BundleError(f"cannot write {final}: {exc.strerror or exc}") from first
        self.write_failure = None
        if abandoned():
            tmp.unlink(missing_ok=True)
            raise BundleError("capture abandoned at its timeout")
        os.replace(tmp, final)
        return BundleRef(str(final), hashlib.sha256(data).hexdigest(), len(data), cut)

    def failing(self) -> bool:
        """Whether the last bundle could not be written; it clears once the directory has room
        for that bundle again (an operator freed the disk), not only at the next capture."""
        if self.write_failure is None:
            return False
        try:
            room = shutil.disk_usage(self.directory).free
        except OSError:
            return True
        if room > 2 * self._needed:
            self.write_failure = None
        return self.write_failure is not None

    @staticmethod
    def _write_file(path: Path, data: bytes) -> None:
        with open(path, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())

    def bundles(self) -> list[Path]:
        """Every whole bundle, oldest first."""
        try:
            found = [p for p in self.directory.iterdir() if p.name.endswith(SUFFIX)]
        except OSError:
            return []
        return sorted(found, key=_age_key)

    def find(self, run_id: str, phase: str | None = None) -> list[Path]:
        """A run's bundles (of one phase if given), oldest first."""
        prefix = f"{run_id}.{phase}." if phase else f"{run_id}."
        return [p for p in self.bundles() if p.name.startswith(prefix)]

    def last_capture_at(self) -> float | None:
        """When the newest bundle was written (what 'since the last bundle' means)."""
        found = self.bundles()
        if not found:
            return None
        try:
            return found[-1].stat().st_mtime
        except OSError:
            return None

    def prune(self, *, room_for: int = 0, drop_one: bool = False) -> list[str]:
        """Remove leftover temporary files, then the oldest bundles while there are more than
        ``keep`` (counting the one about to be written) or they would exceed the total cap.
        Returns the names removed."""
        removed: list[str] = []
        try:
            for p in self.directory.iterdir():
                if p.name.endswith(TMP_SUFFIX):
                    p.unlink(missing_ok=True)
                    removed.append(p.name)
        except OSError:
            return removed
        found = self.bundles()
        sizes = {p: _size(p) for p in found}
        total = sum(sizes.values()) + room_for
        extra = 1 if room_for else 0
        while found and (
            len(found) + extra > self.keep or total > self.max_total_bytes or drop_one
        ):
            oldest = found.pop(0)
            oldest.unlink(missing_ok=True)
            total -= sizes[oldest]
            removed.append(oldest.name)
            drop_one = False
        return removed


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _age_key(path: Path) -> tuple[float, str]:
    try:
        return (path.stat().st_mtime, path.name)
    except OSError:
        return (0.0, path.name)
