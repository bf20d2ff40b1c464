"""Collectives: one rank's instances from its parsed trace, and their matching across ranks.

**Instances** (:func:`rank_collectives`). On a GPU trace every communication kernel (class
``communication``, kind ``kernel``: ``ncclDevKernel_*``, ``ncclKernel_*``, …) is one
collective. What it moved is read, first found first:

1. its own args (PyTorch >= 2.1 writes ``Collective name``, ``In/Out msg nelems``,
   ``dtype``, ``Group size``, ``Process Group Name/Ranks`` on NCCL kernels): the parse's
   ``comms`` table joined on ``correlation``;
2. the args of the ``record_param_comms`` operator that launched it (an ancestor);
3. the shapes and dtype of its ``nccl:*`` operator (older PyTorch records them there);
4. the kernel's name (``..._AllReduce_Sum_bf16_...``: the kind and dtype, no size).

On a CPU trace (the gloo backend) a collective is a ``gloo:*`` span on gloo's threads,
sized by its recorded shapes and dtype.

**Matching** (:func:`match`): NCCL runs the collectives of one communicator in the order
they were issued, on every rank, so the k-th collective of a process group in a step on one
rank is the k-th on every other (``seq``, where the trace has it, replaces that order). The
group is the ``Process Group Name``; without it, the job's only process group
(``distributedInfo.pg_config``), else the kernel's stream (each communicator has its own).
A collective cannot finish on any rank before its last rank has arrived, so

* **transfer** = earliest end − latest start (across the ranks): the time the data moved
  while every rank was in the collective;
* **sync wait** of a rank = its kernel time − transfer: it had arrived and was waiting;
* **arrival wait** of a rank = from its arrival (its kernel's start) to the last rank's
  arrival, at most its kernel time; **own transfer** = from the last rank's arrival to its
  own end: the two add up to its kernel time, and a rank whose link is slow, which ends
  after the others, has the longer own transfer, not a longer wait;
* **algbw** = message bytes / transfer, **busbw** = algbw × the nccl-tests factor of its
  kind on the group's size (:data:`tracekit.classify.families.communication.COLLECTIVES`).
"""

from __future__ import annotations

import difflib
import json
import math
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import pandas as pd

from tracekit.classify.families.communication import (
    COLLECTIVES,
    collective_kind,
    dtype_size,
    kernel_dtype,
)
from tracekit.ranks.groups import Groups, lookup, nanmax, ngroup, with_added

COMMUNICATION = "communication"
RPC = "record_param_comms"
BACKEND_SPANS = ("gloo:",)  # CPU collectives: the backend's own work spans
OP_PREFIXES = ("nccl:", "gloo:", "rccl:")
CLIMB = 6  # operator levels searched above a kernel's launch
INSTANCE_COLUMNS = [
    "pg", "step", "index", "seq", "kind", "name", "on", "stream", "ts", "end", "dur",
    "in_nelems", "out_nelems", "dtype", "itemsize", "group_size", "pg_ranks",
    "message_bytes", "source",
]  # fmt: skip


def _empty() -> pd.DataFrame:
    return cast(pd.DataFrame, pd.DataFrame(columns=INSTANCE_COLUMNS))


def _numel(dims_text: Any) -> int | None:
    """Elements of the first input of a recorded ``Input Dims`` (a tensor or a list)."""
    if not isinstance(dims_text, str):
        return None
    try:
        dims = json.loads(dims_text)
    except ValueError:
        return None
    if not isinstance(dims, list) or not dims or not isinstance(dims[0], list):
        return None
    first = dims[0]
    if all(isinstance(x, int) for x in first):
        return math.prod(first)
    if all(isinstance(s, list) and all(isinstance(x, int) for x in s) for s in first) and first:
        return sum(math.prod(s) for s in first)
    return None


def _first_type(types_text: Any) -> str | None:
    if not isinstance(types_text, str):
        return None
    try:
        types = json.loads(types_text)
    except ValueError:
        return None
    return str(types[0]) if isinstance(types, list) and types and types[0] else None


