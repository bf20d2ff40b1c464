"""Pure comparisons of two analysed runs: frames in, frames out.

Every figure is **per analysed step** (``n_a``/``n_b``: the number of analysed steps of
each run), so traces with different step counts compare fairly. ``delta`` is always
``B - A``: a positive time delta is a regression of B, a negative one an improvement.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pandas as pd

from tracekit.summary.classes import _first, class_order, compact_json

# Manifest config keys that name where or how quietly a run was written, not what ran.
IGNORED_CONFIG = frozenset({"out", "quiet"})

# Inductor names a fused kernel after the ATen ops it fused (``fused_ops``); these ops
# launch their eager kernels through an inner operator, so both names are matched.
OP_ALIASES: dict[str, tuple[str, ...]] = {
    "_to_copy": ("aten::_to_copy", "aten::copy_"),
    "clone": ("aten::clone", "aten::copy_"),
}

OPERATOR_KEYS = ["name", "input_dims", "module"]


def _empty(cols: list[str]) -> pd.DataFrame:
    frame: pd.DataFrame = pd.DataFrame(columns=cols)
    return frame


def _f(v: Any) -> np.ndarray:
    return np.nan_to_num(np.asarray(v, dtype=np.float64))


def class_diff(
    classes_a: pd.DataFrame, classes_b: pd.DataFrame, n_a: int, n_b: int
) -> pd.DataFrame:
    """Per class (``summary.classes.class_table`` rows of each run): ``a_ms``, ``b_ms``,
    ``delta_ms``; ``a_share_pct``, ``b_share_pct``, ``delta_pp`` (share of each run's GPU
    time); ``a_flops``, ``b_flops``, ``delta_flops`` (per step); ``a_kernels``,
    ``b_kernels`` (GPU activities per step); ``a_memory_bound_pct``,
    ``b_memory_bound_pct``. Classes with no time in either run are left out."""
    cols = ["class", "ms_per_step", "time_share_pct", "flops", "kernel_count", "memory_bound_pct"]
    a = classes_a[cols].set_index("class")
    b = classes_b[cols].set_index("class")
    idx = [c for c in class_order(list(a.index.union(b.index))) if c in a.index or c in b.index]
    a, b = a.reindex(idx), b.reindex(idx)
    out = pd.DataFrame({"class": idx})
    out["a_ms"] = _f(a["ms_per_step"])
    out["b_ms"] = _f(b["ms_per_step"])
    out["delta_ms"] = out["b_ms"] - out["a_ms"]
    out["a_share_pct"] = _f(a["time_share_pct"])
    out["b_share_pct"] = _f(b["time_share_pct"])
    out["delta_pp"] = out["b_share_pct"] - out["a_share_pct"]
    out["a_flops"] = _f(a["flops"]) / max(1, n_a)
    out["b_flops"] = _f(b["flops"]) / max(1, n_b)
    out["delta_flops"] = out["b_flops"] - out["a_flops"]
    out["a_kernels"] = _f(a["kernel_count"]) / max(1, n_a)
    out["b_kernels"] = _f(b["kernel_count"]) / max(1, n_b)
    out["a_memory_bound_pct"] = a["memory_bound_pct"].to_numpy(dtype=np.float64)
    out["b_memory_bound_pct"] = b["memory_bound_pct"].to_numpy(dtype=np.float64)
    keep = (out["a_ms"] > 0) | (out["b_ms"] > 0)
    frame: pd.DataFrame = out[keep].reset_index(drop=True)
    return frame


def operator_groups(ops: pd.DataFrame, n_steps: int) -> pd.DataFrame:
    """``Classification.ops`` of the analysed steps grouped by operator name, input shapes
    (one-line JSON) and module path (``""`` when not traced): ``class``, ``calls``,
    ``kernels`` (per step), ``ms`` (GPU time per step)."""
    cols = [*OPERATOR_KEYS, "class", "calls", "kernels", "ms"]
    if ops.empty:
        return _empty(cols)
    o = pd.DataFrame(
        {
            "name": ops["name"].astype(str),
            "input_dims": [compact_json(s) for s in ops["input_dims"]],
            "module": ops["module"].fillna("").astype(str) if "module" in ops else "",
            "class": ops["class"],
            "gpu_dur": ops["gpu_dur"].to_numpy(dtype=np.float64),
            "kernel_count": ops["kernel_count"].to_numpy(dtype=np.float64),
        }
    )
    g = o.groupby(OPERATOR_KEYS, sort=False)
    t = g.agg(
        calls=("gpu_dur", "size"),
        kernels=("kernel_count", "sum"),
        ns=("gpu_dur", "sum"),
        **{"class": ("class", _first)},
    ).reset_index()
    n = max(1, n_steps)
    t["calls"] = t["calls"] / n
    t["kernels"] = t["kernels"] / n
    t["ms"] = t["ns"] / 1e6 / n
    frame: pd.DataFrame = t[cols]
    return frame


def _status(a: pd.Series, b: pd.Series) -> np.ndarray:
    return np.where(a & b, "both", np.where(a, "only A", "only B"))


def operator_diff(ops_a: pd.DataFrame, ops_b: pd.DataFrame, n_a: int, n_b: int) -> pd.DataFrame:
    """Operators matched by name + input shapes + module path: ``status`` ('both', 'only
    A', 'only B'), ``match`` ('exact', 'out= variant' (:func:`_match_out_variants`) or
    ''), ``class`` (B's when it ran there), ``a_calls``, ``b_calls``,
    ``delta_calls``, ``a_ms``, ``b_ms``, ``delta_ms`` (per step); by ``|delta_ms|``,
    descending."""
    ga, gb = operator_groups(ops_a, n_a), operator_groups(ops_b, n_b)
    m = ga.merge(gb, on=OPERATOR_KEYS, how="outer", suffixes=("_a", "_b"), indicator=True)
    in_a = m["_merge"].isin(["both", "left_only"])
    in_b = m["_merge"].isin(["both", "right_only"])
    out = m[OPERATOR_KEYS].copy()
    out["status"] = _status(in_a, in_b)
    out["class"] = m["class_b"].where(in_b, m["class_a"])
    out["a_calls"] = _f(m["calls_a"])
    out["b_calls"] = _f(m["calls_b"])
    out["a_ms"] = _f(m["ms_a"])
    out["b_ms"] = _f(m["ms_b"])
    out["match"] = np.where(out["status"] == "both", "exact", "")
    out = _match_out_variants(out)
    out["delta_calls"] = out["b_calls"] - out["a_calls"]
    out["delta_ms"] = out["b_ms"] - out["a_ms"]
    order = np.argsort(-np.abs(out["delta_ms"].to_numpy()), kind="stable")
    frame: pd.DataFrame = out.iloc[order].reset_index(drop=True)
    return frame


def _dims(text: str) -> list[Any] | None:
    try:
        v = json.loads(text) if text else []
    except ValueError:
        return None
    return v if isinstance(v, list) else None


def _prefix(a: list[Any] | None, b: list[Any] | None) -> bool:
    if a is None or b is None or len(a) == len(b):
        return False
    short, long = (a, b) if len(a) < len(b) else (b, a)
    return long[: len(short)] == short


def _match_out_variants(out: pd.DataFrame) -> pd.DataFrame:
    """Pair an operator that ran only in A with one that ran only in B when they share
    name and module and one's input shapes extend the other's (Inductor calls the ``out=``
    variants: ``aten::mm`` gets a third tensor, the output). Only unique pairs are joined;
    the row keeps A's shapes and gets ``match`` 'out= variant'."""
    recs: list[dict[str, Any]] = [{str(k): v for k, v in r.items()} for r in out.to_dict("records")]
    only_a = [i for i, r in enumerate(recs) if r["status"] == "only A"]
    only_b = [i for i, r in enumerate(recs) if r["status"] == "only B"]
    dims = {i: _dims(str(recs[i]["input_dims"])) for i in [*only_a, *only_b]}
    cand: dict[int, list[int]] = {}
    for ib in only_b:
        for ia in only_a:
            same = all(recs[ia][k] == recs[ib][k] for k in ("name", "module"))
            if same and _prefix(dims[ia], dims[ib]):
                cand.setdefault(ib, []).append(ia)
    used = [ia for c in cand.values() for ia in c]
    drop: set[int] = set()
    for ib, c in cand.items():
        if len(c) != 1 or used.count(c[0]) != 1:
            continue
        ra, rb = recs[c[0]], recs[ib]
        ra.update(b_calls=rb["b_calls"], b_ms=rb["b_ms"], status="both", match="out= variant")
        ra["class"] = rb["class"]
        drop.add(ib)
    frame: pd.DataFrame = pd.DataFrame(
        [r for i, r in enumerate(recs) if i not in drop], columns=out.columns
    )
    return frame


def top_changes(diff: pd.DataFrame, n: int = 10) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(regressions: largest positive ``delta_ms`` first, improvements: most negative
    first), at most ``n`` rows each, zero deltas left out."""
    d = diff.sort_values("delta_ms", ascending=False, kind="stable")
    worse = d[d["delta_ms"] > 0].head(n).reset_index(drop=True)
    better = d[d["delta_ms"] < 0].iloc[::-1].head(n).reset_index(drop=True)
    return worse, better


def kernel_diff(
    kernels_a: pd.DataFrame, kernels_b: pd.DataFrame, n_a: int, n_b: int
) -> pd.DataFrame:
    """Kernels by name (``summary.classes.kernel_table`` of each run): ``status``,
    ``class``, ``a_calls``, ``b_calls`` and ``a_ms``, ``b_ms``, ``delta_ms`` per step;
    by ``|delta_ms|``, descending."""
    cols = ["name", "class", "calls", "ms_per_step"]
    m = kernels_a[cols].merge(
        kernels_b[cols], on="name", how="outer", suffixes=("_a", "_b"), indicator=True
    )
    in_a = m["_merge"].isin(["both", "left_only"])
    in_b = m["_merge"].isin(["both", "right_only"])
    out = pd.DataFrame({"name": m["name"], "status": _status(in_a, in_b)})
    out["class"] = m["class_b"].where(in_b, m["class_a"])
    out["a_calls"] = _f(m["calls_a"]) / max(1, n_a)
    out["b_calls"] = _f(m["calls_b"]) / max(1, n_b)
    out["a_ms"] = _f(m["ms_per_step_a"])
    out["b_ms"] = _f(m["ms_per_step_b"])
    out["delta_ms"] = out["b_ms"] - out["a_ms"]
    order = np.argsort(-np.abs(out["delta_ms"].to_numpy()), kind="stable")
    frame: pd.DataFrame = out.iloc[order].reset_index(drop=True)
    return frame


def _eager_names(fused: str) -> set[str]:
    names: set[str] = set()
    for op in fused.split(","):
        names.update(OP_ALIASES.get(op, (f"aten::{op}",)))
    return names


def fused_groups(
    fused_side: pd.DataFrame, other_side: pd.DataFrame, n_fused: int, n_other: int
) -> pd.DataFrame:
    """Inductor (torch.compile) Triton kernels of one run grouped by the ops they fused
    (``fused_ops``), next to the other run's unfused kernels of those ops.

    Columns: ``fused_ops``, ``class``, ``kernels`` (distinct kernel names), ``calls``,
    ``ms`` (per step, fused run), ``other_ms`` (per step: the other run's kernels without
    ``fused_ops`` whose innermost operator is ``aten::<op>`` for one of the fused ops; an
    op can appear in several groups, so ``other_ms`` of different groups overlap); by
    ``ms``, descending. Both arguments are ``Classification.kernels`` of analysed steps."""
    cols = ["fused_ops", "class", "kernels", "calls", "ms", "other_ms"]
    f = fused_side[fused_side["fused_ops"].notna()]
    if f.empty:
        return _empty(cols)
    g = f.groupby("fused_ops", sort=False)
    t = g.agg(
        kernels=("name", "nunique"),
        calls=("dur", "size"),
        ns=("dur", "sum"),
        **{"class": ("class", _first)},
    ).reset_index()
    t["calls"] = t["calls"] / max(1, n_fused)
    t["ms"] = t["ns"] / 1e6 / max(1, n_fused)
    eager = other_side[other_side["fused_ops"].isna()]
    op = eager["op_name"].astype(str).to_numpy()
    dur = eager["dur"].to_numpy(dtype=np.float64)
    t["other_ms"] = [
        float(dur[np.isin(op, sorted(_eager_names(s)))].sum()) / 1e6 / max(1, n_other)
        for s in t["fused_ops"]
    ]
    t = t.sort_values("ms", ascending=False, kind="stable").reset_index(drop=True)
    frame: pd.DataFrame = t[cols]
    return frame


def fused_total(
    fused_side: pd.DataFrame, other_side: pd.DataFrame, n_fused: int, n_other: int
) -> dict[str, float]:
    """The union over all groups (no overlap): ``kernels``, ``calls``, ``ms`` of the fused
    run's Triton kernels and ``other_ms``, ``other_calls`` of the other run's unfused
    kernels of any fused op (per step)."""
    f = fused_side[fused_side["fused_ops"].notna()]
    names: set[str] = set()
    for s in f["fused_ops"].unique():
        names |= _eager_names(str(s))
    eager = other_side[other_side["fused_ops"].isna()]
    sel = eager[eager["op_name"].astype(str).isin(sorted(names))]
    return {
        "kernels": float(f["name"].nunique()),
        "calls": len(f) / max(1, n_fused),
        "ms": float(f["dur"].sum()) / 1e6 / max(1, n_fused),
        "other_calls": len(sel) / max(1, n_other),
        "other_ms": float(sel["dur"].sum()) / 1e6 / max(1, n_other),
    }


def _flatten(d: Any, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    if isinstance(d, dict):
        for k, v in d.items():
            key = f"{prefix}{k}"
            if isinstance(v, dict):
                out.update(_flatten(v, key + "."))
            else:
                out[key] = v
    return out


def config_diff(config_a: Any, config_b: Any) -> list[dict[str, Any]]:
    """Manifest ``config`` keys (nested keys dotted: ``profiler.active``) whose values
    differ, as ``{"key", "a", "b"}`` (a missing key is ``None``); :data:`IGNORED_CONFIG`
    keys are left out. Without both configs there is nothing to compare key by key (the
    comparison notes that a run has no manifest), so the list is empty."""
    if not config_a or not config_b:
        return []
    fa, fb = _flatten(config_a), _flatten(config_b)
    out = []
    for k in sorted(set(fa) | set(fb)):
        if k.split(".")[0] in IGNORED_CONFIG:
            continue
        if fa.get(k) != fb.get(k):
            out.append({"key": k, "a": fa.get(k), "b": fb.get(k)})
    return out
