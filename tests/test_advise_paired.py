"""Paired timing for advise: the ratio's interval, the rounds' stopping rule, the overlay
of a lever's row (tracekit.collectors.paired_stats, .paired; tracekit.advise.paired)."""

from __future__ import annotations

import itertools
import math
import random
import sys
from pathlib import Path

import pytest

import tracekit.advise.paired as MP
from tracekit.collectors.paired import Rounds, paired_rounds
from tracekit.collectors.paired_stats import ratio_interval, settled, t95
from tracekit.errors import UsageError


def test_interval_of_constant_and_noisy_ratios() -> None:
    iv = ratio_interval([0.8] * 6)
    assert (iv.ratio, iv.lo, iv.hi, iv.rounds) == pytest.approx((0.8, 0.8, 0.8, 6))
    assert iv.effect == "faster" and iv.half_width == pytest.approx(0.0)
    # log ratios +-0.1 around 0: mean 0, sd 0.1095 (n=6), t(5) = 2.015
    iv = ratio_interval([math.exp(x) for x in (0.1, -0.1, 0.1, -0.1, 0.1, -0.1)])
    h = 2.015 * math.sqrt(0.06 / 5) / math.sqrt(6)
    assert iv.lo == pytest.approx(math.exp(-h)) and iv.hi == pytest.approx(math.exp(h))
    assert iv.effect == "no measurable difference"
    assert ratio_interval([1.3, 1.31, 1.29]).effect == "slower"
    one = ratio_interval([0.9])
    assert one.rounds == 1 and one.hi == math.inf and not settled(one, 1, 0.05)
    assert ratio_interval([]).rounds == 0 and math.isnan(ratio_interval([-1.0]).ratio)
    assert t95(1) == 6.314 and t95(30) == 1.697 and t95(100) == 1.645 and t95(0) == math.inf


def _windows(ratio: float, noise: float, seed: int = 0):  # type: ignore[no-untyped-def]
    rng = random.Random(seed)
    calls: list[str] = []

    def base(k: int) -> float:
        calls.append("A")
        return 10.0 * (1 + rng.uniform(-noise, noise))

    def other(k: int) -> float:
        calls.append("B")
        return 10.0 * ratio * (1 + rng.uniform(-noise, noise))

    return base, other, calls


def test_rounds_alternate_and_stop_once_settled() -> None:
    base, other, calls = _windows(0.8, 0.002)
    rounds, iv, why = paired_rounds(base, other, Rounds(min_rounds=5, max_rounds=30))
    assert why == "settled" and len(rounds) == 5  # tight from the start: the minimum
    assert "".join(calls[:8]) == "ABBAABBA"
    assert [r["order"] for r in rounds] == ["AB", "BA", "AB", "BA", "AB"]
    assert iv.ratio == pytest.approx(0.8, rel=0.01) and iv.effect == "faster"


def test_rounds_stop_at_the_cap_or_the_budget() -> None:
    base, other, _ = _windows(1.0, 0.3)  # too noisy to settle at +-1 %
    rounds, _, why = paired_rounds(base, other, Rounds(min_rounds=3, max_rounds=7, half_width=0.01))
    assert why == "max_rounds" and len(rounds) == 7
    tick = itertools.count()
    clock = lambda: float(next(tick))  # noqa: E731 - one second per call
    base, other, _ = _windows(1.0, 0.3)
    r = Rounds(min_rounds=3, max_rounds=100, budget_s=4.0, half_width=0.01)
    rounds, _, why = paired_rounds(base, other, r, clock=clock)
    assert why == "budget" and 3 <= len(rounds) <= 5
    with pytest.raises(ValueError):
        Rounds(min_rounds=1)
    with pytest.raises(UsageError, match="--rounds"):
        MP.PairedOptions(min_rounds=5, max_rounds=4)
    with pytest.raises(UsageError, match="--half-width"):
        MP.PairedOptions(half_width=0)


