"""The generate section of the report (``collect --workload generate`` runs): prefill
against decode, each decode step's bandwidth against the roof, the decode GEMMs, the KV
cache and the decode model — one wording (:func:`lines`) and one set of table columns for
the terminal, the HTML page and the Markdown tables."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pandas as pd

import tracekit.reports.fmt as fmt
import tracekit.reports.verdict as VR
from tracekit.reports.fmt import _ok
from tracekit.summary import Summary
from tracekit.summary.gendoc import bandwidth_words, gemm_words
from tracekit.summary.generate import GenerateFacts

Fmt = Callable[[Any], str]


def title(g: GenerateFacts) -> str:
    m = g.model
    return (
        f"Generate: prefill and decode (batch {m.batch}, prompt {m.prompt}, "
        f"{m.new_tokens} new tokens, {m.dtype}; {len(g.steps)} decode steps recorded)"
    )


def _prefill(g: GenerateFacts) -> str:
    s, p = g.shares, g.prefill
    parts = []
    if _ok(s.get("ttft_ms")):
        text = f"TTFT {fmt.ms(s['ttft_ms'])} (unprofiled)"
        if _ok(s.get("prefill_pct")):
            text += (
                f" = {fmt.pct(s['prefill_pct'])} of a generation; the {g.model.new_tokens} "
                f"decode steps {fmt.ms(s['decode_ms'])} = {fmt.pct(s['decode_pct'])}"
            )
        parts.append(text)
    if g.has_gpu:
        parts.append(
            f"trace: {fmt.ms(p.gpu_busy_ms)} of GPU work in the prefill (GEMMs "
            f"{fmt.ms(p.gemm_ms)}, attention {fmt.ms(p.attention_ms)}), "
            f"{fmt.ms(g.mean('gpu_busy_ms'))} per decode step: prefill "
            f"{fmt.pct(s.get('prefill_gpu_pct'))} of the generation's GPU time"
        )
    else:
        parts.append(
            f"trace (no GPU activity): the prefill range {fmt.ms(p.span_ms)}, a decode step "
            f"{fmt.ms(g.mean('trace_step_ms'))}, profiled"
        )
    return "; ".join(parts)


def _prefill_model(g: GenerateFacts) -> str:
    d = g.prefill.to_dict(g.peak)
    ridge = g.peak / g.bandwidth if g.peak and g.bandwidth else None
    text = (
        f"{fmt.si(d['model_flops'], 'FLOP')} on {fmt.si(d['model_bytes'], 'B')} = "
        f"{fmt.intensity(d['model_intensity'])} FLOP/B"
    )
    if ridge is not None and _ok(d["model_intensity"]):
        side = "compute" if d["model_intensity"] >= ridge else "memory"
        text += f", {side} side of the ridge point {fmt.intensity(ridge)}"
    if _ok(d["model_flops_per_s"]):
        text += (
            f": {fmt.si(d['model_flops_per_s'], 'FLOP/s')} over the TTFT = "
            f"{fmt.pct(d['compute_utilisation_pct'])} of the {g.pipe} roof"
        )
    return text


def _per_token(g: GenerateFacts) -> str:
    m, t = g.model, g.traffic
    tpot = g.mean("tpot_ms")
    flops = g.mean("model_flops")
    return (
        f"{fmt.ms(tpot)} per decode step ({g.basis}, mean of the {len(g.steps)} recorded "
        f"steps) for {m.batch} sequences = "
        f"{fmt.us(1e3 * tpot / m.batch if tpot else None)} per token; the decode model "
        f"reads {fmt.si(t.total / m.batch, 'B')} and does "
        f"{fmt.si(flops / m.batch if flops else None, 'FLOP')} per token"
    )


def _busy(g: GenerateFacts) -> str:
    return (
        f"the GPU works {fmt.ms(g.mean('gpu_busy_ms'))} of each decode step "
        f"({fmt.pct(g.mean('gpu_busy_pct'))}); while it works the decode model's bytes move "
        f"{fmt.pct(g.mean('model_busy_bw_pct'))} of the roof, the kernels' "
        f"{fmt.pct(g.mean('busy_bw_pct'))}; over the whole step "
        f"{fmt.pct(g.mean('model_bw_pct'))} and "
        f"{fmt.pct(g.mean('measured_bw_pct') if g.measured else g.mean('kernel_bw_pct'))}"
    )


def _kv(g: GenerateFacts, sm: Summary) -> str:
    kv = sm.kv
    if kv is None or not kv.filled_bytes:
        return "no KV cache figures"
    used = 100.0 * kv.filled_bytes[-1] / kv.allocated_bytes if kv.allocated_bytes else None
    ctx = g.model.prompt + g.model.new_tokens
    return (
        f"2·L·C·b = {fmt.nbytes(kv.per_token_bytes)} per token of a sequence, "
        f"{fmt.nbytes(kv.per_step_bytes)} per decode step; filled "
        f"{fmt.nbytes(kv.prefill_bytes)} after the prefill, {fmt.nbytes(kv.filled_bytes[0])} "
        f"→ {fmt.nbytes(kv.filled_bytes[-1])} over the recorded steps, of "
        f"{fmt.nbytes(kv.allocated_bytes)} preallocated for {ctx} tokens "
        f"({fmt.pct(used)} in use at the last recorded step)"
    )


def _roofline(g: GenerateFacts) -> str:
    p = g.prediction
    if p is None:
        return "no roofline: the bandwidth roof or the compute roof is unknown"
    tpot, model = g.mean("tpot_ms"), g.mean("model_tpot_ms")
    ratio = f" (measured {tpot / model:.2f} × it)" if tpot and model else ""
    sr = p["step_ridge_batch"]
    step = fmt.num(sr, 0) if _ok(sr) else "none (the KV cache's attention stays below it)"
    ach = p.get("achieved_gemm_ridge_batch")
    at = (
        f" (the decode model's crossover, with the weights at the "
        f"{fmt.si(p['weight_stream_Bps'], 'B/s')} they stream at here: batch {fmt.num(ach, 0)})"
        if _ok(ach)
        else ""
    )
    return (
        f"the decode model on the roofs ({fmt.si(g.bandwidth, 'B/s')}, {g.pipe} "
        f"{fmt.si(g.peak, 'FLOP/s')}, ridge {fmt.intensity(p['ridge_point'])} FLOP/B): "
        f"{fmt.ms(model)} per step{ratio}, {fmt.count(p['tokens_per_s'])} tokens/s; the "
        f"weight GEMMs reach the ridge at batch {fmt.num(p['gemm_ridge_batch'], 0)}{at}, the "
        f"whole step at batch {step}"
    )


def lines(sm: Summary) -> list[tuple[str, str]]:
    """(label, text) of the generate section (empty for a training run)."""
    g = sm.generate
    if g is None:
        return []
    out = [
        ("prefill", _prefill(g)),
        ("prefill model", _prefill_model(g)),
        ("decode", _per_token(g)),
        ("bandwidth", bandwidth_words(g)),
        *((("busy", _busy(g)), ("GEMMs", gemm_words(g))) if g.has_gpu else ()),
        ("KV cache", _kv(g, sm)),
        ("roofline", _roofline(g)),
    ]
    if _ok(g.memory.get("peak_allocated_bytes")):
        out.append(("memory", VR.generate_memory_text(g.memory)))
    return out


# (header, field, formatter) of the per-step and GEMM tables; the terminal's headers are
# the short ones (80 columns)
STEP_COLUMNS: list[tuple[str, str, str, Fmt]] = [
    ("step", "step", "step", str),
    ("context", "ctx", "context", str),
    ("time per step", "ms", "tpot_ms", lambda v: fmt.num(v, 3)),
    ("model bytes", "model B", "model_bytes", lambda v: fmt.si(v, "B")),
    ("bandwidth (model)", "B/s", "model_bw", lambda v: fmt.si(v, "B/s")),
    ("% of roof (model)", "model", "model_bw_pct", fmt.pct),
    ("% of roof (kernels)", "kern", "kernel_bw_pct", fmt.pct),
    ("% of roof (measured)", "meas", "measured_bw_pct", fmt.pct),
    ("GPU busy % of step", "GPU%", "gpu_busy_pct", fmt.pct),
    ("% of roof while busy (model)", "mbusy", "model_busy_bw_pct", fmt.pct),
    ("% of roof while busy (kernels)", "busy", "busy_bw_pct", fmt.pct),
    ("roofline time", "roof ms", "model_tpot_ms", lambda v: fmt.num(v, 3)),
    ("GEMM ms", "GEMM", "gemm_ms", lambda v: fmt.num(v, 3)),
    ("attention ms", "attn", "attention_ms", lambda v: fmt.num(v, 3)),
    ("GEMM FLOP/B", "FLOP/B", "gemm_intensity", fmt.intensity),
    ("KV cache filled", "KV", "kv_filled_bytes", fmt.nbytes),
]


def _mnk(r: Mapping[str, Any]) -> str:
    return "×".join(str(int(r[k])) if _ok(r.get(k)) else "?" for k in ("m", "n", "k"))


GEMM_COLUMNS_OUT: list[tuple[str, str, str, Fmt]] = [
    ("operator", "operator", "name", str),
    ("M×N×K", "M×N×K", "mnk", str),
    ("calls/step", "calls", "calls_per_step", lambda v: fmt.num(v, 0)),
    ("ms/step", "ms", "ms_per_step", lambda v: fmt.num(v, 3)),
    ("mean", "µs", "mean_us", lambda v: fmt.num(v, 1)),
    ("FLOP/B", "FLOP/B", "intensity", fmt.intensity),
    ("ridge", "ridge", "ridge", fmt.intensity),
    (
        "bound",
        "bnd",
        "bound",
        lambda v: {"memory-bound": "mem", "compute-bound": "cmp"}.get(str(v), str(v)),
    ),
    ("bandwidth", "B/s", "attained_bw", lambda v: fmt.si(v, "B/s")),
    ("% of BW roof", "BW%", "bw_pct", lambda v: fmt.pct(v, 0)),
    ("% of compute roof", "FLOP%", "compute_pct", lambda v: fmt.pct(v, 1)),
]


def _p(v: Any) -> str:
    return f"{float(v):.1f}" if _ok(v) else fmt.DASH


def _b(v: Any) -> str:
    """Compact binary bytes: 3.05M."""
    return fmt.nbytes(v).replace(" ", "").replace("iB", "") if _ok(v) else fmt.DASH


def _s(v: Any) -> str:
    """Compact SI: 2.39T."""
    return fmt.si(v, "").replace(" ", "") if _ok(v) else fmt.DASH


# the terminal's 80 columns: (header, field, formatter); percentages of the roof
TERMINAL_STEP: list[tuple[str, str, Fmt]] = [
    ("step", "step", str),
    ("ctx", "context", str),
    ("ms", "tpot_ms", lambda v: fmt.num(v, 3)),
    ("model%", "model_bw_pct", _p),
    ("kern%", "kernel_bw_pct", _p),
    ("meas%", "measured_bw_pct", _p),
    ("GPU%", "gpu_busy_pct", _p),
    ("busy%", "model_busy_bw_pct", _p),
    ("roof ms", "model_tpot_ms", lambda v: fmt.num(v, 3)),
    ("GEMM", "gemm_ms", lambda v: fmt.num(v, 3)),
    ("attn", "attention_ms", lambda v: fmt.num(v, 3)),
    ("KV", "kv_filled_bytes", _b),
]
TERMINAL_GEMM: list[tuple[str, str, Fmt]] = [
    ("M×N×K", "mnk", str),
    ("calls", "calls_per_step", lambda v: fmt.num(v, 0)),
    ("ms", "ms_per_step", lambda v: fmt.num(v, 3)),
    ("FLOP/B", "intensity", fmt.intensity),
    ("bnd", "bound", lambda v: {"memory-bound": "mem", "compute-bound": "cmp"}.get(str(v), "?")),
    ("B/s", "attained_bw", _s),
    ("BW%", "bw_pct", _p),
    ("FLOP%", "compute_pct", _p),
]


def gemm_rows(g: GenerateFacts) -> pd.DataFrame:
    """The GEMM table with its ``mnk`` text column."""
    t = g.gemms.copy()
    t["mnk"] = [_mnk(r) for r in t.to_dict("records")]
    return t
