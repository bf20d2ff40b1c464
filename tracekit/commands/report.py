"""``tracekit report``: find the job, load the trace, run the pipeline, then render.

The rendering (every output file, the plots, TensorBoard) is
:func:`tracekit.reports.render.render`'s; this module decides what is analysed and how
(a multi-rank job through :mod:`tracekit.jobs`, the plot worker that draws while the
summary is computed, the TensorBoard target and its trace copy beside the parse) and times
each stage.
"""

from __future__ import annotations

import contextlib
import os
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import tracekit.reports.plots as plots
import tracekit.reports.tbtrace as tbtrace
from tracekit.analyse import Options, analyse, generates, load_run
from tracekit.errors import TraceError, UsageError
from tracekit.io import readable_input
from tracekit.jobs import Job, job_of
from tracekit.manifest import manifest_or_empty
from tracekit.parse import TRACE_SUFFIXES, Trace, find_trace
from tracekit.ranks.document import ranks_json
from tracekit.reports.render import ReportResult, facts_hook, render
from tracekit.summary.timeline import MODES as TIMELINE_MODES

REPORT_DIR = "report"
# GPU activities + operators from which the plots are drawn in a worker process: its start
# (a Python with numpy and matplotlib, ~0.5 s of CPU on another core) then costs less than
# the drawing and the matplotlib import it takes off this process
WORKER_ROWS = 100_000

# (run folder inside the logdir, trace file to copy for the profiler plugin or None)
Target = tuple[Path, Path | None]


def stem(path: Path) -> str:
    """A trace file's name without its trace suffix (``x.pt.trace.json.gz`` -> ``x``)."""
    name = path.name
    for suf in TRACE_SUFFIXES:
        if name.endswith(suf):
            return name[: -len(suf)] or name
    return name


def default_out(path: Path) -> Path:
    """``<run>/report/`` for a folder, ``<trace stem>.report/`` beside a trace file."""
    path = Path(path)
    if path.is_dir():
        return path / REPORT_DIR
    return path.with_name(stem(path) + ".report")


def _tb_target(
    path: Path, logdir: Path | None, enabled: bool, trace: Path | None = None
) -> Target | None:
    """The TensorBoard output's :data:`Target`, or None for no TensorBoard output.

    A run folder from ``tracekit collect`` writes into its own logdir (manifest
    ``artifacts.tensorboard``) unless told otherwise; a trace file only with a logdir.
    ``trace``: the folder's trace to copy (a multi-rank folder's representative rank)."""
    if not enabled:
        return None
    if path.is_dir():
        if (path / "meta.json").is_file():  # a parsed folder: no trace file to copy
            return None if logdir is None else (logdir / path.name, None)
        found, manifest = find_trace(path)
        trace = trace or found
        if logdir is None:
            rel = manifest_or_empty(manifest).artifacts.tensorboard
            if not rel:
                return None
            logdir = path / str(rel)
        return logdir / path.name, trace
    if logdir is None:
        return None
    return logdir / stem(path), path


def _remove_empty(*dirs: Path) -> None:
    """Remove folders a failed report created, if they stayed empty."""
    for d in dirs:
        with contextlib.suppress(OSError):
            d.rmdir()
        with contextlib.suppress(OSError):
            d.parent.rmdir()


