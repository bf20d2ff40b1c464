"""One row of the sweep table from one ``tracekit collect`` run folder.

Pure reading: the manifest's metrics, the per-category memory timeline, the parsed
trace (GPU idle share) and the analytic memory model; the classify stage's columns
come from :func:`classify_columns` (NaN until ``tracekit.classify`` is installed).
"""

from __future__ import annotations

import gzip
import json
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tracekit.classify.families.registry import CLASSES
from tracekit.classify.models.memory import (
    CATEGORIES,
    TIMELINE_CATEGORIES,
    TIMELINE_TO_CATEGORY,
    StepOptions,
    estimate,
)
from tracekit.manifest import RunManifest, StepTime, manifest_or_empty
from tracekit.sweep.decode_limits import limit_columns
from tracekit.sweep.plan import Point

# Columns the classify stage fills: one time share per class.
CLASSIFY_COLUMNS = (
    *(f"time_share_{c}_pct" for c in CLASSES),
    "memory_bound_time_pct",
    "compute_bound_time_pct",
    "achieved_bw_Bps",
    "achieved_flops",
    "bw_util_pct",
    "kernel_flops_util_pct",
    "analytic_traffic_bytes",
)

_OOM_SIZE = re.compile(r"Tried to allocate ([0-9.]+) ?([KMGT]i?B|B|bytes)", re.IGNORECASE)
_UNITS = {
    "b": 1,
    "bytes": 1,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
}


def oom_requested_bytes(message: str | None) -> float:
    """The size in 'Tried to allocate 1.53 GiB' of a CUDA OOM message (NaN if absent)."""
    m = _OOM_SIZE.search(message or "")
    if not m:
        return math.nan
    return float(m.group(1)) * _UNITS[m.group(2).lower()]


def read_timeline(path: Path) -> tuple[list[str], list[float], list[list[int]]]:
    """(categories, times_us, bytes rows) of a tracekit memory timeline file."""
    with gzip.open(path, "rt") as f:
        d = json.load(f)
    if d.get("format") != "tracekit.memory_timeline":
        raise ValueError(f"{path}: not a tracekit memory timeline")
    return list(d["categories"]), list(d["times_us"]), list(d["bytes"])


def timeline_at_peak(path: Path) -> dict[str, float]:
    """Bytes per timeline category at the moment of the largest total, + the total."""
    cats, _, rows = read_timeline(path)
    if not rows:
        return {}
    peak_row = max(rows, key=sum)
    out = {f"tl_{c}_bytes": float(v) for c, v in zip(cats, peak_row, strict=True)}
    out["timeline_peak_bytes"] = float(sum(peak_row))
    return out


def _nan_row() -> dict[str, Any]:
    row: dict[str, Any] = {c: math.nan for c in CLASSIFY_COLUMNS}
    return row


def classify_columns(
    trace: Any, manifest: Mapping[str, Any] | None
) -> tuple[dict[str, float], str | None]:
    """The classify stage's per-configuration figures, as (columns, note).

    ``classes`` gives ``time_share_pct`` per class; ``steps`` gives bandwidth/FLOP/s
    achieved and their utilisation, the memory-/compute-bound time shares and the
    analytic traffic (``tracekit.classify.models.traffic``: the figure the report shows).
    """
    result = _classify(trace, manifest)
    return classify_frames_to_columns(result.classes, getattr(result, "steps", None)), None


def _classify(trace: Any, manifest: Mapping[str, Any] | None) -> Any:
    """The classification through the pipeline (with the traffic estimate the report shows)."""
    from tracekit.analyse import Options, analyse

    return analyse(trace, Options(manifest=manifest), summarise=False).classification


