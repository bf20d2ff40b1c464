"""The generate sweep's analysis on a table built from the decode model: the measured
crossover (exact interpolation), the KV-cache plateau, the capacity walls (an OOM row and
an extrapolated one), the KV read bandwidth along the context, fits, findings, the HTML
section and its plots; and the tiny CPU generate sweep's trace columns."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from tracekit.classify.models.decode import DecodeModel, gemm_ridge_batch
from tracekit.classify.models.shape import ModelShape
from tracekit.sweep import DECODE_CSV, describe, finish
from tracekit.sweep.decode import (
    batch_findings,
    capacity_wall,
    crossover_words,
    generate_findings,
    generate_fits,
    kv_read_bandwidth,
    measured_crossover,
    prepared,
    roofline_findings,
    walls_table,
)

GPT2 = ModelShape(vocab_size=50304, n_layer=12, n_head=12, n_embd=768, block_size=8192)
BW, PEAK = 3.0e12, 600e12  # ridge 200 FLOP/B: the bf16 GEMMs' ridge batch is 200
KV_BW = 2.5e12  # the synthetic KV read's bandwidth
DEVICE = 80 * 2**30
OTHER = 300e6  # activations, workspaces
LAUNCH_MS = 0.05  # per step, outside the roofline


def _row(batch: int, ctx: int, new: int = 32) -> dict[str, Any]:
    dm = DecodeModel(GPT2, "bf16", batch, ctx - new, new)
    steps = dm.steps()
    W = steps[0].weight_bytes
    N = W // 2
    gemm_ms = 1e3 * (W / BW + 2 * N * batch / PEAK)  # the roofline's sum form
    kv_read = sum(s.kv_read_bytes for s in steps) / len(steps)
    tpot = gemm_ms + 1e3 * kv_read / KV_BW + LAUNCH_MS
    kv = dm.kv_cache_bytes()
    bpt = dm.mean_bytes_per_step()
    return {
        "key": f"b{batch}-s{ctx}-bf16-sdpa", "batch": batch, "seq": ctx, "dtype": "bf16",
        "attention": "sdpa", "gpus": 1, "tokens": batch * ctx, "workload": "generate",
        "status": "ok", "error": None, "tpot_ms": tpot, "step_time_ms": tpot,
        "tpot_p10_ms": 0.99 * tpot, "tpot_p90_ms": 1.01 * tpot,
        "decode_gpu_busy_ms": tpot - LAUNCH_MS, "kernels_per_step": 200.0,
        "time_per_token_ms": tpot / batch, "tokens_per_s": batch / tpot * 1e3,
        "decode_gemm_ms": gemm_ms, "decode_gemm_flops_util_pct":
        100 * 2 * N * batch / (gemm_ms / 1e3) / PEAK,
        "model_gemm_ridge_batch": gemm_ridge_batch(GPT2, dtype="bf16", peak_flops=PEAK,
                                                   bandwidth_Bps=BW),
        "model_kv_read_bytes_per_step": kv_read, "model_decode_bytes_per_step": bpt,
        "decode_model_bw_Bps": bpt / (tpot / 1e3), "decode_bw_util_pct":
        100 * bpt / (tpot / 1e3) / BW, "decode_kernel_bw_util_pct": math.nan,
        "model_tpot_ms": 1e3 * dm.predict(BW, PEAK)["tpot_s"],
        "weights_bytes": float(2 * (N + 8192 * 768)), "kv_cache_bytes": float(kv),
        "model_kv_bytes_per_token": 2 * 12 * 768 * 2.0, "peak_bytes": 2 * N + kv + OTHER,
        "device_total_bytes": float(DEVICE), "bandwidth_roof_Bps": BW,
        "matmul_roof_flops": PEAK, "model_weight_bytes": float(W),
        "oom_requested_bytes": math.nan,
    }  # fmt: skip


def _table(oom_context: int | None = 8192) -> pd.DataFrame:
    rows = [_row(b, 1024) for b in (1, 2, 4, 8, 16, 32, 64, 128, 256)]
    rows += [_row(8, c) for c in (128, 256, 512, 2048, 4096)]
    if oom_context:
        rows.append({**_row(8, oom_context), "status": "oom", "tpot_ms": math.nan,
                     "error": "CUDA out of memory. Tried to allocate 3.00 GiB",
                     "oom_requested_bytes": 3 * 2**30})  # fmt: skip
    return pd.DataFrame(rows)


def test_measured_crossover_fits_the_gemm_times() -> None:
    t = _table()
    ok = t[(t["seq"] == 1024)].sort_values("batch")
    c = measured_crossover(ok)
    assert c is not None and c.column == "decode_gemm_ms"
    g = ok["decode_gemm_ms"].to_numpy()  # t(B) = W/BW + 2N·B/PEAK: the roofline's sum form
    assert g[-1] / g[0] == pytest.approx((200 + 256) / 201)
    # the line a + c·B through them is exact: a the weight read, c the FLOPs per sequence
    W = DecodeModel(GPT2, "bf16", 1, 992, 32).steps()[0].weight_bytes  # 2 bytes a weight
    assert c.flat_ms == pytest.approx(1e3 * W / BW, rel=1e-9) and c.r2 == pytest.approx(1.0)
    assert c.slope_ms == pytest.approx(1e3 * W / PEAK, rel=1e-9)  # 2N FLOPs = W
    # its knee a/c (the growing part equals the flat one) is the ridge batch R·W/(2N)
    assert c.reached and c.batch == pytest.approx(200) and c.knee == pytest.approx(200)
    assert c.between == (128, 256) and c.predicted == pytest.approx(200)
    assert c.base_value == pytest.approx(g[0]) and c.growth_at_max == pytest.approx(456 / 201)
    # a sweep that stops below it measures none, but the fit still extrapolates it
    c = measured_crossover(ok[ok["batch"] <= 64])
    assert c is not None and c.batch is None and not c.reached and c.between is None
    assert c.knee == pytest.approx(200) and c.growth_at_max == pytest.approx(264 / 201)


def test_the_prediction_streams_the_weights_at_the_rate_measured_at_the_smallest_batch() -> None:
    """GEMMs that stream their weights at a quarter of the copy ceiling (a few µs per small
    kernel) stay flat 4x longer: the decode model, from their time at batch 1 alone,
    predicts the measured knee; the roofline's ridge (weights at the ceiling) stays at 200
    and the sentence says why, exactly."""
    ok = _table()[lambda t: t["seq"] == 1024].sort_values("batch").reset_index(drop=True)
    W = float(ok["model_weight_bytes"].iloc[0])
    flat = 1e3 * W / BW  # the roofline's weight read; the GEMMs take 4x that
    ok["decode_gemm_ms"] += 3 * flat
    ok = pd.concat([ok, pd.DataFrame([_row(b, 1024) for b in (512, 1024)])], ignore_index=True)
    ok.loc[9:, "decode_gemm_ms"] += 3 * flat
    c = measured_crossover(ok)
    assert c is not None and c.reached and c.batch == pytest.approx(800)
    assert c.predicted == pytest.approx(800) and c.roofline == pytest.approx(200)
    assert c.weight_stream_Bps == pytest.approx(BW / 4) and c.flat_bw_pct == pytest.approx(25)
    assert c.slope_flops == pytest.approx(PEAK) and c.slope_flops_pct == pytest.approx(100)
    # from the smallest batch only: the rows up to 64 predict the same
    assert measured_crossover(ok[ok["batch"] <= 64]).predicted == pytest.approx(800)  # type: ignore[union-attr]
    words = crossover_words(c, ok)
    assert "the decode model puts it at batch 800 (measured / predicted 1.00)" in words
    assert "their weights stream at 750.0 GB/s (25 % of the copy ceiling)" in words
    assert "the roofline's ridge, weights at the copy ceiling, is batch 200" in words
    assert "(4.00 = 4.00 × 1.00)" in words
    # a line that starts at or past the roofline's ridge has no flat part to predict from
    c = measured_crossover(ok[ok["batch"] >= 256])
    assert c is not None and c.predicted is None and c.roofline == pytest.approx(200)


def test_the_crossover_fit_is_robust_to_one_noisy_point() -> None:
    """One GEMM time 15 % off (a slower kernel choice at one batch) moves the fitted knee
    by under 10 %; a doubling of the first point's time (the former rule) is not even
    reached within the sweep."""
    ok = _table()[lambda t: t["seq"] == 1024].sort_values("batch").reset_index(drop=True)
    ok.loc[0, "decode_gemm_ms"] *= 1.15  # batch 1
    c = measured_crossover(ok)
    assert c is not None and c.reached and c.batch == pytest.approx(212.734, abs=1e-3)
    assert c.growth_at_max == pytest.approx(456 / 201 / 1.15) and c.growth_at_max < 2
    ok.loc[0, "decode_gemm_ms"] /= 1.15
    ok.loc[6, "decode_gemm_ms"] *= 1.15  # batch 64
    c = measured_crossover(ok)
    assert c is not None and c.reached and c.batch == pytest.approx(200, rel=0.1)


def test_without_gpu_gemm_times_the_step_time_is_used() -> None:
    ok = _table()[lambda t: t["seq"] == 1024].assign(decode_gemm_ms=math.nan)
    c = measured_crossover(ok)
    assert c is not None and c.column == "tpot_ms" and c.batch is not None
    assert c.batch < 196  # the KV read doubles the step earlier than the GEMMs


def test_capacity_walls_oom_and_extrapolated() -> None:
    t = _table()
    w = capacity_wall(t[t["batch"] == 8].sort_values("seq"), "seq")
    assert w is not None and w.oom_at == 8192 and w.last_ok == 4096
    assert w.oom_requested_bytes == 3 * 2**30
    per_ctx = 8 * 2 * 12 * 768 * 2  # the peak's slope: 8 sequences' KV per token of context
    assert w.slope_bytes == pytest.approx(per_ctx)
    w = capacity_wall(t[t["seq"] == 1024].sort_values("batch"), "batch")
    assert w is not None and w.oom_at is None
    per_seq = 1024 * 2 * 12 * 768 * 2  # one sequence's KV cache at context 1024
    assert w.slope_bytes == pytest.approx(per_seq) and w.r2 == pytest.approx(1.0)
    assert w.intercept_bytes == pytest.approx(247_378_944 + OTHER)  # bf16 weights + the rest
    assert w.wall == pytest.approx((DEVICE - w.intercept_bytes) / per_seq)
    assert w.wall == pytest.approx(2261.055, abs=1e-3)


def test_kv_read_bandwidth_along_the_context() -> None:
    t = _table()
    ok = t[(t["batch"] == 8) & (t["status"] == "ok")].sort_values("seq")
    bw, slope, r2, fitted = kv_read_bandwidth(ok)  # type: ignore[misc]
    assert fitted == "decode_gpu_busy_ms"  # the GPU's time, not the step's
    assert bw == pytest.approx(KV_BW, rel=1e-6) and r2 == pytest.approx(1.0)
    assert slope == pytest.approx(1e3 * 8 * 2 * 12 * 768 * 2 / KV_BW)


def test_findings_are_the_data() -> None:
    found = generate_findings(_table())
    batch = next(s for s in found if s.startswith("Along batch"))
    assert "the time per token falls" in batch
    assert "doubles at batch ≈ 200 (between 128 and 256; a + c·B fit, R² 1.000)" in batch
    assert "the decode model puts it at batch 200 (measured / predicted 1.00)" in batch
    # the 0.05 ms the host adds to each step is ≥ 20 % of the smallest steps: host-bound
    assert "At batch 1–4 the decode step is launch/host-bound: the GPU works 0.10–0.14 ms " in (
        batch
    )
    assert "At batch 8–256 the GPU is the bottleneck" in batch and "CUDA graph" in batch
    # at context 1024 the KV cache outgrows the weights: the plateau is the KV cache's
    assert "Tokens/s stops growing from batch" in batch and "the KV cache is" in batch
    assert "batching does not amortise it" in batch
    assert "would fill the device's 80.00 GiB at batch ≈" in batch
    ctx = next(s for s in found if s.startswith("Along context (batch 8"))
    assert "36.00 KiB per token of a sequence" in ctx and "288.00 KiB per token of context" in ctx
    assert "The capacity wall: context 8192 ran out of memory, asking for 3.00 GiB more" in ctx
    assert "the extra KV cache is read at 2.50 TB/s = 83 % of the copy ceiling" in ctx
    assert any(s.startswith("The measured time per step is") for s in found)
    # no numbers in the code: another table, other sentences
    other = generate_findings(_table(oom_context=None))
    assert not any("ran out of memory" in s for s in other)
    assert any("would fill the device's" in s and "at context ≈" in s for s in other)


def test_fits_walls_and_outputs(tmp_path: Path) -> None:
    t = _table()
    fits = generate_fits(t)
    lin = fits[(fits["fit"] == "linear") & (fits["quantity"] == "kv_cache_bytes")]
    seq = lin[lin["axis"] == "seq"].iloc[0]
    assert seq["slope"] == pytest.approx(8 * 2 * 12 * 768 * 2) and seq["r2"] == pytest.approx(1)
    tps = fits[(fits["fit"] == "power") & (fits["quantity"] == "tokens_per_s")]
    assert (tps["axis"] == "batch").any()
    walls = walls_table(t)
    row = walls[walls["axis"] == "batch"].iloc[0]
    assert row["crossover_batch"] == pytest.approx(200) and row["crossover_reached"]
    assert row["host_bound"] == "1,2,4"
    assert walls[walls["axis"] == "seq"].iloc[0]["capacity_oom_at"] == 8192
    outs = finish(t, tmp_path)
    assert (tmp_path / DECODE_CSV).is_file() and (tmp_path / "findings.txt").is_file()
    text = describe(t, outs)
    assert "ms/tok" in text and "GEMM ms" in text and "measured crossover" in text

    from tracekit.reports.sweep import render_section, write_tensorboard

    html = render_section(outs.analysis, tmp_path / "report", inline=True)
    assert "Crossover and capacity wall per line" in html and "OOM" not in html.split("<h3>")[0]
    for name in ("decode_time_vs_batch", "decode_utilisation_vs_batch", "kv_cache_vs_context",
                 "tpot_vs_context"):  # fmt: skip
        assert (tmp_path / "report" / f"sweep_{name}.png").is_file(), name
    assert html.count("data:image/png;base64,") == 4
    written = write_tensorboard(outs.analysis, tmp_path / "tb")
    assert any(p.name == "batch@1024-bf16-sdpa" for p in written)


def test_a_training_table_keeps_the_training_analysis(tmp_path: Path) -> None:
    t = _table().assign(workload="train")
    outs = finish(t, tmp_path)
    assert not (tmp_path / DECODE_CSV).exists()
    assert not any("crossover" in s for s in outs.findings)
    assert np.isfinite(outs.fits["exponent"]).all()


def test_a_generate_row_reads_its_trace(tmp_path: Path) -> None:
    """run_row on the synthetic H100 generate run (tests/gengen.py): the decode columns
    from its trace, with the report's figures."""

    from tracekit.sweep.plan import Point
    from tracekit.sweep.rows import run_row

    from . import gengen as G

    run = G.write_run(tmp_path / "syn")
    m = json.loads((run / "manifest.json").read_text())
    r = run_row(Point(G.B, G.P + G.N, "bf16", "sdpa"), run, m)
    assert r["decode_gemm_ms"] == pytest.approx(0.044)
    assert r["decode_attention_ms"] == pytest.approx(0.002)
    assert r["decode_gpu_busy_ms"] == pytest.approx(0.065)
    assert r["prefill_gpu_ms"] == pytest.approx(0.156)
    assert r["prefill_pct"] == pytest.approx(100 * 0.180 / 0.464)
    assert r["time_per_token_ms"] == pytest.approx(0.071 / 8)
    assert r["model_gemm_ridge_batch"] == pytest.approx(200)
    assert r["model_kv_bytes_per_token"] == 2 * G.L * G.C * 2
    assert r["decode_gemm_bw_util_pct"] == pytest.approx(
        100 * r["decode_gemm_bytes_per_step"] / 44e-6 / G.BW
    )
    assert 50 < r["decode_kernel_bw_util_pct"] < 55  # the report's 53.1, 53.1, 51.7, 51.7 %
    assert math.isnan(r["decode_measured_bw_util_pct"])
    # 65 µs of GPU work in a 71 µs step: GPU-bound; the model's bytes over those 65 µs
    assert r["decode_limit"] == "GPU-bound"
    assert r["decode_gpu_busy_pct"] == pytest.approx(100 * 0.065 / 0.071)
    assert r["decode_busy_bw_util_pct"] == pytest.approx(
        100 * r["model_decode_bytes_per_step"] / 65e-6 / G.BW
    )


