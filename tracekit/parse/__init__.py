"""Stage 2: read a PyTorch profiler (Kineto) trace into typed tables.

``load(path)`` returns a :class:`Trace` of pandas DataFrames; ``parse_to_dir``
writes the same tables as Parquet plus ``meta.json``. See ``tracekit.schema``.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import sys
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from tracekit.errors import TraceError
from tracekit.io import atomic_dir, atomic_write_json, keep_freed_memory, return_freed_memory
from tracekit.manifest import manifest_or_empty
from tracekit.parse.build import Tables, build
from tracekit.parse.columns import Accumulator
from tracekit.parse.parallel import parse_parallel
from tracekit.parse.reader import CHUNK, TraceStream
from tracekit.parse.scan import scan_chunk
from tracekit.parse.source import sniff
from tracekit.schema import ARROW, SCHEMA_VERSION, TABLES

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["ParseResult", "Trace", "find_trace", "load", "parse_tables", "parse_to_dir"]

# Trace file names, longest first (a name's suffix is stripped to name the output).
# The format itself is told by the file's first bytes (tracekit.parse.source).
_COMPRESSED = (".gz", ".xz", ".bz2", ".zst")
TRACE_SUFFIXES = (
    *(f".pt.trace.json{c}" for c in _COMPRESSED),
    ".pt.trace.json",
    *(f".json{c}" for c in _COMPRESSED),
    ".json",
)
_RUN_TRACE_SUFFIXES = tuple(s for s in TRACE_SUFFIXES if s.startswith(".pt.trace.json"))


@dataclass
class Trace:
    """A parsed trace: the schema's tables as DataFrames, ``meta`` and, for a run
    folder from ``tracekit collect``, its ``manifest``. ``activity``: what the kernels
    table holds, ``'gpu'`` (GPU activities) or ``'cpu'`` (a CPU run's work operators:
    :func:`tracekit.parse.cpuview.cpu_view`)."""

    kernels: pd.DataFrame
    ops: pd.DataFrame
    memory: pd.DataFrame
    steps: pd.DataFrame
    runtime: pd.DataFrame
    meta: dict[str, Any]
    path: Path
    manifest: dict[str, Any] | None = None
    run_dir: Path | None = None
    tables: Tables | None = field(default=None, repr=False)
    activity: str = "gpu"
    # the collective metadata (tracekit.schema.COMMS); None only where a caller built a
    # Trace by hand
    comms: pd.DataFrame | None = None

    @property
    def device_name(self) -> str | None:
        props = self.meta.get("device_properties") or []
        devs = self.meta.get("devices") or []
        for p in props:
            if isinstance(p, dict) and (not devs or p.get("id") in devs):
                name = p.get("name")
                return str(name) if name is not None else None
        return None


def skip_pandas_probe() -> None:
    """Stop pyarrow from importing pandas (~0.3 s) on its first array conversion.

    pyarrow probes for pandas the first time it converts Python objects; if the probe
    fails it records "no pandas" but still imports pandas later when a conversion really
    needs it (``to_pandas``), so this only saves the import in processes that never use
    pandas, such as ``tracekit parse``. A no-op when pandas is already imported.
    """
    if "pandas" in sys.modules:
        return
    blocker = _NoPandas()
    sys.meta_path.insert(0, blocker)
    try:
        pa.array([0])
    finally:
        sys.meta_path.remove(blocker)


def dedicate_process() -> None:
    """Tune this process for parsing, when it exits after the parse (``tracekit parse``).

    Freed memory stays in the heap for the next chunk or temporary array instead of going
    back to the kernel and faulting in again (:func:`tracekit.io.keep_freed_memory`: best
    called before this package is imported), and Arrow allocates from that same heap (its
    default pool, mimalloc, returns pages early too).
    About 1 CPU-s less per 500 MB of trace on VMs where page faults are expensive, and a
    lower peak (one heap instead of two). Not for long-lived processes that call
    :func:`load`: they would keep the parse's peak memory until they exit.
    """
    keep_freed_memory()
    pa.set_memory_pool(pa.system_memory_pool())


class _NoPandas:
    """A meta-path finder that makes ``import pandas`` fail (see skip_pandas_probe)."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name == "pandas" or name.startswith("pandas."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


