"""Run a sweep: one ``tracekit collect`` subprocess per configuration.

Each configuration runs in its own process (``python -m tracekit.cli collect``), so an
out-of-memory error, a CUDA error or a crash cannot poison the next one, and each has a
wall-clock timeout. After every configuration the whole table is rewritten atomically
(``sweep.parquet`` + ``sweep.csv``): Ctrl-C keeps the finished rows, and ``resume``
skips configurations whose status is ``ok`` or ``oom`` (``error`` rows run again).
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from tracekit.errors import UsageError
from tracekit.io import atomic_write_bytes, atomic_write_json
from tracekit.manifest import read_manifest
from tracekit.sweep.plan import Point, SweepPlan
from tracekit.sweep.rows import base_row, complete, oom_requested_bytes, run_row

TABLE = "sweep.parquet"
CSV = "sweep.csv"
PLAN = "sweep.json"
RUNS = "runs"
DONE = ("ok", "oom")
FIRST_COLUMNS = (
    "key",
    "batch",
    "seq",
    "dtype",
    "attention",
    "gpus",
    "tokens",
    "workload",
    "options",
    "status",
    "error",
    "oom_requested_bytes",
    "exit_code",
    "wall_s",
    "run_dir",
)
STDERR_TAIL = 4000


def collect_command(plan: SweepPlan, point: Point, out: Path, *, ceilings: bool) -> list[str]:
    """The ``tracekit collect`` command line of one configuration."""
    cmd = [
        sys.executable,
        "-m",
        "tracekit.cli",
        "collect",
        "--preset",
        plan.preset,
        "--device",
        plan.device,
        "--batch",
        str(point.batch),
        *_length_args(plan, point),
        "--dtype",
        point.dtype,
        "--attention",
        point.attention,
        "--steps",
        str(plan.steps),
        "--warmup",
        str(plan.warmup),
        "--profile-wait",
        str(plan.profile_wait),
        "--profile-warmup",
        str(plan.profile_warmup),
        "--profile-active",
        str(plan.profile_active),
        "--profile-repeat",
        "1",
        "--no-memory-snapshot",
        "--quiet",
        "-o",
        str(out),
    ]
    if plan.layers is not None:
        cmd += ["--layers", str(plan.layers)]
    if plan.block_size is not None:
        cmd += ["--block-size", str(plan.block_size)]
    if plan.with_stack:
        cmd.append("--with-stack")
    if not ceilings:
        cmd.append("--no-ceilings")
    if point.gpus > 1:
        cmd += ["--gpus", str(point.gpus), "--parallel", plan.parallel]
    cmd += list(plan.collect_args)
    cmd += list(point.options)
    return cmd


def _length_args(plan: SweepPlan, point: Point) -> list[str]:
    """Training: ``--seq``. Generate: the point's seq is the context, prompt + new tokens."""
    if plan.workload == "generate":
        prompt = point.seq - plan.new_tokens
        return ["--workload", "generate", "--prompt", str(prompt),
                "--new-tokens", str(plan.new_tokens)]  # fmt: skip
    return ["--seq", str(point.seq)]


def _last_error_line(stderr: str) -> str:
    lines = [ln.strip() for ln in stderr.strip().splitlines() if ln.strip()]
    for ln in reversed(lines):
        if ln.startswith("tracekit: error:"):
            return ln[len("tracekit: error:") :].strip()
    return lines[-1] if lines else "no output"


def run_point(
    plan: SweepPlan,
    point: Point,
    out_dir: Path,
    *,
    measure_ceilings: bool,
    ceilings: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """Collect one configuration in a subprocess; returns (row, its measured ceilings)."""
    run_dir = out_dir / RUNS / point.key
    cmd = collect_command(plan, point, run_dir, ceilings=measure_ceilings)
    t0 = time.monotonic()
    stderr, code = "", None
    try:
        proc = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            timeout=plan.timeout_s,
            env=dict(env) if env is not None else None,
            check=False,
        )
        stderr, code = proc.stderr, proc.returncode
        timed_out = False
    except subprocess.TimeoutExpired as e:  # run() has killed the child
        err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else e.stderr
        stderr, timed_out = err or "", True
    wall = time.monotonic() - t0
    mpath = run_dir / "manifest.json"
    mf = read_manifest(mpath) if not timed_out and mpath.is_file() else None
    if timed_out:
        row = base_row(point)
        row.update(status="error", error=f"timed out after {plan.timeout_s:g} s")
    elif mf is not None and mf.status == "ok" and code == 0:
        row = run_row(point, run_dir, mf.raw, ceilings=ceilings)
        row.update(status="ok", error=None)
    elif mf is not None:
        row = base_row(point)
        status = mf.status or "error"
        row.update(
            status=status if status in ("oom", "error") else "error",
            error=mf.error or _last_error_line(stderr),
        )
    else:
        row = base_row(point)
        row.update(status="error", error=_last_error_line(stderr))
    row["oom_requested_bytes"] = (
        oom_requested_bytes(row["error"]) if row["status"] == "oom" else math.nan
    )
    row["workload"] = plan.workload
    row["exit_code"] = float(code) if code is not None else math.nan
    row["wall_s"] = wall
    row["run_dir"] = str(Path(RUNS) / point.key) if run_dir.is_dir() else None
    if row["status"] == "error" and stderr and not timed_out:
        row["stderr_tail"] = stderr[-STDERR_TAIL:]
    measured = dict(mf.ceilings.raw) if measure_ceilings and mf and mf.ceilings else None
    return row, measured


