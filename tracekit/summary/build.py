"""Assemble everything a report shows from a parsed trace and its classification.

:func:`summarize` is pure (tables in, a :class:`Summary` of tables and numbers out);
reading the optional per-category memory export of a run folder is the only file access.
``Summary.summary`` is the ``summary.json`` document (schema in docs/report.md).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

import tracekit.classify.models.memory as MM
import tracekit.classify.models.traffic as TR
import tracekit.summary.classes as C
import tracekit.summary.cpu as CPU
import tracekit.summary.critical_path as CP
import tracekit.summary.critical_path.anchor as CPA
import tracekit.summary.gendoc as GD
import tracekit.summary.generate as GEN
import tracekit.summary.invariants as INV
import tracekit.summary.memory as M
import tracekit.summary.steps as S
import tracekit.summary.stepsummary as SS
import tracekit.summary.timeline as TL
import tracekit.summary.verdict as V
from tracekit.classify.manifest import NO_TRAFFIC_NOTE
from tracekit.classify.models.decode import DecodeModel
from tracekit.manifest import Observer, RunManifest, as_manifest
from tracekit.parse.cpuview import device_label
from tracekit.summary.document import (
    SUMMARY_FORMAT,
    SUMMARY_VERSION,
    TOP_KERNELS,
    TOP_OPERATORS,
    _clean,
    summary_json,
)
from tracekit.summary.facts import (
    CategoryMemory,
    Header,
    MemoryFacts,
    Summary,
    TraceFacts,
)
from tracekit.summary.kvcache import kv_growth
from tracekit.summary.roofs import Roofs, roof_note, roofs_from

__all__ = [  # the dataclasses live in facts.py, summary.json in document.py; re-exported
    "SUMMARY_FORMAT",
    "SUMMARY_VERSION",
    "Header",
    "MemoryFacts",
    "Summary",
    "TraceFacts",
    "_clean",
    "summarize",
    "summary_json",
    "trace_facts",
]

TOP_ALLOCATORS = 10
MAIN_WINDOW = "main window"  # manifest artifacts.memory_timeline_pass (collectors/passes.py)
WHOLE_TRACE = "(whole trace)"  # tracekit.parse's step name for a trace without step markers
NO_STEPS = (
    "the trace has no ProfilerStep markers: it is judged as one step, set-up (CUDA "
    "initialisation, first copies) included"
)
# the classified kernels' columns the summary reads
KERNEL_COLUMNS = (
    "step",
    "name",
    "kind",
    "class",
    "ts",
    "dur",
    "flops",
    "bytes",
    "bytes_model",
    "pipe",
    "bound",
    "source",
)

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
# with_stack's cost when the run recorded the per-category memory timeline in another pass
# (collect's category step): only the module paths are missing from this trace
WITH_STACK_ELSEWHERE = (
    "no Python stacks in this trace: no module paths (the per-category memory timeline "
    "comes from the run's {which})"
)


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    f = float(v)
    return f if math.isfinite(f) else None


def _cuda_version(v: Any) -> str | None:
    if isinstance(v, int) and v > 0:
        return f"{v // 1000}.{(v % 1000) // 10}"
    return None


def _option_costs(man: RunManifest) -> dict[str, str]:
    """What each profiler option's absence costs this run (a run whose memory timeline
    came from another pass lacks only the module paths without with_stack)."""
    which = man.artifacts.memory_timeline_pass
    if man.artifacts.memory_timeline and which and which != MAIN_WINDOW:
        stack = WITH_STACK_ELSEWHERE.format(which=which)
        return {**OPTION_COST, "with_stack": stack}
    return OPTION_COST


def _shortened(cut: dict[str, Any]) -> str:
    """A window the run's fitted schedule cut short (manifest ``schedule_shortened``)."""
    a, b = cut.get("steps") or ("?", "?")
    return (
        f"the full {cut.get('phase')} window: {cut.get('ran')} of its {cut.get('planned')} "
        f"steps ran ({a}-{b}; {cut.get('why')}; manifest schedule_shortened)"
    )