def report(
    path: Path | str,
    out: Path | str | None = None,
    *,
    tensorboard: Path | str | None = None,
    no_tensorboard: bool = False,
    peak_tflops: float | None = None,
    bandwidth_gbs: float | None = None,
    classification: Any = None,
    plot_worker: bool | None = None,
    rank: int | None = None,
    scheduler: str | None = None,
    workers: int | None = None,
    timeline: str = "auto",
) -> ReportResult:
    """Run the whole report for a trace file, a run folder or a parsed folder.

    A folder of a multi-rank job's traces (:func:`tracekit.ranks.discover.discover`) gets
    the multi-rank analysis of every rank (``scheduler``/``workers``: where the per-rank
    work runs, :func:`tracekit.ranks.engine.map_ranks`) and the detailed report of one rank
    (``rank``, default the lowest).

    ``classification`` replaces the classify stage's output (tests only). ``plot_worker``:
    draw the plots in a separate process while this one classifies and summarises (None:
    for traces of at least ``WORKER_ROWS`` GPU activities and operators, where that saves
    more than the worker's start costs, when this process may use more than one core).
    ``timeline``: where the idle, launch and overlap figures come from
    (``tracekit.summary.timeline.for_report``: auto, light or full)."""
    path = Path(path)
    readable_input(path)
    if tensorboard is not None and no_tensorboard:
        raise UsageError("--tensorboard and --no-tensorboard exclude each other")
    if timeline not in TIMELINE_MODES:
        raise UsageError(f"--timeline must be one of {', '.join(TIMELINE_MODES)}, not {timeline!r}")
    dest = Path(out) if out is not None else default_out(path)
    job = job_of(path, rank, scheduler, workers)
    target = _tb_target(
        path,
        Path(tensorboard) if tensorboard is not None else None,
        not no_tensorboard,
        job.trace if job is not None else None,
    )
    opts = Options(
        peak_tflops=peak_tflops, bandwidth_gbs=bandwidth_gbs, classification=classification,
        timeline=timeline, timings={},
    )  # fmt: skip
    assert opts.timings is not None
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=1) as pool:
        # The plugin copy is I/O and zlib (which releases the GIL): it runs beside parsing.
        copy: Future[tbtrace.CopyResult] | None = None
        if target is not None and target[1] is not None:
            copy = pool.submit(tbtrace.plugin_copy, target[1], target[0])
        try:
            result = _run(path, dest, target, opts, plot_worker, job)
            if copy is not None:
                t = time.perf_counter()
                result.plugin_trace = copy.result()
                opts.timings["plugin_copy_wait"] = time.perf_counter() - t
        except BaseException:
            if copy is not None and not copy.cancel():
                done = copy.exception() is None and copy.result()
                if done:  # a report that failed leaves no half of its outputs behind
                    done.path.unlink(missing_ok=True)
            if target is not None and target[1] is not None:
                _remove_empty(target[0])
            raise
    opts.timings["total"] = time.perf_counter() - t0
    return result


def _run(
    path: Path,
    dest: Path,
    target: Target | None,
    opts: Options,
    plot_worker: bool | None,
    job: Job | None,
) -> ReportResult:
    """Load, analyse (a job's ranks first), then render; ``opts.timings`` gets each stage."""
    timings = opts.timings
    assert timings is not None
    t = time.perf_counter()
    # a trace without GPU activity is its CPU view (a generate run has its prefill, and
    # its decode steps' report says what CPU runs lack)
    trace = load_run(path) if job is None else job.load()
    timings["parse"] = time.perf_counter() - t
    if job is not None and len(trace.kernels) == 0 and not generates(trace):
        raise TraceError(
            f"{path}: CPU-only traces ({job.describe()}): no kernel, memcpy or memset "
            "events: a multi-rank report needs GPU activity; `tracekit parse` writes "
            "every rank's CPU tables"
        )
    if job is not None:
        t = time.perf_counter()
        job.analyse(dest.with_name(dest.name + ".ranks"))
        timings["ranks"] = time.perf_counter() - t
    if plot_worker is None:
        plot_worker = uses_worker(trace)
    with plots.PlotWorker() if plot_worker else contextlib.nullcontext() as worker:
        drawing = replace(opts, on_facts=facts_hook(worker))  # drawn while summarising
        ranks = job.summary if job is not None else None
        sm = analyse(trace, drawing, ranks=ranks, ranks_doc=ranks_json).summary
        assert sm is not None
        tb_dir = target[0] if target is not None else None
        return render(sm, dest, worker=worker, tensorboard=tb_dir, timings=timings)


def uses_worker(trace: Trace) -> bool:
    """Whether the plots of ``trace`` are worth a worker process: a large trace (at least
    ``WORKER_ROWS`` GPU activities and operators) on more than one core (on one, a worker
    would only add its own start)."""
    return len(trace.kernels) + len(trace.ops) >= WORKER_ROWS and _cores() > 1


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not on Linux
        return os.cpu_count() or 1
