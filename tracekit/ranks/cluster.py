"""The per-rank work on an existing Dask distributed cluster (``--scheduler tcp://HOST:PORT``).

Each rank runs in :func:`dask_task` (small jobs' ranks in batches, one Dask task per
batch: :func:`batch_size`): it runs the rank in a process of its own, forked
by a rank server that each Dask worker thread keeps (``python -m tracekit.ranks.worker
--serve``: the imports once, as the local pool's fork server), as the local pool does — the
same code, tuning, per-rank peak RSS and files; the per-rank function travels by importable
name. Needs ``pip install 'tracekit[dask]'`` (``dask[distributed]``) here and on every
worker, tracekit installed on the workers, and the traces and the output folder at the same
paths on every worker (a shared filesystem). A worker thread runs one rank at a time, with one
parse thread: start workers with ``--nthreads`` = the ranks a machine may hold at once.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from tracekit.errors import UsageError
from tracekit.ranks.tasks import Task, died, remove_leftovers

CONNECT_TIMEOUT_S = 10.0
_ADDRESS = re.compile(r"^(tcp|tls|ucx|inproc|ws|wss)://\S+$")


def check_scheduler(address: str) -> str:
    """The ``--scheduler`` value, validated: ``tcp://HOST:PORT`` (or another Dask protocol)."""
    if not _ADDRESS.match(address):
        raise UsageError(
            f"--scheduler {address!r}: expected a Dask scheduler address such as tcp://HOST:8786"
        )
    return address


def _distributed() -> Any:
    try:
        import distributed
    except ImportError:
        raise UsageError(
            "--scheduler needs Dask distributed: pip install 'tracekit[dask]'"
        ) from None
    return distributed


@contextlib.contextmanager
def client_for(scheduler: Any) -> Iterator[Any]:
    """A client of ``scheduler`` (an address: connected here and closed after; a
    ``distributed.Client``: used as it is)."""
    distributed = _distributed()
    if isinstance(scheduler, distributed.Client):
        yield scheduler
        return
    address = check_scheduler(str(scheduler))
    try:
        client = distributed.Client(address, timeout=CONNECT_TIMEOUT_S, set_as_default=False)
    except (OSError, TimeoutError) as e:
        raise UsageError(f"--scheduler {address}: cannot connect ({e})") from None
    try:
        yield client
    finally:
        client.close()


_servers = threading.local()  # per Dask worker thread: its rank server


def _server() -> subprocess.Popen[str]:
    """This thread's rank server (``python -m tracekit.ranks.worker --serve``), started on
    first use and again if it has died."""
    proc: subprocess.Popen[str] | None = getattr(_servers, "proc", None)
    if proc is None or proc.poll() is not None:
        env = dict(
            os.environ,
            PYTHONPATH=os.pathsep.join(p for p in sys.path if p),
            OPENBLAS_NUM_THREADS="1",
            JE_ARROW_MALLOC_CONF="background_thread:false",  # it forks with one thread
        )
        proc = subprocess.Popen(
            [sys.executable, "-m", "tracekit.ranks.worker", "--serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        _servers.proc = proc
    return proc


def dask_task(task: Task) -> dict[str, Any]:
    """What a Dask worker runs for one rank: the rank in a process forked for it by this
    thread's rank server (see the module); its outcome, or ``died`` with the server's exit
    status (its error is in the Dask worker's log)."""
    proc = _server()
    assert proc.stdin is not None and proc.stdout is not None
    line = ""
    try:
        proc.stdin.write(json.dumps(dataclasses.asdict(dataclasses.replace(task, threads=1))))
        proc.stdin.write("\n")
        proc.stdin.flush()
        line = proc.stdout.readline()
    except OSError:
        pass
    if line.strip():
        return json.loads(line)  # type: ignore[no-any-return]
    remove_leftovers(task)
    code = proc.wait()
    return died(code, "its rank server ended (see the Dask worker's log)")


def dask_batch(tasks: Sequence[Task]) -> list[dict[str, Any]]:
    """What a Dask worker runs for a batch of ranks: :func:`dask_task` for each, in turn
    (one outcome per task, in order)."""
    return [dask_task(t) for t in tasks]


BATCHES_PER_THREAD = 4  # enough Dask tasks per worker thread to balance the ranks' lengths
MAX_BATCH = 8  # ranks per Dask task at most


def batch_size(ranks: int, threads: int) -> int:
    """Ranks per Dask task: Dask spends milliseconds of CPU on a task (client, scheduler,
    worker), as much as a small rank's own analysis, so small jobs' ranks travel in
    batches; at most :data:`MAX_BATCH`, and never so many that a thread gets fewer than
    :data:`BATCHES_PER_THREAD` tasks (1 per task on a cluster as large as the job)."""
    return max(1, min(MAX_BATCH, ranks // (BATCHES_PER_THREAD * max(1, threads))))


def batches(tasks: Sequence[Task], size: int) -> list[list[Task]]:
    """``tasks`` in consecutive batches of ``size`` (the last one shorter)."""
    return [list(tasks[i : i + size]) for i in range(0, len(tasks), max(1, size))]


def run_dask(
    tasks: Sequence[Task], scheduler: Any, on_done: Callable[[Task, dict[str, Any]], None]
) -> None:
    """Submit every task, in batches (:func:`batch_size`); report each outcome (ok or not)
    as its batch completes. When ``on_done`` raises (a failure the caller does not tolerate)
    the others are cancelled (a batch already running finishes in its worker thread, each
    rank atomically, and its results are dropped)."""
    distributed = _distributed()
    run = uuid.uuid4().hex
    with client_for(scheduler) as client:
        threads = sum(client.nthreads().values())
        futures = {
            client.submit(
                dask_batch, b, key=f"tracekit-ranks{b[0].rank}-{b[-1].rank}-{run}", pure=False
            ): b
            for b in batches(tasks, batch_size(len(tasks), threads))
        }
        try:
            for fut in distributed.as_completed(list(futures), loop=client.loop):
                batch = futures[fut]
                try:
                    outcomes = fut.result()
                except Exception as e:  # the Dask worker died, or the task was lost
                    lost = {"status": "died", "message": f"Dask: {type(e).__name__}: {e}"}
                    outcomes = [lost] * len(batch)
                for task, outcome in zip(batch, outcomes, strict=True):
                    on_done(task, outcome)
        finally:
            client.cancel([f for f in futures if not f.done()])