def test_overlay_puts_the_paired_ratio_on_the_remeasured_baseline() -> None:
    base = {"step_time_ms": 50.0, "tokens_per_s": 1024 / 0.05}
    row = {"key": "k", "status": "ok", "step_time_ms": 48.0, "tokens_per_s": 1024 / 0.048}
    doc = {"status": "ok", "interval": {"ratio": 0.9, "lo": 0.88, "hi": 0.92, "rounds": 6,
                                         "effect": "faster"}}  # fmt: skip
    got = MP.overlay(row, base, doc)
    assert got["step_time_ms"] == pytest.approx(45.0) and got["rounds"] == 6
    assert got["tokens_per_s"] == pytest.approx(1024 / 0.045)
    assert (got["ratio_lo"], got["ratio_hi"], got["effect"]) == (0.88, 0.92, "faster")
    kept = MP.overlay(row, base, {"status": "oom", "error": "CUDA out of memory"})
    assert kept["step_time_ms"] == 48.0 and math.isnan(kept["ratio_hi"])
    assert kept["effect"] == "paired timing failed: CUDA out of memory"
    assert MP.overlay(row, base, None)["effect"] == "one sample (no paired rounds)"
    # one round: the worker's t-interval is [0, inf]; the row says it has no interval
    one = ratio_interval([0.84])
    single = MP.overlay(row, base, {"status": "ok", "interval": one.to_dict()})
    assert single["rounds"] == 1 and single["effect"] == MP.NO_INTERVAL
    assert math.isnan(single["ratio_lo"]) and math.isnan(single["ratio_hi"])
    assert single["step_time_ms"] == pytest.approx(50 * 0.84)
    rows = {"a": got, "b": {**got, "ratio_hi": 1.02}, "c": {**got, "ratio_hi": math.nan}}
    assert MP.sure_gains(rows, base, "time") == {"a"}
    assert MP.sure_gains(rows, base, "memory") == {"a", "b", "c"}
    # twice the tokens at a worst-case 1.02x step: tokens/s is surely better
    big = {**got, "tokens_per_s": 2048 / 0.045, "ratio_hi": 1.02}
    assert MP.sure_gains({"batch": big}, base, "tokens-per-s") == {"batch"}


def test_budget_bar_shows_the_lever_and_the_time_left(capsys: pytest.CaptureFixture[str]) -> None:
    with MP.BudgetBar(60.0, 2) as bar:
        bar("sdpa", "round 3: ratio 0.8000 [0.7900, 0.8100]")
        assert bar._bar is not None
        task = bar._bar.tasks[0]
        assert task.description.startswith("sdpa (1/2): round 3")
        assert task.fields["left"].endswith("s of 60 s left") and task.total == 60.0
    with MP.BudgetBar(60.0, 2, enabled=False) as quiet:
        quiet("sdpa", "x")
        assert quiet._bar is None


def test_a_silent_hung_worker_is_killed_at_its_deadline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The deadline holds even when the worker prints nothing (it was checked per line)."""
    import time

    hang = [sys.executable, "-c", "import time; time.sleep(60)"]
    monkeypatch.setattr(MP, "worker_command", lambda spec, res: hang)
    monkeypatch.setattr(MP, "START_S", 0.0)
    t0 = time.monotonic()
    doc = MP.run_one("x", {}, {}, tmp_path, 0.5, MP.PairedOptions())
    assert time.monotonic() - t0 < 30
    assert doc["status"] == "error" and doc["error"].startswith("paired timing timed out")


def test_resume_keeps_a_finished_timing_of_the_same_spec(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--resume keeps a lever's finished timing (whatever budget share it had), and times
    again one whose configs or rounds changed, or that ended in an error."""
    runs: list[str] = []

    def worker(spec: Path, res: Path) -> list[str]:
        runs.append(spec.name)
        status = "error" if "bad" in spec.name else "ok"
        doc = {"status": status, "run": len(runs)}
        return [sys.executable, "-c", f"import json; json.dump({doc!r}, open({str(res)!r}, 'w'))"]

    monkeypatch.setattr(MP, "worker_command", worker)
    base, other, opts = {"batch": 8}, {"batch": 8, "optimizer": "fused"}, MP.PairedOptions()
    first = MP.run_one("fused", base, other, tmp_path, 30.0, opts)
    assert first == {"status": "ok", "run": 1}
    # kept: the same spec with another budget share
    assert MP.run_one("fused", base, other, tmp_path, 12.0, opts, resume=True) == first
    assert len(runs) == 1
    # without --resume, or with another config or other rounds: timed again
    assert MP.run_one("fused", base, other, tmp_path, 12.0, opts)["run"] == 2
    other2 = {**other, "batch": 16}
    assert MP.run_one("fused", base, other2, tmp_path, 12.0, opts, resume=True)["run"] == 3
    wider = MP.PairedOptions(half_width=0.1)
    assert MP.run_one("fused", base, other2, tmp_path, 12.0, wider, resume=True)["run"] == 4
    # an error is never kept
    assert MP.run_one("bad", base, other, tmp_path, 12.0, opts)["status"] == "error"
    assert MP.run_one("bad", base, other, tmp_path, 12.0, opts, resume=True)["run"] == 6


