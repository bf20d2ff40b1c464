"""Run a per-rank function over many rank traces, each in its own bounded worker.

``map_ranks(fn, {rank: trace}, out_dir)`` calls ``fn(trace, folder)`` once per rank and
returns a :class:`RankResult` per rank. ``fn`` is a pure function from ONE trace file to
files in ``folder`` (Parquet, a small JSON) and returns a small JSON-able value; the cross-
rank step is then a reduction over those small results (:func:`read_table`), so no process
ever holds every rank's full tables. Layout of ``out_dir``::

    out_dir/rank<R>/            # what fn wrote, renamed into place complete (atomic_dir)
    out_dir/rank<R>/rank.json   # the engine's record: key, fn's value, worker stats

Where ``fn`` runs:

* default — a local pool of ``workers`` processes (:func:`default_workers`: cores, ranks
  and available memory), each a fresh process that runs ONE rank and exits, so its memory
  goes back to the OS and its peak RSS is that rank's: forked from a fork server that has
  imported the analysis once (:mod:`tracekit.preload`) where that pays, else ``spawn``ed
  (:func:`pool_context`);
* ``scheduler="tcp://HOST:PORT"`` (or a ``distributed.Client``) — an existing Dask cluster
  (:mod:`tracekit.ranks.cluster`): each task runs its rank the same way, in a process of its
  own, and writes the same files (traces and ``out_dir`` on a filesystem every worker sees).

A rank whose trace is bad ends the run with one line naming the rank and its file (the
same :class:`~tracekit.errors.TracekitError` class ``fn`` raised); the other ranks' work is
stopped and no half-written folder is left. Ctrl-C stops every worker. A rank whose
``rank.json`` holds the same :func:`cache_key` is not run again (``force`` re-runs it).
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib
import json
import multiprocessing as mp
import os
import resource
import signal
import socket
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import TYPE_CHECKING, Any

import tracekit
from tracekit.errors import TracekitError, UsageError
from tracekit.io import atomic_dir, atomic_write_json, freeze_before_exit, keep_freed_memory
from tracekit.ranks.tasks import Task, died, failure_message, raise_failure, remove_leftovers
from tracekit.schema import SCHEMA_VERSION

if TYPE_CHECKING:
    import pyarrow as pa

RECORD = "rank.json"  # the engine's file in each rank folder (fn must not write it)
HEAD_BYTES = 1 << 20  # the trace's first MiB is hashed into the cache key
# Memory a worker is assumed to need for the largest trace, when the caller gives none:
# WORKER_BASE + WORKER_PER_JSON_BYTE x its JSON size. Measured with analyse_rank (parse,
# classify, summarize) on a 502 MB trace: 1.07 GB peak; docs/ranks-at-scale.md.
WORKER_BASE = 512 << 20
WORKER_PER_JSON_BYTE = 2.0
GZIP_RATIO = 8  # JSON bytes per gzip byte assumed for a .gz trace (as tracekit.parse does)
MEMORY_SHARE = 0.8  # of the memory available now, what the workers may take together
STOP_GRACE_S = 5.0  # a stopped worker's time to remove its temporary folder

PerRank = Callable[[Path, Path], Any]


@dataclass(frozen=True)
class RankResult:
    """One rank's result. ``value``: what ``fn`` returned, read back from JSON (the same for
    a fresh, a cached and a Dask run). ``wall_s``, ``cpu_s``, ``peak_rss_bytes``, ``worker``:
    of the process that ran only this rank (for a cached result, in an earlier run):
    its wall time and CPU seconds (all its threads) from the task's start, its peak RSS."""

    rank: int
    trace: Path
    out: Path
    value: Any
    cached: bool
    wall_s: float
    peak_rss_bytes: int
    worker: str
    trace_bytes: int
    out_bytes: int
    cpu_s: float


# ---------------------------------------------------------------- naming, key, sizing


def function_name(fn: PerRank | str) -> str:
    """``module:qualname`` of a module-level function (workers import it by that name)."""
    if isinstance(fn, str):
        name = fn
    else:
        name = f"{getattr(fn, '__module__', '')}:{getattr(fn, '__qualname__', '')}"
        if "<" in name:
            raise UsageError(f"per-rank function {name}: must be a module-level function")
    got = resolve(name)
    if not isinstance(fn, str) and got is not fn:
        raise UsageError(f"per-rank function {name}: its name does not import it back")
    return name


def resolve(name: str) -> PerRank:
    module, _, qual = name.partition(":")
    try:
        obj: Any = importlib.import_module(module)
        for part in qual.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError, ValueError) as e:
        raise UsageError(f"per-rank function {name!r} cannot be imported ({e})") from None
    if not callable(obj):
        raise UsageError(f"per-rank function {name!r} is not callable")
    return obj  # type: ignore[no-any-return]


