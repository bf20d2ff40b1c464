"""Forgiving converters from decoded JSON values (msgspec path) to typed columns.

Each one tries one vectorized conversion (pyarrow/numpy) and only if the values have
unexpected types falls back to a per-value path, so a malformed event costs time only
where it occurs and never a crash. A value that is present but unreadable (text that is
not a number, an integer beyond the column's range, a list where a number belongs ...)
becomes the column's missing value (``-1`` or null, as an absent key would) and is
counted: the converters return ``(column, bad)``, and the parse reports the counts in
``meta.json`` (``bad_values``).
"""

from __future__ import annotations

import functools
from decimal import Decimal
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

I64 = npt.NDArray[np.int64]
B = npt.NDArray[np.bool_]
_INT64 = pa.int64()
_RANGE = {pa.int64(): (-(1 << 63), (1 << 63) - 1), pa.int32(): (-(1 << 31), (1 << 31) - 1)}
_MAX_US = 9.2e15  # beyond int64 nanoseconds (9.22e18 ns): an unreadable time


@functools.cache
def _thousand() -> pa.Scalar:
    # Built on first use, not at import: pyarrow's first conversion probes for (imports) pandas.
    return pa.scalar(Decimal(1000), pa.decimal128(4, 0))


def to_ns(values: list[Any]) -> tuple[I64, B]:
    """Microsecond values (int, decimal text, float or None) to exact int64 ns.

    Returns the values and a validity mask (false where missing, unreadable or beyond
    int64 ns). Decimal text is converted through Arrow's decimal cast, so
    ``"1712195495519689.047"`` becomes exactly ``1712195495519689047`` ns:
    nanosecond-resolution traces keep their precision.
    """
    n = len(values)
    types = set(map(type, values))
    if types <= {int}:
        try:
            return np.asarray(values, dtype=np.int64) * 1000, np.ones(n, dtype=bool)
        except OverflowError:
            pass
    if types <= {str}:
        valid = np.ones(n, dtype=bool)
        text: list[Any] = values
    else:
        valid = np.fromiter((type(v) in (int, float, str) for v in values), dtype=bool, count=n)
        text = [
            v if type(v) is str else (str(v) if type(v) in (int, float) else None) for v in values
        ]
    arr = pa.array(text, type=pa.string())
    try:
        ns = pc.cast(pc.multiply(pc.cast(arr, pa.decimal128(21, 3)), _thousand()), pa.int64())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        try:
            f = pc.cast(arr, pa.float64())
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            f = pa.array([_float_or_none(t) for t in text], type=pa.float64())
        us = np.asarray(f.to_numpy(zero_copy_only=False), dtype=np.float64)  # null: NaN
        with np.errstate(invalid="ignore"):
            valid &= np.abs(us) < _MAX_US  # False for NaN
        us = pa.array(np.where(valid, us, 0.0))
        ns = pc.cast(pc.round(pc.multiply(us, 1000.0)), pa.int64(), safe=False)
    out = np.array(pc.fill_null(ns, 0).to_numpy(zero_copy_only=False), dtype=np.int64)
    valid &= np.asarray(pc.is_valid(ns).to_numpy(zero_copy_only=False), dtype=bool)
    return out, valid


def _float_or_none(t: str | None) -> float | None:
    if t is None:
        return None
    try:
        v = float(t)
    except ValueError:
        return None
    return v if np.isfinite(v) else None


def _int(v: Any, lo: int, hi: int) -> int | None:
    """``v`` as an integer in ``[lo, hi]`` (numeric text and finite floats truncated);
    None if it is not a number or out of range."""
    if type(v) is int:
        r = v
    elif type(v) is str:
        try:
            r = int(float(v))
        except (ValueError, OverflowError):
            return None
    elif type(v) is float and np.isfinite(v):
        r = int(v)
    else:
        return None
    return r if lo <= r <= hi else None


def _bad(values: list[Any], out: list[Any]) -> int:
    """Values present in the trace that converted to nothing."""
    return sum(1 for v, r in zip(values, out, strict=True) if r is None and v is not None)


def ints(values: list[Any], default: int = -1) -> tuple[I64, int]:
    """Integer column with ``default`` for missing or unreadable values."""
    try:
        arr = pa.array(values, type=pa.int64())
        if arr.null_count:
            arr = pc.fill_null(arr, default)
        return np.array(arr.to_numpy(zero_copy_only=False), dtype=np.int64), 0
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
        lo, hi = _RANGE[_INT64]
        got = [_int(v, lo, hi) for v in values]
        col = np.fromiter((default if r is None else r for r in got), np.int64, len(values))
        return col, _bad(values, got)


