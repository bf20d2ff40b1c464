"""Golden tests of the multi-rank report and of ``compare``'s scaling on real 2 x H100 runs
(fixtures/h100x2-*, fixtures/h100-gpt2s-b8-s128-fp32: tracekit collect --single-pass, DDP
and FSDP2 on NCCL; fixtures/README.md says how they were made).

Each rank's profiled window has one rank waiting tens of milliseconds in its collectives
while the unprofiled steps are a fraction of a millisecond apart: the report must say the
wait is the profiler's and must not call the job communication-bound on it. The measured
communication cost (``distributed.comm_cost``, docs/multi-gpu.md) is tested by writing
such a block into a copy of a fixture's manifest. Every trace is analysed once per module
(the per-rank results are reused by every report and comparison here)."""

from __future__ import annotations

import copy
import io
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from tracekit.ranks import perrank
from tracekit.ranks.discover import discover
from tracekit.ranks.reduce import RanksSummary, reduce

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "fixtures"
DDP = FIX / "h100x2-ddp-gpt2s-b8-s128-fp32"
DDP_BF16 = FIX / "h100x2-ddp-gpt2s-b8-s128-bf16-sdpa"
FSDP = FIX / "h100x2-fsdp-gpt2s-b8-s128-bf16-sdpa"
ONE = FIX / "h100-gpt2s-b8-s128-fp32"

# a measured communication cost as `collect --gpus N` writes it (COMMCOST contract)
COST = {
    "status": "ok",
    "reason": None,
    "method": "interleaved rounds: K steps with gradient sync, then K without (DDP "
    "no_sync()), a barrier before each timed step, CUDA events per rank; no profiler",
    "sync_off": "DistributedDataParallel.no_sync()",
    "caveat": None,
    "rounds": 6,
    "steps_per_round": 5,
    "ranks": [
        {"rank": 0, "with_sync_ms": 42.1, "without_sync_ms": 33.9, "cost_ms": 8.2,
         "cost_ms_range": [7.1, 9.4], "cost_pct": 19.5, "rounds_with_ms": [42.1] * 6,
         "rounds_without_ms": [33.9] * 6},
        {"rank": 1, "with_sync_ms": 42.3, "without_sync_ms": 34.7, "cost_ms": 7.6,
         "cost_ms_range": [6.8, 8.9], "cost_pct": 18.0, "rounds_with_ms": [42.3] * 6,
         "rounds_without_ms": [34.7] * 6},
    ],
}  # fmt: skip


def _flat(text: str) -> str:
    return " ".join(text.split())


def _copy_run(src: Path, dest: Path, cost: dict[str, Any] | None = None) -> Path:
    """The run folder (traces with their mtimes: the per-rank cache keys), its manifest
    with ``distributed.comm_cost`` = ``cost`` when given."""
    dest.mkdir(parents=True)
    for p in src.iterdir():
        shutil.copy2(p, dest / p.name)
    if cost is not None:
        m = json.loads((src / "manifest.json").read_text())
        m["distributed"]["comm_cost"] = copy.deepcopy(cost)
        (dest / "manifest.json").write_text(json.dumps(m))
    return dest


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("h100x2")


def _reduce(folder: Path, results: Path) -> RanksSummary:
    """discover + the per-rank work in this process (once per trace) + the reduction."""
    rs = discover(folder)
    assert rs is not None
    dirs = {}
    for r, t in rs.traces.items():
        dirs[r] = results / f"rank{r}"
        if not (dirs[r] / perrank.RESULT).is_file():
            perrank.analyse(t.path, dirs[r])
    return reduce(
        dirs,
        world_size=rs.world_size,
        backend=rs.backend,
        hosts={r: t.host for r, t in rs.traces.items()},
        manifest=rs.manifest,
        notes=rs.notes,
    )


@pytest.fixture(scope="module")
def results(work: Path) -> dict[str, Path]:
    """Per fixture, the per-rank result folders (analysed on first use)."""
    return {p.name: work / "results" / p.name for p in (DDP, DDP_BF16, FSDP)}


@pytest.fixture(scope="module")
def ddp(results: dict[str, Path]) -> RanksSummary:
    return _reduce(DDP, results[DDP.name])


