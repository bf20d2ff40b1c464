"""tracekit advise measuring on CPU: the tiny fixture run as the baseline, one lever that
runs, one that runs out of memory (the collector's test hook), one that needs CUDA; the
outputs, resume, the combination and Ctrl-C (the last two on a stand-in sweep)."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import tracekit.advise.measure as MS
import tracekit.advise.paired as MP
from tracekit.advise.advice import AdviseOptions, advise
from tracekit.sweep.plan import Point
from tracekit.sweep.runner import default_env

RUN = Path(__file__).resolve().parents[1] / "fixtures" / "cpu-tiny-fp32-naive"
OPTS = AdviseOptions(levers=("adamw-fused", "checkpoint", "cuda-graphs"), steps=1, warmup=1,
                     timeout_s=300, quiet=True,
                     rounds=MP.PairedOptions(min_rounds=2, max_rounds=3, budget_s=1.0,
                                             window=1, warmup=1))  # fmt: skip


def env_for(point: Point) -> dict[str, str]:
    """Every run as the sweep runs it; the checkpoint lever's runs out of memory."""
    env = default_env()
    if "+checkpoint" in point.key:
        env["TRACEKIT_TEST_FAULT"] = "*:0:oom"
    return env


@pytest.fixture(scope="module")
def advised(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path]:
    from tracekit.reports.advise import write_outputs

    out = tmp_path_factory.mktemp("advise") / "a"
    a = advise(RUN, out, OPTS, env=env_for)
    write_outputs(a.doc, a.table, out)
    return a, out


def _rows(table: pd.DataFrame) -> dict[str, dict[str, Any]]:
    return {str(r["lever"]): r for r in table.to_dict(orient="records")}


def test_measured_predicted_failed_and_skipped_rows(advised: tuple[Any, Path]) -> None:
    a, _ = advised
    rows = _rows(a.table)
    base = a.doc["baseline"]
    assert base["remeasured_step_ms"] > 0 and base["remeasured_peak_bytes"] > 0
    fused = rows["adamw-fused"]
    assert fused["status"] == "ok" and fused["rank"] == 1
    assert fused["step_ms"] > 0 and fused["tokens_per_s"] > 0 and fused["peak_bytes"] > 0
    assert fused["step_ratio"] == pytest.approx(fused["step_ms"] / base["remeasured_step_ms"])
    # its time is from paired rounds against the baseline, in one worker process
    assert 2 <= fused["rounds"] <= 3 and fused["ratio_lo"] < fused["ratio_hi"]
    assert fused["effect"] in ("faster", "slower", "no measurable difference")
    paired = json.loads((a.out / "paired" / "adamw-fused.json").read_text())
    assert paired["status"] == "ok" and len(paired["rounds"]) == fused["rounds"]
    assert [r["order"] for r in paired["rounds"]][:2] == ["AB", "BA"]
    assert fused["step_ratio"] == pytest.approx(paired["interval"]["ratio"])
    # the prediction, on the re-measured baseline, beside the measurement
    assert fused["pred_step_ratio"] == pytest.approx(0.9021, abs=5e-5)
    assert fused["pred_step_ms"] == pytest.approx(base["remeasured_step_ms"] * 0.9021, rel=1e-4)
    err = 100 * (fused["pred_step_ms"] - fused["step_ms"]) / fused["step_ms"]
    assert fused["step_error_pct"] == pytest.approx(err)
    assert fused["pred_peak_bytes"] == base["remeasured_peak_bytes"]  # fused: no change modelled
    # the report's verdict of the CPU run, which its dry run states too
    assert fused["verdict_before"] == base["verdict"] is not None
    ck = rows["checkpoint"]
    assert ck["status"] == "oom" and "out of memory" in ck["error"] and pd.isna(ck["rank"])
    assert ck["pred_step_ratio"] == pytest.approx(1.0560, abs=5e-5)  # predicted all the same
    assert math.isnan(ck["step_ms"])
    cg = rows["cuda-graphs"]
    assert cg["status"] == "skipped" and cg["error"] == "needs CUDA (the baseline runs on cpu)"
    assert a.doc["combination"]["levers"] in ([], ["adamw-fused"])  # CPU timings: either


def test_outputs(advised: tuple[Any, Path]) -> None:
    a, out = advised
    doc = json.loads((out / "advise.json").read_text())
    assert doc["format"] == "tracekit.advise" and doc["version"] == 1
    assert set(doc) == {"format", "version", "run", "objective", "predicted_only", "baseline",
                        "levers", "combination", "notes"}  # fmt: skip
    assert {"config", "step_ms", "verdict", "host_speedup", "host_basis", "peak_bytes",
            "remeasured_step_ms"} <= set(doc["baseline"])  # fmt: skip
    assert [r["lever"] for r in doc["levers"]] == a.table["lever"].tolist()
    csv = pd.read_csv(out / "advise.csv")
    assert csv["lever"].tolist() == a.table["lever"].tolist()
    sweep = pd.read_parquet(out / "sweep.parquet")
    key = "b8-s128-fp32-naive"
    assert sweep["key"].tolist() == [key, f"{key}+optimizer=adamw-fused", f"{key}+checkpoint"]
    assert sweep["status"].tolist() == ["ok", "ok", "oom"]
    html = (out / "report" / "advise.html").read_text()
    assert "adamw-fused" in html and "Content-Security-Policy" in html
    assert any((out / "tensorboard" / "adamw-fused").iterdir())
    assert any((out / "tensorboard" / "advise").iterdir())


