"""tracekit advise's predictions on the fixtures: every lever's time and memory model with
exact figures, the regions they act on, the what-if plumbing, the lever catalogue, the
greedy combination, the ranked table and the command's errors (no collect runs here;
tests/test_advise_run.py measures on CPU)."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import tracekit.advise.levers as L
import tracekit.advise.measure as MS
import tracekit.advise.regions as R
import tracekit.advise.table as TB
import tracekit.summary.critical_path as CP
from tracekit.advise import limits as LIM
from tracekit.advise.baseline import ASSUMED_HOST_SPEEDUP, Baseline, analyse, probed_host
from tracekit.advise.effects import Effect, scenario
from tracekit.advise.predict import Prediction, predict
from tracekit.classify.models.memory import StepOptions, estimate
from tracekit.manifest import Metrics

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "fixtures"
MANIFEST = FIX / "h200-gpt2s-b8-s128-fp32-naive" / "manifest.json"
GPT2S = json.loads(MANIFEST.read_text())["config"]["model"]


@pytest.fixture(scope="module")
def base() -> dict[str, Baseline]:
    names = ("h200-gpt2s-b8-s128-bf16-sdpa", "h200-gpt2s-b8-s128-bf16-naive",
             "h200-gpt2s-b8-s128-fp32-naive", "cpu-tiny-fp32-naive")  # fmt: skip
    return {n.removeprefix("h200-gpt2s-b8-s128-"): analyse(FIX / n) for n in names}


# ---------------------------------------------------------------- time, every lever


# (baseline, lever): predicted step-time ratio (the lever's step / the baseline's, both
# for the unprofiled run); None: skipped
RATIOS = {
    ("bf16-sdpa", "adamw-fused"): 0.9024, ("bf16-sdpa", "compile"): 0.8771,
    ("bf16-sdpa", "checkpoint"): 1.2707, ("bf16-sdpa", "cuda-graphs"): 0.7479,
    ("bf16-sdpa", "batch"): 1.0103, ("bf16-sdpa", "grad-accum"): 1.8221,
    ("bf16-sdpa", "sdpa"): None, ("bf16-sdpa", "bf16"): None,
    ("bf16-naive", "sdpa"): 0.8167, ("bf16-naive", "adamw-fused"): 0.8990,
    ("fp32-naive", "bf16"): 0.5724, ("fp32-naive", "sdpa"): 0.9549,
    ("fp32-naive", "cuda-graphs"): 0.9928, ("fp32-naive", "batch"): 1.4489,
    ("fp32-naive", "compile"): 0.9453, ("fp32-naive", "checkpoint"): 1.2405,
    ("cpu-tiny-fp32-naive", "sdpa"): 0.8091, ("cpu-tiny-fp32-naive", "adamw-fused"): 0.9021,
    ("cpu-tiny-fp32-naive", "checkpoint"): 1.0560, ("cpu-tiny-fp32-naive", "grad-accum"): 1.8923,
    ("cpu-tiny-fp32-naive", "cuda-graphs"): None,
}  # fmt: skip


@pytest.mark.parametrize(("run", "lever"), sorted(RATIOS))
def test_every_levers_time_prediction(base: dict[str, Baseline], run: str, lever: str) -> None:
    b = base[run]
    p = predict(b, [lever])
    want = RATIOS[(run, lever)]
    if want is None:
        assert p.skipped and math.isnan(p.step_ratio)
        return
    assert p.skipped is None
    assert p.step_ratio == pytest.approx(want, abs=5e-5)
    assert p.step_ms == pytest.approx(b.step_ms * p.step_ratio)
    assert p.tokens_per_s == pytest.approx(p.tokens / p.step_ms * 1e3)
    assert p.time_evidence


def test_predictions_against_the_measured_sibling_fixtures(base: dict[str, Baseline]) -> None:
    """SDPA from the bf16-naive run against the bf16-SDPA run's measured step, bf16 from
    the fp32 run against the bf16-naive run's (docs/results.md figures, same H200)."""
    sdpa = predict(base["bf16-naive"], ["sdpa"]).step_ms
    assert sdpa == pytest.approx(11.937, abs=1e-3)
    assert 100 * (sdpa / base["bf16-sdpa"].step_ms - 1) == pytest.approx(2.63, abs=0.01)
    bf16 = predict(base["fp32-naive"], ["bf16"]).step_ms
    assert 100 * (bf16 / base["bf16-naive"].step_ms - 1) == pytest.approx(4.40, abs=0.01)


