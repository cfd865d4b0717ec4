"""Head rows: one row per poll holding every sample of that poll, packed.

A row per *sample* clustered by series makes every poll touch one B-tree page per series (a
few megabytes of WAL per commit); a row per *poll* touches one or two pages, so a poll's
transaction costs about one page write plus the commit. A row holds two packed arrays of
equal length: series ids (int32) and values (float64), both little-endian. Consecutive
polls nearly always carry the same series in the same order, so ``Layouts`` caches the
id → position map per distinct id array and a look-up is one dict access.
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Sequence
from typing import Any, TypeVar

_BIG_ENDIAN = sys.byteorder == "big"
_LAYOUT_CACHE_LIMIT = 64
_A = TypeVar("_A", bound="array[Any]")


def pack_ids(ids: Sequence[int]) -> bytes:
    return _little_endian(array("i", ids)).tobytes()


def pack_values(values: Sequence[float]) -> bytes:
    return _little_endian(array("d", values)).tobytes()


def unpack_values(blob: bytes) -> array[float]:
    return _unpack("d", blob)


def unpack_ids(blob: bytes) -> array[int]:
    return _unpack("i", blob)


def _unpack(code: str, blob: bytes) -> array[Any]:
    arr = array(code)
    arr.frombytes(blob)
    return _little_endian(arr)


def _little_endian(arr: _A) -> _A:
    """The stored byte order from the host's, or back (a swap is its own inverse)."""
    if _BIG_ENDIAN:
        arr.byteswap()
    return arr


class Layouts:
    """Packed id arrays → {series id: position}, cached (polls repeat their layout)."""

    def __init__(self) -> None:
        self._cache: dict[bytes, dict[int, int]] = {}

    def positions(self, ids_blob: bytes) -> dict[int, int]:
        found = self._cache.get(ids_blob)
        if found is None:
            if len(self._cache) >= _LAYOUT_CACHE_LIMIT:
                self._cache.clear()
            found = {sid: i for i, sid in enumerate(unpack_ids(ids_blob))}
            self._cache[ids_blob] = found
        return found