def test_resume_runs_nothing_again(advised: tuple[Any, Path]) -> None:
    from tracekit.errors import UsageError

    a, out = advised

    def stamps() -> dict[Path, int]:  # each collect's manifest, each paired timing's result
        done = [*(out / "runs").glob("*/manifest.json"), *(out / "paired").glob("*.json")]
        return {p: p.stat().st_mtime_ns for p in done}

    before = stamps()
    assert any(p.parent.name == "paired" for p in before)
    again = advise(RUN, out, dataclasses.replace(OPTS, resume=True), env=env_for)
    assert stamps() == before
    assert again.table["step_ratio"].tolist() == pytest.approx(a.table["step_ratio"].tolist(),
                                                              nan_ok=True)  # fmt: skip
    assert _rows(again.table)["checkpoint"]["status"] == "oom"  # an oom row is done
    assert again.table["lever"].tolist() == a.table["lever"].tolist()
    with pytest.raises(UsageError, match="--resume"):
        advise(RUN, out, OPTS, env=env_for)


def fake_paired(sweep: FakeSweep) -> Any:
    """Stands in for the paired rounds: each lever's ratio from ``sweep.results`` with a
    +-1 % interval (``wide``: levers whose interval holds 1.0)."""

    def run_all(
        levers: Mapping[str, Any], base: Any, out: Path, opts: Any, *a: Any, **k: Any
    ) -> Any:
        b_ms = sweep.results["baseline"][0]
        docs = {}
        for name in levers:
            r = sweep.results[name][0] / b_ms
            lo, hi = (0.9, 1.1) if name in sweep.wide else (r * 0.99, r * 1.01)
            effect = "faster" if hi < 1 else "slower" if lo > 1 else "no measurable difference"
            docs[name] = {"status": "ok", "interval": {"ratio": r, "lo": lo, "hi": hi,
                                                       "rounds": 5, "effect": effect}}  # fmt: skip
        return docs

    return run_all


class FakeSweep:
    """Stands in for the sweep: each point's row from ``results`` (keyed by lever
    options), recording what it was asked to run."""

    def __init__(
        self, results: Mapping[str, tuple[float, float]], wide: tuple[str, ...] = ()
    ) -> None:
        self.results = results
        self.wide = wide
        self.calls: list[list[str]] = []

    def __call__(
        self, b: Any, points: Mapping[str, Point], out: Path, opts: Any, **kw: Any
    ) -> pd.DataFrame:
        self.calls.append(list(points))
        rows = []
        for name, p in points.items():
            ms, peak = self.results[name]
            tokens = p.batch * p.seq * (2 if "grad-accum" in p.key else 1)
            rows.append({"key": p.key, "status": "ok", "error": None, "run_dir": None,
                         "step_time_ms": ms, "peak_bytes": peak,
                         "tokens_per_s": tokens / ms * 1e3})  # fmt: skip
        return pd.DataFrame(rows)


def fake_search(script: Mapping[str, float], calls: list[tuple[str, str]]) -> Any:
    """Stands in for a search step's paired worker: the combination's ratio against the
    best so far from ``script`` (keyed by the combination, ``a+b``), +-1 %, 6 rounds."""

    def run_one(name: str, base: Any, other: Any, *a: Any, **k: Any) -> dict[str, Any]:
        tried = name.removeprefix("search-")
        calls.append((tried, f"{base.get('attention')}/{other.get('attention')}"))
        r = script[tried]
        return {"status": "ok", "interval": {"ratio": r, "lo": r * 0.99, "hi": r * 1.01,
                                             "rounds": 6, "effect": ""}}  # fmt: skip

    return run_one


