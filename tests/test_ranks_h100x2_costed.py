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
    # the trace alone would say 26.5 % exposed communication (rank 1: 50.4 %): not the verdict
    assert summary["ranks"]["exposed_comm_pct"] == pytest.approx(26.507, abs=1e-2)
    assert summary["step_summary"]["verdict"] == "launch/host-bound"
    # its light pass recorded kernels only: the launch evidence says so, not "unknown µs"
    ev = " ".join(summary["step_summary"]["evidence"])
    assert "(no launch call recorded: a kernels-only light pass)" in ev and "unknown" not in ev


def test_the_timeline_is_the_light_pass_joined_whole(summary: dict[str, Any]) -> None:
    tl = summary["timeline"]
    assert (tl["source"], tl["recorder"], tl["joined_pct"]) == ("light", "cupti-kernels", 100.0)
    assert tl["light_vs_unprofiled_pct"] == pytest.approx(2.794, abs=1e-2)
    assert tl["full_vs_unprofiled_pct"] == pytest.approx(63.973, abs=1e-2)
