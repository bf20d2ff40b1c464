"""Turn decoded event chunks into columns, one group of columns per event kind.

A chunk is either msgspec structs (:class:`_Picker` reads them through the forgiving
converters of :mod:`tracekit.parse.convert`) or the native scanner's flat rows
(:class:`_ScanRows`); both present the same interface (:class:`_Rows`), so each kind's
columns are defined once, in :meth:`Accumulator._extract` and the ``_*_columns``
functions below: add a column there (and to ``tracekit.schema``) to keep it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from operator import attrgetter
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt
import pyarrow as pa
from msgspec.structs import astuple

from tracekit.parse.convert import floats, ints, nullable_ints, raws, strings, to_ns, triples
from tracekit.parse.events import (
    ANNOT,
    CAT_KIND,
    DRIVER,
    EVENT_FIELDS,
    FLOW_END,
    GPU_ANNOT,
    JSON_KEYS,
    KERNEL,
    KIND_LABELS,
    KIND_NAMES,
    MEMCPY,
    MEMORY,
    MEMSET,
    OP,
    OTHER,
    PYMODULE,
    RUNTIME,
    Event,
)
from tracekit.parse.scan import Scanned

I64 = npt.NDArray[np.int64]
B = npt.NDArray[np.bool_]
_INT64 = pa.int64()


class _CatLookup(dict[Any, int]):
    """Category -> kind, case-insensitively; unknown categories are OTHER (and cached)."""

    def __missing__(self, key: Any) -> int:
        kind = CAT_KIND.get(key.lower(), OTHER) if isinstance(key, str) else OTHER
        if isinstance(key, str):
            self[key] = kind
        return kind


_CAT_LOOKUP = _CatLookup(CAT_KIND)


def _col(objs: Sequence[Any], attr: str) -> list[Any]:
    return list(map(attrgetter(attr), objs))


_MODULE = "nn.Module: "  # python_function frames of nn.Modules carry the module path


def _objects(values: tuple[Any, ...]) -> npt.NDArray[np.object_]:
    """A 1-d object array (never 2-d, even when the values are equal-length lists)."""
    return np.fromiter(values, dtype=object, count=len(values))


class _Rows(Protocol):
    """The events of one kind in one chunk, as the columns :meth:`Accumulator._extract`
    needs. Field names are :class:`~tracekit.parse.events.Event` / ``Args`` attributes."""

    bad: dict[str, int]  # field -> values present but unreadable (read as missing)

    def __len__(self) -> int: ...

    def keep(self, mask: B) -> None:
        """Keep only the rows where ``mask``."""

    def ns(self, name: str) -> tuple[I64, B]:
        """A microsecond field as exact ns and its validity (see :func:`to_ns`)."""
        ...

    def ints(self, name: str, default: int = -1) -> I64: ...

    def ints_or(self, name: str, other: str) -> I64:
        """``name``, or the event field ``other`` where ``name`` is missing."""
        ...

    def nullable_ints(self, name: str, type_: pa.DataType = _INT64) -> pa.Array: ...

    def floats(self, name: str) -> pa.Array: ...

    def strings(self, name: str) -> pa.Array:
        """A string field, dictionary-encoded."""
        ...

    def raws(self, name: str) -> pa.Array:
        """The raw JSON text of a field, dictionary-encoded."""
        ...

    def triples(self, name: str) -> tuple[pa.Array, pa.Array, pa.Array]: ...

    def module_frames(self) -> B:
        """Rows whose name is an nn.Module frame."""
        ...


class _Picker:
    """The events ``idx`` of a chunk decoded by msgspec (see :class:`_Rows`)."""

    def __init__(
        self,
        fields: dict[str, tuple[Any, ...]],
        cache: dict[str, npt.NDArray[np.object_]],
        idx: npt.NDArray[np.intp],
    ) -> None:
        self.fields = fields
        self.cache = cache
        self.idx = idx
        self._args: list[Any] | None = None
        self.bad: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self.idx)

    def keep(self, mask: B) -> None:
        self.idx = self.idx[mask]
        self._args = None

    def _event(self, name: str) -> list[Any]:
        arr = self.cache.get(name)
        if arr is None:
            arr = self.cache[name] = _objects(self.fields[name])
        return arr[self.idx].tolist()  # type: ignore[no-any-return]

    def _values(self, name: str) -> list[Any]:
        if name in EVENT_FIELDS:
            return self._event(name)
        if self._args is None:
            self._args = self._event("args")
        return _col(self._args, name)

    def ns(self, name: str) -> tuple[I64, B]:
        return to_ns(self._values(name))

    def _note(self, name: str, bad: int) -> None:
        if bad:
            self.bad[name] = self.bad.get(name, 0) + bad

    def ints(self, name: str, default: int = -1) -> I64:
        col, bad = ints(self._values(name), default)
        self._note(name, bad)
        return col

    def ints_or(self, name: str, other: str) -> I64:
        pairs = zip(self._values(name), self._event(other), strict=True)
        col, bad = ints([a if a is not None else b for a, b in pairs])
        self._note(name, bad)
        return col

    def nullable_ints(self, name: str, type_: pa.DataType = _INT64) -> pa.Array:
        col, bad = nullable_ints(self._values(name), type_)
        self._note(name, bad)
        return col

    def floats(self, name: str) -> pa.Array:
        col, bad = floats(self._values(name))
        self._note(name, bad)
        return col

    def strings(self, name: str) -> pa.Array:
        return strings(self._values(name)).dictionary_encode()

    def raws(self, name: str) -> pa.Array:
        return raws(self._values(name)).dictionary_encode()

    def triples(self, name: str) -> tuple[pa.Array, pa.Array, pa.Array]:
        col, bad = triples(self._values(name))
        self._note(name, bad)
        return col

    def module_frames(self) -> B:
        names = self._event("name")
        return np.fromiter(
            (type(n) is str and n.startswith(_MODULE) for n in names), dtype=bool, count=len(names)
        )


class _ScanRows:
    """The rows ``idx`` of a chunk read by the native scanner (see :class:`_Rows`): the
    same columns from flat arrays, without a Python object per value."""

    def __init__(self, chunk: Scanned, idx: npt.NDArray[np.intp]) -> None:
        self.chunk = chunk
        self.rows = chunk.rows
        self.idx = idx
        self.present = self.rows["present"][idx]
        self.bad: dict[str, int] = {}  # the scanner declines chunks with unreadable values

    def __len__(self) -> int:
        return len(self.idx)

    def keep(self, mask: B) -> None:
        self.idx = self.idx[mask]
        self.present = self.present[mask]

    def _has(self, name: str) -> B:
        return self.chunk.has(name, self.present)

    def _get(self, name: str) -> Any:
        return self.rows[name][self.idx]

    def ns(self, name: str) -> tuple[I64, B]:
        return self._get(name), self._has(name)  # the scanner writes 0 where invalid

    def ints(self, name: str, default: int = -1) -> I64:
        v, has = self._get(name), self._has(name)
        return v if has.all() else np.where(has, v, default)  # type: ignore[no-any-return]

    def ints_or(self, name: str, other: str) -> I64:
        return np.where(self._has(name), self._get(name), self.ints(other))

    def _mask(self, name: str) -> B | None:
        has = self._has(name)
        return None if has.all() else ~has

    def nullable_ints(self, name: str, type_: pa.DataType = _INT64) -> pa.Array:
        return pa.array(self._get(name), type=type_, mask=self._mask(name))

    def floats(self, name: str) -> pa.Array:
        return pa.array(self._get(name).astype(np.float64), mask=self._mask(name))

    def strings(self, name: str) -> pa.Array:
        return self.chunk.dictionary(self._get(name))

    raws = strings  # raw JSON text is interned like names

    def triples(self, name: str) -> tuple[pa.Array, pa.Array, pa.Array]:
        v, mask = self._get(name), ~self._has(name)
        x, y, z = (pa.array(np.ascontiguousarray(v[:, i]), mask=mask) for i in range(3))
        return x, y, z

    def module_frames(self) -> B:
        return self.chunk.starts_with(self._get("name"), _MODULE)


Columns = dict[str, Any]  # name -> list of per-chunk arrays (np.ndarray or pa.Array)


def _memory_columns(ev: _Rows) -> Columns:
    return {
        "pid": ev.ints("pid"),
        "tid": ev.ints("tid"),
        "device_type": ev.ints("device_type"),
        "device": ev.ints("device_id"),
        "addr": ev.ints("addr", 0),
        "bytes": ev.ints("mem_bytes", 0),
        "total_allocated": ev.nullable_ints("total_allocated"),
        "total_reserved": ev.nullable_ints("total_reserved"),
    }


def _gpu_columns(kind: int, ev: _Rows) -> Columns:
    cols = {
        "kind": np.full(len(ev), kind, dtype=np.int8),
        "device": ev.ints_or("device", "pid"),
        "stream": ev.ints_or("stream", "tid"),
        "correlation": ev.ints("correlation"),
        "external_id": ev.ints("external_id"),
        "registers_per_thread": ev.nullable_ints("registers", pa.int32()),
        "shared_memory": ev.nullable_ints("shared_memory"),
        "bytes": ev.nullable_ints("nbytes"),
    }
    for prefix in ("grid", "block"):
        x, y, z = ev.triples(prefix)
        cols[f"{prefix}_x"], cols[f"{prefix}_y"], cols[f"{prefix}_z"] = x, y, z
    return cols


def _op_columns(kind: int, ev: _Rows) -> Columns:
    return {
        "category": np.full(len(ev), kind, dtype=np.int8),
        "pid": ev.ints("pid"),
        "tid": ev.ints("tid"),
        "external_id": ev.ints("external_id"),
        "sequence_number": ev.ints("seq"),
        "fwd_thread_id": ev.ints("fwd_tid"),
        "input_dims": ev.raws("input_dims"),
        "input_types": ev.raws("input_types"),
        "input_strides": ev.raws("input_strides"),
        "concrete_inputs": ev.raws("concrete"),
        "flops": ev.floats("flops"),
    }


def _runtime_columns(kind: int, ev: _Rows) -> Columns:
    return {
        "category": np.full(len(ev), kind, dtype=np.int8),
        "pid": ev.ints("pid"),
        "tid": ev.ints("tid"),
        "correlation": ev.ints("correlation"),
        "external_id": ev.ints("external_id"),
        "cbid": ev.ints("cbid"),
    }


# Columns per kind of "X" (span) event, besides ts, dur and name.
_SPAN_COLUMNS: dict[int, Callable[[int, _Rows], Columns]] = {
    KERNEL: _gpu_columns,
    MEMCPY: _gpu_columns,
    MEMSET: _gpu_columns,
    OP: _op_columns,
    ANNOT: _op_columns,
    RUNTIME: _runtime_columns,
    DRIVER: _runtime_columns,
    PYMODULE: lambda kind, ev: {"pid": ev.ints("pid"), "tid": ev.ints("tid")},
    GPU_ANNOT: lambda kind, ev: {"device": ev.ints("pid")},
}
_TABLE_KIND = {ANNOT: OP, DRIVER: RUNTIME}  # kinds accumulated with another kind's rows


class Accumulator:
    """Collects per-kind columns over all chunks of one trace."""

    def __init__(self) -> None:
        self.tables: dict[int, dict[str, list[Any]]] = {}
        self.raw_counts: dict[str, int] = {}
        self.dropped: dict[str, int] = {}
        self.bad: dict[str, int] = {}  # "category.key" -> values read as missing
        self.metadata: list[tuple[str, Any, Any, Any]] = []  # (name, pid, tid, args.name)
        self.python_events = 0  # python_function events (with_stack), before filtering
        self.rows: dict[int, int] = {}  # kind -> rows added (kept when columns are freed)
        self.comms: list[Any] = []  # tracekit.parse.comms.CommEvent, in file order

    def _put(self, kind: int, cols: dict[str, Any]) -> None:
        t = self.tables.setdefault(kind, {})
        for k, v in cols.items():
            t.setdefault(k, []).append(v)
        self.rows[kind] = self.rows.get(kind, 0) + len(cols["ts"])

    def add(self, events: list[Event] | Scanned) -> None:
        """Add one chunk: msgspec structs, or the native scanner's rows (same columns)."""
        if not isinstance(events, list):  # the native scanner's Scanned
            self.metadata.extend(events.metadata)
            kinds = np.ascontiguousarray(events.rows["kind"])  # rows are 224 bytes apart
            for kind in np.unique(kinds):
                self._extract(int(kind), _ScanRows(events, np.flatnonzero(kinds == kind)))
            return
        if not events:
            return
        # One C-level pass turns the structs into per-field tuples (astuple + zip): ~3x
        # cheaper than one attrgetter pass per field.
        fields: dict[str, tuple[Any, ...]] = dict(
            zip(EVENT_FIELDS, zip(*map(astuple, events), strict=True), strict=True)
        )
        ph = _objects(fields["ph"])
        cat_list = fields["cat"]
        name = fields["name"]
        try:
            kinds = np.array(list(map(_CAT_LOOKUP.__getitem__, cat_list)), dtype=np.int8)
        except TypeError:  # unhashable category values in a malformed trace
            kinds = np.array(
                [_CAT_LOOKUP[c] if isinstance(c, str) else OTHER for c in cat_list], dtype=np.int8
            )
        is_x = ph == "X"
        timed = kinds != OTHER
        kinds[timed & ~is_x] = OTHER
        # Instant [memory] events and fwdbwd flow ends are recognised by phase and name/category.
        inst = np.flatnonzero(ph == "i")
        if len(inst):
            mem = inst[np.array([name[i] == "[memory]" for i in inst], dtype=bool)]
            kinds[mem] = MEMORY
        fl = np.flatnonzero(ph == "f")
        if len(fl):
            kinds[fl[np.array([cat_list[i] == "fwdbwd" for i in fl], dtype=bool)]] = FLOW_END
        pids, tids, args_all = fields["pid"], fields["tid"], fields["args"]
        for i in np.flatnonzero(ph == "M"):
            self.metadata.append((str(name[i]), pids[i], tids[i], args_all[i].name))

        cache: dict[str, npt.NDArray[np.object_]] = {}
        for kind in np.unique(kinds):
            if kind == OTHER:
                continue
            self._extract(int(kind), _Picker(fields, cache, np.flatnonzero(kinds == kind)))

    def _extract(self, kind: int, ev: _Rows) -> None:
        ts = self._timed(kind, ev)
        if ts is None:
            return
        cols: dict[str, Any] = {"ts": ts}
        if kind == FLOW_END:
            cols.update(pid=ev.ints("pid"), tid=ev.ints("tid"))
        elif kind == MEMORY:
            cols.update(_memory_columns(ev))
        else:
            dur, dok = ev.ns("dur")
            dur[~dok] = 0
            cols["dur"] = np.maximum(dur, 0)
            # Repeated strings travel and accumulate dictionary-encoded (a fraction of the bytes).
            cols["name"] = ev.strings("name")
            cols.update(_SPAN_COLUMNS[kind](kind, ev))
        label = KIND_LABELS.get(kind, str(kind))
        for name, n in ev.bad.items():
            key = f"{label}.{JSON_KEYS.get(name, name)}"
            self.bad[key] = self.bad.get(key, 0) + n
        self._put(_TABLE_KIND.get(kind, kind), cols)

    def _timed(self, kind: int, ev: _Rows) -> I64 | None:
        """Count the events, keep those with a readable ``ts`` (and, of Python frames, only
        nn.Module frames) and return their ts; None if none is left."""
        key = KIND_NAMES.get(kind)
        if key is not None:
            self.raw_counts[key] = self.raw_counts.get(key, 0) + len(ev)
        ts, ok = ev.ns("ts")
        if kind == PYMODULE:
            self.python_events += len(ev)
            # Only nn.Module frames carry the module path; other Python frames are dropped.
            keep = ev.module_frames() & ok
            if not keep.any():
                return None
            ev.keep(keep)
            ts, ok = ts[keep], ok[keep]
        if not ok.all():
            label = KIND_NAMES.get(kind, str(kind))
            self.dropped[label] = self.dropped.get(label, 0) + int((~ok).sum())
            ev.keep(ok)
            ts = ts[ok]
        return ts if len(ev) else None

    def merge(self, other: Accumulator) -> None:
        """Append ``other``'s columns (a later chunk's) as if its events had been added here."""
        for kind, cols in other.tables.items():
            t = self.tables.setdefault(kind, {})
            for k, parts in cols.items():
                t.setdefault(k, []).extend(parts)
        for k, v in other.raw_counts.items():
            self.raw_counts[k] = self.raw_counts.get(k, 0) + v
        for k, v in other.dropped.items():
            self.dropped[k] = self.dropped.get(k, 0) + v
        for k, v in other.bad.items():
            self.bad[k] = self.bad.get(k, 0) + v
        for kind, n in other.rows.items():
            self.rows[kind] = self.rows.get(kind, 0) + n
        self.metadata.extend(other.metadata)
        self.python_events += other.python_events
        self.comms.extend(other.comms)

    def column(self, kind: int, name: str) -> Any:
        """The whole column: a numpy array or a pyarrow ChunkedArray (or None if absent)."""
        parts = self.tables.get(kind, {}).get(name)
        if not parts:
            return None
        if isinstance(parts[0], np.ndarray):
            return np.concatenate(parts)
        return pa.chunked_array(parts)

    def pop(self, kind: int, name: str) -> Any:
        """:meth:`column`, and free the accumulated parts (for a column read once)."""
        col = self.column(kind, name)
        self.tables.get(kind, {}).pop(name, None)
        return col

    def drop(self, *kinds: int) -> None:
        """Free the columns of ``kinds`` (once their table is built); counts stay."""
        for kind in kinds:
            self.tables.pop(kind, None)

    def count(self, kind: int) -> int:
        return self.rows.get(kind, 0)
