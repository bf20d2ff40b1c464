"""Assemble everything a report shows from a parsed trace and its classification.

:func:`summarize` is pure (tables in, a :class:`Summary` of tables and numbers out);
reading the optional per-category memory export of a run folder is the only file access.
``Summary.summary`` is the ``summary.json`` document (schema in docs/report.md).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from tracekit.summary import classes as C
from tracekit.summary import memory as M
from tracekit.summary import steps as S
from tracekit.summary.roofs import Roofs, roofs_from

SUMMARY_FORMAT = "tracekit.summary"
SUMMARY_VERSION = 1

TOP_OPERATORS = 15
TOP_KERNELS = 10
TOP_ALLOCATORS = 10
# the classified kernels' columns the summary reads
KERNEL_COLUMNS = ("step", "name", "kind", "class", "dur", "flops", "bound", "source")

# What each profiler option adds, and therefore what its absence costs.
OPTION_COST: dict[str, str] = {
    "record_shapes": "no input shapes: FLOPs and bytes cannot be modelled, so FLOPs vs time "
    "and the roofline are unavailable",
    "profile_memory": "no [memory] events: no memory timeline, top allocating operators or "
    "peak memory from the trace",
    "with_stack": "no Python stacks: no module paths, and no per-category memory timeline "
    "(PyTorch needs record_shapes + profile_memory + with_stack for it)",
    "with_flops": "no profiler FLOP counts: every FLOP figure is modelled by tracekit from shapes",
    "with_modules": "no module hierarchy from the profiler (module paths need with_stack)",
}


@dataclass
class Header:
    title: str
    source: str
    device: str | None
    torch_version: str | None
    cuda_runtime: str | None
    config: dict[str, Any] | None
    n_params: int | None
    steps: list[int]
    step_time_ms: float | None  # trace (profiled)
    measured_step_time_ms: float | None  # manifest (unprofiled median)
    tokens_per_step: int | None
    tokens_per_s: float | None  # from the trace step time
    measured_tokens_per_s: float | None  # manifest
    options: dict[str, bool]
    missing: list[str]


@dataclass
class CategoryMemory:
    timeline: M.CategoryTimeline
    offset_ns: float | None  # add to times_us * 1000 to get trace time; None: not aligned
    path: str


def _get(d: Any, *keys: str) -> Any:
    for k in keys:
        if not isinstance(d, dict):
            return None
        d = d.get(k)
    return d


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    f = float(v)
    return f if math.isfinite(f) else None


def _clean(v: Any) -> Any:
    """JSON-safe: NaN/inf -> None, numpy scalars -> Python."""
    if isinstance(v, dict):
        return {str(k): _clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_clean(x) for x in v]
    if isinstance(v, np.bool_):
        return bool(v)
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        f = float(v)
        return f if math.isfinite(f) else None
    return v


def _cuda_version(v: Any) -> str | None:
    if isinstance(v, int) and v > 0:
        return f"{v // 1000}.{(v % 1000) // 10}"
    return None


def _header(trace: Any, steps: list[int], table: pd.DataFrame) -> Header:
    man = trace.manifest if isinstance(trace.manifest, dict) else None
    cfg = _get(man, "config")
    run_dir = getattr(trace, "run_dir", None)
    title = Path(run_dir).name if run_dir else Path(trace.path).name
    config = None
    if isinstance(cfg, dict):
        config = {
            k: cfg.get(k)
            for k in (
                "preset",
                "layers",
                "batch",
                "seq",
                "dtype",
                "attention",
                "compile",
                "device",
                "tf32",
            )
            if cfg.get(k) is not None
        }
    batch, seq = _num(_get(cfg, "batch")), _num(_get(cfg, "seq"))
    tokens = int(batch * seq) if batch and seq else None
    step_ms = float(table["step_time_ms"].mean()) if len(table) else None
    options = {k: bool(v) for k, v in (trace.meta.get("options") or {}).items()}
    missing = [f"{k} off: {OPTION_COST[k]}" for k in OPTION_COST if not options.get(k, False)]
    device = trace.device_name if hasattr(trace, "device_name") else None
    device = device or _get(man, "device", "name")
    n_params = _get(man, "model", "n_params")
    return Header(
        title=title,
        source=str(trace.path),
        device=device,
        torch_version=_get(man, "versions", "torch"),
        cuda_runtime=_cuda_version(_get(trace.meta, "versions", "cuda_runtime_version")),
        config=config,
        n_params=int(n_params) if isinstance(n_params, int) else None,
        steps=steps,
        step_time_ms=step_ms,
        measured_step_time_ms=_num(_get(man, "metrics", "step_time_ms", "median")),
        tokens_per_step=tokens,
        tokens_per_s=tokens / (step_ms / 1e3) if tokens and step_ms else None,
        measured_tokens_per_s=_num(_get(man, "metrics", "tokens_per_s")),
        options=options,
        missing=missing,
    )


def _category_offset(trace: Any, times_us: np.ndarray) -> float | None:
    """ns to add to the export's ``times_us * 1000`` to get trace time, or None.

    PyTorch's memory timeline uses the Unix-epoch clock; Kineto's ``ts`` are relative to
    ``baseTimeNanoseconds`` when the trace has it (recent PyTorch), else epoch too. The
    offset that puts the export inside the trace's time span (1 ms slack) is used."""
    start = _num(trace.meta.get("trace_start_ns"))
    if start is None or not len(times_us):
        return None
    end = 0.0
    for name in ("kernels", "ops"):
        df = getattr(trace, name)
        if len(df):
            end = max(end, float((df["ts"] + df["dur"]).max()))
    base = _num(trace.meta.get("base_time_ns")) or 0.0
    for origin in dict.fromkeys((start + base, start)):
        rel0, rel1 = times_us[0] * 1e3 - origin, times_us[-1] * 1e3 - origin
        if rel1 >= -1e6 and rel0 <= end + 1e6:
            return -origin
    return None


