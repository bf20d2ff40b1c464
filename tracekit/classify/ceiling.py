"""Roofs are ceilings: a roof that an operator beats is not the device's limit.

A measured ceiling (``tracekit collect`` times one large matmul per precision and one
device-to-device copy) can sit below what the best kernels reach: on the H200 fixture the
fp32 matmul measured 51.2 TFLOP/s while the lm_head GEMM ran at 53.1 TFLOP/s, 104 % of
that "roof". :func:`raise_beaten` looks at the operators' attained rates once they are
known and, for every pipe (and the memory bandwidth) whose *measured* roof an operator
beats, uses the larger of the measured and the spec-sheet figure, with a source that says
so. A roof that is still beaten (no spec figure above it, or the spec itself beaten) is
kept and said in a note; the report repeats it beside any figure above 100 %
(:func:`tracekit.summary.roofs.roof_note`).

Only evidence the model cannot have inflated counts: operators timed over at least
:data:`MIN_DUR_NS` whose cost needed no assumption (no ``cost_note``, such as tensor-list
sizes the profiler did not record), and

* **compute**: operators of a matrix class (GEMM, attention, convolution), whose FLOPs
  follow exactly from their shapes (or were counted); a fused Triton kernel's FLOPs are
  modelled from the list of operators it fused and prove nothing about the hardware;
* **bandwidth**: operators whose minimal traffic (every input read and every output
  written once) is at least twice the L2 cache, so that it cannot have been served from
  L2, at ``min(measured, modelled bytes) / time`` — a counter joined from another launch
  of the same signature can overstate a kernel's bytes. Smaller operators above the roof
  are L2 hits: a note, no new roof.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd

from tracekit.classify.devices import SPECS, Roofline
from tracekit.classify.families.registry import MATRIX_CLASSES

T = 1e12
MEASURED = "measured"  # how a measured roof's source begins (devices.py)
MIN_DUR_NS = 10_000  # an operator's GPU time below this is too short to time a rate
L2_FACTOR = 2.0  # minimal traffic above this many L2 sizes cannot be L2 hits


def _op_label(ops: pd.DataFrame, i: int) -> str:
    name = str(ops["name"].iloc[i]) if "name" in ops else "an operator"
    dims = ops["input_dims"].iloc[i] if "input_dims" in ops else None
    return f"{name} {dims}" if isinstance(dims, str) and dims else name


def _best(ops: pd.DataFrame, rate: np.ndarray, mask: np.ndarray) -> int | None:
    """Row of the highest finite ``rate`` among ``mask`` (None: none)."""
    ok = mask & np.isfinite(rate)
    if not ok.any():
        return None
    return int(np.flatnonzero(ok)[np.argmax(rate[ok])])


def _rate(v: float, unit: str) -> str:
    return f"{v / T:.1f} T{unit}" if v >= 1e11 else f"{v / 1e9:.0f} G{unit}"


def raise_beaten(roof: Roofline, ops: pd.DataFrame) -> tuple[Roofline, list[str]]:
    """``roof`` with every measured roof that an operator of ``ops`` (the ``op_roofline``
    table: ``pipe``, ``attained_flops``, ``attained_bw``, ``class``) beats replaced by the
    spec figure where that is higher; the notes saying what changed or stays beaten.
    Returns ``roof`` itself when nothing is beaten."""
    if not len(ops) or not roof.known:
        return roof, []
    spec = SPECS.get(roof.spec_key) if roof.spec_key else None
    peaks, sources = dict(roof.peaks), dict(roof.peak_sources)
    notes: list[str] = []
    pipes = ops["pipe"].astype(object).to_numpy()
    flops = ops["attained_flops"].to_numpy(dtype=np.float64)
    note = ops["cost_note"].astype(object) if "cost_note" in ops else pd.Series([None] * len(ops))
    # timed long enough, and costed from recorded shapes without assumptions
    long = (ops["gpu_dur"].to_numpy(dtype=np.float64) >= MIN_DUR_NS) & ~note.map(bool).to_numpy()
    matrix = ops["class"].astype(object).isin(list(MATRIX_CLASSES)).to_numpy() & long
    for pipe, peak in roof.peaks.items():
        i = _best(ops, flops, pipes == pipe)
        if i is None or not flops[i] > peak:
            continue
        what = f"{_op_label(ops, i)} attains {_rate(flops[i], 'FLOP/s')}"
        spec_peak = spec.peaks_tflops.get(pipe, math.nan) * T if spec else math.nan
        measured = sources.get(pipe, "").startswith(MEASURED)
        j = _best(ops, flops, (pipes == pipe) & matrix)
        if j is not None and flops[j] > peak:
            what = f"{_op_label(ops, j)} attains {_rate(flops[j], 'FLOP/s')}"
        if measured and spec_peak > peak and j is not None and flops[j] > peak:
            peaks[pipe] = spec_peak
            sources[pipe] = (
                f"spec, above the measured {_rate(peak, 'FLOP/s')} that an operator beat "
                f"({what}; {sources[pipe]}): {spec.source if spec else ''}"
            )
            notes.append(
                f"roofs are ceilings: {pipe} uses the spec's {_rate(spec_peak, 'FLOP/s')}, "
                f"not the measured {_rate(peak, 'FLOP/s')}: {what}"
            )
        elif j is None or not flops[j] > peak:
            notes.append(
                f"{what} by its modelled FLOPs, above the {pipe} roof "
                f"{_rate(peak, 'FLOP/s')}: not a matrix operator timed over "
                f"{MIN_DUR_NS / 1e3:.0f} µs, so not taken as evidence that the roof is higher"
            )
        else:
            notes.append(
                f"{what}, above the {pipe} roof {_rate(peak, 'FLOP/s')} "
                f"({sources.get(pipe, 'unknown source').split(':')[0]}) and no higher "
                "figure is known: its share of the roof is above 100 %"
            )
    bw, bw_src = roof.bandwidth, roof.bandwidth_source
    copies = ops["class"].astype(object).isin(["memcpy", "memset"]).to_numpy()
    nbw = ops["attained_bw"].to_numpy(dtype=np.float64)
    i = _best(ops, nbw, ~copies)
    # the evidence: the smaller of measured and minimal bytes of operators beyond L2's reach
    model = ops["bytes_model"].to_numpy(dtype=np.float64)
    sure = np.fmin(ops["bytes"].to_numpy(dtype=np.float64), model)
    with np.errstate(invalid="ignore", divide="ignore"):
        sure_bw = sure / (ops["gpu_dur"].to_numpy(dtype=np.float64) * 1e-9)
    big = (model >= L2_FACTOR * roof.l2_bytes) if roof.l2_bytes else np.zeros(len(ops), bool)
    j = _best(ops, sure_bw, ~copies & long & big)
    if bw and i is not None and nbw[i] > bw:
        what = f"{_op_label(ops, i)} moves {_rate(nbw[i], 'B/s')}"
        spec_bw = spec.bandwidth_gbs * 1e9 if spec else math.nan
        beaten = j is not None and sure_bw[j] > bw
        if beaten and j is not None:
            what = f"{_op_label(ops, j)} moves at least {_rate(sure_bw[j], 'B/s')}"
        if bw_src.startswith(MEASURED) and spec_bw > bw and beaten:
            bw_src = (
                f"spec, above the measured {_rate(bw, 'B/s')} that an operator beat "
                f"({what}; {bw_src}): {spec.source if spec else ''}"
            )
            notes.append(
                f"roofs are ceilings: the bandwidth roof is the spec's {_rate(spec_bw, 'B/s')}"
                f", not the measured {_rate(bw, 'B/s')}: {what}"
            )
            bw = spec_bw
        elif not beaten:
            notes.append(
                f"{what}, above the bandwidth roof {_rate(bw, 'B/s')}: L2 hits (its bytes "
                "are a DRAM figure, its tensors fit in L2), not evidence of a higher roof"
            )
        else:
            notes.append(
                f"{what}, above the bandwidth roof {_rate(bw, 'B/s')} "
                f"({bw_src.split(':')[0]}) and no higher figure is known"
            )
    if peaks == roof.peaks and bw == roof.bandwidth:
        return roof, notes
    raised = replace(roof, peaks=peaks, peak_sources=sources, bandwidth=bw, bandwidth_source=bw_src)
    return replace(raised, notes=(*roof.notes, *notes)), notes
