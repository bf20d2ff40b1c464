"""Time, FLOPs and roofline shares per class, operator and kernel, from the classified
kernels (``Classification.kernels``: one row per GPU activity with its ``class``).

All shares are of *summed GPU activity time* — kernels + memcpy + memset durations added
up, overlaps counted twice — over the analysed steps, so they add up to 100 % and each
class's share is exactly its summed durations over the total. A multi-rank report (whose
communication kernels overlap compute on their own streams) adds, beside them, each
class's share of the GPU's *busy* time (``busy_share_pct``: the union of the class's
activities over the union of all, :func:`union_shares`; a class overlapping others counts
in each, so these do not add up to 100 %) and communication's exposed share
(``class_table(..., union=True)``).
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

import tracekit.summary.intervals as I
from tracekit.classify.codes import group_sums
from tracekit.classify.families.registry import CLASS_GROUPS, CLASSES
from tracekit.summary.memory import empty

# softmax, layernorm and gemm always first (and always shown), then the other classes in
# the registry's order (tracekit.classify.families.registry.CLASSES)
FIRST = ("softmax", "layernorm", "gemm")
ORDER = (*FIRST, *(c for c in CLASSES if c not in FIRST))
BOUNDS = ("memory-bound", "compute-bound")


def class_order(present: list[str] | pd.Index) -> list[str]:
    """``FIRST``, then every other class of ``ORDER``, then unknown ones alphabetically."""
    extra = sorted(set(present) - set(ORDER))
    return list(ORDER) + extra


def in_steps(kernels: pd.DataFrame, steps: list[int]) -> pd.DataFrame:
    """The GPU activities launched in the analysed steps (the frame itself when that is
    all of them: copying its long text columns costs more than the rest of the report)."""
    keep = kernels["step"].isin(steps).to_numpy()
    frame: pd.DataFrame = kernels if keep.all() else kernels[keep]
    return frame


def union_shares(kernels: pd.DataFrame) -> tuple[dict[str, float], float | None]:
    """Per class, the union of its activities' intervals as a percentage of the union of
    all GPU activity (overlaps counted once: a communication kernel beside a GEMM on
    another stream does not add to the total); and communication's exposed share, the
    part of its union no other activity overlaps (None without communication)."""
    cls = kernels["class"].astype(str).to_numpy()
    ts = kernels["ts"].to_numpy(dtype=np.int64)
    end = ts + kernels["dur"].to_numpy(dtype=np.int64)
    busy = I.length(I.merge(ts, end))
    if not busy:
        return {}, None
    out = {c: 100.0 * I.length(I.merge(ts[cls == c], end[cls == c])) / busy for c in set(cls)}
    comm = cls == "communication"
    exposed = None
    if comm.any():
        spans = I.merge(ts[comm], end[comm])
        exposed = 100.0 * I.uncovered(spans, I.merge(ts[~comm], end[~comm])) / busy
    return out, exposed


def class_table(kernels: pd.DataFrame, n_steps: int, union: bool = False) -> pd.DataFrame:
    """One row per class (``class_order``; zero rows included): ``class``, ``group`` (the
    heading it is shown under: ``normalization`` for the four norm classes), ``gpu_time_ns``,
    ``time_share_pct``, ``ms_per_step``, ``kernel_count``, ``flops``, ``flop_share_pct``,
    ``flops_known_pct`` (share of the class's time whose kernels have a FLOP count),
    ``memory_bound_pct`` / ``compute_bound_pct`` (of the class's time; NaN when no kernel of
    the class has a known bound).

    ``kernels``: classified activities of the analysed steps (columns ``class``, ``dur``,
    ``flops``, ``bound``)."""
    cls = kernels["class"].astype(str)
    dur = kernels["dur"].to_numpy(dtype=np.int64)
    flops = (
        kernels["flops"].to_numpy(dtype=np.float64)
        if "flops" in kernels
        else np.full(len(kernels), np.nan)
    )
    parts = pd.DataFrame(
        {
            "class": cls.to_numpy(),
            "dur": dur,
            "flops": np.nan_to_num(flops, nan=0.0),
            "known_dur": np.where(np.isfinite(flops), dur, 0),
            "mem_dur": np.where(kernels["bound"].to_numpy() == "memory-bound", dur, 0),
            "cmp_dur": np.where(kernels["bound"].to_numpy() == "compute-bound", dur, 0),
        }
    )
    g = parts.groupby("class", sort=False).sum()
    g["count"] = parts.groupby("class", sort=False).size()
    g = g.reindex(class_order(list(g.index)), fill_value=0)
    total = float(dur.sum())
    total_flops = float(g["flops"].sum())
    out = pd.DataFrame({"class": g.index.astype(str)})
    out["group"] = [CLASS_GROUPS.get(c, c) for c in out["class"]]
    gt = g["dur"].to_numpy(dtype=np.float64)
    out["gpu_time_ns"] = g["dur"].to_numpy(dtype=np.int64)
    out["time_share_pct"] = 100.0 * gt / total if total else np.nan
    out["ms_per_step"] = gt / 1e6 / max(1, n_steps)
    out["kernel_count"] = g["count"].to_numpy(dtype=np.int64)
    out["flops"] = g["flops"].to_numpy(dtype=np.float64)
    out["flop_share_pct"] = 100.0 * out["flops"] / total_flops if total_flops else np.nan
    with np.errstate(invalid="ignore", divide="ignore"):
        out["flops_known_pct"] = np.where(gt > 0, 100.0 * g["known_dur"].to_numpy() / gt, np.nan)
        # of the class's time; NaN when none of it has a known bound (no shapes, no roofline)
        judged = g["mem_dur"].to_numpy() + g["cmp_dur"].to_numpy()
        ok = (gt > 0) & (judged > 0)
        out["memory_bound_pct"] = np.where(ok, 100.0 * g["mem_dur"].to_numpy() / gt, np.nan)
        out["compute_bound_pct"] = np.where(ok, 100.0 * g["cmp_dur"].to_numpy() / gt, np.nan)
    if union:  # a multi-rank report: shares of the GPU's busy time too (union_shares)
        shares, exposed = union_shares(kernels)
        out["busy_share_pct"] = [shares.get(c, 0.0) for c in out["class"]]
        comm = out["class"] == "communication"
        out["exposed_share_pct"] = np.where(comm, np.nan if exposed is None else exposed, np.nan)
    keep = out["class"].isin(FIRST) | (out["kernel_count"] > 0)
    frame: pd.DataFrame = out[keep].reset_index(drop=True)
    return frame


def class_time_per_step(kernels: pd.DataFrame) -> pd.DataFrame:
    """Summed GPU time [ns] per (step, class): index step, one column per class."""
    if kernels.empty:
        return empty([])
    t = kernels.groupby(["step", "class"])["dur"].sum().unstack(fill_value=0)
    frame: pd.DataFrame = t.reindex(
        columns=[c for c in class_order(list(t.columns)) if c in t.columns]
    )
    return frame


def bound_shares(kernels: pd.DataFrame) -> dict[str, float | None]:
    """Share of GPU time that is memory-bound, compute-bound and (when any) unknown."""
    dur = kernels["dur"].to_numpy(dtype=np.float64)
    total = float(dur.sum())
    bound = kernels["bound"].astype(str).to_numpy()
    out: dict[str, float | None] = {}
    for b in BOUNDS:
        out[b] = 100.0 * float(dur[bound == b].sum()) / total if total else None
    rest = total - sum(float(dur[bound == b].sum()) for b in BOUNDS)
    if total and rest > 0:
        out["unknown"] = 100.0 * rest / total
    return out


def _first(s: pd.Series) -> object:
    u = s.dropna().unique()
    return u[0] if len(u) == 1 else ("mixed" if len(u) else None)


def group_first(values: pd.Series, gid: np.ndarray, n: int) -> np.ndarray:
    """:func:`_first` of each of ``n`` groups (``gid``: group number of each row): its one
    distinct non-missing value, 'mixed' for several, None for none; without a Python call
    per group."""
    codes, uniq = pd.factorize(values)  # missing: -1
    ok = codes >= 0
    width = len(uniq) + 1
    pairs = np.unique(gid[ok].astype(np.int64) * width + codes[ok])  # distinct (group, value)
    grp, val = pairs // width, pairs % width
    count = np.bincount(grp, minlength=n)
    out = np.full(n, None, dtype=object)
    for g, v in zip(grp.tolist(), val.tolist(), strict=True):
        out[g] = uniq[v] if count[g] == 1 else "mixed"
    return out


# operators.parquet's columns (operator_table)
OPERATOR_COLUMNS = (
    "name",
    "class",
    "input_dims",
    "input_types",
    "calls",
    "gpu_time_ns",
    "ms_per_step",
    "time_share_pct",
    "flops",
    "bytes",
    "intensity",
    "attained_flops",
    "attained_bw",
    "pipe",
    "bound",
    "roof_pct",
    "source",
)


def operator_table(ops: pd.DataFrame, n_steps: int) -> pd.DataFrame:
    """The per-operator roofline (``Classification.ops``: one row per operator call that
    ran GPU work) grouped by operator name, class and input shapes/types: calls, GPU time,
    FLOPs, bytes, intensity, attained FLOP/s and bytes/s, bound, % of roof and source.

    Sums are exact; ``roof_pct`` is the GPU-time-weighted mean of the calls' (equal to the
    group's attained rate over its roof, since equal shapes share one roof)."""
    cols = list(OPERATOR_COLUMNS)
    if ops.empty:
        return empty(cols)
    keys = ["name", "class", "input_dims", "input_types"]
    # only the columns used, not a copy of the whole op table
    o = pd.DataFrame(
        {
            c: (ops[c].fillna("") if c in ("input_dims", "input_types") else ops[c])
            if c in ops
            else ("" if c in ("input_dims", "input_types") else None)
            for c in keys
        }
    )
    dur = ops["gpu_dur"].to_numpy(dtype=np.float64)
    roof = ops["roof_pct"].to_numpy(dtype=np.float64)
    o["gpu_dur"] = ops["gpu_dur"].to_numpy()
    o["_w_roof"] = np.nan_to_num(roof) * dur
    o["_w_dur"] = np.where(np.isfinite(roof), dur, 0.0)
    g = o.groupby(keys, sort=False, dropna=False)
    t = g.agg(
        calls=("gpu_dur", "size"),
        gpu_time_ns=("gpu_dur", "sum"),
        w_roof=("_w_roof", "sum"),
        w_dur=("_w_dur", "sum"),
    )
    gid, n = g.ngroup().to_numpy(), len(t)
    for c in ("flops", "bytes"):
        t[c] = group_sums(ops[c].to_numpy(dtype=np.float64), gid, n, min_count=1)
    for c in ("pipe", "bound", "source"):
        t[c] = group_first(ops[c], gid, n) if c in ops else np.full(n, None, dtype=object)
    t = t.reset_index()
    total = float(dur.sum())
    secs = t["gpu_time_ns"].to_numpy(dtype=np.float64) / 1e9
    with np.errstate(invalid="ignore", divide="ignore"):
        t["intensity"] = t["flops"] / t["bytes"]
        t["attained_flops"] = np.where(secs > 0, t["flops"] / secs, np.nan)
        t["attained_bw"] = np.where(secs > 0, t["bytes"] / secs, np.nan)
        t["roof_pct"] = np.where(t["w_dur"] > 0, t["w_roof"] / t["w_dur"], np.nan)
    t["ms_per_step"] = t["gpu_time_ns"] / 1e6 / max(1, n_steps)
    t["time_share_pct"] = 100.0 * t["gpu_time_ns"] / total if total else np.nan
    t = t.sort_values("gpu_time_ns", ascending=False, kind="stable").reset_index(drop=True)
    t["input_dims"] = [compact_json(s) for s in t["input_dims"]]
    t["input_types"] = [compact_json(s) for s in t["input_types"]]
    frame: pd.DataFrame = t[cols]
    return frame


def compact_json(text: object) -> str:
    """The trace's JSON text (often pretty-printed) on one line: ``[[8,64],[64]]``."""
    if not isinstance(text, str) or not text:
        return ""
    try:
        return json.dumps(json.loads(text), separators=(",", ":"))
    except ValueError:
        return " ".join(text.split())


def kernel_table(kernels: pd.DataFrame, n_steps: int) -> pd.DataFrame:
    """GPU activities grouped by name: ``name``, ``class``, ``kind``, ``calls``,
    ``gpu_time_ns``, ``ms_per_step``, ``mean_us``, ``time_share_pct``; by time, descending."""
    cols = [
        "name",
        "class",
        "kind",
        "calls",
        "gpu_time_ns",
        "ms_per_step",
        "mean_us",
        "time_share_pct",
    ]
    if kernels.empty:
        return empty(cols)
    g = kernels.groupby("name", sort=False)
    t = g.agg(calls=("dur", "size"), gpu_time_ns=("dur", "sum"), kind=("kind", "first"))
    t["class"] = group_first(kernels["class"], g.ngroup().to_numpy(), len(t))
    t = t.reset_index()
    total = float(kernels["dur"].sum())
    t["ms_per_step"] = t["gpu_time_ns"] / 1e6 / max(1, n_steps)
    t["mean_us"] = t["gpu_time_ns"] / t["calls"] / 1e3
    t["time_share_pct"] = 100.0 * t["gpu_time_ns"] / total if total else np.nan
    t = t.sort_values("gpu_time_ns", ascending=False, kind="stable").reset_index(drop=True)
    frame: pd.DataFrame = t[cols]
    return frame
