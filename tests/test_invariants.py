"""The report invariants (tracekit/summary/invariants.py): each check on a small document
that breaks it, and every report of the fixtures and traces the other report tests do not
already check (those assert ``summary.broken == []`` themselves: test_report_fixtures,
test_report_cpu, test_ranks_h100x2, test_generate, test_run_script, test_sweep_run)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tracekit.summary.invariants as INV
from tracekit.classify import classify
from tracekit.classify.wrappers import WRAPPER_NOTE
from tracekit.parse import load
from tracekit.parse.cpuview import cpu_view

ROOT = Path(__file__).resolve().parents[1]
CPU_FIX = ROOT / "fixtures" / "cpu-tiny-fp32-naive"


def _names(vs: list[INV.Violation]) -> list[str]:
    return [v.name for v in vs]


def test_shares_within_0_100_and_partitions_at_most_100() -> None:
    assert _names(INV.shares({"time_share_pct": {"a": 60.0, "b": 40.0}})) == []
    assert _names(INV.shares({"fits": [{"t2_share_pct": 591.0}]})) == ["share"]
    assert _names(INV.shares({"fits": [{"t2_share_pct": -6.2}]})) == ["share"]
    assert _names(INV.shares({"time_share_pct": {"a": 60.0, "b": 45.0}})) == ["share"]


def test_roof_exceeded_only_when_said() -> None:
    over = {"step_summary": {"compute_utilisation_pct": 912.7}}
    assert _names(INV.roof(over)) == ["roof"]
    assert INV.roof({**over, "roof_note": "why"}) == []


def test_verdict_against_its_evidence() -> None:
    def doc(verdict: str, *evidence: str) -> dict[str, Any]:
        return {"step_summary": {"verdict": verdict, "evidence": list(evidence)}}

    side = "step intensity 4.9 FLOP/B, above the ridge point 1.0 of simt_fp32"
    assert _names(INV.verdict(doc("memory-bandwidth-bound", side))) == ["verdict"]
    assert INV.verdict(doc("compute-bound", side)) == []
    assert INV.verdict(doc("memory-bandwidth-bound", side, "verdict and ... differ: …")) == []
    below = "step intensity 0.2 FLOP/B, below the ridge point 1.0 of simt_fp32"
    assert _names(INV.verdict(doc("compute-bound", below))) == ["verdict"]


def test_step_time_quoted_is_a_named_basis() -> None:
    doc: dict[str, Any] = {"step_time_ms": 24.05, "measured_step_time_ms": 11.63}
    ok = "host idle 35.9 % of the unprofiled 11.63 ms step"
    doc["notes"] = [ok]
    assert INV.step_times(doc) == []
    doc["notes"] = [ok, "the profiled step took 23.6 ms against 11.6 ms unprofiled"]
    assert _names(INV.step_times(doc)) == ["step_time"]


def test_light_steps_apart_outside_the_cost_carry_their_note() -> None:
    tl = {"apart_agrees": False, "light_step_time_ms": 39.54, "unprofiled_step_time_ms": 30.3}
    doc: dict[str, Any] = {"timeline": tl, "notes": []}
    assert _names(INV.light_apart(doc)) == ["light_apart"]
    doc["notes"] = ["the light pass's steps (39.54 ms) ran +30.5 % against the unprofiled "
                    "steps timed apart (30.30 ms), outside its cost …"]  # fmt: skip
    assert INV.light_apart(doc) == []
    assert INV.light_apart({"timeline": {**tl, "apart_agrees": True}, "notes": []}) == []


def test_memory_floor_and_peak() -> None:
    cat = {"parameters": 564224.0, "optimizer_state": 1128560.0, "activations": 21e6}
    mem = {"floor_allocated_bytes": 0, "peak_allocated_bytes": 19473436,
           "peak_by_model_category": cat}  # fmt: skip
    assert _names(INV.memory({"memory": mem})) == ["memory_floor", "memory_peak"]
    mem.update(floor_allocated_bytes=1692784, peak_allocated_bytes=21166220)
    assert INV.memory({"memory": mem}) == []
    # a tiny CPU MLP: its category step held one temporary more than the analysed steps
    # (162,928 B against a 143,816 B peak: 13 %, 19 KiB), within the 64 KiB slack
    tiny = {"peak_allocated_bytes": 143816, "peak_by_model_category": {"activations": 162928}}
    assert INV.memory({"memory": tiny}) == []
    tiny["peak_by_model_category"] = {"activations": 143816 + 70 * 2**10}  # beyond both
    assert _names(INV.memory({"memory": tiny})) == ["memory_peak"]


def test_absent_not_unknown() -> None:
    doc = {"ms_per_step": {"gemm": 1.0, "layernorm": 0.0}, "flops_per_step": {"gemm": 9.0}}
    assert _names(INV.absent(doc)) == ["absent"]
    assert _names(INV.absent({"x": "timeline trace: none (None)"})) == ["absent"]
    both = {"step_summary": {"analytic_traffic": {"total": 1}},
            "notes": ["analytic traffic estimate unavailable: no model"]}  # fmt: skip
    assert _names(INV.absent(both)) == ["absent"]


def test_cpu_flops_counted_once() -> None:
    """aten::linear/matmul/softmax carry none of their children's FLOPs: the gemm class's
    FLOPs are the GEMMs' own (addmm, mm, bmm), each counted once."""
    trace = cpu_view(load(CPU_FIX))
    cls = classify(trace)
    k = cls.kernels
    assert INV.flops_once(k, trace.ops) == []
    for wrapper in ("aten::linear", "aten::matmul", "aten::softmax"):
        rows = k[k["name"] == wrapper]
        assert len(rows) and (rows["flops"].fillna(0) == 0).all(), wrapper
        assert (rows["cost_note"] == WRAPPER_NOTE).all() if "cost_note" in k else True
    gemm = k[k["class"] == "gemm"]
    own = gemm[gemm["name"].isin(["aten::addmm", "aten::mm", "aten::bmm"])]
    assert float(gemm["flops"].sum()) == pytest.approx(float(own["flops"].sum()))
    # the flops_once check finds the double count the rule removes
    doubled = k.copy()
    lin = (doubled["name"] == "aten::linear").to_numpy()
    doubled.loc[lin, "flops"] = 1.0
    assert _names(INV.flops_once(doubled, trace.ops)) == ["flops_once"]


@pytest.mark.parametrize(
    "path",
    [
        ROOT / "fixtures" / "h100-gpt2s-b8-s128-fp32",
        ROOT / "fixtures" / "h200-gen-gpt2m-b8-p512-n64-bf16-sdpa",
        *sorted((ROOT / "tests" / "data").glob("*.pt.trace.json.gz")),
    ],
    ids=lambda p: p.name,
)
def test_reports_keep_the_invariants(path: Path, tmp_path: Path) -> None:
    from tracekit.commands.report import report

    res = report(path, tmp_path / "out", no_tensorboard=True, plot_worker=False)
    assert [str(v) for v in res.summary.broken] == []
    assert not any(w.startswith(INV.WARNING) for w in res.summary.warnings)


def test_fits_share_is_a_share_or_absent() -> None:
    from tracekit.sweep.fit import quadratic_fit

    t = np.array([16.0, 32.0, 64.0, 128.0])
    falling = quadratic_fit(t, 1e4 / (1 + t / 20))  # tokens/s: no T² part
    assert np.isnan(falling.t2_share_at_max)
    growing = quadratic_fit(t, 100 + 3 * t + 0.5 * t**2)
    assert 0 <= growing.t2_share_at_max <= 1
