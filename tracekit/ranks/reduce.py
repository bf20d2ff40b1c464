"""The cross-rank step: a reduction over the per-rank results (:mod:`tracekit.ranks.perrank`).

1. **Clock.** Every rank's times are put on one time base (its ``trace_start_ns`` added).
   Ranks on one host share a clock; ranks on different hosts, or ranks whose first
   collective is impossible on their clocks (one rank finished it before another started
   it), are aligned on that first collective: each rank is shifted so that it *ends* the
   collective when the lowest rank does (a collective ends at nearly the same moment on
   every rank; it starts when each rank arrives), then a rank whose transfers are slower
   than the job's is moved by its late end there (:mod:`tracekit.ranks.latends`).
   :class:`Clock` says which was done.
2. **Collectives** are matched across ranks (:func:`tracekit.ranks.collectives.match`):
   transfer, sync wait, algbw, busbw, who arrived last.
3. **Per rank** (over the steps every rank has): step time, GPU busy, compute,
   communication, exposed communication, idle (from each rank's light timeline pass where
   it has one that joins its full pass, :mod:`tracekit.ranks.lightpass`; which pass is
   said per rank, :func:`timeline_words`), sync wait, memory peak; **per step** the
   slowest rank and its lead over the median, the rank the others waited for; the **skew**
   of the ranks' median step times, ``(largest - smallest) / smallest``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np
import pandas as pd

from tracekit.ranks import bandwidth as BW
from tracekit.ranks.collectives import (
    COMMUNICATION,
    Keyed,
    keyed,
    match,
    timed,
)
from tracekit.ranks.groups import (
    Groups,
    ascending,
    descending,
    lookup,
    series_mean,
    series_median,
    series_mode,
    series_sum,
    value_counts,
    with_added,
)
from tracekit.ranks.latends import late_ends
from tracekit.ranks.measured import Measured, reconcile
from tracekit.ranks.nodes import inter_node
from tracekit.ranks.readback import lanes_ms, lanes_of, load
from tracekit.ranks.story import JobView, job_view
from tracekit.summary.timeline import FULL, LIGHT, RECORDER_WORDS

ALIGN_TOLERANCE_NS = 5_000  # a first collective "impossible" by more than this: align


@dataclass(frozen=True)
class Clock:
    aligned: bool
    offsets_ns: dict[int, int]  # added to each rank's times
    anchor: str | None  # the collective aligned on
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {
            "aligned": self.aligned,
            "offsets_ns": {str(r): v for r, v in self.offsets_ns.items()},
            "anchor": self.anchor,
            "reason": self.reason,
        }


def impossible(inst: pd.DataFrame, offsets: dict[int, int]) -> int:
    """How many collectives seen on several ranks would end on one rank before another
    started them (by more than :data:`ALIGN_TOLERANCE_NS`) with these clock offsets."""
    off = lookup(inst["rank"].to_numpy(), offsets, 0).astype(np.int64)
    g = Groups.of(inst["key"].to_numpy())
    start = g.max(inst["ts"].to_numpy(dtype=np.int64) + off)
    end = g.min(inst["end"].to_numpy(dtype=np.int64) + off)
    return int(((g.sizes >= 2) & (start - end > ALIGN_TOLERANCE_NS)).sum())


def align_clocks(
    inst: pd.DataFrame,
    hosts: dict[int, str | None],
    keys: pd.Series | None = None,
    k: Keyed | None = None,
) -> Clock:
    """See the module's docstring (step 1): ranks of different hosts are aligned on the
    first collective; ranks of one host (or unknown hosts) only when that makes fewer of
    their collectives impossible than their own clocks do. ``keys``: the instances'
    :func:`~tracekit.ranks.collectives.assign_keys`, if known; ``k``: their
    :func:`~tracekit.ranks.collectives.keyed`, if known (the clock needs only when each
    collective started on its last rank, not the whole match)."""
    ranks = sorted(hosts)
    none = {r: 0 for r in ranks}
    if not len(inst) or len(np.unique(inst["rank"].to_numpy())) < 2:
        return Clock(False, none, None, "no collective seen on two ranks: each rank's own clock")
    k = keyed(inst, keys) if k is None else k
    inst2, fx = k.inst, k.fixed
    multi = np.flatnonzero((fx["ranks"] >= 2) & fx["consistent"])
    if not len(multi):
        return Clock(False, none, None, "no collective matched across ranks: own clocks")
    latest = k.g.max(inst2["ts"].to_numpy(dtype=np.int64))  # each one's latest start
    at = np.lexsort((latest[multi], fx["step"].to_numpy()[multi]))
    first = int(multi[at[0]])  # the first by (step, latest start), then by key
    key = int(fx["key"][first])
    anchor = (
        f"{fx['kind'].iloc[first]} #{int(fx['index'].iloc[first])} of group "
        f"{fx['pg'].iloc[first]} in step {int(fx['step'].iloc[first])}"
    )
    sel = inst2["key"].to_numpy() == key
    ends = inst2["end"].to_numpy(dtype=np.int64)[sel]
    end_of = {int(r): int(e) for r, e in zip(inst2["rank"].to_numpy()[sel], ends, strict=True)}
    ref = end_of[min(end_of)]
    offsets = {r: ref - end_of[r] if r in end_of else 0 for r in ranks}
    for r, late in late_ends(inst2, offsets).items():
        offsets[r] += late
    known = {h for h in hosts.values() if h}
    if len(known) > 1:
        return Clock(True, offsets, anchor, "aligned on the first collective (traces from "
                     "different hosts)")  # fmt: skip
    own, aligned = impossible(inst2, none), impossible(inst2, offsets)
    if own and aligned < own:
        return Clock(True, offsets, anchor, f"aligned on the first collective ({own} of "
                     f"{len(multi)} collectives end on one rank before another starts them "
                     f"on the ranks' own clocks, {aligned} once aligned)")  # fmt: skip
    where = "one host" if known else "hosts unknown"
    return Clock(False, none, anchor, f"one clock ({where}): aligning on the first "
                 f"collective would not make the ranks' collectives more consistent "
                 f"({own} impossible on their own clocks, {aligned} aligned)")  # fmt: skip


def _shift(df: pd.DataFrame, cols: list[str], offsets: dict[int, int]) -> pd.DataFrame:
    """``df`` with each rank's offset added to ``cols`` (a copy; ``df`` where none moves)."""
    if not len(df) or not any(offsets.values()):
        return df
    off = lookup(df["rank"].to_numpy(), offsets, 0).astype(np.int64)
    df = df.copy()
    for c in cols:
        df[c] = df[c].to_numpy(dtype=np.int64) + off
    return df