def find_trace(run_dir: Path) -> tuple[Path, dict[str, Any] | None]:
    """The trace file of a run folder: its manifest's, else the newest
    ``*.pt.trace.json`` (plain, ``.gz``, ``.xz``, ``.bz2`` or ``.zst``)."""
    manifest: dict[str, Any] | None = None
    mpath = run_dir / "manifest.json"
    if mpath.is_file():
        try:
            manifest = json.loads(mpath.read_text())
        except (OSError, ValueError) as e:
            raise TraceError(f"{mpath}: unreadable manifest ({e})") from None
        rel = manifest_or_empty(manifest).artifacts.trace
        if rel:
            p = run_dir / rel
            if p.is_file():
                return p, manifest
    found = sorted(
        (p for p in run_dir.iterdir() if p.is_file() and p.name.endswith(_RUN_TRACE_SUFFIXES)),
        key=lambda p: p.stat().st_mtime,
    )
    if not found:
        status = manifest_or_empty(manifest).status
        extra = f" (run status: {status})" if status and status != "ok" else ""
        raise TraceError(
            f"{run_dir}: no *.pt.trace.json[.gz|.xz|.bz2|.zst] trace in this folder{extra}"
        )
    return found[-1], manifest


def default_workers() -> int:
    """Worker processes for parsing: one per usable core (``TRACEKIT_WORKERS`` overrides)."""
    env = os.environ.get("TRACEKIT_WORKERS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not on Linux
        cores = os.cpu_count() or 1
    return max(1, min(cores, 8))


def parse_tables(
    path: Path | str,
    *,
    chunk: int = CHUNK,
    workers: int | None = None,
    on_table: Callable[[str, pa.Table], None] | None = None,
    lazy: bool = False,
    release: bool = False,
) -> Tables:
    """Parse one trace file into Arrow tables (streaming; bounded memory).

    ``chunk`` is the target size in bytes of the pieces the events array is cut into;
    ``workers`` the number of threads or processes decoding them (default: one per core).
    Traces smaller than two chunks are parsed in this thread. ``on_table(name, table)`` is
    called as each table is completed (``meta`` is complete only in the result).
    ``lazy``: string columns may stay dictionary-encoded (:func:`write_parquet` and
    ``tracekit.parse.arrays.materialize`` give the schema's types); ``tracekit parse`` uses
    it so that a 5 GB trace's names never exist as gigabytes of plain strings.
    ``release``: the result's tables are empty; only ``on_table`` gets them (see
    :func:`tracekit.parse.build.build`).
    """
    path = Path(path)
    if workers is None:
        workers = default_workers()
    # Millions of small objects are created and freed chunk by chunk; none form cycles, and
    # the cyclic collector rescanning them would triple the parse time.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        par = None
        if workers > 1 and _worth_parallel(path, chunk):
            par = parse_parallel(path, chunk, workers)
        if par is not None:
            header, array_format = par.header, par.array_format
            bytes_read, n_events = par.bytes_read, par.events
            acc = par.acc
            del par
        else:
            stream = TraceStream(path, chunk=chunk, scan=scan_chunk)
            acc = Accumulator()
            stream.comms = acc.comms
            for events in stream:
                acc.add(events)
                del events
            header, array_format = stream.header.fields, stream.header.array_format
            bytes_read, n_events = stream.bytes_read, stream.events
        if _json_bytes(path) > HUGE_TRACE:  # the same test as parse_to_dir's writer
            return_freed_memory()
        tables = build(acc, header, str(path), on_table, lazy=lazy, release=release)
    finally:
        if gc_was_enabled:
            gc.enable()
    tables.meta["source"] = {
        "path": str(path),
        "bytes_on_disk": path.stat().st_size,
        "bytes_json": bytes_read,
        "events": n_events,
        "format": "array" if array_format else "object",
    }
    return tables


def _json_bytes(path: Path) -> int:
    """About how many bytes of JSON the trace holds (see :meth:`Source.json_bytes`); a path
    that is not a readable regular file raises the one-line TraceError here."""
    return sniff(path).json_bytes()


def _worth_parallel(path: Path, chunk: int) -> bool:
    """At least two chunks' worth of JSON."""
    return _json_bytes(path) > 2 * chunk


def _to_trace(
    tables: Tables, path: Path, manifest: dict[str, Any] | None, run_dir: Path | None
) -> Trace:
    dfs = {name: t.to_pandas() for name, t in tables.items()}
    return Trace(
        meta=tables.meta, path=path, manifest=manifest, run_dir=run_dir, tables=tables, **dfs
    )


def _read_dir(d: Path) -> Tables:
    try:
        meta = json.loads((d / "meta.json").read_text())
    except (OSError, ValueError) as e:
        raise TraceError(f"{d}: unreadable meta.json ({e})") from None
    if meta.get("schema_version") != SCHEMA_VERSION:
        raise TraceError(
            f"{d}: tables of schema version {meta.get('schema_version')}, "
            f"this tracekit reads {SCHEMA_VERSION}: parse the trace again"
        )
    tabs: dict[str, pa.Table] = {}
    for name in TABLES:
        if name == "comms" and not (d / "comms.parquet").exists():
            continue  # tables parsed before the comms table existed: it stays empty
        try:
            tabs[name] = pq.read_table(d / f"{name}.parquet", schema=ARROW[name])
        except (OSError, pa.ArrowInvalid) as e:
            raise TraceError(f"{d}: unreadable {name}.parquet ({e})") from None
    return Tables(meta=meta, **tabs)


def load(path: Path | str) -> Trace:
    """Parse a trace file, a run folder (``tracekit collect``) or a parsed folder."""
    path = Path(path)
    if path.is_dir():
        if (path / "meta.json").is_file():
            return _to_trace(_read_dir(path), path, None, None)
        trace, manifest = find_trace(path)
        return _to_trace(parse_tables(trace), trace, manifest, path)
    return _to_trace(parse_tables(path), path, None, None)


@dataclass
class ParseResult:
    out: Path
    meta: dict[str, Any]

    def describe(self) -> str:
        c = self.meta["counts"]
        rate = self.meta.get("link_rate")
        link = f"{100 * rate:.2f}%" if rate is not None else "n/a"
        text = (
            f"wrote {self.out}: {c['kernels']} kernels, {c['memcpy']} memcpy, "
            f"{c['memset']} memset, {c['ops']} ops, {c['runtime']} runtime calls, "
            f"{c['memory']} memory events, {c['steps']} steps; "
            f"kernels linked to operators: {link}"
        )
        bad = sum(self.meta.get("bad_values", {}).values())
        if bad:
            what = "value" if bad == 1 else "values"
            text += f"; {bad} unreadable {what} read as missing (meta.json: bad_values)"
        return text


def default_out(path: Path) -> Path:
    name = path.name
    for suf in TRACE_SUFFIXES:
        if name.endswith(suf):
            name = name[: -len(suf)]
            break
    return path.with_name(name + ".tracekit")


# JSON bytes from which a parse favours memory over speed: the build maps its large arrays
# (return_freed_memory) and tracekit parse writes each table before building the next.
HUGE_TRACE = 2 << 30
WRITE_ROWS = 1 << 18  # rows cast and written at a time when a table is still lazy


def write_parquet(name: str, table: pa.Table, path: Path) -> None:
    """Write ``table`` as ``path`` in the schema's exact types. A lazy table (string
    columns still dictionary-encoded, see tracekit.parse.build) is cast slice by slice, so
    its plain strings never exist all at once: readers see the same Parquet either way."""
    schema = ARROW[name]
    if table.schema.equals(schema):
        pq.write_table(table, path, compression="snappy")
        return
    with pq.ParquetWriter(path, schema, compression="snappy") as w:
        for start in range(0, max(table.num_rows, 1), WRITE_ROWS):
            w.write_table(table.slice(start, WRITE_ROWS).cast(schema))


class _Writer:
    """Writes tables to Parquet in background threads (Arrow releases the GIL) as they are
    handed over, into a temporary folder that becomes ``out`` once ``finish`` has written
    meta.json; on any error it is removed. Nothing is created before the first table."""

    def __init__(self, out: Path, stack: contextlib.ExitStack, wait: bool = False) -> None:
        self.out = out
        self.wait = wait  # write each table before returning (it is freed sooner)
        self.stack = stack
        self.tmp: Path | None = None
        self.pool: ThreadPoolExecutor | None = None
        self.pending: dict[str, Future[None]] = {}

    def __call__(self, name: str, table: pa.Table) -> None:
        if self.pool is None:
            self.tmp = self.stack.enter_context(atomic_dir(self.out))
            self.pool = self.stack.enter_context(ThreadPoolExecutor(2, "tracekit-write"))
        assert self.tmp is not None
        path = self.tmp / f"{name}.parquet"
        self.pending[name] = self.pool.submit(write_parquet, name, table, path)
        if self.wait:
            self.pending[name].result()

    def finish(self, tables: Tables) -> None:
        for name, t in tables.items():
            if name not in self.pending:
                self(name, t)
        for fut in self.pending.values():
            fut.result()
        assert self.tmp is not None
        atomic_write_json(self.tmp / "meta.json", tables.meta)


def write_tables(tables: Tables, out: Path) -> None:
    """Write the tables and meta.json into ``out`` atomically."""
    with contextlib.ExitStack() as stack:
        _Writer(out, stack).finish(tables)


def parse_to_dir(path: Path | str, out: Path | str | None = None) -> ParseResult:
    path = Path(path)
    if path.is_dir():
        trace, _ = find_trace(path)
        default = path / "tables"
    else:
        trace = path
        default = default_out(path)
    dest = Path(out) if out is not None else default
    # Each table is written while the next ones are built (one after the other for huge
    # traces: a written table is freed before the next one exists).
    with contextlib.ExitStack() as stack:
        writer = _Writer(dest, stack, wait=_json_bytes(trace) > HUGE_TRACE)
        tables = parse_tables(trace, on_table=writer, lazy=True, release=True)
        writer.finish(tables)
    return ParseResult(out=dest, meta=tables.meta)
