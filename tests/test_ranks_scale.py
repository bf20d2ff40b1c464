"""A 64-rank job built from the real 2 x H100 DDP ranks (benchmarks/rankjob.py) with a
compute straggler, a slow node, an input stall, a truncated and a missing rank: the
cross-rank analysis must name all five, and nothing else, and the report must stay short.

The per-rank work runs in this process, rank after rank (the engine's pool and Dask are
tested in test_ranks_engine.py; a damaged rank through the engine below)."""

from __future__ import annotations

import gzip
import importlib.util
import json
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pandas as pd
import pytest
from rich.console import Console

from tracekit.errors import TraceError, TracekitError
from tracekit.ranks import perrank
from tracekit.ranks.discover import discover
from tracekit.ranks.engine import map_ranks
from tracekit.ranks.reduce import RanksSummary, reduce
from tracekit.ranks.robust import outliers, robust_z

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("rankjob", ROOT / "benchmarks" / "rankjob.py")
assert _spec is not None and _spec.loader is not None
R: Any = importlib.util.module_from_spec(_spec)
sys.modules["rankjob"] = R
_spec.loader.exec_module(R)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path]:
    folder = tmp_path_factory.mktemp("job") / "job64"
    return R.build(folder, R.Spec(ranks=64, steps=2)), folder


@pytest.fixture(scope="module")
def summary(built: tuple[Any, Path]) -> RanksSummary:
    _, folder = built
    ranks = discover(folder)
    assert ranks is not None
    out = folder.with_name("job64.ranks")
    dirs: dict[int, Path] = {}
    damaged: dict[int, str] = {}
    for r, t in ranks.traces.items():
        try:
            perrank.analyse(t.path, out / f"rank{r}")
            dirs[r] = out / f"rank{r}"
        except TracekitError as e:
            damaged[r] = f"rank {r}: {e}"
    return reduce(
        dirs,
        world_size=ranks.world_size,
        backend=ranks.backend,
        hosts={r: t.host for r, t in ranks.traces.items()},
        notes=ranks.notes,
        damaged=damaged,
    )


