"""The terminal's ranks section of a job at scale (more than :data:`ranks.LARGE` ranks): the
job's verdict, the tail, the named faults and a per-node summary, never a row per rank, so
that the whole report of 1,024 ranks fits on two screens of 80 columns. The per-rank table,
every node and collective, the notes and the detailed rank's own sections are in report.html
and the Parquet files."""

from __future__ import annotations

import re

import pandas as pd
from rich.console import Group, RenderableType
from rich.text import Text

import tracekit.reports.fmt as fmt
import tracekit.reports.ranks as V
from tracekit.ranks.reduce import RanksSummary
from tracekit.summary import Summary

NODE_ROWS = 4  # the nodes a finding names, then the farthest from the job's medians
COLL_ROWS = 4  # the collectives with the longest waits
DIST_TITLE = "The step's parts over the ranks, ms per step"
NODES_TITLE = "Nodes, ms per step (medians over their ranks)"
COLL_TITLE = "Collectives of a step with the longest waits, ms (last: rank last to arrive)"
DETAIL = (
    "rank {r}'s own sections (--rank R for another), the heatmaps and the definitions: "
    "report.html; every rank, node and collective: its .parquet files"
)


def at_scale(sm: Summary) -> bool:
    """A job at scale: enough ranks that the terminal shows the job, not its ranks."""
    rs = sm.ranks
    return rs is not None and rs.job is not None and len(rs.ranks) > V.LARGE


