"""Where each kernel and operator sits on the roofline: its pipe's peak, its intensity,
memory- or compute-bound (against DRAM, or L2 where measured), the attained fraction."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from tracekit.classify.attribution import KernelCosts
from tracekit.classify.codes import combine_codes, factorized
from tracekit.classify.columns import KernelColumns
from tracekit.classify.devices import Roofline, pipe_for, pipe_from_kernel_name
from tracekit.classify.families.registry import is_convolution

NAN = math.nan

BOUNDS = ("memory-bound", "compute-bound", "unknown")
_BOUND_LABELS = np.array(BOUNDS, dtype=object)
_LEVELS = np.array(["dram", "compute", "l2", None], dtype=object)


def bounds(
    flops: np.ndarray,
    nbytes: np.ndarray,
    dur: np.ndarray,
    peak: np.ndarray,
    bw: float | None,
    l2_bytes: np.ndarray | None = None,
    l2_bw: float | None = None,
) -> dict[str, np.ndarray]:
    n = len(flops)
    bwv = bw if bw else NAN
    with np.errstate(divide="ignore", invalid="ignore"):
        intensity = np.where(nbytes > 0, flops / nbytes, np.where(flops > 0, np.inf, NAN))
        secs = dur.astype(float) * 1e-9
        att_f = np.where(secs > 0, flops / secs, NAN)
        att_b = np.where(secs > 0, nbytes / secs, NAN)
        roof_dram = np.minimum(peak, intensity * bwv)
        binding = roof_dram.copy()
        # labels as indices into _LEVELS / _BOUND_LABELS: one shared str object per label
        level = np.where(np.isfinite(roof_dram) & (roof_dram < peak), 0, 1)
        i_l2 = np.full(n, NAN)
        if l2_bytes is not None:
            i_l2 = np.where(l2_bytes > 0, flops / l2_bytes, NAN)
            if l2_bw:
                roof_l2 = np.minimum(peak, i_l2 * l2_bw)
                use_l2 = np.isfinite(roof_l2) & (roof_l2 < binding)
                binding = np.where(use_l2, roof_l2, binding)
                level[use_l2] = 2
        known = np.isfinite(flops) & np.isfinite(nbytes) & np.isfinite(peak) & math.isfinite(bwv)
        known &= (flops > 0) | (nbytes > 0)
        mem = binding < peak
        bound = np.where(known, np.where(mem, 0, 1), 2)
        roof_pct = np.where(
            known,
            np.where(
                mem & (flops > 0),
                att_f / binding * 100.0,
                np.where(mem, att_b / bwv * 100.0, att_f / peak * 100.0),
            ),
            NAN,
        )
    level[~known] = 3
    return {
        "intensity": np.where(np.isinf(intensity), NAN, intensity),
        "intensity_l2": i_l2,
        "attained_flops": att_f,
        "attained_bw": att_b,
        "bound": _BOUND_LABELS[bound],
        "bound_level": _LEVELS[level],
        "roof_pct": roof_pct,
        "ridge": np.where(np.isfinite(peak), peak / bwv, NAN),
    }


def peaks(roof: Roofline, pipes: Any) -> np.ndarray:
    """Peak FLOP/s of each pipe name (NaN: none), looked up once per distinct pipe."""
    codes, uniq = pd.factorize(np.asarray(pipes, dtype=object))
    vals = [roof.peak(p) if isinstance(p, str) else None for p in uniq]
    return np.array([*vals, None], dtype=float)[codes]  # code -1 (missing): the last


def kernel_pipes(
    k: KernelColumns, kcls: np.ndarray, cost: KernelCosts, roof: Roofline
) -> np.ndarray:
    """Pipe of every kernel (copies: None)."""
    pipe = _pipes(kcls, cost.dtype, cost.op_name, k.name_codes, k.name_uniq, roof)
    pipe[cost.is_copy] = None
    return pipe


def _pipes(
    kcls: np.ndarray,
    dtype: np.ndarray,
    cost_name: np.ndarray,
    name_codes: np.ndarray,
    name_uniq: np.ndarray,
    roof: Roofline,
) -> np.ndarray:
    """Pipe of every kernel, computed once per distinct (class, dtype, conv, kernel name);
    ``name_codes`` index the distinct kernel names ``name_uniq``."""
    n = len(kcls)
    if not n:
        return np.zeros(0, dtype=object)
    named = [pipe_from_kernel_name(str(u)) for u in name_uniq]
    conv_codes, uniq_ops = pd.factorize(pd.Series(cost_name, dtype=object), sort=False)
    is_conv = np.array([is_convolution(str(o)) for o in uniq_ops], dtype=bool)
    conv = np.zeros(n, dtype=np.int64)
    if len(is_conv):
        conv = np.where(conv_codes >= 0, is_conv[np.maximum(conv_codes, 0)], False)
    cls_codes, cls_vals = factorized(pd.Series(kcls, dtype=object), n)
    dt_codes, dt_vals = factorized(pd.Series(dtype, dtype=object), n)
    conv = conv.astype(np.int64)
    codes, first = combine_codes(cls_codes, dt_codes, conv, name_codes)
    vals = np.array(
        [
            pipe_for(cls_vals[c] or "", dt_vals[d], roof, conv=bool(cv), named=named[k])
            for c, d, cv, k in zip(
                cls_codes[first].tolist(),
                dt_codes[first].tolist(),
                conv[first].tolist(),
                name_codes[first].tolist(),
                strict=True,
            )
        ],
        dtype=object,
    )
    out: np.ndarray = vals[codes]
    return out


def kernel_bounds(
    cost: KernelCosts, pipe: np.ndarray, dur: np.ndarray, roof: Roofline
) -> dict[str, np.ndarray]:
    """:func:`bounds` of every kernel, with its pipe's ``peak``: copies are memory-bound
    (host transfers get no roof fraction), everything ``unknown`` on an unknown device."""
    peak = peaks(roof, pipe)
    b = bounds(cost.flops, cost.bytes, dur, peak, roof.bandwidth, cost.l2_bytes, roof.l2_bandwidth)
    b["bound"][cost.is_copy & np.isfinite(cost.bytes)] = "memory-bound"
    b["roof_pct"][cost.host_copy] = NAN
    if not roof.known:
        b["bound"][:] = "unknown"
    b["peak"] = peak
    return b