def classify_frames_to_columns(classes: Any, steps: Any) -> dict[str, float]:
    """Per-configuration columns from classify's ``classes`` and ``steps`` frames."""
    cols = {c: math.nan for c in CLASSIFY_COLUMNS}
    if classes is not None and len(classes):
        for rec in classes.to_dict(orient="records"):
            name = f"time_share_{rec.get('class')}_pct"
            if name in cols:
                cols[name] = float(rec.get("time_share_pct", math.nan))
        shares = [v for k, v in cols.items() if k.startswith("time_share_") and not math.isnan(v)]
        if not any(shares):  # no device time to share out (a CPU run): not measured, not 0
            cols.update({k: math.nan for k in cols if k.startswith("time_share_")})
    if steps is not None and len(steps):
        mean = steps.mean(numeric_only=True)
        pairs = {
            "memory_bound_time_pct": "memory_bound_time_pct",
            "compute_bound_time_pct": "compute_bound_time_pct",
            "achieved_bw_Bps": "achieved_bw",
            "achieved_flops": "achieved_flops",
            "bw_util_pct": "bw_util_pct",
            "analytic_traffic_bytes": "analytic_bytes",
        }
        for ours, theirs in pairs.items():
            if theirs in mean.index:
                cols[ours] = float(mean[theirs])
    return cols


def gpu_idle_pct(steps: Any) -> float:
    """Share of the profiled steps' GPU span with no GPU activity (parser's steps table):
    1 - Σ gpu_busy / Σ gpu_dur, in %. NaN without GPU activity (CPU runs)."""
    if steps is None or not len(steps):
        return math.nan
    s = steps.dropna(subset=["gpu_dur", "gpu_busy"])
    span = float(s["gpu_dur"].sum())
    if span <= 0:
        return math.nan
    return 100.0 * (1.0 - float(s["gpu_busy"].sum()) / span)


# Numeric columns every table has (NaN where not measured), so the analysis of a sweep
# whose configurations all failed still finds them.
MEASURED_COLUMNS = (
    "timed_steps",
    "step_time_ms",
    "samples_per_s",
    "tokens_per_s",
    "model_flops_per_s",
    "peak_allocated_bytes",
    "peak_reserved_bytes",
    "avg_allocated_bytes",
    "peak_bytes",
    "dynamic_peak_bytes",
    "mem_per_token_bytes",
    "device_total_bytes",
    "n_params",
    *(f"mem_{c}_bytes" for c in CATEGORIES),
    "model_peak_bytes",
    "model_error_pct",
    *(f"model_{c}_bytes" for c in CATEGORIES),
    "gpu_idle_pct",
    "model_flops_util_pct",
    "oom_requested_bytes",
    "tokens_per_s_per_gpu",
    "interconnect_busbw_Bps",
    *CLASSIFY_COLUMNS,
)


def complete(table: Any) -> Any:
    """``table`` (a DataFrame) with every MEASURED_COLUMNS column, NaN where absent; a
    table from before the GPU-count axis gets ``gpus`` 1."""
    missing = [c for c in MEASURED_COLUMNS if c not in table.columns]
    if not missing and "gpus" in table.columns:
        return table
    table = table.copy()
    if "gpus" not in table.columns:
        table["gpus"] = 1
    for c in missing:
        table[c] = math.nan
    if "tokens_per_s" in table.columns and table["tokens_per_s_per_gpu"].isna().all():
        table["tokens_per_s_per_gpu"] = table["tokens_per_s"] / table["gpus"]
    return table


def base_row(point: Point) -> dict[str, Any]:
    return {
        "key": point.key,
        "batch": point.batch,
        "seq": point.seq,
        "dtype": point.dtype,
        "attention": point.attention,
        "gpus": point.gpus,
        "tokens": point.tokens,
        "options": " ".join(point.options) or None,
    }


# The levers a row ran with, from its manifest's config (training runs).
LEVER_COLUMNS = ("checkpoint", "optimizer", "grad_accum", "cuda_graphs")


