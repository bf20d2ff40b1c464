"""``tracekit report``: parse, classify, summarise, then write every output.

Outputs (docs/report.md): ``<out>/summary.json``, ``report.html``, ``plots/*.png``,
``classes.parquet``, ``operators.parquet``, ``kernels.parquet``, ``steps.parquet`` (one
atomic folder), and TensorBoard event files plus a torch-tb-profiler-compatible trace
copy in ``<logdir>/<run>/``.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

import tracekit.reports.fmt as fmt
import tracekit.reports.html as html
import tracekit.reports.markdown as markdown
import tracekit.reports.plots as plots
import tracekit.reports.ranks as ranks_view
import tracekit.reports.tbtrace as tbtrace
from tracekit.analyse import Options, analyse, generates, load_run
from tracekit.errors import TraceError, UsageError
from tracekit.io import atomic_dir, atomic_write_json, atomic_write_text, readable_input
from tracekit.jobs import Job, job_of
from tracekit.manifest import manifest_or_empty
from tracekit.parse import TRACE_SUFFIXES, Trace, find_trace
from tracekit.summary import Summary, TraceFacts
from tracekit.summary.timeline import MODES as TIMELINE_MODES

REPORT_DIR = "report"
# GPU activities + operators from which the plots are drawn in a worker process: its start
# (a Python with numpy and matplotlib, ~0.5 s of CPU on another core) then costs less than
# the drawing and the matplotlib import it takes off this process
WORKER_ROWS = 100_000


@dataclass
class ReportResult:
    summary: Summary
    out: Path
    files: list[Path] = field(default_factory=list)
    events: Path | None = None
    plugin_trace: tbtrace.CopyResult | None = None
    timings: dict[str, float] = field(default_factory=dict)

    def describe(self) -> list[str]:
        lines = [
            f"wrote {self.out}/: " + ", ".join(str(p.relative_to(self.out)) for p in self.files)
        ]
        if self.events is not None:
            lines.append(f"TensorBoard: {self.events}")
        if self.plugin_trace is not None:
            lines.append(
                f"torch-tb-profiler trace: {self.plugin_trace.path} "
                f"({self.plugin_trace.rewritten} runtime events re-categorised)"
            )
        return lines


def _stem(path: Path) -> str:
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
    return path.with_name(_stem(path) + ".report")


def _tb_target(
    path: Path, logdir: Path | None, enabled: bool, trace: Path | None = None
) -> tuple[Path, Path | None] | None:
    """(run folder inside the logdir, trace file to copy for the profiler plugin or None)
    for the TensorBoard output, or None for no TensorBoard output.

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
    return logdir / _stem(path), path


def _parquet(df: pd.DataFrame, path: Path) -> None:
    df.reset_index(drop=True).to_parquet(path, index=False, compression="snappy")


def write_outputs(
    sm: Summary, out: Path, pngs: dict[str, bytes] | Callable[[], dict[str, bytes]]
) -> list[Path]:
    """Everything under ``out``, atomically (a failure leaves an earlier report intact).

    ``pngs``: the plots, or a function that waits for them (they are asked for last, after
    the files that do not need them)."""
    names: list[Path] = []
    with atomic_dir(out) as tmp:
        atomic_write_json(tmp / "summary.json", sm.summary)
        _parquet(sm.classes, tmp / "classes.parquet")
        _parquet(sm.operators, tmp / "operators.parquet")
        _parquet(sm.kernels, tmp / "kernels.parquet")
        _parquet(sm.step_table, tmp / "steps.parquet")
        if callable(pngs):
            pngs = pngs()
        atomic_write_text(tmp / "report.html", html.render(sm, pngs))
        (tmp / "plots").mkdir()
        for name, png in pngs.items():
            (tmp / "plots" / f"{name}.png").write_bytes(png)
        ranks_view.write_files(sm, tmp)  # a multi-rank report's tables and merged trace
        names = sorted(p.relative_to(tmp) for p in tmp.rglob("*") if p.is_file())
    return [out / n for n in names]


def plugin_dir_of(target: tuple[Path, Path | None]) -> Path:
    """The folder the plugin copy is written into (``tbtrace.plugin_copy``'s dest_dir)."""
    return target[0]


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
    work runs, :func:`tracekit.ranks.run.map_ranks`) and the detailed report of one rank
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
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=1) as pool:
        # The plugin copy is I/O and zlib (which releases the GIL): it runs beside parsing.
        copy: Future[tbtrace.CopyResult] | None = None
        if target is not None and target[1] is not None:
            copy = pool.submit(tbtrace.plugin_copy, target[1], target[0])
        try:
            result = _run(
                path, dest, target, peak_tflops, bandwidth_gbs, classification, plot_worker,
                timings, job, timeline,
            )  # fmt: skip
            if copy is not None:
                t = time.perf_counter()
                result.plugin_trace = copy.result()
                timings["plugin_copy_wait"] = time.perf_counter() - t
        except BaseException:
            if copy is not None and not copy.cancel():
                done = copy.exception() is None and copy.result()
                if done:  # a report that failed leaves no half of its outputs behind
                    done.path.unlink(missing_ok=True)
            if target is not None and target[1] is not None:
                _remove_empty(target[0], plugin_dir_of(target))
            raise
    timings["total"] = time.perf_counter() - t0
    return result


