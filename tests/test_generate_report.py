"""The report of a generate run, on the synthetic run of tests/gengen.py: exact figures of
the prefill/decode split, the decode steps' bandwidth against the roof (decode model,
kernels, counters), the decode GEMMs, the KV cache and the decode model; every output."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from rich.console import Console
from tensorboard.backend.event_processing import event_accumulator as ea

import tracekit.reports.markdown as markdown
import tracekit.reports.terminal as terminal
from tracekit.analyse import classify_trace
from tracekit.commands.report import report
from tracekit.parse import load
from tracekit.summary import summarize

from . import gengen as G

# the decode model's counts for the synthetic shapes (docstring of tests/gengen.py)
N_MATMUL = 52_810_752  # 2·(12C² + 13C) + 2C (ln_f) + V·C (the tied LM head)
W = 2 * N_MATMUL  # 105,621,504 bytes of bf16 weights read per step
KV_TOKEN = 2 * G.L * G.B * G.C * 2  # 49,152: one token of every sequence, K and V, bf16
CTX = [65, 66, 67, 68]  # prompt + d + 1
MODEL_BYTES = [W + KV_TOKEN * c + KV_TOKEN for c in CTX]  # 108,865,536 ... 109,012,992


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return G.write_run(tmp_path_factory.mktemp("gen") / "syn")


@pytest.fixture(scope="module")
def summary(run: Path) -> Any:
    t = load(run)
    return summarize(t, classify_trace(t, None, None))


def test_decode_steps_bandwidth_against_the_roof(summary: Any) -> None:
    g = summary.generate
    assert g is not None and g.steps == [0, 1, 2, 3] and g.basis == "unprofiled"
    ps = g.per_step
    assert ps["context"].tolist() == CTX
    assert ps["model_bytes"].tolist() == MODEL_BYTES == [108_865_536, 108_914_688,
                                                          108_963_840, 109_012_992]  # fmt: skip
    assert ps["tpot_ms"].tolist() == G.TPOT_MS
    assert ps["trace_step_ms"].tolist() == pytest.approx([0.1] * 4)
    assert ps["gpu_busy_ms"].tolist() == pytest.approx([G.DECODE_US / 1e3] * 4)
    bw = [b / (t / 1e3) for b, t in zip(MODEL_BYTES, G.TPOT_MS, strict=True)]
    assert ps["model_bw"].tolist() == pytest.approx(bw, rel=1e-12)
    assert ps["model_bw_pct"].tolist() == pytest.approx([100 * b / G.BW for b in bw])
    assert ps["model_bw_pct"][0] == pytest.approx(51.84073142857143)
    # the kernels' modelled bytes: the step summary's, over the same times
    kb = summary.step_summary.per_step["bytes_modelled"].to_numpy()
    assert ps["kernel_bytes"].tolist() == pytest.approx(kb.tolist())
    assert ps["kernel_bw_pct"].tolist() == pytest.approx(
        [100 * b / (t / 1e3) / G.BW for b, t in zip(kb, G.TPOT_MS, strict=True)]
    )
    assert ps["busy_bw_pct"].tolist() == pytest.approx([100 * b / 65e-6 / G.BW for b in kb])
    assert ps["measured_bw"].isna().all() and not g.measured
    # per step: GEMMs 2·(2 + 1 + 2 + 2) + 30 µs, attention 2 · 1 µs, the rest 19 µs
    assert ps["gemm_ms"].tolist() == pytest.approx([0.044] * 4)
    assert ps["attention_ms"].tolist() == pytest.approx([0.002] * 4)
    assert ps["other_ms"].tolist() == pytest.approx([0.019] * 4)
    assert ps["kv_filled_bytes"].tolist() == [KV_TOKEN * c for c in CTX]


def test_prefill_against_decode(summary: Any) -> None:
    g = summary.generate
    p, s = g.prefill, g.shares
    assert p.kernels == 29 and p.span_ms == pytest.approx(0.2)
    assert p.gpu_busy_ms == pytest.approx(G.PREFILL_US / 1e3)
    assert p.gemm_ms == pytest.approx(0.106) and p.attention_ms == pytest.approx(0.016)
    assert p.ttft_ms == G.TTFT_MS
    # an unprofiled generation: TTFT against the decode steps' summed medians
    assert s["decode_ms"] == pytest.approx(0.284)
    assert s["prefill_pct"] == pytest.approx(100 * 0.180 / 0.464)
    # the trace's GPU time: 156 µs against 4 × 65 µs
    assert s["prefill_gpu_pct"] == pytest.approx(37.5)
    assert s["decode_gpu_ms"] == pytest.approx(0.26)
    # the model's prefill: 8 × 64 tokens through every weight but the head's, the head once
    head = G.V * G.C
    flops = G.B * (2 * (N_MATMUL - head) * G.P + 2 * head + 4 * G.L * G.C * G.P * G.P)
    assert p.model_flops == flops and p.model_bytes == W + KV_TOKEN * G.P


def test_decode_gemms_are_matrix_vector_like(summary: Any) -> None:
    g = summary.generate
    t = g.gemms
    assert len(t) == 5 and set(t["m"]) == {8}
    head = t[t["name"] == "aten::mm"].iloc[0]
    assert (head["m"], head["n"], head["k"]) == (8, G.V, G.C)
    assert head["calls_per_step"] == 1 and head["ms_per_step"] == pytest.approx(0.030)
    c_attn = t[(t["n"] == 3 * G.C)].iloc[0]
    assert c_attn["calls_per_step"] == 2 and c_attn["mean_us"] == pytest.approx(2.0)
    assert (t["bound"] == "memory-bound").all() and (t["ridge"] == 200).all()
    assert (t["intensity"] < 8).all() and (t["intensity"] > 7.8).all()  # ~M FLOP/B in bf16
    tot = g.gemm
    assert tot["ms_per_step"] == pytest.approx(0.044) and tot["m"] == [8]
    assert tot["pipe"] == "tensor_bf16" and tot["ridge_point"] == 200
    assert tot["bound"] == "memory-bound"
    assert tot["attained_bw"] == pytest.approx(tot["bytes_per_step"] / 44e-6)


def test_decode_model_beside_the_measurement(summary: Any) -> None:
    g = summary.generate
    p = g.prediction
    assert g.pipe == "tensor_bf16" and g.peak == G.PEAK and g.bandwidth == G.BW
    assert p["ridge_point"] == 200 and p["gemm_ridge_batch"] == pytest.approx(200)
    F = W + 4 * G.L * G.C * 68  # FLOPs per token at context 68
    K = KV_TOKEN // G.B * 69  # KV bytes per token read and written there
    assert p["step_ridge_batch"] == pytest.approx(200 * W / (F - 200 * K))
    assert p["step_ridge_batch"] == pytest.approx(993.98670, abs=1e-5)
    # the roofline time of a step: its weights and KV at the bandwidth (all memory-bound)
    assert g.per_step["model_tpot_ms"].tolist() == pytest.approx(
        [1e3 * b / G.BW for b in MODEL_BYTES]
    )
    t = summary.step_summary.traffic  # the step summary's analytic traffic: a decode step's
    assert t.weights == W and t.kv_cache_write == KV_TOKEN
    assert t.kv_cache_read == KV_TOKEN * 66.5 and t.total == pytest.approx(np.mean(MODEL_BYTES))


def test_kv_cache_growth(summary: Any) -> None:
    kv = summary.kv
    assert kv is not None and kv.steps == [0, 1, 2, 3]
    assert kv.per_token_bytes == 2 * G.L * G.C * 2 == 6144 and kv.per_step_bytes == KV_TOKEN
    assert kv.prefill_bytes == KV_TOKEN * G.P == 3_145_728
    assert kv.filled_bytes == [KV_TOKEN * c for c in CTX]
    assert kv.allocated_bytes == kv.formula_bytes == G.KV_ALLOC == KV_TOKEN * 68
    # the allocator at each step's start: the floor (the prefill's activations are freed)
    assert kv.allocated_at_step == [float(G.FLOOR)] * 4
    assert kv.step_starts_ns == [
        (G.STEP0 + G.STEP_DUR * d) * 1000 for d in range(4)
    ]  # trace-relative ns


def test_verdict_and_header_are_the_decode_steps(summary: Any) -> None:
    v = summary.verdict
    assert v.verdict == "memory-bandwidth-bound"
    assert any(e.startswith("a decode step reads 109 MB by the decode model") for e in v.evidence)
    assert any("decode GEMMs (M = 8" in e and "batch 200" in e for e in v.evidence)
    assert "a larger batch" in v.lever and "int8/fp8 weights" in v.lever
    h = summary.header
    assert h.tokens_per_step == G.B  # one token per sequence per decode step
    assert h.config["prompt"] == G.P and h.config["new_tokens"] == G.N
    assert "seq" not in h.config


def test_summary_json_generate_block(summary: Any) -> None:
    doc = summary.summary
    g = doc["generate"]
    assert g["version"] == 1 and g["steps"] == [0, 1, 2, 3] and g["basis"] == "unprofiled"
    d = g["decode"]
    assert d["model_bytes_per_step"] == pytest.approx(np.mean(MODEL_BYTES))
    assert d["model_bytes_per_token"] == pytest.approx(np.mean(MODEL_BYTES) / G.B)
    assert d["context_first"] == 65 and d["context_last"] == 68
    assert d["model_bw_pct"] == pytest.approx(
        np.mean([100 * b / (t / 1e3) / G.BW for b, t in zip(MODEL_BYTES, G.TPOT_MS, strict=True)])
    )
    assert d["bandwidth_roof"] == G.BW and d["measured"] is False
    assert g["model"]["gemm_ridge_batch"] == pytest.approx(200)
    assert g["kv_cache"]["per_token_bytes"] == 6144
    assert g["kv_cache"]["filled_pct_at_last_step"] == pytest.approx(100.0)
    assert len(g["per_step"]) == 4 and len(g["gemm"]["table"]) == 5
    assert g["time"]["prefill_gpu_pct"] == pytest.approx(37.5)
    assert doc["step_summary"]["analytic_traffic"]["weights"] == W
    assert "models.decode" in doc["sources"]["analytic_traffic"]
    json.dumps(doc)  # JSON-safe


def test_counters_give_the_measured_bandwidth(run: Path) -> None:
    """Nsight Compute's DRAM bytes (here: set on the decode GEMMs by hand) become the
    measured bandwidth of each step; the rest of the step keeps its modelled bytes."""
    t = load(run)
    cls = classify_trace(t, None, None)
    k = cls.kernels
    gemm = ((k["class"] == "gemm") & (k["step"] >= 0)).to_numpy()
    k.loc[gemm, "bytes"] = k.loc[gemm, "bytes_model"] * 1.25
    k.loc[gemm, "source"] = "measured"
    sm = summarize(t, cls)
    g = sm.generate
    assert g.measured
    per = k[k["step"] == 0]
    meas = float(per["bytes"].sum())  # measured GEMMs + modelled rest
    assert g.per_step["measured_bytes"][0] == pytest.approx(meas)
    assert g.per_step["measured_bw_pct"][0] == pytest.approx(100 * meas / 70e-6 / G.BW)
    assert any("Nsight Compute's DRAM bytes" in e for e in sm.verdict.evidence)


def test_every_output_has_the_generate_section(run: Path, tmp_path: Path) -> None:
    res = report(run, tmp_path / "rep", tensorboard=tmp_path / "tb", plot_worker=False)
    names = {p.name for p in (tmp_path / "rep" / "plots").iterdir()}
    assert names == {"time_share.png", "roofline.png", "memory_timeline.png",
                     "decode_bandwidth.png"}  # fmt: skip
    page = (tmp_path / "rep" / "report.html").read_text()
    assert "Generate: prefill and decode" in page and "Decode GEMMs" in page
    assert page.count('src="data:image/png;base64,') == 4
    c = Console(width=80, record=True, color_system=None, force_terminal=False)
    terminal.render(res.summary, c)
    text = c.export_text()
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "Decode steps: time per step" in text and "8×50304×768" in text
    md = markdown.all_tables(res.summary)
    assert "generate" in md and "aten::addmm" in md["generate"]
    acc = ea.EventAccumulator(str(tmp_path / "tb" / "syn"), size_guidance={ea.SCALARS: 0})
    acc.Reload()
    sc = {t: {e.step: e.value for e in acc.Scalars(t)} for t in acc.Tags()["scalars"]}
    assert sc["generate/context"] == {0: 65, 1: 66, 2: 67, 3: 68}
    assert sc["generate/model_bw_pct"][0] == pytest.approx(51.84073, rel=1e-5)
    assert sc["generate/gemm_ridge_batch"][0] == pytest.approx(200)
    assert "report/generate" in acc.Tags()["tensors"]


def test_plot_data_of_the_decode_steps(summary: Any) -> None:
    import tracekit.reports.plots as plots

    d = plots.decode_bandwidth_data(summary)
    assert d["context"].tolist() == CTX and d["roof"] == G.BW
    m = plots.memory_timeline_data(summary)
    assert m["kv"]["filled"] == [float(KV_TOKEN * c) for c in CTX]
    assert m["kv"]["allocated"] == G.KV_ALLOC
    assert plots.names(summary)[-1] == "decode_bandwidth"


def test_a_training_report_has_no_generate_section() -> None:
    root = Path(__file__).resolve().parents[1]
    t = load(root / "fixtures" / "h200-gpt2s-b8-s128-bf16-sdpa")
    sm = summarize(t, classify_trace(t, None, None))
    assert sm.generate is None and sm.kv is None and sm.summary["generate"] is None
    assert "parameters" in sm.summary["step_summary"]["analytic_traffic"]
    assert isinstance(sm.step_summary.per_step, pd.DataFrame)


def test_a_host_bound_decode_step(tmp_path: Path) -> None:
    """The same trace with the host setting the pace: 0.5 ms per decode step for 65 µs of
    kernels (13 %). The verdict is the step verdict's launch/host-bound (GPU idle ≥ 20 %,
    as for training), the bandwidth over the step is named the host's beside the one over
    the GPU's busy time, and the lever is the decode step as a CUDA graph."""
    run = G.write_run(tmp_path / "host")
    m = json.loads((run / "manifest.json").read_text())
    slow = {"median": 0.5, "p10": 0.45, "p90": 0.6, "mean": 0.5, "n": 12}
    m["metrics"].update(step_time_ms=slow, tpot_ms=slow, tpot_ms_by_step=[0.5] * 4)
    (run / "manifest.json").write_text(json.dumps(m))
    t = load(run)
    sm = summarize(t, classify_trace(t, None, None))
    v = sm.verdict
    assert v.verdict == "launch/host-bound" and v.shares_pct["gpu_work"] == pytest.approx(13.0)
    g = sm.generate
    ps = g.per_step
    assert ps["gpu_busy_pct"].tolist() == pytest.approx([13.0] * 4)
    assert ps["model_busy_bw_pct"].tolist() == pytest.approx(
        [100 * b / 65e-6 / G.BW for b in MODEL_BYTES]
    )
    assert ps["model_bw_pct"].tolist() == pytest.approx(
        [100 * b / 0.5e-3 / G.BW for b in MODEL_BYTES]
    )
    host = next(e for e in v.evidence if e.startswith("the GPU works 13.0 % of the decode step"))
    assert "its time is the host's launch pace (0.500 ms for 0.065 ms of kernels)" in host
    assert "so the 7.3 % of the roof over it measures the host, not the memory" in host
    assert "while the GPU works the decode model's bytes reach 55.9 %" in host
    bw = next(e for e in v.evidence if e.startswith("a decode step reads"))
    assert "over the GPU's busy time (0.065 ms per step, 13.0 % of it) the same bytes move" in bw
    assert "CUDA graph, as gpt-fast and vLLM do" in v.lever and "0.500 → 0.065 ms" in v.lever
    d = sm.summary["generate"]["decode"]
    assert d["gpu_busy_ms"] == pytest.approx(0.065) and d["gpu_busy_pct"] == pytest.approx(13.0)
    assert d["model_busy_bw_pct"] == pytest.approx(
        np.mean([100 * b / 65e-6 / G.BW for b in MODEL_BYTES])
    )