def _categories(trace: Any) -> tuple[CategoryMemory | None, list[str]]:
    man = trace.manifest if isinstance(trace.manifest, dict) else None
    rel = _get(man, "artifacts", "memory_timeline")
    run_dir = getattr(trace, "run_dir", None)
    if not rel or not run_dir:
        why = _get(man, "artifacts", "memory_timeline_absent")
        return None, ([f"no per-category memory timeline: {why}"] if why else [])
    path = Path(run_dir) / str(rel)
    tl = M.downsample_categories(M.load_category_timeline(path))
    offset = _category_offset(trace, tl.times_us)
    notes = (
        []
        if offset is not None
        else [
            "the per-category memory timeline's clock does not match the trace's: it is "
            "plotted from its own start, without step boundaries"
        ]
    )
    return CategoryMemory(tl, offset, str(path)), notes


@dataclass(kw_only=True)
class TraceFacts:
    """What the summary takes from the trace alone (no classification): known before the
    classify stage, so that a report can draw the memory timeline meanwhile."""

    steps: list[int]
    step_starts_ns: list[int]  # CPU start of each analysed step
    step_table: pd.DataFrame
    header: Header
    launch: S.LaunchCheck
    memory: M.MemoryStats | None
    memory_source: str | None
    memory_timeline: pd.DataFrame
    memory_per_step: pd.DataFrame
    categories: CategoryMemory | None
    allocators: pd.DataFrame
    bytes_per_token: float | None
    notes: list[str] = field(default_factory=list)


@dataclass(kw_only=True)
class Summary(TraceFacts):
    """Everything the report shows (``notes``: the classify stage's and the trace's)."""

    classes: pd.DataFrame
    class_per_step: pd.DataFrame
    operators: pd.DataFrame
    kernels: pd.DataFrame
    bound: dict[str, float | None]
    roofs: Roofs
    flop_sources: dict[str, float]
    warnings: list[str] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)


def trace_facts(trace: Any) -> TraceFacts:
    """The trace's part of :func:`summarize` (``trace``: a ``tracekit.parse.Trace``)."""
    steps = S.analysed_steps(trace.steps)
    table = S.step_table(trace.steps)
    n = max(1, len(steps))
    header = _header(trace, steps, table)
    launch = S.launch_check(table, trace.kernels, trace.runtime, header.measured_step_time_ms)

    # memory: the trace's [memory] events, else the run's unprofiled measurement
    window_end = None
    if len(table):
        s = trace.steps[trace.steps["step"] >= 0]
        ends = s["cpu_ts"] + s["cpu_dur"]
        window_end = int(ends.max())
    # the report device's events, selected once (each memory function would do it again)
    memory, _ = M.device_events(trace.memory)
    mem = M.memory_stats(memory, window_end)
    mem_source: str | None = None
    if mem is not None:
        mem_source = f"measured: {mem.events} [memory] events of {mem.device} in the trace"
    else:
        man = trace.manifest if isinstance(trace.manifest, dict) else None
        peak_a = _num(_get(man, "metrics", "peak_allocated_bytes"))
        if peak_a is not None:
            mem = M.MemoryStats(
                device=str(_get(man, "device", "type") or "cuda"),
                events=0,
                peak_allocated_bytes=int(peak_a),
                peak_reserved_bytes=int(_num(_get(man, "metrics", "peak_reserved_bytes")) or 0),
                avg_allocated_bytes=_num(_get(man, "metrics", "avg_allocated_bytes"))
                or float("nan"),
                avg_reserved_bytes=float("nan"),
                window_ns=0,
            )
            mem_source = (
                "measured without the profiler: run manifest metrics "
                f"({_get(man, 'metrics', 'memory_method') or 'torch.cuda counters'})"
            )
    categories, cat_notes = _categories(trace)
    per_token = (
        mem.peak_allocated_bytes / header.tokens_per_step
        if mem is not None and header.tokens_per_step
        else None
    )
    st = trace.steps[trace.steps["step"] >= 0].sort_values("step")
    return TraceFacts(
        steps=steps,
        step_starts_ns=[int(v) for v in st["cpu_ts"]],
        step_table=table,
        header=header,
        launch=launch,
        memory=mem,
        memory_source=mem_source,
        memory_timeline=M.timeline(memory),
        memory_per_step=M.peaks_per_step(memory),
        categories=categories,
        allocators=M.top_allocators(memory, TOP_ALLOCATORS, steps=n),
        bytes_per_token=per_token,
        notes=cat_notes,
    )