def _ancestors(ops: pd.DataFrame, op_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each op id: the nearest ``record_param_comms`` ancestor (inclusive) and the
    nearest ``nccl:*``/``gloo:*`` operator, as op ids (-1: none), within :data:`CLIMB`."""
    n = len(op_ids)
    rpc = np.full(n, -1, dtype=np.int64)
    span = np.full(n, -1, dtype=np.int64)
    if not len(ops) or not n:
        return rpc, span
    pos = pd.Index(ops["op_id"].to_numpy(dtype=np.int64))
    names = ops["name"].astype(str).to_numpy()
    parent = ops["parent"].to_numpy(dtype=np.int64)
    is_rpc = names == RPC
    is_span = np.array([s.startswith(OP_PREFIXES) for s in names], dtype=bool)
    cur = np.asarray(op_ids, dtype=np.int64)
    for _ in range(CLIMB):
        at = pos.get_indexer(cur)
        ok = (cur >= 0) & (at >= 0)
        hit = ok & (rpc < 0)
        hit[ok] &= is_rpc[at[ok]]
        rpc[hit] = cur[hit]
        hit = ok & (span < 0)
        hit[ok] &= is_span[at[ok]]
        span[hit] = cur[hit]
        nxt = np.full(n, -1, dtype=np.int64)
        nxt[ok] = parent[at[ok]]
        cur = nxt
    return rpc, span


def _meta_rows(comms: pd.DataFrame | None, key: str, category_kernel: bool) -> pd.DataFrame:
    if comms is None or not len(comms):
        return cast(pd.DataFrame, pd.DataFrame())
    sel = (comms["category"] == "kernel") == category_kernel
    rows = comms[sel.to_numpy()]
    rows = rows[rows[key].to_numpy() >= 0]
    return cast(pd.DataFrame, rows.drop_duplicates(key, keep="first").set_index(key))


def _default_pg(dist: dict[str, Any] | None) -> tuple[str | None, int | None, str | None]:
    """(name, size, ranks text) of the job's only process group, if it has exactly one."""
    cfg = (dist or {}).get("pg_config")
    if isinstance(cfg, list) and len(cfg) == 1 and isinstance(cfg[0], dict):
        g = cfg[0]
        size = g.get("pg_size")
        ranks = g.get("ranks")
        return (
            str(g.get("pg_name", "0")),
            int(size) if isinstance(size, int) else None,
            json.dumps(ranks) if isinstance(ranks, list) else None,
        )
    return None, None, None


def _pick(*values: Any) -> Any:
    """The first value that is present (not None, not NaN)."""
    for v in values:
        if v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v)):
            continue
        return v
    return None


