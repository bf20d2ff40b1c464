"""benchmarks/run_overhead.py: its step windows, its paired ratios, and one round end to end
on CPU (timings are not checked, only that both sides timed the same steps)."""

from __future__ import annotations

import importlib.util
import re
import runpy
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
MLP = ROOT / "tests" / "scripts" / "mlp.py"


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "run_overhead", ROOT / "benchmarks" / "run_overhead.py"
    )
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_scripts_own_window_is_tracekits_timed_steps(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    b = _bench()
    # tracekit times steps 6-25: marks at the ends of steps 5..25; the script's events at
    # the ends of its iterations 4..24 (iteration i ends step i + 1); it ends with step 25
    assert b.own_args(5, 20) == ["--time", "--warmup", "4", "--iters", "25"]
    # mlp.py (--time as the user scripts): timed steps 4-7, marks at the ends of steps 3..7
    monkeypatch.setattr("sys.argv", [str(MLP), *b.own_args(3, 4)])
    runpy.run_path(str(MLP), run_name="__main__")
    assert re.search(r"plain step ms: median \d+\.\d+ \(n=4\)", capsys.readouterr().out)
    # the user scripts record their events the same way
    for name in ("resnet50_train.py", "hf_causal_lm_train.py"):
        src = (ROOT / "benchmarks" / "user_scripts" / name).read_text()
        assert "if args.time and i >= args.warmup:" in src and "range(args.iters)" in src


def test_paired_ratios_are_per_round_with_quartiles() -> None:
    b = _bench()
    assert b.paired([], []) is None
    assert b.paired([2.0], [1.0]) == (2.0, 2.0, 2.0)
    med, q1, q3 = b.paired([1.0, 1.1, 1.2, 1.5], [1.0, 1.0, 1.0, 1.0])
    assert med == pytest.approx(1.15) and q1 == pytest.approx(1.075) and q3 == pytest.approx(1.275)
    # paired: the ratio of each round, not the ratio of the medians
    assert b.paired([2.0, 4.0], [1.0, 4.0])[0] == pytest.approx(1.5)


def test_parse_side_reads_the_tagged_line_and_the_scripts_own() -> None:
    b = _bench()
    out = 'x\nplain step ms: median 25.830 (n=19)\nRUN_OVERHEAD {"tracekit": 26.1, "n": 20}\n'
    assert b.parse_side("tracekit", out) == {"tracekit": 26.1, "n": 20, "own": 25.83}
    assert b.parse_side("plain", out)["plain"] == 25.83


def test_one_round_on_cpu_times_the_same_steps_on_both_sides(
    capsys: pytest.CaptureFixture[str],
) -> None:
    b = _bench()
    args = ["--rounds", "1", "--warmup", "3", "--steps", "4", "--device", "cpu", "--threads", "1",
            "--", "python", str(MLP)]  # fmt: skip
    assert b.main(args) == 0
    out = capsys.readouterr().out
    m = re.search(r"round 0: plain first; plain ([0-9.]+) ms, tracekit ([0-9.]+) ms .*own under "
                  r"tracekit ([0-9.]+) ms; run status incomplete", out)  # fmt: skip
    assert m and all(float(x) > 0 for x in m.groups())
    for name in ("tracekit/plain", "own/plain", "tracekit/own"):
        assert re.search(rf"paired ratio {name} = \d+\.\d+ \(IQR", out)


def test_hooks_mode_leaves_only_the_step_marker_in_the_timed_steps(
    capsys: pytest.CaptureFixture[str],
) -> None:
    b = _bench()
    assert b.main(["--hooks", "--warmup", "3", "--steps", "5", "--device", "cpu", "--",
                   "python", str(MLP), "--iters", "20"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    timed = out.split("timed steps 4-8 (5 steps):")[1]
    warm = out.split("probed warm-up steps 2-3 (2 steps):")[1].split("timed steps")[0]
    assert re.search(r"Probes._pre_forward \(input \+ memory\)\s+1.00 calls", warm)
    assert re.search(r"Probes._pre_forward \(input \+ memory\)\s+0.00 calls", timed)
    assert re.search(r"Probes._pre_step \(memory\)\s+0.00 calls", timed)
    assert re.search(r"step end \(the marker's callback\)\s+1.00 calls", timed)