def _report(folder: Path, out: Path, ranks_cache: Path | None = None) -> tuple[str, Any]:
    """The report of ``folder`` into ``out``: its terminal text (80 columns) and
    summary.json. ``ranks_cache``: per-rank results to reuse (copied to ``<out>.ranks``)."""
    from rich.console import Console

    from tracekit.commands.report import report
    from tracekit.reports import terminal

    if ranks_cache is not None:
        shutil.copytree(ranks_cache, out.with_name(out.name + ".ranks"))
    result = report(folder, out, no_tensorboard=True, plot_worker=False)
    buf = io.StringIO()
    terminal.render(result.summary, Console(file=buf, width=80), result.describe())
    return buf.getvalue(), json.loads((out / "summary.json").read_text())


@pytest.fixture(scope="module")
def ddp_report(work: Path) -> tuple[str, Any]:
    return _report(_copy_run(DDP, work / "ddp"), work / "ddp-report")


@pytest.fixture(scope="module")
def costed_report(work: Path, ddp_report: Any) -> tuple[str, Any]:
    job = _copy_run(DDP, work / "ddp-cost", COST)
    return _report(job, work / "ddp-cost-report", work / "ddp-report.ranks")


# ----------------------------------------------------------------- the reduction, per run


def test_ddp_fp32_per_rank_figures(ddp: RanksSummary) -> None:
    pr = ddp.per_rank.set_index("rank")
    want = {  # ms per step: profiled window (union figures), the manifest's unprofiled step
        "step_time_ms": (89.888237, 88.5177615),
        "gpu_busy_ms": (30.0714765, 87.0917395),
        "compute_ms": (28.1040405, 30.910542),
        "exposed_comm_ms": (1.967436, 56.1811975),
        "sync_wait_ms": (0.1277735, 68.6061245),
        "own_work_ms": (89.7604635, 19.911637),
        "unprofiled_step_ms": (42.53006553649902, 42.683759689331055),
    }
    for col, (r0, r1) in want.items():
        assert (pr.loc[0, col], pr.loc[1, col]) == pytest.approx((r0, r1), abs=1e-6), col
    assert pr["comm_cost_ms"].isna().all()  # made before the measured cost existed
    assert ddp.exposed_comm_pct == pytest.approx(32.82879962318428)
    # the run has no light timeline pass: every figure is the profiled pass's, and it says why
    why = "no light timeline pass (the run was collected without one)"
    assert list(pr["timeline_source"]) == ["full", "full"]
    assert list(pr["timeline_reason"]) == [why, why]
    assert (ddp.timeline_source, ddp.timeline_words) == ("full", f"from the profiled pass: {why}")
    assert (ddp.slowest_rank, ddp.waited_on_rank) == (0, 0)
    st = ddp.stragglers.set_index("step")
    assert list(st["most_work_rank"]) == [0, 0]
    assert list(st["own_work_lead_ms"]) == pytest.approx([35.593285, 34.2555415])
    ar = ddp.by_kind["all_reduce"]
    assert ar["count"] == 26 and ar["ceiling_source"] == "measured"
    assert ar["busbw_Bps"] == pytest.approx(263754082755.3546)
    assert ddp.by_kind["broadcast"]["count"] == 2


def test_ddp_fp32_wait_is_the_profilers(ddp: RanksSummary) -> None:
    m = ddp.measured
    assert m is not None and m.basis == "unprofiled steps" and m.comm_cost is None
    assert m.step_spread_ms == pytest.approx(0.15369415283203125)
    assert (m.step_slowest_rank, m.profiled_wait_rank) == (1, 1)
    assert m.profiled_spread_ms == pytest.approx(69.8488265)
    assert m.profilers_wait
    # the verdict's communication: exposed less the wait, (1.967436 - 0.1277735 + 0) / 2
    assert m.comm_ms == pytest.approx((1.967436 - 0.1277735) / 2)
    assert m.comm_pct == pytest.approx(100 * m.comm_ms / 42.683759689331055)
    assert m.statements == [
        "the profiled window's ranks are 69.85 ms apart (rank 1 waits 68.61 ms per step in "
        "its collectives) while the unprofiled steps are 0.15 ms apart (rank 0 42.53 ms, rank "
        "1 42.68 ms): the trace's wait is the profiler's; the verdict counts the trace's "
        "exposed communication less its sync wait (rank 0 1.84 ms, rank 1 0.00 ms per step); "
        "the communication cost was not measured (tracekit collect --gpus N measures it "
        "without the profiler)"
    ]
    assert m.comm_by_rank == {0: pytest.approx(1.967436 - 0.1277735), 1: 0.0}