def _header(trace: Any, steps: list[int], table: pd.DataFrame) -> Header:
    man = trace.manifest if isinstance(trace.manifest, dict) else None
    mf = as_manifest(man)
    cfg = mf.config.raw  # shown as given
    run_dir = getattr(trace, "run_dir", None)
    title = Path(run_dir).name if run_dir else Path(trace.path).name
    config = None
    generating = mf.config.workload == "generate"
    # a generate run's step is a decode step: one token per sequence (config.seq unused)
    length = ("prompt", "new_tokens") if generating else ("seq",)
    if mf.has_config:
        config = {
            k: cfg.get(k)
            for k in (
                *(("workload",) if generating else ()),
                "preset",
                "layers",
                "batch",
                *length,
                "dtype",
                "attention",
                "compile",
                "device",
                "tf32",
            )
            if cfg.get(k) is not None
        }
    batch, seq = mf.config.batch, 1 if generating else mf.config.seq
    tokens = int(batch * seq) if batch and seq else None
    step_ms = float(table["step_time_ms"].mean()) if len(table) else None
    options = {k: bool(v) for k, v in (trace.meta.get("options") or {}).items()}
    missing = [f"{k} off: {cost}" for k, cost in _option_costs(mf).items()
               if not options.get(k, False)]  # fmt: skip
    missing += [_shortened(c) for c in mf.schedule_shortened]
    device = trace.device_name if hasattr(trace, "device_name") else None
    device = device or mf.device_name
    if _is_cpu(trace):
        device = device_label(man)
    versions = trace.meta.get("versions")
    cuda = versions.get("cuda_runtime_version") if isinstance(versions, dict) else None
    return Header(
        title=title,
        source=str(trace.path),
        device=device,
        torch_version=mf.versions.torch,
        cuda_runtime=_cuda_version(cuda),
        config=config,
        n_params=mf.model.n_params,
        steps=steps,
        step_time_ms=step_ms,
        measured_step_time_ms=mf.metrics.step_median_ms,
        tokens_per_step=tokens,
        tokens_per_s=tokens / (step_ms / 1e3) if tokens and step_ms else None,
        measured_tokens_per_s=mf.metrics.tokens_per_s,
        options=options,
        missing=missing,
        residual=_residual_text(mf.observer),
    )


def _residual_text(obs: Observer | None) -> str | None:
    """The manifest's residual check in one sentence (what the passes left behind first)."""
    if obs is None:
        return None
    text = obs.residual_sentence or (
        f"residual not checked: {obs.residual_absent}" if obs.residual_absent else None
    )
    left = list(obs.left_behind)
    if obs.cupti_attached:
        left.append(obs.cupti_attached)
    if left:
        text = f"left behind by the passes: {'; '.join(left)}" + (f"; {text}" if text else "")
    if obs.rank is not None and text:
        text = f"rank {obs.rank} (the largest): {text}"
    return text


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
    arts = as_manifest(trace.manifest).artifacts
    rel = arts.memory_timeline
    run_dir = getattr(trace, "run_dir", None)
    if not rel or not run_dir:
        why = arts.memory_timeline_absent
        return None, ([f"no per-category memory timeline: {why}"] if why else [])
    path = Path(run_dir) / rel
    tl = M.downsample_categories(M.load_category_timeline(path))
    which = arts.memory_timeline_pass
    if which and which != MAIN_WINDOW:  # collect's category step, after the main window
        return CategoryMemory(tl, None, str(path)), [
            f"the per-category memory timeline is the {which}, recorded after the main "
            "window: it is plotted from its own start, without the trace's step boundaries"
        ]
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


