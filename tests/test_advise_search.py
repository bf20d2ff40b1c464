"""The measured search for the best configuration (tracekit.advise.search), on stood-in
timings: a measurer that returns scripted paired rounds (their interval computed as the
paired worker computes it), never a collect."""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence

import pytest

import tracekit.advise.search as S
from tracekit.collectors.paired_stats import ratio_interval


def iv(*ratios: float) -> S.Interval:
    """The interval of scripted rounds' ratios, as the paired worker computes it."""
    r = ratio_interval(ratios)
    lo, hi = (r.lo, r.hi) if r.rounds >= 2 else (math.nan, math.nan)
    return S.Interval(r.ratio, lo, hi, r.rounds)


def around(x: float, spread: float = 0.02, n: int = 6) -> S.Interval:
    """``n`` rounds alternating ``x`` ± ``spread`` (relative)."""
    return iv(*[x * (1 + spread * (-1) ** i) for i in range(n)])


class Scripted:
    """Stands in for the paired worker: each combination's ratio against the best so far
    from ``script`` (keyed by the combination's levers, in the order tried); records the
    calls."""

    def __init__(self, script: Mapping[tuple[str, ...], S.Interval | str]) -> None:
        self.script = script
        self.calls: list[tuple[tuple[str, ...], tuple[str, ...]]] = []

    def __call__(self, best: tuple[str, ...], tried: tuple[str, ...]) -> S.Interval | str:
        self.calls.append((best, tried))
        return self.script[tried]


# the issue's H200 table: measured alone (ratio, spread) and predicted
ISSUE = [
    S.Candidate("sdpa", around(0.84), 0.95),
    S.Candidate("bf16", around(1.23), 0.88),
    S.Candidate("compile", around(0.69), 0.95),
    S.Candidate("adamw-fused", around(0.95), 0.93),
    S.Candidate("checkpoint", around(1.61), 1.24),
    S.Candidate("cuda-graphs", around(1.00), 0.99),
    S.Candidate("batch", around(1.56), 1.83, "tokens"),
    S.Candidate("grad-accum", around(1.87), 1.86, "tokens"),
]


def test_the_issue_case_keeps_compile_and_names_sdpa_undoing_its_gain() -> None:
    # SDPA on top of compile is slower than compile alone; fused AdamW still adds
    m = Scripted({("compile", "sdpa"): around(1.22), ("compile", "adamw-fused"): around(0.96)})
    found = S.search(ISSUE, m)
    assert found.order == ("compile", "sdpa", "adamw-fused")  # only the sure gains, best first
    assert m.calls == [(("compile",), ("compile", "sdpa")),
                       (("compile",), ("compile", "adamw-fused"))]  # fmt: skip
    assert found.best == ("compile", "adamw-fused") and found.stopped == "nothing more gains"
    assert found.ratio is not None and found.ratio.ratio == pytest.approx(0.69 * 0.96, rel=1e-3)
    assert found.ratio.ratio < ISSUE[2].alone.ratio  # never slower than the best single lever
    sdpa, fused = found.steps
    assert (sdpa.kept, sdpa.why, sdpa.levers) == (False, "slower than the best",
                                                  ("compile", "sdpa"))  # fmt: skip
    assert fused.kept and fused.vs_baseline == found.ratio
    (note,) = found.interactions
    assert note.startswith("sdpa on top of compile: ×1.22 [")
    assert note.endswith("6 rounds] (alone ×0.84 [0.82–0.86, 6 rounds]): it undoes part of "
                         "compile's gain")  # fmt: skip


def test_a_lever_with_no_measurable_gain_on_the_best_is_named_and_left_out() -> None:
    m = Scripted({("compile", "sdpa"): iv(0.97, 1.03, 0.99, 1.01)})
    found = S.search(ISSUE[:3], m)
    assert found.best == ("compile",) and found.ratio == ISSUE[2].alone
    assert found.steps[0].why == "no measurable gain on the best"
    assert found.interactions[0].endswith("its gain does not add")


def test_predictions_break_ties_between_equal_measured_gains() -> None:
    a = S.Candidate("sdpa", around(0.801), 0.9)
    b = S.Candidate("compile", around(0.799), 0.7)
    c = S.Candidate("adamw-fused", around(0.80), math.nan)  # not modelled: last of the tie
    assert [x.lever for x in S.order([a, c, b])] == ["compile", "sdpa", "adamw-fused"]
    d = S.Candidate("bf16", around(0.70), 0.99)  # a measured gain beats any prediction
    assert S.order([a, b, d])[0].lever == "bf16"


