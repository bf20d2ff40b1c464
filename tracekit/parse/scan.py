"""Python side of the native chunk scanner (``tracekit.parse._scan``, C).

:func:`scan_chunk` turns one chunk of the events array (the bytes a worker would decode
with msgspec) into a :class:`Scanned`: one flat row per event that tracekit keeps (kind,
exact ns timestamps, integer args with a presence bit, string codes) plus the chunk's
distinct strings, without a Python object per event or field. The C code releases the
GIL while it scans.

The scanner accepts only what it reproduces exactly; anything else (a value of a type or
range the column code treats specially, invalid JSON, ...) returns ``None`` and the caller
decodes the chunk with msgspec as before, so the output never depends on which path ran.
``TRACEKIT_NO_SCAN=1`` turns the scanner off; without a compiled extension it is off.
"""

from __future__ import annotations

import os
import threading
from collections import Counter
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from tracekit.parse.events import CAT_KIND, EVENT_LIST, loads

try:
    import tracekit.parse._scan as _scan
except ImportError:  # not compiled (e.g. no C compiler): the msgspec path does everything
    _scan = None  # type: ignore[assignment]

_CATEGORIES = tuple((name.encode(), kind) for name, kind in CAT_KIND.items())

# Scanner calls per outcome in this process: "scanned"; "bail" (valid JSON the scanner does
# not reproduce: msgspec decodes the chunk); "invalid" (malformed JSON, e.g. a candidate
# cut inside nested data: msgspec decodes it too, and raises).
STATS: Counter[str] = Counter()
_STATS_LOCK = threading.Lock()


def available() -> bool:
    """Whether the extension is compiled and importable."""
    return _scan is not None


def enabled() -> bool:
    return _scan is not None and os.environ.get("TRACEKIT_NO_SCAN", "") in ("", "0")


def _row_dtype() -> np.dtype[Any] | None:
    if _scan is None:
        return None
    names, formats, offsets = zip(*_scan.ROW_FIELDS, strict=True)
    return np.dtype(
        {
            "names": list(names),
            "formats": list(formats),
            "offsets": list(offsets),
            "itemsize": _scan.ROW_SIZE,
        }
    )


_ROW = _row_dtype()
_BITS: dict[str, int] = dict(_scan.BITS) if _scan is not None else {}


def _count(outcome: str) -> None:
    with _STATS_LOCK:
        STATS[outcome] += 1


class Scanned:
    """One chunk as read by the native scanner.

    ``rows`` is a structured array (fields: see ``_scan.ROW_FIELDS``) with one row per
    event of a kind tracekit keeps; string fields are codes into ``strings`` (-1: null).
    ``metadata`` holds the ``ph == "M"`` events as :class:`Accumulator` records them.
    """

    def __init__(self, data: bytes, result: tuple[Any, ...]) -> None:
        events, rows, n, offsets, text, meta = result
        self.events: int = events
        self.rows: Any = np.frombuffer(rows, dtype=_ROW)
        self.strings = pa.Array.from_buffers(
            pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(text)]
        )
        self._starts: dict[str, npt.NDArray[np.bool_]] = {}
        spans = np.frombuffer(meta, np.int64).reshape(-1, 2)
        self.metadata = [_metadata(data[a:b]) for a, b in spans]

    def __len__(self) -> int:
        return self.events

    @staticmethod
    def has(field: str, present: npt.NDArray[np.uint32]) -> npt.NDArray[np.bool_]:
        """Whether ``field`` is present (not null), from rows' ``present`` masks."""
        return (present & np.uint32(1 << _BITS[field])) != 0  # type: ignore[no-any-return]

    def dictionary(self, codes: npt.NDArray[np.int32]) -> pa.Array:
        """The strings of ``codes`` as a dictionary array, exactly as
        ``pa.array(strings).dictionary_encode()`` builds it (first-seen order)."""
        null = codes < 0
        enc = pa.array(codes, mask=null if null.any() else None).dictionary_encode()
        return pa.DictionaryArray.from_arrays(enc.indices, self.strings.take(enc.dictionary))

    def starts_with(self, codes: npt.NDArray[np.int32], prefix: str) -> npt.NDArray[np.bool_]:
        """Rows whose string (code) starts with ``prefix``; null is False."""
        hit = self._starts.get(prefix)
        if hit is None:
            res = pc.starts_with(self.strings, prefix).to_numpy(zero_copy_only=False)
            hit = self._starts[prefix] = np.append(np.asarray(res, dtype=bool), False)
        return hit[codes]  # code -1 picks the appended False


def _metadata(text: bytes) -> tuple[str, Any, Any, Any]:
    ev = loads(EVENT_LIST, b"[" + text + b"]")[0]  # the msgspec path's own decoder
    return (str(ev.name), ev.pid, ev.tid, ev.args.name)


def scan_chunk(body: bytes) -> Scanned | None:
    """The chunk's rows, or ``None`` if the scanner is off or did not handle the chunk
    (then decode it with msgspec: that also reports malformed JSON)."""
    if not enabled():
        return None
    assert _scan is not None
    res = _scan.scan(body, _CATEGORIES)
    if isinstance(res, int):
        _count("bail" if res == _scan.BAIL else "invalid")
        return None
    _count("scanned")
    return Scanned(body, res)