@pytest.mark.parametrize(
    "fixture, want",
    [
        (DDP_BF16, {"steps": (76.42135, 71.495275), "exposed": (42.92911, 1.8371155),
                    "wait": (45.0927315, 0.099358), "unprofiled": (38.06193733215332,
                    37.93084716796875), "spread": 40.0672985, "wait_rank": 0,
                    "kinds": {"all_reduce": 26}, "exposed_pct": 29.37189938212808}),
        (FSDP, {"steps": (148.663497, 144.6793705), "exposed": (133.8594225, 2.752001),
                "wait": (137.678903, 0.1608905), "unprofiled": (96.82675170898438,
                97.12819290161133), "spread": 133.533886, "wait_rank": 0,
                "kinds": {"all_gather": 52, "reduce_scatter": 26},
                "exposed_pct": 45.97201392225145}),
    ],
    ids=["ddp-bf16-sdpa", "fsdp-bf16-sdpa"],
)  # fmt: skip
def test_bf16_runs(fixture: Path, want: dict[str, Any], results: dict[str, Path]) -> None:
    s = _reduce(fixture, results[fixture.name])
    pr = s.per_rank.set_index("rank")
    for col, key in (("step_time_ms", "steps"), ("exposed_comm_ms", "exposed"),
                     ("sync_wait_ms", "wait"), ("unprofiled_step_ms", "unprofiled")):  # fmt: skip
        assert (pr.loc[0, col], pr.loc[1, col]) == pytest.approx(want[key], abs=1e-6), col
    assert {k: v["count"] for k, v in s.by_kind.items()} == want["kinds"]
    assert s.exposed_comm_pct == pytest.approx(want["exposed_pct"])
    m = s.measured
    assert m is not None and m.basis == "unprofiled steps" and m.profilers_wait
    assert m.profiled_spread_ms == pytest.approx(want["spread"])
    assert m.profiled_wait_rank == want["wait_rank"]
    # never the wait: the exposed communication less the sync wait, mean over ranks
    exposed, wait = want["exposed"], want["wait"]
    transfer = sum(max(0.0, e - w) for e, w in zip(exposed, wait, strict=True)) / 2
    assert m.comm_ms == pytest.approx(transfer)


# ---------------------------------------------------------------- the measured cost path


def _costed(results: dict[str, Path], tmp: Path, cost: dict[str, Any]) -> RanksSummary:
    job = _copy_run(DDP, tmp / "job", cost)
    return _reduce(job, results[DDP.name])


def test_measured_cost_leads(results: dict[str, Path], tmp_path: Path) -> None:
    import tracekit.reports.ranks as RV
    from tracekit.analyse import comm_of

    s = _costed(results, tmp_path, COST)
    m = s.measured
    assert m is not None and m.basis == "measured"
    assert m.comm_ms == pytest.approx((8.2 + 7.6) / 2)
    assert m.comm_pct == pytest.approx(100 * 7.9 / 42.683759689331055)
    assert (m.own_spread_ms, m.own_slowest_rank) == (pytest.approx(0.8), 1)
    assert m.own_skew_pct == pytest.approx(100 * 0.8 / 33.9)
    pr = s.per_rank.set_index("rank")
    assert list(pr["comm_cost_ms"]) == [8.2, 7.6]
    assert list(pr["without_sync_ms"]) == [33.9, 34.7]
    # the verdict of the report detailing a rank takes that rank's measured cost
    words = "communication cost measured without the profiler"
    assert comm_of(s, 1) == (7.6, f"rank 1's {words}")
    assert comm_of(s, 0) == (8.2, f"rank 0's {words}")
    lines = RV.lines(s)
    assert lines[1] == (
        "the profiled window's ranks are 69.85 ms apart (rank 1 waits 68.61 ms per step in "
        "its collectives) while the unprofiled steps without gradient sync are 0.80 ms apart "
        "(rank 0 33.90 ms, rank 1 34.70 ms): the trace's wait is the profiler's; the measured "
        "communication cost is 7.90 ms (18.5 % of the unprofiled 42.68 ms step; rank 0 8.20 "
        "ms, rank 1 7.60 ms)"
    )
    assert RV.straggler_line(s) == (
        "straggler (unprofiled steps without gradient sync, no rank waiting): rank 1, 0.800 "
        "ms over the fastest (skew 2.4 %); in the profiled window rank 0 works longest "
        "between collectives (34.92 ms over the median per step); the others wait for rank 0 "
        "at 28 of 28 collectives; step-time skew 1.5 % (slowest rank 0): the profiler's"
    )