def cache_key(trace: Path, fn: str, version: str = "") -> dict[str, Any]:
    """What makes a rank folder reusable: the function and its ``version`` token, tracekit's
    version and table schema, the trace file's name, size, mtime (ns) and the SHA-256 of
    its first MiB (Kineto's header: trace id, base time; a gzip header's timestamp)."""
    try:
        st = trace.stat()
        with trace.open("rb") as f:
            head = hashlib.sha256(f.read(HEAD_BYTES)).hexdigest()
    except OSError as e:
        raise UsageError(f"{trace}: cannot read ({e.strerror or e})") from None
    return {
        "function": fn,
        "version": version,
        "tracekit": tracekit.__version__,
        "schema_version": SCHEMA_VERSION,
        "file": trace.name,
        "size": st.st_size,
        "mtime_ns": st.st_mtime_ns,
        "head_sha256": head,
    }


def json_bytes(trace: Path) -> int:
    """The trace's JSON size: the file's, or GZIP_RATIO x a gzip file's."""
    with trace.open("rb") as f:
        gz = f.read(2) == b"\x1f\x8b"
    return trace.stat().st_size * (GZIP_RATIO if gz else 1)


def worker_memory(traces: Sequence[Path]) -> int:
    """The memory assumed for one worker: enough for the largest trace (see WORKER_BASE)."""
    largest = max((json_bytes(t) for t in traces), default=0)
    return int(WORKER_BASE + WORKER_PER_JSON_BYTE * largest)


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not on Linux
        return os.cpu_count() or 1


def available_memory() -> int:
    """Memory available to new processes now (``MemAvailable``), in bytes."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES"))


def default_workers(traces: Sequence[Path], memory_per_worker: int | None = None) -> int:
    """min(cores, ranks, MEMORY_SHARE x available memory / memory per worker), at least 1."""
    need = memory_per_worker or worker_memory(traces)
    by_memory = int(MEMORY_SHARE * available_memory() // max(1, need))
    return max(1, min(_cores(), len(traces), by_memory))


# ---------------------------------------------------------------- one rank (any worker)


def execute(task: Task) -> dict[str, Any]:
    """Run one rank into its folder; never raises for the user's errors: the outcome says
    ``ok`` (with the record), ``error`` (a TracekitError: class and message) or ``bug``."""
    t0, cpu0 = time.perf_counter(), _cpu()
    try:
        fn = resolve(task.fn)
        with atomic_dir(Path(task.out)) as tmp:
            value = json.loads(json.dumps(fn(Path(task.trace), tmp), allow_nan=False))
            if (tmp / RECORD).exists():
                raise RuntimeError(f"{task.fn} wrote {RECORD}, the engine's own file")
            record = {
                "rank": task.rank,
                "trace": task.trace,
                "key": task.key,
                "value": value,
                "stats": {
                    "wall_s": time.perf_counter() - t0,
                    "cpu_s": _cpu() - cpu0,
                    "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                    "worker": f"{socket.gethostname()}:{os.getpid()}",
                    "trace_bytes": Path(task.trace).stat().st_size,
                    "out_bytes": sum(p.stat().st_size for p in tmp.rglob("*") if p.is_file()),
                },
            }
            atomic_write_json(tmp / RECORD, record)
    except TracekitError as e:
        return {"status": "error", "class": type(e).__name__, "message": str(e)}
    except Exception:
        return {"status": "bug", "message": traceback.format_exc()}
    return {"status": "ok", "record": record}


def _cpu() -> float:
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime


def _result(task: Task, record: Mapping[str, Any], cached: bool) -> RankResult:
    s = record["stats"]
    return RankResult(
        rank=task.rank,
        trace=Path(task.trace),  # where it is now (the key does not hold the folder)
        out=Path(task.out),
        value=record["value"],
        cached=cached,
        wall_s=float(s["wall_s"]),
        peak_rss_bytes=int(s["peak_rss_bytes"]),
        worker=str(s["worker"]),
        trace_bytes=int(s["trace_bytes"]),
        out_bytes=int(s["out_bytes"]),
        cpu_s=float(s["cpu_s"]),
    )


def cached_record(task: Task) -> dict[str, Any] | None:
    """The rank folder's record if it was made from the same key, else None."""
    try:
        record = json.loads((Path(task.out) / RECORD).read_text())
    except (OSError, ValueError):
        return None
    ok = isinstance(record, dict) and record.get("key") == task.key
    return record if ok and record.get("rank") == task.rank else None


# ---------------------------------------------------------------- the local pool


