"""What each lever's time model leaves out, said where its prediction misses.

``tracekit advise`` aims to predict each lever's step-time ratio within
:data:`TOLERANCE_PCT` of the paired measurement. Where a lever's prediction is further off,
the table says which part of the lever's effect its model (``tracekit/advise/models.py``)
does not describe, so that the number is read as a bound, not a forecast. The texts name
what the models do and do not compute; they are attached only to rows whose measured
error exceeds the tolerance (pure: a row's lever and error in, a line out).
"""

from __future__ import annotations

import math

TOLERANCE_PCT = 15.0  # the predictions' target: within +-15 % of the measured ratio

LEAVES_OUT: dict[str, str] = {
    "compile": (
        "the model takes inductor's fusion (the fusible kernels' time and launches) and its "
        "host cost per launch from one H200 pair (bf16 SDPA at s128, tracekit.advise.fits); "
        "a fusion worth more than that pair's average — the naive attention's mask, scale "
        "and softmax over the T² scores in one kernel each way — and any change to the GEMMs "
        "(kept as they are) are not modelled"
    ),
    "cuda-graphs": (
        "the model removes the host and launch time on the unprofiled step's critical path; "
        "where that path is the GPU's (the host's speed-up not calibrated from the trace), "
        "the host gaps between the GPU's kernels that a graph removes are not seen"
    ),
    "batch": (
        "the model takes each GEMM at the larger size to run at the best rate the device has "
        "shown for its pipe (the measured matmul ceiling, or a faster GEMM of the trace) unless "
        "that is quicker than its time now, and every other kernel's time above a fixed cost "
        "to scale; the GEMMs' real efficiency at the larger size (tiles, waves, split-K) and "
        "the host's per-step work spread over more tokens are not modelled"
    ),
    "grad-accum": (
        "the model repeats the forward and backward (kernels and host time) per micro-batch "
        "at the same efficiency; overlap between micro-batches is not modelled"
    ),
    "checkpoint": (
        "the model runs the blocks' forward span (host time and kernels) once more; the "
        "checkpoint's own host work — a Python hook per saved tensor to pack it in the "
        "forward and unpack (recompute) it in the backward, the saved RNG state — is not "
        "modelled, nor fitted: no checkpointed fixture exists"
    ),
    "sdpa": (
        "the model replaces the attention core's kernels by its GEMMs' FLOPs at the roof as "
        "one fused kernel; the fused kernel's real efficiency is not modelled"
    ),
    "bf16": (
        "the model puts the GEMMs at the bf16 roof (measured where the run has it, else the "
        "spec's) and adds the casts' kernels and host time; the other kernels' "
        "halved traffic and autocast's dispatch on every operator are not modelled"
    ),
    "adamw-fused": (
        "the model streams the optimizer's state once at the measured bandwidth and drops its "
        "host operators; the fused kernel's efficiency is not modelled"
    ),
}


def beyond(error_pct: float) -> bool:
    """Whether a prediction error (%) is outside :data:`TOLERANCE_PCT`."""
    return (
        isinstance(error_pct, (int, float))
        and math.isfinite(error_pct)
        and (abs(error_pct) > TOLERANCE_PCT)
    )


def prediction_note(lever: str, error_pct: float) -> str | None:
    """``lever`` (one, or a combination ``a+b``) predicted ``error_pct`` off its
    measurement: why, where it is beyond the tolerance (None within it)."""
    if not beyond(error_pct):
        return None
    parts = [p for p in str(lever).split("+") if p]
    left = [f"{_base(p)}: {LEAVES_OUT[_base(p)]}" for p in parts if _base(p) in LEAVES_OUT]
    why = "; ".join(left) if left else "its model names nothing it leaves out"
    head = f"predicted {error_pct:+.0f} % off the measurement (beyond ±{TOLERANCE_PCT:.0f} %)"
    return f"{head}: {why}"


def _base(part: str) -> str:
    """A lever's name without its value (``batch=16`` → ``batch``, ``optimizer=adamw-fused``
    → ``adamw-fused``)."""
    name, _, value = part.partition("=")
    return value if name == "optimizer" else name
