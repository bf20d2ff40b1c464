"""The job's straggler story: which ranks and which node hold a many-rank job back, and why,
told once (:class:`JobView`), from the per-rank step table of the reduction.

* **slow in compute**: a rank whose compute per step stands out (:mod:`tracekit.ranks.robust`);
* **input stalls**: a rank whose input wait (host input with the GPU idle) stands out;
* **slow node**: a node whose ranks are slow in inter-node collectives
  (:mod:`tracekit.ranks.nodes`);
* **waits on others**: a rank whose step stands out but none of the above explains it and
  whose wait for others in collectives is above the median — a victim, not a cause;
* **damaged** / **missing**: ranks not analysed, one line each.

In a synchronous job every rank's step lasts about as long as the slowest's: the others wait
for it inside the collectives. So a cause is found in the parts of the step (compute, input,
own transfer), never in the step time, and the rank that arrives last at the collectives
says who the others waited for.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import pandas as pd

from tracekit.ranks import nodes as N
from tracekit.ranks.groups import Groups, descending, value_counts
from tracekit.ranks.robust import MIN_RANKS, Distribution, distributions, outliers

FIGURE_PARTS = (
    "step_time_ms", "compute_ms", "exposed_comm_ms", "arrival_wait_ms", "input_ms",
    "idle_ms", "internode_transfer_ms", "sync_wait_ms",
)  # fmt: skip


@dataclass(frozen=True)
class Finding:
    """One named fault: ``kind`` compute | input | node | waits | damaged | missing."""

    kind: str
    ranks: tuple[int, ...]
    text: str
    host: str | None = None
    z: float | None = None
    excess_ms: float | None = None


@dataclass
class JobView:
    """The job at scale: distributions, findings, nodes, collectives, verdict lines."""

    ranks: int
    world_size: int
    hosts: int
    figures: pd.DataFrame  # one row per rank: rank, host, FIGURE_PARTS, last_arrivals
    distributions: list[Distribution]
    findings: list[Finding]
    nodes: pd.DataFrame  # nodes.NODE_COLUMNS
    collectives: pd.DataFrame  # nodes.COLLECTIVE_COLUMNS
    verdict: list[str] = field(default_factory=list)
    heat_steps: pd.DataFrame = field(default_factory=pd.DataFrame)  # rank x step
    heat_waits: pd.DataFrame = field(default_factory=pd.DataFrame)  # rank x collective

    @property
    def named_ranks(self) -> list[int]:
        """The ranks a finding names (analysed ones), in order of the findings."""
        seen: list[int] = []
        for f in self.findings:
            if f.kind in ("damaged", "missing"):
                continue
            seen.extend(r for r in f.ranks if r not in seen)
        return seen


def rank_figures(
    rs: pd.DataFrame, hosts: dict[int, str | None], last: dict[int, int]
) -> pd.DataFrame:
    """Per rank: the median over steps of each part (ms per step), its host, and how many
    collectives it arrived last at (``last``: rank -> count)."""
    cols = [c for c in FIGURE_PARTS if c in rs]
    g = Groups.of(rs["rank"].to_numpy())
    ranks = g.keys.tolist()
    fig = pd.DataFrame(
        {
            "rank": g.keys,
            **{c: g.median(rs[c].to_numpy(dtype=float)) for c in cols},
            # the dtype Series.map infers (str where hosts are known; of no rank: int64)
            "host": pd.Series([hosts.get(r) for r in ranks], dtype=object).infer_objects()
            if ranks
            else pd.Series([], dtype=np.int64),
            "last_arrivals": np.asarray([last.get(r, 0) for r in ranks], dtype=np.int64),
        }
    )
    return cast(pd.DataFrame, fig)


def _ranges(ranks: list[int]) -> str:
    from tracekit.ranks.discover import _ranges as ranges

    return ranges(ranks)


def _ms(v: float) -> str:
    return f"{v:.2f} ms" if math.isfinite(v) else "n/a"


def find(fig: pd.DataFrame, total: int) -> list[Finding]:
    """Compute, input, node and waiting findings (see the module)."""
    if len(fig) < MIN_RANKS:
        return []
    step = float(fig["step_time_ms"].median())
    out: list[Finding] = []
    for r in outliers(fig, "compute_ms", step):
        out.append(Finding(
            "compute", (r.rank,),
            f"rank {r.rank} is slow in compute: {_ms(r.value)} per step, "
            f"{100 * (r.ratio - 1):+.1f} % over the median {_ms(r.median)} (robust z "
            f"{r.z:.0f}); it arrives last at {_last(fig, r.rank, total)}",
            z=r.z, excess_ms=r.excess,
        ))  # fmt: skip
    for r in outliers(fig, "input_ms", step):
        out.append(Finding(
            "input", (r.rank,),
            f"rank {r.rank} stalls on input: {_ms(r.value)} per step with the GPU idle "
            f"waiting for data (median {_ms(r.median)}; {100 * r.excess / step:.1f} % of the "
            f"step); it arrives last at {_last(fig, r.rank, total)}",
            z=r.z, excess_ms=r.excess,
        ))  # fmt: skip
    for n in N.slow_nodes(fig, step):
        out.append(Finding(
            "node", n.ranks,
            f"node {n.host} (ranks {_ranges(list(n.ranks))}) is slow in inter-node "
            f"collectives: its ranks' own transfer {_ms(n.transfer_ms)} per step, "
            f"{n.ratio:.1f}x the job's median {_ms(n.job_ms)} ({len(n.flagged)} of "
            f"{len(n.ranks)} ranks stand out)",
            host=n.host, excess_ms=n.transfer_ms - n.job_ms,
        ))  # fmt: skip
    explained = {r for f in out for r in f.ranks}
    wait_med = float(fig["arrival_wait_ms"].median())
    for r in outliers(fig, "step_time_ms", step):
        rank = r.rank
        if rank in explained:
            continue
        w = _of(fig, rank, "arrival_wait_ms")
        why = (
            f"it waits on others ({_ms(w)} per step in collectives, median {_ms(wait_med)})"
            if w > wait_med
            else "neither its compute, input nor transfer stands out"
        )
        out.append(Finding(
            "waits" if w > wait_med else "step", (rank,),
            f"rank {rank}'s step {_ms(r.value)} is {_ms(r.excess)} over the median: {why}",
            z=r.z, excess_ms=r.excess,
        ))  # fmt: skip
    return out


def _of(fig: pd.DataFrame, rank: int, col: str) -> float:
    """``col`` of ``rank``'s row (its first) in ``fig``."""
    return float(fig[col].to_numpy()[np.flatnonzero(fig["rank"].to_numpy() == rank)[0]])