def tune_worker(threads: int) -> None:
    """A worker process runs one rank and exits: tuned as `tracekit parse`/`report` tune
    their process (tracekit.cli.dedicate_process), its parse given ``threads`` threads; it
    ends when the parent dies, and removes its temporary folder when stopped."""
    if sys.platform == "linux":  # PR_SET_PDEATHSIG: SIGTERM when the parent dies, no orphan
        ctypes.CDLL(None).prctl(1, signal.SIGTERM)
    parent = mp.parent_process()
    if parent is not None and not parent.is_alive():  # it died before prctl
        sys.exit(128 + signal.SIGTERM)
    # Ctrl-C is the parent's to handle (it stops the workers); SIGTERM unwinds atomic_dir.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    if parent is not None:
        _end_with(parent)
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    if threads > 0 and "TRACEKIT_WORKERS" not in os.environ:
        os.environ["TRACEKIT_WORKERS"] = str(threads)
    keep_freed_memory()  # a fork server did so before its imports; a spawned worker only now
    from tracekit.parse import dedicate_process

    dedicate_process()


def _end_with(parent: Any) -> None:
    """SIGTERM this worker when the pool's process ends. PR_SET_PDEATHSIG watches the
    process that forked this one: under the fork server that is the server, which lives on
    while any worker it forked does; so the pool's process is watched through the sentinel
    multiprocessing gives its children."""

    def watch() -> None:
        wait([parent.sentinel])
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="tracekit-parent-watch", daemon=True).start()


def _child(conn: Connection, task: Task, env: Mapping[str, str]) -> None:
    if os.environ != env:  # forked from a fork server that started in another environment
        os.environ.clear()
        os.environ.update(env)
    tune_worker(task.threads)
    outcome = execute(task)
    conn.send(outcome)
    conn.close()
    freeze_before_exit()  # a spawned process exits next (a forked one ends without teardown)


@dataclass
class _Running:
    task: Task
    proc: Any  # multiprocessing.context.SpawnProcess


def _stop(running: Mapping[Connection, _Running]) -> None:
    """SIGTERM every worker (it removes its temporary folder), SIGKILL any still alive after
    STOP_GRACE_S, reap them all, and remove what a killed one left behind."""
    for r in running.values():
        if r.proc.is_alive():
            r.proc.terminate()
    deadline = time.monotonic() + STOP_GRACE_S
    for r in running.values():
        r.proc.join(max(0.0, deadline - time.monotonic()))
        if r.proc.is_alive():
            r.proc.kill()
            r.proc.join()
    for r in running.values():
        remove_leftovers(r.task)


PRELOAD = "tracekit.preload"  # what the fork server imports once
POOL_ENV = "TRACEKIT_RANK_POOL"  # auto (default) | forkserver | spawn
_served = False  # this process has started the pool's fork server


def pool_context(ranks: int, workers: int) -> Any:
    """The ``multiprocessing`` context of a local pool that runs ``ranks`` ranks on
    ``workers`` processes; either way each rank gets a process of its own.

    The fork server (Linux, macOS) imports :data:`PRELOAD` once and forks each rank's
    process from it, so a rank starts without importing numpy, pyarrow, pandas and
    tracekit's stages (1.2-1.5 CPU-s each). It pays where processes start after the first
    wave (more ranks than workers) and wherever it already runs (a process that maps ranks
    again: a notebook, a service, the test suite); for a first wave alone, ``spawn``ed
    processes importing in parallel are as quick. ``TRACEKIT_RANK_POOL``: ``auto`` (that
    rule), ``forkserver`` or ``spawn``."""
    global _served
    how = os.environ.get(POOL_ENV, "auto")
    if how not in ("auto", "forkserver", "spawn"):
        raise UsageError(f"{POOL_ENV} must be auto, forkserver or spawn, not {how!r}")
    if how == "spawn" or "forkserver" not in mp.get_all_start_methods():
        return mp.get_context("spawn")
    if how == "auto" and not _served and ranks <= workers:
        return mp.get_context("spawn")
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload([PRELOAD])  # taken when the server starts (at the first rank)
    _served = True
    return ctx


def run_local(
    tasks: Sequence[Task], workers: int, on_done: Callable[[Task, dict[str, Any]], None]
) -> None:
    """Run ``tasks`` on at most ``workers`` processes, one process per task; ``on_done``
    gets every outcome (when it raises, the other workers are stopped)."""
    ctx = pool_context(len(tasks), workers)
    pending = deque(tasks)
    running: dict[Connection, _Running] = {}
    try:
        while pending or running:
            while pending and len(running) < workers:
                task = pending.popleft()
                recv, send = ctx.Pipe(duplex=False)
                args = (send, task, dict(os.environ))  # the environment as of now
                proc = ctx.Process(target=_child, args=args, name=f"rank{task.rank}")
                proc.start()
                send.close()
                running[recv] = _Running(task, proc)
            for conn in wait(list(running)):
                assert isinstance(conn, Connection)
                r = running.pop(conn)
                try:
                    outcome = conn.recv()
                except EOFError:
                    r.proc.join()
                    outcome = died(r.proc.exitcode)
                    remove_leftovers(r.task)
                conn.close()
                r.proc.join()
                on_done(r.task, outcome)
    finally:
        _stop(running)


