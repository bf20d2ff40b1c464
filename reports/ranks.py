"""The multi-rank sections of the report: terminal, HTML, Markdown, Parquet, plots and
TensorBoard scalars per rank, from ``Summary.ranks`` (a
:class:`tracekit.ranks.reduce.RanksSummary`). Every section is empty for a single trace."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd
from rich.console import Group, RenderableType
from rich.text import Text

import tracekit.reports.fmt as fmt
import tracekit.reports.parts as RP
from tracekit.ranks.reduce import RanksSummary
from tracekit.ranks.robust import MIN_RANKS
from tracekit.summary import Summary

PARQUET = {  # file -> RanksSummary attribute
    "ranks.parquet": "per_rank",
    "rank_steps.parquet": "rank_steps",
    "rank_stragglers.parquet": "stragglers",
    "collectives.parquet": "collectives",
    "collective_table.parquet": "collective_table",
}
PLOTS = ("ranks_timeline", "busbw", "rank_step_heatmap", "rank_wait_heatmap")
LARGE = 16  # above this many ranks: the job at scale, no row per rank in the terminal
CAUSES = ("compute", "input", "node")
Col = tuple[str, str, Callable[[Any], str]]


def _gbs(v: Any) -> str:
    return fmt.si(v, "B/s")


def _rank(v: Any) -> str:
    return fmt.DASH if v is None or v != v or int(v) < 0 else str(int(v))


def _bytes(v: Any) -> str:
    return fmt.nbytes(v)


# (header, field, formatter) of each table; the terminal shows the first columns only
PER_RANK: list[tuple[str, str, Callable[[Any], str]]] = [
    ("rank", "rank", _rank),
    ("step", "step_time_ms", fmt.ms),
    ("unprofiled", "unprofiled_step_ms", fmt.ms),
    ("busy", "gpu_busy_ms", fmt.ms),
    ("exposed", "exposed_comm_ms", fmt.ms),
    ("wait", "sync_wait_ms", fmt.ms),
    ("comm cost", "comm_cost_ms", fmt.ms),
    ("idle", "gpu_idle_ms", fmt.ms),
    ("comm", "comm_kernel_ms", fmt.ms),
    ("peak mem", "peak_allocated_bytes", _bytes),
    ("cost % of step", "comm_cost_pct", fmt.pct),
    ("with sync", "with_sync_ms", fmt.ms),
    ("without sync", "without_sync_ms", fmt.ms),
    ("compute", "compute_ms", fmt.ms),
    ("exposed % of step", "exposed_comm_pct", fmt.pct),
    ("own work", "own_work_ms", fmt.ms),
    ("arrived last", "last_arrivals", fmt.count),
    ("collectives/step", "collectives_per_step", lambda v: fmt.num(v, 1)),
    ("clock offset", "clock_offset_ms", fmt.ms),
    ("host", "host", lambda v: "" if v is None else str(v)),
]
STRAGGLERS: list[tuple[str, str, Callable[[Any], str]]] = [
    ("step", "step", _rank),
    ("slowest", "slowest_rank", _rank),
    ("its step", "step_time_ms", fmt.ms),
    ("lead", "lead_ms", fmt.ms),
    ("most work", "most_work_rank", _rank),
    ("lead", "own_work_lead_ms", fmt.ms),
    ("waited on", "waited_on_rank", _rank),
]
COLLECTIVES: list[tuple[str, str, Callable[[Any], str]]] = [
    ("kind", "kind", str),
    ("size", "message_bytes", _bytes),
    ("/step", "per_step", lambda v: fmt.num(v, 1)),
    ("time", "dur_mean_ms", fmt.ms),
    ("wait", "wait_pct", lambda v: fmt.pct(v, 0)),
    ("busbw", "busbw_Bps", _gbs),
    ("of ceil", "busbw_pct_of_ceiling", lambda v: fmt.pct(v, 0)),
    ("dtype", "dtype", lambda v: "" if v is None else str(v)),
    ("group", "pg", str),
    ("ranks", "group_size", _rank),
    ("transfer", "transfer_mean_ms", fmt.ms),
    ("algbw", "algbw_Bps", _gbs),
    ("ceiling", "ceiling_Bps", _gbs),
    ("at this size", "measured_at_size_Bps", _gbs),
    ("arrives last", "last_rank", _rank),
]


def _tail(v: Any) -> str:
    return ", ".join(str(r) for r, _ in v) if v else ""


def _span(v: Any) -> str:
    a, b = v
    return str(a) if a == b else f"{a}-{b}"


def _n(v: Any) -> str:
    """A figure in ms, the unit in the table's title."""
    if v is None or v != v:
        return fmt.DASH
    x = float(v)
    return f"{x:.1f}" if abs(x) >= 100 else f"{x:.2f}" if abs(x) >= 1 else f"{x:.3f}"