def _last(fig: pd.DataFrame, rank: int, total: int) -> str:
    n = int(_of(fig, rank, "last_arrivals"))
    return f"{n} of {total} collectives"


def unanalysed(damaged: dict[int, str], missing: list[int]) -> list[Finding]:
    out = [Finding("damaged", (r,), f"not analysed: {why}") for r, why in sorted(damaged.items())]
    if missing:
        out.append(
            Finding(
                "missing",
                tuple(missing),
                f"missing: rank {_ranges(missing)} (no trace in the folder)",
            )
        )
    return out


def verdict(v: JobView, total: int) -> list[str]:
    """The job's verdict: its step, who holds it back, who waits."""
    d = {x.part: x for x in v.distributions}
    st = d.get("step_time_ms")
    out = []
    if st is not None:
        out.append(
            f"job: {v.ranks} of {v.world_size} ranks analysed on "
            f"{f'{v.hosts} node(s)' if v.hosts else 'unknown hosts'}; step "
            f"{_ms(st.median)} (median over ranks; p99 {_ms(st.p99)}, max {_ms(st.max)} "
            f"at rank {st.tail[0][0]})"
        )
    causes = [f for f in v.findings if f.kind in ("compute", "input", "node")]
    if causes:
        words = {"compute": "slow in compute", "input": "input stalls", "node": "slow links"}
        who = "; ".join(
            (f"node {f.host}" if f.kind == "node" else f"rank {f.ranks[0]}") + f" ({words[f.kind]})"
            for f in causes
        )
        out.append(f"held back by: {who}")
    elif len(v.figures) >= MIN_RANKS:
        out.append(
            "no rank or node stands out (robust z < 6 in compute, input and inter-node "
            "transfer): the ranks' spread is the job's own noise"
        )
    else:
        out.append(f"fewer than {MIN_RANKS} ranks: no rank is called an outlier")
    aw = d.get("arrival_wait_ms")
    if aw is not None and st is not None and st.median > 0 and total:
        top = int(descending(v.figures["last_arrivals"].to_numpy())[0])  # sort_values' first
        lr = {c: v.figures[c].iloc[top] for c in ("rank", "last_arrivals")}
        out.append(
            f"the others wait for them: wait for others {_ms(aw.median)} per step in "
            f"collectives, median over ranks ({100 * aw.median / st.median:.1f} % of the "
            f"step); the rank that arrives last most often: rank {int(lr['rank'])} "
            f"({int(lr['last_arrivals'])} of {total} collectives)"
        )
    return out