def generate_columns(
    manifest: Mapping[str, Any], peak_bytes: float, ceilings: Mapping[str, Any]
) -> dict[str, Any]:
    """A generate run's columns: TTFT and TPOT, the memory split, and the analytic decode
    model beside the measurement (bytes per step over the measured time per token gives
    the bandwidth the decode step achieved by the model's count)."""
    from tracekit.classify.models.decode import DecodeModel

    mf = manifest_or_empty(manifest)
    met, g = mf.metrics, mf.generate or {}
    mem = met.memory or {}
    ft, tp = met.ttft_ms, met.tpot_ms
    cols: dict[str, Any] = {
        "prompt": _f(g.get("prompt")),
        "new_tokens": _f(g.get("new_tokens")),
        "ttft_ms": _st(ft, "median"),
        "ttft_p10_ms": _st(ft, "p10"),
        "ttft_p90_ms": _st(ft, "p90"),
        "tpot_ms": _st(tp, "median"),
        "tpot_p10_ms": _st(tp, "p10"),
        "tpot_p90_ms": _st(tp, "p90"),
        "generated_tokens_per_s": _f(met.number("generated_tokens_per_s")),
        "prefill_tokens_per_s": _f(met.number("prefill_tokens_per_s")),
        "weights_bytes": _f(mem.get("weights_bytes")),
        "kv_cache_bytes": _f(mem.get("kv_cache_bytes")),
        "other_peak_bytes": _f(mem.get("other_bytes")),
        "model_kv_cache_bytes": _f(g.get("kv_cache_bytes")),
    }
    cols["dynamic_peak_bytes"] = peak_bytes - cols["weights_bytes"]
    dm = DecodeModel.from_manifest(manifest)
    cols["time_per_token_ms"] = cols["tpot_ms"] / dm.batch
    by = met.tpot_ms_by_step or []
    decode_ms = sum(_f(x) for x in by) if by else math.nan
    cols["prefill_pct"] = 100.0 * cols["ttft_ms"] / (cols["ttft_ms"] + decode_ms)
    cols["model_decode_bytes_per_step"] = dm.mean_bytes_per_step()
    cols["model_decode_flops_per_token"] = dm.mean_flops_per_token()
    steps = dm.steps()
    cols["model_weight_bytes"] = float(steps[0].weight_bytes)
    cols["model_kv_read_bytes_per_step"] = sum(x.kv_read_bytes for x in steps) / len(steps)
    cols["model_kv_bytes_per_token"] = dm.kv_cache_bytes() / (
        dm.batch * (dm.prompt + dm.new_tokens)
    )
    cols["decode_model_bw_Bps"] = cols["model_decode_bytes_per_step"] / (cols["tpot_ms"] / 1e3)
    bw = _f(ceilings.get("memory_bandwidth_Bps"))
    roofs = ceilings.get("matmul_flops") or {}
    peak = _f(roofs.get(dm.dtype))
    cols["decode_bw_util_pct"] = 100.0 * cols["decode_model_bw_Bps"] / bw if bw > 0 else math.nan
    for k in ("model_tpot_ms", "model_gemm_ridge_batch", "model_step_ridge_batch"):
        cols[k] = math.nan
    if bw > 0 and peak > 0:
        pred = dm.predict(bw, peak)
        cols["model_tpot_ms"] = 1e3 * pred["tpot_s"]
        cols["model_gemm_ridge_batch"] = pred["gemm_ridge_batch"]
        cols["model_step_ridge_batch"] = _f(pred["step_ridge_batch"])
    return cols