def test_cost_not_measured_says_why_and_fsdp_caveat(
    results: dict[str, Path], tmp_path: Path
) -> None:
    failed = {"status": "skipped", "reason": "the model is not a DDP module", "ranks": []}
    s = _costed(results, tmp_path / "a", failed)
    assert s.measured is not None and s.measured.basis == "unprofiled steps"
    assert s.measured.statements[0].endswith(
        "the communication cost was not measured (skipped: the model is not a DDP module)"
    )
    caveat = "parameter all-gathers stay in the steps without gradient sync"
    s = _costed(results, tmp_path / "b", {**COST, "caveat": caveat})
    assert s.measured is not None and s.measured.statements[0].endswith(f"({caveat})")


def test_bare_folder_says_the_figures_are_the_profiled_windows(
    results: dict[str, Path], tmp_path: Path
) -> None:
    job = tmp_path / "bare"
    job.mkdir()
    for p in DDP.glob("*.pt.trace.json.gz"):
        shutil.copy2(p, job / p.name)
    s = _reduce(job, results[DDP.name])
    m = s.measured
    assert m is not None and m.basis == "profiled window" and m.comm_ms is None
    assert m.statements[0].startswith(
        "no unprofiled figures (no run manifest with the ranks' steps): every figure is the "
        "profiled window's, and its waits may be overstated"
    )
    assert "(rank 1 waits 68.61 ms per step in its collectives)" in m.statements[0]
    import tracekit.reports.ranks as RV
    from tracekit.analyse import comm_of

    assert comm_of(s, 0) is None  # the trace's figures stand
    line = RV.straggler_line(s)
    assert line is not None and line.startswith("straggler (profiled window): rank 0 works")


# ------------------------------------------------------------------------- the reports


def test_report_of_the_shared_ddp_run(ddp_report: tuple[str, Any]) -> None:
    text, doc = ddp_report
    assert max(len(line) for line in text.splitlines()) <= 80
    assert [w for w in doc["warnings"] if w.startswith("report invariant broken")] == []
    flat = _flat(text)
    v = doc["step_summary"]
    assert v["verdict"] != "communication-bound"  # not on the profiled window's wait
    assert v["verdict"] == "launch/host-bound"
    # rank 0 (detailed): its exposed communication less its sync wait, its own GPU work
    assert v["shares_pct"]["exposed_communication"] == pytest.approx(
        100 * (1.967436 - 0.1277735) / 42.683759689331055, abs=1e-6
    )
    assert (
        "communication 1.84 ms per step: rank 0's exposed communication in the trace less "
        "its sync wait (the profiled window's wait is the profiler's)" in flat
    )
    assert (
        "GPU work 65.8 %, exposed communication 4.3 %, input wait 0.0 %, host idle 29.8 % of "
        "the unprofiled 42.68 ms step" in flat
    )
    assert sum(v["shares_pct"].values()) == pytest.approx(100.0)
    assert "the trace's wait is the profiler's" in flat
    assert "straggler (unprofiled steps): rank 1, 0.154 ms over the fastest (skew 0.4 %)" in flat
    ranks = doc["ranks"]
    assert ranks["measured"]["basis"] == "unprofiled steps"
    assert ranks["measured"]["profilers_wait"] is True
    per = {r["rank"]: r for r in ranks["per_rank"]}
    assert per[1]["unprofiled_step_ms"] == pytest.approx(42.683759689331055)
    assert per[1]["comm_cost_ms"] is None


def test_report_leads_with_the_measured_cost(costed_report: tuple[str, Any]) -> None:
    text, doc = costed_report
    flat = _flat(text)
    v = doc["step_summary"]
    # rank 0 (detailed): its measured 8.2 ms beside its own GPU work from the trace
    shares = v["shares_pct"]
    assert shares["exposed_communication"] == pytest.approx(100 * 8.2 / 42.683759689331055)
    assert sum(shares.values()) == pytest.approx(100.0)
    assert v["verdict"] == "communication-bound"  # 19.2 % measured against 14.9 % host idle
    assert (
        "communication runs with no other GPU work beside it for 8.20 ms per step (rank 0's "
        "communication cost measured without the profiler)" in flat
    )
    assert (
        "GPU work 65.8 %, exposed communication 19.2 %, input wait 0.0 %, host idle 14.9 % of "
        "the unprofiled 42.68 ms step" in flat
    )
    ranks_at = flat.index("Ranks")
    assert flat.index("the measured communication cost is 7.90 ms", ranks_at) < flat.index(
        "exposed communication 32.8 % of the step, mean over ranks (rank 0 2.2 %, rank 1 63.5 "
        "%), from the profiled pass: no light timeline pass (the run was collected without one)",
        ranks_at,
    )
    m = doc["ranks"]["measured"]
    assert (m["basis"], m["comm_ms"]) == ("measured", pytest.approx(7.9))
    assert m["comm_cost"]["sync_off"] == "DistributedDataParallel.no_sync()"
    assert "ranks" not in m["comm_cost"]
    per = {r["rank"]: r for r in doc["ranks"]["per_rank"]}
    assert (per[0]["comm_cost_ms"], per[1]["comm_cost_pct"]) == (8.2, 18.0)