SHORT = {  # the terminal's names of the parts (robust.PARTS has the full words)
    "step_time_ms": "step",
    "compute_ms": "compute",
    "exposed_comm_ms": "exposed comm",
    "arrival_wait_ms": "wait for others",
    "input_ms": "input wait",
    "idle_ms": "GPU idle",
    "internode_transfer_ms": "own transfer",
}
DISTRIBUTION: list[Col] = [
    ("part", "part", lambda v: SHORT.get(str(v), str(v))),
    ("median", "median", _n),
    ("p90", "p90", _n),
    ("p99", "p99", _n),
    ("max", "max", _n),
    ("tail ranks", "tail", _tail),
]
NODES: list[Col] = [
    ("node", "host", str),
    ("ranks", "span", _span),
    ("step", "step_time_ms", _n),
    ("compute", "compute_ms", _n),
    ("input", "input_ms", _n),
    ("waits", "arrival_wait_ms", _n),
    ("own transfer", "internode_transfer_ms", _n),
    ("named", "flagged", fmt.count),
]
JOB_COLLECTIVES: list[Col] = [
    ("#", "index", _rank),
    ("kind", "kind", str),
    ("size", "message_bytes", _bytes),
    ("transfer", "transfer_ms", _n),
    ("wait mean", "wait_mean_ms", _n),
    ("wait p99", "wait_p99_ms", _n),
    ("last", "last_rank", _rank),
    ("of steps", "last_pct", lambda v: fmt.pct(v, 0)),
]
DIST_TITLE = (
    "The step's parts over the ranks, ms per step (each rank: median over the compared "
    "steps; wait for others: from a rank's arrival at a collective to the last rank's; own "
    "transfer: from then to its own end, in collectives across nodes; tail: largest first)"
)
NODES_TITLE = (
    "Nodes, ms per step (medians over their ranks; waits: for others in collectives): the "
    "nodes named, then the farthest from the job"
)
JOB_COLL_TITLE = (
    "Collectives of a step, ms (transfer: median over the steps; wait: over ranks and "
    "steps; last: the rank most often last to arrive)"
)


def distribution_rows(rs: RanksSummary) -> pd.DataFrame:
    job = rs.job
    rows = [d.__dict__ for d in job.distributions] if job is not None else []
    return pd.DataFrame(rows)


TERMINAL_COLUMNS = {"per_rank": 7, "stragglers": 7, "collectives": 7}
PER_RANK_TITLE = (
    "Per rank (per step; unprofiled, comm cost: measured without the profiler; the rest: "
    "the profiled window)"
)


def per_rank_title(rs: RanksSummary) -> str:
    """The per-rank table's title: which pass each of its figures comes from."""
    if not rs.timeline_words:
        return PER_RANK_TITLE
    return (
        "Per rank (per step; unprofiled, comm cost: measured without the profiler; step, busy, "
        f"exposed, idle, comm, compute: {rs.timeline_words}; wait, own work: the profiled "
        "window)"
    )


