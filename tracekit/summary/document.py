"""``summary.json``: the report's figures as one JSON document (docs/report.md documents
every key; format ``tracekit.summary``, version :data:`SUMMARY_VERSION`)."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pandas as pd

import tracekit.summary.cpu as CPU
import tracekit.summary.critical_path as CP
from tracekit.summary.classes import OPERATOR_COLUMNS
from tracekit.summary.facts import Summary
from tracekit.summary.gendoc import generate_json

SUMMARY_FORMAT = "tracekit.summary"
SUMMARY_VERSION = 2  # 2: step_summary (with the verdict), memory by category and model
TOP_OPERATORS = 15
TOP_KERNELS = 10

# the operator table's columns in summary.json (and the HTML table)
OPERATOR_KEYS = tuple(c for c in OPERATOR_COLUMNS if c not in ("input_types", "gpu_time_ns"))
KERNEL_KEYS = ("name", "class", "kind", "calls", "ms_per_step", "mean_us", "time_share_pct")
STEP_TIME_SOURCE = {  # by whether the timeline comes from the light pass
    False: "measured: ProfilerStep spans and GPU activity in the trace (with the profiler on)",
    True: "measured: the light timeline pass's steps (CUDA activity only; between its step "
    "markers) and their GPU activity",
}
ALLOCATOR_KEYS = ("op_name", "allocations", "bytes_per_step", "largest_bytes", "pct")


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


def _records(df: pd.DataFrame, keys: tuple[str, ...]) -> list[dict[str, Any]]:
    return [{k: r[k] for k in keys} for r in df.to_dict("records")]


def summary_json(
    sm: Summary, *, top_operators: int = TOP_OPERATORS, top_kernels: int = TOP_KERNELS
) -> dict[str, Any]:
    """The ``summary.json`` document."""
    ops = _records(sm.operators.head(top_operators), OPERATOR_KEYS)
    for r in ops:
        r["input_dims"] = r["input_dims"] or None
    doc: dict[str, Any] = {
        **_run(sm),
        "step_summary": step_summary_json(sm),
        **_time(sm),
        "timeline": sm.timeline_facts.to_dict() if sm.timeline_facts is not None else None,
        "memory": memory_json(sm),
        "top_operators": ops,
        "roof_note": sm.roof_note,
        "top_kernels": _records(sm.kernels.head(top_kernels), KERNEL_KEYS),
        "top_allocators": _records(sm.allocators, ALLOCATOR_KEYS),
        "sources": _sources(sm),
        "warnings": sm.warnings,
        "notes": sm.notes,
        "critical_path": _critical_path(sm),
        "generate": generate_json(sm.generate, sm.kv, sm.roofs.bandwidth_source),
        "cpu": sm.cpu.to_dict(sm.breakdown) if sm.cpu is not None else None,
    }
    if sm.cpu is not None:
        doc["sources"].update(CPU.SOURCES)
    return _clean(doc)  # type: ignore[no-any-return]


def _critical_path(sm: Summary) -> dict[str, Any] | None:
    """The ``critical_path`` block; its ``unprofiled`` part holds the what-ifs on the
    unprofiled step where the run has one (``tracekit.summary.critical_path.anchor``)."""
    block = CP.summary_block(sm.critical_path)
    if block is not None and sm.cp_anchor is not None:
        block["unprofiled"].update(json.loads(json.dumps(sm.cp_anchor.block(), default=float)))
    return block


def _run(sm: Summary) -> dict[str, Any]:
    """What was run: format, device, versions, config, profiler options, step times."""
    h = sm.header
    roofs = sm.roofs
    return {
        "format": SUMMARY_FORMAT,
        "version": SUMMARY_VERSION,
        "title": h.title,
        "trace": h.source,
        "device_kind": sm.device_kind,
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
    }


def _time(sm: Summary) -> dict[str, Any]:
    """Where the GPU time goes: per class, by bound, idle and launch figures."""
    cl = sm.classes
    has_flops = bool(cl["flops"].sum() > 0)
    lc = sm.launch
    n = max(1, len(sm.header.steps))
    return {
        "gpu_time_ms_per_step": float(cl["ms_per_step"].sum()),
        "time_share_pct": dict(zip(cl["class"], cl["time_share_pct"], strict=True)),
        "busy_share_pct": (
            dict(zip(cl["class"], cl["busy_share_pct"], strict=True))
            if "busy_share_pct" in cl
            else None
        ),
        "ms_per_step": dict(zip(cl["class"], cl["ms_per_step"], strict=True)),
        "flop_share_pct": (
            dict(zip(cl["class"], cl["flop_share_pct"], strict=True)) if has_flops else None
        ),
        "flops_per_step": (
            dict(zip(cl["class"], cl["flops"] / n, strict=True)) if has_flops else None
        ),
        "bound_time_share_pct": sm.bound,
        "gpu_idle_pct": lc.gpu_idle_pct,
        "launch_bound": lc.launch_bound,
        "gpu_idle_unprofiled_pct": lc.gpu_idle_unprofiled_pct,
        "launch": {
            "host_busy_pct": lc.host_busy_pct,
            "kernels_per_step": lc.kernels_per_step,
            "median_kernel_us": lc.median_kernel_us,
            "median_launch_us": lc.median_launch_us,
            "shorter_than_launch_pct": lc.shorter_than_launch_pct,
        },
    }


def step_summary_json(sm: Summary) -> dict[str, Any]:
    """The ``step_summary`` block: the verdict, bandwidth, FLOP/s, intensity, traffic."""
    ss = sm.step_summary
    o = ss.overall
    roofs = sm.roofs
    mean = ss.mean
    peak = roofs.peaks.get(ss.pipe) if ss.pipe else None
    intensity = o["arithmetic_intensity"]
    secs = ss.step_time_ms / 1e3 if ss.step_time_ms else None
    verdict = sm.verdict.to_dict() if sm.verdict is not None else {"verdict": None}
    return {
        **verdict,
        "step_time_ms": ss.step_time_ms,
        "basis": ss.basis,
        "bytes_per_step": mean.bytes,
        "bytes_source": "measured" if ss.measured else "modelled",
        "bytes_modelled_per_step": mean.bytes_modelled,
        "bytes_measured_per_step": mean.bytes_measured,
        "measured_time_pct": mean.measured_time_pct,
        "bandwidth_used": o["bandwidth_used"],
        "bandwidth_modelled": mean.bytes_modelled / secs if secs else None,
        "bandwidth_measured": mean.bytes_measured / secs if secs else None,
        "bandwidth_roof": roofs.bandwidth,
        "bandwidth_roof_source": roofs.bandwidth_source or None,
        "bandwidth_utilisation_pct": o["bandwidth_utilisation_pct"],
        "flops_per_step": mean.flops,
        "flops_per_s": o["flops_per_s"],
        "compute_pipe": ss.pipe,
        "compute_roof": peak,
        "compute_roof_source": roofs.peak_sources.get(ss.pipe) if ss.pipe else None,
        "compute_utilisation_pct": o["compute_utilisation_pct"],
        "arithmetic_intensity": intensity,
        "ridge_point": ss.ridge,
        "roofline_side": (
            None
            if intensity is None or ss.ridge is None
            else ("memory" if intensity < ss.ridge else "compute")
        ),
        "analytic_traffic": _traffic(sm),
        "per_step": ss.per_step.to_dict("records"),
    }


def _traffic(sm: Summary) -> dict[str, Any] | None:
    t = sm.step_summary.traffic
    if t is None:
        return None
    nbytes = sm.step_summary.mean.bytes
    return {
        **t.terms(),
        "total": t.total,
        "formula": t.formula,
        "basis": t.basis,
        "kernel_bytes_ratio": nbytes / t.total if t.total and math.isfinite(nbytes) else None,
    }


def _traffic_source(sm: Summary) -> str | None:
    if sm.step_summary.traffic is None:
        return None
    if sm.memory_facts.model is not None:
        return "modelled: tracekit.classify.models.traffic from the run's model config"
    return (
        "estimated: parameter, gradient and optimizer-state bytes read from the run's "
        "optimizer (manifest), activations = the measured dynamic memory"
    )


def memory_json(sm: Summary) -> dict[str, Any]:
    """The ``memory`` block: allocator totals, dynamic memory, categories, the model."""
    mem = sm.memory
    mf = sm.memory_facts
    model = mf.model
    peak = mem.peak_allocated_bytes if mem else None
    return {
        "device": mem.device if mem else None,
        "peak_allocated_bytes": peak,
        "peak_reserved_bytes": mem.peak_reserved_bytes if mem else None,
        "avg_allocated_bytes": mem.avg_allocated_bytes if mem else None,
        "avg_reserved_bytes": mem.avg_reserved_bytes if mem else None,
        "floor_allocated_bytes": mf.floor_bytes,
        "dynamic_peak_bytes": mf.dynamic_peak_bytes,
        "activation_bytes_per_token": mf.activation_bytes_per_token,
        "events": mem.events if mem else 0,
        "categories": sm.categories is not None,
        "peak_by_category": mf.category_peak,
        "peak_by_model_category": mf.category_peak_model,
        "model": (
            {
                "peak_bytes": model.peak,
                "peak_phase": model.peak_phase,
                "phases": model.phases,
                "categories": model.categories,
                "error_pct": 100.0 * (model.peak - peak) / peak if peak else None,
                "note": mf.model_note or None,
            }
            if model is not None
            else {"peak_bytes": None, "note": mf.model_note}
        ),
    }


def _sources(sm: Summary) -> dict[str, Any]:
    h = sm.header
    roofs = sm.roofs
    ss = sm.step_summary
    pct = ss.mean.measured_time_pct
    light = sm.timeline_facts is not None and sm.timeline_facts.source == "light"
    return {
        "time_share_pct": "measured: kernel, memcpy and memset durations in the trace",
        "busy_share_pct": "measured: the union of each class's activities over the union "
        "of all GPU activity (a class overlapping others counts in each)"
        if "busy_share_pct" in sm.classes
        else None,
        "step_time_ms": STEP_TIME_SOURCE[light],
        "gpu_idle_pct": "measured: union of GPU activity per step in the "
        + ("light timeline pass" if light else "trace"),
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
        "step_summary_bytes": (
            f"measured: Nsight Compute DRAM read + write for {pct:.1f} % of GPU time, "
            "modelled (minimal traffic from shapes) for the rest"
            if ss.measured and pct is not None
            else "modelled: minimal DRAM traffic of each operator from its shapes"
        ),
        "step_summary_time": (
            "measured without the profiler (run manifest)"
            if ss.basis == "unprofiled"
            else "measured with the profiler on (trace): rates are too low"
        ),
        "analytic_traffic": (
            "modelled: tracekit.classify.models.decode (a decode step) from the run's model config"
            if sm.generate is not None and ss.traffic is not None
            else _traffic_source(sm)
        ),
    }
