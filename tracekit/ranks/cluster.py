"""The per-rank work on an existing Dask distributed cluster (``--scheduler tcp://HOST:PORT``).

Each rank runs in :func:`dask_task` (small jobs' ranks in batches, one Dask task per
batch: :func:`batch_size`): it runs the rank in a process of its own, forked by a rank
server that each Dask worker process keeps and its threads share (``python -m
tracekit.ranks.worker --serve``: the imports once, as the local pool's fork server), as the
local pool does — the same code, tuning, per-rank peak RSS and files; the per-rank function
travels by importable
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


class _Server:
    """This Dask worker process's rank server (``python -m tracekit.ranks.worker --serve``),
    shared by its threads: each sends its task with an id and waits for the outcome of that
    id, which a reader thread hands over as the server writes it."""

    def __init__(self) -> None:
        env = dict(
            os.environ,
            PYTHONPATH=os.pathsep.join(p for p in sys.path if p),
            OPENBLAS_NUM_THREADS="1",
            JE_ARROW_MALLOC_CONF="background_thread:false",  # it forks with one thread
        )
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tracekit.ranks.worker", "--serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.waiting: dict[str, tuple[threading.Event, list[dict[str, Any]]]] = {}
        self.lock = threading.Lock()
        threading.Thread(target=self._read, name="tracekit-rank-server", daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.strip():
                msg = json.loads(line)
                with self.lock:
                    waiter = self.waiting.pop(str(msg["id"]), None)
                if waiter is not None:  # else not ours to hand over (never: ids are unique)
                    waiter[1].append(dict(msg["outcome"]))
                    waiter[0].set()
        code = self.proc.wait()  # the server ended: every rank still waiting died with it
        with self.lock:
            left, self.waiting = self.waiting, {}
        for event, slot in left.values():
            slot.append(died(code, "its rank server ended (see the Dask worker's log)"))
            event.set()

    def run(self, task: Task) -> dict[str, Any] | None:
        """The task's outcome (None: the server could not be sent it)."""
        assert self.proc.stdin is not None
        ident, event = uuid.uuid4().hex, threading.Event()
        slot: list[dict[str, Any]] = []
        line = json.dumps({"id": ident, "task": dataclasses.asdict(task)})
        with self.lock:
            self.waiting[ident] = (event, slot)
            try:
                self.proc.stdin.write(line + "\n")
                self.proc.stdin.flush()
            except OSError:
                self.waiting.pop(ident, None)
                return None
        event.wait()
        return slot[0]


_server: _Server | None = None
_server_lock = threading.Lock()


def _rank_server() -> _Server:
    """This process's rank server, started on first use and again if it has died."""
    global _server
    with _server_lock:
        if _server is None or _server.proc.poll() is not None:
            _server = _Server()
        return _server


def dask_task(task: Task) -> dict[str, Any]:
    """What a Dask worker runs for one rank: the rank in a process forked for it by this
    process's rank server (see the module); its outcome, or ``died`` with the server's exit
    status (its error is in the Dask worker's log)."""
    server = _rank_server()
    outcome = server.run(dataclasses.replace(task, threads=1))
    if outcome is not None and outcome.get("status") != "died":
        return outcome
    remove_leftovers(task)
    if outcome is not None:
        return outcome
    return died(server.proc.wait(), "its rank server ended (see the Dask worker's log)")


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