def terminal_ranks(rs: RanksSummary) -> list[int]:
    """The per-rank rows of a large job's terminal: the first rank, each finding's rank
    (a node's first), and the median rank of the step."""
    job = rs.job
    want = [rs.ranks[0]] if rs.ranks else []
    if job is not None:
        for f in job.findings:
            if f.kind not in ("damaged", "missing"):
                want.extend(f.ranks[:1])
        fig = job.figures.sort_values("step_time_ms")
        if len(fig):
            want.append(int(fig["rank"].iloc[len(fig) // 2]))
    return sorted(set(want) & set(rs.ranks))


def node_rows(rs: RanksSummary, n: int = NODE_ROWS) -> tuple[pd.DataFrame, str]:
    """The nodes a finding names, then those farthest from the job's medians (step, own
    transfer), at most ``n``; and a line about the others."""
    job = rs.job
    nd = job.nodes if job is not None else pd.DataFrame()
    if not len(nd):
        return nd, ""
    nd = nd.assign(span=list(zip(nd["first_rank"], nd["last_rank"], strict=True)))
    far = pd.Series(0.0, index=nd.index)
    for c in ("step_time_ms", "internode_transfer_ms", "compute_ms", "input_ms"):
        med = float(nd[c].median())
        if med > 0:
            far = far.combine((nd[c] - med).abs() / med, max)
    order = (nd["flagged"] * 1e6 + far).sort_values(ascending=False).index
    top = nd.loc[order[:n]].sort_values("first_rank")
    others = nd.drop(index=top.index)
    if not len(others):
        return top, ""
    rest = (
        f"other {len(others)} nodes: step {V._n(others['step_time_ms'].min())}-"
        f"{V._n(others['step_time_ms'].max())}, own transfer "
        f"{V._n(others['internode_transfer_ms'].min())}-"
        f"{V._n(others['internode_transfer_ms'].max())} ms"
    )
    return top, rest


def collective_rows(rs: RanksSummary, n: int = COLL_ROWS) -> tuple[pd.DataFrame, str]:
    """The ``n`` collectives of a step with the longest mean wait, in step order; and a line
    about the others."""
    co = rs.job.collectives if rs.job is not None else pd.DataFrame()
    if len(co) <= n + 1:
        return co, ""
    top = co.loc[co["wait_mean_ms"].nlargest(n).index].sort_values("index")
    others = co.drop(index=top.index)
    last = others["last_rank"].mode()
    return top, (
        f"other {len(others)}: wait mean {V._n(others['wait_mean_ms'].min())}-"
        f"{V._n(others['wait_mean_ms'].max())} ms"
        + (f", last most often rank {int(last.iloc[0])}" if len(last) else "")
    )


def lines(rs: RanksSummary) -> list[str]:
    """The job's sentences: who and the clock, the verdict, the profiler's caveat, exposed
    communication and the bus bandwidth, each kind on one line."""
    job = rs.job
    assert job is not None
    out = [f"{job.verdict[0]}; clock: {rs.clock.reason}", *job.verdict[1:]]
    if rs.measured is not None:
        out.extend(rs.measured.statements)
    pr = rs.per_rank
    exposed = ""
    if rs.exposed_comm_pct is not None and len(pr):
        exposed = (
            f"exposed communication {fmt.pct(rs.exposed_comm_pct)} of the step (mean over "
            f"ranks; transfer {fmt.ms(V._transfer_ms(rs))}, sync wait "
            f"{fmt.ms(float(pr['sync_wait_ms'].mean()))} per step); "
        )
    kinds = [
        f"{kind} {V._gbs(k['busbw_Bps'])}"
        + (f" ({fmt.pct(k.get('busbw_pct_of_ceiling'))})" if k.get("ceiling_Bps") else "")
        for kind, k in rs.by_kind.items()
    ]
    ceil = ""
    if rs.ceiling is not None and rs.by_kind:
        cap = next(iter(rs.by_kind.values())).get("ceiling_Bps")
        ceil = f" of the {rs.ceiling.source} ceiling {V._gbs(cap)}"
    busbw = f"busbw {', '.join(kinds)}{ceil}" if kinds else ""
    if exposed or busbw:
        out.append(f"{exposed}{busbw}".rstrip("; "))
    return out


def terminal(sm: Summary) -> list[RenderableType]:
    """A large job's ranks section: its sentences, the named faults, the distributions, the
    nodes, the collectives with the longest waits and the named ranks."""
    rs = sm.ranks
    assert rs is not None and rs.job is not None
    job = rs.job
    out: list[RenderableType] = [
        Group(
            Text("Ranks", style="bold"),
            *(Text(f"  {line}") for line in lines(rs)),
            *(Text(f"  ! {_file_name(f.text)}") for f in job.findings),
        ),
        V._rich_table(DIST_TITLE, V.distribution_rows(rs), V.DISTRIBUTION),
    ]
    nodes, rest = node_rows(rs)
    if len(nodes):
        out.append(Group(V._rich_table(NODES_TITLE, nodes, V.NODES), Text(f"  {rest}")))
    coll, others = collective_rows(rs)
    if len(coll):
        out.append(Group(V._rich_table(COLL_TITLE, coll, V.JOB_COLLECTIVES), Text(f"  {others}")))
    shown = rs.per_rank[rs.per_rank["rank"].isin(terminal_ranks(rs))]
    cols = [c for c in V.PER_RANK[:8] if c[1] in shown and shown[c[1]].notna().any()]
    title = "The ranks named, the first and the median, per step"
    r = rs.detail_rank if rs.detail_rank is not None else (rs.ranks[0] if rs.ranks else 0)
    table = V._rich_table(title, shown, [*cols, ("finding", "finding", str)])
    out.append(Group(table, Text(DETAIL.format(r=r), style="dim")))
    return out


def _file_name(text: str) -> str:
    """A finding's sentence with its trace's folder left out (the file name says which)."""
    return re.sub(r"(?<= )/\S*/(?=[^/\s]+: )", "", text)


def short_output(line: str, keep: int = 1) -> str:
    """A ``wrote DIR/: a, b, …`` line of a job at scale: its first files and a count."""
    head, sep, files = line.partition("/: ")
    names = files.split(", ") if sep else []
    if len(names) <= keep + 1:
        return line
    first = [n for n in names if n == "report.html"] + [n for n in names if n != "report.html"]
    return f"{head}/: {', '.join(first[:keep])} and {len(names) - keep} more files"
