"""The ``comms`` table: the collective metadata PyTorch's c10d writes into a trace.

Since PyTorch 2.1 every ``record_param_comms`` operator and, with NCCL, every collective
kernel carry args that describe the collective: ``Collective name``, ``In msg nelems``,
``Out msg nelems``, ``dtype``, ``Group size``, ``Process Group Name`` /
``Description`` / ``Ranks``, the split sizes of an all-to-all and, in some versions, a
sequence number ``Seq``. These keys are rare (a few per collective, among millions of
events), so instead of teaching the native scanner a dozen more keys for every event,
:func:`find_collectives` looks for the text ``"Collective name"`` in each chunk of the
events array (one ``bytes.find``: nothing more for chunks without collectives), cuts the
event around each hit and decodes it alone. Every chunk passes through
:meth:`tracekit.parse.reader.TraceStream.decode`, in the serial and the parallel parse
alike, so both see the same events in file order.

An event is cut at the separator before it (``}, {`` followed by an event key, as the
parallel parse cuts) and at its closing brace (a brace matcher that skips strings); a cut
that does not decode to an event with that key is dropped, never guessed.
"""

from __future__ import annotations

import json
import re
from typing import Any

import msgspec
import numpy as np
import pyarrow as pa

from tracekit.parse.arrays import to_table
from tracekit.parse.convert import ints, nullable_ints, strings, to_ns
from tracekit.parse.events import loads

MARK = b'"Collective name"'
# The start of an event: "{" after "}," (or the chunk's start) and before an event key.
_START = re.compile(rb'\}\s*,\s*(\{)(?=\s*"(?:ph|cat|name|pid|tid|ts|dur|id|args|bp|s)")')
_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*"|[{}]')
_WINDOW = 16 << 10  # bytes searched back for the event's start, doubled up to _MAX_EVENT
_MAX_EVENT = 16 << 20


class CommArgs(msgspec.Struct, frozen=True, gc=False):
    external_id: Any = msgspec.field(name="External id", default=None)
    correlation: Any = None
    collective: Any = msgspec.field(name="Collective name", default=None)
    in_nelems: Any = msgspec.field(name="In msg nelems", default=None)
    out_nelems: Any = msgspec.field(name="Out msg nelems", default=None)
    dtype: Any = None
    group_size: Any = msgspec.field(name="Group size", default=None)
    pg_name: Any = msgspec.field(name="Process Group Name", default=None)
    pg_desc: Any = msgspec.field(name="Process Group Description", default=None)
    pg_ranks: Any = msgspec.field(name="Process Group Ranks", default=None)
    in_split: Any = msgspec.field(name="In split size", default=None)
    out_split: Any = msgspec.field(name="Out split size", default=None)
    seq: Any = msgspec.field(name="Seq", default=None)
    src_rank: Any = msgspec.field(name="Src Rank", default=None)
    dst_rank: Any = msgspec.field(name="Dst Rank", default=None)


class CommEvent(msgspec.Struct, gc=False):
    ph: Any = None
    cat: Any = None
    name: Any = None
    pid: Any = None
    tid: Any = None
    ts: Any = None
    dur: Any = None
    args: CommArgs | None = None


_DECODE = msgspec.json.Decoder(CommEvent, float_hook=str)


def _start(body: bytes, pos: int) -> int:
    """Offset of the ``{`` that opens the event holding ``pos`` (0: the chunk's first)."""
    window = _WINDOW
    while True:
        lo = max(0, pos - window)
        last = None
        for m in _START.finditer(body, lo, pos):
            last = m
        if last is not None:
            return last.start(1)
        if lo == 0 or window >= _MAX_EVENT:
            return body.find(b"{", 0, pos) if lo == 0 else -1
        window *= 2


def _end(body: bytes, start: int) -> int:
    """Offset just past the ``}`` that closes the object opened at ``start`` (-1: none)."""
    depth = 0
    for m in _TOKEN.finditer(body, start, min(len(body), start + _MAX_EVENT)):
        c = m.group()
        if c == b"{":
            depth += 1
        elif c == b"}":
            depth -= 1
            if depth == 0:
                return m.end()
    return -1


def find_collectives(body: bytes) -> list[CommEvent]:
    """The events of one chunk of the events array whose args name a collective, in file
    order (an event is decoded alone; one that does not decode is skipped)."""
    out: list[CommEvent] = []
    pos = body.find(MARK)
    while pos >= 0:
        nxt = pos + len(MARK)
        start = _start(body, pos)
        end = _end(body, start) if start >= 0 else -1
        if end > pos:
            nxt = end
            try:
                ev = loads(_DECODE, body[start:end])  # damaged text reads as U+FFFD
            except msgspec.DecodeError:
                ev = None
            if ev is not None and ev.args is not None and isinstance(ev.args.collective, str):
                out.append(ev)
        pos = body.find(MARK, nxt)
    return out


def _arg(events: list[CommEvent], name: str) -> list[Any]:
    return [getattr(e.args, name) for e in events]


def _text(values: list[Any]) -> pa.Array:
    """Text as written: c10d writes rank lists and split sizes as strings ("[0, 1]");
    other JSON values (a list) become their JSON text."""
    return strings([v if v is None or isinstance(v, str) else json.dumps(v) for v in values])


def build_comms(events: list[CommEvent], t0: int) -> pa.Table:
    """The ``comms`` table (tracekit.schema.COMMS) from the events :func:`find_collectives`
    kept; times relative to ``t0`` (ns). Events without a readable ``ts`` are dropped."""
    ts, ok = to_ns([e.ts for e in events])
    events = [e for e, good in zip(events, ok, strict=True) if good]
    ts = ts[ok] - t0
    dur, dok = to_ns([e.dur for e in events])
    dur = np.where(dok, np.maximum(dur, 0), 0)

    def nint(name: str) -> pa.Array:
        return nullable_ints(_arg(events, name))[0]

    return to_table(
        "comms",
        {
            "category": strings([e.cat for e in events]),
            "name": strings([e.name for e in events]),
            "pid": ints([e.pid for e in events])[0],
            "tid": ints([e.tid for e in events])[0],
            "ts": ts,
            "dur": dur,
            "external_id": ints(_arg(events, "external_id"))[0],
            "correlation": ints(_arg(events, "correlation"))[0],
            "collective": strings(_arg(events, "collective")),
            "in_nelems": nint("in_nelems"),
            "out_nelems": nint("out_nelems"),
            "dtype": strings(_arg(events, "dtype")),
            "group_size": nint("group_size"),
            "pg_name": strings(_arg(events, "pg_name")),
            "pg_desc": strings(_arg(events, "pg_desc")),
            "pg_ranks": _text(_arg(events, "pg_ranks")),
            "in_split": _text(_arg(events, "in_split")),
            "out_split": _text(_arg(events, "out_split")),
            "seq": nint("seq"),
            "src_rank": nint("src_rank"),
            "dst_rank": nint("dst_rank"),
        },
    )
