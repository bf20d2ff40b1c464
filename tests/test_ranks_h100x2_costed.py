"""Golden figures of a real default-options 2-GPU collect (fixtures/h100x2-ddp-gpt2s-b8-
s128-fp32-costed: DDP fp32 on 2 x H100, the light pass recorded by CUPTI kernels-only on
every rank, the communication cost measured without the profiler; fixtures/README.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tracekit.cli import main

RUN = Path(__file__).resolve().parents[1] / "fixtures" / "h100x2-ddp-gpt2s-b8-s128-fp32-costed"


@pytest.fixture(scope="module")
def summary(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("costed")
    assert main(["report", str(RUN), "-o", str(out), "--no-tensorboard"]) == 0
    doc: dict[str, Any] = json.loads((out / "summary.json").read_text())
    return doc


def test_the_manifest_holds_the_measured_cost_per_rank() -> None:
    m = json.loads((RUN / "manifest.json").read_text())
    assert m["status"] == "ok" and [r["status"] for r in m["distributed"]["ranks"]] == ["ok"] * 2
    c = m["distributed"]["comm_cost"]
    assert (c["status"], c["rounds"], c["steps_per_round"]) == ("ok", 6, 5)
    cost = {r["rank"]: r["cost_ms"] for r in c["ranks"]}
    assert cost[0] == pytest.approx(7.5398, abs=1e-3) and cost[1] == pytest.approx(6.8421, abs=1e-3)
    # every rank ran the light pass (CUPTI, kernels only) before the full one
    assert m["profiler"]["timeline"]["recorder"] == "cupti-kernels"
    assert len(m["artifacts"]["timeline_traces"]) == 2


def test_the_report_leads_with_the_measured_cost(summary: dict[str, Any]) -> None:
    meas = summary["ranks"]["measured"]
    assert meas["basis"] == "measured" and meas["profilers_wait"] is True
    assert meas["comm_ms"] == pytest.approx(7.1909, abs=1e-3)
    assert meas["comm_pct"] == pytest.approx(16.4957, abs=1e-3)
    assert meas["profiled_spread_ms"] == pytest.approx(46.854, abs=1e-2)
    assert meas["own_spread_ms"] == pytest.approx(0.3524, abs=1e-3)
    assert meas["statements"][0].startswith(
        "the profiled window's ranks are 46.85 ms apart (rank 1 waits 49.59 ms per step in "
        "its collectives) while the unprofiled steps without gradient sync are 0.35 ms apart"
    )
    # the light passes say 15.6 % exposed communication (rank 1: 28.2 %; the profiled pass
    # said 26.5 %, rank 1 50.4 %): not the verdict, which takes the measured cost
    assert summary["ranks"]["exposed_comm_pct"] == pytest.approx(15.5753, abs=1e-3)
    assert summary["step_summary"]["verdict"] == "launch/host-bound"
    # its light pass recorded kernels only: the launch evidence says so, not "unknown µs"
    ev = " ".join(summary["step_summary"]["evidence"])
    assert "(no launch call recorded: a kernels-only light pass)" in ev and "unknown" not in ev


def test_the_timeline_is_the_light_pass_joined_whole(summary: dict[str, Any]) -> None:
    tl = summary["timeline"]
    assert (tl["source"], tl["recorder"], tl["joined_pct"]) == ("light", "cupti-kernels", 100.0)
    assert tl["light_vs_unprofiled_pct"] == pytest.approx(2.794, abs=1e-2)
    assert tl["full_vs_unprofiled_pct"] == pytest.approx(63.973, abs=1e-2)


def test_per_rank_figures_come_from_each_ranks_light_pass(summary: dict[str, Any]) -> None:
    """Busy, exposed communication and idle per rank from its light pass (CUPTI, kernels
    only), joined whole to its full pass; wait and own work stay the profiled window's."""
    ranks = summary["ranks"]
    assert ranks["timeline"] == {
        "source": "light",
        "words": "from the light pass (CUPTI, kernels only)",
    }
    per = {r["rank"]: r for r in ranks["per_rank"]}
    for r in (0, 1):
        assert (per[r]["timeline_source"], per[r]["timeline_recorder"]) == (
            "light",
            "cupti-kernels",
        )
        assert per[r]["timeline_reason"] is None
    # exposed communication, % of the step: profiled pass 2.64 % and 50.37 % before
    assert per[0]["exposed_comm_pct"] == pytest.approx(2.99737, abs=1e-4)
    assert per[1]["exposed_comm_pct"] == pytest.approx(28.15327, abs=1e-4)
    # the light step (44.8 ms, 44.6 ms) against the profiled one (71.5 ms, 74.1 ms)
    assert per[0]["step_time_ms"] == pytest.approx(44.8108, abs=1e-3)
    assert per[1]["step_time_ms"] == pytest.approx(44.5731, abs=1e-3)
    assert per[0]["gpu_idle_pct"] == pytest.approx(33.7402, abs=1e-3)  # profiled: 57.94
    assert per[1]["gpu_idle_pct"] == pytest.approx(2.5287, abs=1e-3)  # profiled: 7.98
    # the collectives' wait and own work are the profiled pass's, as before
    assert per[1]["sync_wait_ms"] == pytest.approx(49.5932, abs=1e-3)
    assert per[1]["own_work_ms"] == pytest.approx(74.1114 - 49.5932, abs=1e-3)