def test_the_job_on_disk(built: tuple[Any, Path]) -> None:
    job, folder = built
    files = sorted(folder.glob("*.pt.trace.json.gz"))
    assert len(files) == 63 and job.missing not in job.files
    assert len({job.straggler // 8, job.slow_node, job.stall // 8, job.truncated // 8}) == 4
    ranks = discover(folder)
    assert ranks is not None and ranks.world_size == 64 and ranks.missing == [job.missing]
    hosts = {r: t.host for r, t in ranks.traces.items()}
    assert hosts[9] == hosts[15] == "node0001" and hosts[16] == "node0002"
    with gzip.open(folder / job.files[5], "rt") as f:
        doc = json.load(f)
    info = doc["distributedInfo"]
    assert (info["rank"], info["world_size"], info["pg_config"][0]["pg_size"]) == (5, 64, 64)
    seqs = [e["args"]["Seq"] for e in doc["traceEvents"] if "ncclDevKernel" in e.get("name", "")]
    assert seqs == list(range(28))  # 14 collectives a step, numbered as on every rank
    with pytest.raises(TraceError, match="truncated"):
        from tracekit.parse import load

        load(folder / job.files[job.truncated])


def test_all_five_faults_named_and_no_false_straggler(
    built: tuple[Any, Path], summary: RanksSummary
) -> None:
    job, _ = built
    v = summary.job
    assert v is not None
    kinds = {f.kind: f for f in v.findings}
    assert set(kinds) == {"damaged", "missing", "compute", "input", "node"}
    assert len(v.findings) == 5  # one line each, nothing else named
    assert kinds["compute"].ranks == (job.straggler,)
    assert kinds["input"].ranks == (job.stall,)
    assert kinds["node"].host == job.hosts[job.slow_node]
    assert sorted(kinds["node"].ranks) == job.slow_node_ranks
    assert kinds["damaged"].ranks == (job.truncated,) and "truncated" in kinds["damaged"].text
    assert kinds["missing"].ranks == (job.missing,)
    # the slow node's factor as injected (2x), not shortened by its late end at the anchor
    node = v.nodes.set_index("host").loc[job.hosts[job.slow_node], "internode_transfer_ms"]
    factor = node / np.median(v.figures["internode_transfer_ms"])
    assert abs(factor / R.Spec().slow_factor - 1) < 0.10, factor
    assert "2.0x the job's median" in kinds["node"].text
    assert summary.missing == [job.missing] and list(summary.damaged) == [job.truncated]
    # the straggler's compute is ~15 % over the median; the stall rank arrives last
    assert 0.12 < kinds["compute"].excess_ms / np.median(v.figures["compute_ms"]) < 0.18
    last = v.collectives.set_index("index")["last_rank"]
    assert (last.iloc[:-1] == job.stall).all()
    assert "held back by: rank" in v.verdict[1] and f"rank {job.stall} (input" in v.verdict[1]
    pr = summary.per_rank.set_index("rank")
    assert pr.loc[job.straggler, "finding"] == "compute" and pr.loc[0, "finding"] == ""


def test_a_slower_ranks_late_end_moves_its_clock_not_its_transfers() -> None:
    from tracekit.ranks.latends import late_ends

    # 4 ranks, 3 collectives (transfers 1, 4, 10 us from the last arrival);
    # rank 3's links 2x slower: aligned on its end of the first, its clock is 1 us early
    rows = []
    for key, t in enumerate((1_000, 4_000, 10_000)):
        for rank in range(4):
            own = 2 * t if rank == 3 else t
            rows.append((key, rank, key * 100_000 + 10 * (3 - rank), key * 100_000 + 30 + own))
    inst = pd.DataFrame(rows, columns=["key", "rank", "ts", "end"])
    assert late_ends(inst, {0: 0, 1: 0, 2: 0, 3: -1_000}) == {3: 1_000}
    assert late_ends(inst, {r: 0 for r in range(4)}) == {}  # on time: nothing moves


def test_the_distributions_name_their_tail(summary: RanksSummary) -> None:
    assert summary.job is not None
    d = {x.part: x for x in summary.job.distributions}
    rs = summary.rank_steps.groupby("rank")["input_ms"].median()
    assert d["input_ms"].tail[0] == (int(rs.idxmax()), pytest.approx(float(rs.max())))
    assert d["step_time_ms"].median <= d["step_time_ms"].p90 <= d["step_time_ms"].p99
    assert d["step_time_ms"].p99 <= d["step_time_ms"].max


def test_robust_statistics_call_no_rank_of_a_healthy_job_a_straggler() -> None:
    rng = np.random.default_rng(3)
    fig = pd.DataFrame(
        {
            "rank": np.arange(1024),
            "compute_ms": 28.0 * (1 + rng.normal(0, 0.006, 1024)),
            "input_ms": 0.15 * (1 + rng.normal(0, 0.05, 1024)),
        }
    )
    assert outliers(fig, "compute_ms", 100.0) == []
    assert outliers(fig, "input_ms", 100.0) == []
    fig.loc[700, "compute_ms"] *= 1.15
    assert [o.rank for o in outliers(fig, "compute_ms", 100.0)] == [700]
    assert np.isnan(robust_z(np.array([np.nan, np.nan]))).all()


def whole_report(folder: Path, trace: Path, summary: RanksSummary) -> list[str]:
    """The whole terminal report of ``tracekit report`` at 80 columns: the detailed rank's
    header and verdict, the ranks section, and the files written."""
    from tracekit.analyse import analyse
    from tracekit.reports import terminal

    sm = analyse(trace, ranks=summary).summary
    assert sm is not None
    console = Console(width=80, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    files = ", ".join(["classes.parquet", "report.html", *view_files()])
    terminal.render(sm, console, [f"wrote {folder}/report/: {files}"])
    return console.export_text().splitlines()


def view_files() -> list[str]:
    from tracekit.reports import ranks as view

    return list(view.PARQUET)


def test_the_whole_terminal_report_fits_two_screens(
    built: tuple[Any, Path], summary: RanksSummary
) -> None:
    job, folder = built
    lines = whole_report(folder, folder / job.files[0], summary)
    text = "\n".join(lines)
    assert len(lines) <= 100, text  # two screens of 50 lines, 80 columns
    assert f"node {job.hosts[job.slow_node]}" in text and "not analysed: rank" in text
    assert f"rank {job.straggler} is slow in compute" in text
    assert f"rank {job.stall} stalls on input" in text and f"missing: rank {job.missing}" in text
    assert "job: 62 of 64 ranks" in text and "held back by:" in text  # the verdict
    assert "The step's parts over the ranks" in text and "Nodes" in text  # tail, nodes
    table_rows = [ln for ln in lines if ln.split()[:1] and ln.split()[0].isdigit()]
    assert len(table_rows) <= 20  # nodes, collectives, named ranks: never a row per rank
    assert "works longest" not in text and "Top kernels" not in text  # detail: report.html
    assert "and 6 more files" in " ".join(ln.strip() for ln in lines)


def test_heatmaps_and_files(tmp_path: Path, summary: RanksSummary) -> None:
    from tracekit.reports import ranks as view

    data = view.heatmap_data(summary)
    steps, waits = data["rank_step_heatmap"], data["rank_wait_heatmap"]
    assert steps["rows"] == waits["rows"] == list(range(64))  # absent ranks as rows too
    absent = {summary.missing[0]: "missing", next(iter(summary.damaged)): "damaged"}
    assert steps["absent"] == waits["absent"] == absent
    for r in absent:
        assert np.isnan(steps["matrix"][r]).all() and np.isnan(waits["matrix"][r]).all()
    assert not np.isnan(steps["matrix"][0]).any()
    assert len(waits["cols"]) == 14 and len(steps["cols"]) == 2
    png = view.plots(SimpleNamespace(ranks=summary))  # type: ignore[arg-type]
    assert png["rank_step_heatmap"][:4] == b"\x89PNG"
    view.write_files(SimpleNamespace(ranks=summary), tmp_path)  # type: ignore[arg-type]
    back = pd.read_parquet(tmp_path / "ranks.parquet")
    assert len(back) == 62 and {"finding", "input_ms", "internode_transfer_ms"} <= set(back)
    assert len(pd.read_parquet(tmp_path / "rank_nodes.parquet")) == 8


def test_a_damaged_rank_costs_only_itself(built: tuple[Any, Path], tmp_path: Path) -> None:
    job, folder = built
    good, bad = folder / job.files[1], folder / job.files[job.truncated]
    inputs = {1: good, job.truncated: bad}
    with pytest.raises(TraceError, match=f"rank {job.truncated}: .*truncated"):
        map_ranks(perrank.analyse, inputs, tmp_path / "a", workers=1)
    named: dict[int, str] = {}
    got = map_ranks(
        perrank.analyse, inputs, tmp_path / "b", workers=1, on_failure=named.__setitem__
    )
    assert [r.rank for r in got] == [1]
    assert list(named) == [job.truncated] and "\n" not in named[job.truncated]
    assert "truncated JSON" in named[job.truncated]
    assert not any(p.name.startswith(".") for p in (tmp_path / "b").iterdir())


def test_a_trace_whose_header_is_unreadable_is_named_not_refused(
    built: tuple[Any, Path], tmp_path: Path
) -> None:
    job, folder = built
    for r in (1, 2):
        (tmp_path / job.files[r]).symlink_to(folder / job.files[r])
    (tmp_path / "rank3.node0000_4003.1.pt.trace.json").write_text("\x00garbage")
    ranks = discover(tmp_path)
    assert ranks is not None and ranks.ranks == [1, 2] and list(ranks.damaged) == [3]
    assert "rank3" in ranks.damaged[3] and 3 not in ranks.missing
