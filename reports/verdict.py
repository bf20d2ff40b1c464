"""The step summary and its verdict as labelled lines of text, one wording for the terminal,
the HTML page and the Markdown tables (each renderer escapes them its own way)."""

from __future__ import annotations

import math
from typing import Any

import tracekit.reports.fmt as fmt
import tracekit.summary.timeline as TL
from tracekit.summary import Summary

TRAFFIC_TERMS = {
    "parameters": "parameters",
    "gradients": "gradients",
    "optimizer_state": "AdamW state",
    "activations": "saved activations",
}
# a user script's run: sizes read from its optimizer, activations measured
OPTIMIZER_TERMS = {
    "parameters": "parameters",
    "gradients": "gradients",
    "optimizer_state": "optimizer state",
    "activations": "dynamic memory",
}
DECODE_TERMS = {
    "weights": "weights",
    "kv_cache_read": "KV cache read",
    "kv_cache_write": "KV cache write",
}


def _ok(v: Any) -> bool:
    return v is not None and isinstance(v, (int, float)) and math.isfinite(float(v))


def source_word(text: str | None) -> str:
    """'measured (manifest ceilings: …)' -> 'measured'; 'spec: NVIDIA …' -> 'spec'."""
    if not text:
        return "unknown source"
    return text.split("(")[0].split(":")[0].strip() or text


def step_words(sm: Summary) -> str:
    ss = sm.step_summary
    if ss.step_time_ms is None:
        return "no step time"
    how = "measured without the profiler" if ss.basis == "unprofiled" else "profiled"
    return f"{fmt.ms(ss.step_time_ms)} step, {how}"


def _verdict_step(sm: Summary) -> str:
    """The step the verdict splits: a CPU run's is the profiled one (its operators are
    lengthened by the profiler too), whatever step the rates are over."""
    b = sm.breakdown
    if sm.cpu is not None and b is not None and b.basis != sm.step_summary.basis:
        return f"{fmt.ms(b.step_ms)} step, profiled"
    return step_words(sm)


def step_time_text(sm: Summary) -> str:
    """The header's step times: the trace's (the light pass's and the full pass's when
    the timeline comes from the light one) and the unprofiled measurement."""
    h, tf = sm.header, sm.timeline_facts
    if tf is not None and tf.source == "light":
        st = (
            f"{fmt.ms(tf.light_step_time_ms)} in the light timeline pass "
            f"({light_words(tf.recorder)}), "
            f"{fmt.ms(tf.full_step_time_ms)} in the full pass (profiled)"
        )
    else:
        st = f"{fmt.ms(h.step_time_ms)} in the trace (profiled)"
    if h.measured_step_time_ms is not None:
        st += f", {fmt.ms(h.measured_step_time_ms)} measured without profiler"
        if sm.generate is not None:  # one basis, two statistics: name which (issue 35)
            st += " (median of every timed decode step)"
    return st


def light_words(recorder: str | None) -> str:
    """The light pass's recorder in a few words (``CUPTI, kernels only`` or ``Kineto, CUDA
    only``; a run from before the recorders were told apart: ``CUDA only``)."""
    return TL.RECORDER_WORDS.get(recorder or "", "CUDA only")


def timeline_text(sm: Summary, brief: bool = False) -> str | None:
    """Which pass the idle, launch and overlap figures come from, how far its step is
    from the unprofiled one, and why the full pass where it is that (``brief``: in a few
    words, so that the line fits the terminal's first screen)."""
    tf = sm.timeline_facts
    if tf is None:
        return None
    vs = tf.vs_unprofiled_pct
    gap = ""
    if vs is not None:
        within = "within" if tf.faithful else "not within"
        gap = f", {vs:+.1f} % vs unprofiled ({within} {TL.FAITHFUL_PCT:.0f} %)"
    if tf.source == "light" and tf.light_cost is not None:
        within = "within" if tf.faithful else "not within"
        gap = (
            f", its cost x{tf.light_cost['ratio']:.3f} in {tf.light_cost['rounds']} interleaved "
            f"rounds ({within} {TL.FAITHFUL_PCT:.0f} %)"
        )
        if tf.apart_agrees is False and vs is not None:
            gap += f", its steps {vs:+.1f} % timed apart (the host's speed: see the notes)"
    if tf.source == "light":
        per = [int(r["light_kernels"]) for r in tf.per_step]
        n = sum(per) / len(per) if per else 0
        joined = f" ({tf.joined_pct:.1f} % of GPU time)" if tf.joined_pct is not None else ""
        return (
            f"light pass ({light_words(tf.recorder)}){gap}; {n:,.0f} GPU activities per step "
            f"joined to the full pass{joined}; idle, launch and overlap from it"
        )
    return f"full pass{gap}: {(tf.brief or tf.reason) if brief else tf.reason}"