def lines(rs: RanksSummary) -> list[str]:
    """The section's sentences: who, the clock, exposed communication, the straggler, the
    bus bandwidth against the ceiling."""
    detail = (
        f"; the sections below detail rank {rs.detail_rank}" if rs.detail_rank is not None else ""
    )
    out = [
        f"{len(rs.ranks)} of {rs.world_size} ranks ({rs.backend or 'backend unknown'}), "
        f"{len(rs.steps)} step(s) compared{detail} (--rank R for another); clock: "
        f"{rs.clock.reason}"
    ]
    if rs.job is not None and len(rs.ranks) >= MIN_RANKS:
        out.extend(rs.job.verdict)
    if rs.measured is not None:
        out.extend(rs.measured.statements)
    pr = rs.per_rank
    if rs.exposed_comm_pct is not None and len(pr):
        each = ", ".join(
            f"rank {int(r.rank)} {fmt.pct(r.exposed_comm_pct)}" for r in pr.head(8).itertuples()
        )
        out.append(
            f"exposed communication {fmt.pct(rs.exposed_comm_pct)} of the step, mean over ranks "
            f"({each}{', …' if len(pr) > 8 else ''}), {_words(rs)}; "
            "in its collectives, transfer "
            f"{fmt.ms(_transfer_ms(rs))} and sync wait {fmt.ms(float(pr['sync_wait_ms'].mean()))}"
            " per step, mean over ranks (profiled window)"
        )
    line = straggler_line(rs)
    if line:
        out.append(line)
    for kind, k in rs.by_kind.items():
        cap = k.get("ceiling_Bps")
        of = (
            f" = {fmt.pct(k.get('busbw_pct_of_ceiling'))} of the {k.get('ceiling_source')} "
            f"ceiling {_gbs(cap)}"
            if cap
            else " (no ceiling: neither measured nor in the spec table)"
        )
        out.append(
            f"{kind}: busbw {_gbs(k['busbw_Bps'])} over {k['count']} collectives{of}; best "
            f"{_gbs(k['best_busbw_Bps'])}"
        )
    if rs.ceiling is not None:
        out.append(f"ceiling ({rs.ceiling.source}): {rs.ceiling.detail}")
    return out


def _transfer_ms(rs: RanksSummary) -> float:
    """Per step, mean over ranks: kernel time of the collectives less their sync wait."""
    pr = rs.per_rank
    return float((pr["comm_kernel_sum_ms"] - pr["sync_wait_ms"]).clip(lower=0).mean())


def _words(rs: RanksSummary) -> str:
    """Which pass the ranks' figures come from (shortened where the ranks differ)."""
    w = rs.timeline_words or "profiled pass"
    return w if len(w) <= 160 else f"{w[:157]}…"


def _job_straggler(rs: RanksSummary) -> str:
    """The job's story in one phrase: the causes the robust analysis names."""
    job = rs.job
    causes = [f for f in job.findings if f.kind in CAUSES] if job is not None else []
    if not causes:
        return "no rank or node stands out by robust statistics (median/MAD)"
    return "; ".join(f.text for f in causes)


def _profiled_straggler(rs: RanksSummary) -> str:
    """The profiled window's straggler: the rank that works longest between collectives
    (enough ranks for robust statistics: the ranks and node that stand out)."""
    if rs.job is not None and len(rs.ranks) >= MIN_RANKS:
        return _job_straggler(rs)
    st = rs.stragglers
    worker = int(st["most_work_rank"].mode().iloc[0])
    lead = float(st.loc[st["most_work_rank"] == worker, "own_work_lead_ms"].mean())
    waited = ""
    if rs.waited_on_rank is not None:
        seen = rs.collectives[rs.collectives["ranks"] >= 2]
        n_last = int((seen["last_rank"] == rs.waited_on_rank).sum())
        waited = (
            f"; the others wait for rank {rs.waited_on_rank} at {n_last} of {len(seen)} collectives"
        )
    return (
        f"rank {worker} works longest between collectives ({fmt.ms(lead)} over the median per "
        f"step){waited}; step-time skew {fmt.pct(rs.skew_pct)} (slowest rank {rs.slowest_rank}"
        f"{', light pass' if rs.timeline_source == 'light' else ''})"
    )


def straggler_line(rs: RanksSummary) -> str | None:
    """The straggler: from the unprofiled figures where the run has them (the steps without
    gradient sync, else the timed steps), the profiled window's beside them."""
    if not len(rs.stragglers) or len(rs.per_rank) < 2:
        return None
    m = rs.measured
    if (m is None or m.basis == "profiled window") and len(rs.ranks) >= MIN_RANKS:
        return None  # the job's verdict and its findings say it
    if m is None or m.basis == "profiled window":
        return f"straggler (profiled window): {_profiled_straggler(rs)}"
    if m.own_spread_ms is not None:
        head = (
            f"straggler (unprofiled steps without gradient sync, no rank waiting): rank "
            f"{m.own_slowest_rank}, {fmt.ms(m.own_spread_ms)} over the fastest (skew "
            f"{fmt.pct(m.own_skew_pct)})"
        )
    else:
        head = (
            f"straggler (unprofiled steps): rank {m.step_slowest_rank}, "
            f"{fmt.ms(m.step_spread_ms)} over the fastest (skew {fmt.pct(m.step_skew_pct)})"
        )
    tail = "the profiler's" if m.profilers_wait else "in line with the unprofiled steps"
    return f"{head}; in the profiled window {_profiled_straggler(rs)}: {tail}"


