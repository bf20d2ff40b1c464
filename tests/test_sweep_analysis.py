"""Fits, findings, row helpers and rendering of the sweep on synthetic tables."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tracekit.errors import UsageError
from tracekit.sweep.analysis import analyse_sweep
from tracekit.sweep.findings import findings, pair_savings, plateau_kind
from tracekit.sweep.fit import fit_table, largest_fitting, power_fit, quadratic_fit
from tracekit.sweep.plan import SweepPlan
from tracekit.sweep.rows import classify_frames_to_columns, gpu_idle_pct, oom_requested_bytes

GIB = 2**30


def test_power_fit_recovers_exponent() -> None:
    x = np.array([4, 8, 16, 32])
    f = power_fit(x, 3.0 * x**1.5)
    assert f.exponent == pytest.approx(1.5) and f.prefactor == pytest.approx(3.0)
    assert f.r2 == pytest.approx(1.0)
    noisy = power_fit(x, 3.0 * x**1.5 * np.array([1.3, 0.7, 1.2, 0.8]))
    assert noisy.r2 < 0.99
    with pytest.raises(UsageError):
        power_fit([4, 4], [1, 2])


def test_quadratic_fit_separates_t2() -> None:
    t = np.array([64, 128, 256, 512, 1024], dtype=float)
    q = quadratic_fit(t, 5e6 + 2e4 * t + 30.0 * t**2)
    assert (q.a, q.b, q.c) == pytest.approx((5e6, 2e4, 30.0), rel=1e-6)
    assert q.t2_share_at_max == pytest.approx(30 * 1024**2 / (5e6 + 2e4 * 1024 + 30 * 1024**2))
    lin = quadratic_fit(t, 5e6 + 2e4 * t)
    assert abs(lin.c) * 1024**2 < 1e-6 * (5e6 + 2e4 * 1024)
    with pytest.raises(UsageError):
        quadratic_fit([1, 2], [1, 2])


def _row(batch: int, seq: int, dtype: str = "fp32", attention: str = "naive", **kw: object) -> dict:  # type: ignore[type-arg]
    n = 124e6
    act = batch * seq * (2e5 + (1.2e3 * seq if attention == "naive" else 0))
    act *= 0.6 if dtype == "bf16" else 1.0
    peak = 12 * n + act
    r = {"key": f"b{batch}-s{seq}-{dtype}-{attention}", "batch": batch, "seq": seq,
         "dtype": dtype, "attention": attention, "tokens": batch * seq, "status": "ok",
         "error": None, "peak_bytes": peak, "dynamic_peak_bytes": act,
         "mem_activations_bytes": act * 0.9, "n_params": n, "device_total_bytes": 80 * GIB,
         "tokens_per_s": 1e4 * batch, "step_time_ms": 10.0, "gpu_idle_pct": 5.0,
         "model_flops_util_pct": 30.0, "bw_util_pct": math.nan, "oom_requested_bytes": math.nan,
         "model_error_pct": 2.0}  # fmt: skip
    r.update(kw)
    return r


def test_fit_table_shows_t2_for_naive_not_sdpa() -> None:
    rows = [_row(8, t, attention=a) for a in ("naive", "sdpa") for t in (64, 128, 256, 512, 1024)]
    rows += [_row(b, 128) for b in (4, 16, 32)]
    fits = fit_table(pd.DataFrame(rows))
    dyn = fits[(fits["quantity"] == "dynamic_peak_bytes") & (fits["axis"] == "seq")]
    by = {r["attention"]: r for _, r in dyn.iterrows()}
    assert bool(by["naive"]["t2_term"]) and not bool(by["sdpa"]["t2_term"])
    assert by["sdpa"]["exponent"] == pytest.approx(1.0, abs=1e-6)
    b = fits[(fits["quantity"] == "dynamic_peak_bytes") & (fits["axis"] == "batch")].iloc[0]
    assert b["exponent"] == pytest.approx(1.0) and b["r2"] == pytest.approx(1.0)


def test_findings_capacity_wall_from_oom() -> None:
    rows = [_row(b, 128) for b in (8, 16, 32)]
    rows.append(_row(64, 128, status="oom", error="OutOfMemoryError: CUDA out of memory. "
                     "Tried to allocate 3.00 GiB.", oom_requested_bytes=3 * GIB,
                     peak_bytes=math.nan, tokens_per_s=math.nan))  # fmt: skip
    text = " ".join(findings(pd.DataFrame(rows)))
    assert "capacity wall: batch 64 ran out of memory, asking for 3.00 GiB" in text
    assert "after batch 32 peaked at" in text
    big = largest_fitting(pd.DataFrame(rows))
    assert big.iloc[0]["largest_ok"] == "b32-s128-fp32-naive"
    assert big.iloc[0]["smallest_oom"] == "b64-s128-fp32-naive"


def test_findings_plateau_kind_follows_the_data() -> None:
    def table(**at32: object) -> pd.DataFrame:
        rows = [_row(8, 128), _row(16, 128), _row(32, 128, tokens_per_s=1.65e5, **at32)]
        return pd.DataFrame(rows)

    bw = " ".join(findings(table(bw_util_pct=85.0)))
    assert "throughput plateau (bandwidth-bound)" in bw and "from batch 16 to 32" in bw
    assert "85 % of the measured copy roof" in bw
    launch = " ".join(findings(table(gpu_idle_pct=45.0)))
    assert "throughput plateau (launch-bound)" in launch and "idles 45 %" in launch
    grows = " ".join(findings(pd.DataFrame([_row(b, 128) for b in (8, 16, 32)])))
    assert "no wall up to batch 32" in grows and "+300 %" in grows
    assert plateau_kind(pd.Series({"model_flops_util_pct": 75.0}))[0] == "compute-bound"


def test_findings_savings_are_measured() -> None:
    rows = [_row(8, 128), _row(8, 128, dtype="bf16", step_time_ms=5.0),
            _row(8, 128, attention="sdpa", step_time_ms=8.0)]  # fmt: skip
    t = pd.DataFrame(rows)
    s = pair_savings(t, "dtype", "bf16", "fp32")[0]
    assert s["speedup"] == pytest.approx(2.0)
    assert s["memory_saving_pct"] == pytest.approx(100 * (1 - t.peak_bytes[1] / t.peak_bytes[0]))
    text = " ".join(findings(t))
    assert f"saves {s['memory_saving_pct']:.1f} % of peak memory" in text
    assert "runs 2.00x as fast" in text and "runs 1.25x as fast" in text
    assert "12 bytes per parameter" in text


def test_row_helpers() -> None:
    assert oom_requested_bytes("CUDA out of memory. Tried to allocate 1.50 GiB. GPU 0") == 1.5 * GIB
    assert oom_requested_bytes("Tried to allocate 20.00 MiB") == 20 * 2**20
    assert math.isnan(oom_requested_bytes("boom"))
    steps = pd.DataFrame({"gpu_dur": [100, 100], "gpu_busy": [90, 70]})
    assert gpu_idle_pct(steps) == pytest.approx(20.0)
    assert math.isnan(gpu_idle_pct(pd.DataFrame({"gpu_dur": [None], "gpu_busy": [None]})))
    classes = pd.DataFrame({"class": ["gemm", "softmax"], "time_share_pct": [70.0, 30.0]})
    steps = pd.DataFrame({"bw_util_pct": [40.0, 60.0], "memory_bound_time_pct": [20.0, 30.0],
                          "achieved_bw": [1e12, 3e12]})  # fmt: skip
    cols = classify_frames_to_columns(classes, steps)
    assert cols["time_share_gemm_pct"] == 70.0 and cols["time_share_softmax_pct"] == 30.0
    assert cols["bw_util_pct"] == 50.0 and cols["achieved_bw_Bps"] == 2e12
    assert math.isnan(cols["time_share_attention_pct"]) and math.isnan(cols["achieved_flops"])


def test_plan_axes_and_grid() -> None:
    p = SweepPlan(batches=(4, 8), seqs=(64, 128), dtypes=("fp32", "bf16"),
                  attentions=("naive", "sdpa"))  # fmt: skip
    keys = [x.key for x in p.points()]
    assert keys[0] == "b8-s128-fp32-naive" and len(keys) == len(set(keys))
    assert set(keys) == {"b8-s128-fp32-naive", "b4-s128-fp32-naive", "b8-s64-fp32-naive",
                         "b8-s64-fp32-sdpa", "b8-s128-fp32-sdpa", "b8-s128-bf16-naive"}  # fmt: skip
    assert len(SweepPlan(batches=(4, 8), seqs=(64, 128), grid=True).points()) == 16
    with pytest.raises(UsageError):
        SweepPlan(dtypes=("fp64",))


def test_render_section_and_tensorboard(tmp_path: Path) -> None:
    from tracekit.reports.sweep import render_section, write_tensorboard

    rows = [_row(b, 128) for b in (4, 8, 16)] + [_row(8, t) for t in (64, 256)]
    for r in rows:
        for c in ("parameters", "gradients", "optimizer_state", "activations", "other"):
            r[f"mem_{c}_bytes"] = r["peak_bytes"] / 5
        r["model_peak_bytes"] = r["peak_bytes"] * 1.02
    t = pd.DataFrame(rows)
    html = render_section(analyse_sweep(t), tmp_path)
    assert "<section class='sweep'>" in html and "Findings" in html
    for name in ("memory_vs_batch", "memory_vs_seq", "throughput_vs_batch", "utilisation_vs_batch"):
        assert (tmp_path / f"sweep_{name}.png").stat().st_size > 1000
    assert "time share vs seq" in html  # listed as not drawn: no classify columns
    runs = write_tensorboard(analyse_sweep(t), tmp_path / "tb")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(tmp_path / "tb" / "batch@128-fp32-naive"))
    acc.Reload()
    ev = acc.Scalars("sweep/tokens_per_s")
    assert [e.step for e in ev] == [4, 8, 16] and ev[1].value == pytest.approx(8e4)
    assert len(runs) == 5 + 2


def test_progress_display_on_a_terminal() -> None:
    from tracekit.sweep.runner import _Progress

    p = _Progress(2, quiet=False)
    p.enabled = True  # as on a terminal
    with p.running(done=1):
        p.start("b8-s128-fp32-naive")
        p.finished("b8-s128-fp32-naive", "ok")
        assert p._p.tasks[0].completed == 2
    assert not _Progress(2, quiet=True).enabled


def test_a_sweep_whose_rows_all_failed_still_reports(tmp_path: Path) -> None:
    from tracekit.reports.sweep import render_section
    from tracekit.sweep.plan import Point
    from tracekit.sweep.rows import base_row

    rows = []
    for b in (4, 8):
        r = base_row(Point(b, 128, "fp32", "naive"))
        r.update(status="oom" if b == 8 else "error", error="boom")
        rows.append(r)
    t = pd.DataFrame(rows)
    assert findings(t) == [
        "Along batch (seq 128, fp32, naive): first the capacity wall: batch 8 ran out of memory.",
        "1 configuration(s) failed: b4-s128-fp32-naive (boom).",
    ]
    assert len(fit_table(t)) == 0
    assert "<section" in render_section(analyse_sweep(t), tmp_path)


def test_plateau_without_bandwidth_names_no_placeholder() -> None:
    """Issue 35: a row without byte counts said "bandwidth utilisation unknown until the
    classify stage fills it"; a figure that is absent is left out."""
    row = pd.Series({"gpu_idle_pct": 5.0, "model_flops_util_pct": 10.0})
    kind, why = plateau_kind(row)
    assert kind == "undetermined" and why == "GPU idle 5 %, model FLOP rate 10 % of the matmul roof"
    assert plateau_kind(pd.Series(dtype=float)) == ("undetermined", "no utilisation data")


def test_timing_caveat_below_three_timed_steps() -> None:
    """Issue 35: trends from 1-2 timed steps each are said to be indicative; from 3 or
    more, or a table without the count (an older sweep), nothing is added."""
    from tracekit.sweep.findings import timing_caveat

    t = pd.DataFrame({"status": ["ok", "ok", "error"], "timed_steps": [2.0, 5.0, math.nan]})
    assert timing_caveat(t) == [
        "2 timed steps per configuration: step times, tokens/s and their trends and fits "
        "are indicative only (memory figures do not depend on it)."
    ]
    assert timing_caveat(t.assign(timed_steps=3.0)) == []
    assert timing_caveat(t.drop(columns="timed_steps")) == []
