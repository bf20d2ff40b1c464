"""Leave nothing behind (collectors/observer.py): CUPTI's teardown arranged before the
passes, what is switched on after them against before, and the residual of the steps timed
after them. The GPU-only pieces (Kineto's teardown, CUPTI) are stood in: the policy is plain
data, the state is read from torch's own registries, which a CPU run has too."""

from __future__ import annotations

import math
import random
import statistics
from typing import Any

import pytest
import torch
from torch import nn
from torch.optim.optimizer import register_optimizer_step_post_hook

from tracekit.collectors import observer as O
from tracekit.collectors.runsummary import observer_lines

# ------------------------------------------------------------------ CUPTI's teardown


def test_teardown_is_set_unless_the_environment_says_otherwise() -> None:
    env: dict[str, str] = {}
    t = O.arrange_teardown("13.0", graphs=False, env=env)
    assert env == {"TEARDOWN_CUPTI": "1"} and t.enabled and t.set_by == "tracekit"
    assert O.teardown_now(env) is None
    # the user's (or torch's) value is kept, and said
    env = {"TEARDOWN_CUPTI": "0"}
    t = O.arrange_teardown("13.0", graphs=False, env=env)
    assert env == {"TEARDOWN_CUPTI": "0"} and not t.enabled and t.set_by == "environment"
    assert "CUPTI stays attached" in t.why
    assert O.teardown_now(env) == (
        "TEARDOWN_CUPTI=0 at the end of the run: CUPTI stayed attached after the passes"
    )


@pytest.mark.parametrize(("cuda", "on"), [("12.4", False), ("11.8", False), ("12.6", True),
                                          ("13.0", True), (None, False)])  # fmt: skip
def test_cuda_graphs_keep_cupti_before_cuda_12_6(cuda: str | None, on: bool) -> None:
    """torch's own rule: a CUPTI re-init after teardown crashed with CUDA graphs before
    CUDA 12.6, so teardown stays off there (and where the version is unknown)."""
    env: dict[str, str] = {}
    t = O.arrange_teardown(cuda, graphs=True, env=env)
    assert t.enabled is on and env["TEARDOWN_CUPTI"] == ("1" if on else "0")
    if not on:
        assert "CUDA graphs" in t.why and t.set_by == "tracekit (CUDA graphs)"


def test_a_stopped_profiler_settles_its_teardown(monkeypatch: pytest.MonkeyPatch) -> None:
    """Profiler.__exit__ makes one CUDA call after Kineto stopped (its deferred teardown
    completes there); stood in on the CPU by recording the call."""
    from tracekit.collectors import profiler as P

    calls: list[Any] = []
    monkeypatch.setattr(P, "settle", lambda device: calls.append(device))
    prof = P.Profiler(P.ProfilerConfig(wait=0, warmup=0, active=1), out_dir=P.Path("/tmp"),
                      device=torch.device("cpu"))  # fmt: skip
    prof._prof = _StoppedProfile()  # type: ignore[assignment]
    prof.__exit__(None, None, None)
    assert calls == [torch.device("cpu")]


class _StoppedProfile:
    def __exit__(self, *a: Any) -> None:
        return None


# --------------------------------------------------------------- what is switched on


def test_state_counts_hooks_and_left_behind_names_the_difference() -> None:
    model = nn.Linear(2, 2)
    before = O.state(model)
    assert before["profiler_enabled"] is False
    h1 = model.register_forward_hook(lambda *a: None)
    h2 = register_optimizer_step_post_hook(lambda *a: None)
    try:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
            during = O.state(model)
        assert during["profiler_enabled"] is True
        after = O.state(model)
        assert O.left_behind(before, during) == [
            "profiler enabled", "1 more optimizer hooks", "1 more model hooks"
        ]  # fmt: skip
        assert O.left_behind(before, after) == ["1 more optimizer hooks", "1 more model hooks"]
    finally:
        h1.remove()
        h2.remove()
    assert O.left_behind(before, O.state(model)) == []


# ------------------------------------------------------------------ the residual


def test_residual_is_the_ratio_of_medians_with_an_interval() -> None:
    rng = random.Random(1)
    before = [20.0 + rng.gauss(0, 0.3) for _ in range(20)]
    slowed = [x * 1.25 for x in before[:10]]
    r = O.residual(before, slowed, before_steps=(2, 21), after_steps=(33, 42))
    assert r is not None and r.ratio == pytest.approx(1.25, rel=0.03)
    assert r.lo > 1.15 and r.beyond and r.n_before == 20 and r.n_after == 10
    assert r.sentence().startswith("residual after the profiler passes +2")
    assert "(steps 33-42 against 2-21)" in r.sentence()
    assert "beyond 3 %: the steps after the passes ran slower (the interval" in r.sentence()
    same = O.residual(before, before[::-1][:10])
    assert same is not None and same.lo < 1.0 < same.hi and not same.beyond
    assert "within 3 % or within the noise (the interval holds the steps' spread" in (
        same.sentence()
    )
    assert O.residual(before, [20.0, 21.0]) is None  # too few steps after
    # deterministic: the same figures every time
    assert O.residual(before, slowed) == O.residual(before, slowed)