def _manifest_memory(trace: Any) -> tuple[M.MemoryStats | None, str | None]:
    """The run's unprofiled memory figures (manifest metrics), for a trace without
    ``[memory]`` events."""
    mf = as_manifest(trace.manifest)
    met = mf.metrics
    peak_a = met.peak_allocated_bytes
    if peak_a is None:
        return None, None
    mem = M.MemoryStats(
        device=mf.device_type or "cuda",
        events=0,
        peak_allocated_bytes=int(peak_a),
        peak_reserved_bytes=int(met.peak_reserved_bytes or 0),
        avg_allocated_bytes=met.avg_allocated_bytes or float("nan"),
        avg_reserved_bytes=float("nan"),
        window_ns=0,
    )
    source = (
        "measured without the profiler: run manifest metrics "
        f"({met.memory_method or 'torch.cuda counters'})"
    )
    return mem, source


def memory_facts(
    memory: pd.DataFrame,
    steps: list[int],
    mem: M.MemoryStats | None,
    categories: CategoryMemory | None,
    tokens: int | None,
    manifest: Any,
    unseen: int = 0,
) -> MemoryFacts:
    """:class:`MemoryFacts` of the report device's ``[memory]`` events (``memory``);
    ``unseen``: bytes allocated before the counter started (:func:`unseen_static`)."""
    floor = M.floor_allocated(memory, steps)
    floor = floor + unseen if floor is not None else None
    dynamic = mem.peak_allocated_bytes - floor if mem is not None and floor is not None else None
    at_peak = M.category_peak(categories.timeline) if categories is not None else None
    model, note = MM.from_manifest(manifest if isinstance(manifest, dict) else None)
    return MemoryFacts(
        floor_bytes=floor,
        dynamic_peak_bytes=dynamic,
        activation_bytes_per_token=dynamic / tokens if dynamic is not None and tokens else None,
        category_peak=at_peak or None,
        category_peak_model=(
            M.model_categories(at_peak, mem.peak_allocated_bytes if mem else None)
            if at_peak
            else None
        ),
        model=model,
        model_note=note,
    )


def unseen_static(memory: pd.DataFrame, steps: list[int], categories: CategoryMemory | None) -> int:
    """Bytes of parameters and optimizer state the trace's allocator counter does not see:
    on a CPU run it counts from the profiler's start, so its floor can lie below the
    weights the per-category timeline shows (0 when it sees them, or without a timeline)."""
    floor = M.floor_allocated(memory, steps)
    if floor is None or categories is None:
        return 0
    at_peak = M.category_peak(categories.timeline)
    static = sum(
        v
        for c, v in at_peak.items()
        if MM.TIMELINE_TO_CATEGORY.get(c) in ("parameters", "optimizer_state")
    )
    return max(0, int(static) - int(floor))