def test_host_calibration_basis(base: dict[str, Baseline]) -> None:
    assert base["bf16-sdpa"].host_basis == "calibrated"
    assert base["bf16-sdpa"].host_speedup == pytest.approx(2.1575, abs=1e-4)
    # the fp32 step is GPU-bound: its unprofiled time says nothing about the host
    assert base["fp32-naive"].host_basis == "assumed"
    assert base["fp32-naive"].host_speedup == ASSUMED_HOST_SPEEDUP
    assert any("cannot calibrate the host" in n for n in base["fp32-naive"].notes)


def _probe(host: float, synced: float, n: int = 5) -> Metrics:
    return Metrics.of({"host_issue_ms": {"median": host, "n": n},
                       "synced_step_ms": {"median": synced, "n": n}})  # fmt: skip


def test_host_issue_probe_calibrates_a_gpu_bound_step(base: dict[str, Baseline]) -> None:
    """The fp32 step's traced host path, the GPU free, is 26.12 ms (the trace's own); a
    probe that saw the host return after 13.06 ms of a 26.6 ms step makes it about 2x
    faster: the k for which that path takes the probe's time."""
    cp = base["fp32-naive"].cp
    free = CP.predict(cp, CP.gpu_free())
    assert free == pytest.approx(26.1183, abs=1e-3)
    assert free < CP.predict(cp, CP.host_speedup(1.0))  # the GPU's side took some of it
    got = probed_host(cp, _probe(free / 2, 26.6))
    assert got is not None and got[1] == "probed"
    # thread handoffs and untraced gaps are not the host's operators: a bit above 2x
    assert 2.0 < got[0] < 2.1
    k = got[0]
    assert CP.predict(cp, CP.then(CP.gpu_free(), CP.host_speedup(k))) == pytest.approx(
        free / 2, rel=6e-3
    )
    # the host did not return well before the GPU was done: it waited inside the step
    assert probed_host(cp, _probe(25.0, 26.6)) is None
    # no probe (a CPU run, a run collected before the probe existed)
    assert probed_host(cp, Metrics.of({})) is None
    # the host slower unprofiled than traced: no speed-up
    assert probed_host(cp, _probe(30.0, 40.0)) == (1.0, "none")