def verdict_line(sm: Summary) -> str:
    v = sm.verdict
    if v is None:
        return f"no verdict: no {fmt.words(sm).summed} in the analysed steps"
    return f"{v.verdict} ({_verdict_step(sm)})"


def _unknown(sm: Summary, label: str, what: str) -> list[tuple[str, str]]:
    """Why a step rate is unknown: no line where no kernel ran (absent, not unknown), the
    profiler option only where it was off."""
    if not len(sm.kernels):
        return []
    off = "" if sm.header.options.get("record_shapes") else " (record_shapes off)"
    return [(label, f"unknown: no kernel has {what}{off}")]


def figures(sm: Summary) -> list[tuple[str, str]]:
    """(label, text) of the step summary: bandwidth, compute, intensity, traffic, memory."""
    ss = sm.step_summary
    doc = sm.summary.get("step_summary", {})
    roofs = sm.roofs
    out: list[tuple[str, str]] = []
    if _verdict_step(sm) != step_words(sm):
        out.append(("rates", f"over the {step_words(sm)}"))
    bw = doc.get("bandwidth_used")
    if _ok(bw):
        line = f"{fmt.si(bw, 'B/s')}"
        if roofs.bandwidth:
            line += (
                f" = {fmt.pct(doc.get('bandwidth_utilisation_pct'))} of the "
                f"{fmt.si(roofs.bandwidth, 'B/s')} roof ({source_word(roofs.bandwidth_source)})"
            )
        per = fmt.si(doc.get("bytes_per_step"), "B")
        if ss.measured:
            line += (
                f"; {per}/step measured (counters on "
                f"{fmt.pct(doc.get('measured_time_pct'), 0)} of GPU time); modelled "
                f"{fmt.si(doc.get('bytes_modelled_per_step'), 'B')}/step, "
                f"{fmt.si(doc.get('bandwidth_modelled'), 'B/s')}"
            )
        else:
            line += f"; {per}/step, modelled from shapes"
        out.append(("bandwidth", line))
    else:
        out += _unknown(sm, "bandwidth", "a byte count")
    if _ok(doc.get("flops_per_s")):
        line = f"{fmt.si(doc['flops_per_s'], 'FLOP/s')}"
        if _ok(doc.get("compute_roof")):
            line += (
                f" = {fmt.pct(doc.get('compute_utilisation_pct'))} of the {ss.pipe} roof "
                f"{fmt.si(doc['compute_roof'], 'FLOP/s')} "
                f"({source_word(doc.get('compute_roof_source'))})"
            )
        out.append(("compute", line))
    else:
        out += _unknown(sm, "compute", "a FLOP count")
    if _ok(doc.get("arithmetic_intensity")):
        line = f"{fmt.intensity(doc['arithmetic_intensity'])} FLOP/B"
        if _ok(doc.get("ridge_point")):
            side = doc.get("roofline_side")
            line += (
                f", {'below' if side == 'memory' else 'above'} the ridge point "
                f"{fmt.intensity(doc['ridge_point'])} of {ss.pipe} ({side} side)"
            )
        out.append(("intensity", line))
    t = doc.get("analytic_traffic")
    if t:
        out.append(("traffic", traffic_text(t)))
    out.append(("memory", memory_text(sm)))
    return out


def traffic_text(t: dict[str, Any]) -> str:
    """The analytic traffic with its formula, and the kernels' bytes as a multiple of it."""
    if "weights" in t:  # a decode step (tracekit.classify.models.decode): each term read once
        terms = " + ".join(f"{name} {fmt.si(t[k], 'B')}" for k, name in DECODE_TERMS.items())
        line = f"analytic {fmt.si(t['total'], 'B')}/decode step = {terms}"
    else:
        # the terms are bytes moved (twice each tensor's size): the sizes are half of them
        model = t.get("basis", "model") == "model"
        names = TRAFFIC_TERMS if model else OPTIMIZER_TERMS
        terms = " + ".join(f"{name} {fmt.si(t[k] / 2, 'B')}" for k, name in names.items())
        kind = "analytic" if model else "estimate"
        line = f"{kind} {fmt.si(t['total'], 'B')}/step = 2 × ({terms})"
    if _ok(t.get("kernel_bytes_ratio")):
        line += f"; the kernels move {t['kernel_bytes_ratio']:.2f} × that"
    return line


