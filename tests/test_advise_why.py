"""Why a measured lever slowed the step (tracekit.advise.why): the facts of a run's own
analysis, on the H200 fixtures (fp32-naive and bf16-naive are the bf16 lever's two ends),
and the line a slower row gets in the table."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

import tracekit.advise.table as TB
import tracekit.advise.why as W

FIX = Path(__file__).resolve().parents[1] / "fixtures"


def _facts(name: str) -> W.RunFacts:
    from tracekit.classify import classify
    from tracekit.parse import load
    from tracekit.summary import summarize

    t = load(FIX / name)
    return W.facts(t, summarize(t, classify(t, manifest=t.manifest)))


@pytest.fixture(scope="module")
def fp32_bf16() -> tuple[W.RunFacts, W.RunFacts]:
    return _facts("h200-gpt2s-b8-s128-fp32-naive"), _facts("h200-gpt2s-b8-s128-bf16-naive")


def test_facts_of_the_fixtures(fp32_bf16: tuple[W.RunFacts, W.RunFacts]) -> None:
    fp32, bf16 = fp32_bf16
    assert fp32.verdict == "compute-bound" and bf16.verdict == "launch/host-bound"
    assert fp32.step_ms == pytest.approx(26.656, abs=1e-3)
    assert bf16.shares_pct["host_idle"] == pytest.approx(41.71, abs=0.01)
    # autocast's casts: 147 more outermost host operators, 4.5 ms more traced host work
    assert (fp32.host_ops, bf16.host_ops) == (1452, 1599)
    assert (fp32.host_ms, bf16.host_ms) == pytest.approx((19.384, 23.852), abs=1e-3)
    cpu = _facts("cpu-tiny-fp32-naive")  # a CPU run: operators inside ProfilerStep# count
    assert cpu.verdict is None and cpu.host_ops == 491


def test_the_line_for_a_lever_that_slows_the_step(
    fp32_bf16: tuple[W.RunFacts, W.RunFacts],
) -> None:
    fp32, bf16 = fp32_bf16
    line = W.slower_line("bf16", 1.23, "90 % interval 1.17-1.29, 12 rounds", fp32, bf16)
    assert line == (
        "bf16: x1.23 slower (90 % interval 1.17-1.29, 12 rounds): the step becomes "
        "launch/host-bound (the re-measured baseline: compute-bound); host idle 42 % of the "
        "14.6 ms step; 1,452 -> 1,599 host operators per step (+147), 19.4 -> 23.9 ms of traced "
        "host work per step (+4.5 ms)"
    )
    same = W.slower_line("checkpoint", 1.6, "x", fp32, fp32)
    assert same is not None and "the step stays compute-bound; GPU work 96 %" in same
    assert W.slower_line("sdpa", 0.9, "x", fp32, bf16) is None  # faster: no line
    assert W.slower_line("sdpa", 1.2, "x", fp32, None) is None  # no analysis of its run
    cpu = W.RunFacts(None, {}, 10.0, 100.0, 5.0)
    assert W.slower_line("x", 1.1, "i", cpu, W.RunFacts(None, {}, 11.0, 150.0, 7.0)) == (
        "x: x1.10 slower (i): 100 -> 150 host operators per step (+50), 5.0 -> 7.0 ms of "
        "traced host work per step (+2.0 ms)"
    )


def test_only_rows_that_slow_the_step_get_a_line(
    fp32_bf16: tuple[W.RunFacts, W.RunFacts],
) -> None:
    fp32, bf16 = fp32_bf16

    def row(lever: str, ratio: float, effect: str, lo: float, hi: float, n: int) -> dict[str, Any]:
        return {"lever": lever, "status": "ok", "step_ratio": ratio, "effect": effect,
                "ratio_lo": lo, "ratio_hi": hi, "rounds": n, "key": lever,
                "slower_why": math.nan}  # fmt: skip

    rows = [row("bf16", 1.23, "slower", 1.17, 1.29, 12),
            row("cuda-graphs", 1.01, "no measurable difference", 0.99, 1.02, 7),
            row("batch", 1.5, "1 round, no interval", math.nan, math.nan, 1),
            row("sdpa", 0.8, "faster", 0.78, 0.82, 5)]  # fmt: skip
    TB.add_slower_why(rows, fp32, {"bf16": bf16, "cuda-graphs": bf16, "batch": bf16})
    head = "bf16: x1.23 slower (90 % interval 1.17-1.29, 12 rounds): the step becomes launch"
    assert rows[0]["slower_why"].startswith(head)
    assert math.isnan(rows[1]["slower_why"])  # its interval holds 1.0
    assert rows[2]["slower_why"].startswith("batch: x1.50 slower (1 round, no interval)")
    assert math.isnan(rows[3]["slower_why"])


def test_an_unknown_verdict_says_why() -> None:
    """A CUDA graph's kernels replay without their operators: its run's verdict is
    ``unknown`` (no FLOPs or bytes), and the row says so instead of a bare 'unknown'."""
    from types import SimpleNamespace

    import numpy as np
    import pandas as pd

    ops = pd.DataFrame({"category": ["user_annotation", "cpu_op"]})
    # 3 kernels: 6 + 2 µs inside the step's annotation only (the graph), 2 µs under an op
    k = pd.DataFrame({"dur": [6000.0, 2000.0, 2000.0], "op_id": np.array([0, -1, 1])})
    line = W.unknown_why(SimpleNamespace(kernels=k, ops=ops), ["the GPU is busy, but …"])
    assert line.startswith("80 % of its GPU time is in kernels no traced operator launched")
    k["op_id"] = 1  # every kernel under an operator: the verdict's own reason
    assert W.unknown_why(SimpleNamespace(kernels=k, ops=ops), ["why"]) == "why"
    meas = {"status": "ok", "step_time_ms": 10.0, "peak_bytes": 1.0, "tokens_per_s": 1.0}
    p = TB.Prediction("cuda-graphs", "", ["cuda-graphs"], {}, step_ratio=1.0, tokens=1)
    row = TB.row(p, "lever", meas, meas, {}, ("compute-bound", "unknown"), line)
    assert row["verdict_after"] == "unknown" and row["verdict_after_why"] == line
    from rich.console import Console

    import tracekit.reports.advise as RA

    con = Console(width=300, record=True)
    con.print(RA.why(pd.DataFrame([row], columns=list(TB.COLUMNS))))
    assert "cuda-graphs: its run's verdict is unknown: 80 % of its GPU time" in con.export_text()
