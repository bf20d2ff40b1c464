"""The ranks grouped by node (the host name in each rank's trace), and the collectives of a
large job as a table per collective of the step, with the rank that arrives last most often.

A collective is **inter-node** when its ranks are on more than one host. A node is **slow in
inter-node collectives** when most of its ranks (:data:`NODE_SHARE`, at least 2) stand out
high, by robust statistics (:func:`tracekit.ranks.robust.outliers`), in their own transfer
of those collectives (from the last rank's arrival to their own end): its links, not its
compute, hold the collective back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import pandas as pd

from tracekit.ranks.groups import Groups, lookup, nanmax, series_median
from tracekit.ranks.robust import outliers

NODE_SHARE = 0.75
NODE_COLUMNS = [
    "host", "ranks", "first_rank", "last_rank", "step_time_ms", "compute_ms",
    "arrival_wait_ms", "input_ms", "internode_transfer_ms", "flagged",
]  # fmt: skip
COLLECTIVE_COLUMNS = [
    "pg", "index", "kind", "message_bytes", "per_step", "group_ranks", "transfer_ms",
    "wait_mean_ms", "wait_p99_ms", "last_rank", "last_count", "last_pct", "inter_node",
]  # fmt: skip


@dataclass(frozen=True)
class SlowNode:
    host: str
    ranks: tuple[int, ...]  # the node's analysed ranks
    flagged: tuple[int, ...]  # those that stand out
    transfer_ms: float  # the node's median own transfer per step (inter-node collectives)
    job_ms: float  # the job's median
    ratio: float


def inter_node(inst: pd.DataFrame, hosts: dict[int, str | None]) -> pd.Series:
    """Per instance: its collective's ranks span more than one (known) host."""
    if not len(inst):
        return pd.Series(dtype=bool)
    known = {int(r): h for r, h in hosts.items() if isinstance(h, str)}
    names = sorted(set(known.values()))
    code = lookup(inst["rank"].to_numpy(), {r: names.index(h) for r, h in known.items()}, -1)
    g = Groups.of(inst["key"].to_numpy())
    hosts_of = g.nunique(code) - g.max((code < 0).astype(np.int64))  # an unknown host: none
    return cast(pd.Series, pd.Series((hosts_of > 1)[g.inverse], index=inst.index, name="key"))


def node_table(fig: pd.DataFrame, flagged: set[int]) -> pd.DataFrame:
    """One row per host: its ranks and their medians (``fig``: per-rank figures with
    ``host``); ``flagged``: how many of its ranks a finding names."""
    host = fig["host"].to_numpy(dtype=object) if len(fig) else np.zeros(0, dtype=object)
    has = ~np.asarray(pd.isna(host), dtype=bool)  # groupby's dropna
    if not has.any():
        return cast(pd.DataFrame, pd.DataFrame(columns=NODE_COLUMNS))
    names, code = np.unique(host[has].astype(str), return_inverse=True)
    g = Groups.of(code)
    rank = fig["rank"].to_numpy()[has]
    medians = ("step_time_ms", "compute_ms", "arrival_wait_ms", "input_ms", "internode_transfer_ms")
    cols = {
        "host": pd.Index(names).astype(str),
        "ranks": g.sizes,
        "first_rank": g.min(rank),
        "last_rank": g.max(rank),
        **{c: g.median(fig[c].to_numpy(dtype=float)[has]) for c in medians},
        "flagged": g.sum(np.isin(rank, list(flagged)).astype(np.int64)),
    }
    order = np.argsort(cols["first_rank"], kind="stable")  # distinct: any sort's order
    return cast(pd.DataFrame, pd.DataFrame({c: cols[c][order] for c in NODE_COLUMNS}))


def slow_nodes(fig: pd.DataFrame, step_median: float) -> list[SlowNode]:
    """The nodes whose ranks are slow in inter-node collectives (see the module)."""
    if "host" not in fig or fig["host"].isna().all():
        return []
    hit = [o.rank for o in outliers(fig, "internode_transfer_ms", step_median)]
    if not hit:
        return []
    transfer = fig["internode_transfer_ms"].to_numpy(dtype=float)
    job = float(np.nanmedian(transfer))
    host = fig["host"].to_numpy(dtype=object)
    has = np.flatnonzero(~np.asarray(pd.isna(host), dtype=bool))  # groupby's dropna
    names, code = np.unique(host[has].astype(str), return_inverse=True)  # sorted, as groupby
    g = Groups.of(code)
    host_of = dict(zip(fig["rank"].astype(int).tolist(), host.tolist(), strict=True))
    rank = fig["rank"].to_numpy()
    out = []
    for k, name in enumerate(names.tolist()):
        rows = has[g.order[g.starts[k] : g.starts[k] + g.sizes[k]]]  # the node's, in order
        ranks = tuple(int(r) for r in rank[rows])
        mine = tuple(r for r in hit if host_of.get(r) == name)
        if len(mine) < 2 or len(mine) < NODE_SHARE * len(ranks):
            continue
        ms = series_median(transfer[rows])
        out.append(SlowNode(name, ranks, mine, ms, job, ms / job if job > 0 else np.nan))
    return sorted(out, key=lambda n: -n.ratio)


