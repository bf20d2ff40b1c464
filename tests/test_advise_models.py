"""The lever models' mechanics on the H200 fixtures (tracekit.advise.models): the larger
batch's GEMMs at the best rate the device has shown, and the bf16 model's host work
against the fp32 -> bf16 fixture pair's measured difference."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

import tracekit.advise.fits as F
import tracekit.advise.models as M
import tracekit.advise.why as W
from tracekit.advise.baseline import Baseline, analyse
from tracekit.advise.predict import predict

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


# ---------------------------------------------------------------- compile and checkpoint


@pytest.fixture(scope="module")
def pair() -> tuple[Baseline, Baseline]:
    return tuple(analyse(FIX / n) for n in F.COMPILE_PAIR)  # type: ignore[return-value]


def test_the_compile_constants_are_the_fixture_pairs(pair: tuple[Baseline, Baseline]) -> None:
    fit = F.compile_fit(*pair)
    # forward/backward kernels of the fusible classes, eager: activation 24 + elementwise
    # 337 + layernorm 75 + layout 3 + loss 2 + memset 74 + reduction 49 + softmax 2 = 566;
    # compiled: 36 + 148 + 149 + 0 + 1 + 26 + 48 + 3 = 411, of them 387 triton_* kernels
    assert (fit.fusible_before, fit.fusible_after, fit.triton_after) == (566, 411, 387)
    assert (fit.fusible_ms_before, fit.fusible_ms_after) == pytest.approx((2.824781, 1.545512))
    # host per launch: (path host 23.186213 - optimizer 2.497027 ms) / k 2.1575216 / 766
    # kernels = 12.5187 µs eager; (18.824164 - 3.000741) / 1.9465744 / 610 = 13.3260 µs
    assert fit.host_us_per_launch_before == pytest.approx(12.5187, abs=1e-4)
    assert fit.host_us_per_launch_after == pytest.approx(13.3260, abs=1e-4)
    assert fit.time == pytest.approx(F.COMPILE_TIME) == pytest.approx(0.54713, abs=1e-5)
    assert fit.kernels == pytest.approx(F.COMPILE_KERNELS) == pytest.approx(0.72615, abs=1e-5)
    assert fit.host_per_launch == pytest.approx(F.COMPILE_HOST_PER_LAUNCH, abs=1e-6)
    assert pytest.approx(1.06449, abs=1e-5) == F.COMPILE_HOST_PER_LAUNCH


def test_compile_on_its_pair_and_on_the_fp32_run(
    pair: tuple[Baseline, Baseline], fp32: Baseline
) -> None:
    eager, compiled = pair
    e, words = M.compile_(eager)
    # 566 fusible kernels, every 566/155-th merged: floor(566 x 155/566) = 154 (float: 154.99)
    assert int(e.merged.sum()) == 154 and "766 -> 612 per step (154 launches saved)" in words
    # host x 612/766 x 1.06449 = 0.85048
    assert e.host[0][1] == pytest.approx(612 / 766 * 1.064486, abs=1e-5)
    assert "forward/backward host x0.850" in words
    # in-sample (the constants are this pair's): x0.877 against the measured 10.465 /
    # 11.630 = x0.8998, -2.5 %
    p = predict(eager, ["compile"])
    assert compiled.step_ms / eager.step_ms == pytest.approx(0.8998, abs=1e-4)
    assert 100 * (p.step_ratio / 0.8998 - 1) == pytest.approx(-2.5, abs=0.05)
    assert "fitted on one H200 pair" in p.time_basis
    # out of sample: the fp32-naive run's fusible kernels, 24 + 139 + 75 + 87 + 2 + 24 (memcpy)
    # + 73 + 49 + 26 = 499: floor(499 x 155/566) = 136 merged; host x 634/770 x 1.06449
    e, words = M.compile_(fp32)
    assert int(e.merged.sum()) == 136 and "770 -> 634 per step" in words
    assert e.host[0][1] == pytest.approx(634 / 770 * 1.064486, abs=1e-5)


def test_checkpoint_recomputes_the_blocks_forward_span(fp32: Baseline) -> None:
    import tracekit.advise.regions as R

    r = R.forward_span_region(fp32.trace, fp32.shape.vocab_size)
    # by hand from the ops: the first outermost operator after the token embedding (the
    # wte lookup, vocabulary-sized) to the end of the last one before the LM head
    o = fp32.trace.ops
    top = o[(o["category"] == "cpu_op") & (o["depth"] <= 1) & (o["step"] >= 0)]
    top = top[~top["is_backward"]].sort_values("ts")
    vocab = top["input_dims"].astype(str).str.contains("50304")
    first_vocab, lm_head = top.index[vocab][:2]
    ts = top["ts"]
    blocks = top.loc[(ts > top.loc[first_vocab, "ts"]) & (ts < top.loc[lm_head, "ts"])]
    # blocks.iloc[0] is the position embedding (1024 rows, not vocabulary-sized): in the span
    assert blocks["name"].iloc[0] == "aten::embedding"
    start, end = int(blocks["ts"].iloc[0]), int((blocks["ts"] + blocks["dur"]).max())
    (iv,) = r.intervals.values()
    assert iv.tolist() == [[start, end]] and end - start == 7_890_644  # 7.89 ms traced
    # its kernels: 243, 6.46 ms (the blocks' GEMMs and elementwise; not the LM head's)
    assert int(r.kernels.sum()) == 243
    e, words = M.checkpoint(fp32)
    assert (e.kernel_mult[r.kernels] == 2.0).all() and e.host[0][1] == 2.0
    assert "7.89 ms of host span" in words and "6.46 ms GPU" in words
