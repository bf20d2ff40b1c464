"""The parts of a training step a lever rewrites, found in the parsed trace.

A :class:`Region` is host time (merged intervals per CPU thread) plus the GPU activities
launched inside it, with the number of operators it holds. The lever models
(``tracekit.advise.effects``) scale a region's host time and its kernels on the step's
critical-path graph.

* :func:`optimizer_region`: inside torch's ``Optimizer.step#…`` annotation.
* :func:`attention_region`: the core of the naive attention — the operators whose inputs
  have the heads' layout (``(B, H, ·, ·)``, ``(B·H, ·, ·)``) or the ``T × T`` attention
  matrix: the two matmuls, the scale, the mask, softmax, dropout, and their backward nodes
  (lifted to their ``autograd::engine::evaluate_function`` wrapper). The transposes of
  ``q, k, v`` and of the output and their ``TransposeBackward0`` are left out:
  scaled_dot_product_attention keeps them.
* :func:`forward_region`: the forward's outermost operators without a vocabulary-sized
  input (the transformer blocks: not the embedding, the LM head or the loss).
* :func:`forward_span_region`: on each thread, from the first to the last of those
  operators that end before the backward's first operator: the blocks' forward with the
  Python between its operators (what a checkpointed block runs again).
* :func:`compute_region`: everything in the step but the optimizer and ``zero_grad``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

THREAD_MASK = 0xFFFFFFFF  # the critical path names threads by tid & THREAD_MASK
OPTIMIZER_STEP = "Optimizer.step#"
ZERO_GRAD = "Optimizer.zero_grad#"
WRAPPER = "autograd::engine::evaluate_function:"
PROFILER_STEP = "ProfilerStep#"
# backward nodes of views that scaled_dot_product_attention keeps
KEPT_BY_SDPA = ("aten::transpose", "TransposeBackward0")


@dataclass(frozen=True)
class Region:
    """Host intervals per thread and the GPU activities launched inside them."""

    name: str
    intervals: dict[int, np.ndarray]  # thread -> (n, 2) int64 sorted, disjoint [start, end)
    kernels: np.ndarray  # bool per row of trace.kernels
    ops: int  # outermost operators inside it, over the trace's analysed steps
    host_ns: int  # host time it covers (sum of the intervals)

    def kernel_rows(self) -> np.ndarray:
        out: np.ndarray = np.flatnonzero(self.kernels)
        return out


def merge(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Sorted, disjoint (n, 2) intervals covering ``[starts, ends)``."""
    if not len(starts):
        return np.zeros((0, 2), np.int64)
    o = np.argsort(starts, kind="stable")
    s, e = np.asarray(starts, np.int64)[o], np.asarray(ends, np.int64)[o]
    run_end = np.maximum.accumulate(e)
    new = np.r_[True, s[1:] > run_end[:-1]]
    idx = np.flatnonzero(new)
    out: np.ndarray = np.c_[s[idx], np.maximum.reduceat(e, idx)]
    return out


