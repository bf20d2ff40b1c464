"""Generate runs (``collect --workload generate``): prefill against decode, and each decode
step's DRAM bandwidth against the roof, with the analytic decode model beside it.

Definitions (docs/generate.md repeats them):

* A **decode step** ``d`` is ``ProfilerStep#d``; it attends to ``c = prompt + d + 1``
  cached tokens. The **prefill** is the ``tracekit.prefill`` range: the GPU activities
  whose launching operator starts inside it (rows of step −1).
* **Time per output token** of step ``d`` is the manifest's ``tpot_ms_by_step[d]`` (the
  median of that step index over the unprofiled generations, CUDA events); without it the
  profiled step time of the trace (``basis`` says which).
* **Bytes** of a decode step, three ways: the decode model's (weights + KV cache read +
  KV write, :mod:`tracekit.classify.models.decode`), the kernels' modelled bytes (classify:
  every input read once, every output written once) and the measured DRAM bytes (Nsight
  Compute, ``--counters``; modelled bytes for the kernels without counters). Each over the
  step's time per output token is an **achieved bandwidth**; its share of the bandwidth
  roof (the run's measured copy bandwidth first) is the memory wall's number. Over the
  step's GPU busy time instead (the trace) it is the bandwidth **while the GPU works**:
  the decode model's bytes (``model_busy_bw``) and the kernels' (``busy_bw_pct``). When the
  GPU idles much of the step (``gpu_busy_pct`` = busy / time per token low: a
  launch/host-bound step) the first measures the host, the second the kernels.
* The **decode GEMMs** are the ``gemm`` kernels of the decode steps: matrix-vector-like
  products with M = batch rows; their intensity is FLOPs / bytes over all of them, their
  bound that intensity against the ridge point of their pipe.
* **KV cache growth**: the cache is preallocated for the whole context, so the allocator
  shows it at once; the part that holds tokens grows by ``2·L·B·C·b`` bytes per decode
  step (:mod:`tracekit.summary.kvcache`), the memory a paged cache would hold.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

import tracekit.summary.intervals as I
from tracekit.classify.models.decode import DecodeModel
from tracekit.classify.models.shape import DTYPE_BYTES
from tracekit.classify.models.traffic import DecodeTraffic
from tracekit.manifest import manifest_or_empty
from tracekit.summary.roofs import Roofs

PREFILL_RANGE = "tracekit.prefill"  # collectors/generate.py: PREFILL_RANGE
DTYPE_PIPES = {"bf16": "tensor_bf16", "fp16": "tensor_fp16", "fp32": "simt_fp32"}
GEMM = "gemm"
ATTENTION = "attention"

PER_STEP_COLUMNS = [
    "step",
    "context",
    "tpot_ms",
    "trace_step_ms",
    "gpu_busy_ms",
    "model_bytes",
    "model_flops",
    "kernel_bytes",
    "measured_bytes",
    "model_bw",
    "kernel_bw",
    "measured_bw",
    "model_bw_pct",
    "kernel_bw_pct",
    "measured_bw_pct",
    "busy_bw_pct",
    "gpu_busy_pct",
    "model_busy_bw",
    "model_busy_bw_pct",
    "model_tpot_ms",
    "gemm_ms",
    "attention_ms",
    "other_ms",
    "gemm_flops",
    "gemm_bytes",
    "gemm_intensity",
    "kv_filled_bytes",
]
GEMM_COLUMNS = [
    "name",
    "input_dims",
    "m",
    "n",
    "k",
    "calls_per_step",
    "ms_per_step",
    "mean_us",
    "flops",
    "bytes",
    "intensity",
    "pipe",
    "ridge",
    "bound",
    "attained_bw",
    "bw_pct",
    "attained_flops",
    "compute_pct",
]


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    f = float(v)
    return f if math.isfinite(f) else None


def _div(a: float | None, b: float | None) -> float:
    if a is None or b is None or not (math.isfinite(a) and math.isfinite(b)) or b <= 0:
        return math.nan
    return a / b


def compute_pipe(dtype: str, tf32: bool = False) -> str:
    """The pipe the run's weight GEMMs run on: bf16/fp16 tensor cores, fp32 SIMT (TF32
    tensor cores with ``--tf32``)."""
    return "tensor_tf32" if dtype == "fp32" and tf32 else DTYPE_PIPES.get(dtype, "simt_fp32")


# --------------------------------------------------------------------------- prefill


@dataclass(frozen=True)
class PrefillFacts:
    """The prefill: its range in the trace and the analytic model beside it."""

    span_ms: float | None  # the range's CPU span (profiled)
    gpu_busy_ms: float  # union of its GPU activities (trace)
    gpu_ms: float  # their summed durations
    kernels: int
    gemm_ms: float
    attention_ms: float
    kernel_flops: float  # classify: NaN without shapes
    kernel_bytes: float
    model_flops: int
    model_bytes: int  # weights once + the KV cache written
    ttft_ms: float | None  # manifest median (unprofiled)

    def to_dict(self, peak: float | None) -> dict[str, Any]:
        secs = self.ttft_ms / 1e3 if self.ttft_ms else None
        fps = _div(self.model_flops, secs)
        return {
            "span_ms": self.span_ms,
            "gpu_busy_ms": self.gpu_busy_ms,
            "gpu_ms": self.gpu_ms,
            "kernels": self.kernels,
            "gemm_ms": self.gemm_ms,
            "attention_ms": self.attention_ms,
            "kernel_flops": self.kernel_flops,
            "kernel_bytes": self.kernel_bytes,
            "model_flops": self.model_flops,
            "model_bytes": self.model_bytes,
            "model_intensity": _div(self.model_flops, self.model_bytes),
            "ttft_ms": self.ttft_ms,
            "model_flops_per_s": fps,
            "compute_utilisation_pct": 100.0 * _div(fps, peak),
        }


def _op_ts(ops: pd.DataFrame, op_id: np.ndarray) -> np.ndarray:
    """The start of each operator ``op_id`` (NaN for -1 or unknown ids)."""
    out = np.full(len(op_id), np.nan)
    if not len(ops) or not len(op_id):
        return out
    ids = ops["op_id"].to_numpy(dtype=np.int64)
    order = np.argsort(ids, kind="stable")
    pos = np.searchsorted(ids[order], op_id)
    ok = (op_id >= 0) & (pos < len(ids))
    hit = ok & (ids[order][np.minimum(pos, len(ids) - 1)] == op_id)
    ts = ops["ts"].to_numpy(dtype=np.float64)[order]
    out[hit] = ts[np.minimum(pos, len(ids) - 1)][hit]
    return out


def prefill_mask(kernels: pd.DataFrame, ops: pd.DataFrame) -> np.ndarray:
    """GPU activities of the prefill: step −1, launched by an operator that starts inside a
    ``tracekit.prefill`` range (``ops``: the parsed trace's operators and annotations)."""
    mask = np.zeros(len(kernels), dtype=bool)
    pre = ops[(ops["name"] == PREFILL_RANGE).to_numpy()] if len(ops) else ops
    if not len(pre) or not len(kernels) or "op_id" not in kernels:
        return mask
    ts = _op_ts(ops, kernels["op_id"].to_numpy(dtype=np.int64))
    outside = kernels["step"].to_numpy() < 0
    for start, dur in zip(pre["ts"].tolist(), pre["dur"].tolist(), strict=True):
        mask |= outside & (ts >= start) & (ts <= start + dur)
    return mask


def _class_ms(k: pd.DataFrame, cls: str) -> float:
    return float(k["dur"][(k["class"] == cls).to_numpy()].sum()) / 1e6


def _finite_sum(v: pd.Series) -> float:
    a = v.to_numpy(dtype=np.float64)
    ok = np.isfinite(a)
    return float(a[ok].sum()) if ok.any() else math.nan


def prefill_facts(
    dm: DecodeModel, kernels: pd.DataFrame, ops: pd.DataFrame, ttft_ms: float | None
) -> PrefillFacts:
    """The prefill's GPU work (``kernels``: classified, every step) and the model's
    FLOPs and bytes."""
    k = kernels[prefill_mask(kernels, ops)]
    pre = ops[(ops["name"] == PREFILL_RANGE).to_numpy()] if len(ops) else ops
    ts = k["ts"].to_numpy(dtype=np.int64)
    busy = I.merge(ts, ts + k["dur"].to_numpy(dtype=np.int64))
    p = dm.prefill()
    return PrefillFacts(
        span_ms=float(pre["dur"].sum()) / 1e6 if len(pre) else None,
        gpu_busy_ms=I.length(busy) / 1e6,
        gpu_ms=float(k["dur"].sum()) / 1e6,
        kernels=len(k),
        gemm_ms=_class_ms(k, GEMM),
        attention_ms=_class_ms(k, ATTENTION),
        kernel_flops=_finite_sum(k["flops"]) if "flops" in k else math.nan,
        kernel_bytes=_finite_sum(k["bytes"]) if "bytes" in k else math.nan,
        model_flops=p.flops,
        model_bytes=p.bytes,
        ttft_ms=ttft_ms,
    )


# --------------------------------------------------------------------------- decode steps


def _tpot_by_step(manifest: Mapping[str, Any], steps: list[int]) -> list[float] | None:
    """The unprofiled time per output token of each step index (None without it)."""
    by = manifest_or_empty(manifest).metrics.tpot_ms_by_step
    if not isinstance(by, list):
        return None
    vals = [_num(by[d]) if 0 <= d < len(by) else None for d in steps]
    return None if any(v is None or v <= 0 for v in vals) else [float(v or 0) for v in vals]


def _decode_sums(k: pd.DataFrame, steps: list[int]) -> pd.DataFrame:
    """Per step: GEMM, attention and other GPU ms, GEMM FLOPs and bytes."""
    cls = k["class"].astype(str).to_numpy()
    gemm = cls == GEMM
    f = pd.DataFrame(
        {
            "step": k["step"].to_numpy(dtype=np.int64),
            "gemm": np.where(gemm, k["dur"], 0) / 1e6,
            "attn": np.where(cls == ATTENTION, k["dur"], 0) / 1e6,
            "all": k["dur"].to_numpy(dtype=np.float64) / 1e6,
            "gf": np.where(gemm, k["flops"], 0.0) if "flops" in k else np.nan,
            "gb": np.where(gemm, k["bytes"], 0.0) if "bytes" in k else np.nan,
        }
    )
    g: pd.DataFrame = f.groupby("step").sum(min_count=1).reindex(steps)
    g["other"] = g["all"] - g["gemm"] - g["attn"]
    return g


def per_step_table(
    dm: DecodeModel,
    steps: list[int],
    step_table: pd.DataFrame,
    kernel_bytes: pd.DataFrame,
    kernels: pd.DataFrame,
    tpot_ms: list[float] | None,
    roofs: Roofs,
    peak: float | None,
) -> pd.DataFrame:
    """One row per recorded decode step (:data:`PER_STEP_COLUMNS`). ``kernel_bytes``:
    the step summary's per-step table (``bytes_modelled``, ``bytes_measured``);
    ``kernels``: the classified GPU activities of the decode steps."""
    st = step_table.set_index("step").reindex(steps)
    kb = kernel_bytes.set_index("step").reindex(steps)
    sums = _decode_sums(kernels, steps)
    trace_ms = st["step_time_ms"].to_numpy(dtype=np.float64)
    t_ms = np.asarray(tpot_ms, dtype=np.float64) if tpot_ms is not None else trace_ms
    secs = t_ms / 1e3
    bw = roofs.bandwidth or math.nan
    model = [dm.step(d) for d in steps]
    mb = np.array([s.bytes for s in model], dtype=np.float64)
    kbytes = kb["bytes_modelled"].to_numpy(dtype=np.float64)
    meas = kb["bytes_measured"].to_numpy(dtype=np.float64)
    busy = st["gpu_busy_ms"].to_numpy(dtype=np.float64) / 1e3
    on = np.where(busy > 0, busy, np.nan)  # a CPU run's steps have no GPU busy time
    g = dm.shape
    with np.errstate(invalid="ignore", divide="ignore"):
        out = pd.DataFrame(
            {
                "step": np.asarray(steps, dtype=np.int64),
                "context": [s.context for s in model],
                "tpot_ms": t_ms,
                "trace_step_ms": trace_ms,
                "gpu_busy_ms": busy * 1e3,
                "model_bytes": mb,
                "model_flops": np.array([s.flops for s in model], dtype=np.float64),
                "kernel_bytes": kbytes,
                "measured_bytes": meas,
                "model_bw": mb / secs,
                "kernel_bw": kbytes / secs,
                "measured_bw": meas / secs,
                "model_bw_pct": 100.0 * mb / secs / bw,
                "kernel_bw_pct": 100.0 * kbytes / secs / bw,
                "measured_bw_pct": 100.0 * meas / secs / bw,
                "busy_bw_pct": 100.0 * np.where(np.isfinite(meas), meas, kbytes) / on / bw,
                "gpu_busy_pct": 100.0 * busy / secs,
                "model_busy_bw": mb / on,
                "model_busy_bw_pct": 100.0 * mb / on / bw,
                "model_tpot_ms": [
                    1e3 * s.time_s(bw, peak) if peak and roofs.bandwidth else math.nan
                    for s in model
                ],
                "gemm_ms": sums["gemm"].to_numpy(dtype=np.float64),
                "attention_ms": sums["attn"].to_numpy(dtype=np.float64),
                "other_ms": sums["other"].to_numpy(dtype=np.float64),
                "gemm_flops": sums["gf"].to_numpy(dtype=np.float64),
                "gemm_bytes": sums["gb"].to_numpy(dtype=np.float64),
                "kv_filled_bytes": [
                    2 * g.n_layer * dm.batch * s.context * g.n_embd * DTYPE_BYTES[dm.dtype]
                    for s in model
                ],
            }
        )
        out["gemm_intensity"] = out["gemm_flops"] / out["gemm_bytes"]
    frame: pd.DataFrame = out[PER_STEP_COLUMNS].astype(
        {c: "float64" for c in PER_STEP_COLUMNS if c not in ("step", "context")}
    )
    return frame


def gemm_mnk(name: str, dims: str) -> tuple[int, int, int] | None:
    """(M, N, K) of a GEMM operator from its input shapes (None when not readable):
    ``addmm``/``baddbmm`` (bias first), ``mm``, ``bmm``, ``linear``, ``matmul``."""
    try:
        d = json.loads(dims) if dims else []
        op = name.split("::")[-1]
        if op in ("addmm", "baddbmm", "addbmm"):
            d = d[1:]
        if op == "linear":
            a, w = d[0], d[1]
            return int(np.prod(a[:-1])), int(w[0]), int(a[-1])
        a, b = d[0], d[1]
        if len(a) >= 2 and len(b) >= 2:
            rows = int(np.prod(a[:-1])) if len(b) == 2 else int(a[-2])
            return rows, int(b[-1]), int(a[-1])
    except (ValueError, TypeError, IndexError, KeyError):
        return None
    return None


def gemm_table(operators: pd.DataFrame, n_steps: int, roofs: Roofs) -> pd.DataFrame:
    """The decode GEMMs grouped by operator and shapes (``operators``:
    :func:`tracekit.summary.classes.operator_table` of the decode steps), with M, N, K,
    calls and time per step, per-call FLOPs and bytes, intensity, ridge, bound and the
    shares of the roofs they attain."""
    g = operators[(operators["class"] == GEMM).to_numpy()] if len(operators) else operators
    if not len(g):
        empty: pd.DataFrame = pd.DataFrame(columns=GEMM_COLUMNS)
        return empty
    mnk = [gemm_mnk(str(n), str(d)) for n, d in zip(g["name"], g["input_dims"], strict=True)]
    calls = g["calls"].to_numpy(dtype=np.float64)
    peaks = [roofs.peaks.get(str(p)) if p else None for p in g["pipe"]]
    with np.errstate(invalid="ignore", divide="ignore"):
        out = pd.DataFrame(
            {
                "name": g["name"].to_numpy(),
                "input_dims": g["input_dims"].to_numpy(),
                "m": [x[0] if x else None for x in mnk],
                "n": [x[1] if x else None for x in mnk],
                "k": [x[2] if x else None for x in mnk],
                "calls_per_step": calls / max(1, n_steps),
                "ms_per_step": g["ms_per_step"].to_numpy(dtype=np.float64),
                "mean_us": g["gpu_time_ns"].to_numpy(dtype=np.float64) / calls / 1e3,
                "flops": g["flops"].to_numpy(dtype=np.float64) / calls,
                "bytes": g["bytes"].to_numpy(dtype=np.float64) / calls,
                "intensity": g["intensity"].to_numpy(dtype=np.float64),
                "pipe": g["pipe"].to_numpy(),
                "ridge": [roofs.ridge(str(p)) if p else None for p in g["pipe"]],
                "bound": g["bound"].to_numpy(),
                "attained_bw": g["attained_bw"].to_numpy(dtype=np.float64),
                "bw_pct": 100.0
                * g["attained_bw"].to_numpy(dtype=np.float64)
                / (roofs.bandwidth or math.nan),
                "attained_flops": g["attained_flops"].to_numpy(dtype=np.float64),
                "compute_pct": [
                    100.0 * _div(float(a), p)
                    for a, p in zip(g["attained_flops"], peaks, strict=True)
                ],
            }
        )
    out = out.astype({"ridge": "float64", "compute_pct": "float64"})
    frame: pd.DataFrame = out[GEMM_COLUMNS].reset_index(drop=True)
    return frame


def gemm_totals(gemms: pd.DataFrame, roofs: Roofs, pipe: str | None) -> dict[str, Any]:
    """All decode GEMMs together, per step: time, FLOPs, bytes, intensity against the
    ridge point of their pipe, attained bandwidth and FLOP/s against the roofs."""
    if not len(gemms):
        return {"ms_per_step": 0.0, "m": []}
    calls = gemms["calls_per_step"].to_numpy(dtype=np.float64)
    ms = float(gemms["ms_per_step"].sum())
    flops = float(np.nansum(gemms["flops"].to_numpy(dtype=np.float64) * calls))
    nbytes = float(np.nansum(gemms["bytes"].to_numpy(dtype=np.float64) * calls))
    secs = ms / 1e3
    ridge = roofs.ridge(pipe) if pipe else None
    intensity = _div(flops, nbytes)
    peak = roofs.peaks.get(pipe) if pipe else None
    return {
        "ms_per_step": ms,
        "flops_per_step": flops,
        "bytes_per_step": nbytes,
        "intensity": intensity,
        "pipe": pipe,
        "ridge_point": ridge,
        "bound": (
            None
            if ridge is None or not math.isfinite(intensity)
            else ("memory-bound" if intensity < ridge else "compute-bound")
        ),
        "attained_bw": _div(nbytes, secs),
        "bandwidth_utilisation_pct": 100.0 * _div(_div(nbytes, secs), roofs.bandwidth),
        "attained_flops": _div(flops, secs),
        "compute_utilisation_pct": 100.0 * _div(_div(flops, secs), peak),
        "m": sorted({int(m) for m in gemms["m"].dropna()}),
    }


# --------------------------------------------------------------------------- the facts


@dataclass(frozen=True)
class GenerateFacts:
    """What the report shows of a generate run (``Summary.generate``)."""

    model: DecodeModel
    steps: list[int]  # the recorded decode steps
    basis: str  # 'unprofiled' (manifest tpot_ms_by_step) or 'profiled' (trace)
    per_step: pd.DataFrame  # PER_STEP_COLUMNS
    prefill: PrefillFacts
    shares: dict[str, float | None]
    gemms: pd.DataFrame  # GEMM_COLUMNS
    gemm: dict[str, Any]  # gemm_totals
    traffic: DecodeTraffic  # the model's bytes, mean of the recorded steps
    prediction: dict[str, Any] | None  # DecodeModel.predict at the roofs
    pipe: str  # the weight GEMMs' pipe
    bandwidth: float | None
    peak: float | None  # the pipe's FLOP/s
    measured: bool  # some decode kernel has Nsight Compute counters
    memory: dict[str, float | None]  # the manifest's peak split
    notes: list[str] = field(default_factory=list)

    @property
    def has_gpu(self) -> bool:
        """Whether the trace has GPU activity (a CPU run has none)."""
        return self.prefill.kernels > 0 or bool((self.per_step["gpu_busy_ms"] > 0).any())

    def mean(self, column: str) -> float | None:
        """The column's mean over the recorded steps (None when none is finite)."""
        v = self.per_step[column].to_numpy(dtype=np.float64)
        ok = np.isfinite(v)
        return float(v[ok].mean()) if ok.any() else None


def time_shares(
    manifest: Mapping[str, Any], prefill: PrefillFacts, per_step: pd.DataFrame, dm: DecodeModel
) -> dict[str, float | None]:
    """Prefill against decode: of an unprofiled generation (TTFT against the decode steps'
    summed median times) and of the trace's GPU time (prefill against the recorded decode
    steps' mean × new tokens)."""
    met = manifest_or_empty(manifest).metrics
    ttft = met.ttft_ms.median if met.ttft_ms else None
    by = met.tpot_ms_by_step
    decode = (
        float(sum(float(x) for x in by))
        if isinstance(by, list) and by and all(_num(x) is not None for x in by)
        else None
    )
    gen = ttft + decode if ttft is not None and decode is not None else None
    busy = float(per_step["gpu_busy_ms"].mean()) if len(per_step) else None
    dec_gpu = busy * dm.new_tokens if busy is not None else None
    tot_gpu = prefill.gpu_busy_ms + dec_gpu if dec_gpu is not None else None
    return {
        "ttft_ms": ttft,
        "decode_ms": decode,
        "generation_ms": gen,
        "prefill_pct": 100.0 * _div(ttft, gen) if gen else None,
        "decode_pct": 100.0 * _div(decode, gen) if gen else None,
        "prefill_gpu_ms": prefill.gpu_busy_ms,
        "decode_gpu_ms": dec_gpu,
        "prefill_gpu_pct": 100.0 * _div(prefill.gpu_busy_ms, tot_gpu) if tot_gpu else None,
        "decode_gpu_pct": 100.0 * _div(dec_gpu, tot_gpu) if tot_gpu else None,
    }


def _pipe(gemms: pd.DataFrame, dm: DecodeModel, tf32: bool) -> str:
    """The pipe carrying most decode GEMM time, else the run's dtype's."""
    if len(gemms) and gemms["pipe"].notna().any():
        t = gemms.groupby("pipe")["ms_per_step"].sum()
        return str(t.idxmax())
    return compute_pipe(dm.dtype, tf32)


def analyse(
    manifest: Any,
    *,
    steps: list[int],
    step_table: pd.DataFrame,
    kernels: pd.DataFrame,
    trace_ops: pd.DataFrame,
    operators: pd.DataFrame,
    kernel_bytes: pd.DataFrame,
    roofs: Roofs,
) -> GenerateFacts | None:
    """The generate section (None: not a generate run, or no decode step recorded).

    ``kernels``: classified GPU activities of every step (the prefill's are step −1);
    ``trace_ops``: the parsed operators (for the prefill range); ``operators``:
    :func:`classes.operator_table` of the decode steps; ``kernel_bytes``: the step
    summary's per-step table."""
    dm = DecodeModel.model_of(manifest)
    steps = [d for d in steps if dm is not None and 0 <= d < dm.new_tokens]
    if dm is None or not steps:
        return None
    man = manifest_or_empty(manifest)
    tpot = _tpot_by_step(manifest, steps)
    n = len(steps)
    gemms = gemm_table(operators, n, roofs)
    pipe = _pipe(gemms, dm, bool(man.config.tf32))
    peak = roofs.peaks.get(pipe)
    decode = kernels[kernels["step"].isin(steps).to_numpy()]
    per_step = per_step_table(dm, steps, step_table, kernel_bytes, decode, tpot, roofs, peak)
    met = man.metrics
    prefill = prefill_facts(dm, kernels, trace_ops, met.ttft_ms.median if met.ttft_ms else None)
    mem = met.memory or {}
    gemm = gemm_totals(gemms, roofs, pipe)
    gemm_s = float(gemm["ms_per_step"]) / 1e3 if gemm["ms_per_step"] else None
    notes = []
    if tpot is None:
        notes.append(
            "no unprofiled time per output token per step (manifest tpot_ms_by_step): the "
            "decode bandwidths are over the profiled step times, which the profiler lengthens"
        )
    return GenerateFacts(
        model=dm,
        steps=steps,
        basis="unprofiled" if tpot is not None else "profiled",
        per_step=per_step,
        prefill=prefill,
        shares=time_shares(manifest, prefill, per_step, dm),
        gemms=gemms,
        gemm=gemm,
        traffic=DecodeTraffic.mean_of([dm.step(d) for d in steps]),
        prediction=dm.predict(roofs.bandwidth, peak, gemm_s) if roofs.bandwidth and peak else None,
        pipe=pipe,
        bandwidth=roofs.bandwidth,
        peak=peak,
        measured="source" in decode and bool((decode["source"] == "measured").any()),
        memory={
            "peak_allocated_bytes": met.peak_allocated_bytes,
            "weights_bytes": _num(mem.get("weights_bytes")),
            "kv_cache_bytes": _num(mem.get("kv_cache_bytes")),
            "other_bytes": _num(mem.get("other_bytes")),
            "kv_cache_formula_bytes": float(dm.kv_cache_bytes()),
        },
        notes=notes,
    )