def union_note(sm: Summary) -> str | None:
    """What the class table's shares mean in a multi-rank report (None otherwise)."""
    cl = sm.classes
    if sm.ranks is None or "exposed_share_pct" not in cl:
        return None
    comm = cl[cl["class"] == "communication"]
    rank = (
        sm.ranks.rank_steps["rank"].min() if sm.ranks.detail_rank is None else sm.ranks.detail_rank
    )
    text = f"rank {rank}; shares of summed GPU activity time"
    if len(comm):
        r = comm.iloc[0]
        busy = (
            f"running during {fmt.pct(r['busy_share_pct'])} of the GPU's busy time, "
            if "busy_share_pct" in comm
            else ""
        )
        text += (
            f"; communication {fmt.pct(r['time_share_pct'])} of it, {busy}"
            f"{fmt.pct(r['exposed_share_pct'])} exposed (no compute beside it)"
        )
    return text


# ------------------------------------------------------------------------------- terminal


def _rich_table(title: str, df: pd.DataFrame, cols: list[Col]) -> RenderableType:
    _table = RP.rich_table

    t = _table(title, [(h, "left" if i == 0 else "right") for i, (h, _, _) in enumerate(cols)])
    for rec in df.to_dict("records"):
        t.add_row(*(Text(f(rec.get(k))) for _, k, f in cols))
    return t


def terminal(sm: Summary) -> list[RenderableType]:
    """The ranks section of a job of a few ranks, a row per rank (reports/ranksterm.py has
    the job at scale)."""
    rs: RanksSummary | None = sm.ranks
    if rs is None:
        return []
    out: list[RenderableType] = [
        Text("Ranks", style="bold"),
        Group(*(Text(f"  {line}") for line in lines(rs))),
    ]
    if rs.job is not None and rs.job.findings:
        out.append(Group(*(Text(f"  ! {f.text}") for f in rs.job.findings)))
    n = TERMINAL_COLUMNS
    out.append(_rich_table(per_rank_title(rs), rs.per_rank.head(32), PER_RANK[: n["per_rank"]]))
    if len(rs.stragglers) and len(rs.ranks) > 1:
        out.append(
            _rich_table("Straggler per step", rs.stragglers.head(16), STRAGGLERS[: n["stragglers"]])
        )
    if len(rs.collective_table):
        title = "Collectives (matched across ranks; wait = share of kernel time waiting)"
        out.append(
            _rich_table(title, rs.collective_table.head(12), COLLECTIVES[: n["collectives"]])
        )
    out.extend(Text(f"note: {x}", style="dim") for x in rs.notes)
    return out


# ----------------------------------------------------------------------------------- HTML