def test_interval_text_says_how_many_rounds_it_rests_on() -> None:
    from tracekit.reports.advise import interval

    def r(lo: float, hi: float, n: int, status: str = "ok") -> dict[str, object]:
        return {"status": status, "ratio_lo": lo, "ratio_hi": hi, "rounds": n}

    assert interval(r(0.66, 0.72, 12)) == "0.66-0.72 (12)"
    assert interval(r(0.66, 0.72, 12), long=True) == "0.66-0.72 (12 rounds)"
    assert interval(r(0.99, 1.02, 7)) == "=0.99-1.02 (7)"
    # a tight interval is shown with the digits that tell its ends apart, never 0.84-0.84
    assert interval(r(0.8384, 0.8431, 5)) == "0.838-0.843 (5)"
    assert interval(r(0.84, 0.84, 5)) == "5 rounds, no spread"  # identical rounds
    assert interval(r(math.nan, math.nan, 1)) == "1 round, no interval"
    assert interval(r(0.0, math.inf, 1)) == "1 round, no interval"  # the worker's one round
    assert interval(r(math.nan, math.nan, 0)) == "1 collect, no interval"  # --no-paired
    assert interval(r(0.5, 0.6, 5, "oom")) == "–"
    # every interval computed from >= 2 distinct rounds has a visible width
    for rounds in ([0.84, 0.8401], [0.84, 0.8401, 0.8399], [1.0, 1.00001]):
        iv = ratio_interval(rounds)
        text = interval(r(iv.lo, iv.hi, iv.rounds))
        lo, hi = text.lstrip("=").split(" ")[0].split("-")
        assert lo != hi, text


def test_the_why_lines_interval_tells_its_ends_apart_as_the_table_does() -> None:
    from tracekit.advise.table import interval_text

    def r(lo: float, hi: float, n: int) -> dict[str, object]:
        return {"ratio_lo": lo, "ratio_hi": hi, "rounds": n}

    # the H200 s128 table's cuda-graphs row: 1.010-1.012 there, "1.01-1.01" in its line
    assert interval_text(r(1.0101, 1.0119, 5)) == "90 % interval 1.010-1.012, 5 rounds"
    assert interval_text(r(1.12, 1.24, 5)) == "90 % interval 1.12-1.24, 5 rounds"
    assert interval_text(r(1.3, 1.3, 5)) == "5 rounds, no spread"
    assert interval_text(r(math.nan, math.nan, 1)) == "1 round, no interval"
    assert interval_text(r(math.nan, math.nan, 0)) == "1 collect, no interval"


def test_search_measurer_times_a_combination_against_the_best_so_far(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each search step is a worker timing the combination (other) against the best so far
    (base); its ratio comes back as an Interval (a cost ratio with per_token); the search's
    budget is shared out and, once spent, the answer is BUDGET."""
    import json

    import tracekit.advise.levers as L
    from tracekit.advise.search import BUDGET, Interval
    from tracekit.collectors.config import config_from_dict

    run = Path(__file__).resolve().parents[1] / "fixtures" / "cpu-tiny-fp32-naive"
    base_cfg = json.loads((run / "manifest.json").read_text())["config"]
    specs: list[dict[str, object]] = []
    ratios = iter([[0.9, 0.92, 0.88], [1.1]])

    def worker(spec: Path, res: Path) -> list[str]:
        specs.append(json.loads(spec.read_text()))
        from tracekit.collectors.paired_stats import ratio_interval

        iv = ratio_interval(next(ratios)).to_dict()
        doc = json.dumps({"status": "ok", "interval": iv})
        return [sys.executable, "-c", f"open({str(res)!r}, 'w').write({doc!r})"]

    monkeypatch.setattr(MP, "worker_command", worker)

    def config(names: tuple[str, ...]) -> dict[str, object]:
        return L.combine([L.LEVERS[n] for n in names], base_cfg, 2)

    def tokens(names: tuple[str, ...]) -> float:
        return float(int(config(names)["batch"]))  # type: ignore[call-overload]

    now = [0.0]
    opts = MP.PairedOptions(budget_s=100.0)  # the search: 50 s
    m = MP.SearchMeasurer(config, tokens, tmp_path, opts, 2, per_token=True, clock=lambda: now[0])
    got = m(("sdpa",), ("sdpa", "batch"))
    assert isinstance(got, Interval) and got.rounds == 3 and got.has_interval
    # a cost ratio: the step ratio over the tokens-per-step ratio (batch x2)
    assert got.ratio == pytest.approx(0.8997 / 2, abs=1e-4)
    spec = specs[0]
    assert spec["base"] == config(("sdpa",)) and spec["other"] == config(("sdpa", "batch"))
    assert spec["rounds"]["budget_s"] == pytest.approx(25.0)  # type: ignore[index]
    assert (tmp_path / "paired" / "search-sdpa+batch.json").is_file()
    config_from_dict(spec["other"])  # type: ignore[arg-type]  # the worker can build it
    now[0] = 30.0
    one = m(("sdpa",), ("sdpa", "adamw-fused"))  # one round: no interval
    assert isinstance(one, Interval) and one.rounds == 1 and not one.has_interval
    assert specs[1]["rounds"]["budget_s"] == pytest.approx(20.0)  # type: ignore[index]
    now[0] = 50.0
    assert m(("sdpa",), ("sdpa", "compile")) == BUDGET and len(specs) == 2
