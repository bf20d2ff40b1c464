"""The lever models' mechanics on the H200 fixtures (tracekit.advise.models): the larger
batch's GEMMs at the best rate the device has shown, and the bf16 model's host work
against the fp32 -> bf16 fixture pair's measured difference."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

import tracekit.advise.models as M
import tracekit.advise.why as W
from tracekit.advise.baseline import Baseline, analyse

FIX = Path(__file__).resolve().parents[1] / "fixtures"


@pytest.fixture(scope="module")
def fp32() -> Baseline:
    return analyse(FIX / "h200-gpt2s-b8-s128-fp32-naive")


def test_gemm_rates_are_the_best_the_device_has_shown(fp32: Baseline) -> None:
    rates = M.gemm_rates(fp32)
    ceiling = fp32.manifest["ceilings"]["matmul_flops"]["fp32"]
    assert ceiling == pytest.approx(51.08e12, rel=1e-3)
    # an LM-head GEMM of the trace beat the 8192³ ceiling: its rate is the pipe's best
    assert set(rates) == {"simt_fp32"} and rates["simt_fp32"] == pytest.approx(53.1e12, rel=2e-3)
    assert rates["simt_fp32"] > ceiling


def test_a_larger_batchs_gemms(fp32: Baseline) -> None:
    k = fp32.kernels
    rows = np.flatnonzero((k["class"] == "gemm").to_numpy(bool))
    mult = M.gemm_scaled(fp32, rows, 2)
    ok = np.isfinite(mult)
    assert ok.sum() == 267 and np.isnan(mult[~ok]).all()  # GEMM kernels without FLOPs: NaN
    assert ((mult[ok] >= 1.0) & (mult[ok] <= 2.0)).all()
    flops, dur = k["flops"].to_numpy(float)[rows], k["dur"].to_numpy(float)[rows]
    rate = flops / dur * 1e9
    best = M.gemm_rates(fp32)["simt_fp32"]
    fastest = int(np.nanargmax(rate))
    assert mult[fastest] == pytest.approx(2.0)  # at the roof already: twice the work, twice
    slow = ok & (rate < best / 2)  # under half the roof: more work fits in the time it takes
    assert slow.any() and (mult[slow] == 1.0).all()
    mid = ok & (rate >= best / 2)
    assert mult[mid] == pytest.approx(2 * rate[mid] / best)
    # the step: 20.03 ms of GEMMs with FLOPs become 29.71 ms, not 40
    assert (dur[ok] * mult[ok]).sum() / 1e6 == pytest.approx(29.71, abs=0.01)


def test_bf16_host_work_against_the_fixture_pair(fp32: Baseline) -> None:
    from tracekit.classify import classify
    from tracekit.parse import load
    from tracekit.summary import summarize

    def host_ms(name: str) -> float:
        t = load(FIX / name)
        return W.facts(t, summarize(t, classify(t, manifest=t.manifest))).host_ms

    # the casts autocast adds, in traced host time per step: predicted from the fp32 run's
    # forward GEMM operators (one host operator per cast each way, at the median cost of a
    # one-kernel operator), measured as the bf16-naive run's outermost operators' time over
    # the fp32-naive run's (+4.47 ms: ToCopyBackward0 +2.37 ms, aten::linear +1.76 ms, …)
    k = fp32.kernels
    gemm = np.flatnonzero((k["class"] == "gemm").to_numpy(bool))
    _, casts, _ = M._casts(fp32, gemm)
    predicted = 2 * casts * M._one_kernel_op_ns(fp32) / 1e6
    measured = host_ms("h200-gpt2s-b8-s128-bf16-naive") - host_ms("h200-gpt2s-b8-s128-fp32-naive")
    assert measured == pytest.approx(4.47, abs=0.01) and predicted == pytest.approx(5.31, abs=0.01)
    assert math.isclose(predicted, measured, rel_tol=0.2)
