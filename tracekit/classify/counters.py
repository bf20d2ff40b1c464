"""Measured intensity: Nsight Compute counters (:mod:`tracekit.classify.ncu`) joined to the
trace's kernels.

ncu and Kineto name kernels differently (``<unnamed>`` vs ``(anonymous namespace)``,
``(int)8`` vs ``8``, abbreviated parameter lists), so kernels are compared by a normalised
base name (:func:`~tracekit.classify.ncu.base_name`) plus grid and block. In
``launch-order`` mode the profiled sequence is aligned with each step's kernels in launch
order (longest matching blocks, so a missing or extra kernel does not shift the rest); in
``signature`` mode every kernel takes the counters of the profiled launch with its
signature and all but the first of a step are marked ``extrapolated``. Unmatched kernels
on either side are reported.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracekit.classify.ncu import base_name
from tracekit.errors import TraceError


def _measured_pipe(
    row_tensor: float, tensor_pipe: object, f32: float, f16: float, f64: float
) -> str | None:
    simt = f32 + f16 + f64
    if row_tensor > 0 and row_tensor >= simt and isinstance(tensor_pipe, str):
        return tensor_pipe
    if simt > 0:
        return "simt_fp64" if f64 > f32 + f16 else "simt_fp32"
    return None


def _dims(kernels: pd.DataFrame, prefix: str) -> list[str]:
    cols = [f"{prefix}_{a}" for a in "xyz"]
    if not all(c in kernels for c in cols):
        return [""] * len(kernels)
    vals = kernels[cols].fillna(1).astype(np.int64).to_numpy()
    if not len(vals):
        return []
    uniq, inv = np.unique(vals, axis=0, return_inverse=True)  # text once per distinct shape
    text = [f"{a},{b},{c}" for a, b, c in uniq.tolist()]
    return [text[i] for i in inv.reshape(-1).tolist()]


def _aligned(ts: list[int], cs: list[int]) -> list[tuple[int, int]]:
    """Pairs (i, j) aligning sequence ``ts`` with ``cs`` in order (longest matching blocks:
    a missing or extra kernel on either side does not shift the rest)."""
    sm = difflib.SequenceMatcher(None, ts, cs, autojunk=False)
    return [(a + d, b + d) for a, b, size in sm.get_matching_blocks() for d in range(size)]


@dataclass
class _TraceKernels:
    """The trace's kernels (not memcpy/memset) in launch order, with their signatures
    (base name, grid, block), operator input shapes and steps."""

    kernel_id: np.ndarray
    names: np.ndarray
    sig: list[tuple[str, str, str]]
    shapes: np.ndarray
    steps: np.ndarray
    step_ids: list[int]

    @classmethod
    def of(cls, kernels: pd.DataFrame) -> _TraceKernels:
        k = kernels[kernels["kind"].astype(str) == "kernel"] if "kind" in kernels else kernels
        order_col = "correlation" if "correlation" in k and (k["correlation"] >= 0).any() else "ts"
        k = k.sort_values(order_col, kind="stable")
        sig = list(
            zip(
                [base_name(str(s)) for s in k["name"]],
                _dims(k, "grid"),
                _dims(k, "block"),
                strict=True,
            )
        )
        shapes = (
            k["op_input_dims"].astype(object).fillna("").astype(str).to_numpy()
            if "op_input_dims" in k
            else np.full(len(k), "", dtype=object)
        )
        steps = k["step"].to_numpy() if "step" in k else np.zeros(len(k), dtype=np.int64)
        step_ids = sorted(set(steps.tolist()))
        if any(s >= 0 for s in step_ids):
            step_ids = [s for s in step_ids if s >= 0]
        names = k["name"].astype(str).to_numpy()
        return cls(k["kernel_id"].to_numpy(), names, sig, shapes, steps, step_ids)

    def per_step(self) -> float:
        """Median kernels per step."""
        counts = [int((self.steps == s).sum()) for s in self.step_ids]
        return float(np.median(counts)) if self.step_ids else 0


class _Join:
    """Counter rows matched to trace kernels, step by step. Counter rows ``0..n_sig-1``
    are the per-signature (or every-launch) pass, the rest the GEMM launches."""

    def __init__(self, t: _TraceKernels, counters: pd.DataFrame, n_sig: int) -> None:
        self.t = t
        self.counter_names = counters["kernel_name"]
        self.csig = list(
            zip(counters["base_name"], counters["grid"], counters["block"], strict=True)
        )
        self.vocab: dict[tuple[str, str, str], int] = {}
        cs = [self.vocab.setdefault(sig, len(self.vocab)) for sig in self.csig]
        self.sig_rows, self.launch_rows = range(n_sig), range(n_sig, len(cs))
        self.sig_codes, self.launch_codes = cs[:n_sig], cs[n_sig:]
        self.first: dict[int, int] = {}  # signature code -> its first profiled row
        for ci in self.sig_rows:
            self.first.setdefault(cs[ci], ci)
        self.rows: list[tuple[int, int, bool]] = []  # (trace position, counter row, extrapolated)
        self.unmatched: list[dict[str, object]] = []

    def trace_miss(self, s: int, i: int, p: int) -> None:
        t = self.t
        self.unmatched.append(
            {"side": "trace", "step": s, "position": i, "name": t.names[p],
             "grid": t.sig[p][1], "block": t.sig[p][2]}
        )  # fmt: skip

    def ncu_miss(self, s: int, j: int) -> None:
        self.unmatched.append(
            {"side": "ncu", "step": s, "position": j, "name": self.counter_names.iloc[j],
             "grid": self.csig[j][1], "block": self.csig[j][2]}
        )  # fmt: skip

    def step(self, s: int, mode: str) -> None:
        """Join the kernels of step ``s``: GEMM launches first, then ``mode``."""
        pos = np.flatnonzero(self.t.steps == s)
        ts = [self.vocab.setdefault(self.t.sig[p], len(self.vocab)) for p in pos]
        todo = list(range(len(pos)))  # trace positions (in this step) still to join
        if len(self.launch_rows):
            todo = self._launches(s, pos, ts, todo)
        if mode == "signature":
            self._by_signature(s, pos, ts, todo)
        else:
            self._in_order(s, pos, ts, todo)

    def _launches(self, s: int, pos: np.ndarray, ts: list[int], todo: list[int]) -> list[int]:
        """Align the GEMM launches with the step's kernels; a kernel left over takes an
        aligned launch with its signature and operator shapes (extrapolated)."""
        hit_t, hit_c = set(), set()
        by_shape: dict[tuple[int, str], int] = {}  # (signature, op shapes) -> launch row
        for a, b in _aligned(ts, self.launch_codes):
            self.rows.append((int(pos[a]), self.launch_rows[b], False))
            hit_t.add(a)
            hit_c.add(b)
            by_shape.setdefault((ts[a], self.t.shapes[pos[a]]), self.launch_rows[b])
        for b in range(len(self.launch_rows)):
            if b not in hit_c:
                self.ncu_miss(s, self.launch_rows[b])
        for i in todo:
            if i in hit_t:
                continue
            row = by_shape.get((ts[i], self.t.shapes[pos[i]]))
            if row is not None:
                self.rows.append((int(pos[i]), row, True))
                hit_t.add(i)
        return [i for i in todo if i not in hit_t]

    def _by_signature(self, s: int, pos: np.ndarray, ts: list[int], todo: list[int]) -> None:
        """Each kernel takes the first profiled launch of its signature."""
        seen: set[int] = set()
        for i in todo:
            p, t = pos[i], ts[i]
            if t in self.first:
                self.rows.append((int(p), self.first[t], t in seen))
                seen.add(t)
            else:
                self.trace_miss(s, int(p), p)

    def _in_order(self, s: int, pos: np.ndarray, ts: list[int], todo: list[int]) -> None:
        """Align the profiled sequence with the step's kernels in launch order."""
        hits = _aligned([ts[i] for i in todo], self.sig_codes)
        hit_t, hit_c = set(), set()
        for a, b in hits:
            self.rows.append((int(pos[todo[a]]), b, False))
            hit_t.add(todo[a])
            hit_c.add(b)
        for i in todo:
            if i not in hit_t:
                self.trace_miss(s, i, pos[i])
        for j in self.sig_rows:
            if j not in hit_c:
                self.ncu_miss(s, j)