def traffic_rows(t: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(term, size, bytes moved per step) of the analytic traffic."""
    if "weights" in t:  # a decode step reads each term once
        return [(n, fmt.si(t[k], "B"), fmt.si(t[k], "B")) for k, n in DECODE_TERMS.items()]
    names = TRAFFIC_TERMS if t.get("basis", "model") == "model" else OPTIMIZER_TERMS
    return [(n, fmt.si(t[k] / 2, "B"), fmt.si(t[k], "B")) for k, n in names.items()]


def memory_text(sm: Summary) -> str:
    """Peak, the analytic model beside it, dynamic memory per token."""
    m = sm.memory
    if sm.generate is not None and _ok(sm.generate.memory.get("peak_allocated_bytes")):
        return generate_memory_text(sm.generate.memory)
    if m is None:
        return "no memory figures (no [memory] events, no run manifest)"
    mf = sm.memory_facts
    parts = [f"peak {fmt.nbytes(m.peak_allocated_bytes)}"]
    if mf.model is not None:
        parts.append(f"model {fmt.nbytes(mf.model.peak)} ({_model_error(sm)})")
    if mf.dynamic_peak_bytes is not None:
        dyn = f"dynamic {fmt.nbytes(mf.dynamic_peak_bytes)}"
        if mf.activation_bytes_per_token is not None:
            dyn += f" = {fmt.nbytes(mf.activation_bytes_per_token)}/token"
        parts.append(dyn)
    return "; ".join(parts)


def per_step_rows(sm: Summary) -> list[dict[str, str]]:
    """The per-step figures (profiled step times), formatted."""
    rows = []
    for r in sm.step_summary.per_step.to_dict("records"):
        rows.append(
            {
                "step": str(int(r["step"])),
                "step time": fmt.ms(r["step_time_ms"]),
                "bytes": fmt.si(r["bytes"], "B"),
                "bandwidth": fmt.si(r["bandwidth_used"], "B/s"),
                "% of BW roof": fmt.pct(r["bandwidth_utilisation_pct"]),
                "FLOP/s": fmt.si(r["flops_per_s"], "FLOP/s"),
                "% of compute roof": fmt.pct(r["compute_utilisation_pct"]),
                "FLOP/B": fmt.intensity(r["arithmetic_intensity"]),
            }
        )
    return rows


def _model_error(sm: Summary) -> str:
    """'-3.1 % of the measured peak' (or why not)."""
    m, model = sm.memory, sm.memory_facts.model
    if m is None or model is None or not m.peak_allocated_bytes:
        return "no measured peak"
    err = 100.0 * (model.peak - m.peak_allocated_bytes) / m.peak_allocated_bytes
    return f"{err:+.1f} %"


def model_text(sm: Summary) -> str:
    """The analytic memory model's peak beside the measured one (or why there is none)."""
    mf = sm.memory_facts
    g = sm.generate
    if g is not None:  # the training model does not apply; the KV cache's formula does
        return (
            f"KV cache 2·L·B·(prompt + new tokens)·C·b = "
            f"{fmt.nbytes(g.memory.get('kv_cache_formula_bytes'))} (allocated "
            f"{fmt.nbytes(g.memory.get('kv_cache_bytes'))}), weights "
            f"{fmt.nbytes(g.memory.get('weights_bytes'))}"
        )
    if mf.model is None:
        return f"no analytic estimate: {mf.model_note}"
    txt = (
        f"analytic estimate {fmt.nbytes(mf.model.peak)} at {mf.model.peak_phase} "
        f"({_model_error(sm)})"
    )
    return txt + (f"; {mf.model_note}" if mf.model_note else "")


def generate_memory_text(mem: dict[str, Any]) -> str:
    """A generate run's unprofiled peak split into weights, KV cache and the rest."""
    peak = mem["peak_allocated_bytes"]
    kv = mem.get("kv_cache_bytes")
    text = (
        f"peak {fmt.nbytes(peak)} (unprofiled) = weights {fmt.nbytes(mem.get('weights_bytes'))}"
        f" + KV cache {fmt.nbytes(kv)} + other {fmt.nbytes(mem.get('other_bytes'))}"
    )
    if _ok(kv) and peak:
        text += f"; the KV cache is {fmt.pct(100.0 * kv / peak)} of the peak"
    return text
