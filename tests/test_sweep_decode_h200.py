"""Golden tests of the generate sweep's analysis on real H200 sweeps (fixtures/
h200-gen-sweep-gpt2{s,m}: the tables of `bash benchmarks/gpu_generate_sweep.sh`, 17
configurations each, made in two calls). Their decode steps are launch/host-bound up to
batch 128 — the GPU busy 0.5-4 ms of a 3-13 ms step, ~14-22 µs of step per kernel, the
step time noisy —, so the findings must say so with the evidence, name the CUDA-graph
lever, read no KV-cache story from a host-made dip, fit the crossover on the GEMMs' GPU
times and the KV read on the GPU busy time.

Most checks run on the rows of the first call (:data:`FIRST_CALL`: batch 1-256, and the
contexts it reached before its budget stopped it), where the crossover is not reached and
no row past batch 8 is GPU-bound and steady; the last ones on the whole sweeps (batch to
1024: the crossover measured, the plateau of a GPU-bound decode)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from tracekit.sweep import read_table
from tracekit.sweep.decode import generate_findings, measured_crossover, prepared, walls_table
from tracekit.sweep.decode_limits import GPU, HOST

ROOT = Path(__file__).resolve().parents[1]
SMALL, MEDIUM = (
    ROOT / "fixtures" / "h200-gen-sweep-gpt2s",
    ROOT / "fixtures" / "h200-gen-sweep-gpt2m",
)


# the (batch, context) rows the first call measured before its budget stopped it
FIRST_CALL = {
    "s": lambda b, c: b <= 256 and c <= 1024,
    "m": lambda b, c: b <= 256 and c in (128, 1024),
}


@pytest.fixture(scope="module")
def full() -> dict[str, pd.DataFrame]:
    return {"s": read_table(SMALL), "m": read_table(MEDIUM)}


@pytest.fixture(scope="module")
def tables(full: dict[str, pd.DataFrame]) -> dict[str, pd.DataFrame]:
    def first(k: str) -> pd.DataFrame:
        t = full[k]
        keep = [FIRST_CALL[k](b, c) for b, c in zip(t["batch"], t["seq"], strict=True)]
        return t[keep].reset_index(drop=True)

    return {k: first(k) for k in full}


@pytest.fixture(scope="module")
def found(tables: dict[str, pd.DataFrame]) -> dict[str, list[str]]:
    return {k: generate_findings(t) for k, t in tables.items()}


def _batch_line(t: pd.DataFrame) -> pd.DataFrame:
    p = prepared(t)
    return p[(p["seq"] == 1024) & (p["status"] == "ok")].sort_values("batch")


def test_the_decode_step_is_host_bound_up_to_batch_128(tables: dict[str, Any]) -> None:
    for key, busy_256 in (("s", 92.956667), ("m", 95.309242)):
        ok = _batch_line(tables[key])
        assert ok["batch"].tolist() == [1, 2, 4, 8, 16, 32, 64, 128, 256]
        assert ok["decode_limit"].tolist() == [HOST] * 8 + [GPU]
        assert ok["decode_gpu_busy_pct"].iloc[-1] == pytest.approx(busy_256, abs=1e-6)
    s = _batch_line(tables["s"])
    # batch 8: the GPU busy 0.587 ms of a 6.389 ms step, p10-p90 4.75-7.15 ms
    b8 = s[s["batch"] == 8].iloc[0]
    assert b8["decode_host_idle_pct"] == pytest.approx(90.808256, abs=1e-6)
    assert b8["tpot_spread_pct"] == pytest.approx(37.533559, abs=1e-6)
    assert b8["decode_us_per_kernel"] == pytest.approx(30.459, abs=1e-3)  # 6.389 ms / 209.75
    # the decode model's bytes over the step and over the GPU's busy time, batch 1
    b1 = s.iloc[0]
    assert b1["decode_bw_util_pct"] == pytest.approx(2.209, abs=1e-3)
    assert b1["decode_busy_bw_util_pct"] == pytest.approx(13.330473, abs=1e-6)


def test_findings_name_the_host_with_the_evidence_and_the_lever(found: Any) -> None:
    s = found["s"][0]
    assert s.startswith("Along batch (context 1024, bf16, sdpa): ")
    assert (
        "At batch 1–128 the decode step is launch/host-bound: the GPU works 0.53–1.65 ms of a "
        "2.92–6.39 ms step (idle 44–91 %; host-bound from 20 % idle, the step verdict's "
        "threshold), 216 kernels per step: 14 µs of step per kernel, the host's launch pace. "
        "From batch 1 to 128 the time per step goes 3.17 → 2.94 ms (×0.93) while the GPU's "
        "work per step goes 0.53 → 1.65 ms (×3.13); it varies with the host: p10–p90 up to "
        "71 % of the median (batch 32: 0.97–3.05 ms), and batch 8 took 6.39 ms, 2.1× the "
        "median 3.06 ms of these rows, with the GPU busy 0.59 ms. At batch 256 the GPU is the "
        "bottleneck: busy 2.72 ms of 2.92 ms (93 %)."
    ) in s
    assert "CUDA graph (torch.compile(mode='reduce-overhead')" in s and "gpt-fast and vLLM" in s
    assert "at batch 1, 3.17 → 0.53 ms, up to ×6.0 tokens/s" in s
    m = found["m"][0]
    assert "At batch 1–128 the decode step is launch/host-bound: the GPU works 1.13–4.06 ms " in m
    assert "423 kernels per step: 22 µs of step per kernel" in m
    assert "At batch 256 the GPU is the bottleneck: busy 6.91 ms of 7.25 ms (95 %)" in m


def test_no_kv_cache_story_from_a_host_made_dip(found: Any) -> None:
    s, m = found["s"][0], found["m"][0]
    for text in (s, m):
        assert "batching does not amortise it" not in text
        assert "stops growing" not in text
    assert (
        "Tokens/s still grows ×278.1 from batch 1 to 256; the dip in tokens/s from batch 4 "
        "to 8 (-9 %) is the host's, not the GPU's: the GPU's work per step goes 0.55 → 0.59 "
        "ms while the time per step goes 2.92 → 6.39 ms."
    ) in s
    assert "the dip in tokens/s from batch 8 to 16 (-1 %) is the host's, not the GPU's" in m


def test_the_crossover_sentence(found: Any, tables: dict[str, Any]) -> None:
    assert (
        "The memory-to-compute crossover is not reached up to batch 256: the decode GEMMs' "
        "GPU time per step (the trace) grew 1.31× (0.258 ms → 0.339 ms) while the batch grew "
        "256×; at batch 256 they run at 24 % of the matmul roof (intensity 181 FLOP/B vs "
        "ridge 193); a line through it (a + c·B fit, R² 0.962) would double its flat part at "
        "batch ≈ 737 (extrapolated); the decode model puts it at batch 817, from the GEMMs' "
        "0.258 ms at batch 1: their weights stream at 958.4 GB/s (24 % of the copy ceiling), "
        "their FLOPs at the matmul roof; the roofline's ridge, weights at the copy ceiling, "
        "is batch 193."
    ) in found["s"][0]
    assert (
        "grew 1.25× (0.624 ms → 0.783 ms) while the batch grew 256×; at batch 256 they run at "
        "30 % of the matmul roof (intensity 194 FLOP/B vs ridge 192)"
    ) in found["m"][0]
    c = measured_crossover(_batch_line(tables["s"]))
    assert c is not None and c.column == "decode_gemm_ms" and not c.reached and c.batch is None
    assert c.growth_at_max == pytest.approx(1.311756, abs=1e-6)
    assert c.knee == pytest.approx(736.824, abs=1e-3) and c.r2 == pytest.approx(0.961939, abs=1e-6)
    assert c.roofline == pytest.approx(193.042577, abs=1e-6)
    # predicted from batch 1 alone: the rows of the first call (no batch above 256) give
    # the same figure as the whole sweep
    assert c.predicted == pytest.approx(817.407314, abs=1e-6)
    assert c.weight_stream_Bps == pytest.approx(958.380045e9, rel=1e-9)
    c = measured_crossover(_batch_line(tables["m"]))
    assert c is not None and c.predicted == pytest.approx(680.227978, abs=1e-6)


def test_bandwidth_over_step_and_over_gpu_busy_time(found: Any) -> None:
    assert (
        "The decode model's bytes per step reach 2–82 % of the copy ceiling over the time per "
        "step (at most 3.34 TB/s, batch 256) and 13–89 % over the GPU's busy time (the kernels "
        "while they run); by the kernels' bytes 83 % at batch 256; over a host-bound step the "
        "figure measures the host's launch pace, not the memory."
    ) in found["s"][0]
    assert "reach 2–90 % of the copy ceiling over the time per step" in found["m"][0]
    assert "and 18–94 % over the GPU's busy time" in found["m"][0]
    assert found["s"][-1].endswith(
        "; the GPU's busy time per step 1.12–7.50× it (closest at b256-s1024-bf16-sdpa, "
        "farthest at b1-s1024-bf16-sdpa)."
    )


def test_the_kv_read_is_fitted_on_the_gpu_busy_time(found: Any, tables: dict[str, Any]) -> None:
    ctx = next(x for x in found["s"] if x.startswith("Along context"))
    # the time per step (host-made) would give 3.992 ms per 1k tokens = 74 GB/s, 2 %
    assert (
        "each 1k tokens of context add 0.089 ms of GPU time per step (the trace) (R² 0.977): "
        "the extra KV cache is read at 3.32 TB/s = 82 % of the copy ceiling"
    ) in ctx
    assert "At context 128–1024 the decode step is launch/host-bound" in ctx
    ctx = next(x for x in found["m"] if x.startswith("Along context"))
    assert "the extra KV cache is read at 3.52 TB/s = 88 % of the copy ceiling" in ctx
    w = walls_table(tables["s"])
    seq = w[w["axis"] == "seq"].iloc[0]
    assert seq["kv_read_fitted"] == "decode_gpu_busy_ms" and seq["host_bound"] == "128,256,512,1024"
    assert w[w["axis"] == "batch"].iloc[0]["host_bound"] == "1,2,4,8,16,32,64,128"


def test_the_gpu_script_summary_reads(tmp_path: Path) -> None:
    """benchmarks/gpu_generate_sweep.py summary on the fixture: how much of the plan ran,
    the step's limit per row, a readable crossover line (no 'nan', no '-' batch)."""
    path = ROOT / "benchmarks" / "gpu_generate_sweep.py"
    spec = importlib.util.spec_from_file_location("gpu_generate_sweep", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    text = mod.summary(SMALL)
    assert text.startswith(
        "h200-gen-sweep-gpt2s: NVIDIA H200, 17 of 17 planned configurations ran, 17 ok; copy "
        "ceiling 4.06 TB/s, bf16 matmul 783 TFLOP/s (measured), ridge 193 FLOP/B"
    )
    assert "nan" not in text and "measured batch -" not in text
    assert "  context 1024, bf16, sdpa: the measured crossover from memory- to compute-bound" in (
        text
    )
    rows = {int(x.split()[0]): x.split() for x in text.splitlines()[3:14]}
    assert rows[8][1:6] == ["6.389", "4.75–7.15", "0.587", "91", "host"]
    assert rows[256][1:6] == ["2.922", "2.91–2.94", "2.716", "7", "GPU"]
    assert rows[1024][1:6] == ["9.595", "9.55–9.68", "9.375", "2", "GPU"]
    assert rows[1][7:9] == ["2.2", "13.3"]  # % copy over the step, over the GPU's busy time
    assert "KV read 3.08 TB/s (slope of decode_gpu_busy_ms along the context, R² 0.999)" in text


def test_the_whole_sweeps_measure_the_crossover(full: dict[str, pd.DataFrame]) -> None:
    """Batch 512 and 1024: the decode GEMMs' GPU time leaves its flat part between them,
    about 4x later than the roofline's ridge: below it they stream their weights at 24-30 %
    of the copy ceiling, past it they add FLOPs at 95-116 % of the matmul roof. The decode
    model, from the GEMMs' time at batch 1, predicts it within 5-9 %."""
    for key, knee, r2, growth, pred, roofline, flat_bw, slope in (
        ("s", 778.038710, 0.997442, 2.309457, 817.407314, 193.042577, 23.587761, 95.068099),
        ("m", 746.015820, 0.987502, 2.272364, 680.227978, 192.109365, 29.904712, 116.128584),
    ):
        c = measured_crossover(_batch_line(full[key]))
        assert c is not None and c.reached and c.between == (512, 1024)
        assert c.batch == pytest.approx(knee, abs=1e-6) and c.r2 == pytest.approx(r2, abs=1e-6)
        assert c.growth_at_max == pytest.approx(growth, abs=1e-6)
        # the decode model's prediction (weights at the rate the GEMMs stream them at batch
        # 1, FLOPs at the matmul roof) within 25 % of the measured crossover; the
        # roofline's (weights at the copy ceiling) 4x early
        assert c.predicted == pytest.approx(pred, abs=1e-6) and c.roofline is not None
        assert abs(c.predicted / c.batch - 1) < 0.25 and c.batch / c.roofline > 3.8
        assert c.roofline == pytest.approx(roofline, abs=1e-6)
        # why, exactly: measured / roofline = (ceiling / flat part's bandwidth) x (FLOP/s
        # added past it / matmul roof)
        assert c.flat_bw_pct == pytest.approx(flat_bw, abs=1e-6)
        assert c.slope_flops_pct == pytest.approx(slope, abs=1e-6)
        assert c.batch / c.roofline == pytest.approx(c.slope_flops_pct / c.flat_bw_pct, rel=1e-9)
    s = generate_findings(full["s"])
    assert (
        "The measured crossover from memory- to compute-bound: the decode GEMMs' GPU time per "
        "step (the trace), flat at 0.258 ms, doubles at batch ≈ 778 (between 512 and 1024; a + "
        "c·B fit, R² 0.997); the decode model puts it at batch 817 (measured / predicted 0.95), "
        "from the GEMMs' 0.258 ms at batch 1: their weights stream at 958.4 GB/s (24 % of the "
        "copy ceiling), their FLOPs at the matmul roof; the roofline's ridge, weights at the "
        "copy ceiling, is batch 193 (measured / roofline 4.03): below the crossover the GEMMs "
        "move their weights at 24 % of the copy ceiling (the fit's flat part), past it they "
        "add 745 TFLOP/s, 95 % of the matmul roof (4.03 = 4.24 × 0.95)."
    ) in s[0]
    m = generate_findings(full["m"])[0]
    assert "the decode model puts it at batch 680 (measured / predicted 1.10)" in m
    assert "past it they add 897 TFLOP/s, 116 % of the matmul roof (3.88 = 3.34 × 1.16)." in m
    # GPU-bound and steady from 256 on: the plateau is the KV cache's, legitimately
    assert (
        "Tokens/s stops growing from batch 512 to 1024 (+7 %): there the KV cache is 99 % of "
        "the bytes a step reads (decode model), and each sequence reads its own: batching "
        "does not amortise it"
    ) in s[0]
    assert "the extra KV cache is read at 3.08 TB/s = 76 % of the copy ceiling" in s[1]
    w = walls_table(full["m"])
    seq = w[w["axis"] == "seq"].iloc[0]
    assert seq["kv_read_bw_Bps"] == pytest.approx(3.616729e12, rel=1e-6)