# ---------------------------------------------------------------- the entry point


def map_ranks(
    fn: PerRank | str,
    inputs: Mapping[int, str | os.PathLike[str]],
    out_dir: str | os.PathLike[str],
    *,
    scheduler: Any = None,
    workers: int | None = None,
    memory_per_worker: int | None = None,
    version: str = "",
    force: bool = False,
    on_result: Callable[[RankResult], None] | None = None,
    on_failure: Callable[[int, str], None] | None = None,
) -> list[RankResult]:
    """Run ``fn(trace, folder)`` for every ``rank: trace`` of ``inputs`` into
    ``out_dir/rank<R>/`` and return the results by rank (see the module's docstring).

    ``scheduler``: None (a local process pool), a Dask scheduler address
    (``tcp://HOST:PORT``) or a ``distributed.Client``. ``workers``: local worker processes
    (default :func:`default_workers`, with ``memory_per_worker`` bytes each if given).
    ``version``: the per-rank function's own version, part of the cache key (change it
    when its output changes). ``force``: ignore cached results. ``on_result``: called with
    each result as it is ready (cached ones first). ``on_failure``: when given, a rank whose
    ``fn`` raised a TracekitError or whose worker died is not an error of the run: it is
    called with the rank and one line saying what went wrong, and the other ranks go on (a
    bug in ``fn`` still ends the run); without it, the first such rank ends the run."""
    name = function_name(fn)
    out = Path(out_dir)
    traces = {int(r): Path(p) for r, p in inputs.items()}
    if not traces:
        raise UsageError("no rank traces to analyse")
    for r, p in traces.items():
        if r < 0:
            raise UsageError(f"{p}: rank {r} is negative")
        if not p.is_file():
            raise UsageError(f"rank {r}: {p}: no such file")
    todo: list[Task] = []
    results: dict[int, RankResult] = {}

    def done(task: Task, outcome: dict[str, Any]) -> None:
        if outcome["status"] != "ok":
            if on_failure is None or outcome["status"] == "bug":
                raise_failure(task, outcome)
            else:
                on_failure(task.rank, failure_message(task, outcome))
            return
        res = _result(task, outcome["record"], cached=False)
        results[task.rank] = res
        if on_result is not None:
            on_result(res)

    for r in sorted(traces):
        key = cache_key(traces[r], name, version)
        task = Task(name, r, str(traces[r]), str(out / f"rank{r}"), key)
        record = None if force else cached_record(task)
        if record is None:
            todo.append(task)
            continue
        results[r] = _result(task, record, cached=True)
        if on_result is not None:
            on_result(results[r])
    if todo and scheduler is not None:
        from tracekit.ranks.cluster import run_dask

        run_dask(todo, scheduler, done)
    elif todo:
        n = workers
        if n is None:
            n = default_workers([Path(t.trace) for t in todo], memory_per_worker)
        if n < 1:
            raise UsageError(f"--workers must be at least 1, not {n}")
        n = min(n, len(todo))
        threads = max(1, _cores() // n)
        run_local([_with_threads(t, threads) for t in todo], n, done)
    return [results[r] for r in sorted(results)]


def _with_threads(task: Task, threads: int) -> Task:
    return Task(task.fn, task.rank, task.trace, task.out, task.key, threads)


def read_table(
    results: Sequence[RankResult], name: str, columns: Sequence[str] | None = None
) -> pa.Table:
    """The reduction's input: ``rank<R>/<name>`` (a Parquet file ``fn`` wrote) of every rank,
    only ``columns``, concatenated with a leading ``rank`` column (int32). Read only what
    the reduction needs: the per-rank tables together are as large as the traces' tables."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    parts = []
    for res in sorted(results, key=lambda x: x.rank):
        path = res.out / name
        try:
            t = pq.read_table(path, columns=list(columns) if columns is not None else None)
        except (OSError, pa.ArrowInvalid) as e:
            raise TracekitError(f"rank {res.rank}: unreadable {path} ({e})") from None
        rank = pa.array([res.rank] * t.num_rows, pa.int32())
        parts.append(t.add_column(0, "rank", rank))
    if not parts:
        raise UsageError("no rank results to read")
    return pa.concat_tables(parts, promote_options="default")
