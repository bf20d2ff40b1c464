"""The output tables built from the per-kernel rows: operators (``op_roofline``), classes
and steps (columns: :mod:`tracekit.classify.schema`)."""

from __future__ import annotations

import math
from typing import Any, cast

import numpy as np
import pandas as pd

from tracekit.classify.attribution import KernelCosts
from tracekit.classify.bounds import BOUNDS, bounds, peaks
from tracekit.classify.classes import OpContext, id_index
from tracekit.classify.codes import group_sums
from tracekit.classify.columns import KernelColumns, col, out_column
from tracekit.classify.devices import Roofline
from tracekit.classify.families.registry import CLASS_GROUPS, CLASSES
from tracekit.classify.result import in_scope
from tracekit.classify.schema import TABLES
from tracekit.schema import COMPUTE_KINDS

NAN = math.nan


def kernel_table(
    k: KernelColumns,
    cls: dict[str, np.ndarray],
    cost: KernelCosts,
    pipe: np.ndarray,
    b: dict[str, np.ndarray],
    roof: Roofline,
) -> pd.DataFrame:
    """The ``kernel_roofline`` table: one row per GPU activity."""
    kernels, n = k.frame, k.n
    kr = pd.DataFrame(
        {
            "kernel_id": kernels["kernel_id"].to_numpy(dtype=np.int64),
            "name": out_column(kernels.get("name"), n, k.names),
            "kind": out_column(kernels.get("kind"), n, k.kind),
            "class": cls["class"],
            "class_source": cls["class_source"],
            "class_rule": cls["class_rule"],
            "fused_ops": cls["fused_ops"],
            "device": k.device.astype(np.int32),
            "stream": col(kernels, "stream", -1, np.int64),
            "op_id": col(kernels, "op_id", -1, np.int64),
            "op_name": out_column(kernels.get("op_name"), n),
            "autograd_node": cls["autograd_node"],
            "top_op": out_column(kernels.get("top_op_name"), n),
            "module": out_column(kernels.get("module"), n),
            "step": k.step.astype(np.int32),
            "ts": col(kernels, "ts", 0, np.int64),
            "dur": k.dur,
            "cost_op_id": cost.op_id.astype(np.int64),
            "cost_op_name": cost.op_name,
            "flops": cost.flops,
            "bytes": cost.bytes,
            "flops_model": cost.flops_model,
            "bytes_model": cost.bytes_model,
            "l2_bytes": cost.l2_bytes,
            "intensity": b["intensity"],
            "intensity_l2": b["intensity_l2"],
            "pipe": pipe,
            "peak_flops": b["peak"],
            "peak_bw": np.full(n, roof.bandwidth if roof.bandwidth else NAN),
            "ridge": b["ridge"],
            "bound": b["bound"],
            "bound_level": b["bound_level"],
            "attained_flops": b["attained_flops"],
            "attained_bw": b["attained_bw"],
            "roof_pct": b["roof_pct"],
            "source": cost.source,
            "extrapolated": cost.extrapolated,
            "cost_note": cost.note,
        }
    )
    out: pd.DataFrame = kr[[c.name for c in TABLES["kernel_roofline"]]]
    return out


_SUMMED = ("flops", "bytes", "flops_model", "bytes_model")
_FIRST = ("pipe", "source", "cost_note", "autograd_node")


def op_roofline(
    kr: pd.DataFrame, ops: pd.DataFrame, roof: Roofline, ctx: OpContext | None = None
) -> pd.DataFrame:
    """One row per cost operator (else launching operator) of the kernels, by GPU time.

    Only numbers and row positions are grouped: per operator the sums of its kernels (in
    the order longest first), the position of its longest kernel with a pipe, source, note
    and autograd node, and its class of most GPU time; the text is taken once at the end."""
    cols = [c.name for c in TABLES["op_roofline"]]
    key = np.where(kr["cost_op_id"] >= 0, kr["cost_op_id"], kr["op_id"])
    sel = np.flatnonzero(key >= 0)
    if not len(sel):
        return cast(pd.DataFrame, pd.DataFrame({c: pd.Series(dtype=object) for c in cols}))
    dur = kr["dur"].to_numpy(dtype=np.int64)
    rows = sel[np.argsort(-dur[sel], kind="stable")]  # longest first, ties in kernel order
    res = _op_sums(kr, key, dur, rows)
    _op_columns(res, ops, ctx)
    _op_bounds(res, roof)
    return cast(pd.DataFrame, pd.DataFrame({c: res[c] for c in cols}))