def test_analyse_reads_the_probe(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(FIX / "h200-gpt2s-b8-s128-fp32-naive", run)
    man = json.loads((run / "manifest.json").read_text())
    man["metrics"]["host_issue_ms"] = {
        "median": 10.0,
        "p10": 9.9,
        "p90": 10.2,
        "mean": 10.0,
        "n": 5,
    }
    man["metrics"]["synced_step_ms"] = {
        "median": 27.0,
        "p10": 26.9,
        "p90": 27.2,
        "mean": 27.0,
        "n": 5,
    }
    (run / "manifest.json").write_text(json.dumps(man))
    b = analyse(run)
    assert b.host_basis == "probed"
    path = CP.predict(b.cp, CP.then(CP.gpu_free(), CP.host_speedup(b.host_speedup)))
    assert path == pytest.approx(10.0, rel=6e-3) and b.host_speedup > 2.612  # 26.12 / 10
    assert any("host-issue probe" in n and "10.00 ms" in n for n in b.notes)
    assert predict(b, ["bf16"]).time_basis.endswith("faster without the profiler (probed)")


def test_fused_adamw_evidence_on_the_sdpa_fixture(base: dict[str, Baseline]) -> None:
    p = predict(base["bf16-sdpa"], ["adamw-fused"])
    assert p.step_ms == pytest.approx(10.495, abs=1e-3)
    # 309 operators under Optimizer.step (296 of them .item()), 56 foreach kernels (8 ops)
    assert "309 host operators per step -> 2" in p.time_evidence
    assert "56 kernels" in p.time_evidence and "-> 7 kernels, 3.49 GB" in p.time_evidence


def test_not_modelled_on_cpu(base: dict[str, Baseline]) -> None:
    for lever in ("bf16", "compile"):
        p = predict(base["cpu-tiny-fp32-naive"], [lever])
        assert math.isnan(p.step_ratio) and "not modelled on a CPU run" in p.time_evidence
        assert math.isfinite(p.peak_delta_bytes)  # the memory model still applies


def test_combination_composes_the_effects(base: dict[str, Baseline]) -> None:
    b = base["bf16-naive"]
    both = predict(b, ["sdpa", "adamw-fused"])
    assert both.lever == "sdpa+adamw-fused" and both.levers == ["sdpa", "adamw-fused"]
    assert both.step_ratio < min(
        RATIOS[("bf16-naive", "sdpa")], RATIOS[("bf16-naive", "adamw-fused")]
    )
    assert both.config == {"attention": "sdpa", "optimizer": "adamw-fused"}
    assert both.peak_delta_bytes == predict(b, ["sdpa"]).peak_delta_bytes


# ---------------------------------------------------------------- memory


def test_memory_predictions_are_the_models_difference(base: dict[str, Baseline]) -> None:
    b = base["bf16-naive"]
    p = predict(b, ["sdpa"])
    m0 = estimate(GPT2S, batch=8, seq=128, dtype="bf16", attention="naive")
    m1 = estimate(GPT2S, batch=8, seq=128, dtype="bf16", attention="sdpa")
    assert p.peak_delta_bytes == m1.peak - m0.peak == -125_435_904
    assert p.peak_bytes == b.peak_bytes + p.peak_delta_bytes  # on the measured peak
    assert "saved T² attention matrices 113 MB -> 0" in p.memory_evidence
    ck = predict(b, ["checkpoint"])
    assert ck.peak_delta_bytes == -224_546_816
    assert "saved activations 767 MB -> 352 MB" in ck.memory_evidence
    assert predict(b, ["compile"]).peak_delta_bytes == 0.0  # not modelled: unchanged
    P = b.shape.n_params()
    assert predict(b, ["cuda-graphs"]).peak_delta_bytes == 4 * P  # gradients kept
    assert predict(base["fp32-naive"], ["bf16"]).peak_delta_bytes == -83_951_616


def test_memory_model_levers() -> None:
    kw = dict(batch=8, seq=128, dtype="bf16", attention="naive")
    plain = estimate(GPT2S, **kw)  # type: ignore[arg-type]
    P = plain.parameters // 4
    held = estimate(GPT2S, **kw, options=StepOptions(grad_accum=2))  # type: ignore[arg-type]
    for k in ("forward_end", "loss_backward", "head_backward"):
        assert held.phases[k] - plain.phases[k] == 4 * P
    fused = estimate(GPT2S, **kw, options=StepOptions(optimizer="adamw-fused"))  # type: ignore[arg-type]
    assert plain.phases["optimizer"] - fused.phases["optimizer"] == 4 * P  # foreach's sqrt
    ck = estimate(GPT2S, **kw, options=StepOptions(checkpoint=True))  # type: ignore[arg-type]
    N, C = 8 * 128, 768
    assert (
        ck.activations_saved
        == 12 * 4 * N * C + plain.activations_saved - 12 * plain.activations_per_layer
    )
    assert ck.autocast_weights == 2 * 50304 * 768  # only lm_head's copy is saved
    assert "block_backward" in ck.phases and sum(ck.categories.values()) == ck.peak
    with pytest.raises(Exception, match="optimizer must be one of"):
        StepOptions(optimizer="sgd")


# ---------------------------------------------------------------- regions, effects


def test_regions_on_the_naive_fixture(base: dict[str, Baseline]) -> None:
    b = base["bf16-naive"]
    opt = R.optimizer_region(b.trace)
    assert (opt.ops, int(opt.kernels.sum())) == (309, 56)
    att = R.attention_region(b.trace, 8, 12, 128)
    assert (att.ops, int(att.kernels.sum())) == (396, 288)  # 16.5 operators per layer and pass
    kinds = b.kernels.iloc[att.kernel_rows()]["class"].value_counts().to_dict()
    # the heads' transposes made contiguous are layout copies
    assert kinds == {"elementwise": 120, "layout": 48, "gemm": 72, "softmax": 24, "memcpy": 24}
    fwd = R.forward_region(b.trace, 50304)
    assert not (b.kernels["is_backward"].to_numpy()[fwd.kernel_rows()]).any()
    comp = R.compute_region(b.trace)
    assert not (comp.kernels & opt.kernels).any()


def test_interval_helpers() -> None:
    iv = R.merge(np.array([5, 0, 2, 20]), np.array([8, 3, 4, 30]))
    assert iv.tolist() == [[0, 4], [5, 8], [20, 30]]
    assert R.covered(iv, np.array([0, 3, 25]), np.array([10, 21, 40])).tolist() == [7, 5, 5]
    assert R.subtract(iv, np.array([[2, 6], [25, 26]])).tolist() == [
        [0, 2],
        [6, 8],
        [20, 25],
        [26, 30],
    ]


def test_effects_match_the_critical_paths_own_what_ifs(base: dict[str, Baseline]) -> None:
    b = base["bf16-sdpa"]
    n = len(b.trace.kernels)
    steps = b.trace.steps[b.trace.steps["step"] >= 0]
    span = np.c_[steps["cpu_ts"], steps["cpu_ts"] + steps["cpu_dur"]].astype(np.int64)
    threads = np.unique(b.trace.ops["tid"].to_numpy() & R.THREAD_MASK)
    everything = R.Region("all", {int(t): span for t in threads}, np.ones(n, bool), 0, 0)
    host = Effect(np.ones(n), np.zeros(n, bool), np.zeros(n, bool), ((everything, 0.5),))
    assert CP.predict(b.cp, scenario(host, "h", "")) == pytest.approx(
        CP.predict(b.cp, CP.host_speedup(2.0)), abs=1e-6
    )
    gemm = (b.kernels["class"] == "gemm").to_numpy()
    faster = Effect(np.where(gemm, 0.5, 1.0), np.zeros(n, bool), np.zeros(n, bool))
    h = CP.host_speedup(8.0)
    assert CP.predict(b.cp, CP.then(h, scenario(faster, "g", ""))) == pytest.approx(
        CP.predict(b.cp, CP.then(h, CP.class_speedup("gemm", 2.0))), abs=1e-6
    )


# ---------------------------------------------------------------- levers, combination, table


def test_lever_points_and_skips() -> None:
    cfg = {"preset": "tiny", "device": "cuda", "batch": 8, "seq": 128, "dtype": "fp32",
           "attention": "naive", "compile": True, "optimizer": "adamw-foreach",
           "warmup": 3}  # fmt: skip
    assert L.point(cfg).key == "b8-s128-fp32-naive+compile"
    ga = L.LEVERS["grad-accum"].apply(cfg, 2)
    assert (
        L.point(L.LEVERS["grad-accum"].apply(ga, 2)).key
        == "b8-s128-fp32-naive+compile+grad-accum=4"
    )
    fused = L.point(L.combine([L.LEVERS["adamw-fused"], L.LEVERS["bf16"]], cfg))
    assert fused.key == "b8-s128-bf16-naive+compile+optimizer=adamw-fused"
    assert L.skip_reason(L.LEVERS["compile"], cfg) == "the baseline is already compiled"
    cpu = {**cfg, "device": "cpu", "optimizer": "adamw"}
    assert L.skip_reason(L.LEVERS["cuda-graphs"], cpu) == "needs CUDA (the baseline runs on cpu)"
    assert L.point(cpu).options == ("--compile",)  # the loop is the CPU's default
    fp16 = {**cfg, "dtype": "fp16", "compile": False}
    assert "GradScaler" in (L.skip_reason(L.LEVERS["cuda-graphs"], fp16) or "")
    with pytest.raises(Exception, match="--levers: 'flash' is not one of"):
        L.parse_levers("sdpa,flash")
    assert L.parse_levers(" sdpa, bf16,sdpa") == ["sdpa", "bf16"]


def test_greedy_combination_keeps_one_of_a_group() -> None:
    chosen, dropped = MS.choose({"sdpa": 1.3, "batch": 1.5, "grad-accum": 1.4, "compile": 1.005,
                                 "checkpoint": 0.8})  # fmt: skip
    assert chosen == ["batch", "sdpa"]
    assert dropped == [("batch", "grad-accum", "both raise the tokens per step: alternatives")]
    base = {"step_time_ms": 10.0, "peak_bytes": 100.0, "tokens_per_s": 1000.0}
    row = {"step_time_ms": 8.0, "peak_bytes": 50.0, "tokens_per_s": 1250.0}
    assert [MS.gain(row, base, o) for o in MS.OBJECTIVES] == [1.25, 2.0, 1.25]


def test_table_rows_and_ranking() -> None:
    def pred(name: str, ratio: float, delta: float) -> Prediction:
        return Prediction(name, name, [name], {}, step_ratio=ratio, tokens=1000,
                          peak_delta_bytes=delta, addresses=["launch/host-bound"],
                          targets_verdict=True)  # fmt: skip

    base = {"status": "ok", "step_time_ms": 10.0, "peak_bytes": 1000.0, "tokens_per_s": 100_000.0}
    meas = {"status": "ok", "key": "k", "run_dir": "runs/k", "step_time_ms": 8.0,
            "peak_bytes": 1100.0, "tokens_per_s": 125_000.0}  # fmt: skip
    r = TB.row(
        pred("a", 0.75, 50.0), "lever", meas, base, {}, ("launch/host-bound", "compute-bound")
    )
    assert (r["step_ratio"], r["pred_step_ms"], r["step_error_pct"]) == (0.8, 7.5, -6.25)
    assert (r["peak_delta_bytes"], r["pred_peak_bytes"]) == (100.0, 1050.0)
    assert r["peak_error_pct"] == pytest.approx(-100 * 50 / 1100)
    oom = TB.row(pred("b", 0.5, 0.0), "lever", {"status": "oom", "error": "CUDA out of memory"},
                 base, {}, (None, None))  # fmt: skip
    df = TB.rank(pd.DataFrame([oom, r], columns=list(TB.COLUMNS)), "time")
    assert df["lever"].tolist() == ["a", "b"] and df["rank"].tolist()[0] == 1
    assert pd.isna(df["rank"].tolist()[1])  # a failed row is not ranked on its prediction
    pr = TB.rank(pd.DataFrame([r, oom], columns=list(TB.COLUMNS)), "time", measured=False)
    assert pr["lever"].tolist() == ["b", "a"]  # predicted-only: by the prediction


def test_a_prediction_beyond_15_percent_says_what_its_model_leaves_out() -> None:
    base = {"status": "ok", "step_time_ms": 10.0, "peak_bytes": 1000.0, "tokens_per_s": 1e5}
    meas = {"status": "ok", "step_time_ms": 20.0, "peak_bytes": 1000.0, "tokens_per_s": 1e5}
    within = Prediction("grad-accum", "", ["grad-accum"], {}, step_ratio=1.9, tokens=1)
    assert TB.row(within, "lever", meas, base, {}, (None, None))["prediction_note"] is None
    # checkpoint predicted x1.23, measured x2.00 (-38 %, as on the H100's s128 table)
    off = Prediction("checkpoint", "", ["checkpoint"], {}, step_ratio=1.23, tokens=1)
    note = TB.row(off, "lever", meas, base, {}, (None, None))["prediction_note"]
    assert note.startswith("predicted -38 % off the measurement (beyond ±15 %): checkpoint: ")
    assert LIM.LEAVES_OUT["checkpoint"] in note
    # a combination names each of its parts' gaps; a lever with a value by its name
    combo = LIM.prediction_note("compile+optimizer=adamw-fused+batch=16", 30.0)
    assert combo is not None and all(
        f"{k}: {LIM.LEAVES_OUT[k]}" in combo for k in ("compile", "adamw-fused", "batch")
    )
    assert LIM.prediction_note("sdpa", 15.0) is None and LIM.prediction_note("sdpa", -15.1)
    assert LIM.prediction_note("sdpa", float("nan")) is None
    assert "names nothing" in str(LIM.prediction_note("new-lever", 40.0))
    # every lever the advisor runs has its text
    from tracekit.advise.levers import LEVERS

    assert set(LEVERS) <= set(LIM.LEAVES_OUT)


# ---------------------------------------------------------------- the command


def test_dry_run_prints_and_writes_nothing(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from tracekit.cli import main

    monkeypatch.setenv("COLUMNS", "80")
    run = FIX / "h200-gpt2s-b8-s128-bf16-naive"
    before = sorted(p.name for p in FIX.iterdir())
    assert main(["advise", str(run), "--dry-run", "--levers", "sdpa,bf16,cuda-graphs"]) == 0
    out = capsys.readouterr().out
    assert "levers ranked by time" in out and "11.94" in out
    assert "bf16: skipped: the baseline already runs in reduced precision" in out
    assert max(len(line.rstrip()) for line in out.splitlines()) <= 80
    assert sorted(p.name for p in FIX.iterdir()) == before
    assert main(["advise", str(run), "--predict-only", "--format", "json", "--objective",
                 "memory", "--levers", "sdpa,checkpoint"]) == 0  # fmt: skip
    doc = json.loads(capsys.readouterr().out)
    assert doc["format"] == "tracekit.advise" and doc["predicted_only"] is True
    assert [r["lever"] for r in doc["levers"]] == ["checkpoint", "sdpa"]  # lower peak first
    assert set(doc["levers"][0]) == set(TB.COLUMNS)
    assert doc["baseline"]["verdict"] == "launch/host-bound"


@pytest.mark.parametrize(("setup", "args", "message"), [
    (None, ["--levers", "flash"], "--levers: 'flash' is not one of"),
    (None, ["--objective", "speed"], "--objective must be one of"),
    (None, ["--factor", "1"], "--factor must be an integer >= 2"),
    ("missing", [], "no such file or folder"),
    ("empty", [], "no manifest.json"),
    ("script", [], "a `tracekit run` of a script"),
    ("other", [], "not a `tracekit collect` run"),
    ("generate", [], "a generate run"),
])  # fmt: skip
def test_command_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str], setup: str | None,
                        args: list[str], message: str) -> None:  # fmt: skip
    from tracekit.cli import main

    run = FIX / "h200-gpt2s-b8-s128-bf16-naive"
    if setup is not None:
        run = tmp_path / "run"
        if setup != "missing":
            run.mkdir()
        if setup == "script":  # the tracekit run fixture's manifest
            run = FIX / "h200-run-resnet50-b64-bf16"
        if setup == "other":  # a manifest without a collect config
            (run / "manifest.json").write_text(json.dumps({"config": {"steps": 3}}))
        if setup == "generate":
            cfg = {"preset": "tiny", "model": {}, "workload": "generate"}
            (run / "manifest.json").write_text(json.dumps({"config": cfg}))
    assert main(["advise", str(run), "--dry-run", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tracekit: error:") and message in err and len(err.splitlines()) == 1


def test_cpu_dry_run_tells_the_reports_story(
    base: dict[str, Baseline], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a CPU run advise takes the report's verdict and its step, and leaves out what the
    report does not compute: no critical path, no kernel counts (issue 35)."""
    from reports.verdict import verdict_line
    from tracekit.cli import main

    monkeypatch.setenv("COLUMNS", "200")
    sm = base["cpu-tiny-fp32-naive"].summary  # the report's summary of the run
    assert sm.verdict is not None and sm.critical_path is None
    assert main(["advise", str(FIX / "cpu-tiny-fp32-naive"), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert f"verdict {verdict_line(sm)}" in " ".join(out.split())
    assert "critical path" not in out and "0 kernels" not in out and " GPU per step" not in out
