"""The per-rank work on an existing Dask distributed cluster (``--scheduler tcp://HOST:PORT``).

Each rank is one task, :func:`dask_task`: it runs the rank in a process of its own, forked
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


def run_dask(
    tasks: Sequence[Task], scheduler: Any, on_done: Callable[[Task, dict[str, Any]], None]
) -> None:
    """Submit every task; report each outcome (ok or not) as it completes. When ``on_done``
    raises (a failure the caller does not tolerate) the others are cancelled (a task
    already running finishes in its worker thread, atomically, and its result is
    dropped)."""
    distributed = _distributed()
    run = uuid.uuid4().hex
    with client_for(scheduler) as client:
        futures = {
            client.submit(dask_task, t, key=f"tracekit-rank{t.rank}-{run}", pure=False): t
            for t in tasks
        }
        try:
            for fut in distributed.as_completed(list(futures), loop=client.loop):
                task = futures[fut]
                try:
                    outcome = fut.result()
                except Exception as e:  # the Dask worker died, or the task was lost
                    outcome = {"status": "died", "message": f"Dask: {type(e).__name__}: {e}"}
                on_done(task, outcome)
        finally:
            client.cancel([f for f in futures if not f.done()])
