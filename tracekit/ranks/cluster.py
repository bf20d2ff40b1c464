"""The per-rank work on an existing Dask distributed cluster (``--scheduler tcp://HOST:PORT``).

Each rank is one task, :func:`dask_task`: it runs the rank in a process of its own
(``python -m tracekit.ranks.worker``), as the local pool does — the same code, tuning,
per-rank peak RSS and files; the per-rank function travels by importable name. Needs
``pip install 'tracekit[dask]'`` (``dask[distributed]``) here and on every worker,
tracekit installed on the workers, and the traces and the output folder at the same paths
on every worker (a shared filesystem). A worker thread runs one rank at a time, with one
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


def dask_task(task: Task) -> dict[str, Any]:
    """What a Dask worker runs for one rank: the rank in a child process (see the module);
    its outcome, or ``died`` with the child's exit status and last error line."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    proc = subprocess.run(
        [sys.executable, "-m", "tracekit.ranks.worker"],
        input=json.dumps(dataclasses.asdict(dataclasses.replace(task, threads=1))),
        capture_output=True,
        text=True,
        env=env,
    )
    lines = proc.stdout.strip().splitlines()
    if proc.returncode == 0 and lines:
        return json.loads(lines[-1])  # type: ignore[no-any-return]
    remove_leftovers(task)
    return died(proc.returncode, (proc.stderr.strip().splitlines() or [""])[-1])


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
