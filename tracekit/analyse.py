"""The one pipeline: a trace file or run folder -> parse -> classify -> summarise, as one
typed :class:`Analysis`.

Every command that analyses a run comes here (``report``, ``compare``, ``classify``,
``advise``, the sweep's rows, the per-rank function): no other module chains the stages
(``tests/test_pipeline.py``), so they cannot tell two stories about one run. The choices
made once here: a trace without GPU activity is read through its CPU view
(:func:`cpu_run`); classify gets the run's manifest, from which it computes the analytic
traffic estimate (``tracekit.classify.models.traffic.manifest_traffic``), the figure the
report, the sweep and ``tracekit classify`` show.

A multi-rank folder's per-rank analysis and reduction are the ranks stage's
(:func:`tracekit.ranks.mapreduce.analyse_ranks`, which runs after this module); a report of one
of its ranks passes that summary in (``ranks``), and it lands in :attr:`Analysis.ranks`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracekit.classify.result import Classification
from tracekit.errors import TraceError, UsageError
from tracekit.io import readable_input
from tracekit.manifest import read_manifest
from tracekit.parse import Trace, load, parse_to_dir
from tracekit.summary import Summary, TraceFacts, summarize, trace_facts

OnTable = Callable[[str, Any], None]


@dataclass
class Analysis:
    """One run analysed: the parsed tables, their classification, the summary (None where
    only the classification was asked for) and, for a report of one rank of several, the
    multi-rank summary (``tracekit.ranks.reduce.RanksSummary``)."""

    trace: Trace
    classification: Classification
    summary: Summary | None = None
    ranks: Any = None


@dataclass
class Options:
    """What a caller may set about the classify and summary stages.

    ``manifest``: the run's manifest where the caller read it itself (default: the trace's);
    ``classification``: replaces the classify stage's output (tests); ``on_facts``: called
    with the facts that need no classification before classify runs, returns the
    ``summarize`` ``on_table`` hook or None (a report draws plots meanwhile); ``timings``:
    seconds per stage are added under ``classify`` and ``summarize``; ``cpu``: a trace
    without GPU activity is read as its CPU view (:func:`load_run`)."""

    peak_tflops: float | None = None
    bandwidth_gbs: float | None = None
    counters: Path | None = None
    manifest: Mapping[str, Any] | None = None
    classification: Classification | None = None
    timeline: str = "auto"
    on_facts: Callable[[TraceFacts], OnTable | None] | None = None
    timings: dict[str, float] | None = None
    cpu: bool = True


def load_run(path: Path | str, *, cpu: bool = True) -> Trace:
    """Parse a trace file, run folder or parsed folder; a trace without GPU activity as its
    CPU view (``cpu``; a generate run keeps its own tables)."""
    trace = load(path)
    if cpu and len(trace.kernels) == 0 and not generates(trace):
        trace = cpu_run(trace)
    return trace


def parse_rank(trace: Path, tables: Path) -> Trace:
    """One rank's trace parsed into ``tables/`` (Parquet) and loaded back, named after the
    trace (``summary.json`` names the trace, not the tables folder)."""
    parsed = parse_to_dir(trace, tables)
    t = load(parsed.out)
    t.path = trace
    return t


def cpu_run(trace: Trace) -> Trace:
    """A trace without GPU activity: a CPU run's view, its work operators as the kernels
    (docs/report.md, "CPU runs"), or a one-line error saying why it is not one."""
    from tracekit.parse.cpuview import cpu_view, not_cpu_run

    why = not_cpu_run(trace)
    if why is not None:
        raise TraceError(f"{trace.path}: {why}; `tracekit parse` writes its CPU tables")
    cpu: Trace = cpu_view(trace)
    return cpu


def generates(trace: Trace) -> bool:
    """A ``collect --workload generate`` run (its report has the generate section)."""
    m = read_manifest(trace.manifest) if isinstance(trace.manifest, dict) else None
    return m is not None and m.config.workload == "generate"


def classify_trace(
    trace: Trace,
    peak_tflops: float | None = None,
    bandwidth_gbs: float | None = None,
    *,
    counters: Path | None = None,
    manifest: Mapping[str, Any] | None = None,
) -> Classification:
    """The classify stage on a parsed trace, with its manifest (``manifest``, default the
    trace's), from which classify computes the analytic traffic estimate itself."""
    from tracekit.classify import classify

    man = dict(manifest) if manifest else trace.manifest
    return classify(
        trace, manifest=man, peak_tflops=peak_tflops, bandwidth_gbs=bandwidth_gbs, counters=counters
    )


def comm_of(ranks: Any, rank: int | None) -> tuple[float, str] | None:
    """The communication (ms per unprofiled step) and its words that the verdict of the
    report detailing ``rank`` takes from the ranks (``RanksSummary.measured``): that rank's
    measured cost, or its exposed communication less a sync wait that is the profiler's
    (:mod:`tracekit.ranks.measured`); None: the trace's figures stand."""
    m = ranks.measured if ranks is not None else None
    if m is None or m.comm_source is None or not m.comm_by_rank:
        return None
    r = rank if rank in m.comm_by_rank else min(m.comm_by_rank)
    return m.comm_by_rank[r], f"rank {r}'s {m.comm_source}"


def rank_of(trace: Trace) -> int | None:
    """The trace's ``distributedInfo.rank`` (None: not one rank of several)."""
    info = trace.meta.get("distributed_info")
    rank = info.get("rank") if isinstance(info, dict) else None
    return rank if isinstance(rank, int) else None


def analyse(
    source: Path | str | Trace,
    options: Options | None = None,
    *,
    summarise: bool = True,
    ranks: Any = None,
    ranks_doc: Callable[[Any], dict[str, Any]] | None = None,
) -> Analysis:
    """Parse (unless ``source`` is already a :class:`Trace`), classify and summarise one
    run. ``summarise=False``: the classification only (``tracekit classify``, a sweep
    row). ``ranks``: the multi-rank summary of the job this trace is one rank of; its
    communication replaces the trace's in the verdict, class shares are of the union of GPU
    activity, and ``ranks_doc(ranks)`` is the ``summary.json`` ``ranks`` block."""
    import time

    o = options or Options()
    trace = source if isinstance(source, Trace) else load_run(source, cpu=o.cpu)
    timings = o.timings if o.timings is not None else {}
    t = time.perf_counter()
    facts = trace_facts(trace, o.timeline) if summarise else None
    on_table = o.on_facts(facts) if o.on_facts is not None and facts is not None else None
    timings["summarize"] = timings.get("summarize", 0.0) + time.perf_counter() - t
    t = time.perf_counter()
    cls = o.classification
    if cls is None:
        cls = classify_trace(
            trace, o.peak_tflops, o.bandwidth_gbs, counters=o.counters, manifest=o.manifest
        )
    timings["classify"] = time.perf_counter() - t
    if not summarise:
        return Analysis(trace, cls)
    t = time.perf_counter()
    rank = rank_of(trace)
    sm = summarize(
        trace, cls, comm_ms=comm_of(ranks, rank), facts=facts, on_table=on_table,
        exposed_comm_pct=ranks.rank_exposed_comm_pct(rank) if ranks else None,
        union_shares=ranks is not None,
    )  # fmt: skip
    if ranks is not None:
        ranks.detail_rank = rank
        sm.ranks = ranks
        if ranks_doc is not None:
            sm.summary["ranks"] = ranks_doc(ranks)
    timings["summarize"] += time.perf_counter() - t
    return Analysis(trace, cls, sm, ranks)


def host_and_report(path: Path | str, options: Options | None = None) -> tuple[Analysis, Analysis]:
    """One parse of a run, two readings: its own trace classified (on a CPU run the host's
    threads, which ``tracekit advise``'s lever models read; no summary there) and the
    analysis ``report`` gives it (:func:`analyse`: a CPU run's view, whose summary holds
    the verdict, its step basis and no critical path). The same analysis twice where the
    trace has GPU activity."""
    from dataclasses import replace

    o = options or Options()
    raw = load(path)
    if len(raw.kernels) or generates(raw):
        a = analyse(raw, o)
        return a, a
    own = analyse(raw, replace(o, cpu=False), summarise=False)
    return own, analyse(cpu_run(raw), o)


def classify_path(
    path: Path | str,
    out: Path | None = None,
    *,
    peak_tflops: float | None = None,
    bandwidth_gbs: float | None = None,
    counters: Path | None = None,
) -> str:
    """``tracekit classify`` on one trace or run folder: the classification (a run's
    Nsight Compute counters found through its manifest unless ``counters`` is given)
    written under ``out``; returns a short report."""
    from tracekit.classify.output import counters_of, default_out, describe, write_classification

    path = Path(path)
    readable_input(path)
    if counters is not None and not Path(counters).is_file():
        raise UsageError(f"no such counters file: {counters}")
    trace = load_run(path)
    counters = counters or counters_of(path, trace.manifest)
    opts = Options(peak_tflops=peak_tflops, bandwidth_gbs=bandwidth_gbs, counters=counters)
    cls = analyse(trace, opts, summarise=False).classification
    return describe(cls, write_classification(cls, out or default_out(path)))
