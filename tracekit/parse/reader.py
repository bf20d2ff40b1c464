"""Stream a Chrome/Kineto trace file into decoded event chunks.

The file is never loaded as one JSON document. Bytes are read in blocks (decompressed
and re-encoded as UTF-8 where needed: :mod:`tracekit.parse.source`); the
``traceEvents`` array is cut at event boundaries into chunks of a few tens of MB, and
each chunk is decoded by msgspec straight into small typed structs that keep only the
fields tracekit uses (unknown keys are skipped in C), unless the caller's scanner
(``TraceStream(scan=...)``, the native :mod:`tracekit.parse.scan`) reads it into flat
rows first. Peak memory is therefore bounded by the chunk size plus the columns built
so far, not by the file size. Text that is not valid UTF-8 is read with U+FFFD in its
place (:func:`tracekit.parse.events.loads`).

A cut is only accepted if the chunk decodes as a JSON array, so a ``}, {``
inside a string or a nested object can never split an event.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from tracekit.errors import TraceError
from tracekit.parse.comms import CommEvent, find_collectives
from tracekit.parse.events import ANY_JSON, EVENT_LIST, Event, loads
from tracekit.parse.scan import Scanned
from tracekit.parse.source import BLOCK, iter_bytes

__all__ = ["BLOCK", "CHUNK", "TraceHeader", "TraceStream", "iter_bytes"]  # BLOCK, iter_bytes:
# re-exported for callers that stream a trace's bytes (reports.tbtrace)

CHUNK = 32 << 20  # target size of one decoded chunk of events
_HEAD_LIMIT = 256 << 20  # the header (before traceEvents) is never larger than this
_MAX_CUT_TRIES = 4


_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_CUT = re.compile(rb"\}\s*,\s*\{")
_WS = b" \t\r\n"
# A "]" that can close the events array: followed by the next key or the document's end.
_ARRAY_END = re.compile(rb'\]\s*(?:,\s*"|\}\s*$|$)')


@dataclass
class TraceHeader:
    """Top-level keys of the trace document other than ``traceEvents``."""

    fields: dict[str, Any] = field(default_factory=dict)
    array_format: bool = False  # the document is a bare JSON array of events


_AT_BYTE = re.compile(r"\s*\(byte (\d+)\)")


def _malformed(path: Path, offset: int, err: Exception, base: int | None = None) -> TraceError:
    """The one-line error for JSON that does not decode. ``base``: the file offset of the
    first byte msgspec was given (its "(byte N)" is relative to that), so the message
    names the byte where the damage is; without a position, the chunk's ``offset``."""
    msg = str(err).split("\n")[0]
    m = _AT_BYTE.search(msg)
    if m and base is not None:
        offset = base + int(m.group(1))
        msg = msg[: m.start()] + msg[m.end() :]
    return TraceError(f"{path}: malformed JSON near byte {offset}: {msg}")