def test_best_combination_is_searched_and_measured(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake = FakeSweep({"baseline": (100.0, 1e9), "sdpa": (80.0, 0.9e9), "adamw-fused": (90.0, 1e9),
                      "checkpoint": (130.0, 0.5e9), "grad-accum": (190.0, 1.1e9),
                      "combination": (71.0, 0.9e9)})  # fmt: skip
    calls: list[tuple[str, str]] = []
    monkeypatch.setattr(MS, "run", fake)
    monkeypatch.setattr(MP, "run_all", fake_paired(fake))
    monkeypatch.setattr(MP, "run_one", fake_search({"sdpa+adamw-fused": 0.875}, calls))
    opts = dataclasses.replace(OPTS, levers=("sdpa", "adamw-fused", "checkpoint", "grad-accum"))
    a = advise(RUN, tmp_path / "o", opts)
    # the combination is timed against the best single lever (sdpa), in its own worker
    assert calls == [("sdpa+adamw-fused", "sdpa/sdpa")]
    assert fake.calls == [["baseline", "sdpa", "adamw-fused", "checkpoint", "grad-accum"],
                          ["baseline", "sdpa", "adamw-fused", "checkpoint", "grad-accum",
                           "combination"]]  # fmt: skip
    combo = a.doc["combination"]
    assert combo["levers"] == ["sdpa", "adamw-fused"] and combo["result"] == "measured"
    assert combo["method"].startswith("measured search")
    search = combo["search"]
    assert search["order"] == ["sdpa", "adamw-fused"] and search["stopped"] == "nothing more gains"
    (step,) = search["steps"]
    assert step["kept"] and step["vs_best"]["ratio"] == 0.875 and step["vs_best"]["rounds"] == 6
    assert step["vs_baseline"]["ratio"] == pytest.approx(0.7)
    rows = _rows(a.table)
    c = rows["sdpa+adamw-fused"]
    # the chained ratio (sdpa's against the baseline x the step's), not the single collect's
    assert (c["kind"], c["rank"]) == ("combination", 1)
    assert (c["step_ms"], c["step_ratio"]) == pytest.approx((70.0, 0.7))
    assert c["ratio_lo"] < 0.7 < c["ratio_hi"] and c["rounds"] == 5 and c["effect"] == "faster"
    assert c["pred_step_ratio"] < rows["sdpa"]["pred_step_ratio"]
    assert a.table["lever"].tolist()[:3] == ["sdpa+adamw-fused", "sdpa", "adamw-fused"]
    mem = advise(RUN, tmp_path / "m", dataclasses.replace(opts, objective="memory"))
    assert mem.doc["combination"]["levers"] == ["checkpoint", "sdpa"]  # peak: 0.5 and 0.9 GB


def test_a_combination_slower_than_the_best_single_lever_is_not_recommended(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # the case: compile 0.69 alone, sdpa 0.84 alone, sdpa on top of compile slower
    fake = FakeSweep({"baseline": (100.0, 1e9), "sdpa": (84.0, 0.9e9),
                      "adamw-fused": (95.0, 1e9)})  # fmt: skip
    calls: list[tuple[str, str]] = []
    monkeypatch.setattr(MS, "run", fake)
    monkeypatch.setattr(MP, "run_all", fake_paired(fake))
    monkeypatch.setattr(MP, "run_one", fake_search({"sdpa+adamw-fused": 1.1}, calls))
    a = advise(RUN, tmp_path / "o", dataclasses.replace(OPTS, levers=("sdpa", "adamw-fused")))
    combo = a.doc["combination"]
    assert combo["levers"] == ["sdpa"] and len(fake.calls) == 1  # no combination collected
    assert combo["result"] == "sdpa alone: no other lever gained on top of it (nothing more gains)"
    assert combo["search"]["best_vs_baseline"]["ratio"] == pytest.approx(0.84)
    assert not combo["search"]["steps"][0]["kept"]
    (note,) = combo["search"]["interactions"]
    assert note.startswith("adamw-fused on top of sdpa: ×1.10 [1.09–1.11, 6 rounds]")
    assert a.table["lever"].tolist()[0] == "sdpa"


def test_interrupt_exits_130(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from tracekit.cli import main

    def interrupted(*a: Any, **k: Any) -> pd.DataFrame:
        raise KeyboardInterrupt

    monkeypatch.setattr(MS, "run", interrupted)
    assert main(["advise", str(RUN), "--levers", "sdpa", "-o", str(tmp_path / "o"), "-q"]) == 130


def test_a_lever_without_a_measurable_difference_stays_out(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # adamw-fused's single collect looks 10 % faster, but its interval holds 1.0: it is
    # ranked below sdpa and stays out of the combination (one lever left: no combination)
    fake = FakeSweep({"baseline": (100.0, 1e9), "sdpa": (80.0, 0.9e9),
                      "adamw-fused": (90.0, 1e9)}, wide=("adamw-fused",))  # fmt: skip
    monkeypatch.setattr(MS, "run", fake)
    monkeypatch.setattr(MP, "run_all", fake_paired(fake))
    a = advise(RUN, tmp_path / "o", dataclasses.replace(OPTS, levers=("sdpa", "adamw-fused")))
    assert a.doc["combination"]["levers"] == ["sdpa"]
    rows = _rows(a.table)
    assert rows["adamw-fused"]["effect"] == "no measurable difference"
    assert (rows["adamw-fused"]["ratio_lo"], rows["adamw-fused"]["ratio_hi"]) == (0.9, 1.1)
    assert rows["sdpa"]["effect"] == "faster" and rows["sdpa"]["rank"] == 1
    from tracekit.reports.advise import interval

    assert interval(rows["adamw-fused"]) == "=0.90-1.10 (5)"
    assert interval(rows["sdpa"]) == "0.79-0.81 (5)"