def _run(
    path: Path,
    dest: Path,
    target: tuple[Path, Path | None] | None,
    peak_tflops: float | None,
    bandwidth_gbs: float | None,
    classification: Any,
    plot_worker: bool | None,
    timings: dict[str, float],
    job: Job | None = None,
    timeline: str = "auto",
) -> ReportResult:
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
    if plot_worker is None:  # (on one core a worker would only add its own start)
        plot_worker = len(trace.kernels) + len(trace.ops) >= WORKER_ROWS and _cores() > 1
    with plots.PlotWorker() if plot_worker else contextlib.nullcontext() as worker:
        return _analyse(
            trace, dest, target, peak_tflops, bandwidth_gbs, classification, worker, timings,
            job.summary if job is not None else None,
            timeline,
        )  # fmt: skip


def _analyse(
    trace: Trace,
    dest: Path,
    target: tuple[Path, Path | None] | None,
    peak_tflops: float | None,
    bandwidth_gbs: float | None,
    classification: Any,
    worker: plots.PlotWorker | None,
    timings: dict[str, float],
    ranks: Any = None,
    timeline: str = "auto",
) -> ReportResult:
    from tracekit.ranks.document import ranks_json

    def on_facts(facts: TraceFacts) -> Callable[[str, Any], None] | None:
        if worker is None:
            return None
        worker.submit("memory_timeline", plots.memory_timeline_data(facts))
        return _drawing(worker, facts)  # the memory timeline is drawn meanwhile

    opts = Options(
        peak_tflops=peak_tflops, bandwidth_gbs=bandwidth_gbs, classification=classification,
        timeline=timeline, on_facts=on_facts, timings=timings,
    )  # fmt: skip
    sm = analyse(trace, opts, ranks=ranks, ranks_doc=ranks_json).summary
    assert sm is not None
    t = time.perf_counter()
    pngs: dict[str, bytes] = plots.all_plots(sm) if worker is None else {}
    pngs.update(ranks_view.plots(sm))
    timings["plots"] = time.perf_counter() - t

    waited = [0.0]

    if worker is not None:
        for name in plots.GENERATE_NAMES if sm.generate is not None else ():
            worker.submit(name, plots.DATA[name](sm))

    def drawn() -> dict[str, bytes]:
        assert worker is not None
        w = time.perf_counter()
        pngs.update((name, worker.result(name)) for name in plots.names(sm))
        waited[0] = time.perf_counter() - w
        return pngs

    t = time.perf_counter()
    files = write_outputs(sm, dest, pngs if worker is None else drawn)
    timings["write"] = time.perf_counter() - t - waited[0]
    timings["plots"] += waited[0]  # the wait for the worker
    result = ReportResult(summary=sm, out=dest, files=files, timings=timings)
    if target is not None:
        import tracekit.reports.tensorboard as tb  # imported only when needed (~0.2 s)

        t = time.perf_counter()
        tables = {**markdown.all_tables(sm), **ranks_view.markdown(sm)}
        result.events = tb.write_events(sm, pngs, tables, target[0], wall_time=time.time())
        ranks_view.write_tensorboard(sm, target[0])
        timings["tensorboard"] = time.perf_counter() - t
    return result


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not on Linux
        return os.cpu_count() or 1


def _drawing(worker: plots.PlotWorker, facts: TraceFacts) -> Callable[[str, Any], None]:
    """A ``summarize`` ``on_table`` hook that has ``worker`` draw each table's plot while the
    summary goes on (and the files that need no plot are written)."""
    got: dict[str, Any] = {}

    def on_table(name: str, value: Any) -> None:
        got[name] = value
        if name == "classes":
            worker.submit("time_share", plots.time_share_data(value, fmt.words(facts)))
        elif name == "operators":
            data = plots.roofline_data(
                value, got["roofs"], facts.header.device, words=fmt.words(facts)
            )
            worker.submit("roofline", data)

    return on_table


def summary_text(result: ReportResult) -> str:
    return json.dumps(result.summary.summary, indent=2) + "\n"