def common_steps(steps: pd.DataFrame, ranks: list[int]) -> list[int]:
    """The steps every rank analysed."""
    if not ranks:
        return []
    rank = steps["rank"].to_numpy()
    mine = np.isin(rank, list(set(ranks)))
    g = Groups.of(steps["step"].to_numpy()[mine])
    n = g.nunique(rank[mine])  # the ranks that analysed each step
    return sorted(int(x) for x in g.keys[n == len(set(ranks))])


def _per_rank_step(
    s: pd.DataFrame, inst: pd.DataFrame, cols: list[str], sel: Any = None
) -> list[np.ndarray]:
    """Per row of ``s`` and per column of ``cols``: that column of the instances
    (integers) summed over the row's (rank, step), 0 where it has none; the last column
    only over the instances where ``sel`` holds (None: all). One grouping for all."""
    zeros = [np.zeros(len(s)) for _ in cols]
    if not len(inst) or not len(s):
        return zeros
    i_rank, i_step = inst["rank"].to_numpy(np.int64), inst["step"].to_numpy(np.int64)
    s_rank, s_step = s["rank"].to_numpy(np.int64), s["step"].to_numpy(np.int64)
    lo = min(int(i_step.min()), int(s_step.min()))
    span = max(int(i_step.max()), int(s_step.max())) - lo + 1
    g = Groups.of(i_rank * span + (i_step - lo))
    want = s_rank * span + (s_step - lo)
    at = np.minimum(np.searchsorted(g.keys, want), len(g.keys) - 1)
    found = g.keys[at] == want
    out = []
    for j, c in enumerate(cols):
        if c not in inst:
            out.append(zeros[j])
            continue
        v = inst[c].to_numpy(np.int64)
        if j == len(cols) - 1 and sel is not None:
            v = np.where(np.asarray(sel, dtype=bool), v, 0)
        out.append(np.where(found, g.sum(v).astype(float)[at], 0.0))
    return out