def _gpu_instances(trace: Any, classes: np.ndarray) -> pd.DataFrame:
    k = trace.kernels
    sel = (classes == COMMUNICATION) & (k["kind"].astype(str).to_numpy() == "kernel")
    kk = k[sel]
    if not len(kk):
        return _empty()
    by_corr = _meta_rows(trace.comms, "correlation", True)
    by_ext = _meta_rows(trace.comms, "external_id", False)
    ops = trace.ops
    rpc, span = _ancestors(ops, kk["op_id"].to_numpy(dtype=np.int64))
    op_at = pd.Index(ops["op_id"].to_numpy(dtype=np.int64)) if len(ops) else pd.Index([])
    dist = trace.meta.get("distributed_info") if isinstance(trace.meta, dict) else None
    pg0, size0, ranks0 = _default_pg(dist if isinstance(dist, dict) else None)
    world = (dist or {}).get("world_size") if isinstance(dist, dict) else None
    rows = []
    for i, kr in enumerate(kk.itertuples(index=False)):
        meta, source = None, "kernel name"
        if kr.correlation in by_corr.index:
            meta, source = by_corr.loc[kr.correlation], "kernel args"
        elif rpc[i] >= 0:
            ext = int(ops["external_id"].iat[op_at.get_loc(rpc[i])])
            if ext in by_ext.index:
                meta, source = by_ext.loc[ext], "record_param_comms"
        span_name = dims = types = None
        if span[i] >= 0:
            at = op_at.get_loc(span[i])
            span_name = str(ops["name"].iat[at])
            dims, types = ops["input_dims"].iat[at], ops["input_types"].iat[at]
        g = (lambda c: None) if meta is None else (lambda c: meta[c])  # noqa: B023
        in_n = _pick(g("in_nelems"))
        if meta is None and _numel(dims) is not None:
            in_n, source = _numel(dims), "operator shapes"
        dt = dtype_size(g("dtype")) or dtype_size(_first_type(types)) or kernel_dtype(kr.name)
        rows.append(
            {
                "pg": _pick(g("pg_name"), pg0, f"stream {kr.stream}"),
                "step": int(kr.step),
                "seq": _pick(g("seq"), -1),
                "kind": collective_kind(g("collective"))
                or collective_kind(span_name)
                or collective_kind(kr.name)
                or "unknown",
                "name": str(kr.name),
                "on": "gpu",
                "stream": int(kr.stream),
                "ts": int(kr.ts),
                "dur": int(kr.dur),
                "in_nelems": in_n,
                "out_nelems": _pick(g("out_nelems")),
                "dtype": dt[0] if dt else None,
                "itemsize": dt[1] if dt else None,
                "group_size": _pick(g("group_size"), size0, world),
                "pg_ranks": _pick(g("pg_ranks"), ranks0),
                "source": source,
            }
        )
    return _finish(pd.DataFrame(rows))


def _cpu_instances(trace: Any) -> pd.DataFrame:
    ops = trace.ops
    if not len(ops):
        return _empty()
    names = ops["name"].astype(str)
    sel = names.str.startswith(BACKEND_SPANS).to_numpy()
    oo = ops[sel]
    if not len(oo):
        return _empty()
    dist = trace.meta.get("distributed_info") if isinstance(trace.meta, dict) else None
    pg0, size0, ranks0 = _default_pg(dist if isinstance(dist, dict) else None)
    world = (dist or {}).get("world_size") if isinstance(dist, dict) else None
    rows = []
    for o in oo.itertuples(index=False):
        dt = dtype_size(_first_type(o.input_types))
        rows.append(
            {
                "pg": pg0 or "?",
                "step": int(o.step),
                "seq": -1,
                "kind": collective_kind(o.name) or "unknown",
                "name": str(o.name),
                "on": "cpu",
                "stream": -1,
                "ts": int(o.ts),
                "dur": int(o.dur),
                "in_nelems": _numel(o.input_dims),
                "out_nelems": None,
                "dtype": dt[0] if dt else None,
                "itemsize": dt[1] if dt else None,
                "group_size": _pick(size0, world),
                "pg_ranks": ranks0,
                "source": "operator shapes" if _numel(o.input_dims) is not None else "none",
            }
        )
    return _finish(pd.DataFrame(rows))


def message_bytes(kind: str, in_n: Any, out_n: Any, itemsize: Any, n: Any) -> float:
    """The collective's message size in bytes (nccl-tests' size), NaN if unknown. An
    all-gather known only by its input is ``n`` inputs; a reduce-scatter known only by its
    output is ``n`` outputs."""
    model = COLLECTIVES.get(kind)
    size = _pick(itemsize)
    if model is None or size is None:
        return math.nan
    i = _pick(in_n)
    o = _pick(out_n)
    group = _pick(n)
    if kind == "all_gather" and o is None and i is not None and group:
        o = i * group
    if kind == "reduce_scatter" and i is None and o is not None and group:
        i = o * group
    got = model.message_bytes(
        None if i is None else float(i) * size, None if o is None else float(o) * size
    )
    return math.nan if got is None else float(got)