def trace_facts(trace: Any, timeline: TL.Timeline | str = "auto") -> TraceFacts:
    """The trace's part of :func:`summarize` (``trace``: a ``tracekit.parse.Trace``).
    ``timeline``: the light pass joined to it (:func:`tracekit.summary.timeline.for_report`,
    or its ``mode``: ``auto``, ``light``, ``full``); when its ``source`` is ``light`` the
    step table, step time, GPU idle and the launch check come from the light pass,
    everything else from ``trace``."""
    steps = S.analysed_steps(trace.steps)
    tl = TL.for_report(trace, steps, timeline) if isinstance(timeline, str) else timeline
    full_table = S.step_table(trace.steps)
    table = S.step_table(tl.steps) if tl.light else full_table
    n = max(1, len(steps))
    header = _header(trace, steps, table)
    cpu = _is_cpu(trace)
    k, rt = (tl.kernels, tl.runtime) if tl.light else (trace.kernels, trace.runtime)
    launch = CPU.NO_LAUNCH if cpu else S.launch_check(table, k, rt, header.measured_step_time_ms)
    tl_facts = TL.timeline_facts(tl, full_table, header.measured_step_time_ms, trace.manifest)

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
        mem, mem_source = _manifest_memory(trace)
    categories, cat_notes = _categories(trace)
    unseen = unseen_static(memory, steps, categories)
    if unseen and mem is not None:
        mem = replace(
            mem,
            peak_allocated_bytes=mem.peak_allocated_bytes + unseen,
            avg_allocated_bytes=mem.avg_allocated_bytes + unseen,
        )
        cat_notes.append(
            f"the trace's allocator counter started after {unseen} B of parameters and "
            "optimizer state were allocated (the per-category timeline sees them): added to "
            "its floor, peak and average"
        )
    st = trace.steps[trace.steps["step"] >= 0].sort_values("step")
    spans = V.input_spans(trace.ops, trace.kernels)
    starts = [int(v) for v in st["cpu_ts"]]
    mem_tl = M.timeline(memory)
    return TraceFacts(
        steps=steps,
        step_starts_ns=starts,
        step_table=table,
        header=header,
        launch=launch,
        memory=mem,
        memory_source=mem_source,
        memory_timeline=mem_tl,
        memory_per_step=M.peaks_per_step(memory),
        categories=categories,
        allocators=M.top_allocators(memory, TOP_ALLOCATORS, steps=n),
        memory_facts=memory_facts(
            memory, steps, mem, categories, header.tokens_per_step, trace.manifest, unseen
        ),
        input_wait_ns=V.input_wait_ns(spans, trace.kernels),
        notes=cat_notes + tl_facts.notes,
        kv=kv_growth(trace.manifest, steps, starts, mem_tl),
        device_kind="cpu" if cpu else "gpu",
        cpu=CPU.utilisation(trace.kernels, table, trace.manifest) if cpu else None,
        timeline=tl if tl.light else None,
        timeline_facts=tl_facts,
    )


def _is_cpu(trace: Any) -> bool:
    """A CPU run's view (``tracekit.parse.cpuview``): its kernels are work operators."""
    return getattr(trace, "activity", "gpu") == "cpu"


def summarize(
    trace: Any,
    cls: Any,
    *,
    facts: TraceFacts | None = None,
    top_operators: int = TOP_OPERATORS,
    top_kernels: int = TOP_KERNELS,
    on_table: Callable[[str, Any], None] | None = None,
    exposed_comm_pct: float | None = None,
    union_shares: bool = False,
    comm_ms: tuple[float, str] | None = None,
    timeline: TL.Timeline | str = "auto",
) -> Summary:
    """Everything the report shows. ``trace``: a ``tracekit.parse.Trace``; ``cls``: its
    ``tracekit.classify.Classification``; ``facts``: :func:`trace_facts` of the trace, if
    already computed. ``on_table(name, value)`` is called with the ``roofs`` and the
    ``operators`` and ``classes`` tables as soon as each is computed (so that a report can
    draw them while the rest is summarised). ``exposed_comm_pct``: the share of the step
    in which communication runs exposed, from a multi-rank analysis (replaces this trace's
    own figure and the manifest's ``metrics.exposed_comm_pct``). ``union_shares``: each
    class's share of the GPU's busy time beside its time share (a multi-rank report; see
    :func:`tracekit.summary.classes.union_shares`). ``timeline``: see :func:`trace_facts`
    (ignored when ``facts`` is given). ``comm_ms``: (ms per step, words) of communication
    measured on the unprofiled step, replacing the trace's exposed communication in the
    verdict's split (:func:`tracekit.summary.verdict.breakdown`; before
    ``exposed_comm_pct``)."""
    f = facts if facts is not None else trace_facts(trace, timeline)
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
    classes = C.class_table(k, n, union=union_shares)
    classes = classes[classes["kernel_count"] > 0].reset_index(drop=True)  # none: absent
    if on_table is not None:
        on_table("classes", classes)
    bound = C.bound_shares(k)
    notes = [str(x) for x in getattr(cls, "notes", [])]
    notes.extend(f.notes)
    total = float(k["dur"].sum())
    cpu = f.cpu is not None
    if total == 0:
        what = "work operators" if cpu else "GPU activity"
        notes.append(f"no {what} in the analysed steps: time shares are undefined")
    dm = DecodeModel.model_of(trace.manifest)
    ss = SS.step_summary(
        k,
        f.step_table,
        roofs,
        measured_step_ms=f.header.measured_step_time_ms,
        traffic=_traffic(f, dm, steps, trace.manifest),
    )
    notes.extend(ss.notes)
    if ss.traffic is not None:  # the summary's own estimate stands in for classify's
        notes = [x for x in notes if x != NO_TRAFFIC_NOTE]
    gen = _generate(trace, cls, f, operators, ss, roofs)
    if gen is not None:
        notes.extend(gen.notes)
    bd = _breakdown(f, cls, trace.manifest, exposed_comm_pct, comm_ms)
    cp = None if cpu else CP.for_report(trace, cls, steps)
    sm = Summary(
        **{x.name: getattr(f, x.name) for x in fields(TraceFacts) if x.name != "notes"},
        classes=classes,
        class_per_step=C.class_time_per_step(k),
        operators=operators,
        kernels=C.kernel_table(k, n),
        bound=bound,
        roofs=roofs,
        flop_sources=_flop_sources(k),
        step_summary=ss,
        breakdown=bd,
        verdict=_verdict(trace, bd, _evidence(f, k, ss, bound, roofs), gen, f.cpu)
        if bd and total
        else None,
        notes=[*notes, CPU.CRITICAL_PATH_NOTE] if cpu else notes,
        warnings=[w for w in (f.launch.message, _timeline_warning(f)) if w],
        critical_path=cp,
        cp_anchor=CPA.for_summary(trace, cp),
        generate=gen,
        roof_note=roof_note(
            operators,
            {
                "FLOP rate": ss.overall["compute_utilisation_pct"],
                "bandwidth": ss.overall["bandwidth_utilisation_pct"],
            },
        ),
    )
    sm.summary = summary_json(sm, top_operators=top_operators, top_kernels=top_kernels)
    return checked(sm, cls.kernels, trace.ops)