def _most_often(values: np.ndarray) -> tuple[int, int]:
    """The value seen most often and how often (a tie: the one seen first), as
    ``Series.value_counts()`` orders them."""
    uniq, first, counts = np.unique(values, return_index=True, return_counts=True)
    top = np.flatnonzero(counts == counts.max())
    k = top[np.argmin(first[top])]
    return int(uniq[k]), int(counts[k])


def collective_table(inst: pd.DataFrame, matched: pd.DataFrame, steps: int) -> pd.DataFrame:
    """Per collective of the step (process group, position in the step): its kind and size,
    the median transfer over its instances, the wait for the last rank (mean over ranks and
    instances, and the 99th percentile), and the rank that arrived last most often."""
    if not len(inst) or not len(matched):
        return cast(pd.DataFrame, pd.DataFrame(columns=COLLECTIVE_COLUMNS))
    sel = np.flatnonzero((matched["ranks"].to_numpy() >= 2) & matched["pg"].notna().to_numpy())
    if not len(sel):  # (a missing group: groupby's dropna)
        return cast(pd.DataFrame, pd.DataFrame(columns=COLLECTIVE_COLUMNS))

    def m(c: str, dtype: Any = None) -> np.ndarray:  # a column of those collectives
        return np.asarray(matched[c].to_numpy(dtype=dtype)[sel])

    # one group per (pg, index), in that order: pg's rank among the names, then index
    pgs, pg_code = np.unique(matched["pg"].astype(str).to_numpy()[sel], return_inverse=True)
    index = m("index", np.int64)
    lo = int(index.min())
    g = Groups.of(pg_code * (int(index.max()) - lo + 1) + (index - lo))
    # each instance of those collectives: its group, and the groups' instances in order
    m_keys = m("key", np.int64)
    by_key = np.argsort(m_keys, kind="stable")
    key = inst["key"].to_numpy(dtype=np.int64)
    at_key = np.minimum(np.searchsorted(m_keys[by_key], key), len(m_keys) - 1)
    has = m_keys[by_key][at_key] == key
    gid = g.inverse[by_key[at_key[has]]]
    order = np.argsort(gid, kind="stable")  # each group's instances in their own order
    wait = (inst["arrival_wait_ns"].to_numpy(dtype=float) / 1e6)[has][order]
    at = np.searchsorted(gid[order], np.arange(len(g.keys) + 1))
    inter = inst["inter_node"].to_numpy(dtype=bool)[has][order] if "inter_node" in inst else None
    wait_mean, wait_p99 = _means_p99(wait, at)
    nbytes = nanmax(g, m("message_bytes", float))
    group_ranks = g.max(m("ranks"))
    transfer = g.median(m("transfer_ns")) / 1e6
    first, sizes = g.first_row(), g.sizes
    lr = m("last_rank", np.int64)
    kinds = m("kind").tolist()
    most = [_most_often(lr[g.order[a : a + n]]) for a, n in zip(g.starts, sizes, strict=True)]
    count = np.asarray([c for _, c in most], dtype=np.int64)
    cols = {
        "pg": [str(pgs[pg_code[f]]) for f in first],
        "index": index[first],
        "kind": [str(kinds[f]) for f in first],
        "message_bytes": nbytes.astype(float),
        "per_step": sizes / max(1, steps),
        "group_ranks": group_ranks.astype(np.int64),
        "transfer_ms": transfer.astype(float),
        "wait_mean_ms": wait_mean,
        "wait_p99_ms": wait_p99,
        "last_rank": np.asarray([r for r, _ in most], dtype=np.int64),
        "last_count": count,
        "last_pct": 100.0 * count / sizes,
        "inter_node": (
            np.asarray([bool(inter[at[k] : at[k + 1]].any()) for k in range(len(g.keys))])
            if inter is not None
            else np.zeros(len(g.keys), dtype=bool)
        ),
    }
    return cast(pd.DataFrame, pd.DataFrame(cols, columns=COLLECTIVE_COLUMNS))


def _means_p99(values: np.ndarray, at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The mean and the 99th percentile of each run ``values[at[k]:at[k + 1]]`` (NaN where
    empty), as ``np.mean`` and ``np.percentile`` of each: one call per run length, the
    runs of that length stacked as rows."""
    n = np.diff(at)
    mean, p99 = np.full(len(n), np.nan), np.full(len(n), np.nan)
    for size in np.unique(n[n > 0]).tolist():
        rows = np.flatnonzero(n == size)
        block = values[at[rows][:, None] + np.arange(size)]
        mean[rows] = block.mean(axis=1)
        p99[rows] = np.percentile(block, 99, axis=1)
    return mean, p99