class TraceStream:
    """Iterate over a trace's events in decoded chunks.

    ``header`` (keys before and after the events array, e.g. ``deviceProperties``)
    is complete once iteration has finished; the keys before the array are
    available as soon as the first chunk is yielded.

    ``scan`` (e.g. :func:`tracekit.parse.scan.scan_chunk`) is tried on every chunk first;
    where it returns ``None`` the chunk is decoded with msgspec. Chunks are therefore
    lists of :class:`Event` or, from the scanner, :class:`~tracekit.parse.scan.Scanned`.
    """

    def __init__(
        self,
        path: Path | str,
        chunk: int = CHUNK,
        scan: Callable[[bytes], Scanned | None] | None = None,
    ) -> None:
        self.path = Path(path)
        self.chunk = chunk
        self.scan = scan
        self.header = TraceHeader()
        self.bytes_read = 0
        self.events = 0
        # events carrying collective metadata, in file order (tracekit.parse.comms); the
        # caller may hand in its own list to collect them. ``find_comms``: look for them
        # (None: only in traces of distributed jobs, whose header has distributedInfo;
        # the search costs ~0.5 ms per MB, which no single-GPU trace needs to pay).
        self.comms: list[CommEvent] = []
        self.find_comms: bool | None = None

    # -- header ----------------------------------------------------------------
    def _find_array(self, blocks: Iterator[bytes]) -> bytes:
        """Consume bytes up to and including the ``[`` that opens the events array;
        return what follows it."""
        buf = b""
        for data in blocks:
            self.bytes_read += len(data)
            buf += data
            start = len(buf) - len(buf.lstrip(_WS))
            if start < len(buf) and buf[start : start + 1] == b"[":
                self.header.array_format = True
                return buf[start + 1 :]
            m = _KEY.search(buf)
            if m:
                head = buf[: m.start()]
                try:
                    obj = loads(ANY_JSON, head + b'"traceEvents": []}')
                except msgspec.DecodeError:
                    raise TraceError(
                        f"{self.path}: not a trace: the JSON before 'traceEvents' is malformed"
                    ) from None
                if not isinstance(obj, dict):
                    raise TraceError(f"{self.path}: not a trace: top level is not a JSON object")
                obj.pop("traceEvents", None)
                self.header.fields.update(obj)
                return buf[m.end() :]
            if len(buf) > _HEAD_LIMIT:
                break
        self._explain_no_array(buf)
        raise AssertionError("unreachable")

    def _explain_no_array(self, buf: bytes) -> None:
        if not buf.strip(_WS):
            raise TraceError(f"{self.path}: empty file")
        if len(buf) <= _HEAD_LIMIT:
            try:
                obj = loads(ANY_JSON, buf)
            except msgspec.DecodeError as e:
                first = str(e).splitlines()[0]
                raise TraceError(
                    f"{self.path}: not a trace: invalid or truncated JSON ({first})"
                ) from None
            kind = type(obj).__name__
            raise TraceError(
                f"{self.path}: not a PyTorch profiler trace: "
                f"JSON {kind} without a 'traceEvents' array"
            )
        raise TraceError(f"{self.path}: not a trace: no 'traceEvents' array in the first 256 MB")

    def read_header(self) -> dict[str, Any]:
        """The document's keys before ``traceEvents`` (``distributedInfo``, ...), reading
        only as far as the events array: cheap on traces of any size."""
        blocks = iter_bytes(self.path)
        try:
            self._find_array(blocks)
        finally:
            blocks.close()
        return dict(self.header.fields)

    # -- events ----------------------------------------------------------------
    def _decode(self, body: bytes, offset: int) -> list[Event]:
        try:
            return loads(EVENT_LIST, b"[" + body + b"]")
        except msgspec.ValidationError as e:
            raise TraceError(f"{self.path}: unexpected event field type: {e}") from None

    def decode(self, body: bytes, offset: int) -> list[Event] | Scanned:
        """Decode one chunk (the text between the array's brackets); malformed JSON raises
        msgspec.DecodeError, as :meth:`_decode` does."""
        got = self.scan(body) if self.scan is not None else None
        events = got if got is not None else self._decode(body, offset)
        if self.find_comms or (self.find_comms is None and "distributedInfo" in self.header.fields):
            self.comms.extend(find_collectives(body))  # only once the chunk has decoded
        return events

    def _cut(self, buf: bytes, offset: int) -> tuple[list[Event] | Scanned, int]:
        """Decode events from the front of ``buf``; return them and the bytes consumed."""
        lo = max(0, self.chunk - (1 << 20))
        cands = [m for m in _CUT.finditer(buf, lo, min(len(buf), self.chunk + (1 << 20)))]
        if not cands:
            cands = list(_CUT.finditer(buf))
        err: Exception | None = None
        for m in reversed(cands[-_MAX_CUT_TRIES:]):
            try:
                return self.decode(buf[: m.start() + 1], offset), m.end() - 1
            except msgspec.DecodeError as e:
                err = e
        found = err or ValueError("no event boundary found")
        raise _malformed(self.path, offset, found, base=offset - 1)  # "[" + body

    def _finish(self, buf: bytes, offset: int) -> list[Event] | Scanned:
        """Decode the last events and the keys that follow the array."""
        end = len(buf.rstrip(_WS))
        if end == 0:
            raise TraceError(f"{self.path}: truncated JSON: the file ends inside 'traceEvents'")
        last = buf[end - 1 : end]
        if last not in (b"}", b"]"):
            raise TraceError(f"{self.path}: truncated JSON: the file ends mid-document")
        pos = end
        err: Exception | None = None
        err_base = offset - 1  # where the text that raised ``err`` starts in the file
        body_tries = 0
        # Bytes of tails decoded: bounded, so that a damaged trailer costs linear time, not
        # one decode of the rest of the file per "]" in the events.
        budget = 4 * len(buf) + (1 << 20)
        while body_tries < _MAX_CUT_TRIES and budget > 0:
            pos = buf.rfind(b"]", 0, pos)
            if pos < 0:
                break
            m = _ARRAY_END.match(buf, pos)
            if not m:
                continue
            rest: dict[str, Any] = {}
            if self.header.array_format:
                if pos + 1 != end:  # a bare array ends with its "]"
                    break
            elif not m.group().rstrip(_WS).endswith(b"}"):  # keys follow the array
                tail = buf[pos + 1 :]
                budget -= len(tail)
                try:
                    obj = loads(ANY_JSON, b'{"_":0' + tail)
                except msgspec.DecodeError as e:
                    if err is None:
                        err, err_base = e, offset + pos + 1 - len(b'{"_":0')
                    continue
                if not isinstance(obj, dict):
                    continue
                obj.pop("_", None)
                rest = obj
            body = buf[:pos].rstrip(_WS)
            if not body:
                self.header.fields.update(rest)
                return []
            body_tries += 1
            try:
                events = self.decode(body, offset)
            except msgspec.DecodeError as e:
                err, err_base = e, offset - 1
                continue
            self.header.fields.update(rest)
            return events
        if err is not None:
            raise _malformed(self.path, offset, err, base=err_base)
        raise TraceError(f"{self.path}: truncated JSON: the 'traceEvents' array is not closed")

    def __iter__(self) -> Iterator[list[Event] | Scanned]:
        blocks = iter_bytes(self.path)
        buf = self._find_array(blocks)
        offset = self.bytes_read - len(buf)
        pending = [buf]
        size = len(buf)
        for data in blocks:
            self.bytes_read += len(data)
            pending.append(data)
            size += len(data)
            if size <= self.chunk + (2 << 20):
                continue
            buf = b"".join(pending)  # one copy per chunk, not one per block
            while len(buf) > self.chunk + (2 << 20):
                events, used = self._cut(buf, offset)
                buf = buf[used:]
                offset += used
                self.events += len(events)
                yield events
            pending, size = [buf], len(buf)
        events = self._finish(b"".join(pending), offset)
        self.events += len(events)
        yield events