def _op_sums(
    kr: pd.DataFrame, key: np.ndarray, dur: np.ndarray, rows: np.ndarray
) -> dict[str, Any]:
    """Per operator (``key``), by GPU time: the sums of its kernels ``rows`` (longest
    first), the columns of its longest kernel that has them, its class of most GPU time."""
    cls_codes, cls_uniq = pd.factorize(kr["class"], sort=True)
    at = np.arange(len(rows), dtype=float)
    k = pd.DataFrame(
        {
            "_key": key[rows],
            "dur": dur[rows],
            **{c: kr[c].to_numpy(dtype=float)[rows] for c in _SUMMED},
            # position in ``rows`` where the column has a value
            **{c: np.where(kr[c].notna().to_numpy()[rows], at, NAN) for c in _FIRST},
        }
    )
    g = k.groupby("_key", sort=True)
    size = g.size()
    out = {"op_id": size.index.to_numpy(dtype=np.int64), "gpu_dur": g["dur"].sum().to_numpy()}
    out["kernel_count"] = size.to_numpy()
    sums = g[list(_SUMMED)].sum(min_count=1)
    partial = g[list(_SUMMED)].count().to_numpy() < size.to_numpy()[:, None]
    for i, c in enumerate(_SUMMED):
        v = sums[c].to_numpy(dtype=float, copy=True)
        v[partial[:, i]] = NAN  # a NaN in any kernel: total unknown
        out[c] = v
    firsts = g[list(_FIRST)].first()
    first = {c: firsts[c].to_numpy(dtype=float) for c in _FIRST}
    # each op's class of most GPU time (ties: the first class name), from a (op, class) grid
    op_code = np.searchsorted(out["op_id"], key[rows])
    n_cls = len(cls_uniq)
    cell = op_code * n_cls + cls_codes[rows]
    grid = np.bincount(cell, weights=dur[rows], minlength=len(size) * n_cls)
    grid[np.bincount(cell, minlength=len(grid)) == 0] = -1.0  # absent, even beside 0 ns
    best = grid.reshape(len(size), n_cls).argmax(axis=1)
    # by GPU time, descending (stable: ties in op id order); every column taken in that order
    order = np.argsort(-out["gpu_dur"], kind="stable")
    res: dict[str, Any] = {c: v[order] for c, v in out.items()}
    res["class"] = cls_uniq[best[order]].array
    for c in _FIRST:
        p = first[c][order]
        res[c] = kr[c].array.take(
            np.where(np.isnan(p), -1, rows[np.nan_to_num(p).astype(np.int64)]), allow_fill=True
        )
    return res


_OP_COLUMNS = ("name", "step", "module", "input_dims", "input_types")


def _op_columns(res: dict[str, Any], ops: pd.DataFrame, ctx: OpContext | None) -> None:
    """The operators' own columns (name, step, module, shapes), into ``res``."""
    n = len(res["op_id"])
    if len(ops):
        ids = ctx.ids if ctx is not None else id_index(ops["op_id"].to_numpy(dtype=np.int64))
        pos = ids.get_indexer(res["op_id"])
        found = pos >= 0
        for c in _OP_COLUMNS:
            if c not in ops:
                res[c] = np.full(n, None, dtype=object)
                continue
            col = pd.Series(ops[c].array.take(np.maximum(pos, 0)))
            if not found.all():
                col = col.where(found)
            res[c] = out_column(col, n)
    else:
        for c in _OP_COLUMNS:
            res[c] = np.full(n, None, dtype=object)
    res["step"] = pd.to_numeric(pd.Series(res["step"]), errors="coerce").fillna(-1)
    res["step"] = res["step"].to_numpy().astype(np.int32)