def test_bare_folder_of_the_same_traces_uses_the_full_pass(tmp_path: Path) -> None:
    """Without the run's manifest no light pass is known: the profiled pass's figures,
    with the reason, as before."""
    from tracekit.ranks import perrank
    from tracekit.ranks.discover import discover
    from tracekit.ranks.reduce import reduce

    bare = tmp_path / "bare"
    bare.mkdir()
    for p in RUN.glob("*.pt.trace.json.gz"):  # the ranks' full traces, no manifest
        (bare / p.name).write_bytes(p.read_bytes())
    found = discover(bare)
    assert found is not None and found.ranks == [0, 1] and found.manifest is None
    dirs = {r: tmp_path / f"rank{r}" for r in found.ranks}
    for r, d in dirs.items():
        assert perrank.analyse(found.traces[r].path, d)["timeline_source"] == "full"
    rs = reduce(dirs, world_size=2)
    why = "a bare trace has no light timeline pass (tracekit collect records one)"
    assert list(rs.per_rank["timeline_reason"]) == [why, why]
    assert rs.timeline_words == f"from the profiled pass: {why}"
    assert rs.exposed_comm_pct == pytest.approx(26.507, abs=1e-2)  # the profiled pass's


def test_a_light_pass_that_does_not_join_leaves_the_full_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Below the join threshold the rank's figures are its full pass's, with the reason
    (the threshold raised past the 100 % this rank joins, standing in for a run whose light
    pass ran different work)."""
    import tracekit.summary.timeline as TL
    from tracekit.ranks import perrank

    monkeypatch.setattr(TL, "MIN_JOINED_PCT", 100.5)
    m = json.loads((RUN / "manifest.json").read_text())
    trace = RUN / m["distributed"]["ranks"][1]["artifacts"]["trace"]
    got = perrank.analyse(trace, tmp_path / "rank1")
    assert got["timeline_source"] == "full" and got["timeline_joined_pct"] == 100.0
    assert got["timeline_reason"].startswith(
        "only 100.0 % of the GPU time joins the full pass's kernels (per stream, by order and "
    )
    assert got["step_time_ms"] == pytest.approx(74.1114, abs=1e-3)  # the profiled step


def test_the_exposed_transfer_keeps_a_light_ranks_exposed_communication_whole() -> None:
    """Without a measured cost the verdict takes the exposed communication less the
    profiled window's sync wait; a rank whose figures are its light pass's keeps its own
    (that wait is another pass's)."""
    import pandas as pd

    from tracekit.ranks.measured import exposed_transfer_ms

    pr = pd.DataFrame(
        {"rank": [0, 1], "exposed_comm_ms": [1.34, 12.55], "sync_wait_ms": [0.11, 49.59]}
    )
    assert exposed_transfer_ms(pr) == {0: pytest.approx(1.23), 1: 0.0}
    light = pr.assign(timeline_source=["full", "light"])
    assert exposed_transfer_ms(light) == {0: pytest.approx(1.23), 1: pytest.approx(12.55)}
