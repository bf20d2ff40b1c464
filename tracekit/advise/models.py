"""How each lever changes the baseline step: one :class:`~tracekit.advise.effects.Effect`
per lever, built from the trace's regions and the classified kernels (docs/advise.md,
"How the step time is predicted"). Each returns the effect and one line of evidence."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pandas as pd

import tracekit.advise.fits as F
import tracekit.advise.regions as R
import tracekit.summary.critical_path as CP
from tracekit.advise.baseline import Baseline
from tracekit.advise.effects import Effect
from tracekit.manifest import manifest_or_empty

# fused AdamW reads param, grad and both moments and writes param and both moments, fp32
FUSED_ADAMW_BYTES_PER_PARAM = 28
FUSED_ADAMW_OPS = 2  # per optimizer step: the step counters' increment, _fused_adamw_
SDPA_OPS = 1  # per layer and pass: scaled_dot_product_attention, or its backward node
# a fused attention kernel does the two GEMMs' FLOPs, halved by the causal mask it skips;
# its backward recomputes QKᵀ: 2.5 instead of 2 GEMMs' worth
SDPA_FORWARD, SDPA_BACKWARD = 0.5, 0.5 * 2.5 / 2
FLOOR_PCT = 5  # a kernel's fixed cost: this percentile of the region's durations
NOT_MODELLED = "not modelled"


def _ms(ns: float) -> str:
    return f"{ns / 1e6:.2f} ms"


def _per_step(b: Baseline, ns: float) -> float:
    return ns / b.n_steps


def fused_adamw(b: Baseline) -> tuple[Effect, str]:
    """The optimizer's region becomes ``FUSED_ADAMW_OPS`` operators; its kernels move
    ``28 B`` per parameter at the bandwidth the baseline's optimizer kernels reached, in as
    many launches as one foreach operator made."""
    r = R.optimizer_region(b.trace)
    eff = Effect.none(len(b.trace.kernels))
    P = b.shape.n_params()
    fused_bytes = FUSED_ADAMW_BYTES_PER_PARAM * P
    factor = min(1.0, FUSED_ADAMW_OPS * b.n_steps / max(1, r.ops))
    words = [f"optimizer: {r.ops / b.n_steps:.0f} host operators per step -> {FUSED_ADAMW_OPS}"]
    rows = r.kernel_rows()
    if not b.gpu:  # the loop's work is host time: at least the fused bytes at the copy roof
        bw = b.roofs.bandwidth or math.nan
        if bw > 0 and r.host_ns:
            floor = fused_bytes / bw * 1e9 * b.host_speedup / _per_step(b, r.host_ns)
            factor = min(1.0, max(factor, floor))
            words.append(f"at least {fused_bytes / 1e6:.1f} MB at the copy roof")
    elif len(rows):
        k = b.kernels.iloc[rows]
        dur = k["dur"].to_numpy(float)
        by = k["bytes"].to_numpy(float)
        ok = np.isfinite(by) & (by > 0)
        bw = by[ok].sum() / dur[ok].sum() * 1e9 if ok.any() else math.nan
        if not bw > 0:  # no byte counts (record_shapes off): no model
            return eff, NOT_MODELLED
        per_op = max(1, round(len(rows) / max(1, k["top_op_id"].nunique())))
        order = rows[np.argsort(b.kernels["ts"].to_numpy()[rows], kind="stable")]
        keep, gone = order[: per_op * b.n_steps], order[per_op * b.n_steps :]
        new_ns = fused_bytes / bw * 1e9 * b.n_steps
        mult = eff.kernel_mult.copy()
        mult[keep] = new_ns / b.kernels["dur"].to_numpy(float)[keep].sum()
        removed = eff.removed.copy()
        removed[gone] = True
        eff = Effect(mult, removed, removed.copy())
        words.append(
            f"{len(rows) / b.n_steps:.0f} kernels, {_ms(_per_step(b, dur.sum()))} at "
            f"{bw / 1e12:.2f} TB/s -> {per_op} kernels, {fused_bytes / 1e9:.2f} GB "
            f"({_ms(new_ns / b.n_steps)})"
        )
    return Effect(eff.kernel_mult, eff.removed, eff.merged, ((r, factor),)), "; ".join(words)


def sdpa(b: Baseline) -> tuple[Effect, str]:
    """The naive attention's core becomes one operator per layer and pass; its GEMMs become
    the fused kernel (causal: half the FLOPs; backward 2.5 GEMMs' worth), the rest of its
    kernels (scale, mask, softmax, copies) go."""
    cfg = b.config
    r = R.attention_region(b.trace, int(cfg["batch"]), b.shape.n_head, int(cfg["seq"]))
    passes = 3 if cfg.get("checkpoint") else 2
    inst = b.shape.n_layer * int(cfg.get("grad_accum") or 1) * passes * b.n_steps
    factor = min(1.0, SDPA_OPS * inst / max(1, r.ops))
    eff = Effect.none(len(b.trace.kernels))
    rows = r.kernel_rows()
    gemm = rows[(b.kernels["class"].to_numpy(object)[rows] == "gemm")]
    rest = np.setdiff1d(rows, gemm)
    mult = eff.kernel_mult.copy()
    bwd = b.kernels["is_backward"].to_numpy(bool)
    mult[gemm] = np.where(bwd[gemm], SDPA_BACKWARD, SDPA_FORWARD)
    removed = eff.removed.copy()
    removed[rest] = True
    dur = b.kernels["dur"].to_numpy(float)
    words = (
        f"attention core: {r.ops / b.n_steps:.0f} host operators per step -> "
        f"{SDPA_OPS * inst / b.n_steps:.0f}"
    )
    if b.gpu:  # a CPU run has no kernels to count
        words += (
            f"; {len(rows) / b.n_steps:.0f} kernels ({_ms(_per_step(b, dur[rows].sum()))}) -> "
            f"its GEMMs' FLOPs as fused kernels "
            f"({_ms(_per_step(b, (dur[gemm] * mult[gemm]).sum()))})"
        )
    return Effect(mult, removed, removed.copy(), ((r, factor),)), words


def checkpoint(b: Baseline) -> tuple[Effect, str]:
    """The blocks' forward runs twice (again in the backward): its kernels count double,
    and so does the host's time over the forward's span (its operators and the Python
    between them, launches included: on a host-bound step, the recomputed forward's
    launches are host work the backward waits for)."""
    r = R.forward_span_region(b.trace, b.shape.vocab_size)
    eff = Effect.none(len(b.trace.kernels))
    mult = eff.kernel_mult.copy()
    rows = r.kernel_rows()
    mult[rows] = 2.0
    dur = b.kernels["dur"].to_numpy(float)
    gpu = f", {_ms(_per_step(b, dur[rows].sum()))} GPU" if b.gpu else ""
    words = (
        f"the blocks' forward recomputed: {_ms(_per_step(b, r.host_ns))} of host span "
        f"({r.ops / b.n_steps:.0f} operators){gpu} per step, twice"
    )
    return Effect(mult, eff.removed, eff.merged, ((r, 2.0),)), words


def grad_accum(b: Baseline, factor: int) -> tuple[Effect, str]:
    """``factor`` times the micro-batches: the forward and backward (kernels and host time)
    ``factor`` times, the optimizer once."""
    r = R.compute_region(b.trace)
    eff = Effect.none(len(b.trace.kernels))
    mult = eff.kernel_mult.copy()
    mult[r.kernel_rows()] = float(factor)
    return Effect(mult, eff.removed, eff.merged, ((r, float(factor)),)), (
        f"forward and backward x{factor}, the optimizer step once"
    )


def _scaled(d: np.ndarray, factor: int) -> tuple[np.ndarray, float]:
    """Multipliers for durations ``d`` doing ``factor`` times the work above a fixed cost
    (the ``FLOOR_PCT`` percentile of ``d``)."""
    t0 = float(np.percentile(d, FLOOR_PCT)) if len(d) else 0.0
    new = t0 + factor * np.maximum(d - t0, 0.0)
    return np.where(d > 0, new / np.where(d > 0, d, 1.0), 1.0), t0


PIPE_PRECISION = {"simt_fp32": "fp32", "tensor_tf32": "tf32", "tensor_bf16": "bf16",
                  "tensor_fp16": "fp16"}  # fmt: skip


def gemm_rates(b: Baseline) -> dict[str, float]:
    """Per pipe, the best GEMM rate this device has shown: the run's measured matmul
    ceiling (``collect``'s 8192³ ``torch.mm``) or, where a GEMM of the trace beat it, that
    GEMM's rate (FLOP/s)."""
    k = b.kernels
    ceilings = manifest_or_empty(b.manifest).ceilings
    ceil = ceilings.matmul_flops if ceilings is not None else {}
    gemm = (k["class"] == "gemm").to_numpy(bool)
    pipe = k["pipe"].to_numpy(object)
    rate = k["flops"].to_numpy(float) / np.where(k["dur"] > 0, k["dur"], np.nan) * 1e9
    out: dict[str, float] = {}
    for p in {str(x) for x in pipe[gemm] if isinstance(x, str)}:
        seen = rate[gemm & (pipe == p)]
        best = float(np.nanmax(seen)) if np.isfinite(seen).any() else math.nan
        c = ceil.get(PIPE_PRECISION.get(p, ""))
        r = max(float(c) if c else 0.0, best if best == best else 0.0)
        if r > 0:
            out[p] = r
    return out


def gemm_scaled(b: Baseline, rows: np.ndarray, factor: int) -> np.ndarray:
    """Multipliers for the GEMM kernels ``rows`` doing ``factor`` times the work: each takes
    the longer of its time now (a GEMM too small to fill the GPU keeps its time) and
    ``factor`` times its FLOPs at its pipe's best rate (:func:`gemm_rates`: a larger GEMM
    runs at the roof the device has shown), never more than ``factor`` times its time;
    NaN where the kernel has no FLOPs or its pipe no rate."""
    k = b.kernels.iloc[rows]
    rates = gemm_rates(b)
    r = np.array([rates.get(str(p), math.nan) for p in k["pipe"].to_numpy(object)], float)
    dur = k["dur"].to_numpy(float)
    at_roof = factor * k["flops"].to_numpy(float) / r * 1e9
    mult: np.ndarray = np.clip(at_roof / np.where(dur > 0, dur, np.nan), 1.0, float(factor))
    return mult


def batch(b: Baseline, factor: int) -> tuple[Effect, str]:
    """``factor`` times the tokens per kernel. A GEMM with FLOPs takes the longer of its
    time now and ``factor`` times its FLOPs at its pipe's best rate (:func:`gemm_scaled`);
    every other forward/backward kernel's time above a fixed cost scales; the host launches
    the same kernels (a CPU run's operators are its work: the fixed-cost rule per
    operator)."""
    r = R.compute_region(b.trace)
    eff = Effect.none(len(b.trace.kernels))
    rows = r.kernel_rows()
    mult = eff.kernel_mult.copy()
    dur = b.kernels["dur"].to_numpy(float)
    host: tuple[tuple[R.Region, float], ...] = ()
    if len(rows):
        mult[rows], t0 = _scaled(dur[rows], factor)
        gemm = rows[(b.kernels["class"].to_numpy(object)[rows] == "gemm")]
        g = gemm_scaled(b, gemm, factor)
        ok = np.isfinite(g)
        mult[gemm[ok]] = g[ok]
        before = dur[gemm[ok]].sum()
        words = (
            f"{ok.sum() / b.n_steps:.0f} GEMMs {_ms(_per_step(b, before))} -> "
            f"{_ms(_per_step(b, (dur[gemm[ok]] * g[ok]).sum()))} (x{factor} FLOPs at "
            f"{_rates_words(b)}, none faster than now); the other forward/backward kernels "
            f"x{factor} above a {t0 / 1e3:.1f} µs fixed cost"
        )
    else:
        o = R.analysed_ops(b.trace)
        top = o[(o["category"] == "cpu_op") & (o["depth"] <= 1) & ~o["name"].str.startswith("Opt")]
        d = top["dur"].to_numpy(float)
        m, t0 = _scaled(d, factor)
        f = float((m * d).sum() / d.sum()) if d.sum() else 1.0
        host = ((r, f),)
        words = f"host operators x{factor} above a {t0 / 1e3:.1f} µs fixed cost (x{f:.2f})"
    return Effect(mult, eff.removed, eff.merged, host), words


def _rates_words(b: Baseline) -> str:
    rates = gemm_rates(b)
    return ", ".join(f"{p} {v / 1e12:.1f} TFLOP/s" for p, v in sorted(rates.items())) or "no rate"


def cuda_graphs(b: Baseline) -> tuple[Effect, str]:
    """The critical path's ``cuda_graphs`` what-if: no host time, launch latency or
    thread handoffs in the step; queued kernels back to back."""
    eff = Effect.none(len(b.trace.kernels))
    return Effect(eff.kernel_mult, eff.removed, eff.merged, (), (CP.cuda_graphs(),)), (
        f"host and launch time off the path ({b.cp.summary.host_ms:.2f} ms host, "
        f"{b.cp.summary.launch_ms:.2f} ms launch latency on the traced path)"
    )


def compile_(b: Baseline) -> tuple[Effect, str]:
    """Inductor's fusion, at the ratios of the H200 eager/compiled pair
    (``tracekit.advise.fits``): the forward/backward's fusible kernels
    (:data:`~tracekit.advise.fits.COMPILE_FUSES`: elementwise, activation, norms, softmax,
    reductions, layout copies) take ``COMPILE_TIME`` of their time in ``COMPILE_KERNELS``
    of their launches (the rest merge into their neighbours: launch and gap gone); the
    host's time in the forward/backward becomes the remaining launches at
    ``COMPILE_HOST_PER_LAUNCH`` times the eager cost per launch — what the saved launches
    save where the step is host/launch-bound (the critical path decides whether it is)."""
    n = len(b.trace.kernels)
    if not b.gpu:  # inductor's C++ kernels on a CPU: no model
        return Effect.none(n), NOT_MODELLED
    k = b.kernels
    fus, r = F.fusible(b)
    rows = np.flatnonzero(fus)
    rows = rows[np.lexsort((k["ts"].to_numpy()[rows], k["stream"].to_numpy()[rows]))]
    i = np.arange(len(rows))
    drop = 1.0 - F.COMPILE_KERNELS  # evenly spread: every 1/drop-th fusible kernel merges
    merged = np.zeros(n, bool)
    merged[rows[np.floor((i + 1) * drop) > np.floor(i * drop)]] = True
    mult = np.where(fus, F.COMPILE_TIME, 1.0)
    before = int(r.kernels.sum())
    after = before - int(merged.sum())
    host = after / max(1, before) * F.COMPILE_HOST_PER_LAUNCH
    dur = k["dur"].to_numpy(float)
    words = (
        f"forward/backward kernels {before / b.n_steps:.0f} -> {after / b.n_steps:.0f} per "
        f"step ({(before - after) / b.n_steps:.0f} launches saved); fusible ones "
        f"{_ms(_per_step(b, dur[fus].sum()))} -> "
        f"{_ms(_per_step(b, F.COMPILE_TIME * dur[fus].sum()))}; forward/backward host "
        f"x{host:.3f}"
    )
    return Effect(mult, np.zeros(n, bool), merged, ((r, host),)), words


def bf16(b: Baseline) -> tuple[Effect, str]:
    """GEMMs move from the fp32 SIMT roof to the bf16 tensor roof (each at the same share
    of it, no faster than its halved bytes at the bandwidth roof). Autocast casts, per
    forward GEMM operator, each weight and bias and about half the activations (those that
    LayerNorm and softmax, which autocast runs in fp32, produce), and casts their gradients
    back in the backward: 6 B per element each way at the copy roof, put on the operator's
    GEMMs, and one host operator each at the median cost of a one-kernel operator."""
    peaks, bw = b.roofs.peaks, b.roofs.bandwidth or math.nan
    fp32, tensor = peaks.get("simt_fp32"), peaks.get("tensor_bf16")
    eff = Effect.none(len(b.trace.kernels))
    if not (fp32 and tensor and bw > 0) or not b.gpu:
        return eff, NOT_MODELLED
    k = b.kernels
    gemm = np.flatnonzero((k["class"] == "gemm").to_numpy(bool))
    dur = k["dur"].to_numpy(float)
    by = np.nan_to_num(k["bytes"].to_numpy(float)[gemm])
    new = np.maximum(dur[gemm] * fp32 / tensor, by / 2 / bw * 1e9)
    ops, casts, elements = _casts(b, gemm)
    cast_ns = np.zeros(len(gemm))
    top = k["top_op_id"].to_numpy(np.int64)[gemm]
    per_kernel = pd.Series(1, index=top).groupby(level=0).transform("size").to_numpy()
    for i, t in enumerate(top.tolist()):
        cast_ns[i] = elements.get(t, 0.0) * 6 * 2 / bw * 1e9 / per_kernel[i]
    mult = eff.kernel_mult.copy()
    mult[gemm] = (new + cast_ns) / np.where(dur[gemm] > 0, dur[gemm], 1.0)
    region = R.region_of(b.trace, "gemm operators", np.asarray(sorted(ops), np.int64))
    host_ns = 2 * casts * _one_kernel_op_ns(b)
    factor = 1.0 + host_ns / region.host_ns if region.host_ns else 1.0
    words = (
        f"GEMMs {_ms(_per_step(b, dur[gemm].sum()))} -> {_ms(_per_step(b, new.sum()))} "
        f"(roofs {fp32 / 1e12:.0f} -> {tensor / 1e12:.0f} TFLOP/s); "
        f"{2 * casts / b.n_steps:.0f} casts per step ({_ms(_per_step(b, cast_ns.sum()))} GPU, "
        f"{_ms(_per_step(b, host_ns))} host)"
    )
    return Effect(mult, eff.removed, eff.merged, ((region, factor),)), words


def _casts(b: Baseline, gemm: np.ndarray) -> tuple[set[int], float, dict[int, float]]:
    """The forward GEMM kernels' outermost operators, the casts autocast adds to them (one
    per weight and bias, one per two activations) and the elements each one casts."""
    fwd = ~b.kernels["is_backward"].to_numpy(bool)[gemm]
    tops = {int(t) for t in b.kernels["top_op_id"].to_numpy(np.int64)[gemm][fwd] if t >= 0}
    dims = b.trace.ops["input_dims"].to_numpy(object)
    casts, elements = 0.0, {}
    for t in tops:
        shapes = R.shapes_of(dims[t])
        params = [s for s in shapes if 1 <= len(s) <= 2]
        acts = [s for s in shapes if len(s) >= 3]
        casts += len(params) + 0.5 * len(acts)
        elements[t] = sum(math.prod(s) for s in params) + 0.5 * sum(math.prod(s) for s in acts)
    return tops, casts, elements


def _one_kernel_op_ns(b: Baseline) -> float:
    """Median host time of the outermost operators that launch exactly one kernel (what a
    cast costs the host)."""
    top = b.kernels["top_op_id"].to_numpy(np.int64)
    ids, n = np.unique(top[top >= 0], return_counts=True)
    one = ids[n == 1]
    return float(np.median(b.trace.ops["dur"].to_numpy()[one])) if len(one) else 0.0


def _host_words(b: Baseline) -> str:
    return f"the host x{b.host_speedup:.2f} faster without the profiler ({b.host_basis})"


def basis(name: str, b: Baseline) -> str:
    """What lever ``name``'s time model rests on: its constants and where they come from,
    and the baseline's host calibration (every model's host time is divided by it)."""
    pair = " -> ".join(F.COMPILE_PAIR)
    texts = {
        "compile": f"fitted on one H200 pair, fixtures/{pair} (tracekit.advise.fits): "
        f"fusible kernels' time x{F.COMPILE_TIME:.3f}, launches x{F.COMPILE_KERNELS:.3f}, "
        f"host per launch x{F.COMPILE_HOST_PER_LAUNCH:.3f}; GEMMs and attention kept",
        "checkpoint": "this trace's forward/backward split: the blocks' forward span and "
        "its kernels once more; nothing fitted",
        "bf16": "this run's GEMM rates against the fp32 and bf16 roofs; casts at the copy "
        "roof and one one-kernel operator's median host time each (checked on the H200 "
        "pair fp32-naive -> bf16-naive)",
        "batch": "this trace's kernels; GEMMs at the best rate the device has shown",
        "sdpa": "this trace's attention core; the fused kernel at its GEMMs' efficiency",
        "adamw-fused": "this trace's optimizer region and its kernels' bandwidth",
        "cuda-graphs": "this trace's critical path without host and launch time",
        "grad-accum": "this trace's forward/backward, repeated",
    }
    return f"{texts.get(name, 'this trace')}; {_host_words(b)}"


def model_for(name: str) -> Callable[[Baseline, int], tuple[Effect, str]]:
    """The time model of lever ``name`` (``tracekit.advise.levers``)."""
    table: dict[str, Callable[[Baseline, int], tuple[Effect, str]]] = {
        "sdpa": lambda b, f: sdpa(b),
        "bf16": lambda b, f: bf16(b),
        "compile": lambda b, f: compile_(b),
        "adamw-fused": lambda b, f: fused_adamw(b),
        "checkpoint": lambda b, f: checkpoint(b),
        "cuda-graphs": lambda b, f: cuda_graphs(b),
        "batch": batch,
        "grad-accum": grad_accum,
    }
    return table[name]
