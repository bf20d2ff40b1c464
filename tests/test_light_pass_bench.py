"""The light-pass benchmarks: light_pass_cost.py runs on CPU (a smoke: no CUDA activity to
record, so both windows run the same loop), and timeline_overhead.py's rounds summary."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_light_pass_cost_runs_on_cpu(capsys: pytest.CaptureFixture[str]) -> None:
    mod = _load("light_pass_cost")
    args = ["--device", "cpu", "--preset", "tiny", "--batch", "2", "--seq", "16",
            "--rounds", "3", "--discard", "1", "--active", "1", "--warmup-steps", "1",
            "--external-correlation", "--launch-cost",
            "--configs", "fp32-naive,fp32-sdpa"]  # fmt: skip
    assert mod.main(args) == 0
    out = capsys.readouterr().out
    rounds = re.findall(
        r"^round \d: unprofiled [\d.]+ ms, (?:(?:kineto|cupti|kineto\+xcorr) [\d.]+ ms x[\d.]+"
        r"(?:, )?){3}",
        out,
        re.M,
    )
    assert len(rounds) == 6  # two configurations
    assert "(discarded)" in next(ln for ln in out.splitlines() if ln.startswith("round 0"))
    for kind in ("kineto", "cupti", "kineto\\+xcorr"):
        m = re.findall(rf"paired ratio {kind}: (\d+\.\d+) \(IQR [\d.]+-[\d.]+, 2 rounds\)", out)
        assert len(m) == 2 and all(float(v) > 0 for v in m)
    table = out[out.index("config        pass") :].splitlines()[1:7]
    assert [ln.split()[:2] for ln in table] == [
        [c, k] for c in ("fp32-naive", "fp32-sdpa") for k in ("kineto", "cupti", "kineto+xcorr")
    ]
    steal = mod.cpu_steal()
    assert steal is None or 0 <= steal[0] <= steal[1]


def test_light_pass_cost_on_a_script(capsys: pytest.CaptureFixture[str]) -> None:
    """``--script``: the windows over a script's own steps (a CPU smoke: no recorder runs)."""
    mod = _load("light_pass_cost")
    script = Path(__file__).resolve().parent / "scripts" / "mlp.py"
    args = ["--device", "cpu", "--script", "--rounds", "2", "--discard", "1", "--active", "1",
            "--warmup-steps", "2", "--pass", "kineto", "--", "python", str(script),
            "--iters", "1000"]  # fmt: skip
    assert mod.main(args) == 0
    out = capsys.readouterr().out
    assert "== script python" in out and ": 14 steps (2 warm-up, 4 windows of 3)" in out
    assert re.search(r"paired ratio kineto: [\d.]+ \(IQR [\d.]+-[\d.]+, 1 rounds\)", out)
    short = ["--device", "cpu", "--script", "--rounds", "2", "--pass", "kineto", "--", "python",
             str(script), "--iters", "5"]  # fmt: skip
    with pytest.raises(SystemExit, match="after 5 of the 29 steps the rounds need"):
        mod.main(short)


def test_light_pass_cost_rejects_too_few_rounds() -> None:
    with pytest.raises(SystemExit):
        _load("light_pass_cost").main(["--device", "cpu", "--rounds", "1", "--discard", "1"])


def _run(name: str, base: float, light: float | None, report_pct: float | None) -> dict[str, Any]:
    tf = SimpleNamespace(
        source="light" if report_pct is not None else "full", vs_unprofiled_pct=report_pct
    )
    return {
        "name": name,
        "metrics": {
            "step_time_ms": {"median": base},
            "timeline_step_time_ms": light,
            "profiled_step_time_ms": 2 * base,
        },
        "facts": SimpleNamespace(timeline_facts=tf),
    }


def test_timeline_overhead_rounds_summary() -> None:
    mod = _load("timeline_overhead")
    runs = [
        _run("a", 10.0, 11.0, 12.0), _run("b", 10.0, None, None),
        _run("a", 20.0, 30.0, 50.0), _run("b", 10.0, None, None),
        _run("a", 10.0, 10.5, 5.0), _run("b", 10.0, None, None),
    ]  # fmt: skip
    lines = mod.rounds_summary(runs)
    assert lines[0] == "over 3 rounds (median [min-max]):"
    assert lines[1] == (
        "  a: light pass x1.100 [1.050-1.500]; light trace x1.120 [1.050-1.500]; "
        "full x2.000 [2.000-2.000]; light trace within 10 % in 1 of 3"
    )
    assert lines[2] == "  b: full x2.000 [2.000-2.000]; no light pass"
