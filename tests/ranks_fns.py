"""Per-rank functions for tests/test_ranks_engine.py: workers import them by name
(``tests.ranks_fns:...``), so they live in a module, not in the test file."""

from __future__ import annotations

import atexit
import gc
import os
import sys
import time
from pathlib import Path
from typing import Any


def parse_counts(trace: Path, out: Path) -> dict[str, Any]:
    """The parse stage as a per-rank function: the tables into ``out/tables``, the counts."""
    from tracekit.parse import parse_to_dir

    r = parse_to_dir(trace, out / "tables")
    return {"counts": r.meta["counts"], "events": r.meta["source"]["events"]}


def slow_unless_bad(trace: Path, out: Path) -> dict[str, Any]:
    """A trace named ``bad*`` is parsed (and fails); any other writes a file, records this
    process's pid beside the trace and sleeps long enough to be stopped."""
    if trace.name.startswith("bad"):
        return parse_counts(trace, out)
    (out / "partial.txt").write_text("half")
    (trace.parent / f"{trace.name}.pid").write_text(str(os.getpid()))
    time.sleep(120)
    return {}


def writes_record(trace: Path, out: Path) -> int:
    (out / "rank.json").write_text("{}")
    return 1


def divides_by_zero(trace: Path, out: Path) -> float:
    return 1 / 0


def exits(trace: Path, out: Path) -> None:
    """The worker process ends (as if killed) before it can answer."""
    os._exit(3)


def notes_the_exit(trace: Path, out: Path) -> None:
    """When the worker process exits, writes how many objects it had frozen by then
    (``<trace>.frozen``, beside the trace)."""
    side = trace.parent / f"{trace.name}.frozen"
    atexit.register(lambda: side.write_text(str(gc.get_freeze_count())))


def what_it_started_with(trace: Path, out: Path) -> dict[str, Any]:
    """What this rank's process had imported before the function ran, and who forked it."""
    parent = Path(f"/proc/{os.getppid()}/task")  # Linux: the forking process's threads
    return {"pandas": "pandas" in sys.modules, "pid": os.getpid(), "ppid": os.getppid(),
            "env": os.environ.get("TRACEKIT_TEST_MARK"),
            "parent_threads": len(list(parent.iterdir())) if parent.is_dir() else None}  # fmt: skip