def _op_bounds(res: dict[str, Any], roof: Roofline) -> None:
    """The operators' place on the roofline (their kernels' summed FLOPs, bytes, time)."""
    is_copy = np.isin(np.asarray(res["class"], dtype=object), ["memcpy", "memset"])
    peak = peaks(roof, res["pipe"])
    b = bounds(res["flops"], res["bytes"], res["gpu_dur"], peak, roof.bandwidth)
    bound = b["bound"]
    bound[is_copy & np.isfinite(res["bytes"])] = "memory-bound"
    if not roof.known:
        bound[:] = "unknown"
    res["intensity"], res["ridge"], res["bound"] = b["intensity"], b["ridge"], bound
    res["attained_flops"], res["attained_bw"] = b["attained_flops"], b["attained_bw"]
    res["roof_pct"] = b["roof_pct"]
    res["gpu_dur"] = res["gpu_dur"].astype(np.int64)
    res["kernel_count"] = res["kernel_count"].astype(np.int64)


def class_table(kr: pd.DataFrame, n_steps: int) -> pd.DataFrame:
    """One row per class of :data:`~tracekit.classify.families.registry.CLASSES` (sums per
    class in row order, as a mask and ``Series.sum`` per class gave them)."""
    known = list(CLASSES)
    codes, uniq = pd.factorize(kr["class"])  # in Arrow; then map the few distinct names
    codes = np.append(pd.Index(known).get_indexer(uniq), -1)[codes]
    ok = codes >= 0
    gid, n = codes[ok], len(known)
    dur = kr["dur"].to_numpy(dtype=np.int64)
    flops = kr["flops"].to_numpy(dtype=float)
    flops = np.where(np.isfinite(flops), flops, 0.0)
    total_t, total_f = float(dur.sum()), float(flops.sum())
    mem = (kr["bound"] == "memory-bound").to_numpy()
    t = np.bincount(gid, weights=dur[ok], minlength=n)  # exact: integers below 2**53
    mem_t = np.bincount(gid, weights=np.where(mem, dur, 0)[ok], minlength=n)
    f = group_sums(flops[ok], gid, n)
    b = group_sums(kr["bytes"].to_numpy(dtype=float)[ok], gid, n)
    count = np.bincount(gid, minlength=n)
    rows = [
        {
            "class": c,
            "group": CLASS_GROUPS[c],
            "gpu_time": int(t[i]),
            "time_share_pct": 100.0 * int(t[i]) / total_t if total_t else 0.0,
            "ms_per_step": int(t[i]) / n_steps / 1e6,
            "flops": float(f[i]),
            "flop_share_pct": 100.0 * float(f[i]) / total_f if total_f else 0.0,
            "bytes": float(b[i]),
            "kernel_count": int(count[i]),
            "memory_bound_pct": 100.0 * float(mem_t[i]) / int(t[i]) if t[i] else 0.0,
        }
        for i, c in enumerate(known)
    ]
    return cast(pd.DataFrame, pd.DataFrame(rows)[[c.name for c in TABLES["classes"]]])


def _union(starts: np.ndarray, ends: np.ndarray) -> int:
    if not len(starts):
        return 0
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    run_end = np.maximum.accumulate(e)
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] > run_end[:-1]
    gid = np.cumsum(new) - 1
    gs = s[new]
    ge = np.zeros(len(gs), dtype=np.int64)
    np.maximum.at(ge, gid, e)
    return int((ge - gs).sum())