def order_columns(df: pd.DataFrame) -> pd.DataFrame:
    first = [c for c in FIRST_COLUMNS if c in df.columns]
    out: pd.DataFrame = df[first + [c for c in df.columns if c not in first]]
    return out


def write_table(out_dir: Path, rows: list[dict[str, Any]]) -> pd.DataFrame:
    """Rewrite sweep.parquet and sweep.csv atomically; returns the table."""
    df = order_columns(complete(pd.DataFrame(rows)))
    for c in df.columns:  # all-null object columns would be written as Arrow null type
        if df[c].dtype == object and df[c].isna().all():
            df[c] = df[c].astype("string")
    buf = io.BytesIO()
    df.to_parquet(buf, index=False)
    atomic_write_bytes(out_dir / TABLE, buf.getvalue())
    atomic_write_bytes(out_dir / CSV, df.to_csv(index=False).encode())
    return df


def read_table(out_dir: Path) -> pd.DataFrame:
    path = Path(out_dir) / TABLE
    if not path.is_file():
        raise UsageError(f"{out_dir}: no {TABLE} (run `tracekit sweep -o {out_dir}` first)")
    return pd.read_parquet(path)


class _Progress:
    """A rich progress bar with an ETA on a terminal; nothing otherwise."""

    def __init__(self, total: int, quiet: bool) -> None:
        from rich.console import Console

        self.console = Console(stderr=True)
        self.enabled = not quiet and self.console.is_terminal
        self.total = total
        self._p: Any = None
        self._task: Any = None

    @contextlib.contextmanager
    def running(self, done: int) -> Iterator[_Progress]:
        if not self.enabled:
            yield self
            return
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            SpinnerColumn,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        with Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=self.console,
        ) as p:
            self._p = p
            self._task = p.add_task("sweep", total=self.total, completed=done)
            yield self

    def start(self, key: str) -> None:
        if self._p is not None:
            self._p.update(self._task, description=f"collecting {key}")

    def finished(self, key: str, status: str) -> None:
        if self._p is not None:
            self._p.console.print(f"{key}: {status}")
            self._p.advance(self._task)


def run_sweep(
    plan: SweepPlan,
    out_dir: Path,
    *,
    resume: bool = False,
    quiet: bool = False,
    env: Mapping[str, str] | Callable[[Point], Mapping[str, str]] | None = None,
    on_row: Callable[[dict[str, Any]], None] | None = None,
) -> pd.DataFrame:
    """Run every configuration of ``plan`` into ``out_dir``; returns the sweep table.
    ``env``: the subprocesses' environment, or a function giving it per point."""
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise UsageError(f"-o {out_dir} exists and is not a folder")
    rows: list[dict[str, Any]] = []
    ceilings: dict[str, Any] = {}
    if (out_dir / TABLE).is_file():
        if not resume:
            raise UsageError(
                f"{out_dir} already holds a sweep: pass --resume to continue it, "
                "or choose another -o"
            )
        rows = [{str(k): v for k, v in r.items()} for r in read_table(out_dir).to_dict("records")]
        with contextlib.suppress(OSError, ValueError):
            ceilings = json.loads((out_dir / PLAN).read_text()).get("ceilings") or {}
    out_dir.mkdir(parents=True, exist_ok=True)
    done = {r["key"] for r in rows if r.get("status") in DONE}
    rows = [r for r in rows if r["key"] in done]  # failed rows are run again
    points = plan.points()
    todo = [p for p in points if p.key not in done]

    def save_plan() -> None:
        atomic_write_json(out_dir / PLAN, {**plan.to_dict(), "ceilings": ceilings})

    save_plan()
    progress = _Progress(len(points), quiet)
    with progress.running(len(points) - len(todo)):
        for point in todo:
            progress.start(point.key)
            measure = _ceiling_key(point) not in ceilings  # once per precision, GPU count
            row, measured = run_point(
                plan,
                point,
                out_dir,
                measure_ceilings=measure,
                ceilings=_ceilings_for(ceilings, point),
                env=env(point) if callable(env) else env,
            )
            if measured:
                ceilings[_ceiling_key(point)] = measured
                save_plan()
            rows.append(row)
            write_table(out_dir, _in_plan_order(rows, points))
            progress.finished(point.key, row["status"])
            if on_row is not None:
                on_row(row)
    return write_table(out_dir, _in_plan_order(rows, points))


def _ceiling_key(point: Point) -> str:
    """Ceilings are measured once per dtype, and once more per GPU count above one (those
    runs add the interconnect's)."""
    return point.dtype if point.gpus == 1 else f"{point.dtype}-g{point.gpus}"


def _ceilings_for(ceilings: Mapping[str, Any], point: Point) -> Mapping[str, Any] | None:
    """The sweep's ceilings measured with this dtype (and GPU count), else any (its fp32
    roof is the same)."""
    return (
        ceilings.get(_ceiling_key(point))
        or ceilings.get(point.dtype)
        or next(iter(ceilings.values()), None)
    )


def _in_plan_order(rows: list[dict[str, Any]], points: list[Point]) -> list[dict[str, Any]]:
    rank = {p.key: i for i, p in enumerate(points)}
    return sorted(rows, key=lambda r: rank.get(r["key"], len(rank)))


def default_env() -> dict[str, str]:
    """The subprocesses' environment: ours, with this tracekit importable."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return env