def checked(sm: Summary, kernels: pd.DataFrame | None, ops: pd.DataFrame | None) -> Summary:
    """``sm`` with the report invariants it breaks (:mod:`tracekit.summary.invariants`) in
    ``broken`` and, one line each, among its warnings."""
    sm.broken = INV.violations(sm.summary, kernels, ops)
    if sm.broken:
        sm.warnings.extend(f"{INV.WARNING}{v}" for v in sm.broken)
        sm.summary["warnings"] = list(sm.warnings)
    return sm


def _generate(
    trace: Any, cls: Any, f: TraceFacts, operators: pd.DataFrame, ss: SS.StepSummary, roofs: Roofs
) -> GEN.GenerateFacts | None:
    """A generate run's prefill and decode figures (None for a training run)."""
    return GEN.analyse(
        trace.manifest,
        steps=f.steps,
        step_table=f.step_table,
        kernels=cls.kernels,
        trace_ops=trace.ops,
        operators=operators,
        kernel_bytes=ss.per_step,
        roofs=roofs,
    )


def _breakdown(
    f: TraceFacts,
    cls: Any,
    manifest: Any,
    exposed_comm_pct: float | None,
    comm_ms: tuple[float, str] | None = None,
) -> V.Breakdown | None:
    """The verdict's split of the step; a CPU run's over its profiled step (its operators
    are lengthened by the profiler too)."""
    return V.breakdown(
        f.step_table,
        measured_step_ms=None if f.cpu is not None else f.header.measured_step_time_ms,
        input_wait=f.input_wait_ns,
        exposed_comm=V.exposed_comm_ns(_timeline_kernels(f, cls)),
        exposed_comm_pct=_exposed_comm(manifest, exposed_comm_pct),
        comm_ms=comm_ms,
    )


