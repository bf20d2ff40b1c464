"""The report of a :class:`~tracekit.summary.Summary`: every output, written atomically.

The command that produces the summary (job discovery, loading, the pipeline, the plot
worker) is :mod:`tracekit.commands.report`; this module only renders what it is handed.

Outputs (docs/report.md): ``<out>/summary.json``, ``report.html``, ``plots/*.png``,
``classes.parquet``, ``operators.parquet``, ``kernels.parquet``, ``steps.parquet`` (one
atomic folder), and TensorBoard event files plus a torch-tb-profiler-compatible trace
copy in ``<logdir>/<run>/``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
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
from tracekit.io import atomic_dir, atomic_write_json, atomic_write_text
from tracekit.summary import Summary, TraceFacts


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


def render(
    sm: Summary,
    dest: Path,
    *,
    worker: plots.PlotWorker | None = None,
    tensorboard: Path | None = None,
    timings: dict[str, float] | None = None,
) -> ReportResult:
    """Write the report of ``sm`` into ``dest`` (atomically: :func:`write_outputs`) and, with
    ``tensorboard`` (a run folder inside a logdir), its TensorBoard events.

    ``worker``: the plot worker the pipeline's ``on_facts`` hook (:func:`facts_hook`) has
    been drawing into while the summary was computed; the plots it has not drawn yet are
    submitted here and waited for last. ``timings``: seconds are added under ``plots``,
    ``write`` and ``tensorboard``."""
    timings = {} if timings is None else timings
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
    if tensorboard is not None:
        import tracekit.reports.tensorboard as tb  # imported only when needed (~0.2 s)

        t = time.perf_counter()
        tables = {**markdown.all_tables(sm), **ranks_view.markdown(sm)}
        result.events = tb.write_events(sm, pngs, tables, tensorboard, wall_time=time.time())
        ranks_view.write_tensorboard(sm, tensorboard)
        timings["tensorboard"] = time.perf_counter() - t
    return result


def facts_hook(
    worker: plots.PlotWorker | None,
) -> Callable[[TraceFacts], Callable[[str, Any], None] | None]:
    """The pipeline's ``on_facts`` hook (:class:`tracekit.analyse.Options`) that has
    ``worker`` draw the memory timeline as soon as the facts are known, then each table's
    plot as the summary produces it (None: no worker, the plots are drawn by :func:`render`)."""

    def on_facts(facts: TraceFacts) -> Callable[[str, Any], None] | None:
        if worker is None:
            return None
        worker.submit("memory_timeline", plots.memory_timeline_data(facts))
        return _drawing(worker, facts)  # the memory timeline is drawn meanwhile

    return on_facts


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