def test_the_drift_between_windows_after_the_passes_widens_the_interval() -> None:
    """On a host whose speed drifts between seconds, two windows seconds apart differ with
    no pass between them: the light pass's cost rounds' unprofiled windows (after the
    passes too) show by how much, and the residual's interval takes it in."""
    rng = random.Random(2)
    before = [20.0 + rng.gauss(0, 0.1) for _ in range(20)]
    after = [22.0 + rng.gauss(0, 0.1) for _ in range(10)]  # +10 %, steady steps
    steady = O.residual(before, after, windows=[22.0, 22.1, 21.9, 22.05, 21.95, 22.0])
    assert steady is not None and steady.beyond and steady.drift_windows == 8
    assert steady.drift_pct is not None and steady.drift_pct < 1.0
    # the same steps, on a host whose windows wander by ~15 % (as the H200's did)
    drifting = O.residual(before, after, windows=[18.0, 25.0, 21.0, 26.0, 19.5, 23.5])
    assert drifting is not None and not drifting.beyond
    assert drifting.ratio == steady.ratio and drifting.lo < 1.0 < drifting.hi
    # sqrt(2) x 1.645 x sigma each side, sigma = 1.4826 x MAD of the 8 log levels
    d = O.drift(after, [18.0, 25.0, 21.0, 26.0, 19.5, 23.5])
    assert d is not None and d.windows == 8
    logs = sorted(math.log(x) for x in [*O.drift_levels(after), 18.0, 25.0, 21.0, 26.0, 19.5, 23.5])
    mid = statistics.median(logs)
    assert d.sigma == pytest.approx(1.4826 * statistics.median(abs(x - mid) for x in logs))
    half = 1.6449 * math.sqrt(2) * d.sigma
    assert drifting.hi == pytest.approx(drifting.ratio * math.exp(half))
    assert "the interval holds the host's drift between windows" in drifting.sentence()
    assert "over 8 windows after the passes" in drifting.sentence()
    # fewer than 3 other windows: blocks of one window show jitter, not drift: not used
    assert O.drift(after, [22.0, 22.1]) is None
    assert O.residual(before, after, windows=[22.0, 22.1]) == O.residual(before, after)


def test_the_summary_warns_about_a_residual_and_what_was_left() -> None:
    res = O.residual([10.0] * 5, [11.0] * 5)
    assert res is not None
    cupti = "TEARDOWN_CUPTI=0 at the end of the run: x"
    obs = {
        "residual": res.to_dict(),
        "left_behind": ["1 more model hooks"],
        "cupti_attached": cupti,
    }
    lines = observer_lines(obs)
    assert lines[0].startswith("warning: residual after the profiler passes +10.0 %")
    assert lines[1] == (
        "warning: left behind by the profiler passes: 1 more model hooks; TEARDOWN_CUPTI=0 "
        "at the end of the run: x"
    )
    ranked = observer_lines({"rank": 1, "residual": None, "residual_absent": "too few"})
    assert ranked == ["rank 1: residual not checked: too few"]
    assert observer_lines(None) == []


def test_a_multi_rank_run_states_its_largest_residual() -> None:
    """A rank whose timing carries a residual skews the communication cost and the
    straggler: the run's observer block is that rank's, with every rank's figure."""
    from tracekit.collectors.dist_manifest import worst_residual

    small = O.residual([10.0] * 5, [10.1] * 5)
    big = O.residual([10.0] * 5, [12.0] * 5)
    assert small is not None and big is not None
    ranks = [
        {"rank": 0, "observer": {"residual": small.to_dict(), "left_behind": []}},
        {"rank": 1, "observer": {"residual": big.to_dict(), "left_behind": ["profiler enabled"]}},
        {"rank": 2, "observer": None},
    ]
    got = worst_residual(ranks)
    assert got is not None and got["rank"] == 1 and got["residual"]["pct"] == pytest.approx(20)
    assert got["left_behind"] == ["profiler enabled"]
    assert got["residual_pct_by_rank"] == {"0": pytest.approx(1.0), "1": pytest.approx(20.0)}
    assert worst_residual([{"rank": 0, "observer": None}]) is None
    assert observer_lines(got)[0].startswith("warning: rank 1: residual after the profiler")