def _timeline_kernels(f: TraceFacts, cls: Any) -> pd.DataFrame:
    """The GPU activities whose overlap the verdict measures (``class``, ``ts``, ``dur``,
    ``step``): the light pass's, with their full partners' classes, where it is used."""
    cols = ["class", "ts", "dur", "step"]
    k = TL.with_classes(f.timeline.kernels, cls.kernels) if f.timeline else cls.kernels
    frame: pd.DataFrame = k[cols]
    return frame


def _timeline_warning(f: TraceFacts) -> str | None:
    return f.timeline_facts.warning() if f.timeline_facts is not None else None


def _verdict(
    trace: Any,
    bd: V.Breakdown,
    ev: V.Evidence,
    gen: GEN.GenerateFacts | None,
    cpu: CPU.CpuUtilisation | None,
) -> V.Verdict:
    v = V.decide(bd, ev) if cpu is None else CPU.decide(bd, ev, cpu)
    if (trace.steps["name"] == WHOLE_TRACE).all():  # the parser's one step of a trace without
        v = replace(v, evidence=[*v.evidence, NO_STEPS])  # ProfilerStep markers
    return GD.decode_verdict(v, gen) if gen is not None else v


def _traffic(
    f: TraceFacts, dm: DecodeModel | None, steps: list[int], manifest: Any
) -> TR.Traffic | TR.DecodeTraffic | None:
    """The analytic traffic beside the kernels' bytes: a training step's (memory model, or
    for a user script's run the optimizer's tensors and the measured dynamic memory), or a
    decode step's (decode model: weights + KV cache, mean of the recorded steps)."""
    if dm is not None:
        recorded = [d for d in steps if 0 <= d < dm.new_tokens]
        return TR.DecodeTraffic.mean_of([dm.step(d) for d in recorded]) if recorded else None
    if f.memory_facts.model is not None:
        return TR.traffic(f.memory_facts.model)
    # a user script's run: its optimizer's tensors and the measured dynamic memory
    opt = as_manifest(manifest).optimizer.raw
    return TR.traffic_from_optimizer(opt or None, f.memory_facts.dynamic_peak_bytes)


def _flop_sources(k: pd.DataFrame) -> dict[str, float]:
    """Which FLOP counts are measured, modelled or absent, as shares of GPU time."""
    out: dict[str, float] = {}
    total = float(k["dur"].sum())
    if total and "source" in k:
        for src, d in k.groupby(k["source"].fillna("none").astype(str))["dur"].sum().items():
            out[str(src)] = 100.0 * float(d) / total
    return out


def _exposed_comm(manifest: Any, given: float | None) -> tuple[float, str] | None:
    """An exposed-communication share from outside the trace: the argument, else the
    manifest's ``metrics.exposed_comm_pct`` (written by a multi-GPU collect)."""
    if given is not None:
        return float(given), "multi-rank analysis"
    v = as_manifest(manifest).metrics.exposed_comm_pct
    return (v, "run manifest metrics.exposed_comm_pct") if v is not None else None


def _evidence(
    f: TraceFacts, k: pd.DataFrame, ss: SS.StepSummary, bound: dict[str, float | None], r: Roofs
) -> V.Evidence:
    lc = f.launch
    return V.Evidence(
        bound_pct=bound,
        intensity=ss.overall["arithmetic_intensity"],
        ridge=ss.ridge,
        pipe=ss.pipe,
        compute_utilisation_pct=ss.overall["compute_utilisation_pct"],
        bandwidth_utilisation_pct=ss.overall["bandwidth_utilisation_pct"],
        memory_bound_roof_pct=SS.memory_bound_roof_pct(k, r.bandwidth),
        kernels_per_step=lc.kernels_per_step,
        median_kernel_us=lc.median_kernel_us,
        median_launch_us=lc.median_launch_us,
        short_kernels=lc.short_kernels,
        host_busy_pct=lc.host_busy_pct,
        tensor_peaks={p: v for p, v in r.peaks.items() if p.startswith("tensor_")},
        traced_step="the light timeline pass's step" if f.timeline else "the profiled step",
    )