def test_gpu_script_plan_and_summary(tmp_path: Path) -> None:
    """benchmarks/gpu_generate_sweep.py: the issue's two axes in 15 configurations per
    model (block size 8192), and its summary of a sweep folder."""
    import importlib.util

    from tracekit.sweep.runner import collect_command, write_table

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_generate_sweep.py"
    spec = importlib.util.spec_from_file_location("gpu_generate_sweep", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    plan = mod.plan("gpt2-medium")
    keys = [p.key for p in plan.points()]
    assert len(keys) == 17 and keys[0] == "b8-s1024-bf16-sdpa"
    assert "b1024-s1024-bf16-sdpa" in keys and "b8-s8192-bf16-sdpa" in keys
    cmd = collect_command(plan, plan.points()[-1], tmp_path, ceilings=False)
    assert cmd[cmd.index("--block-size") + 1] == "8192" and "--with-stack" not in cmd
    t = _table().assign(device_name="NVIDIA H100 80GB HBM3", matmul_roof_flops=PEAK,
                        exit_code=0.0, wall_s=1.0, run_dir=None)  # fmt: skip
    write_table(tmp_path, t.to_dict("records"))
    (tmp_path / "sweep.json").write_text(json.dumps(plan.to_dict()))
    text = mod.summary(tmp_path)
    assert "15 of 17 planned configurations ran, 14 ok; copy ceiling 3.00 TB/s, bf16 " in text
    assert "matmul 600 TFLOP/s (measured), ridge 200" in text
    assert "  context 1024, bf16, sdpa: the measured crossover from memory- to compute-bound" in (
        text
    )
    assert "doubles at batch ≈ 200 (between 128 and 256" in text
    assert "capacity wall: OOM at context 8192" in text
    assert "KV read 2.50 TB/s (slope of decode_gpu_busy_ms along the context, R² 1.000)" in text
    row = next(x for x in text.splitlines() if x.startswith("      1 "))  # batch 1: host-bound
    assert row.split()[4:6] == ["34", "host"]  # idle % (0.05 of 0.148 ms), limit
    row = next(x for x in text.splitlines() if x.startswith("    256 "))
    assert row.split()[4:6] == ["1", "GPU"]


def test_what_limits_a_row_uses_the_verdicts_threshold() -> None:
    from tracekit.summary.verdict import OUTSIDE_PCT
    from tracekit.sweep.decode_limits import GPU, HOST, HOST_IDLE_PCT, NOISE_PCT, limit_columns

    assert HOST_IDLE_PCT == OUTSIDE_PCT == 20.0 and NOISE_PCT == 10.0
    row = {"tpot_ms": 2.0, "decode_gpu_busy_ms": 1.6, "tpot_p10_ms": 1.9, "tpot_p90_ms": 2.1,
           "kernels_per_step": 200.0, "model_decode_bytes_per_step": 3.2e9,
           "bandwidth_roof_Bps": 4e12}  # fmt: skip
    r = limit_columns(row)  # idle exactly 20 %: host-bound, as the step verdict says
    assert r["decode_gpu_busy_pct"] == pytest.approx(80.0) and r["decode_limit"] == HOST
    assert r["tpot_spread_pct"] == pytest.approx(10.0) and r["decode_us_per_kernel"] == 10.0
    assert r["decode_busy_bw_Bps"] == pytest.approx(2e12)  # 3.2 GB in 1.6 ms
    assert r["decode_busy_bw_util_pct"] == pytest.approx(50.0)
    assert limit_columns({**row, "decode_gpu_busy_ms": 1.61})["decode_limit"] == GPU
    assert limit_columns({**row, "decode_gpu_busy_ms": math.nan})["decode_limit"] is None


def _host_set(t: pd.DataFrame, batches: tuple[int, ...], step_ms: dict[int, float]) -> None:
    """Make the rows at ``batches`` (context 1024) host-bound: their step takes
    ``step_ms`` whatever the GPU's work, with a wide spread."""
    for b in batches:
        i = t.index[(t["batch"] == b) & (t["seq"] == 1024)][0]
        tp = step_ms[b]
        t.loc[i, ["tpot_ms", "tpot_p10_ms", "tpot_p90_ms"]] = [tp, 0.6 * tp, 1.2 * tp]
        t.loc[i, "tokens_per_s"] = b / tp * 1e3
        t.loc[i, "time_per_token_ms"] = tp / b
        t.loc[i, "decode_bw_util_pct"] = 100 * t.loc[i, "model_decode_bytes_per_step"] / (
            tp / 1e3) / BW  # fmt: skip


def test_a_host_set_step_is_not_read_as_the_kv_cache() -> None:
    """Rows whose step the host sets (GPU busy far below it): the tokens/s dip between
    them is the host's, with the evidence, not a KV-cache plateau; the bandwidth over the
    step is set beside the one over the GPU's busy time."""
    t = _table()
    _host_set(t, (32, 64, 128), {32: 4.0, 64: 8.0, 128: 8.0})
    batch = next(s for s in generate_findings(t) if s.startswith("Along batch"))
    assert "At batch 1–4 and 32–128 the decode step is launch/host-bound" in batch
    assert "At batch 8, 16 and 256 the GPU is the bottleneck" in batch
    assert "batching does not amortise it" not in batch
    assert (
        "the dip in tokens/s from batch 16 to 32 (-81 %) is the host's, not the GPU's: the "
        "GPU's work per step goes 0.33 → 0.57 ms while the time per step goes 0.38 → 4.00 ms"
    ) in batch
    assert "it varies with the host: p10–p90 up to 60 % of the median (batch 32: 2.40–4.80" in (
        batch
    )
    assert "batch 64 took 8.00 ms, 3.8× the median 2.10 ms of these rows" in batch
    assert "over a host-bound step the figure measures the host's launch pace" in batch
    # the GEMMs' GPU times are untouched: the crossover is the same
    assert "doubles at batch ≈ 200 (between 128 and 256" in batch


def test_a_plateau_within_the_noise_is_not_attributed() -> None:
    t = _table()
    for b in (64, 128):
        i = t.index[(t["batch"] == b) & (t["seq"] == 1024)][0]
        tp = t.loc[i, "tpot_ms"]
        t.loc[i, ["tpot_p10_ms", "tpot_p90_ms"]] = [0.85 * tp, 1.15 * tp]
    batch = next(s for s in generate_findings(t) if s.startswith("Along batch"))
    assert "batching does not amortise it" not in batch.split("the dip")[0]
    assert (
        "the dip in tokens/s from batch 64 to 128 (+6 %) is within the noise: the p10–p90 "
        "spread of the time per step is 30 % at batch 64 and 30 % at 128 (steady below 10 %)"
    ) in batch


def test_a_cpu_generate_sweep_tells_one_story(tmp_path: Path) -> None:
    """A CPU generate sweep of a tiny model (one context, two batches, one row failed):
    memory in the unit its figures need, no nan cell, one configuration's figure not a
    range with equal ends, a batch that did not gain not said to grow, and one sentence
    per failure reason."""
    from tracekit.sweep import GENERATE_COLUMNS, _column_table
    from tracekit.sweep.findings import failed_findings

    tiny = 2**20 * 1.5  # a tiny model's 1.5 MiB peak: "0.00 GiB" before
    cpu = {"decode_gemm_ms": math.nan, "decode_gpu_busy_ms": math.nan,
           "peak_bytes": tiny, "kv_cache_bytes": tiny / 5}  # fmt: skip
    rows = [{**_row(2, 128), **cpu}, {**_row(8, 128), **cpu}]
    tps = 0.9 * rows[0]["tokens_per_s"]  # batch 8 no faster than batch 2 (a loaded CPU)
    tpot = 8 / tps * 1e3
    rows[1].update(tokens_per_s=tps, time_per_token_ms=tpot / 8, tpot_ms=tpot,
                   step_time_ms=tpot)  # fmt: skip
    for r in rows:  # its steps' times spread (p10-p90 > 10 %): the dip is within the noise
        r.update(tpot_p10_ms=0.5 * r["tpot_ms"], tpot_p90_ms=2 * r["tpot_ms"])
    t = prepared(pd.DataFrame(rows))
    header, row = _column_table(t, GENERATE_COLUMNS)
    assert "peak MiB" in header and "KV MiB" in header and "GiB" not in header
    line = row(t.iloc[0])
    assert "nan" not in line and "    1.50 " in line and "    0.30 " in line
    one = roofline_findings(t.iloc[:1])
    assert one[0].startswith("The measured time per step is ") and "–" not in one[0]
    assert one[0].endswith("at b2-s128-bf16-sdpa.")
    text = " ".join(batch_findings(t))
    assert "Tokens/s does not grow from batch 2 to 8 (×0.90)" in text and "still grows" not in text
    err = "--prompt 960 + --new-tokens 64 = 1024 exceeds the context of preset 'tiny'"
    failed = pd.DataFrame([{"key": f"b{b}-s1024", "error": err} for b in (1, 2, 4)])
    (sentence,) = failed_findings(failed)
    assert sentence == f"3 configuration(s) failed: b1-s1024, b2-s1024, b4-s1024 ({err})."


def test_default_contexts_fit_the_models_block() -> None:
    from tracekit.sweep.plan import fit_contexts

    default = [128, 256, 512, 1024]
    assert fit_contexts(None, default, None, 1024, 128) == ([128], 128)  # tiny: 128 tokens
    assert fit_contexts(None, default, None, 1024, 1024) == (default, 1024)
    assert fit_contexts(None, [64, 128, 256], None, 128, 100) == ([64], 64)
    assert fit_contexts(None, [256], None, 128, 100) == ([100], 100)  # none fits: the block
    assert fit_contexts([512], default, 256, 1024, 128) == ([512], 256)  # given: as given
