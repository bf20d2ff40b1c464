"""One rank's task and its outcomes, shared by the two places a rank runs: the local
worker pool (:mod:`tracekit.ranks.engine`) and a Dask cluster (:mod:`tracekit.ranks.cluster`).
Its own module so that the engine, which hands tasks to the cluster, and the cluster, which
reports them the engine's way, need not import each other."""

from __future__ import annotations

import shutil
import signal
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tracekit.errors as errors
from tracekit.errors import TracekitError


@dataclass(frozen=True)
class Task:
    """What a worker needs to run one rank (picklable: sent to spawned and Dask workers)."""

    fn: str  # "module:qualname"
    rank: int
    trace: str
    out: str  # the rank's final folder
    key: dict[str, Any]
    threads: int = 0  # TRACEKIT_WORKERS for the parse in a local worker (0: leave as is)


def failure_message(task: Task, outcome: Mapping[str, Any]) -> str:
    """One line naming the failed rank, its file and what went wrong."""
    where = f"rank {task.rank}"
    if task.trace not in outcome["message"]:
        where += f" ({task.trace})"
    return f"{where}: {outcome['message']}"


def raise_failure(task: Task, outcome: Mapping[str, Any]) -> None:
    """The one-line error for a failed rank, naming it and its file (a bug: the traceback)."""
    if outcome["status"] == "error":
        cls = getattr(errors, str(outcome.get("class")), TracekitError)
        if not (isinstance(cls, type) and issubclass(cls, TracekitError)):
            cls = TracekitError
        raise cls(failure_message(task, outcome))
    if outcome["status"] == "died":
        raise TracekitError(failure_message(task, outcome))
    where = f"rank {task.rank}" + ("" if task.trace in outcome["message"] else f" ({task.trace})")
    raise RuntimeError(f"{where}: the per-rank function failed\n{outcome['message']}")


def remove_leftovers(task: Task) -> None:
    """Remove the temporary folders of a rank whose worker was killed (atomic_dir's)."""
    out = Path(task.out)
    for left in out.parent.glob(f".{out.name}.*"):
        shutil.rmtree(left, ignore_errors=True)


def died(code: int | None, detail: str = "") -> dict[str, Any]:
    """The outcome of a worker process that ended with exit status ``code`` and no result."""
    if code is not None and code < 0:
        why = f"signal {-code} ({signal.Signals(-code).name})"
        if -code == signal.SIGKILL:
            why += ": killed, out of memory?"
    else:
        why = f"exit status {code}"
    why += f": {detail}" if detail else ""
    return {"status": "died", "message": f"its worker process ended without a result, {why}"}