_JOINED = ("kernel_id", "ncu_id", "flops", "dram_bytes", "l2_bytes", "pipe", "extrapolated",
           "duration")  # fmt: skip
_UNMATCHED = ["side", "step", "position", "name", "grid", "block"]


def join_counters(
    kernels: pd.DataFrame,
    counters: pd.DataFrame,
    *,
    mode: str = "auto",
    launches: pd.DataFrame | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """Match counter rows to trace kernels.

    ``launches`` (optional, same columns as ``counters``): every launch of a subset of
    kernels, in order (the collector's GEMM pass, ``counters-gemm.csv``: all GEMM launches
    of the first transformer block and the LM head). They are aligned with each step's
    kernels in launch order; a kernel left over takes the counters of an aligned launch
    with the same name, grid, block *and operator input shapes* (``op_input_dims``) if
    there is one (``extrapolated``). The remaining kernels are joined to ``counters`` in
    ``mode``.

    Returns ``(joined, unmatched, notes)``: ``joined`` has one row per matched trace
    kernel (``kernel_id``, ``ncu_id``, ``flops``, ``dram_bytes``, ``l2_bytes``, ``pipe``,
    ``extrapolated``, ``duration``); ``unmatched`` lists kernels of either side without a
    partner (``side`` 'trace' | 'ncu', ``step``, ``position``, ``name``, ``grid``,
    ``block``).
    """
    if mode not in ("auto", "launch-order", "signature"):
        raise TraceError(f"unknown counters join mode {mode!r}")
    t = _TraceKernels.of(kernels)
    n_sig = len(counters)
    if launches is not None:
        counters = pd.concat([counters, launches], ignore_index=True)
    if mode == "auto":  # profiled once per launch configuration: fewer rows than a step has
        mode = "signature" if n_sig < 0.9 * t.per_step() else "launch-order"
    notes = [f"counters: {n_sig} profiled kernels joined in {mode} mode"]
    if launches is not None:
        notes.append(
            f"counters: {len(launches)} profiled GEMM launches joined in launch order first"
        )
    j = _Join(t, counters, n_sig)
    for s in t.step_ids:
        j.step(s, mode)
    um = pd.DataFrame(j.unmatched, columns=_UNMATCHED)
    notes += _join_notes(t, um, j.rows, n_sig, mode, launches is not None)
    if not j.rows:
        return pd.DataFrame(columns=list(_JOINED)), um, notes
    return _joined(t, counters, j.rows), um, notes


def _join_notes(
    t: _TraceKernels,
    um: pd.DataFrame,
    rows: list[tuple[int, int, bool]],
    n_sig: int,
    mode: str,
    launches: bool,
) -> list[str]:
    notes = []
    if not t.step_ids:
        notes.append("counters: the trace has no kernels to join")
    n_t = int((um["side"] == "trace").sum()) if len(um) else 0
    n_c = int((um["side"] == "ncu").sum()) if len(um) else 0
    if n_t or n_c:
        notes.append(
            f"counters: {n_t} trace kernels without counters, {n_c} profiled kernels "
            "without a trace kernel (see the unmatched table)"
        )
    if launches:
        n_sh = sum(1 for r in rows if r[2] and r[1] >= n_sig)
        if n_sh:
            notes.append(
                f"counters: {n_sh} GEMM launches carry the counters of a profiled launch "
                "with the same kernel and operator shapes (another transformer block)"
            )
    if mode == "signature":
        n_ex = sum(1 for r in rows if r[2] and r[1] < n_sig)
        notes.append(
            f"counters: profiled once per signature; {n_ex} kernel launches carry "
            "counters extrapolated from another launch of the same signature"
        )
    return notes


def _joined(
    t: _TraceKernels, counters: pd.DataFrame, rows: list[tuple[int, int, bool]]
) -> pd.DataFrame:
    """One row per matched trace kernel, with the counters' FLOPs, bytes and pipe."""
    tp, cr, ex = (np.array(v) for v in zip(*rows, strict=True))
    c = counters.iloc[cr]
    pipes = [
        _measured_pipe(a, b, x, y, z)
        for a, b, x, y, z in zip(
            c["tensor_flops"],
            c["tensor_pipe"],
            c["simt_flops_fp32"],
            c["simt_flops_fp16"],
            c["simt_flops_fp64"],
            strict=True,
        )
    ]
    out: pd.DataFrame = pd.DataFrame(
        {
            "kernel_id": t.kernel_id[tp],
            "ncu_id": c["ncu_id"].to_numpy(),
            "flops": c["flops"].to_numpy(float),
            "dram_bytes": c["dram_bytes"].to_numpy(float),
            "l2_bytes": c["l2_bytes"].to_numpy(float),
            "pipe": pipes,
            "extrapolated": ex.astype(bool),
            "duration": c["duration"].to_numpy(float),
        }
    )
    return out
