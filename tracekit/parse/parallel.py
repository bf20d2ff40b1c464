"""Decode a trace's chunks in parallel workers.

The main process only finds the cut points between chunks (and, for compressed input,
decompresses); workers decode each chunk and turn it into columns
(:meth:`Accumulator.add`). With the native scanner (:mod:`tracekit.parse.scan`, which
releases the GIL) the workers are threads: nothing is forked or pickled. Without it they
are processes decoding with msgspec, and only compact numpy / Arrow columns cross the
process boundary. Results are merged in file order, so the tables are exactly those of
the single-process parse.

Cuts are *not* verified by the main process (that would cost a full decode).
Each worker decodes its chunk as a JSON array; a cut that fell inside a string
or a nested object makes that decode fail. Any failure, including genuinely
malformed input, makes :func:`parse_parallel` return ``None`` and the caller
re-parses with the serial reader, which either repairs the cut (it verifies every
cut) or raises the usual one-line :class:`~tracekit.errors.TraceError`.
"""

from __future__ import annotations

import gc
import multiprocessing as mp
import os
import re
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import pyarrow as pa

from tracekit.errors import TraceError
from tracekit.io import keep_freed_memory
from tracekit.parse.columns import Accumulator
from tracekit.parse.reader import TraceStream, iter_bytes
from tracekit.parse.scan import enabled as scanner_enabled
from tracekit.parse.scan import scan_chunk
from tracekit.parse.source import sniff

# A separator between two events: "}," then the next event's first key. Nested objects
# in args rarely start with one of these keys, so a cut almost never needs repairing.
_EVENT_CUT = re.compile(rb'\}\s*,\s*\{(?=\s*"(?:ph|cat|name|pid|tid|ts|dur|id|args|bp|s)")')
_ANY_CUT = re.compile(rb"\}\s*,\s*\{")
_WINDOW = 4 << 20  # bytes searched for a cut after each target position


@dataclass
class Task:
    """One chunk: either bytes (compressed or re-encoded input) or a byte range of a plain
    UTF-8 file."""

    index: int
    offset: int  # offset of the chunk in the (decompressed) JSON text
    final: bool  # holds the end of the events array and the keys after it
    array_format: bool
    path: str
    data: bytes | None = None
    length: int = 0
    comms: bool = False  # look for collective metadata (TraceStream.find_comms)


@dataclass
class ChunkResult:
    index: int
    ok: bool
    acc: Accumulator | None = None
    events: int = 0
    rest: dict[str, Any] = field(default_factory=dict)


def _init_worker() -> None:
    gc.disable()
    keep_freed_memory()


def _work(task: Task) -> ChunkResult:
    data = task.data
    if data is None:
        with open(task.path, "rb") as f:
            data = os.pread(f.fileno(), task.length, task.offset)
    stream = TraceStream(task.path, scan=scan_chunk)
    stream.header.array_format = task.array_format
    acc = Accumulator()
    stream.comms, stream.find_comms = acc.comms, task.comms
    try:
        if task.final:
            events = stream._finish(data, task.offset)
        else:
            events = stream.decode(data, task.offset)
    except (msgspec.DecodeError, TraceError):
        return ChunkResult(task.index, ok=False)
    del data
    acc.add(events)
    n = len(events)
    del events
    return ChunkResult(task.index, ok=True, acc=acc, events=n, rest=stream.header.fields)


def _find_cut(buf: bytes | memoryview, lo: int, hi: int) -> re.Match[bytes] | None:
    m = _EVENT_CUT.search(buf, lo, hi)  # type: ignore[call-overload]
    if m is None:
        m = _ANY_CUT.search(buf, lo, hi)  # type: ignore[call-overload]
    return m


def _plain_tasks(
    path: Path, start: int, size: int, chunk: int, array_format: bool
) -> Iterator[Task]:
    """Byte ranges of a plain file, cut at event boundaries found near every ``chunk`` bytes."""
    with path.open("rb") as f:
        fd = f.fileno()
        pos = start
        i = 0
        while size - pos > chunk + (2 << 20):
            target = pos + chunk
            window = os.pread(fd, _WINDOW, target)
            m = _find_cut(window, 0, len(window))
            if m is None:  # no boundary within the window: an enormous event; take more
                chunk *= 2
                continue
            end = target + m.start() + 1
            yield Task(i, pos, False, array_format, str(path), length=end - pos)
            pos = target + m.end() - 1
            i += 1
        yield Task(i, pos, True, array_format, str(path), length=size - pos)


