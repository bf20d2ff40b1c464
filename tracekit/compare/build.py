"""Assemble the comparison of two runs (:func:`compare`) and its ``compare.json``.

Both runs go through the report's own analysis (:func:`tracekit.summary.summarize`); this
module only puts the two summaries side by side and diffs their classified operators and
kernels (:mod:`tracekit.compare.diff`). docs/compare.md documents every key.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

import tracekit.compare.diff as D
import tracekit.ranks.scaling as SC
from tracekit.analyse import Analysis, analyse
from tracekit.manifest import manifest_or_empty
from tracekit.summary import Summary
from tracekit.summary.build import _clean
from tracekit.summary.classes import in_steps

COMPARE_FORMAT = "tracekit.compare"
COMPARE_VERSION = 1
TOP = 10

# metric key -> (unit, description); the order of the headline table
METRICS: dict[str, tuple[str, str]] = {
    "step_time_ms": ("ms", "step time in the trace (profiled)"),
    "measured_step_time_ms": ("ms", "step time measured without the profiler (manifest)"),
    "tokens_per_s": ("tokens/s", "throughput from the traced step time"),
    "measured_tokens_per_s": ("tokens/s", "throughput measured without the profiler"),
    "gpu_busy_ms": ("ms", "GPU busy per step (union of GPU activity)"),
    "gpu_time_ms": ("ms", "summed GPU activity time per step (the class table's total)"),
    "gpu_idle_pct": ("%", "GPU idle share of the traced step"),
    "gpu_idle_unprofiled_pct": ("%", "GPU idle share of the unprofiled step"),
    "kernels_per_step": ("", "kernel launches per step"),
    "flops_per_step": ("FLOP", "known FLOPs per step"),
    "memory_bound_pct": ("%", "share of GPU time in memory-bound kernels"),
    "compute_bound_pct": ("%", "share of GPU time in compute-bound kernels"),
    "peak_allocated_bytes": ("B", "peak allocated device memory"),
    "peak_reserved_bytes": ("B", "peak reserved device memory"),
    "avg_allocated_bytes": ("B", "time-weighted average allocated device memory"),
}


NO_GPU_NOTE = (
    "runs without GPU activity or CPU operators: compared by step time, throughput and "
    "memory only, not per class, operator or kernel"
)
CPU_NOTE = (
    "CPU runs: compared on their CPU view (each work operator's self time stands in for a "
    "kernel, as `tracekit report` reads them); GPU idle, kernels and reserved memory do not "
    "apply"
)


@dataclass
class Comparison:
    a: Summary
    b: Summary
    label_a: str
    label_b: str
    metrics: pd.DataFrame  # metric, unit, a, b, delta, ratio
    classes: pd.DataFrame  # diff.class_diff
    operators: pd.DataFrame  # diff.operator_diff
    regressions: pd.DataFrame
    improvements: pd.DataFrame
    kernels: pd.DataFrame  # diff.kernel_diff
    fused: pd.DataFrame  # diff.fused_groups + "side" (the run with the Triton kernels)
    fused_totals: dict[str, dict[str, float]]
    config_diff: list[dict[str, Any]]
    same_device: bool
    notes: list[str] = field(default_factory=list)
    doc: dict[str, Any] = field(default_factory=dict)
    scaling: dict[str, Any] | None = None  # runs on different GPU counts (tracekit.ranks.scaling)
    per_class: bool = True  # False: neither run has activity to compare per class
    cpu: bool = False  # both are CPU runs, compared on their CPU view


def _n(v: Any) -> float | None:
    if v is None:
        return None
    f = float(v)
    return f if math.isfinite(f) else None


def metric_values(sm: Summary) -> dict[str, float | None]:
    """The headline figures of one run, per analysed step (keys of :data:`METRICS`)."""
    h, lc, m = sm.header, sm.launch, sm.memory
    n = max(1, len(sm.steps))
    st = sm.step_table
    return {
        "step_time_ms": _n(h.step_time_ms),
        "measured_step_time_ms": _n(h.measured_step_time_ms),
        "tokens_per_s": _n(h.tokens_per_s),
        "measured_tokens_per_s": _n(h.measured_tokens_per_s),
        "gpu_busy_ms": _n(st["gpu_busy_ms"].mean()) if len(st) else None,
        "gpu_time_ms": _n(sm.classes["ms_per_step"].sum()),
        "gpu_idle_pct": _n(lc.gpu_idle_pct),
        "gpu_idle_unprofiled_pct": _n(lc.gpu_idle_unprofiled_pct),
        "kernels_per_step": _n(lc.kernels_per_step),
        "flops_per_step": _n(sm.classes["flops"].sum() / n),
        "memory_bound_pct": _n(sm.bound.get("memory-bound")),
        "compute_bound_pct": _n(sm.bound.get("compute-bound")),
        "peak_allocated_bytes": _n(m.peak_allocated_bytes) if m else None,
        "peak_reserved_bytes": _n(m.peak_reserved_bytes) if m else None,
        "avg_allocated_bytes": _n(m.avg_allocated_bytes) if m else None,
    }


def metric_table(a: dict[str, float | None], b: dict[str, float | None]) -> pd.DataFrame:
    """``metric``, ``unit``, ``a``, ``b``, ``delta`` (B - A), ``ratio`` (B / A)."""
    rows = []
    for k, (unit, _) in METRICS.items():
        va, vb = a.get(k), b.get(k)
        both = va is not None and vb is not None
        rows.append(
            {
                "metric": k,
                "unit": unit,
                "a": va,
                "b": vb,
                "delta": vb - va if both else None,  # type: ignore[operator]
                "ratio": vb / va if both and va else None,  # type: ignore[operator]
            }
        )
    frame: pd.DataFrame = pd.DataFrame(rows)
    return frame


def _labels(sa: Summary, sb: Summary) -> tuple[str, str]:
    a, b = sa.header.title, sb.header.title
    return (a, b) if a != b else (f"A:{a}", f"B:{b}")


def analyse_run(path: Path, cache: Path) -> Analysis:
    """One side of a comparison, through the pipeline (:func:`tracekit.analyse.analyse`):
    a trace or run folder, or a multi-rank folder's lowest rank (with the folder's
    manifest) and its multi-rank analysis (per-rank results in ``cache``)."""
    from tracekit.jobs import job_of

    job = job_of(path, None, None, None)
    if job is None:
        return analyse(path)
    a = analyse(job.load())
    job.analyse(cache)
    a.ranks = job.summary
    return a


def compare(a: Analysis, b: Analysis, *, top: int = TOP) -> Comparison:
    """Compare run B against run A (each analysed by :func:`tracekit.analyse.analyse`).
    A run on several GPUs carries its multi-rank analysis (``Analysis.ranks``,
    :class:`tracekit.ranks.reduce.RanksSummary`); with runs on different GPU counts the
    comparison has a scaling block."""
    assert a.summary is not None and b.summary is not None
    sa, sb = a.summary, b.summary
    trace_a, cls_a, ranks_a = a.trace, a.classification, a.ranks
    trace_b, cls_b, ranks_b = b.trace, b.classification, b.ranks
    n_a, n_b = max(1, len(sa.steps)), max(1, len(sb.steps))
    ka, kb = in_steps(cls_a.kernels, sa.steps), in_steps(cls_b.kernels, sb.steps)
    oa = cls_a.ops[cls_a.ops["step"].isin(sa.steps)]
    ob = cls_b.ops[cls_b.ops["step"].isin(sb.steps)]
    ops = D.operator_diff(oa, ob, n_a, n_b)
    worse, better = D.top_changes(ops[ops["status"] == "both"], top)
    fused = []
    totals: dict[str, dict[str, float]] = {}
    for side, (kf, ko, nf, no) in {"A": (ka, kb, n_a, n_b), "B": (kb, ka, n_b, n_a)}.items():
        g = D.fused_groups(kf, ko, nf, no)
        if len(g):
            fused.append(g.assign(side=side))
            totals[side] = D.fused_total(kf, ko, nf, no)
    la, lb = _labels(sa, sb)
    dev_a = sa.header.device or sa.roofs.device
    dev_b = sb.header.device or sb.roofs.device
    same = dev_a == dev_b
    notes: list[str] = []
    if not same:
        notes.append(
            f"different devices ({dev_a or 'unknown'} vs {dev_b or 'unknown'}): kernel names "
            "and times are device-specific; compare the classes and operators"
        )
    ta, tb = sa.header.torch_version, sb.header.torch_version
    if ta and tb and ta != tb:
        notes.append(f"different PyTorch versions ({ta} vs {tb})")
    man_a = trace_a.manifest if isinstance(trace_a.manifest, dict) else None
    man_b = trace_b.manifest if isinstance(trace_b.manifest, dict) else None
    cfg = D.config_diff(
        manifest_or_empty(man_a).config.raw or None, manifest_or_empty(man_b).config.raw or None
    )
    for lab, man in ((la, man_a), (lb, man_b)):
        if man is None:
            notes.append(f"{lab}: no run manifest, so its configuration is unknown")
    if n_a != n_b:
        notes.append(f"{n_a} vs {n_b} analysed steps: every figure is per step")
    per_class = bool(len(cls_a.kernels) or len(cls_b.kernels))
    cpu = sa.device_kind == "cpu" and sb.device_kind == "cpu"
    if not per_class:
        notes.insert(0, NO_GPU_NOTE)
    elif cpu:
        notes.insert(0, CPU_NOTE)
    sc = SC.scaling(SC.side_of(la, sa, ranks_a, man_a), SC.side_of(lb, sb, ranks_b, man_b))
    if sc is not None:
        notes.insert(0, SC.sentence(sc))
    cmp = Comparison(
        a=sa,
        b=sb,
        label_a=la,
        label_b=lb,
        metrics=metric_table(metric_values(sa), metric_values(sb)),
        classes=D.class_diff(sa.classes, sb.classes, n_a, n_b),
        operators=ops,
        regressions=worse,
        improvements=better,
        kernels=D.kernel_diff(sa.kernels, sb.kernels, n_a, n_b),
        fused=pd.concat(fused, ignore_index=True) if fused else pd.DataFrame(),
        fused_totals=totals,
        config_diff=cfg,
        same_device=same,
        notes=notes,
        scaling=sc,
        per_class=per_class,
        cpu=cpu,
    )
    cmp.doc = compare_json(cmp, top=top)
    return cmp


def _records(df: pd.DataFrame, cols: list[str]) -> list[dict[str, Any]]:
    if df.empty:
        return []
    out: list[dict[str, Any]] = df[cols].to_dict("records")
    return out


def _side(sm: Summary) -> dict[str, Any]:
    h = sm.header
    return {
        "title": h.title,
        "trace": h.source,
        "device": h.device or sm.roofs.device,
        "torch": h.torch_version,
        "config": h.config,
        "steps": h.steps,
        "peak_flops": sm.roofs.peaks,
        "bandwidth_Bps": sm.roofs.bandwidth,
    }


OP_COLS = ["name", "input_dims", "module", "class", "status", "match", "a_calls", "b_calls",
           "delta_calls", "a_ms", "b_ms", "delta_ms"]  # fmt: skip
KERNEL_COLS = ["name", "class", "status", "a_calls", "b_calls", "a_ms", "b_ms", "delta_ms"]


def compare_json(c: Comparison, *, top: int = TOP) -> dict[str, Any]:
    """The ``compare.json`` document (docs/compare.md)."""
    ops, kern = c.operators, c.kernels
    ops_count = ops["status"].value_counts()
    k_only_a = kern[kern["status"] == "only A"]
    k_only_b = kern[kern["status"] == "only B"]
    doc: dict[str, Any] = {
        "format": COMPARE_FORMAT,
        "version": COMPARE_VERSION,
        "a": _side(c.a),
        "b": _side(c.b),
        "same_device": c.same_device,
        "config_diff": c.config_diff,
        "notes": c.notes,
        "metrics": {
            r["metric"]: {k: r[k] for k in ("unit", "a", "b", "delta", "ratio")}
            for r in c.metrics.to_dict("records")
        },
        "classes": _records(c.classes, list(c.classes.columns)),
        "bound_time_share_pct": {"a": c.a.bound, "b": c.b.bound},
        "operators": {
            "matched": int(ops_count.get("both", 0)),
            "only_a": int(ops_count.get("only A", 0)),
            "only_b": int(ops_count.get("only B", 0)),
            "top_regressions": _records(c.regressions, OP_COLS),
            "top_improvements": _records(c.improvements, OP_COLS),
        },
        "kernels": {
            "distinct_a": int((kern["status"] != "only B").sum()),
            "distinct_b": int((kern["status"] != "only A").sum()),
            "only_a": len(k_only_a),
            "only_b": len(k_only_b),
            "only_a_ms_per_step": float(k_only_a["a_ms"].sum()),
            "only_b_ms_per_step": float(k_only_b["b_ms"].sum()),
            "top_only_a": _records(k_only_a.head(top), KERNEL_COLS),
            "top_only_b": _records(k_only_b.head(top), KERNEL_COLS),
            "top_changes": _records(kern.head(top), KERNEL_COLS),
        },
        "fused": {
            "groups": _records(c.fused, list(c.fused.columns)),
            "totals": c.fused_totals,
        },
    }
    if c.scaling is not None:
        doc["scaling"] = c.scaling
    clean: dict[str, Any] = _clean(doc)
    return clean
