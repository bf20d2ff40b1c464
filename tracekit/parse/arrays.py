"""Column helpers shared by the table builders: read an accumulated column once, take
rows of numpy or Arrow columns, label codes, and cast a column dict to a schema table.

String columns travel dictionary-encoded; they are materialised once, in the final cast
to the schema's ``string`` type (or, for a lazy build, slice by slice by the writer).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from tracekit.parse.columns import Accumulator
from tracekit.schema import ARROW

I64 = npt.NDArray[np.int64]
B = npt.NDArray[np.bool_]


def pop_column(acc: Accumulator, kind: int, name: str, n: int, dtype: Any = np.int64) -> Any:
    """The column ``name`` of ``kind`` (zeros or nulls if absent), freed in ``acc``: each
    accumulated column is read once."""
    col = acc.pop(kind, name)
    if col is None:
        return np.zeros(n, dtype=dtype) if dtype is not None else pa.nulls(n, pa.string())
    return col


def take(col: Any, idx: I64) -> Any:
    """Rows ``idx`` of a numpy array or an Arrow (chunked) array."""
    if isinstance(col, np.ndarray):
        return col[idx]
    col = dense(col)
    return col.take(pa.array(idx)) if len(idx) else col.slice(0, 0)


def take_nullable(col: Any, idx: I64) -> Any:
    """Take with -1 meaning null."""
    if len(col) == 0:
        return pa.nulls(len(idx), col.type)
    return col.take(pa.array(idx, mask=idx < 0))


def dense(col: Any) -> Any:
    """One contiguous array (dictionary chunks are unified)."""
    return col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col


def str_test(col: Any, fn: Any) -> B:
    """Boolean numpy result of a string predicate, evaluated once per distinct value for
    dictionary arrays; null is False."""
    arr = dense(col)
    res = fn(arr.dictionary).take(arr.indices) if pa.types.is_dictionary(arr.type) else fn(arr)
    return np.asarray(pc.fill_null(res, False).to_numpy(zero_copy_only=False), dtype=bool)


def labels(codes: npt.NDArray[np.int8], names: dict[int, str], default: str) -> pa.Array:
    """String column: ``names[code]``, else ``default``; taken from the few distinct labels
    (building a numpy string array and converting it costs ~10x more)."""
    size = max([*names, int(codes.max()) if len(codes) else 0]) + 1
    lookup = pa.array([names.get(k, default) for k in range(size)], type=pa.string())
    # Dictionary-encoded: to_table casts it to plain strings unless the build is lazy.
    return pa.DictionaryArray.from_arrays(pa.array(codes.astype(np.int32)), lookup)


def to_table(name: str, cols: dict[str, Any], lazy: bool = False) -> pa.Table:
    """The table in the schema's types; with ``lazy``, dictionary-encoded string columns
    stay dictionary-encoded (millions of repeated operator and kernel names would take
    gigabytes as plain strings): :func:`materialize` or a sliced cast turns them into the
    schema's type."""
    schema = ARROW[name]
    arrays = []
    for f in schema:
        v = cols[f.name]
        arr = pa.array(v, type=f.type) if isinstance(v, np.ndarray) else v
        if isinstance(arr, pa.ChunkedArray):
            arr = arr.combine_chunks()
        keep = lazy and pa.types.is_dictionary(arr.type) and arr.type.value_type == f.type
        if arr.type != f.type and not keep:
            arr = arr.cast(f.type)
        arrays.append(arr)
    if lazy:
        return pa.Table.from_arrays(arrays, names=schema.names)
    return pa.Table.from_arrays(arrays, schema=schema)


def materialize(name: str, table: pa.Table) -> pa.Table:
    """``table`` (possibly from a lazy build) in exactly the schema's types."""
    schema = ARROW[name]
    return table if table.schema.equals(schema) else table.cast(schema)