RANK_STEP_MS = (
    ("busy_ms", "busy_ns"), ("compute_ms", "compute_ns"), ("comm_ms", "comm_ns"),
    ("comm_sum_ms", "comm_sum_ns"), ("exposed_comm_ms", "exposed_comm_ns"),
    ("idle_ms", "idle_ns"),
)  # fmt: skip


def rank_step_table(steps: pd.DataFrame, inst: pd.DataFrame, t0: int) -> pd.DataFrame:
    """Per (rank, step): times in ms from ``t0``; sync wait of its collectives; own work
    (the full pass's step time minus that sync wait: both of the profiled window, whichever
    pass the step's other figures come from); input wait; the wait for the last rank's
    arrival (:mod:`tracekit.ranks.collectives`) and its own transfer in inter-node
    collectives (``inst["inter_node"]``). Numpy on the steps' integer (or float) columns,
    sorted by (step, rank)."""
    s = steps
    inter = inst["inter_node"] if "inter_node" in inst.columns else None
    sync, arrival, internode = _per_rank_step(
        s, inst, ["wait_ns", "arrival_wait_ns", "own_transfer_ns"], inter
    )
    rank, step = s["rank"].to_numpy().astype(np.int64), s["step"].to_numpy().astype(np.int64)
    idle = s["idle_ns"].to_numpy()
    if "input_ns" in s:
        inp = s["input_ns"].to_numpy()
        inp = np.where(np.isnan(inp), 0, inp) if inp.dtype.kind == "f" else inp
    else:
        inp = 0 * idle
    cols: dict[str, np.ndarray] = {
        "rank": rank,
        "step": step,
        "start_ms": (s["start_ns"].to_numpy() - t0) / 1e6,
        "step_time_ms": s["step_time_ns"].to_numpy() / 1e6,
        **{ms: s[ns].to_numpy() / 1e6 for ms, ns in RANK_STEP_MS},
        "sync_wait_ms": sync / 1e6,
        "own_work_ms": np.clip(s["full_step_time_ns"].to_numpy() - sync, 0, None) / 1e6,
        "input_ms": inp / 1e6,
        "arrival_wait_ms": arrival / 1e6,
        "internode_transfer_ms": internode / 1e6,
    }
    order = np.lexsort((rank, step))  # sort_values(["step", "rank"]): stable
    return cast(pd.DataFrame, pd.DataFrame({c: v[order] for c, v in cols.items()}))


def _columns(df: pd.DataFrame, cols: list[str]) -> np.ndarray:
    """``df[cols]`` as floats, one row per column (``df[cols]`` indexes every name)."""
    return np.stack([df[c].to_numpy(dtype=float) for c in cols]) if cols else np.zeros((0, 0))


def last_ranks(matched: pd.DataFrame) -> np.ndarray:
    """The rank that arrived last at each collective seen on two ranks or more."""
    if not len(matched):
        return np.zeros(0, dtype=np.int64)
    seen = matched["ranks"].to_numpy() >= 2
    return np.asarray(matched["last_rank"].to_numpy(dtype=np.int64)[seen])