def _finish(df: pd.DataFrame) -> pd.DataFrame:
    """Order, index within (group, step), message bytes; the schema's columns."""
    if not len(df):
        return _empty()
    df = df.sort_values(["ts", "stream"], kind="stable").reset_index(drop=True)
    df["index"] = df.groupby(["pg", "step"], sort=False).cumcount().astype(np.int64)
    df["end"] = df["ts"] + df["dur"]
    df["message_bytes"] = [
        message_bytes(str(r.kind), r.in_nelems, r.out_nelems, r.itemsize, r.group_size)
        for r in df.itertuples(index=False)
    ]
    for c in ("in_nelems", "out_nelems", "group_size", "itemsize", "seq"):
        df[c] = pd.to_numeric(df[c], errors="coerce").astype("Int64")
    for c in ("pg", "dtype", "pg_ranks"):
        df[c] = df[c].astype(object).where(df[c].notna(), None)
        df[c] = df[c].map(lambda v: None if v is None else str(v))
    return cast(pd.DataFrame, df[INSTANCE_COLUMNS])


def rank_collectives(trace: Any, classes: np.ndarray) -> pd.DataFrame:
    """One rank's collectives (:data:`INSTANCE_COLUMNS`; times relative to its trace)."""
    gpu = _gpu_instances(trace, classes)
    return gpu if len(gpu) else _cpu_instances(trace)


MATCH_COLUMNS = [
    "key", "pg", "step", "index", "seq", "kind", "dtype", "message_bytes", "group_size", "ranks",
    "complete", "consistent", "latest_start", "earliest_end", "transfer_ns", "dur_mean_ns",
    "dur_max_ns", "wait_mean_ns", "wait_max_ns", "last_rank", "last_rank_late_ns",
    "algbw_Bps", "busbw_Bps",
]  # fmt: skip


def _signature(kind: Any, nbytes: Any) -> tuple[str, float | None]:
    """What must agree between ranks for two instances to be one collective: the kind,
    and the size except for all-to-all (whose splits differ between ranks)."""
    sized = kind != "all_to_all" and nbytes == nbytes and nbytes is not None
    return str(kind), (round(float(nbytes)) if sized else None)


def _agree_in(inst: pd.DataFrame, g: Groups) -> np.ndarray:
    """Per group of ``g``, whether its instances have one :func:`_signature` (vectorised:
    no Python loop over the job's instances)."""
    kind = inst["kind"].astype(str).to_numpy()
    nb = inst["message_bytes"]
    nbytes = (
        nb.to_numpy() if nb.dtype == np.float64 else pd.to_numeric(nb, errors="coerce").to_numpy()
    ).astype(float)
    size = np.where((kind != "all_to_all") & ~np.isnan(nbytes), np.round(nbytes), np.nan)
    one_kind = g.nunique(pd.factorize(kind, use_na_sentinel=False)[0]) == 1
    one_size = g.nunique(pd.factorize(size, use_na_sentinel=False)[0]) == 1
    return np.asarray(one_kind & one_size)


def _by_order(inst: pd.DataFrame) -> pd.Series:
    """Keys by (group, seq) where every instance of the job has a sequence number, else by
    (group, step, index): NCCL's issue order."""
    seq = inst["seq"].to_numpy(dtype=np.float64, na_value=np.nan)
    keys = ["pg", "seq"] if len(inst) and bool((seq >= 0).all()) else ["pg", "step", "index"]
    return cast(pd.Series, pd.Series(ngroup(inst, keys), index=inst.index))


def _resequence(group: pd.DataFrame, base: int) -> pd.Series:
    """Keys of one process group's instances by aligning every rank's sequence of
    signatures with the lowest rank's (longest matching blocks, difflib): for traces that
    lost some collectives (sampled or cut traces). Unmatched instances get -1."""
    group = group.sort_values("ts", kind="stable")
    sig = [_signature(k, b) for k, b in zip(group["kind"], group["message_bytes"], strict=True)]
    group = group.assign(sig=pd.Series(sig, index=group.index, dtype=object))
    ranks = sorted(group["rank"].unique())
    ref = group[group["rank"] == ranks[0]]
    keys = pd.Series(-1, index=group.index, dtype=np.int64)
    keys[ref.index] = base + np.arange(len(ref), dtype=np.int64)
    ref_sig = list(ref["sig"])
    for r in ranks[1:]:
        mine = group[group["rank"] == r]
        sm = difflib.SequenceMatcher(None, ref_sig, list(mine["sig"]), autojunk=False)
        for blk in sm.get_matching_blocks():
            for j in range(blk.size):
                keys[mine.index[blk.b + j]] = base + blk.a + j
    return cast(pd.Series, keys)