def nullable_ints(values: list[Any], type_: pa.DataType = _INT64) -> tuple[pa.Array, int]:
    """Integer column (int64 or int32) with nulls for missing or unreadable values."""
    try:
        return pa.array(values, type=type_), 0
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
        lo, hi = _RANGE[type_]
        got = [_int(v, lo, hi) for v in values]
        return pa.array(got, type=type_), _bad(values, got)


def _float(v: Any) -> float | None:
    if type(v) is int:
        try:
            return float(v)
        except OverflowError:
            return None
    if type(v) is float:
        return v if np.isfinite(v) else None
    if type(v) is str:
        return _float_or_none(v)
    return None


def floats(values: list[Any]) -> tuple[pa.Array, int]:
    """Float column (decimal text accepted) with nulls for missing or unreadable values."""
    try:
        return pa.array(values, type=pa.float64()), 0
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
        got = [_float(v) for v in values]
        return pa.array(got, type=pa.float64()), _bad(values, got)


def strings(values: list[Any]) -> pa.Array:
    """String column; non-string values become their text, missing ones null."""
    try:
        return pa.array(values, type=pa.string())
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):
        return pa.array(
            [v if type(v) is str else (None if v is None else str(v)) for v in values],
            type=pa.string(),
        )


def raws(values: list[Any]) -> pa.Array:
    """JSON text of raw (undecoded) values; null where the key was absent. msgspec does
    not check the text of a raw value: bytes that are not UTF-8 read as U+FFFD.

    Built from one joined buffer and an offsets array, without a bytes object per value.
    """
    try:
        return _raws(values)
    except pa.ArrowInvalid:  # invalid UTF-8
        text = [bytes(v).decode("utf-8", "replace") if len(v) else None for v in values]
        return pa.array(text, type=pa.string())


def _raws(values: list[Any]) -> pa.Array:
    n = len(values)
    lens = np.fromiter(map(len, values), dtype=np.int64, count=n)
    if not lens.any():
        return pa.nulls(n, pa.string())
    data = b"".join(values)
    if len(data) < (1 << 31) - 1:
        offsets = np.zeros(n + 1, dtype=np.int32)
        np.cumsum(lens, out=offsets[1:])
        valid = lens > 0
        nulls = int(n - np.count_nonzero(valid))
        bitmap = pa.py_buffer(np.packbits(valid, bitorder="little")) if nulls else None
        arr = pa.Array.from_buffers(
            pa.binary(), n, [bitmap, pa.py_buffer(offsets), pa.py_buffer(data)], null_count=nulls
        )
        return arr.cast(pa.string())
    arr = pa.array(list(map(bytes, values)), type=pa.binary())
    empty = pc.equal(pc.binary_length(arr), 0)
    return pc.if_else(empty, pa.scalar(None, pa.binary()), arr).cast(pa.string())


Triple = tuple[pa.Array, pa.Array, pa.Array]


def triples(values: list[Any]) -> tuple[Triple, int]:
    """Split ``[x, y, z]`` lists (grid, block) into three nullable int32 columns; a value
    that is not three integers in int32 range is null in all three."""
    n = len(values)
    lo, hi = _RANGE[pa.int32()]
    try:
        filled = [v if v is not None else (0, 0, 0) for v in values]
        arr = np.asarray(filled, dtype=np.int64)
        if arr.shape != (n, 3) or (n and (arr.min() < lo or arr.max() > hi)):
            raise ValueError
        mask = np.fromiter((v is None for v in values), dtype=bool, count=n)
        x, y, z = (pa.array(arr[:, i].astype(np.int32), mask=mask) for i in range(3))
        return (x, y, z), 0
    except (TypeError, ValueError, OverflowError):
        cols: list[list[int | None]] = [[], [], []]
        bad = 0
        for v in values:
            ok = (
                isinstance(v, list)
                and len(v) == 3
                and all(type(i) is int and lo <= i <= hi for i in v)
            )
            bad += v is not None and not ok
            for i in range(3):
                cols[i].append(v[i] if ok else None)
        x, y, z = (pa.array(c, type=pa.int32()) for c in cols)
        return (x, y, z), bad