def stragglers(rs: pd.DataFrame, matched: pd.DataFrame) -> pd.DataFrame:
    """Per step: the slowest rank, its step time, the median, its lead; the rank whose own
    work (step time - sync wait) was longest and its lead; the rank that arrived last at
    most collectives."""
    rows = []
    by_step = Groups.of(rs["step"].to_numpy())
    rank = rs["rank"].to_numpy()
    st, work = rs["step_time_ms"].to_numpy(dtype=float), rs["own_work_ms"].to_numpy(dtype=float)
    last_of: dict[int, np.ndarray] = {}  # per step, the last rank of each collective
    if len(matched):
        seen = matched["ranks"].to_numpy() >= 2
        by = Groups.of(matched["step"].to_numpy()[seen])
        lr = matched["last_rank"].to_numpy()[seen][by.order]
        last_of = {
            int(k): lr[a : a + n] for k, a, n in zip(by.keys, by.starts, by.sizes, strict=True)
        }
    for k, step in enumerate(by_step.keys.tolist()):
        at = by_step.order[by_step.starts[k] : by_step.starts[k] + by_step.sizes[k]]
        med, work_med = float(series_median(st[at])), float(series_median(work[at]))
        slow, worker = at[np.nanargmax(st[at])], at[np.nanargmax(work[at])]
        last = last_of.get(step)
        rows.append(
            {
                "step": int(step),
                "slowest_rank": int(rank[slow]),
                "step_time_ms": float(st[slow]),
                "median_ms": med,
                "lead_ms": float(st[slow]) - med,
                "lead_pct": 100.0 * (float(st[slow]) - med) / med if med else math.nan,
                "most_work_rank": int(rank[worker]),
                "own_work_ms": float(work[worker]),
                "own_work_lead_ms": float(work[worker]) - work_med,
                "waited_on_rank": series_mode(last) if last is not None else -1,
            }
        )
    return cast(pd.DataFrame, pd.DataFrame(rows))


def skew_pct(values: pd.Series) -> float | None:
    lo, hi = float(values.min()), float(values.max())
    return 100.0 * (hi - lo) / lo if lo > 0 else None