def assign_keys(inst: pd.DataFrame) -> pd.Series:
    """Which collective each instance is (same key on every rank; -1: matched to none):
    by issue order, and, for a process group whose ranks disagree on what the k-th
    collective is, by aligning their sequences (:func:`_resequence`)."""
    return _assign(inst)[0]


def _assign(inst: pd.DataFrame) -> tuple[pd.Series, Groups | None]:
    """:func:`assign_keys`, and where every key's instances agreed by issue order (none
    was realigned and each key is consistent) the instances grouped by those keys."""
    keys = _by_order(inst)
    g = Groups.of(keys.to_numpy())
    agree = _agree_in(inst, g)
    if agree.all():
        return keys, g
    bad = ~pd.Series(agree, index=pd.Index(g.keys))
    base = int(keys.max()) + 1
    for pg in inst.loc[keys.isin(bad[bad].index), "pg"].unique():
        sel = inst["pg"] == pg
        keys[sel] = _resequence(inst[sel], base)
        base += int(sel.sum())
    return keys, None


def _first(inst: pd.DataFrame, g: Groups) -> dict[str, pd.Series]:
    """Per group, the first non-missing value of each column the match keeps (pandas'
    ``groupby().first()``, its columns), indexed 0..groups-1."""
    cols = ["pg", "step", "index", "seq", "kind", "dtype", "group_size"]
    first = g.first_row()
    out = {}
    for c in cols:  # each column's array taken (a frame's iloc indexes and copies more)
        series = inst[c]
        col = series.array
        plain = isinstance(series.dtype, np.dtype) and series.dtype.kind in "iub"  # no NaN
        missing = None if plain else np.asarray(col.isna(), dtype=bool)
        if missing is None or not missing.any():
            out[c] = pd.Series(col.take(first))
            continue
        rows = g.first_where(~missing)
        got = pd.Series(col.take(np.maximum(rows, 0)))
        out[c] = got.where(pd.Series(rows >= 0)) if (rows < 0).any() else got
    return out


@dataclass(frozen=True)
class Keyed:
    """The half of a match the clocks do not change: ``inst`` (the instances with their
    ``key``, those matched to none dropped), grouped by key (``g``), and per collective
    (in the order of ``g.keys``) the columns that do not depend on times (``fixed``)."""

    inst: pd.DataFrame
    g: Groups
    fixed: dict[str, Any]


def keyed(inst: pd.DataFrame, keys: pd.Series | None = None) -> Keyed:
    """``inst`` (:data:`INSTANCE_COLUMNS` plus ``rank``) keyed and grouped (``keys``: their
    :func:`assign_keys` where the caller has them)."""
    agreed = None  # the instances by key where every key's agree (no need to look again)
    if keys is None:
        keys, agreed = _assign(inst)
    inst = with_added(inst, {"key": keys})
    if (inst["key"].to_numpy() < 0).any():  # a boolean filter copies every column
        inst = inst[inst["key"] >= 0]
    g = agreed if agreed is not None else Groups.of(inst["key"].to_numpy())
    dur = inst["dur"].to_numpy(dtype=np.int64)
    first = _first(inst, g)
    n_ranks = g.nunique(inst["rank"].to_numpy())
    size_f = first["group_size"].to_numpy(dtype=np.float64, na_value=np.nan)
    size_f = np.where(np.isnan(size_f), n_ranks, size_f)  # the group's size, else its ranks
    consistent = np.ones(len(g.keys), dtype=bool) if agreed is not None else _agree_in(inst, g)
    fixed = {
        "key": g.keys,
        **{c: first[c] for c in ("pg", "step", "index", "seq", "kind", "dtype")},
        "message_bytes": nanmax(g, inst["message_bytes"].to_numpy(dtype=np.float64)),
        "group_size": np.round(size_f).astype(np.int64),
        "ranks": n_ranks,
        "complete": n_ranks >= size_f,
        "consistent": consistent,
        "dur_sum": g.sum(dur),
        "dur_max_ns": g.max(dur),
    }
    return Keyed(inst, g, fixed)


