"""``classify``: every kernel and operator classed, costed and placed on the device roofline.

:func:`classify` runs the stages in order, each in the module that owns it:

1. **roof** — the device's peaks and bandwidth (:mod:`~tracekit.classify.devices`);
2. **classes** — every kernel's class from the op families' rules
   (:mod:`~tracekit.classify.classes`, :mod:`~tracekit.classify.families`);
3. **costs** — each kernel's share of its operator's modelled FLOPs and bytes
   (:mod:`~tracekit.classify.attribution`, :mod:`~tracekit.classify.costs`), torch's own
   FLOP estimates filled in first (:mod:`~tracekit.classify.profiler_flops`), and the
   precision pipe each kernel runs on (:mod:`~tracekit.classify.bounds`);
4. **counters** — measured FLOPs and bytes in place of the model where Nsight Compute
   counters are given (:mod:`~tracekit.classify.measured`);
5. **bounds** — intensity, memory- or compute-bound, attained fraction of the roof
   (:mod:`~tracekit.classify.bounds`), with the per-kernel and per-operator tables
   (:mod:`~tracekit.classify.tables`);
6. **ceilings** — a measured roof that an operator beats gives way to the spec figure, and
   the bounds are placed again under the raised roof (:mod:`~tracekit.classify.ceiling`);
7. **tables** — classes, steps (:mod:`~tracekit.classify.tables`).

Each stage appends its plain-sentence notes to the list the result carries.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from tracekit.classify.attribution import cost_notes, kernel_costs
from tracekit.classify.bounds import kernel_bounds, kernel_pipes
from tracekit.classify.ceiling import raise_beaten
from tracekit.classify.classes import OpContext, kernel_classes, op_context
from tracekit.classify.columns import KernelColumns, require
from tracekit.classify.devices import Roofline, resolve_roofline
from tracekit.classify.manifest import (
    FROM_MANIFEST,
    NO_TRAFFIC_NOTE,
    FromManifest,
    TraceLike,
    analytic_columns,
    n_params,
    profiler_overhead,
    run_traffic,
)
from tracekit.classify.measured import Counters, Measured, apply_measured, join_measured
from tracekit.classify.models.traffic import Traffic
from tracekit.classify.profiler_flops import run_profiler_flops, with_profiler_flops
from tracekit.classify.result import Classification, in_scope, n_steps
from tracekit.classify.tables import class_table, kernel_table, op_roofline, step_table
from tracekit.classify.wrappers import count_once
from tracekit.parse.cpuview import cpu_note, device_label


def classify(
    trace: TraceLike,
    *,
    manifest: Mapping[str, Any] | None = None,
    peak_tflops: float | None = None,
    bandwidth_gbs: float | None = None,
    counters: Counters = None,
    tf32: bool | None = None,
    counters_mode: str = "auto",
    profiler_flops: pd.DataFrame | str | Path | None = None,
    gemm_counters: Counters = None,
    traffic: Traffic | FromManifest | None = FROM_MANIFEST,
) -> Classification:
    """Classify every GPU activity and operator of ``trace`` against the device roofline.

    ``trace`` has the parsed tables (``kernels``, ``ops``, ``steps``) and ``meta``
    (tracekit.parse.load's Trace). ``manifest`` defaults to ``trace.manifest`` (run
    folders). ``counters``: an Nsight Compute ``--csv --page raw`` file, or its parsed
    frame (:func:`tracekit.classify.ncu.read_ncu_csv`); ``gemm_counters``: the
    collector's second pass with every GEMM launch (``counters-gemm.csv``), joined in launch
    order before ``counters`` (both found through the manifest by default).
    ``profiler_flops``: torch's own per-(operator, shapes) FLOP estimates (the collector's
    ``*.profiler_flops.json.gz``, found through the manifest by default); they fill
    ``ops.flops`` where the trace has none, and are preferred to the model.
    The step table's ``analytic_*`` columns are the run's analytic per-step traffic, which
    classify computes from the manifest's model config
    (:func:`tracekit.classify.models.traffic.manifest_traffic`: the figure the report and
    the sweep show); a run without one gets NaN and a note. ``traffic`` overrides it (tests:
    an estimate, or ``None`` for a run that has none).
    """
    kernels, ops, manifest = _inputs(trace, manifest)
    notes: list[str] = []
    k = KernelColumns.of(kernels)
    cpu = getattr(trace, "activity", "gpu") == "cpu"  # a CPU run's work operators as kernels
    if cpu:
        notes.append(cpu_note(trace))
    elif not k.n:
        notes.append("no GPU activity in the trace (a CPU-only run?): nothing to classify")
    # 1. roof
    roof = _roof(k, trace, manifest, peak_tflops, bandwidth_gbs, tf32, notes)
    if cpu:
        roof = cpu_roof(roof, manifest)
        if not roof.known:
            notes.append(
                "no roofline for this CPU: CPUs are not in the spec table and the run has no "
                "measured ceilings (tracekit run and collect measure them unless "
                "--no-ceilings); give --peak-tflops and --bandwidth"
            )
    # 2. classes
    ctx, cls = _classes(k, ops, notes)
    # 3. costs: torch's own FLOP estimates where the collector kept them, else the models
    ops = _with_torch_flops(trace, ops, profiler_flops, notes)
    cost = kernel_costs(k, ops, cls["class"], ctx, n_params(manifest))
    if cpu and ctx is not None:  # a wrapper carries none of its children's cost
        count_once(k.frame["op_id"].to_numpy(dtype=np.int64), ctx, cost)
    notes += cost_notes(ops, cost)
    pipe = kernel_pipes(k, cls["class"], cost, roof)
    # 4. counters: measured in place of modelled, where given
    measured = join_measured(trace, kernels, counters, gemm_counters, counters_mode, notes)
    if measured is not None:
        roof = apply_measured(measured, kernels, cost, pipe, roof, notes)
    # 5. bounds, per kernel and per operator
    b = kernel_bounds(cost, pipe, k.dur, roof)
    kr = kernel_table(k, cls, cost, pipe, b, roof)
    op_df = op_roofline(kr, ops, roof, ctx)
    # 6. ceilings: a measured roof an operator beats gives way to the spec; bounds again
    #    (a CPU has no spec sheet to give way to)
    raised, said = raise_beaten(roof, op_df) if not cpu else (roof, [])
    notes += said
    if raised is not roof:
        roof = raised
        kr = kernel_table(k, cls, cost, pipe, kernel_bounds(cost, pipe, k.dur, roof), roof)
        op_df = op_roofline(kr, ops, roof, ctx)
    # 7. tables
    steps_in = getattr(trace, "steps", None)
    est = run_traffic(manifest, traffic)
    return _tables(kr, op_df, steps_in, roof, manifest, est, measured, notes, cpu)


def _inputs(
    trace: TraceLike, manifest: Mapping[str, Any] | None
) -> tuple[pd.DataFrame, pd.DataFrame, Mapping[str, Any] | None]:
    """The kernels and ops tables (checked for the columns classify needs) and the manifest
    (the trace's own by default)."""
    kernels, ops = trace.kernels, trace.ops if trace.ops is not None else pd.DataFrame()
    if manifest is None:
        manifest = getattr(trace, "manifest", None)
    require(kernels, "kernels", ("kernel_id", "kind", "name", "ts", "dur"))
    if len(ops):
        require(ops, "ops", ("op_id", "name", "parent"))
    return kernels, ops, manifest


def _roof(
    k: KernelColumns,
    trace: TraceLike,
    manifest: Mapping[str, Any] | None,
    peak_tflops: float | None,
    bandwidth_gbs: float | None,
    tf32: bool | None,
    notes: list[str],
) -> Roofline:
    """The roofline of the device most kernels ran on."""
    main_dev = int(pd.Series(k.device).mode().iloc[0]) if k.n else None
    meta = getattr(trace, "meta", None) or {}
    props = meta.get("device_properties") or meta.get("deviceProperties") or []
    roof = resolve_roofline(
        props,
        device=main_dev,
        manifest=manifest,
        peak_tflops=peak_tflops,
        bandwidth_gbs=bandwidth_gbs,
        tf32=tf32,
    )
    notes.extend(roof.notes)
    names_seen = {str(p.get("name")) for p in props if p.get("name")}
    if len(names_seen) > 1:
        notes.append(
            f"several device types in one trace ({', '.join(sorted(names_seen))}); "
            f"all judged against device {main_dev}'s roofline"
        )
    return roof


def cpu_roof(roof: Roofline, manifest: Mapping[str, Any] | None) -> Roofline:
    """A CPU run's roofline: the CPU named from the manifest, and its measured copy
    bandwidth called what it is (the ceilings copy a buffer in host memory)."""
    src = roof.bandwidth_source.replace("device-to-device copy", "host memory copy")
    return replace(roof, device_name=device_label(manifest), bandwidth_source=src)


def _classes(
    k: KernelColumns, ops: pd.DataFrame, notes: list[str]
) -> tuple[OpContext | None, dict[str, np.ndarray]]:
    """Every kernel's class (and the operator context it was decided in)."""
    ctx = op_context(ops) if len(ops) else None
    cls = kernel_classes(k.frame, ops if len(ops) else None, ctx, (k.name_codes, k.name_uniq))
    if not len(ops):
        notes.append("no CPU operators in the trace: classes from kernel names only, no FLOPs")
    return ctx, cls


def _with_torch_flops(
    trace: TraceLike,
    ops: pd.DataFrame,
    profiler_flops: pd.DataFrame | str | Path | None,
    notes: list[str],
) -> pd.DataFrame:
    """``ops`` with torch's own FLOP estimates filled in (given, or the run folder's)."""
    if profiler_flops is None:
        profiler_flops = run_profiler_flops(trace)
    if profiler_flops is not None and len(ops):
        ops = with_profiler_flops(ops, profiler_flops, notes)
    return ops


def _tables(
    kr: pd.DataFrame,
    op_df: pd.DataFrame,
    steps_in: pd.DataFrame | None,
    roof: Roofline,
    manifest: Mapping[str, Any] | None,
    traffic: Traffic | None,
    measured: Measured | None,
    notes: list[str],
    cpu: bool = False,
) -> Classification:
    """The class and step tables from the kernel rows, and the result (``cpu``: a CPU run,
    where the time outside the work operators is not a GPU waiting for launches)."""
    scope = in_scope(kr)
    analysed = kr[["class", "dur", "flops", "bytes", "bound", "step"]]
    if not scope.all():
        analysed = analysed[scope]
    classes = class_table(analysed, n_steps(analysed))
    steps = step_table(kr, steps_in, roof, analytic_columns(traffic))
    if traffic is None:
        notes.append(NO_TRAFFIC_NOTE)
    if cpu and len(steps):
        steps["launch_bound"] = False
    note = _launch_bound_note(steps, profiler_overhead(manifest))
    if note:
        notes.append(note)
    counters, unmatched = (measured.counters, measured.unmatched) if measured else (None, None)
    return Classification(kr, op_df, classes, steps, roof, notes, counters, unmatched)


def _launch_bound_note(steps: pd.DataFrame, overhead: str) -> str | None:
    """One note for every launch/host-bound step (a decode run records dozens)."""
    lb = steps[steps["launch_bound"].astype(bool)] if len(steps) else steps
    if not len(lb):
        return None
    ids, idle = lb["step"].astype(int).tolist(), lb["gpu_idle_pct"]
    which = f"step {ids[0]}" if len(ids) == 1 else f"steps {', '.join(map(str, ids[:8]))}"
    if len(ids) > 8:
        which = f"steps {ids[0]}–{ids[-1]} ({len(ids)} of {len(steps)})"
    lo, hi = f"{idle.min():.0f}", f"{idle.max():.0f}"
    span = f"{lo}%" if lo == hi else f"{lo}–{hi}%"
    return (
        f"{which}: GPU idle {span} of the step's span — launch/host-bound "
        "(the GPU waits for the CPU)" + overhead
    )