def run_row(
    point: Point,
    run_dir: Path,
    manifest: Mapping[str, Any] | None,
    *,
    with_trace: bool = True,
    ceilings: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Every measured and modelled column of one finished run folder. ``ceilings``
    (the sweep's, measured once) stand in for a run collected with --no-ceilings."""
    row = base_row(point)
    row.update(_nan_row())
    notes: list[str] = []
    m = manifest or {}
    mf = manifest_or_empty(m)
    row.update(manifest_columns(m))
    row.update(gpu_columns(point, m))
    row.update(memory_columns(point, run_dir, m, row["peak_allocated_bytes"], notes))
    ceil = _own_ceilings(mf) or ceilings or {}
    row.update(roof_columns(point, ceil, row["model_flops_per_s"]))
    config = mf.config.raw
    row.update({c: config.get(c) for c in LEVER_COLUMNS})
    if config.get("workload") == "generate":
        row.update(generate_columns(m, row["peak_bytes"], ceil))
    if point.gpus > 1:
        notes.append("the memory model is for one GPU")
    else:
        row.update(model_columns(point, m, row["peak_bytes"]))
    # the parsed trace: GPU idle share; classify's columns
    row["gpu_idle_pct"] = math.nan
    if with_trace and mf.artifacts.get("trace"):
        man = manifest
        if config.get("workload") == "generate" and manifest and not _own_ceilings(mf):
            man = {**manifest, "ceilings": ceil}  # one roof for every row of the sweep
        row.update(trace_columns(run_dir, man, row["matmul_roof_flops"], notes))
    if config.get("workload") == "generate":  # what limits the decode step: host or GPU
        row.update(limit_columns(row))
    row["notes"] = "; ".join(notes) or None
    return row


def manifest_columns(m: Mapping[str, Any]) -> dict[str, Any]:
    """Step time, throughput, allocator memory and the device, as the manifest records
    them (measured on unprofiled steps)."""
    mf = manifest_or_empty(m)
    met, st = mf.metrics, mf.metrics.step_time_ms
    dev = mf.device or {}
    return {
        "timed_steps": _f(mf.config.raw.get("steps")),
        "step_time_ms": _st(st, "median"),
        "step_time_p10_ms": _st(st, "p10"),
        "step_time_p90_ms": _st(st, "p90"),
        "samples_per_s": _f(met.samples_per_s),
        "tokens_per_s": _f(met.tokens_per_s),
        "model_flops_per_s": _f(met.number("model_flops_per_s")),
        "peak_allocated_bytes": _f(met.peak_allocated_bytes),
        "peak_reserved_bytes": _f(met.peak_reserved_bytes),
        "avg_allocated_bytes": _f(met.number("avg_allocated_bytes")),
        "profiler_overhead_pct": _f(met.profiler_overhead_pct),
        "device_name": dev.get("name"),
        "device_total_bytes": _f(dev.get("total_memory")),
        "n_params": _f(mf.model.n_params),
    }


def gpu_columns(point: Point, m: Mapping[str, Any]) -> dict[str, Any]:
    """Throughput per GPU (the manifest's tokens/s counts all of them), the parallelism and
    the run's measured all-reduce bus bandwidth (NaN on one GPU)."""
    mf = manifest_or_empty(m)
    interconnect = (mf.ceilings.interconnect if mf.ceilings else None) or {}
    return {
        "tokens_per_s_per_gpu": _f(mf.metrics.tokens_per_s) / point.gpus,
        "parallel": mf.distributed.raw.get("parallel") if mf.distributed else None,
        "interconnect_busbw_Bps": _f(interconnect.get("busbw_Bps")),
    }


def memory_columns(
    point: Point, run_dir: Path, m: Mapping[str, Any], peak_allocated: float, notes: list[str]
) -> dict[str, Any]:
    """The measured peak (the allocator's on CUDA, else the memory timeline's) and its
    split into CATEGORIES at the timeline's peak; a note when there is no timeline."""
    row: dict[str, Any] = {}
    mf = manifest_or_empty(m)
    tl_name = mf.artifacts.get("memory_timeline")
    tl = {}
    if tl_name and (run_dir / tl_name).is_file():
        tl = timeline_at_peak(run_dir / tl_name)
    else:
        notes.append("no memory timeline")
    for c in TIMELINE_CATEGORIES:
        row[f"tl_{c}_bytes"] = tl.get(f"tl_{c}_bytes", math.nan)
    row["timeline_peak_bytes"] = tl.get("timeline_peak_bytes", math.nan)

    if not math.isnan(peak_allocated):
        row["peak_bytes"], row["peak_source"] = peak_allocated, "allocator"
    elif not math.isnan(row["timeline_peak_bytes"]):
        row["peak_bytes"], row["peak_source"] = row["timeline_peak_bytes"], "memory timeline"
    else:
        row["peak_bytes"], row["peak_source"] = math.nan, None
    cats = {c: 0.0 for c in CATEGORIES}
    if tl:
        for tcat, cat in TIMELINE_TO_CATEGORY.items():
            cats[cat] += tl.get(f"tl_{tcat}_bytes", 0.0)
        # allocator memory the timeline does not see (library workspaces, block rounding)
        cats["other"] += max(0.0, row["peak_bytes"] - row["timeline_peak_bytes"])
        for c in CATEGORIES:
            row[f"mem_{c}_bytes"] = cats[c]
    else:
        for c in CATEGORIES:
            row[f"mem_{c}_bytes"] = math.nan
    row["mem_per_token_bytes"] = row["peak_bytes"] / point.tokens
    static = 3 * 4 * _f(mf.model.n_params)  # fp32 weights + AdamW moments
    row["dynamic_peak_bytes"] = row["peak_bytes"] - static
    return row


def roof_columns(point: Point, ceil: Mapping[str, Any], model_flops: float) -> dict[str, Any]:
    """The measured matmul roof of the run's precision and bandwidth roof, and the
    utilisation of the matmul roof by the model's FLOP rate."""
    roofs = ceil.get("matmul_flops") or {}
    roof = _f(roofs.get(point.dtype) if point.dtype != "fp32" else roofs.get("fp32"))
    return {
        "matmul_roof_flops": roof,
        "bandwidth_roof_Bps": _f(ceil.get("memory_bandwidth_Bps")),
        "model_flops_util_pct": 100.0 * model_flops / roof,
    }


def model_columns(point: Point, m: Mapping[str, Any], peak: float) -> dict[str, Any]:
    """The analytic memory model next to the measured peak (none without the manifest's
    model config)."""
    mf = manifest_or_empty(m)
    config = mf.config.raw
    model_cfg = config.get("model")
    if not model_cfg or config.get("workload", "train") != "train":
        return {}  # the model is of a training step
    est = estimate(
        model_cfg,
        batch=point.batch,
        seq=point.seq,
        dtype=point.dtype,
        attention=point.attention,
        device=(mf.device or {}).get("type") or "cuda",
        options=StepOptions.from_config(config),  # the levers the run used
    )
    row: dict[str, Any] = {"model_peak_bytes": float(est.peak), "model_peak_phase": est.peak_phase}
    for c in CATEGORIES:
        row[f"model_{c}_bytes"] = float(est.categories[c])
    row["model_activations_per_layer_bytes"] = float(est.activations_per_layer)
    row["model_attention_matrix_per_layer_bytes"] = float(est.attention_matrix_per_layer)
    row["model_kv_cache_bytes"] = float(est.kv_cache_inference)
    row["model_error_pct"] = 100.0 * (est.peak - peak) / peak
    return row


def trace_columns(
    run_dir: Path, manifest: Mapping[str, Any] | None, matmul_roof: float, notes: list[str]
) -> dict[str, Any]:
    """GPU idle share and kernels per step from the parsed trace, and classify's columns."""
    from tracekit.analyse import Options, analyse

    # the row's kernels are GPU activities (a CPU row has none), as before the pipeline
    a = analyse(run_dir, Options(manifest=manifest, cpu=False), summarise=False)
    trace, result = a.trace, a.classification
    row: dict[str, Any] = {"gpu_idle_pct": gpu_idle_pct(trace.steps)}
    k = trace.kernels
    row["kernels_per_step"] = float(len(k)) / max(1, len(trace.steps)) if len(k) else math.nan
    row.update(classify_frames_to_columns(result.classes, getattr(result, "steps", None)))
    row["kernel_flops_util_pct"] = 100.0 * row["achieved_flops"] / matmul_roof
    if manifest_or_empty(manifest).config.workload == "generate":
        row.update(decode_trace_columns(trace, result, manifest))
    return row


# A generate row's columns from its trace (tracekit.summary.generate over the recorded
# decode steps): column -> the per-step table's mean of a column ("mean") or a figure of
# the decode GEMMs together ("gemm").
DECODE_TRACE: dict[str, tuple[str, str]] = {
    "decode_gpu_busy_ms": ("mean", "gpu_busy_ms"),
    "decode_gemm_ms": ("gemm", "ms_per_step"),
    "decode_attention_ms": ("mean", "attention_ms"),
    "decode_gemm_flops_per_step": ("gemm", "flops_per_step"),
    "decode_gemm_bytes_per_step": ("gemm", "bytes_per_step"),
    "decode_gemm_intensity": ("gemm", "intensity"),
    "decode_gemm_flops_util_pct": ("gemm", "compute_utilisation_pct"),
    "decode_gemm_bw_util_pct": ("gemm", "bandwidth_utilisation_pct"),
    "decode_kernel_bytes_per_step": ("mean", "kernel_bytes"),
    "decode_kernel_bw_Bps": ("mean", "kernel_bw"),
    "decode_kernel_bw_util_pct": ("mean", "kernel_bw_pct"),
    "decode_measured_bw_Bps": ("mean", "measured_bw"),
    "decode_measured_bw_util_pct": ("mean", "measured_bw_pct"),
}
DECODE_TRACE_COLUMNS = (*DECODE_TRACE, "prefill_gpu_ms")


def decode_trace_columns(trace: Any, result: Any, manifest: Any) -> dict[str, float]:
    """:data:`DECODE_TRACE_COLUMNS` of a generate run (means over its recorded decode
    steps; the bandwidths over the unprofiled time per token), from the parsed trace and
    its classification, with the roofs classify used (the sweep's measured ceilings)."""
    import tracekit.summary.classes as C
    import tracekit.summary.steps as S
    import tracekit.summary.stepsummary as SS
    from tracekit.summary.generate import analyse
    from tracekit.summary.roofs import roofs_from

    out = {c: math.nan for c in DECODE_TRACE_COLUMNS}
    steps = S.analysed_steps(trace.steps)
    table = S.step_table(trace.steps)
    roofs = roofs_from(result.device)
    ops = result.ops[result.ops["step"].isin(steps)] if "step" in result.ops else result.ops
    k = C.in_steps(result.kernels[[c for c in (*SS.COLUMNS, "kind") if c in result.kernels]], steps)
    ss = SS.step_summary(k, table, roofs, measured_step_ms=None, traffic=None)
    g = analyse(manifest, steps=steps, step_table=table, kernels=result.kernels,
                trace_ops=trace.ops, operators=C.operator_table(ops, max(1, len(steps))),
                kernel_bytes=ss.per_step, roofs=roofs)  # fmt: skip
    if g is None or not g.has_gpu:
        return out
    for col, (where, key) in DECODE_TRACE.items():
        out[col] = _f(g.mean(key) if where == "mean" else g.gemm.get(key))
    out["prefill_gpu_ms"] = g.prefill.gpu_busy_ms
    return out


def _own_ceilings(mf: RunManifest) -> Mapping[str, Any] | None:
    """The run's own measured ceilings (None for a run collected with --no-ceilings)."""
    return mf.ceilings.raw if mf.ceilings is not None and mf.ceilings.raw else None


def _st(s: StepTime | None, key: str) -> float:
    """One figure of a step-time distribution (NaN when not recorded)."""
    return _f(getattr(s, key)) if s is not None else math.nan


def _f(v: Any) -> float:
    try:
        return math.nan if v is None else float(v)
    except (TypeError, ValueError):
        return math.nan