def summarize(
    trace: Any,
    cls: Any,
    *,
    facts: TraceFacts | None = None,
    top_operators: int = TOP_OPERATORS,
    top_kernels: int = TOP_KERNELS,
    on_table: Callable[[str, Any], None] | None = None,
) -> Summary:
    """Everything the report shows. ``trace``: a ``tracekit.parse.Trace``; ``cls``: its
    ``tracekit.classify.Classification``; ``facts``: :func:`trace_facts` of the trace, if
    already computed. ``on_table(name, value)`` is called with the ``roofs`` and the
    ``operators`` and ``classes`` tables as soon as each is computed (so that a report can
    draw them while the rest is summarised)."""
    f = facts if facts is not None else trace_facts(trace)
    steps = f.steps
    n = max(1, len(steps))
    roofs = roofs_from(cls.device)
    if on_table is not None:
        on_table("roofs", roofs)
    # the operators first: their plot (the roofline) takes longest to draw
    ops = cls.ops[cls.ops["step"].isin(steps)] if "step" in cls.ops else cls.ops
    operators = C.operator_table(ops, n)
    if on_table is not None:
        on_table("operators", operators)
    # the columns the tables use: copying every classified column costs more than the rest
    k = C.in_steps(cls.kernels[[c for c in KERNEL_COLUMNS if c in cls.kernels]], steps)
    classes = C.class_table(k, n)
    if on_table is not None:
        on_table("classes", classes)
    per_step = C.class_time_per_step(k)
    kernels = C.kernel_table(k, n)
    bound = C.bound_shares(k)
    notes = [str(x) for x in getattr(cls, "notes", [])]
    warnings: list[str] = []
    if f.launch.message:
        warnings.append(f.launch.message)
    notes.extend(f.notes)

    # which FLOP counts are measured, modelled or absent, as shares of GPU time
    flop_sources: dict[str, float] = {}
    total = float(k["dur"].sum())
    if total and "source" in k:
        for src, d in k.groupby(k["source"].fillna("none").astype(str))["dur"].sum().items():
            flop_sources[str(src)] = 100.0 * float(d) / total
    if total == 0:
        notes.append("no GPU activity in the analysed steps: time shares are undefined")

    sm = Summary(
        **{x.name: getattr(f, x.name) for x in fields(TraceFacts) if x.name != "notes"},
        classes=classes,
        class_per_step=per_step,
        operators=operators,
        kernels=kernels,
        bound=bound,
        roofs=roofs,
        flop_sources=flop_sources,
        notes=notes,
        warnings=warnings,
    )
    sm.summary = summary_json(sm, top_operators=top_operators, top_kernels=top_kernels)
    return sm