def covered(iv: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Length of ``[lo, hi)`` inside the intervals ``iv`` (sorted, disjoint), per pair."""
    if not len(iv) or not len(lo):
        return np.zeros(len(lo), np.int64)
    cum = np.r_[0, np.cumsum(iv[:, 1] - iv[:, 0])]

    def upto(x: np.ndarray) -> np.ndarray:  # covered length in (-inf, x)
        k = np.searchsorted(iv[:, 0], x, "right")  # intervals starting before x
        full = cum[np.maximum(k - 1, 0)]
        last = np.where(k > 0, np.clip(x - iv[np.maximum(k - 1, 0), 0], 0, None), 0)
        part = np.minimum(last, iv[np.maximum(k - 1, 0), 1] - iv[np.maximum(k - 1, 0), 0])
        out: np.ndarray = np.where(k > 0, full + part, 0)
        return out

    res: np.ndarray = upto(np.asarray(hi, np.int64)) - upto(np.asarray(lo, np.int64))
    return res


def subtract(iv: np.ndarray, cut: np.ndarray) -> np.ndarray:
    """Intervals ``iv`` minus ``cut`` (both sorted, disjoint)."""
    if not len(cut) or not len(iv):
        return iv
    pts = np.unique(np.r_[iv.ravel(), cut.ravel()])
    a, b = pts[:-1], pts[1:]  # elementary segments: each inside or outside either set
    keep = (covered(iv, a, b) == b - a) & (covered(cut, a, b) == 0)
    return merge(a[keep], b[keep])


def _thread(df: pd.DataFrame) -> np.ndarray:
    out: np.ndarray = df["tid"].to_numpy(np.int64) & THREAD_MASK
    return out


def analysed_ops(trace: Any) -> pd.DataFrame:
    """The trace's CPU operators and annotations in analysed steps (step >= 0)."""
    o = trace.ops
    out: pd.DataFrame = o[(o["step"] >= 0).to_numpy()]
    return out


def region_of(trace: Any, name: str, rows: np.ndarray) -> Region:
    """The region of the operators ``rows`` (rows of ``trace.ops``): their spans."""
    o = trace.ops
    ts = o["ts"].to_numpy(np.int64)[rows]
    end = ts + o["dur"].to_numpy(np.int64)[rows]
    th = _thread(o)[rows]
    by: dict[int, np.ndarray] = {}
    for t in np.unique(th).tolist():
        m = th == t
        by[int(t)] = merge(ts[m], end[m])
    return _region(trace, name, by, len(rows))


def _region(trace: Any, name: str, by: dict[int, np.ndarray], ops: int) -> Region:
    k, rt = trace.kernels, trace.runtime
    inside = np.zeros(len(k), bool)
    rid = k["runtime_id"].to_numpy(np.int64) if len(k) else np.zeros(0, np.int64)
    ok = (rid >= 0) & (rid < len(rt))
    if ok.any():
        r_ts = rt["ts"].to_numpy(np.int64)[rid[ok]]
        r_th = _thread(rt)[rid[ok]]
        hit = np.zeros(int(ok.sum()), bool)
        for t, iv in by.items():
            m = r_th == t
            if m.any() and len(iv):
                pos = np.searchsorted(iv[:, 0], r_ts[m], "right") - 1
                hit[m] = (pos >= 0) & (r_ts[m] < iv[np.maximum(pos, 0), 1])
        inside[np.flatnonzero(ok)] = hit
    host = int(sum(int((iv[:, 1] - iv[:, 0]).sum()) for iv in by.values()))
    return Region(name, by, inside, ops, host)


def outermost(ops: pd.DataFrame, matched: np.ndarray) -> np.ndarray:
    """Rows of ``ops`` (the whole table, row = op_id) that match and have no matching
    ancestor."""
    parent = ops["parent"].to_numpy(np.int64)
    depth = ops["depth"].to_numpy(np.int64)
    covered_by = np.zeros(len(ops), bool)  # some ancestor matched
    for d in range(1, int(depth.max()) + 1 if len(depth) else 0):
        rows = np.flatnonzero(depth == d)
        p = parent[rows]
        ok = p >= 0
        covered_by[rows[ok]] = matched[p[ok]] | covered_by[p[ok]]
    out: np.ndarray = np.flatnonzero(matched & ~covered_by)
    return out


def annotation_rows(trace: Any, prefix: str) -> np.ndarray:
    o = trace.ops
    m = (o["category"] == "user_annotation").to_numpy(bool) & (o["step"] >= 0).to_numpy(bool)
    m &= o["name"].astype(str).str.startswith(prefix).to_numpy(bool)
    out: np.ndarray = np.flatnonzero(m)
    return out


def children(trace: Any, rows: np.ndarray) -> np.ndarray:
    """Rows of the direct children of ``rows``."""
    parent = trace.ops["parent"].to_numpy(np.int64)
    out: np.ndarray = np.flatnonzero(np.isin(parent, rows) & (parent >= 0))
    return out


def optimizer_region(trace: Any) -> Region:
    """Inside ``Optimizer.step#…``; ``ops``: the annotation's direct children (one per
    foreach or fused call, or per parameter and operation for the loop)."""
    rows = annotation_rows(trace, OPTIMIZER_STEP)
    r = region_of(trace, "optimizer", rows)
    kids = children(trace, rows)
    is_op = (trace.ops["category"] == "cpu_op").to_numpy(bool)[kids]
    return Region(r.name, r.intervals, r.kernels, int(is_op.sum()), r.host_ns)


def shapes_of(text: Any) -> list[tuple[int, ...]]:
    """The tensor shapes in an ``input_dims`` JSON text (tensor lists flattened)."""
    if not isinstance(text, str):
        return []
    try:
        v = json.loads(text)
    except ValueError:
        return []
    out: list[tuple[int, ...]] = []
    for x in v if isinstance(v, list) else []:
        if isinstance(x, list) and x and isinstance(x[0], list):
            out += [tuple(int(d) for d in y) for y in x if isinstance(y, list)]
        elif isinstance(x, list) and x and all(isinstance(d, int) for d in x):
            out.append(tuple(int(d) for d in x))
    return out


def _match_dims(dims: pd.Series, test: Any) -> np.ndarray:
    codes, uniq = pd.factorize(dims)
    hit = np.array([bool(test(shapes_of(u))) for u in uniq] + [False], bool)
    out: np.ndarray = hit[np.where(codes >= 0, codes, len(uniq))]
    return out


def attention_region(trace: Any, batch: int, heads: int, seq: int) -> Region:
    """The naive attention's core (module docstring)."""
    B, H, T = batch, heads, seq

    def core(shapes: Iterable[tuple[int, ...]]) -> bool:
        for s in shapes:
            if len(s) == 4 and s[2] == T and s[3] == T:
                return True
            if len(s) == 4 and s[0] == B and s[1] == H:
                return True
            if len(s) == 3 and s[0] == B * H:
                return True
        return False

    o = trace.ops
    matched = _match_dims(o["input_dims"], core) & (o["step"] >= 0).to_numpy(bool)
    matched &= ~o["name"].astype(str).isin(KEPT_BY_SDPA).to_numpy(bool)
    matched &= (o["category"] == "cpu_op").to_numpy(bool)
    # a backward node counts with its engine wrapper
    parent = o["parent"].to_numpy(np.int64)
    names = o["name"].astype(str).to_numpy(object)
    p = parent[matched]
    wrap = p[(p >= 0)]
    wrap = wrap[np.char.startswith(names[wrap].astype(str), WRAPPER)] if len(wrap) else wrap
    matched[wrap] = True
    rows = outermost(o, matched)
    return region_of(trace, "attention", rows)


def forward_region(trace: Any, vocab: int) -> Region:
    """The forward's outermost operators (children of the step's annotation) without a
    vocabulary-sized input: the transformer blocks' forward."""
    o = trace.ops
    steps = annotation_rows(trace, PROFILER_STEP)
    kids = children(trace, steps)
    is_op = (o["category"] == "cpu_op").to_numpy(bool)[kids]
    fwd = ~o["is_backward"].to_numpy(bool)[kids]
    big = _match_dims(o["input_dims"].iloc[kids], lambda ss: any(vocab in s for s in ss))
    rows = kids[is_op & fwd & ~big]
    return region_of(trace, "forward", rows)


def forward_span_region(trace: Any, vocab: int) -> Region:
    """The blocks' forward as a span per thread and step (module docstring): the most
    forward operators that run between two stops (an operator with a vocabulary-sized
    input — the embedding, the LM head — or a backward one), from the first one's start
    to the last one's end."""
    f = forward_region(trace, vocab)
    o = analysed_ops(trace)
    top = o[(o["category"] == "cpu_op").to_numpy(bool) & (o["depth"] <= 1).to_numpy(bool)]
    big = _match_dims(top["input_dims"], lambda ss: any(vocab in s for s in ss))
    stops = top["ts"].to_numpy(np.int64)[big | top["is_backward"].to_numpy(bool)]
    st = trace.steps[(trace.steps["step"] >= 0).to_numpy()]
    by: dict[int, np.ndarray] = {}
    for t, iv in f.intervals.items():
        spans = []
        for lo, dur in zip(st["cpu_ts"].tolist(), st["cpu_dur"].tolist(), strict=True):
            inside = iv[(iv[:, 0] >= lo) & (iv[:, 1] <= lo + dur)]
            if not len(inside):
                continue
            # the operators between two stops, the run that holds most of them: the blocks
            gap = np.searchsorted(np.sort(stops), inside[:, 0])
            m = gap == np.bincount(gap).argmax()
            spans.append((int(inside[m, 0].min()), int(inside[m, 1].max())))
        if spans:
            by[t] = np.asarray(spans, np.int64)
    return _region(trace, "forward span", by, f.ops)


def compute_region(trace: Any) -> Region:
    """The step's forward and backward: every thread's time in the step, except inside
    the optimizer's step and ``zero_grad``."""
    st = trace.steps[(trace.steps["step"] >= 0).to_numpy()]
    span = merge(st["cpu_ts"].to_numpy(np.int64), (st["cpu_ts"] + st["cpu_dur"]).to_numpy(np.int64))
    out_rows = np.r_[annotation_rows(trace, OPTIMIZER_STEP), annotation_rows(trace, ZERO_GRAD)]
    o = trace.ops
    cut = merge(
        o["ts"].to_numpy(np.int64)[out_rows],
        (o["ts"] + o["dur"]).to_numpy(np.int64)[out_rows],
    )
    threads = np.unique(np.r_[_thread(analysed_ops(trace)), _thread(trace.runtime)])
    by = {int(t): subtract(span, cut) for t in threads.tolist()}
    a = analysed_ops(trace)
    n = int(((a["category"] == "cpu_op") & (a["depth"] <= 1)).sum())
    return _region(trace, "compute", by, n)