def class_shares(classes: pd.DataFrame, rs: pd.DataFrame) -> pd.DataFrame:
    """Per class, mean over ranks: kernel ms per step, share of the rank's GPU busy time
    (union of its intervals / union of all); communication also as exposed time."""
    if not len(classes):
        return cast(
            pd.DataFrame, pd.DataFrame(columns=["class", "kernel_ms_per_step", "union_share_pct"])
        )
    by_rank = Groups.of(rs["rank"].to_numpy())
    per_rank = by_rank.nunique(rs["step"].to_numpy())
    steps_per_rank = dict(zip(by_rank.keys.tolist(), per_rank.tolist(), strict=True))
    n = np.maximum(lookup(classes["rank"].to_numpy(), steps_per_rank, 1), 1).astype(float)
    busy = classes["busy_ns"].to_numpy(dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        pct = np.where(busy > 0, 100.0 * classes["union_ns"].to_numpy(dtype=float) / busy, np.nan)
    # the classes in order of appearance (factorized as objects: hashed, not Arrow-encoded)
    code = pd.factorize(classes["class"].to_numpy(dtype=object))[0]
    has = np.flatnonzero(code >= 0)  # groupby's dropna
    by_class = Groups.of(code[has])
    kernel_ms = (classes["kernel_ns"].to_numpy() / 1e6)[has] / n[has]
    per_step, share = by_class.fmean(np.stack([kernel_ms, pct[has]]))
    order = descending(share)  # sort_values("union_share_pct", ascending=False)
    names = classes["class"].array.take(has[by_class.first_row()][order])
    exposed, busy_ms = by_rank.fsum(_columns(rs, ["exposed_comm_ms", "busy_ms"]))
    exposed_share = np.full(len(order), np.nan)
    if COMMUNICATION in set(names) and series_sum(busy_ms) > 0:
        with np.errstate(invalid="ignore", divide="ignore"):
            comm = series_mean(100.0 * exposed / np.where(busy_ms > 0, busy_ms, np.nan))
        exposed_share = np.where(np.asarray(names == COMMUNICATION, dtype=bool), comm, np.nan)
    return cast(
        pd.DataFrame,
        pd.DataFrame(
            {
                "class": names,
                "kernel_ms_per_step": per_step[order],
                "union_share_pct": share[order],
                "exposed_share_pct": exposed_share,
            }
        ),
    )


@dataclass
class RanksSummary:
    """Everything the report shows about the ranks (tables: Parquet; :meth:`to_json`:
    the ``summary.json`` ``ranks`` block)."""

    world_size: int
    ranks: list[int]
    missing: list[int]
    backend: str | None
    on: str  # 'gpu' | 'cpu'
    steps: list[int]
    per_rank: pd.DataFrame
    rank_steps: pd.DataFrame
    stragglers: pd.DataFrame
    collectives: pd.DataFrame  # matched, one row per collective
    collective_table: pd.DataFrame  # aggregated (tracekit.ranks.bandwidth.AGG_COLUMNS)
    by_kind: dict[str, dict[str, Any]]
    class_shares: pd.DataFrame
    lanes: pd.DataFrame  # rank, what, start_ms, end_ms (common base)
    clock: Clock
    ceiling: BW.Ceiling | None
    exposed_comm_pct: float | None  # mean over ranks, of the step time
    skew_pct: float | None
    slowest_rank: int | None
    waited_on_rank: int | None
    notes: list[str] = field(default_factory=list)
    # for the merged trace: the per-rank result folders, each rank's time base (its
    # trace_start_ns), the common base's zero (ns) and the matched instances
    dirs: dict[int, Path] = field(default_factory=dict)
    bases: dict[int, int] = field(default_factory=dict)
    t0_ns: int = 0
    instances: pd.DataFrame = field(default_factory=pd.DataFrame)
    detail_rank: int | None = None  # the rank a report details (set by the report)
    damaged: dict[int, str] = field(default_factory=dict)  # rank -> why it is not analysed
    job: JobView | None = None  # the job at scale: distributions, findings, nodes
    shown: list[int] = field(default_factory=list)  # ranks drawn (timeline, merged trace)
    measured: Measured | None = None  # the trace beside the run's unprofiled measurements

    @property
    def timeline_source(self) -> str:
        """The pass the per-rank busy/compute/comm/exposed/idle come from: light | full |
        mixed."""
        return timeline_source(self.per_rank)

    @property
    def timeline_words(self) -> str:
        """:func:`timeline_words`: said beside those figures."""
        return timeline_words(self.per_rank)

    def rank_exposed_comm_pct(self, rank: int | None) -> float | None:
        """``rank``'s own exposed communication, % of its step (None: not a GPU analysis,
        or no such rank). A report's verdict splits one rank's step: it takes this, not the
        mean over ranks, which set against that rank's busy time can exceed it."""
        if self.on != "gpu" or rank is None or not len(self.per_rank):
            return None
        row = self.per_rank.loc[self.per_rank["rank"] == rank, "exposed_comm_pct"]
        v = float(row.iloc[0]) if len(row) else math.nan
        return v if math.isfinite(v) else None


def per_rank_table(
    rs: pd.DataFrame,
    info: dict[int, dict[str, Any]],
    matched: pd.DataFrame,
    clock: Clock,
    hosts: dict[int, str | None],
) -> pd.DataFrame:
    """One row per rank: medians and per-step means over the common steps."""
    if not len(rs):
        return cast(pd.DataFrame, pd.DataFrame())
    g = Groups.of(rs["rank"].to_numpy())
    means = ["busy_ms", "compute_ms", "comm_ms", "comm_sum_ms", "exposed_comm_ms", "idle_ms",
             "sync_wait_ms", "own_work_ms"]  # fmt: skip
    sums = ["step_time_ms", "idle_ms", "exposed_comm_ms"]
    got = dict(zip(means, g.fmean(_columns(rs, means)), strict=True))
    summed = dict(zip(sums, g.fsum(_columns(rs, sums)), strict=True))

    def mean(c: str) -> np.ndarray:
        return np.asarray(got[c])

    total = summed["step_time_ms"]
    ranks = [int(r) for r in g.keys]
    last = dict(value_counts(last_ranks(matched)))

    def meta(key: str) -> list[Any]:
        return [info.get(r, {}).get(key) for r in ranks]

    pct = 100.0 / np.where(total > 0, total, np.nan)
    df = pd.DataFrame(
        {
            "rank": ranks,
            "host": [hosts.get(r) for r in ranks],
            "device": meta("device"),
            "trace": [Path(str(t or "")).name for t in meta("trace")],
            "steps": g.sizes,
            "step_time_ms": g.median(rs["step_time_ms"].to_numpy(dtype=float)),
            "gpu_busy_ms": mean("busy_ms"),
            "compute_ms": mean("compute_ms"),
            "comm_kernel_ms": mean("comm_ms"),
            "comm_kernel_sum_ms": mean("comm_sum_ms"),
            "exposed_comm_ms": mean("exposed_comm_ms"),
            "overlapped_comm_ms": mean("comm_ms") - mean("exposed_comm_ms"),
            "gpu_idle_ms": mean("idle_ms"),
            "gpu_idle_pct": summed["idle_ms"] * pct,
            "exposed_comm_pct": summed["exposed_comm_ms"] * pct,
            "sync_wait_ms": mean("sync_wait_ms"),
            "own_work_ms": mean("own_work_ms"),
            "collectives_per_step": pd.to_numeric(
                pd.Series(meta("collectives_per_step")), errors="coerce"
            ).array,
            "last_arrivals": [last.get(r, 0) for r in ranks],
            **{
                c: _nullable_ints(meta(c)).array
                for c in ("peak_allocated_bytes", "peak_reserved_bytes")
            },
            "clock_offset_ms": [clock.offsets_ns.get(r, 0) / 1e6 for r in ranks],
            "timeline_source": [x or FULL for x in meta("timeline_source")],
            "timeline_reason": meta("timeline_reason"),
            "timeline_recorder": meta("timeline_recorder"),
        }
    )
    return cast(pd.DataFrame, df)


def _nullable_ints(values: list[Any]) -> pd.Series:
    """``values`` as a column of the per-rank table: numbers (unknown: missing), Int64."""
    return cast(pd.Series, pd.to_numeric(pd.Series(values), errors="coerce").astype("Int64"))


SHOW_ALL = 32  # up to this many ranks, every rank is drawn; above, :func:`shown_ranks`
SHOWN = 16


def shown_ranks(job: JobView, ranks: list[int]) -> list[int]:
    """The ranks the timeline and the merged trace show: every rank of a small job; of a
    large one the first rank, the ranks the findings name, the step's tail and the median
    rank, at most :data:`SHOWN`."""
    if len(ranks) <= SHOW_ALL:
        return list(ranks)
    want = [ranks[0], *job.named_ranks]
    step = next((d for d in job.distributions if d.part == "step_time_ms"), None)
    if step is not None:
        want += [r for r, _ in step.tail]
        fig = job.figures  # the median rank of sort_values("step_time_ms")
        mid = ascending(fig["step_time_ms"].to_numpy())[len(fig) // 2]
        want.append(int(fig["rank"].iloc[mid]))
    out: list[int] = []
    for r in want:
        if r in ranks and r not in out and len(out) < SHOWN:
            out.append(r)
    return sorted(out)


JOB_COLUMNS = ("input_ms", "arrival_wait_ms", "internode_transfer_ms")


def with_job_columns(per_rank: pd.DataFrame, job: JobView) -> pd.DataFrame:
    """``per_rank`` with the job view's figures (medians over steps) and ``finding``: the
    kind of the finding that names the rank (``""``: none)."""
    if not len(per_rank):
        return per_rank
    fig = job.figures
    ranks = per_rank["rank"].to_numpy(dtype=np.int64)
    by_rank = np.argsort(fig["rank"].to_numpy(dtype=np.int64), kind="stable")
    fig_rank = fig["rank"].to_numpy(dtype=np.int64)[by_rank]
    at = by_rank[np.minimum(np.searchsorted(fig_rank, ranks), max(len(fig_rank) - 1, 0))]
    found = fig["rank"].to_numpy(dtype=np.int64)[at] == ranks if len(fig_rank) else ranks < 0
    nan = np.full(len(ranks), np.nan)
    cols: dict[str, Any] = {  # Series.map(fig[c]): NaN where the rank has no figures
        c: np.where(found, fig[c].to_numpy(dtype=float)[at], np.nan) if c in fig else nan
        for c in JOB_COLUMNS
    }
    kind: dict[int, str] = {}
    for f in job.findings:
        for r in f.ranks:
            kind.setdefault(r, f.kind)
    cols["finding"] = pd.Series([kind.get(r, "") for r in ranks.tolist()], index=per_rank.index)
    return with_added(per_rank, cols)


def timeline_words(per_rank: pd.DataFrame) -> str:
    """Which pass the ranks' busy, compute, communication, exposed communication and idle
    come from: ``from the light pass (CUPTI, kernels only)``, ``from the profiled pass:
    <reason>``, or rank by rank where the ranks differ."""
    if "timeline_source" not in per_rank or not len(per_rank):
        return ""

    def one(src: Any, rec: Any, why: Any) -> str:
        if src == LIGHT:
            return f"from the light pass ({RECORDER_WORDS.get(str(rec), 'recorder unknown')})"
        return f"from the profiled pass: {why or 'no light timeline pass'}"

    cols = ("rank", "timeline_source", "timeline_recorder", "timeline_reason")
    each = [
        (int(r), one(src, rec, why))
        for r, src, rec, why in zip(*(per_rank[c].tolist() for c in cols), strict=True)
    ]
    if len({w for _, w in each}) == 1:
        return each[0][1]
    return "; ".join(f"rank {r} {w}" for r, w in each[:8]) + ("; …" if len(each) > 8 else "")


def timeline_source(per_rank: pd.DataFrame) -> str:
    """``light`` or ``full`` where every rank's figures come from that pass, else ``mixed``."""
    got = set(per_rank["timeline_source"]) if "timeline_source" in per_rank else {FULL}
    got = got or {FULL}
    return str(got.pop()) if len(got) == 1 else "mixed"


def match_notes(matched: pd.DataFrame) -> list[str]:
    """What the matching says about the traces: partial, impossible, inconsistent, none."""
    notes: list[str] = []
    if not len(matched):
        return notes
    m_ranks = matched["ranks"].to_numpy()
    incomplete = int((~matched["complete"].to_numpy(dtype=bool)).sum())
    if incomplete:
        notes.append(
            f"{incomplete} of {len(matched)} collectives were seen on fewer ranks than their "
            "group has: transfer and wait are over the ranks present"
        )
    late = matched["latest_start"].to_numpy() - matched["earliest_end"].to_numpy()
    bad = (m_ranks >= 2) & (late > ALIGN_TOLERANCE_NS)
    if int(bad.sum()):
        notes.append(
            f"{int(bad.sum())} of {len(matched)} matched collectives end on one rank before "
            "another starts them: their transfer is 0 and all their time counts as wait; the "
            "traces may have lost collectives (sampled or cut), so the order matching is off"
        )
    inconsistent = int((~matched["consistent"].to_numpy(dtype=bool)).sum())
    if inconsistent:
        notes.append(
            f"{inconsistent} matched collectives differ in kind or size between ranks: the "
            "ranks' traces may start at different collectives"
        )
    if not int((m_ranks >= 2).sum()):
        notes.append(
            "no collective was seen on two ranks: are these traces of one job? (different "
            "process groups, or traces of different runs with the same world size)"
        )
    return notes


def reduce(
    dirs: dict[int, Path],
    *,
    world_size: int,
    backend: str | None = None,
    hosts: dict[int, str | None] | None = None,
    manifest: dict[str, Any] | None = None,
    notes: list[str] | None = None,
    damaged: dict[int, str] | None = None,
) -> RanksSummary:
    """The cross-rank summary from the per-rank result folders ``dirs`` (rank -> folder);
    ``damaged``: ranks of the job that could not be analysed (rank -> one line)."""
    ranks = sorted(dirs)
    L = load(dirs, None if len(ranks) <= SHOW_ALL else set())
    hosts = hosts or {r: None for r in ranks}
    notes = list(notes or [])
    # keyed once, for the clock and the match (which only redoes the times)
    k = keyed(L.instances) if len(L.instances) else None
    clock = align_clocks(L.instances, {r: hosts.get(r) for r in ranks}, None, k)
    if clock.aligned:
        notes.append(f"clocks {clock.reason}: {clock.anchor}")
    steps = _shift(L.steps, ["start_ns", "end_ns"], clock.offsets_ns)
    common = common_steps(steps, ranks)
    step = steps["step"].to_numpy()
    if len(common) < len(np.unique(step)):
        notes.append(
            f"the ranks' traces cover different steps: the {len(common)} step(s) all have "
            f"({', '.join(map(str, common)) or 'none'}) are compared"
        )
    keep = np.isin(step, common)
    steps = steps if keep.all() else steps[keep]  # (a filter keeping every row: a copy)
    sel = np.isin(L.instances["step"].to_numpy(), common) if len(L.instances) else keep[:0]
    if k is not None and bool(sel.all()):
        # a clock shift keeps each rank's order: the keys and the clock-free half stand
        matched, inst = timed(k, clock.offsets_ns if any(clock.offsets_ns.values()) else None)
    else:
        inst = _shift(L.instances, ["ts", "end"], clock.offsets_ns)
        matched, inst = match(inst[sel])
    inst = with_added(inst, {"inter_node": inter_node(inst, hosts)})
    t0 = int(steps["start_ns"].to_numpy().min()) if len(steps) else 0
    rs = rank_step_table(steps, inst, t0)
    per_rank = per_rank_table(rs, L.info, matched, clock, hosts)
    props: list[dict[str, Any]] = next(
        (list(i["device_properties"]) for i in L.info.values() if i.get("device_properties")),
        [],
    )
    ceil = BW.ceiling(manifest, props or [])
    on = "gpu" if any(i.get("on") == "gpu" for i in L.info.values()) else "cpu"
    notes.extend(match_notes(matched))
    strag = stragglers(rs, matched)
    measured, per_rank = reconcile(manifest, per_rank, rs)
    exposed = per_rank["exposed_comm_pct"].to_numpy(dtype=float) if len(per_rank) else np.zeros(0)
    medians = per_rank["step_time_ms"] if len(per_rank) else pd.Series()
    last = last_ranks(matched)
    damaged = dict(damaged or {})
    missing = [r for r in range(world_size) if r not in dirs and r not in damaged]
    job = job_view(
        rs, inst, matched, hosts, world_size=world_size, damaged=damaged, missing=missing
    )
    per_rank = with_job_columns(per_rank, job)
    shown = shown_ranks(job, ranks)
    lanes = L.lanes if len(ranks) <= SHOW_ALL else lanes_of(dirs, shown, L.info)
    return RanksSummary(
        world_size=world_size,
        ranks=ranks,
        missing=missing,
        damaged=damaged,
        job=job,
        backend=backend,
        on=on,
        steps=common,
        per_rank=per_rank,
        rank_steps=rs,
        stragglers=strag,
        collectives=matched,
        collective_table=BW.aggregate(matched, len(common), ceil),
        by_kind=BW.by_kind(matched, ceil),
        class_shares=class_shares(L.classes, rs),
        lanes=lanes_ms(lanes, clock.offsets_ns, rs, t0),
        shown=shown,
        clock=clock,
        ceiling=ceil,
        exposed_comm_pct=series_mean(exposed) if on == "gpu" and len(exposed) else None,
        skew_pct=skew_pct(medians) if len(medians) else None,
        slowest_rank=(
            int(per_rank["rank"].iloc[int(np.nanargmax(medians.to_numpy(dtype=float)))])
            if len(medians)
            else None
        ),
        waited_on_rank=series_mode(last) if len(last) else None,
        notes=notes,
        dirs=dict(dirs),
        bases={r: int(L.info[r].get("trace_start_ns") or 0) for r in ranks},
        t0_ns=t0,
        instances=inst,
        measured=measured,
    )