def _streamed_tasks(
    stream: TraceStream, blocks: Iterator[bytes], buf: bytes, chunk: int
) -> Iterator[Task]:
    offset = stream.bytes_read - len(buf)
    pending, size = [buf], len(buf)
    i = 0
    path = str(stream.path)
    fmt = stream.header.array_format
    for data in blocks:
        stream.bytes_read += len(data)
        pending.append(data)
        size += len(data)
        if size <= chunk + (2 << 20):
            continue
        whole = b"".join(pending)
        pending = []
        pos = 0
        while len(whole) - pos > chunk + (2 << 20):
            m = _find_cut(whole, pos + chunk, min(len(whole), pos + chunk + _WINDOW))
            if m is None:
                break
            yield Task(i, offset + pos, False, fmt, path, data=whole[pos : m.start() + 1])
            i += 1
            offset_next = m.end() - 1
            pos = offset_next
        rest = whole[pos:]
        offset += pos
        pending, size = [rest], len(rest)
        del whole
    yield Task(i, offset, True, fmt, path, data=b"".join(pending))


@dataclass
class ParallelParse:
    acc: Accumulator
    header: dict[str, Any]
    array_format: bool
    bytes_read: int
    events: int


def _context() -> Any:
    methods = mp.get_all_start_methods()
    # fork: workers inherit the imported modules (no second import: ~0.4 s saved).
    return mp.get_context("fork" if "fork" in methods else "spawn")


def _executor(workers: int) -> Executor:
    if scanner_enabled():
        # The native scanner releases the GIL: threads decode in parallel, with no fork and
        # no pickling of the columns. (Chunks it does not handle go through msgspec, which
        # holds the GIL: correct, but they are decoded one at a time.)
        return ThreadPoolExecutor(max_workers=workers, thread_name_prefix="tracekit-parse")
    return ProcessPoolExecutor(max_workers=workers, mp_context=_context(), initializer=_init_worker)


def parse_parallel(path: Path, chunk: int, workers: int) -> ParallelParse | None:
    """Parse ``path`` with ``workers`` threads (native scanner) or processes (msgspec);
    ``None`` means "use the serial reader"."""
    stream = TraceStream(path, chunk=chunk)
    blocks = iter_bytes(path)
    buf = stream._find_array(blocks)  # header errors are raised here, as in the serial path
    start = stream.bytes_read - len(buf)
    if not sniff(path).direct:  # compressed or re-encoded: this thread reads the text
        tasks = _streamed_tasks(stream, blocks, buf, chunk)
    else:
        blocks.close()
        del buf
        size = path.stat().st_size
        stream.bytes_read = size
        tasks = _plain_tasks(path, start, size, chunk, stream.header.array_format)
    acc = Accumulator()
    header = dict(stream.header.fields)
    pa.array([0])  # pyarrow's one-time pandas probe, done once here rather than per worker
    n_events = 0
    inflight: deque[Future[ChunkResult]] = deque()

    def merge_until(left: int) -> bool:
        """Merge finished chunks, in file order, until ``left`` are in flight."""
        nonlocal n_events
        while len(inflight) > left:
            r = inflight.popleft().result()
            if not r.ok or r.acc is None:
                return False
            acc.merge(r.acc)
            n_events += r.events
            header.update(r.rest)
        return True

    comms = "distributedInfo" in header
    with _executor(workers) as pool:
        try:
            for task in tasks:
                task.comms = comms
                inflight.append(pool.submit(_work, task))
                del task
                if not merge_until(workers):
                    return None
            if not merge_until(0):
                return None
        except BrokenProcessPool:
            return None
        finally:
            for fut in inflight:
                fut.cancel()
    return ParallelParse(acc, header, stream.header.array_format, stream.bytes_read, n_events)