def test_alternatives_are_not_measured_together() -> None:
    cands = [S.Candidate("batch", around(0.6), 0.6, "tokens"),
             S.Candidate("grad-accum", around(0.7), 0.7, "tokens"),
             S.Candidate("compile", around(0.8), 0.9)]  # fmt: skip
    m = Scripted({("batch", "compile"): around(0.9)})
    found = S.search(cands, m)
    assert found.best == ("batch", "compile")
    assert m.calls == [(("batch",), ("batch", "compile"))]
    assert found.steps[0].vs_best is None and "alternative" in found.steps[0].why


def test_the_budget_ends_the_search_with_the_best_so_far() -> None:
    cands = ISSUE[:4]
    m = Scripted({("compile", "sdpa"): around(0.9), ("compile", "sdpa", "adamw-fused"): S.BUDGET})
    found = S.search(cands, m)
    assert found.best == ("compile", "sdpa") and found.stopped == S.BUDGET
    assert len(found.steps) == 1


def test_a_failed_step_is_recorded_and_the_search_goes_on() -> None:
    m = Scripted({("compile", "sdpa"): "out of memory", ("compile", "adamw-fused"): around(0.9)})
    found = S.search(ISSUE[:4], m)
    assert found.best == ("compile", "adamw-fused")
    assert found.steps[0].why == "not measured: out of memory" and found.steps[0].vs_best is None


def test_no_gain_alone_keeps_the_baseline_and_one_round_is_no_gain() -> None:
    one = S.Candidate("compile", iv(0.5), 0.9)  # one round: no interval, no sure gain
    assert one.alone.rounds == 1 and not one.alone.has_interval and not one.alone.faster
    slow = S.Candidate("bf16", around(1.2), 0.9)
    m = Scripted({})
    found = S.search([one, slow], m)
    assert (found.best, found.ratio, found.steps) == ((), None, ())
    assert found.stopped == "no lever gained alone" and m.calls == []


def test_chained_interval() -> None:
    a, b = S.Interval(0.8, 0.76, 0.84, 5), S.Interval(0.9, 0.87, 0.93, 7)
    c = a.chain(b)
    assert c.ratio == pytest.approx(0.72) and c.rounds == 5
    h = math.hypot(math.log(0.84 / 0.76) / 2, math.log(0.93 / 0.87) / 2)
    assert (c.lo, c.hi) == pytest.approx((0.72 * math.exp(-h), 0.72 * math.exp(h)))
    # wider than either alone
    assert math.log(c.hi / c.lo) > max(math.log(0.84 / 0.76), math.log(0.93 / 0.87))
    lone = a.chain(S.Interval(0.9, math.nan, math.nan, 1))
    assert lone.ratio == pytest.approx(0.72) and not lone.has_interval and lone.rounds == 1
    assert a.scaled(0.5) == S.Interval(0.4, 0.38, 0.42, 5)


def _random_case(rng: random.Random) -> tuple[list[S.Candidate], Scripted]:
    names = ("sdpa", "bf16", "compile", "adamw-fused", "checkpoint", "cuda-graphs")
    cands = [S.Candidate(n, around(rng.uniform(0.5, 1.3), rng.uniform(0, 0.1)),
                         rng.uniform(0.5, 1.3)) for n in names]  # fmt: skip

    class Any_(Scripted):
        def __call__(self, best: Sequence[str], tried: Sequence[str]) -> S.Interval | str:
            return around(rng.uniform(0.7, 1.3), rng.uniform(0, 0.1))

    return cands, Any_({})


@pytest.mark.parametrize("seed", range(40))
def test_the_recommendation_is_never_slower_than_a_single_lever_that_gained(seed: int) -> None:
    cands, m = _random_case(random.Random(seed))
    found = S.search(cands, m)
    gained = [c.alone.ratio for c in cands if c.alone.faster]
    if not gained:
        assert found.best == ()
        return
    assert found.ratio is not None and found.ratio.ratio <= min(gained) + 1e-12
    assert found.best[0] == S.order(cands)[0].lever
    kept = [s for s in found.steps if s.kept]
    assert all(s.vs_best is not None and s.vs_best.faster for s in kept)
    assert len(found.best) == 1 + len(kept)
