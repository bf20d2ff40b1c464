"""``tracekit report``: parse, classify, summarise, then write every output.

Outputs (docs/report.md): ``<out>/summary.json``, ``report.html``, ``plots/*.png``,
``classes.parquet``, ``operators.parquet``, ``kernels.parquet``, ``steps.parquet`` (one
atomic folder), and TensorBoard event files plus a torch-tb-profiler-compatible trace
copy in ``<logdir>/<run>/``.
"""

from __future__ import annotations

import contextlib
import json
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from tracekit.errors import TraceError, UsageError
from tracekit.io import atomic_dir, atomic_write_json, atomic_write_text
from tracekit.parse import TRACE_SUFFIXES, Trace, find_trace, load
from tracekit.summary import Summary, summarize

from . import html, markdown, plots, tbtrace

REPORT_DIR = "report"


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


def _tb_target(path: Path, logdir: Path | None, enabled: bool) -> tuple[Path, Path | None] | None:
    """(run folder inside the logdir, trace file to copy for the profiler plugin or None)
    for the TensorBoard output, or None for no TensorBoard output.

    A run folder from ``tracekit collect`` writes into its own logdir (manifest
    ``artifacts.tensorboard``) unless told otherwise; a trace file only with a logdir."""
    if not enabled:
        return None
    if path.is_dir():
        if (path / "meta.json").is_file():  # a parsed folder: no trace file to copy
            return None if logdir is None else (logdir / path.name, None)
        trace, manifest = find_trace(path)
        if logdir is None:
            rel = ((manifest or {}).get("artifacts") or {}).get("tensorboard")
            if not rel:
                return None
            logdir = path / str(rel)
        return logdir / path.name, trace
    if logdir is None:
        return None
    return logdir / _stem(path), path


def classify_trace(trace: Trace, peak_tflops: float | None, bandwidth_gbs: float | None) -> Any:
    """Run the classify stage (``tracekit.classify``) on a parsed trace."""
    from tracekit.classify import classify

    return classify(
        trace, manifest=trace.manifest, peak_tflops=peak_tflops, bandwidth_gbs=bandwidth_gbs
    )


def _parquet(df: pd.DataFrame, path: Path) -> None:
    df.reset_index(drop=True).to_parquet(path, index=False, compression="snappy")


def write_outputs(sm: Summary, out: Path, pngs: dict[str, bytes]) -> list[Path]:
    """Everything under ``out``, atomically (a failure leaves an earlier report intact)."""
    names: list[Path] = []
    with atomic_dir(out) as tmp:
        atomic_write_json(tmp / "summary.json", sm.summary)
        atomic_write_text(tmp / "report.html", html.render(sm, pngs))
        (tmp / "plots").mkdir()
        for name, png in pngs.items():
            (tmp / "plots" / f"{name}.png").write_bytes(png)
        _parquet(sm.classes, tmp / "classes.parquet")
        _parquet(sm.operators, tmp / "operators.parquet")
        _parquet(sm.kernels, tmp / "kernels.parquet")
        _parquet(sm.step_table, tmp / "steps.parquet")
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
) -> ReportResult:
    """Run the whole report for a trace file, a run folder or a parsed folder.

    ``classification`` replaces the classify stage's output (tests only)."""
    path = Path(path)
    if not path.exists():
        raise UsageError(f"{path}: no such file or folder")
    if tensorboard is not None and no_tensorboard:
        raise UsageError("--tensorboard and --no-tensorboard exclude each other")
    dest = Path(out) if out is not None else default_out(path)
    target = _tb_target(
        path, Path(tensorboard) if tensorboard is not None else None, not no_tensorboard
    )
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=1) as pool:
        # The plugin copy is I/O and zlib (which releases the GIL): it runs beside parsing.
        copy: Future[tbtrace.CopyResult] | None = None
        if target is not None and target[1] is not None:
            copy = pool.submit(tbtrace.plugin_copy, target[1], target[0])
        try:
            result = _run(path, dest, target, peak_tflops, bandwidth_gbs, classification, timings)
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
    timings: dict[str, float],
) -> ReportResult:
    t = time.perf_counter()
    trace = load(path)
    timings["parse"] = time.perf_counter() - t
    if len(trace.kernels) == 0:
        raise TraceError(
            f"{trace.path}: a CPU-only trace (no kernel, memcpy or memset events): nothing "
            "to report on the GPU; `tracekit parse` writes its CPU tables"
        )
    t = time.perf_counter()
    cls = (
        classification
        if classification is not None
        else classify_trace(trace, peak_tflops, bandwidth_gbs)
    )
    timings["classify"] = time.perf_counter() - t
    t = time.perf_counter()
    sm = summarize(trace, cls)
    timings["summarize"] = time.perf_counter() - t
    t = time.perf_counter()
    pngs = plots.all_plots(sm)
    timings["plots"] = time.perf_counter() - t
    t = time.perf_counter()
    files = write_outputs(sm, dest, pngs)
    timings["write"] = time.perf_counter() - t
    result = ReportResult(summary=sm, out=dest, files=files, timings=timings)
    if target is not None:
        from . import tensorboard as tb  # imported only when needed (~0.2 s)

        t = time.perf_counter()
        result.events = tb.write_events(
            sm, pngs, markdown.all_tables(sm), target[0], wall_time=time.time()
        )
        timings["tensorboard"] = time.perf_counter() - t
    return result


def summary_text(result: ReportResult) -> str:
    return json.dumps(result.summary.summary, indent=2) + "\n"
