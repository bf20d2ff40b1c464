"""``classify``: every kernel and operator classed, costed and placed on the device roofline.

Kernel FLOPs and bytes
----------------------
FLOPs and bytes are modelled per *operator* (:mod:`tracekit.classify.flops`). A kernel
carries a share of the cost of its **cost operator**: the innermost operator that
launched it if that operator has a model, else the nearest ancestor of the same class
that has one. Where an operator launches several kernels (a GEMM and its split-K
reduction, a cuDNN convolution and its layout transforms) its totals are **split over
its kernels in proportion to their durations**, so the kernels' shares sum to the
operator's total and every kernel of an operator has the operator's intensity. (The
alternative — attributing everything to the longest kernel — would give the helper
kernels zero bytes and an undefined intensity.) memcpy/memset records carry their own
byte count (device-to-device copies count read + write). Measured counters replace the
modelled numbers kernel by kernel, with the modelled ones kept alongside.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

import tracekit.classify.classes as C
import tracekit.classify.counters as K
from tracekit.classify.attribution import cost_ops, split_by_duration
from tracekit.classify.bounds import bounds, kernel_pipes, peaks
from tracekit.classify.columns import col, out_column, require, take, text_codes
from tracekit.classify.devices import resolve_roofline
from tracekit.classify.families.inputs import LIST_SIZES_UNKNOWN
from tracekit.classify.manifest import (
    TraceLike,
    analytic_from_manifest,
    n_params,
    profiler_overhead,
    run_artifact,
)
from tracekit.classify.profiler_flops import run_profiler_flops, with_profiler_flops
from tracekit.classify.result import Classification, in_scope, n_steps
from tracekit.classify.schema import TABLES
from tracekit.classify.tables import class_table, op_roofline, step_table

NAN = math.nan


def classify(
    trace: TraceLike,
    *,
    manifest: Mapping[str, Any] | None = None,
    peak_tflops: float | None = None,
    bandwidth_gbs: float | None = None,
    counters: pd.DataFrame | str | Path | None = None,
    tf32: bool | None = None,
    counters_mode: str = "auto",
    profiler_flops: pd.DataFrame | str | Path | None = None,
    gemm_counters: pd.DataFrame | str | Path | None = None,
) -> Classification:
    """Classify every GPU activity and operator of ``trace`` against the device roofline.

    ``trace`` has the parsed tables (``kernels``, ``ops``, ``steps``) and ``meta``
    (tracekit.parse.load's Trace). ``manifest`` defaults to ``trace.manifest`` (run
    folders). ``counters``: an Nsight Compute ``--csv --page raw`` file, or its parsed
    frame (:func:`tracekit.classify.counters.read_ncu_csv`); ``gemm_counters``: the
    collector's second pass with every GEMM launch (``counters-gemm.csv``), joined in launch
    order before ``counters`` (both found through the manifest by default).
    ``profiler_flops``: torch's own per-(operator, shapes) FLOP estimates (the collector's
    ``*.profiler_flops.json.gz``, found through the manifest by default); they fill
    ``ops.flops`` where the trace has none, and are preferred to the model.
    """
    kernels, ops = trace.kernels, trace.ops if trace.ops is not None else pd.DataFrame()
    steps_in = getattr(trace, "steps", None)
    meta = getattr(trace, "meta", None) or {}
    if manifest is None:
        manifest = getattr(trace, "manifest", None)
    require(kernels, "kernels", ("kernel_id", "kind", "name", "ts", "dur"))
    if len(ops):
        require(ops, "ops", ("op_id", "name", "parent"))
    notes: list[str] = []
    n = len(kernels)
    if not n:
        notes.append("no GPU activity in the trace (a CPU-only run?): nothing to classify")
    dur = col(kernels, "dur", 0, np.int64)
    kind_codes, kind_uniq = text_codes(kernels, "kind", "kernel")
    kind = kind_uniq[kind_codes]
    name_codes, name_uniq = text_codes(kernels, "name", "")
    names = name_uniq[name_codes]
    step = col(kernels, "step", -1, np.int64)

    # roofline of the device most kernels ran on
    dev = col(kernels, "device", 0, np.int64)
    main_dev = int(pd.Series(dev).mode().iloc[0]) if n else None
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

    # classes
    ctx = C.op_context(ops) if len(ops) else None
    cls_df = C.kernel_classes(kernels, ops if len(ops) else None, ctx, (name_codes, name_uniq))
    kcls = cls_df["class"]
    if not len(ops):
        notes.append("no CPU operators in the trace: classes from kernel names only, no FLOPs")

    # costs (torch's own FLOP estimates, kept beside the trace by the collector, where given)
    prof_flops = profiler_flops if profiler_flops is not None else run_profiler_flops(trace)
    if prof_flops is not None and len(ops):
        ops = with_profiler_flops(ops, prof_flops, notes)
    list_bytes = 4
    anchor, inner, cost = cost_ops(kernels, ops, kcls, list_bytes, n_params(manifest), ctx, names)
    is_copy = np.isin(kind, ("memcpy", "memset"))
    anchor[is_copy] = -1  # copies carry their own byte count, not a share of an op
    flops = split_by_duration(anchor, dur, cost.flops)
    nbytes = split_by_duration(anchor, dur, cost.bytes)
    src = take(cost.source, anchor, "none")
    src[~(np.isfinite(flops) | np.isfinite(nbytes))] = "none"
    cost_note = take(cost.cost_note, anchor, "")
    why = take(cost.cost_note, inner, "")  # why a kernel without a cost operator has none
    cost_note = np.where(anchor >= 0, cost_note, why).astype(object)
    cost_dtype = take(cost.dtype, anchor, None)
    cost_name = take(ops.get("name"), anchor, None)
    cost_op_id = np.full(n, -1, dtype=np.int64)
    if len(ops):
        has = anchor >= 0
        cost_op_id[has] = ops["op_id"].to_numpy(dtype=np.int64)[anchor[has]]

    # memcpy / memset carry their own byte count
    copy_bytes = (
        pd.to_numeric(kernels["bytes"], errors="coerce").to_numpy(dtype=float)
        if ("bytes" in kernels)
        else np.full(n, NAN)
    )
    dtod = np.zeros(n, dtype=bool)
    dtod[kind == "memcpy"] = ["DtoD" in str(x) for x in names[kind == "memcpy"]]
    factor = np.where((kind == "memcpy") & dtod, 2.0, 1.0)
    flops[is_copy] = 0.0
    nbytes[is_copy] = copy_bytes[is_copy] * factor[is_copy]
    src[is_copy] = np.where(np.isfinite(nbytes[is_copy]), "profiler", "none")
    host_copy = (kind == "memcpy") & ~dtod
    cost_note[host_copy] = "host transfer: PCIe/NVLink-bound, not judged against DRAM"

    if len(ops) and "input_dims" in ops and ops["input_dims"].notna().sum() == 0:
        notes.append("no shapes recorded (record_shapes=False): FLOPs unavailable")
    elif len(ops) and not np.isfinite(flops[~is_copy]).any() and (~is_copy).any():
        notes.append("no kernel could be given FLOPs from the recorded shapes")
    distinct_notes = [str(x) for x in pd.unique(cost_note)]
    if any(x.startswith(LIST_SIZES_UNKNOWN) for x in distinct_notes):
        notes.append(
            "the profiler dropped the shapes of long tensor lists (optimizer steps): their "
            "FLOPs and bytes are unknown unless the manifest gives the parameter count"
        )
    if any(LIST_SIZES_UNKNOWN + ":" in x for x in distinct_notes):
        notes.append(
            "optimizer tensor lists without recorded shapes were given the model's parameter "
            "count (manifest) per list"
        )
    if any("B/element assumed" in x for x in distinct_notes):
        notes.append(
            "the profiler does not record the dtype of tensor lists (optimizer "
            "states): fp32 (4 B/element) assumed for their bytes"
        )
    if len(ops) and "flops" in ops and ops["flops"].notna().any():
        notes.append("the trace carries the profiler's own FLOPs (with_flops): used where present")

    # pipes
    pipe = kernel_pipes(kcls, cost_dtype, cost_name, name_codes, name_uniq, roof)
    pipe[is_copy] = None

    flops_model, bytes_model = flops.copy(), nbytes.copy()
    l2 = np.full(n, NAN)
    extrap = np.zeros(n, dtype=bool)
    counters_df = unmatched = None
    if counters is None:
        counters = run_artifact(trace, "counters")
        if gemm_counters is None:
            gemm_counters = run_artifact(trace, "counters_gemm")
    if counters is not None:
        counters_df = K.read_ncu_csv(counters) if isinstance(counters, (str, Path)) else counters
        launches = (
            K.read_ncu_csv(gemm_counters)
            if isinstance(gemm_counters, (str, Path))
            else gemm_counters
        )
        joined, unmatched, cnotes = K.join_counters(
            kernels, counters_df, mode=counters_mode, launches=launches
        )
        notes.extend(cnotes)
        if len(joined):
            idx = pd.Index(kernels["kernel_id"].to_numpy()).get_indexer(joined["kernel_id"])
            ok = idx >= 0
            j, rows = joined[ok], idx[ok]
            flops[rows] = j["flops"].to_numpy(dtype=float)
            nbytes[rows] = j["dram_bytes"].to_numpy(dtype=float)
            l2[rows] = j["l2_bytes"].to_numpy(dtype=float)
            extrap[rows] = j["extrapolated"].to_numpy(dtype=bool)
            src[rows] = "measured"
            mp = j["pipe"].to_numpy(dtype=object)
            has_mp = np.array([p is not None and p == p for p in mp], dtype=bool)
            pipe[rows[has_mp]] = mp[has_mp]
            l2bw = (
                counters_df["l2_peak_bw"].to_numpy(dtype=float)
                if "l2_peak_bw" in counters_df
                else np.zeros(0)
            )
            if np.isfinite(l2bw).any():
                roof = roof.with_l2(
                    float(np.nanmedian(l2bw)),
                    "measured (ncu lts__t_bytes.sum."
                    "peak_sustained × lts__cycles_elapsed.avg.per_second)",
                )
            else:
                notes.append(
                    "L2 roof unknown (peak metrics not in the counters): the class of "
                    "measured kernels is decided by DRAM intensity alone"
                )

    peak = peaks(roof, pipe)
    b = bounds(flops, nbytes, dur, peak, roof.bandwidth, l2, roof.l2_bandwidth)
    b["bound"][is_copy & np.isfinite(nbytes)] = "memory-bound"
    b["roof_pct"][host_copy] = NAN
    if not roof.known:
        b["bound"][:] = "unknown"

    kr = pd.DataFrame(
        {
            "kernel_id": kernels["kernel_id"].to_numpy(dtype=np.int64),
            "name": out_column(kernels.get("name"), n, names),
            "kind": out_column(kernels.get("kind"), n, kind),
            "class": kcls,
            "class_source": cls_df["class_source"],
            "class_rule": cls_df["class_rule"],
            "fused_ops": cls_df["fused_ops"],
            "device": dev.astype(np.int32),
            "stream": col(kernels, "stream", -1, np.int64),
            "op_id": col(kernels, "op_id", -1, np.int64),
            "op_name": out_column(kernels.get("op_name"), n),
            "autograd_node": cls_df["autograd_node"],
            "top_op": out_column(kernels.get("top_op_name"), n),
            "module": out_column(kernels.get("module"), n),
            "step": step.astype(np.int32),
            "ts": col(kernels, "ts", 0, np.int64),
            "dur": dur,
            "cost_op_id": cost_op_id.astype(np.int64),
            "cost_op_name": cost_name,
            "flops": flops,
            "bytes": nbytes,
            "flops_model": flops_model,
            "bytes_model": bytes_model,
            "l2_bytes": l2,
            "intensity": b["intensity"],
            "intensity_l2": b["intensity_l2"],
            "pipe": pipe,
            "peak_flops": peak,
            "peak_bw": np.full(n, roof.bandwidth if roof.bandwidth else NAN),
            "ridge": b["ridge"],
            "bound": b["bound"],
            "bound_level": b["bound_level"],
            "attained_flops": b["attained_flops"],
            "attained_bw": b["attained_bw"],
            "roof_pct": b["roof_pct"],
            "source": src,
            "extrapolated": extrap,
            "cost_note": cost_note,
        }
    )
    kr = kr[[c.name for c in TABLES["kernel_roofline"]]]

    scope = in_scope(kr)
    op_df = op_roofline(kr, ops, roof, ctx)
    analysed = kr[["class", "dur", "flops", "bytes", "bound", "step"]]
    if not scope.all():
        analysed = analysed[scope]
    classes = class_table(analysed, n_steps(analysed))
    steps = step_table(kr, steps_in, roof, analytic_from_manifest(manifest), notes)
    overhead = profiler_overhead(manifest)
    for r in steps.itertuples():
        if r.launch_bound:
            notes.append(
                f"step {r.step}: GPU idle {r.gpu_idle_pct:.0f}% of its span — "
                "launch/host-bound (the GPU waits for the CPU)" + overhead
            )
    return Classification(kr, op_df, classes, steps, roof, notes, counters_df, unmatched)