def pivot_mean(rows: pd.Series, cols: pd.Series, values: np.ndarray) -> pd.DataFrame:
    """``rows`` x ``cols`` (integers, named): the mean of ``values`` (NaN skipped) in each
    cell, as ``pivot_table(aggfunc="mean")`` gives it: a cell with no value is NaN, a row
    or column with none is left out."""
    r, c = rows.to_numpy(dtype=np.int64), cols.to_numpy(dtype=np.int64)
    v = np.asarray(values, dtype=float)
    ok = ~np.isnan(v)
    r, c, v = r[ok], c[ok], v[ok]
    if not len(v):
        empty = pd.DataFrame(
            index=pd.Index([], dtype=np.int64, name=rows.name),
            columns=pd.Index([], dtype=np.int64, name=cols.name),
        )
        return cast(pd.DataFrame, empty)
    rk, ri = np.unique(r, return_inverse=True)
    ck, ci = np.unique(c, return_inverse=True)
    g = Groups.of(ri * len(ck) + ci)
    grid = np.full(len(rk) * len(ck), np.nan)
    grid[g.keys] = g.fsum(v) / g.sizes  # pandas' group mean: a Kahan sum over the count
    return cast(
        pd.DataFrame,
        pd.DataFrame(
            grid.reshape(len(rk), len(ck)),
            index=pd.Index(rk, name=rows.name),
            columns=pd.Index(ck, name=cols.name),
        ),
    )


def heatmaps(rs: pd.DataFrame, inst: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """rank x step: work per step (step less wait for others), % over the step's median;
    rank x collective of the step: wait for others, ms (mean over steps)."""
    work = rs["step_time_ms"].to_numpy(dtype=float) - rs["arrival_wait_ms"].to_numpy(dtype=float)
    by_step = Groups.of(rs["step"].to_numpy())
    med = by_step.median(work)[by_step.inverse]  # groupby().transform("median")
    with np.errstate(invalid="ignore", divide="ignore"):
        pct = np.where(med > 0, 100.0 * (work - med) / med, np.nan)
    steps = pivot_mean(rs["rank"], rs["step"], pct)
    if not len(inst):
        return steps, pd.DataFrame()
    col = pd.Series(inst["index"].to_numpy().astype(int), name="col")  # (names the columns)
    waits = pivot_mean(inst["rank"], col, inst["arrival_wait_ns"].to_numpy() / 1e6)
    return steps, waits


def job_view(
    rs: pd.DataFrame,
    inst: pd.DataFrame,
    matched: pd.DataFrame,
    hosts: dict[int, str | None],
    *,
    world_size: int,
    damaged: dict[int, str],
    missing: list[int],
) -> JobView:
    """The job's view from the reduction's tables (see the module)."""
    seen = np.zeros(0, dtype=np.int64)  # the last rank of each collective seen on two ranks
    if len(matched):
        seen = matched["last_rank"].to_numpy(dtype=np.int64)[matched["ranks"].to_numpy() >= 2]
    fig = rank_figures(rs, hosts, dict(value_counts(seen)))
    findings = unanalysed(damaged, missing) + find(fig, len(seen))
    named = {r for f in findings if f.kind not in ("damaged", "missing") for r in f.ranks}
    nsteps = len(np.unique(rs["step"].to_numpy())) if len(rs) else 0
    v = JobView(
        ranks=len(fig),
        world_size=world_size,
        hosts=int(fig["host"].nunique()) if len(fig) else 0,
        figures=fig,
        distributions=distributions(fig),
        findings=findings,
        nodes=N.node_table(fig, named),
        collectives=N.collective_table(inst, matched, nsteps),
    )
    v.verdict = verdict(v, len(seen))
    v.heat_steps, v.heat_waits = heatmaps(rs, inst)
    return v


def to_json(v: JobView) -> dict[str, Any]:
    """The ``summary.json`` ``ranks.job`` block."""
    dists = [
        {"part": d.part, "median": d.median, "p90": d.p90, "p99": d.p99, "max": d.max,
         "tail": [[r, x] for r, x in d.tail]}
        for d in v.distributions
    ]  # fmt: skip
    finds = [
        {"kind": f.kind, "ranks": list(f.ranks), "host": f.host, "text": f.text, "z": f.z,
         "excess_ms": f.excess_ms}
        for f in v.findings
    ]  # fmt: skip
    return {"verdict": v.verdict, "findings": finds, "distributions": dists}