# ------------------------------------------------------------------------- compare 1 -> 2


def _scaling(work: Path, two: Path, name: str, ddp_report: Any) -> dict[str, Any]:
    from tracekit.commands.compare import run_compare

    out = work / name
    shutil.copytree(work / "ddp-report.ranks", out.with_name(f"{out.name}.ranks-b"))
    res = run_compare(ONE, two, out)
    sc: dict[str, Any] = res.comparison.doc["scaling"]
    return sc


def test_compare_one_gpu_with_the_shared_ddp_run(work: Path, ddp_report: Any) -> None:
    sc = _scaling(work, _copy_run(DDP, work / "ddp-cmp"), "cmp", ddp_report)
    assert (sc["from_gpus"], sc["to_gpus"], sc["step_basis"]) == (1, 2, "unprofiled")
    assert sc["efficiency_pct"] == pytest.approx(100 * 23990.38902507813 / 31451.8567047477)
    assert sc["step_ms"] == {
        "from": pytest.approx(32.55769634246826),
        "to": pytest.approx(42.683759689331055),
    }
    assert sc["lost_ms_per_step"] == pytest.approx(42.683759689331055 - 32.55769634246826)
    assert sc["where"] == {"communication_ms": None, "rest_ms": None}
    assert sc["skew_ms"] == pytest.approx(0.15369415283203125)
    p = sc["profiled"]
    assert p["where"]["exposed_communication_ms"] == pytest.approx(29.074, abs=1e-3)
    assert p["lost_ms_per_step"] == pytest.approx(14.980, abs=1e-3)


def test_compare_splits_the_unprofiled_step_with_the_measured_cost(
    work: Path, ddp_report: Any
) -> None:
    from tracekit.ranks.scaling import sentence

    sc = _scaling(work, _copy_run(DDP, work / "ddp-cmp-cost", COST), "cmp-cost", ddp_report)
    lost = 42.683759689331055 - 32.55769634246826
    assert sc["where"] == {
        "communication_ms": pytest.approx(7.9),
        "rest_ms": pytest.approx(lost - 7.9),
    }
    assert sc["skew_ms"] == pytest.approx(0.8)
    assert sentence(sc) == (
        "scaling 1 -> 2 GPUs: efficiency 76.3 % (tokens/s per GPU from the manifest "
        "(unprofiled)); the unprofiled step grew +10.126 ms (32.558 -> 42.684 ms): measured "
        "communication cost +7.900 ms, the rest +2.226 ms; skew (unprofiled steps without "
        "gradient sync, largest minus smallest) 0.800 ms; in the profiled window the step "
        "grew +14.980 ms (exposed communication +29.074 ms, GPU idle -16.483 ms, compute "
        "+2.389 ms), not on this basis"
    )


@pytest.mark.parametrize("src", [DDP_BF16, FSDP], ids=lambda p: p.name)
def test_bf16_and_fsdp_reports_keep_the_invariants(
    src: Path, work: Path, results: dict[str, Path]
) -> None:
    """The report never contradicts itself on the other two-GPU runs either: on FSDP
    communication runs beside compute most of the step (its kernels 98 % of the busy
    time), and the time shares still add up to 100 % (summary/invariants.py)."""
    _reduce(src, results[src.name])  # the per-rank results, reused by the report
    _, doc = _report(src, work / f"{src.name}-report", results[src.name])
    assert [w for w in doc["warnings"] if w.startswith("report invariant broken")] == []
    assert sum(doc["time_share_pct"].values()) == pytest.approx(100.0)
    busy = doc["busy_share_pct"]
    assert all(0 <= v <= 100 for v in busy.values()) and sum(busy.values()) > 100
