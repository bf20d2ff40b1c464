"""Smoke test: the overhead benchmark runs end to end on CPU (timings are not checked)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "profiler_overhead.py"


def test_profiler_overhead_benchmark_runs_on_cpu(capsys: pytest.CaptureFixture[str]) -> None:
    spec = importlib.util.spec_from_file_location("profiler_overhead", BENCH)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    args = ["--device", "cpu", "--preset", "tiny", "--batch", "2", "--seq", "16",
            "--rounds", "1", "--discard", "0", "--active", "2", "--warmup", "1"]  # fmt: skip
    assert mod.main(args) == 0
    out = capsys.readouterr().out
    m = re.search(r"ratio collector/bare = (\d+\.\d+)", out)
    assert m and float(m.group(1)) > 0
    assert "medians of 2 steps" in out