def html(sm: Summary, plots: Mapping[str, bytes]) -> str:
    rs: RanksSummary | None = sm.ranks
    if rs is None:
        return ""
    _img, _table, esc = RP.img, RP.html_table, RP.esc

    def table(df: pd.DataFrame, cols: list[Col]) -> str:
        return _table(df, [(h, "l" if i == 0 else "", f) for i, (h, _, f) in enumerate(cols)],
                      [k for _, k, _ in cols])  # fmt: skip

    parts = ["<h2>Ranks</h2><ul>" + "".join(f"<li>{esc(x)}</li>" for x in lines(rs)) + "</ul>"]
    if rs.job is not None and rs.job.findings:
        parts.append(
            "<h3>Named</h3><ul>"
            + "".join(f"<li>{esc(f.text)}</li>" for f in rs.job.findings)
            + "</ul>"
        )
    large = len(rs.ranks) > LARGE and rs.job is not None
    if large and rs.job is not None:
        parts.append(f"<h3>{esc(DIST_TITLE)}</h3>" + table(distribution_rows(rs), DISTRIBUTION))
        for name, alt in HEATMAPS.items():
            if name in plots:
                parts.append(_img(plots[name], alt))
        nodes = rs.job.nodes.assign(
            span=list(zip(rs.job.nodes["first_rank"], rs.job.nodes["last_rank"], strict=True))
        )
        parts.append("<h3>Nodes (medians over their ranks)</h3>" + table(nodes, NODES))
        if len(rs.job.collectives):
            parts.append(
                f"<h3>{esc(JOB_COLL_TITLE)}</h3>" + table(rs.job.collectives, JOB_COLLECTIVES)
            )
        shown = rs.per_rank[rs.per_rank["rank"].isin(rs.shown)]
        parts.append(
            f"<h3>{esc(per_rank_title(rs))}: the ranks named, the tail and the median rank</h3>"
            f"<p>Every rank: <a href='ranks.parquet' download>ranks.parquet</a> "
            f"({len(rs.per_rank)} rows; per step: rank_steps.parquet)</p>"
            + table(shown, [*PER_RANK, ("finding", "finding", str)])
        )
    else:
        parts.append(f"<h3>{esc(per_rank_title(rs))}</h3>" + table(rs.per_rank, PER_RANK))
    if "ranks_timeline" in plots:
        parts.append(_img(plots["ranks_timeline"], "ranks x time: compute, communication, idle"))
    if len(rs.stragglers) and not large:
        parts.append("<h3>Straggler per step</h3>" + table(rs.stragglers, STRAGGLERS))
    if len(rs.class_shares):
        cols: list[Col] = [
            ("class", "class", str),
            ("ms/step (kernel time)", "kernel_ms_per_step", fmt.ms),
            ("share of GPU busy (union)", "union_share_pct", fmt.pct),
            ("exposed share", "exposed_share_pct", fmt.pct),
        ]
        parts.append("<h3>Time per class, mean over ranks</h3>" + table(rs.class_shares, cols))
    if len(rs.collective_table):
        parts.append("<h3>Collectives</h3>" + table(rs.collective_table, COLLECTIVES))
    if "busbw" in plots:
        parts.append(_img(plots["busbw"], "bus bandwidth vs message size"))
    parts.extend(f"<p class='note'>{esc(x)}</p>" for x in rs.notes)
    return "\n".join(parts)


def markdown(sm: Summary) -> dict[str, str]:
    rs: RanksSummary | None = sm.ranks
    if rs is None:
        return {}
    from tracekit.reports.markdown import table

    def md(df: pd.DataFrame, cols: list[Col]) -> str:
        return table(df, cols)

    pr = rs.per_rank if len(rs.ranks) <= LARGE else rs.per_rank[rs.per_rank["rank"].isin(rs.shown)]
    found = [f.text for f in rs.job.findings] if rs.job is not None else []
    return {
        "ranks": "\n".join(f"* {x}" for x in lines(rs) + found)
        + f"\n\n{per_rank_title(rs)}\n\n"
        + md(pr, PER_RANK),
        "collectives": md(rs.collective_table.head(50), COLLECTIVES),
    }


# ---------------------------------------------------------------------------------- plots


def timeline_data(rs: RanksSummary) -> dict[str, Any]:
    la = rs.lanes
    shown = rs.shown or rs.ranks
    steps = rs.rank_steps[rs.rank_steps["rank"].isin(shown)]
    some = f"{len(shown)} of {len(rs.ranks)}" if len(shown) < len(rs.ranks) else f"{len(shown)}"
    return {
        "title": f"{some} ranks x time ({len(rs.steps)} step(s), common time base"
        + (", the light pass's" if rs.timeline_source == "light" else "")
        + ")",
        "ranks": [int(r) for r in shown],
        "lanes": {
            what: [
                (int(r.rank), float(r.start_ms), float(r.end_ms - r.start_ms))
                for r in la[la["what"] == what].itertuples()
            ]
            for what in ("compute", "comm_overlapped", "comm_exposed")
        },
        "steps": [
            (int(r.rank), float(r.start_ms), float(r.step_time_ms)) for r in steps.itertuples()
        ],
    }


def busbw_data(rs: RanksSummary) -> dict[str, Any]:
    m = rs.collectives
    m = m[m["busbw_Bps"].notna() & m["message_bytes"].notna()] if len(m) else m
    ceil = rs.ceiling
    return {
        "points": {
            str(k): (g["message_bytes"].astype(float).tolist(), (g["busbw_Bps"] / 1e9).tolist())
            for k, g in m.groupby("kind")
        },
        "sweeps": {
            k: ([b for b, _ in rows], [v / 1e9 for _, v in rows])
            for k, rows in (ceil.sweeps.items() if ceil is not None else [])
        },
        "ceiling_gbs": ceil.busbw_Bps / 1e9 if ceil is not None else None,
        "ceiling_label": f"{ceil.source} ceiling" if ceil is not None else "",
    }