def summary_json(
    sm: Summary, *, top_operators: int = TOP_OPERATORS, top_kernels: int = TOP_KERNELS
) -> dict[str, Any]:
    """The ``summary.json`` document (docs/report.md documents every key)."""
    h = sm.header
    cl = sm.classes
    has_flops = bool(cl["flops"].sum() > 0)
    time_share = {r["class"]: r["time_share_pct"] for _, r in cl.iterrows()}
    mem = sm.memory
    ops = sm.operators.head(top_operators)
    op_rows = [
        {
            "name": r["name"],
            "class": r["class"],
            "input_dims": r["input_dims"] or None,
            "calls": r["calls"],
            "ms_per_step": r["ms_per_step"],
            "time_share_pct": r["time_share_pct"],
            "flops": r["flops"],
            "bytes": r["bytes"],
            "intensity": r["intensity"],
            "attained_flops": r["attained_flops"],
            "attained_bw": r["attained_bw"],
            "pipe": r["pipe"],
            "bound": r["bound"],
            "roof_pct": r["roof_pct"],
            "source": r["source"],
        }
        for _, r in ops.iterrows()
    ]
    kern_rows = [
        {
            "name": r["name"],
            "class": r["class"],
            "kind": r["kind"],
            "calls": r["calls"],
            "ms_per_step": r["ms_per_step"],
            "mean_us": r["mean_us"],
            "time_share_pct": r["time_share_pct"],
        }
        for _, r in sm.kernels.head(top_kernels).iterrows()
    ]
    roofs = sm.roofs
    doc: dict[str, Any] = {
        "format": SUMMARY_FORMAT,
        "version": SUMMARY_VERSION,
        "title": h.title,
        "trace": h.source,
        "device": {
            "name": h.device or roofs.device,
            "peak_flops": roofs.peaks,
            "bandwidth_Bps": roofs.bandwidth,
        },
        "versions": {"torch": h.torch_version, "cuda_runtime": h.cuda_runtime},
        "config": h.config,
        "profiler_options": h.options,
        "missing": h.missing,
        "steps": h.steps,
        "step_time_ms": h.step_time_ms,
        "step_time_ms_per_step": dict(
            zip((str(s) for s in sm.step_table["step"]), sm.step_table["step_time_ms"], strict=True)
        ),
        "measured_step_time_ms": h.measured_step_time_ms,
        "tokens_per_step": h.tokens_per_step,
        "tokens_per_s": h.tokens_per_s,
        "measured_tokens_per_s": h.measured_tokens_per_s,
        "gpu_time_ms_per_step": float(cl["ms_per_step"].sum()),
        "time_share_pct": time_share,
        "ms_per_step": {r["class"]: r["ms_per_step"] for _, r in cl.iterrows()},
        "flop_share_pct": (
            {r["class"]: r["flop_share_pct"] for _, r in cl.iterrows()} if has_flops else None
        ),
        "flops_per_step": (
            {r["class"]: r["flops"] / max(1, len(h.steps)) for _, r in cl.iterrows()}
            if has_flops
            else None
        ),
        "bound_time_share_pct": sm.bound,
        "gpu_idle_pct": sm.launch.gpu_idle_pct,
        "launch_bound": sm.launch.launch_bound,
        "gpu_idle_unprofiled_pct": sm.launch.gpu_idle_unprofiled_pct,
        "launch": {
            "host_busy_pct": sm.launch.host_busy_pct,
            "kernels_per_step": sm.launch.kernels_per_step,
            "median_kernel_us": sm.launch.median_kernel_us,
            "median_launch_us": sm.launch.median_launch_us,
            "shorter_than_launch_pct": sm.launch.shorter_than_launch_pct,
        },
        "memory": {
            "device": mem.device if mem else None,
            "peak_allocated_bytes": mem.peak_allocated_bytes if mem else None,
            "peak_reserved_bytes": mem.peak_reserved_bytes if mem else None,
            "avg_allocated_bytes": mem.avg_allocated_bytes if mem else None,
            "avg_reserved_bytes": mem.avg_reserved_bytes if mem else None,
            "bytes_per_token": sm.bytes_per_token,
            "events": mem.events if mem else 0,
            "categories": sm.categories is not None,
        },
        "top_operators": op_rows,
        "top_kernels": kern_rows,
        "top_allocators": [
            {
                "op_name": r["op_name"],
                "allocations": r["allocations"],
                "bytes_per_step": r["bytes_per_step"],
                "largest_bytes": r["largest_bytes"],
                "pct": r["pct"],
            }
            for _, r in sm.allocators.iterrows()
        ],
        "sources": {
            "time_share_pct": "measured: kernel, memcpy and memset durations in the trace",
            "step_time_ms": "measured: ProfilerStep spans and GPU activity in the trace "
            "(with the profiler on)",
            "gpu_idle_pct": "measured: union of GPU activity per step in the trace",
            "gpu_idle_unprofiled_pct": "estimated: the trace's GPU busy time per step over "
            "the step time measured without the profiler (manifest)"
            if sm.launch.gpu_idle_unprofiled_pct is not None
            else None,
            "measured_step_time_ms": "measured without the profiler (run manifest)"
            if h.measured_step_time_ms is not None
            else None,
            "memory": sm.memory_source,
            "flop_share_pct": "FLOP counts per kernel: share of GPU time by source "
            "(measured: hardware counters; profiler: with_flops; modelled: "
            "tracekit from shapes; none: unknown)",
            "flop_source_time_pct": sm.flop_sources,
            "bound_time_share_pct": "modelled: each kernel's arithmetic intensity against "
            "the device's ridge point",
            "peak_flops": roofs.peak_sources,
            "bandwidth_Bps": roofs.bandwidth_source or None,
        },
        "warnings": sm.warnings,
        "notes": sm.notes,
    }
    return _clean(doc)  # type: ignore[no-any-return]
