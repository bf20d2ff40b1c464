"""The analytic decode model: exact byte and FLOP counts for GPT-2 shapes, the ridge
batches, and agreement with the collector's own formulas."""

from __future__ import annotations

from fractions import Fraction

import pytest

from tracekit.classify.models.decode import (
    DecodeModel,
    decode_step,
    gemm_ridge_batch,
    matmul_params,
    prefill,
    ridge_point,
    step_ridge_batch,
    weight_bytes,
)
from tracekit.classify.models.shape import ModelShape
from tracekit.errors import UsageError

GPT2_SMALL = {"vocab_size": 50304, "n_layer": 12, "n_head": 12, "n_embd": 768,
              "block_size": 1024}  # fmt: skip
N_SMALL = 124_475_904 - 1024 * 768  # all parameters but wpe: 123,689,472


def test_weights_read_per_step() -> None:
    assert matmul_params(GPT2_SMALL) == N_SMALL == 123_689_472
    assert weight_bytes(GPT2_SMALL, "bf16") == 247_378_944
    assert weight_bytes(GPT2_SMALL, "fp32") == 494_757_888
    untied = {**GPT2_SMALL, "tie_embeddings": False}
    # an untied wte is a lookup (no matmul); the separate lm_head adds the same V·C
    assert matmul_params(untied) == N_SMALL


def test_decode_step_bytes_and_flops() -> None:
    s = decode_step(GPT2_SMALL, batch=8, context=1024, dtype="bf16")
    assert s.weight_bytes == 247_378_944
    assert s.kv_read_bytes == 2 * 12 * 8 * 1024 * 768 * 2 == 301_989_888
    assert s.kv_write_bytes == 2 * 12 * 8 * 768 * 2 == 294_912
    assert s.gemm_flops == 2 * N_SMALL * 8 == 1_979_031_552
    assert s.attention_flops == 4 * 12 * 768 * 1024 * 8 == 301_989_888
    assert s.bytes == 549_663_744
    assert s.flops_per_token == 2 * N_SMALL + 4 * 12 * 768 * 1024
    assert s.intensity == pytest.approx(2_281_021_440 / 549_663_744)
    # at batch 1 the weights dominate: ~1 FLOP per byte in bf16
    one = decode_step(GPT2_SMALL, batch=1, context=128, dtype="bf16")
    assert one.weight_bytes / one.bytes > 0.98 and 0.9 < one.intensity < 1.1


def test_roofline_time_sums_the_parts_at_their_own_bounds() -> None:
    s = decode_step(GPT2_SMALL, batch=8, context=1024, dtype="bf16")
    bw, peak = 4e12, 800e12
    expect = max(247_378_944 / bw, 1_979_031_552 / peak) + max(
        (301_989_888 + 294_912) / bw, 301_989_888 / peak
    )
    assert s.time_s(bw, peak) == pytest.approx(expect, rel=1e-12)
    assert s.bound(bw, peak) == "memory"
    big = decode_step(GPT2_SMALL, batch=4096, context=1, dtype="bf16")
    assert big.bound(bw, peak) == "compute"


def test_ridge_batches() -> None:
    # bf16: W = 2 bytes per matmul weight, so the GEMMs reach the ridge at B = R
    assert ridge_point(800e12, 4e12) == 200
    assert gemm_ridge_batch(GPT2_SMALL, dtype="bf16", peak_flops=800e12,
                            bandwidth_Bps=4e12) == pytest.approx(200)  # fmt: skip
    assert gemm_ridge_batch(GPT2_SMALL, dtype="fp32", peak_flops=800e12,
                            bandwidth_Bps=4e12) == pytest.approx(400)  # fmt: skip
    # context 1024: 2 FLOP/byte of KV can never reach R = 200, whatever the batch
    assert step_ridge_batch(GPT2_SMALL, context=1024, dtype="bf16", peak_flops=800e12,
                            bandwidth_Bps=4e12) is None  # fmt: skip
    # context 16, R = 5: B = R·W / (F - R·K), F and K per token
    F = 2 * N_SMALL + 4 * 12 * 768 * 16
    K = 2 * 12 * 17 * 768 * 2
    expect = Fraction(5 * 247_378_944, F - 5 * K)
    got = step_ridge_batch(GPT2_SMALL, context=16, dtype="bf16", peak_flops=20e12,
                           bandwidth_Bps=4e12)  # fmt: skip
    assert got == pytest.approx(float(expect), rel=1e-12)
    # at that batch the whole step sits on the ridge
    at = decode_step(GPT2_SMALL, batch=1, context=16, dtype="bf16")
    assert got is not None
    assert (got * at.flops) / (at.weight_bytes + got * (at.kv_read_bytes + at.kv_write_bytes)) \
        == pytest.approx(5)  # fmt: skip


def test_prefill_counts_the_last_position_head_only() -> None:
    p = prefill(GPT2_SMALL, batch=2, prompt=512, dtype="bf16")
    head = 50304 * 768
    assert p.flops == 2 * (2 * (N_SMALL - head) * 512 + 2 * head + 4 * 12 * 768 * 512 * 512)
    assert p.bytes == 247_378_944 + 2 * 12 * 2 * 512 * 768 * 2


def _manifest(**generate: int) -> dict[str, object]:
    g = {"prompt": 512, "new_tokens": 64, "batch": 8, **generate}
    return {"config": {"workload": "generate", "dtype": "bf16", "model": GPT2_SMALL},
            "generate": g}  # fmt: skip


def test_decode_model_from_a_manifest() -> None:
    dm = DecodeModel.from_manifest(_manifest())
    assert dm.shape == ModelShape.from_mapping(GPT2_SMALL)
    assert dm.kv_cache_bytes() == 2 * 12 * 8 * 576 * 768 * 2
    assert dm.step(0).context == 513 and dm.step(63).context == 576
    steps = dm.steps()
    assert len(steps) == 64
    kv_mean = sum(2 * 12 * 8 * (513 + d) * 768 * 2 for d in range(64)) / 64
    assert dm.mean_bytes_per_step() == pytest.approx(247_378_944 + kv_mean + 294_912)
    pred = dm.predict(4e12, 800e12)
    assert pred["gemm_ridge_batch"] == pytest.approx(200)
    assert pred["step_ridge_batch"] is None and pred["last_step_bound"] == "memory"
    assert pred["tokens_per_s"] == pytest.approx(8 / pred["tpot_s"])
    with pytest.raises(UsageError, match="decode step 64"):
        dm.step(64)
    with pytest.raises(UsageError, match="not a generate run"):
        DecodeModel.from_manifest({"config": {"workload": "train"}})


def test_agrees_with_the_collectors_formulas() -> None:
    torch = pytest.importorskip("torch")
    del torch
    from tracekit.collectors.gpt import PRESETS, decode_flops_per_token
    from tracekit.collectors.gpt import matmul_params as collector_matmul

    for name in ("tiny", "gpt2-small", "gpt2-medium"):
        cfg = PRESETS[name]
        model = cfg.to_dict()
        assert matmul_params(model) == collector_matmul(cfg)
        s = decode_step(model, batch=3, context=77, dtype="fp32")
        assert s.flops_per_token == decode_flops_per_token(cfg, 77)
