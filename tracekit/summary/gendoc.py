"""A generate run's verdict words and its ``summary.json`` block (``generate``).

The step verdict of :mod:`tracekit.summary.verdict` judges a decode step as it judges a
training step (the split of its time, then the kernels' bounds); for a generate run
:func:`decode_verdict` adds the decode evidence — the decode model's bytes per step over
the time per output token against the bandwidth roof (and over the GPU's busy time), the
decode GEMMs' intensity against the ridge point; for a launch/host-bound step, why its
bandwidth over the step is the host's — and replaces the training levers by the decode
ones (for a launch/host-bound step: the decode step as a CUDA graph).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from tracekit.classify.models.shape import DTYPE_BYTES
from tracekit.summary.generate import GenerateFacts
from tracekit.summary.kvcache import KVGrowth
from tracekit.summary.verdict import Verdict

GENERATE_VERSION = 1


def _si(v: float | None, unit: str, digits: int = 3) -> str:
    if v is None or not math.isfinite(v):
        return "unknown"
    for p, e in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(v) >= e:
            return f"{v / e:.{digits}g} {p}{unit}"
    return f"{v:.{digits}g} {unit}"


def _pct(v: float | None) -> str:
    return "unknown" if v is None or not math.isfinite(v) else f"{v:.1f} %"


def _ok(v: Any) -> bool:
    return isinstance(v, (int, float)) and math.isfinite(float(v))


def bandwidth_words(g: GenerateFacts) -> str:
    """The memory wall's sentence: the model's bytes per step over the time per token,
    against the roof (and the kernels' and the counters' bytes beside it)."""
    t = g.traffic
    ctx = g.per_step["context"]
    span = f"{int(ctx.min())}" if ctx.min() == ctx.max() else f"{int(ctx.min())}–{int(ctx.max())}"
    basis = "unprofiled" if g.basis == "unprofiled" else "profiled"
    text = (
        f"a decode step reads {_si(t.total, 'B')} by the decode model (weights "
        f"{_si(t.weights, 'B')} + KV cache {_si(t.kv_cache_read, 'B')} at {span} cached "
        f"tokens); over the {basis} {g.mean('tpot_ms') or math.nan:.3f} ms per step (mean of the "
        f"{len(g.steps)} recorded steps) that is {_si(g.mean('model_bw'), 'B/s')} = "
        f"{_pct(g.mean('model_bw_pct'))} of the "
        f"{_si(g.bandwidth, 'B/s')} bandwidth roof"
    )
    if _ok(g.mean("kernel_bw")):
        text += f"; the kernels' modelled bytes give {_pct(g.mean('kernel_bw_pct'))}"
    if g.measured and _ok(g.mean("measured_bw")):
        text += f", Nsight Compute's DRAM bytes {_pct(g.mean('measured_bw_pct'))}"
    if _ok(g.mean("model_busy_bw")):
        text += (
            f"; over the GPU's busy time ({g.mean('gpu_busy_ms') or math.nan:.3f} ms per step, "
            f"{_pct(g.mean('gpu_busy_pct'))} of it) the same bytes move at "
            f"{_si(g.mean('model_busy_bw'), 'B/s')} = {_pct(g.mean('model_busy_bw_pct'))} of "
            "the roof"
        )
    return text


def host_words(g: GenerateFacts) -> str:
    """Why a launch/host-bound decode step's bandwidth over its time is not the memory's."""
    return (
        f"the GPU works {_pct(g.mean('gpu_busy_pct'))} of the decode step: its time is the "
        f"host's launch pace ({g.mean('tpot_ms') or math.nan:.3f} ms for "
        f"{g.mean('gpu_busy_ms') or math.nan:.3f} ms of kernels), so the "
        f"{_pct(g.mean('model_bw_pct'))} of the roof over it measures the host, not the "
        f"memory; while the GPU works the decode model's bytes reach "
        f"{_pct(g.mean('model_busy_bw_pct'))}"
    )


def gemm_words(g: GenerateFacts) -> str:
    """The decode GEMMs' intensity and bound, and the batches at which they (and the whole
    step) reach the ridge point by the model."""
    gm, p = g.gemm, g.prediction
    ms = [str(m) for m in gm.get("m") or []]
    text = f"decode GEMMs (M = {', '.join(ms) or '?'}, matrix-vector-like)"
    if _ok(gm.get("intensity")):
        text += (
            f": {gm['ms_per_step']:.3f} ms per step at {gm['intensity']:.1f} FLOP/B against "
            f"the {g.pipe} ridge point {_si(gm.get('ridge_point'), '', 4).strip()} FLOP/B, "
            f"{gm.get('bound') or 'bound unknown'}"
        )
    if p is not None:
        text += crossover_words(g, p)
        sr = p.get("step_ridge_batch")
        ctx = g.model.prompt + g.model.new_tokens
        if _ok(sr):
            text += f", the whole step at context {ctx} at batch {sr:.0f}"
        else:
            per_byte = 2 / DTYPE_BYTES[g.model.dtype]
            text += (
                f"; the whole step at context {ctx} never does: attention does {per_byte:g} "
                "FLOP per byte of KV cache, whatever the batch"
            )
    return text


def crossover_words(g: GenerateFacts, p: dict[str, Any]) -> str:
    """The decode model's memory-to-compute crossover of the weight GEMMs (the weights at
    the bandwidth they stream at in this run, the FLOPs at the roof) beside the roofline's
    ridge (the weights at the copy ceiling)."""
    roofline = (
        "by the roofline (weights at the copy ceiling) they reach the ridge at batch "
        f"{p['gemm_ridge_batch']:.0f}"
    )
    if not _ok(p.get("achieved_gemm_ridge_batch")):
        return f"; {roofline}"
    return (
        f"; the decode model puts their memory-to-compute crossover at batch "
        f"{p['achieved_gemm_ridge_batch']:.0f}: here they stream the weights at "
        f"{_si(p['weight_stream_Bps'], 'B/s')} ({_pct(p['weight_stream_pct'])} of the copy "
        f"ceiling{_shape_span(g)}), their FLOPs taken at the {g.pipe} roof; {roofline}"
    )


def _shape_span(g: GenerateFacts) -> str:
    """The decode GEMM shapes slowest and fastest against the copy ceiling."""
    t = g.gemms.dropna(subset=["bw_pct", "n", "k"]) if len(g.gemms) else g.gemms
    if len(t) < 2:
        return ""
    order = t.sort_values("bw_pct")
    lo, hi = order.iloc[0], order.iloc[-1]

    def one(r: Any) -> str:
        return f"{r['bw_pct']:.0f} % ({int(r['k'])}×{int(r['n'])}, {r['mean_us']:.1f} µs a call)"

    return f"; by GEMM shape from {one(lo)} to {one(hi)}"


def _memory_lever(g: GenerateFacts) -> str:
    p = g.prediction
    near = p and (p.get("achieved_gemm_ridge_batch") or p["gemm_ridge_batch"])
    at = f" (the weight GEMMs turn compute-bound near batch {near:.0f})" if near else ""
    kv = g.traffic.kv_cache_read / g.traffic.total if g.traffic.total else 0.0
    lever = (
        f"amortise the weight read over more sequences: a larger batch{at}; fewer bytes "
        "per token: int8/fp8 weights"
    )
    if kv >= 0.5:  # the KV cache dominates: batching does not amortise it
        lever += (
            f"; the KV cache is {100 * kv:.0f} % of the bytes and grows with every "
            "sequence: a smaller KV cache (grouped- or multi-query attention, fp8 KV) or "
            "shorter contexts"
        )
    else:
        lever += ", a quantised KV cache (fp8) as contexts grow"
    return lever


def _host_lever(g: GenerateFacts) -> str:
    tpot, busy = g.mean("tpot_ms"), g.mean("gpu_busy_ms")
    toward = (
        f": the step falls toward its GPU time, {tpot:.3f} → {busy:.3f} ms" if tpot and busy else ""
    )
    return (
        "launch the decode step as one CUDA graph, as gpt-fast and vLLM do (the "
        "preallocated KV cache keeps shapes static: torch.compile(mode='reduce-overhead') "
        f"or torch.cuda.graphs){toward}; fuse with torch.compile; a larger batch gives each "
        "launch more work"
    )


def _compute_lever(g: GenerateFacts) -> str:
    return (
        "the decode GEMMs are past the ridge point: a larger batch no longer lowers the time "
        "per token; FP8 GEMMs raise the roof, speculative decoding trades FLOPs for steps"
    )


_LEVERS = {
    "memory-bandwidth-bound": _memory_lever,
    "launch/host-bound": _host_lever,
    "compute-bound": _compute_lever,
}


def decode_verdict(v: Verdict, g: GenerateFacts) -> Verdict:
    """The step verdict with the decode evidence and levers."""
    lever = _LEVERS.get(v.verdict)
    host = [host_words(g)] if v.verdict == "launch/host-bound" and g.has_gpu else []
    return replace(
        v,
        evidence=[*v.evidence, bandwidth_words(g), *host, gemm_words(g)],
        lever=lever(g) if lever is not None else v.lever,
    )


def _records(df: Any) -> list[dict[str, Any]]:
    return [dict(r) for r in df.to_dict("records")]


def generate_json(
    g: GenerateFacts | None, kv: KVGrowth | None, bandwidth_source: str | None
) -> dict[str, Any] | None:
    """The ``generate`` block of ``summary.json`` (None for a training run); keys in
    docs/generate.md."""
    if g is None:
        return None
    dm, t, p = g.model, g.traffic, g.prediction
    mean_tpot = g.mean("tpot_ms")
    roof_tpot = g.mean("model_tpot_ms")
    return {
        "version": GENERATE_VERSION,
        "prompt": dm.prompt,
        "new_tokens": dm.new_tokens,
        "batch": dm.batch,
        "dtype": dm.dtype,
        "steps": g.steps,
        "basis": g.basis,
        "time": g.shares,
        "prefill": g.prefill.to_dict(g.peak),
        "decode": {
            "tpot_ms": mean_tpot,
            "context_first": int(g.per_step["context"].min()),
            "context_last": int(g.per_step["context"].max()),
            "model_bytes_per_step": t.total,
            "model_bytes_per_token": t.total / dm.batch,
            "weights_bytes": t.weights,
            "kv_read_bytes_per_step": t.kv_cache_read,
            "kv_write_bytes_per_step": t.kv_cache_write,
            "model_flops_per_token": (g.mean("model_flops") or math.nan) / dm.batch,
            "bandwidth_roof": g.bandwidth,
            "bandwidth_roof_source": bandwidth_source or None,
            "model_bw": g.mean("model_bw"),
            "model_bw_pct": g.mean("model_bw_pct"),
            "kernel_bytes_per_step": g.mean("kernel_bytes"),
            "kernel_bw": g.mean("kernel_bw"),
            "kernel_bw_pct": g.mean("kernel_bw_pct"),
            "measured": g.measured,
            "measured_bytes_per_step": g.mean("measured_bytes"),
            "measured_bw": g.mean("measured_bw"),
            "measured_bw_pct": g.mean("measured_bw_pct"),
            "busy_bw_pct": g.mean("busy_bw_pct"),
            "gpu_busy_ms": g.mean("gpu_busy_ms"),
            "gpu_busy_pct": g.mean("gpu_busy_pct"),
            "model_busy_bw": g.mean("model_busy_bw"),
            "model_busy_bw_pct": g.mean("model_busy_bw_pct"),
            "roofline_tpot_ms": roof_tpot,
            "tpot_over_roofline": mean_tpot / roof_tpot if mean_tpot and roof_tpot else None,
        },
        "gemm": {**g.gemm, "table": _records(g.gemms)},
        "model": {
            "compute_pipe": g.pipe,
            "compute_roof": g.peak,
            "bytes_per_token": dm.mean_bytes_per_step() / dm.batch,
            "flops_per_token": dm.mean_flops_per_token(),
            "prefill_flops": g.prefill.model_flops,
            "kv_cache_bytes": dm.kv_cache_bytes(),
            **(
                {
                    "ridge_point": p["ridge_point"],
                    "tpot_ms": 1e3 * p["tpot_s"],
                    "tokens_per_s": p["tokens_per_s"],
                    "gemm_ridge_batch": p["gemm_ridge_batch"],
                    "achieved_gemm_ridge_batch": p.get("achieved_gemm_ridge_batch"),
                    "weight_stream_Bps": p.get("weight_stream_Bps"),
                    "weight_stream_pct": p.get("weight_stream_pct"),
                    "step_ridge_batch": p["step_ridge_batch"],
                    "last_step_bound": p["last_step_bound"],
                }
                if p is not None
                else {"ridge_point": None, "gemm_ridge_batch": None, "step_ridge_batch": None}
            ),
        },
        "memory": g.memory,
        "kv_cache": kv.to_dict() if kv is not None else None,
        "per_step": _records(g.per_step),
        "notes": g.notes,
    }