def _take(v: Any, order: np.ndarray) -> Any:
    """``v`` (an array or a Series) in ``order``, as an array of its own dtype."""
    if isinstance(v, pd.Series):
        return v.array.take(order)
    return np.asarray(v)[order]


def timed(k: Keyed, offsets: dict[int, int] | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """:func:`match` of ``k``'s instances, each rank's times moved by ``offsets`` (rank ->
    ns; None: as they are): the clock-free half is not computed again."""
    g, fx = k.g, k.fixed
    inst = k.inst
    ts, end = inst["ts"].to_numpy(dtype=np.int64), inst["end"].to_numpy(dtype=np.int64)
    rank = inst["rank"].to_numpy()
    if offsets is not None and len(inst):
        shift = lookup(rank, offsets, 0).astype(np.int64)
        ts, end = ts + shift, end + shift
        inst = inst.assign(ts=ts, end=end)
    dur = inst["dur"].to_numpy(dtype=np.int64)
    latest, earliest = g.max(ts), g.min(end)
    transfer = np.clip(earliest - latest, 0, None)
    wait = np.clip(dur - transfer[g.inverse], 0, None)
    arrived = latest[g.inverse]
    added = {
        "transfer_ns": transfer[g.inverse],
        "wait_ns": wait,
        "arrival_wait_ns": np.minimum(dur, np.clip(arrived - ts, 0, None)),
        "own_transfer_ns": np.clip(end - arrived, 0, None),
    }  # one concatenation: a column set on a wide frame costs as much as the frame's copy
    inst = pd.concat([inst, pd.DataFrame(added, index=inst.index)], axis=1)
    last = rank[g.first_where(ts == arrived)]
    count = g.sizes.astype(np.float64)
    nbytes, n = fx["message_bytes"], fx["ranks"]
    with np.errstate(invalid="ignore", divide="ignore"):
        algbw = np.where(
            (transfer > 0) & (n > 1), nbytes / (np.clip(transfer, 1, None) / 1e9), np.nan
        )
    cols = {
        **{c: fx[c] for c in MATCH_COLUMNS[:12]},
        "latest_start": latest,
        "earliest_end": earliest,
        "transfer_ns": transfer,
        "dur_mean_ns": fx["dur_sum"] / count,
        "dur_max_ns": fx["dur_max_ns"],
        "wait_mean_ns": g.sum(wait) / count,
        "wait_max_ns": g.max(wait),
        "last_rank": last.astype(np.int64),
        "last_rank_late_ns": latest - g.median(ts),
        "algbw_Bps": algbw,
    }
    order = np.argsort(latest, kind="stable")
    out = pd.DataFrame({c: _take(v, order) for c, v in cols.items()})
    out["busbw_Bps"] = [
        a * COLLECTIVES[kd].factor(int(gs)) if kd in COLLECTIVES and a == a else math.nan
        for a, kd, gs in zip(
            out["algbw_Bps"].tolist(), out["kind"].tolist(), out["group_size"].tolist(), strict=True
        )
    ]
    return out, inst


def match(inst: pd.DataFrame, keys: pd.Series | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Match every rank's instances (``inst``: :data:`INSTANCE_COLUMNS` plus ``rank``, with
    ``ts``/``end`` on the common time base; ``keys``: their :func:`assign_keys` where the
    caller has them). Returns (one row per collective, :data:`MATCH_COLUMNS`; ``inst`` with
    ``key``, ``transfer_ns`` and ``wait_ns`` added)."""
    if not len(inst):
        return pd.DataFrame(columns=MATCH_COLUMNS), inst.assign(
            key=[], transfer_ns=[], wait_ns=[], arrival_wait_ns=[], own_transfer_ns=[]
        )
    return timed(keyed(inst, keys))
