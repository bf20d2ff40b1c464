"""The light pass's cost measured in interleaved windows (collectors/light_cost.py): the
schedule of the rounds, the paired ratio from step times, the recorder switched between
the steps' timing marks, and the figure in collect's and ``tracekit.profile()``'s manifest,
summary and report. On the CPU with CUPTI stood in (tests/fake_cupti.py), as on a GPU."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from torch import nn

import tracekit
from tracekit.cli import main
from tracekit.collectors import cupti_pass as C
from tracekit.collectors import light_cost as L
from tracekit.collectors import passes
from tracekit.errors import UsageError
from tracekit.reports.verdict import timeline_text
from tracekit.summary.timeline import TimelineFacts

from . import fake_cupti as F
from .test_cupti_pass import FAST, _collect, on_gpu  # noqa: F401  (the fixture)

# ------------------------------------------------------------------ the schedule


def test_rounds_alternate_their_order() -> None:
    r = L.CostRounds(rounds=4, window=2, settle=0)
    U, Li = L.UNPROFILED, L.LIGHT
    assert r.steps == 16
    assert r.plan() == [U, U, Li, Li, Li, Li, U, U, U, U, Li, Li, Li, Li, U, U]
    cfg = r.config()  # every step recorded, so the drivers time them all
    assert cfg.steps == 16 and all(cfg.is_active(i) for i in range(16))
    assert L.CostRounds(0).steps == 0 and L.CostRounds().steps == 60  # 6 x 2 x (2 + 3)
    # each window's first steps settle (CUPTI just enabled) and are not timed
    s = L.CostRounds(rounds=2, window=2, settle=1)
    assert s.plan() == [U] * 3 + [Li] * 3 + [Li] * 3 + [U] * 3
    assert s.timed() == [False, True, True] * 4


@pytest.mark.parametrize("rounds, window, settle", [(1, 3, 2), (-1, 3, 2), (4, 0, 2), (4, 3, -1)])
def test_bad_rounds_are_usage_errors(rounds: int, window: int, settle: int) -> None:
    with pytest.raises(UsageError, match="light-cost"):
        L.CostRounds(rounds, window, settle)


def test_the_cost_is_the_median_of_the_rounds_ratios() -> None:
    r = L.CostRounds(rounds=4, window=2, settle=0)
    # round by round (plan order): U U L L | L L U U | U U L L | L L U U
    ms = [10, 10, 11, 11,   12, 12, 10, 10,   20, 20, 21, 21,   33, 33, 30, 30]  # fmt: skip
    c = L.light_cost([float(x) for x in ms], r, "cupti-kernels")
    assert c is not None
    assert c["round_ratios"] == pytest.approx([1.1, 1.2, 1.05, 1.1])
    assert c["unprofiled_ms"] == [10, 10, 20, 30] and c["light_ms"] == [11, 12, 21, 33]
    assert c["ratio"] == pytest.approx(1.1) and c["pct"] == pytest.approx(10.0)
    assert c["iqr"] == pytest.approx([1.0875, 1.125])
    assert (c["rounds"], c["window_steps"], c["recorder"]) == (4, 2, "cupti-kernels")
    assert L.cost_text(c) == "x1.100 (IQR 1.088-1.125), 4 interleaved rounds of 2 + 2 timed steps"
    # the settling steps are left out: a slow first step after the switch counts nowhere
    s = L.CostRounds(rounds=2, window=2, settle=1)
    slow = [99.0, 10, 10, 99.0, 11, 11, 99.0, 12, 12, 99.0, 10, 10]
    got = L.light_cost(slow, s, "cupti-kernels")
    assert got is not None and got["round_ratios"] == pytest.approx([1.1, 1.2])
    assert got["settle_steps"] == 1
    # a recorder that failed, or steps missing: no figure
    assert L.light_cost([float(x) for x in ms], r, "kineto-cuda", ["refused"]) is None
    assert L.light_cost([1.0] * 15, r, "kineto-cuda") is None


class Switch:
    """A recorder that logs when it is switched, against the step ends so far."""

    def __init__(self) -> None:
        self.log: list[tuple[str, int]] = []
        self.steps = 0

    def on(self) -> None:
        self.log.append(("on", self.steps))

    def off(self) -> None:
        self.log.append(("off", self.steps))


def test_the_pass_switches_between_windows_outside_the_timed_steps(tmp_path: Path) -> None:
    sw = Switch()
    r = L.CostRounds(rounds=3, window=2, settle=0)
    cost = L.CostPass(r, tmp_path, device=torch.device("cpu"), recorder="x", switch=sw)

    def step(i: int) -> torch.Tensor:
        sw.steps += 1
        return torch.zeros(())

    ms = passes.profiled_steps(step, cost, 0)
    assert len(ms) == r.steps
    # U U | L L | L L | U U | U U | L L: on after 2 steps, off after 6, on after 10, off at exit
    assert sw.log == [("on", 2), ("off", 6), ("on", 10), ("off", 12)]
    assert cost.notes == []


def test_a_failing_switch_leaves_no_figure(tmp_path: Path) -> None:
    class Refusing(Switch):
        def on(self) -> None:
            raise RuntimeError("CUPTI_ERROR_NOT_INITIALIZED")

    r = L.CostRounds(rounds=2, window=1, settle=0)
    cost = L.CostPass(r, tmp_path, device=torch.device("cpu"), recorder="x", switch=Refusing())
    ms = passes.profiled_steps(lambda i: torch.zeros(()), cost, 0)
    assert len(ms) == 4 and "could not be switched on" in cost.notes[0]
    assert L.light_cost(ms, r, "x", cost.notes) is None


def test_the_cupti_switch_drops_its_records(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = F.FakeCupti()
    F.install(monkeypatch, fake)
    sw = L.CuptiSwitch(fake)
    sw.on()
    assert fake.enabled == {1, 2, 10} and fake.registrations == 1
    fake.step_work()
    sw.off()
    assert fake.enabled == set() and fake.flushes == 1 and fake.pending == []
    assert sw.recorder.events == []  # handed over and dropped


def test_the_switch_follows_the_light_pass_recorder(monkeypatch: pytest.MonkeyPatch) -> None:
    F.install(monkeypatch, F.FakeCupti())
    monkeypatch.delenv(C.RECORDER_ENV, raising=False)
    assert L.make_switch(C.CUPTI_RECORDER)[1] == C.CUPTI_RECORDER
    assert L.make_switch(C.KINETO_RECORDER)[1] == C.KINETO_RECORDER
    F.install(monkeypatch, None)  # cupti-python missing: Kineto's profiler, as the pass
    sw, rec = L.make_switch(C.CUPTI_RECORDER)
    assert rec == C.KINETO_RECORDER and isinstance(sw, L.KinetoSwitch)


# ------------------------------------------------------------ collect, profile()


def test_collect_states_the_interleaved_cost(
    tmp_path: Path,
    on_gpu: Any,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    fake = F.FakeCupti()
    on_gpu(fake)
    m, said = _collect(tmp_path / "run", capsys, "--light-cost-rounds", "3", "--steps", "3")
    met = m["metrics"]
    c = met["timeline_cost"]
    assert (c["rounds"], c["window_steps"], c["recorder"]) == (3, 3, "cupti-kernels")
    assert len(c["round_ratios"]) == 3 and c["ratio"] > 0
    # the rounds' unprofiled windows measure the drift the residual's interval takes in
    assert m["observer"]["residual"]["drift_windows"] == 3 + 2
    assert met["timeline_overhead_pct"] == pytest.approx(c["pct"])
    assert met["timeline_overhead_basis"] == L.INTERLEAVED
    # the light pass's one trace; the cost windows' records dropped; 12 more steps
    assert m["artifacts"]["timeline_traces"] == [m["artifacts"]["timeline_trace"]]
    # U x 5 | L x 5 (on) | L x 5 | U x 5 (off) | U x 5 | L x 5 (on, off): registered by
    # the pass and twice here
    assert fake.registrations == 3 and fake.enabled == set()
    assert m["total_steps"] == 1 + 3 + 4 + 30 + 4 + 10  # + the residual check
    assert f"its cost {L.cost_text(c)}" in said
    # the report says it on its timeline line, and judges the light pass by it
    facts = TimelineFacts(
        source="light", requested="auto", reason=None, brief=None, light_trace=None,
        step_markers=None, matched_pct=None, joined_pct=None, recorder="cupti-kernels",
        light_step_time_ms=12.0, light_measured_step_time_ms=None, full_step_time_ms=None,
        full_measured_step_time_ms=None, unprofiled_step_time_ms=10.0, per_step=[], notes=[],
        light_cost={**c, "ratio": 1.2, "pct": 20.0, "iqr": [1.1, 1.3]},
    )  # fmt: skip
    assert facts.faithful is False and facts.vs_unprofiled_pct == pytest.approx(20.0)
    assert "costs the step x1.200 (IQR 1.100-1.300, 3 interleaved rounds" in str(facts.warning())
    drift = TimelineFacts(**{**facts.__dict__, "light_cost": {**c, "pct": 2.0, "ratio": 1.02}})
    assert drift.faithful is True and drift.warning() is None  # +20 % apart is the drift


def test_without_rounds_the_cost_is_the_windows_apart(
    tmp_path: Path,
    on_gpu: Any,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    on_gpu(F.FakeCupti())
    m, said = _collect(tmp_path / "run", capsys, "--light-cost-rounds", "0")
    met = m["metrics"]
    assert met["timeline_cost"] is None and met["timeline_overhead_basis"] == L.APART
    assert "against the unprofiled steps, timed apart, not interleaved" in said
    assert m["total_steps"] == 1 + 2 + 4 + 4 + 10  # + the residual check


def test_bad_light_cost_rounds_is_a_one_line_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["collect", *FAST, "--light-cost-rounds", "1"]) == 2
    assert "--light-cost-rounds must be 0 (off) or at least 2" in capsys.readouterr().err


def test_profile_runs_the_rounds_where_the_loop_runs_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = F.FakeCupti()
    F.session_as_on_cuda(monkeypatch, fake)
    model = nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(4, 8)

    def loop(out: Path, n: int, rounds: int = 2) -> Any:
        opts: dict[str, Any] = dict(
            wait=0, profile_warmup=0, active=1, ceilings=False, quiet=True,
            memory_timeline=False, light_cost_rounds=rounds,
        )  # fmt: skip
        with tracekit.profile(out, **opts) as prof:
            for _ in range(n):
                fake.step_work()
                model(x).sum().backward()
                opt.step()
                opt.zero_grad()
                prof.step()
        return prof.manifest

    # fitted: 3 warm-up, 5 timed, light 1, full 1 (10), then 10 in the residual check, then
    # 20 in the cost rounds
    m = loop(tmp_path / "a", 50)
    assert m["status"] == "ok" and m["schedule_steps"] == 40
    assert m["schedule"][-1] == {"phase": "light_cost", "steps": [21, 40]}
    assert m["metrics"]["timeline_cost"]["rounds"] == 2
    assert m["metrics"]["timeline_overhead_basis"] == L.INTERLEAVED
    # a loop that ends in the rounds is complete, without the figure
    m = loop(tmp_path / "b", 30)
    assert m["status"] == "ok" and m["total_steps"] == 30
    assert m["metrics"]["timeline_cost"] is None
    assert m["metrics"]["timeline_overhead_basis"] == L.APART
    assert fake.enabled == set()
    # with 3 rounds, their 3 unprofiled windows and the residual check's 2 blocks of 5
    # steps measure the drift between windows that the residual's interval takes in
    m = loop(tmp_path / "c", 50, rounds=3)
    res = m["observer"]["residual"]
    assert len(m["metrics"]["timeline_cost"]["unprofiled_ms"]) == 3
    assert res["drift_windows"] == 5 and res["drift_pct"] is not None
    assert "the interval holds the host's drift between windows" in res["sentence"]


def _facts(light_ms: float, unprofiled_ms: float, cost: dict[str, Any]) -> TimelineFacts:
    return TimelineFacts(
        source="light", requested="auto", reason=None, brief=None, light_trace=None,
        step_markers=None, matched_pct=None, joined_pct=None, recorder="cupti-kernels",
        light_step_time_ms=light_ms, light_measured_step_time_ms=None, full_step_time_ms=None,
        full_measured_step_time_ms=None, unprofiled_step_time_ms=unprofiled_ms, per_step=[],
        notes=[], light_cost=cost,
    )  # fmt: skip


def test_light_steps_timed_apart_outside_the_cost_are_explained() -> None:
    """Three default collects on an H200 (b8 s128 fp32-naive): the light pass's steps
    against the unprofiled ones timed a second apart, beside the cost its interleaved
    rounds measured. Where the two disagree the report says both and why."""
    c2 = {"ratio": 1.062, "pct": 6.2, "iqr": [1.058, 1.177], "rounds": 6,
          "unprofiled_ms": [28.0, 38.2, 33.9, 39.8, 44.1, 42.3]}  # fmt: skip
    f = _facts(39.54, 30.30, c2)  # +30.5 %, outside [1.0 x 0.97, 1.177 x 1.03]
    assert f.apart_agrees is False and f.faithful is True and f.warning() is None
    assert f.apart_note() == (
        "the light pass's steps (39.54 ms) ran +30.5 % against the unprofiled steps timed "
        "apart (30.30 ms), outside its cost x1.062 (IQR 1.058-1.177) measured in 6 "
        "interleaved rounds: the rest is the host's speed in the light pass's window, not the "
        "recorder's cost; the unprofiled windows of those rounds ran 28.00-44.10 ms"
    )
    line = timeline_text(SimpleNamespace(timeline_facts=f))  # type: ignore[arg-type]
    assert line is not None and "its steps +30.5 % timed apart (the host's speed" in line
    # -11.6 % against a cost of x1.181 [1.110-1.256]: also outside (below 1 x 0.97)
    c3 = {"ratio": 1.181, "pct": 18.1, "iqr": [1.110, 1.256], "rounds": 6}
    assert "ran -11.6 % against" in str(_facts(33.88, 38.32, c3).apart_note())
    # +0.8 % against x1.069 [1.010-1.126]: within (the IQR stretched to 1, then 3 %)
    c1 = {"ratio": 1.069, "pct": 6.9, "iqr": [1.010, 1.126], "rounds": 6}
    ok = _facts(43.83, 43.49, c1)
    assert ok.apart_agrees is True and ok.apart_note() is None
    assert "timed apart" not in str(timeline_text(SimpleNamespace(timeline_facts=ok)))  # type: ignore[arg-type]
    assert _facts(43.83, 43.49, None).apart_agrees is None  # type: ignore[arg-type]