def plots(sm: Summary) -> dict[str, bytes]:
    rs: RanksSummary | None = sm.ranks
    if rs is None:
        return {}
    import tracekit.reports.ranksdraw as D

    out = {"ranks_timeline": D.timeline(timeline_data(rs))}
    if len(rs.collectives):
        out["busbw"] = D.busbw(busbw_data(rs))
    if len(rs.ranks) > LARGE and rs.job is not None:
        out.update({name: D.heatmap(d) for name, d in heatmap_data(rs).items()})
    return out


HEATMAPS = {
    "rank_step_heatmap": "ranks x steps: work per step over the step's median",
    "rank_wait_heatmap": "ranks x collectives: wait for the last rank",
}


def heatmap_data(rs: RanksSummary) -> dict[str, dict[str, Any]]:
    """The two heatmaps' matrices (rows: ranks), with the named ranks marked and the
    damaged and missing ranks as rows marked absent (empty)."""
    job = rs.job
    if job is None:
        return {}
    marks = {r: f.kind for f in job.findings for r in f.ranks if f.kind in CAUSES}
    absent = {int(r): "damaged" for r in rs.damaged} | {int(r): "missing" for r in rs.missing}
    out = {}
    specs = (
        ("rank_step_heatmap", job.heat_steps, "step", "% over the step's median",
         "Work per step (step less its wait for others), % over the step's median rank", True),
        ("rank_wait_heatmap", job.heat_waits, "collective of the step (#)", "ms",
         "Wait for the last rank at each collective (ms, mean over steps)", False),
    )  # fmt: skip
    for name, m, xlabel, unit, title, diverging in specs:
        if not len(m):
            continue
        m = m.reindex(sorted({int(r) for r in m.index} | set(absent)))
        out[name] = {
            "title": title,
            "rows": [int(r) for r in m.index],
            "cols": [str(c) for c in m.columns],
            "matrix": m.to_numpy(dtype=float).tolist(),
            "xlabel": xlabel,
            "unit": unit,
            "diverging": diverging,
            "marks": marks,
            "absent": absent,
        }
    return out


# ------------------------------------------------------------------------- files, TensorBoard


def write_files(sm: Summary, out: Path) -> None:
    """The ranks' Parquet tables and the merged trace into the report folder ``out``."""
    rs: RanksSummary | None = sm.ranks
    if rs is None:
        return
    from tracekit.ranks.merged import NAME, write_merged

    for name, attr in PARQUET.items():
        df: pd.DataFrame = getattr(rs, attr)
        df.reset_index(drop=True).to_parquet(out / name, index=False, compression="snappy")
    if rs.job is not None:
        for name, df in (("rank_nodes.parquet", rs.job.nodes),
                         ("rank_collectives.parquet", rs.job.collectives)):  # fmt: skip
            df.reset_index(drop=True).to_parquet(out / name, index=False, compression="snappy")
    hosts = {int(r): h for r, h in zip(rs.per_rank["rank"], rs.per_rank["host"], strict=True)}
    write_merged(rs, out / NAME, hosts)


RANK_SCALARS = (
    "step_time_ms", "busy_ms", "compute_ms", "comm_ms", "exposed_comm_ms", "idle_ms",
    "sync_wait_ms",
)  # fmt: skip


def write_tensorboard(sm: Summary, run_dir: Path) -> list[Path]:
    """One TensorBoard run per rank (``<run>/rank<R>``, tags ``ranks/<figure>`` per step),
    so TensorBoard overlays the ranks on each chart."""
    rs: RanksSummary | None = sm.ranks
    if rs is None:
        return []
    from tracekit.reports.tensorboard import write_event_file

    t = time.time()
    paths = []
    steps = rs.rank_steps
    if len(rs.ranks) > LARGE:  # the ranks of interest: a logdir of 1,024 runs is unreadable
        steps = steps[steps["rank"].isin(rs.shown)]
    for rank, g in steps.groupby("rank", sort=True):

        def fill(w: Any, g: pd.DataFrame = g) -> None:
            for r in g.to_dict("records"):
                for key in RANK_SCALARS:
                    w.scalar(f"ranks/{key}", float(r[key]), int(r["step"]), t)

        paths.append(write_event_file(run_dir / f"rank{int(rank)}", fill))
    return paths