def step_table(
    kr: pd.DataFrame,
    steps_in: pd.DataFrame | None,
    roof: Roofline,
    analytic: dict[str, float] | None,
) -> pd.DataFrame:
    """The ``step_summary`` table: one row per analysed step. ``steps_in``: the parser's
    steps table (its GPU span and busy time are used where it has them)."""
    cols = [c.name for c in TABLES["step_summary"]]
    scope = in_scope(kr)
    step_all = kr["step"].to_numpy()[scope]
    order = np.argsort(step_all, kind="stable")
    sel = np.flatnonzero(scope)[order]
    steps_sorted = step_all[order]
    cut = np.flatnonzero(np.diff(steps_sorted)) + 1
    groups = np.split(np.arange(len(sel)), cut) if len(sel) else []
    a = {
        "ts": kr["ts"].to_numpy(np.int64)[sel],
        "dur": kr["dur"].to_numpy(np.int64)[sel],
        "flops": kr["flops"].to_numpy(float)[sel],
        "bytes": kr["bytes"].to_numpy(float)[sel],
        "is_kernel": kr["kind"].isin(COMPUTE_KINDS).to_numpy()[sel],
        **{b: (kr["bound"] == b).to_numpy()[sel] for b in BOUNDS},
    }
    given = _given(steps_in)
    rows = [_step_row(int(steps_sorted[g[0]]), g, a, given, roof, analytic) for g in groups]
    if not rows:
        return cast(pd.DataFrame, pd.DataFrame({c: pd.Series(dtype=object) for c in cols}))
    out = pd.DataFrame(rows)
    out["step"] = out["step"].astype(np.int32)
    return cast(pd.DataFrame, out[cols])


def _given(steps_in: pd.DataFrame | None) -> dict[str, dict[int, Any]]:
    """The parser's per-step GPU span and busy time, where it has them."""
    given: dict[str, dict[int, Any]] = {}
    if steps_in is not None and len(steps_in) and ("step" in steps_in):
        for c in ("gpu_dur", "gpu_busy"):
            if c in steps_in:
                given[c] = dict(zip(steps_in["step"].tolist(), steps_in[c].tolist(), strict=True))
    return given


_ANALYTIC = ("analytic_bytes", "analytic_param_bytes", "analytic_grad_bytes",
             "analytic_optim_bytes", "analytic_act_bytes")  # fmt: skip


def _step_row(
    s: int,
    g: np.ndarray,
    a: dict[str, np.ndarray],
    given: dict[str, dict[int, Any]],
    roof: Roofline,
    analytic: dict[str, float] | None,
) -> dict[str, Any]:
    """One step's row from its activities ``g`` (positions in the arrays ``a``)."""
    ts, dur = a["ts"][g], a["dur"][g]
    end = ts + dur
    span = int(end.max() - ts.min()) if len(g) else 0
    busy = _union(ts, end)
    if pd.notna(v := given.get("gpu_dur", {}).get(s)):
        span = int(v)
    if pd.notna(v := given.get("gpu_busy", {}).get(s)):
        busy = int(v)
    kt = float(dur.sum())
    fl, by = a["flops"][g], a["bytes"][g]
    is_k = a["is_kernel"][g]
    k_t = float(dur[is_k].sum())
    known_t = float(dur[is_k & np.isfinite(fl)].sum())
    # FLOPs are only meaningful for kernels: unknown if no kernel has them
    f = float(np.nansum(fl)) if known_t > 0 else NAN
    b_ = float(np.nansum(by))
    secs = span * 1e-9
    row = {
        "step": s,
        "gpu_span": span,
        "gpu_busy": busy,
        "kernel_time": int(kt),
        "kernel_count": len(g),
        "flops": f,
        "bytes": b_,
        "flops_coverage_pct": 100.0 * known_t / k_t if k_t else NAN,
        "intensity": f / b_ if b_ else NAN,
        "achieved_flops": f / secs if secs else NAN,
        "achieved_bw": b_ / secs if secs else NAN,
        **{
            f"{b.split('-')[0]}_bound_time_pct": 100.0 * dur[a[b][g]].sum() / kt if kt else NAN
            for b in BOUNDS
        },
        "gpu_idle_pct": 100.0 * (1.0 - busy / span) if span else NAN,
    }
    row["bw_util_pct"] = 100.0 * row["achieved_bw"] / roof.bandwidth if roof.bandwidth else NAN
    row["launch_bound"] = bool(span and row["gpu_idle_pct"] > 50.0)
    for key in _ANALYTIC:
        row[key] = analytic[key] if analytic else NAN
    row["bytes_vs_analytic"] = b_ / analytic["analytic_bytes"] if analytic else NAN
    return row
