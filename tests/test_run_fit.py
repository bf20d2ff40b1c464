"""The schedule fitted to a script of unknown length (`tracekit run` and `tracekit.profile()`
without --steps/--warmup): 3 warm-up steps, 5 steps timed before any pass, the profiled
passes, then the residual check where the script runs on (collectors/session_windows.py
`Phases(fit=True)`).

On this CPU there is no light pass and no snapshot: 3 warm-up + 5 timed (4-8) + 4 profiled
(wait 1, warm-up 1, active 2) + 2 in the category step, then the residual check 15-24; at
least 14 steps. The
scripts are tests/scripts/cnn_bn.py (a plain CNN, its step count its first argument) and
mlp.py, run with their defaults but for the ceilings."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import tracekit
from tracekit.cli import main
from tracekit.collectors import session_windows as W
from tracekit.collectors.profiler import ProfilerConfig
from tracekit.errors import TracekitError

SCRIPTS = Path(__file__).resolve().parent / "scripts"
QUIET = ("--no-ceilings", "-q")


def _run(
    capsys: pytest.CaptureFixture[str],
    out: Path,
    script: str,
    *args: str,
    opts: tuple[str, ...] = (),
) -> tuple[int, dict[str, Any] | None, str, str]:
    rc = main(["run", *QUIET, *opts, "-o", str(out), "--", "python", str(SCRIPTS / script), *args])
    o, e = capsys.readouterr()
    mpath = out / "manifest.json"
    return rc, (json.loads(mpath.read_text()) if mpath.exists() else None), o, e


# ------------------------------------------------------------------ the schedule


def test_fitted_phases_time_first_then_profile() -> None:
    ph = W.Phases(3, 20, ProfilerConfig(), 1, light=True, fit=True)  # as on CUDA
    # 3 warm-up, 5 timed before any pass, light 4, full 4, category 2 (the snapshot over
    # its last); then, where the loop runs on, the residual check (10) and the light pass's
    # cost rounds (6 x 2 x 5)
    assert (ph.timed, ph.light, ph.full, ph.category, ph.snapshot, ph.complete_at) == (
        3, 8, 12, 16, 17, 18,
    )  # fmt: skip
    assert (ph.minimum, ph.timed_end, ph.residual, ph.cost, ph.done) == (18, 8, 18, 28, 88)
    assert ph.to_manifest() == [
        {"phase": "warmup", "steps": [1, 3]}, {"phase": "timed", "steps": [4, 8]},
        {"phase": "timeline", "steps": [9, 12]}, {"phase": "profiled", "steps": [13, 16]},
        {"phase": "category", "steps": [17, 18]}, {"phase": "snapshot", "steps": [18, 18]},
        {"phase": "residual", "steps": [19, 28]}, {"phase": "light_cost", "steps": [29, 88]},
    ]  # fmt: skip
    assert ph.describe() == (
        "3 warm-up, 5 timed before any pass, 4 in the light timeline pass (CUDA only), 4 "
        "profiled (wait 1, warm-up 1, active 2, repeat 1), 2 in the category step (memory by "
        "category), the memory snapshot over the category step's last 1: 18 steps; then 10 "
        "in the residual check and 60 in the light pass's cost rounds where the loop runs on"
    )
    # two snapshot steps take the category step's two; three, one more
    assert (W.Phases(3, 20, ProfilerConfig(), 2, light=True, fit=True).minimum) == 18
    three = W.Phases(3, 20, ProfilerConfig(), 3, light=True, fit=True)
    assert (three.snapshot, three.snapshot_end, three.minimum) == (16, 19, 19)
    # no light pass, no cost rounds
    assert W.Phases(3, 20, ProfilerConfig(light_cost_rounds=0), 1, light=True, fit=True).done == 28
    # the probes in the warm-up steps after the first: the timed steps carry none
    assert (ph.probe_from, ph.probe_to) == (1, 3) and ph.probed() == "the warm-up steps 2-3"
    assert ph.reached(10) == "2 of the 4 steps of the light timeline pass"
    assert ph.lowered() == (
        3, ["--warmup 1 --steps 1", "--profile-wait 0", "--profile-warmup 0",
            "--profile-active 1", "--no-memory-timeline", "--single-pass",
            "--no-memory-snapshot"],
    )  # fmt: skip
    cpu = W.Phases(3, 20, ProfilerConfig(), 0, light=False, fit=True)
    assert (cpu.minimum, cpu.done) == (14, 24)
    assert cpu.lowered(python=True) == (
        3, ["warmup=1 steps=1", "wait=0", "profile_warmup=0", "active=1", "memory_timeline=False"]
    )  # fmt: skip
    # one warm-up step, without the category step: the full pass's steps are probed
    bare = W.Phases(1, 20, ProfilerConfig(memory_timeline=False), 0, light=False, fit=True)
    assert (bare.probe_from, bare.probe_to, bare.minimum) == (6, 10, 10)
    # the fixed schedule: the same order, its own warm-up and timed steps
    fixed = W.Phases(5, 20, ProfilerConfig(), 1, light=True)
    assert (fixed.timed, fixed.timed_end, fixed.light, fixed.minimum, fixed.done) == (
        5, 25, 25, 36, 106,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("steps", "warmup", "want"),
    [
        (None, None, {"steps": 20, "warmup": 3, "fit": True}),
        (30, None, {"steps": 30, "warmup": 5, "fit": False}),  # given: fixed
        (None, 3, {"steps": 20, "warmup": 3, "fit": False}),
    ],
)
def test_the_schedule_is_fitted_unless_steps_or_warmup_is_given(
    steps: int | None, warmup: int | None, want: dict[str, Any]
) -> None:
    assert W.schedule_options(steps, warmup) == want


def test_counters_replay_opens_before_the_first_timed_step() -> None:
    fitted = {"schedule": W.Phases(3, 20, ProfilerConfig(), 1, light=True, fit=True).to_manifest()}
    assert W.counters_start(fitted, 3) == 3  # the range holds step 4, the first timed
    assert W.counters_start({"schedule": None}, 5) == 5  # a manifest without a schedule


# ------------------------------------------------------------- scripts, on the CPU


@pytest.mark.parametrize(("iters", "after"), [(14, 0), (20, 6), (30, 10)])
def test_a_short_script_gets_a_full_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], iters: int, after: int
) -> None:
    """The steps are timed first (4-8), before any pass; the residual check times what the
    script leaves after the passes, up to 10 steps."""
    out = tmp_path / "cnn"
    rc, m, stdout, err = _run(capsys, out, "cnn_bn.py", str(iters))
    assert rc == 0, err
    assert m is not None and m["status"] == "ok" and m["error"] is None
    assert m["schedule_mode"] == "fit" and m["schedule_minimum_steps"] == 14
    assert m["metrics"]["step_time_ms"]["n"] == 5
    assert m["metrics"]["step_time_method"].startswith("steps 4-8: ")
    assert m["metrics"]["profiled_step_time"]["n"] == 2
    arts = m["artifacts"]
    assert (out / arts["trace"]).is_file() and (out / arts["memory_timeline"]).is_file()
    assert m["inputs"]["probed"] == "the warm-up steps 2-3"
    assert m["schedule"][1] == {"phase": "timed", "steps": [4, 8]}
    assert m["schedule_shortened"] == [] and "shortened" not in stdout
    obs = m["observer"]
    assert obs["left_behind"] == [] and obs["state_after"] == obs["state_before"]
    if after < 3:  # no residual: the loop ended before it
        assert obs["residual"] is None
        assert obs["residual_absent"] == "the loop ended before the residual check"
        assert "residual not checked: the loop ended before the residual check" in stdout
    else:
        assert obs["residual"]["n_after"] == after and obs["residual"]["n_before"] == 5
        assert obs["residual"]["after_steps"] == [15, 14 + after]
        assert "residual after the profiler passes " in stdout
    if iters < 24:
        assert m["script"]["ended"] == "finished" and m["total_steps"] == iters
    else:  # the whole schedule: the script is stopped after it
        assert m["script"]["ended"] == "stopped" and m["total_steps"] == 24
    if iters == 20:  # the report says so too (one case: a parse and a summary)
        from tracekit.commands.report import report

        residual = report(out, no_tensorboard=True).summary.header.residual
        assert residual is not None and residual.startswith("residual after the profiler")


def test_a_script_too_short_to_profile_gets_the_minimum_and_how_to_lower_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "mlp"
    rc, m, _, err = _run(capsys, out, "mlp.py", "--iters", "3")
    lines = [x for x in err.splitlines() if x.startswith("tracekit")]
    assert rc == 2 and len(lines) == 1, err
    assert lines[0].startswith(
        "tracekit: error: the script ended too early: the loop ended after 3 steps, before "
        "any profiled step was recorded: this schedule needs at least 14 (3 warm-up, "
    )
    lower = (
        "--warmup 1 --steps 1 --profile-wait 0 --profile-warmup 0 --profile-active 1 "
        "--no-memory-timeline"
    )
    assert f"; run it for more steps, or lower the minimum to 3 with {lower} (" in lines[0]
    assert m is not None and m["status"] == "incomplete" and m["artifacts"]["trace"] is None
    # the options it names do fit the script
    rc, m, _, err = _run(
        capsys, tmp_path / "low", "mlp.py", "--iters", "3", opts=tuple(lower.split())
    )
    assert rc == 0, err
    assert m is not None and m["status"] == "ok" and m["metrics"]["step_time_ms"]["n"] == 1
    assert m["schedule"] == [
        {"phase": "warmup", "steps": [1, 1]}, {"phase": "timed", "steps": [2, 2]},
        {"phase": "profiled", "steps": [3, 3]}, {"phase": "residual", "steps": [4, 13]},
    ]  # fmt: skip


def test_a_script_ending_in_the_category_step_keeps_its_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, m, _, err = _run(capsys, tmp_path / "mlp", "mlp.py", "--iters", "13")
    assert rc == 2 and "the loop ended after 13 steps (1 of the 2 steps of the category step); " \
        "a complete run needs at least 14 (" in err  # fmt: skip
    assert m is not None and m["status"] == "incomplete" and m["artifacts"]["trace"]
    assert m["artifacts"]["memory_timeline_absent"] == "the loop ended in the category step"
    assert m["metrics"]["step_time_ms"]["n"] == 5  # timed before any pass


def test_steps_given_keep_the_fixed_schedule_and_its_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, m, _, err = _run(capsys, tmp_path / "cnn", "cnn_bn.py", "12", opts=("--steps", "20"))
    assert rc == 2 and "the schedule needs 31 (5 warm-up, 20 timed before any pass, 4 " in err
    assert m is not None and m["status"] == "incomplete" and m["schedule_mode"] == "fixed"
    assert m["artifacts"]["trace"] is None
    assert m["schedule_shortened"] == [
        {
            "phase": "timed",
            "planned": 20,
            "ran": 7,
            "steps": [6, 12],
            "why": "the loop ended after 12 steps",
        }
    ]
    assert m["metrics"]["step_time_ms"]["n"] == 7  # what the timed steps measured is kept


# ------------------------------------------------------------ tracekit.profile()


def _loop(n: int, prof: tracekit.Profile, fail_at: int | None = None) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, y = torch.randn(4, 8), torch.randn(4, 1)
    for i in range(n):
        if i == fail_at:
            raise ValueError(f"corrupt batch {i}")
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        opt.zero_grad()
        prof.step()


def test_profile_fits_a_short_loop(tmp_path: Path) -> None:
    with tracekit.profile(tmp_path / "p", ceilings=False, quiet=True) as prof:
        _loop(16, prof)
    m = prof.manifest
    assert prof.status == "ok" and m is not None and m["schedule_mode"] == "fit"
    assert m["metrics"]["step_time_ms"]["n"] == 5 and m["schedule_shortened"] == []
    assert m["observer"]["residual_absent"] == "too few steps timed before or after the passes"
    # a loop that raises in the timed steps: status error, with the timed steps it ran
    failing = tracekit.profile(tmp_path / "e", ceilings=False, quiet=True)
    with pytest.raises(ValueError, match="corrupt batch 6"), failing:
        _loop(30, failing, fail_at=6)
    m = failing.manifest
    assert failing.status == "error" and m is not None and m["error"].startswith("ValueError")
    assert m["metrics"]["step_time_ms"]["n"] == 3 and m["schedule"][1]["steps"] == [4, 6]
    short = tracekit.profile(tmp_path / "q", ceilings=False, quiet=True)
    with (
        pytest.raises(TracekitError, match="lower the minimum to 3 with warmup=1 steps=1 wait=0"),
        short,
    ):
        _loop(2, short)
    assert short.status == "incomplete"
