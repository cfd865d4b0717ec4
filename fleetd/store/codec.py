"""Compact, exact encoding of numeric columns, for compressed sample and rollup chunks.

A chunk is a few parallel columns of the same length (timestamps and values of one series,
or the fields of its rollups). Each column picks the smallest exact representation:

* ``CONST``   every value equal: stored once (runs of unchanged values cost nothing);
* ``INT``     integral values: first value then deltas, as int64;
* ``DECIMAL`` values with at most six decimal digits (``v == n / 10**k``): scaled to
  integers, then deltas as int64;
* ``FLOAT``   anything else (including NaN and infinities): the raw float64 bits.

The int64/float64 payloads are byte-shuffled (all first bytes, then all second bytes, …) so
the mostly-zero high bytes of small deltas form long runs, and the whole chunk goes through
zlib once. Decoding never loses a bit of a value: ``decode(encode(cols)) == cols``. The work
is done by ``array``, ``itertools`` and ``zlib`` at C speed; Python touches only columns.
"""

from __future__ import annotations

import operator
import struct
import sys
import zlib
from array import array
from collections.abc import Sequence
from itertools import accumulate, islice

from fleetd.errors import StoreError

FORMAT_VERSION = 1
CONST, INT, DECIMAL, FLOAT = 0, 1, 2, 3
_MAX_EXACT_INT = 2**53
_MAX_DECIMALS = 6
_HEADER = struct.Struct("<BBI")  # format version, column count, row count
_COLUMN = struct.Struct("<BB")  # kind, decimals
_BIG_ENDIAN = sys.byteorder == "big"
_ZLIB_LEVEL = 6


def _to_le(arr: array) -> bytes:  # type: ignore[type-arg]
    if _BIG_ENDIAN:
        arr = array(arr.typecode, arr)
        arr.byteswap()
    return arr.tobytes()


def _from_le(typecode: str, data: bytes) -> array:  # type: ignore[type-arg]
    arr = array(typecode)
    arr.frombytes(data)
    if _BIG_ENDIAN:
        arr.byteswap()
    return arr


def _shuffle(data: bytes) -> bytes:
    return b"".join(data[i::8] for i in range(8))


def _unshuffle(data: bytes, n: int) -> bytes:
    out = bytearray(8 * n)
    for i in range(8):
        out[i::8] = data[i * n : (i + 1) * n]
    return bytes(out)


def _deltas(ints: Sequence[int]) -> array:  # type: ignore[type-arg]
    out = array("q", islice(ints, 0, 1))
    out.extend(map(operator.sub, islice(ints, 1, None), ints))
    return out


def _integral(values: Sequence[float]) -> bool:
    as_floats = list(map(float, values))
    return (
        all(map(float.is_integer, as_floats))
        and max(as_floats) < _MAX_EXACT_INT
        and min(as_floats) > -_MAX_EXACT_INT
    )


def _decimals(values: Sequence[float]) -> int | None:
    """The fewest decimals ``k`` with ``round(v * 10**k) / 10**k == v`` for every value."""
    if not all(map(float.__eq__, values, values)) or max(map(abs, values)) >= 1e9:
        return None  # NaN never equals itself; large magnitudes lose exactness when scaled
    probe = values[:16]
    for k in range(1, _MAX_DECIMALS + 1):
        scale = 10.0**k
        if all(round(v * scale) / scale == v for v in probe) and all(
            round(v * scale) / scale == v for v in values
        ):
            return k
    return None


def _encode_column(values: Sequence[float]) -> tuple[int, int, bytes]:
    first = values[0]
    if values.count(first) == len(values) and first == first:
        return CONST, 0, _to_le(array("d", [first]))
    if _integral(values):
        return INT, 0, _shuffle(_to_le(_deltas([int(v) for v in values])))
    k = _decimals(values)
    if k is not None:
        scale = 10.0**k
        return DECIMAL, k, _shuffle(_to_le(_deltas([round(v * scale) for v in values])))
    return FLOAT, 0, _shuffle(_to_le(array("d", values)))


def encode(columns: Sequence[Sequence[float]]) -> bytes:
    """Parallel columns of equal, non-zero length → one compressed blob."""
    if not columns:
        raise ValueError("encode needs at least one column")
    n = len(columns[0])
    if n == 0 or any(len(c) != n for c in columns):
        raise ValueError("columns must be non-empty and of equal length")
    header = [_HEADER.pack(FORMAT_VERSION, len(columns), n)]
    payloads = []
    for column in columns:
        kind, decimals, payload = _encode_column(column)
        header.append(_COLUMN.pack(kind, decimals))
        payloads.append(payload)
    return b"".join(header) + zlib.compress(b"".join(payloads), _ZLIB_LEVEL)


def decode(blob: bytes, only: Sequence[int] | None = None) -> tuple[list[float], ...]:
    """A blob from ``encode`` → its columns (INT columns come back as Python ints).

    With ``only``, just those column indexes are decoded and returned, in that order.
    """
    try:
        version, ncols, n = _HEADER.unpack_from(blob, 0)
        if version != FORMAT_VERSION:
            raise StoreError(f"chunk format {version} is not supported (expected {FORMAT_VERSION})")
        offset = _HEADER.size + _COLUMN.size * ncols
        header = blob[_HEADER.size : offset]
        kinds = [(header[2 * i], header[2 * i + 1]) for i in range(ncols)]
        payload = zlib.decompress(blob[offset:])
    except (struct.error, zlib.error) as exc:
        raise StoreError(f"corrupt chunk: {exc}") from exc
    starts = []
    pos = 0
    for kind, _ in kinds:
        starts.append(pos)
        pos += 8 if kind == CONST else 8 * n
    wanted = range(ncols) if only is None else only
    return tuple(_decode_column(payload, starts[i], kinds[i][0], kinds[i][1], n) for i in wanted)


def _decode_column(payload: bytes, pos: int, kind: int, decimals: int, n: int) -> list[float]:
    if kind == CONST:
        return [_from_le("d", payload[pos : pos + 8])[0]] * n
    part = payload[pos : pos + 8 * n]
    if kind == FLOAT:
        out: list[float] = _from_le("d", _unshuffle(part, n)).tolist()
        return out
    ints = list(accumulate(_from_le("q", _unshuffle(part, n))))
    if kind == INT:
        return ints  # ints stand in for floats: exact, and cheaper
    if kind == DECIMAL:
        scale = 10.0**decimals
        return [i / scale for i in ints]
    raise StoreError(f"corrupt chunk: unknown column kind {kind}")
