"""The profiled passes of `tracekit run` / `tracekit.profile()` (collectors/session_windows.py):
the light timeline pass before the full window, the category step after it, and the
schedule they make.

The light pass records CUDA activity only, so on this CPU it is off (with the reason);
its schedule is checked here with the device's answer replaced (``timeline_absent_reason``
as on CUDA) and the light profiler recording CPU activity: the real session, profilers and
step markers (host marks on the CPU: the sidecar of a torch without ``_sleep``).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

import tracekit
from tracekit.cli import main
from tracekit.collectors import passes
from tracekit.collectors import session as S
from tracekit.collectors import session_windows as W
from tracekit.collectors.profiler import ProfilerConfig
from tracekit.parse import load
from tracekit.parse import timeline as PT

from .standins import CpuLightProfiler

SCRIPTS = Path(__file__).resolve().parent / "scripts"
# profiler schedule wait 1, warm-up 1, active 2: 4 steps a pass
OPTS: dict[str, Any] = dict(steps=2, warmup=1, wait=1, profile_warmup=1, active=2,
                            ceilings=False, quiet=True)  # fmt: skip


# ------------------------------------------------------------------ the schedule


def test_phases_with_every_pass() -> None:
    ph = W.Phases(5, 20, ProfilerConfig(), 1, light=True)
    # 5 warm-up, 20 timed, light 4, full 4, category 2, snapshot 1
    assert (ph.timed, ph.light, ph.full, ph.category, ph.snapshot, ph.complete_at) == (
        5, 25, 29, 33, 35, 36,
    )  # fmt: skip
    # the residual check and the cost rounds: where the loop runs on
    assert (ph.minimum, ph.residual, ph.cost, ph.done) == (36, 36, 46, 106)
    assert ph.to_manifest() == [
        {"phase": "warmup", "steps": [1, 5]}, {"phase": "timed", "steps": [6, 25]},
        {"phase": "timeline", "steps": [26, 29]}, {"phase": "profiled", "steps": [30, 33]},
        {"phase": "category", "steps": [34, 35]}, {"phase": "snapshot", "steps": [36, 36]},
        {"phase": "residual", "steps": [37, 46]}, {"phase": "light_cost", "steps": [47, 106]},
    ]  # fmt: skip
    assert ph.describe() == (
        "5 warm-up, 20 timed before any pass, 4 in the light timeline pass (CUDA only), 4 "
        "profiled (wait 1, warm-up 1, active 2, repeat 1), 2 in the category step (memory by "
        "category), 1 in the memory snapshot: 36 steps; then 10 in the residual check and 60 "
        "in the light pass's cost rounds where the loop runs on"
    )
    assert (ph.probe_from, ph.probe_to) == (1, 5)
    assert ph.reached(25) == "the timed steps done"
    assert ph.reached(27) == "2 of the 4 steps of the light timeline pass"
    assert ph.reached(34) == "1 of the 2 steps of the category step"
    assert ph.reached(35) == "the category step done"


def test_phases_without_the_extra_passes() -> None:
    # CPU (no light pass), --with-stack (the window exports the timeline), no snapshot
    ph = W.Phases(1, 3, ProfilerConfig(wait=0, repeat=2, with_stack=True), 0, light=False)
    assert (ph.light, ph.full, ph.category, ph.snapshot, ph.done) == (4, 4, 10, 10, 20)
    assert [p["phase"] for p in ph.to_manifest()] == ["warmup", "timed", "profiled", "residual"]
    assert ph.describe() == (
        "1 warm-up, 3 timed before any pass, 6 profiled (wait 0, warm-up 1, active 2, repeat "
        "2): 10 steps; then 10 in the residual check where the loop runs on"
    )
    # one warm-up step: the full pass's steps are probed, never the light pass's
    assert (ph.probe_from, ph.probe_to) == (4, 10) and ph.probed() == "the profiled steps 5-10"
    lit = W.Phases(1, 3, ProfilerConfig(), 0, light=True)
    assert (lit.probe_from, lit.probe_to) == (lit.full, lit.category) == (8, 12)
    assert W.Phases(1, 3, ProfilerConfig(memory_timeline=False), 0, light=False).done == 18


# ------------------------------------------- the light pass, as on CUDA, on the CPU


@pytest.fixture
def as_on_cuda(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """The light pass runs as on CUDA; returns the (marker, step ends) of every mark."""
    cuda = torch.device("cuda")
    monkeypatch.setattr(S, "timeline_absent_reason",
                        lambda c, d: passes.timeline_absent_reason(c, cuda))  # fmt: skip
    monkeypatch.setattr(W, "LightProfiler", CpuLightProfiler)
    marks: list[tuple[int, int]] = []
    mark = passes.StepMarker.mark
    ended = {"n": 0}

    def counted(self: passes.StepMarker) -> None:
        marks.append((id(self), ended["n"]))
        mark(self)

    monkeypatch.setattr(passes.StepMarker, "mark", counted)
    monkeypatch.setattr(S.Session, "boundary", _counting(S.Session.boundary, ended))
    return marks


def _counting(boundary: Any, ended: dict[str, int]) -> Any:
    def wrapped(self: S.Session) -> None:
        ended["n"] = self.n + 1
        boundary(self)

    return wrapped


def _loop(out: Path, n: int, **kw: Any) -> tracekit.Profile:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, y = torch.randn(4, 8), torch.randn(4, 1)
    with tracekit.profile(out, **{**OPTS, **kw}) as prof:
        for _ in range(n):
            nn.functional.mse_loss(model(x), y).backward()
            opt.step()
            opt.zero_grad()
            prof.step()
    return prof


def test_light_pass_before_the_full_window(
    tmp_path: Path, as_on_cuda: list[tuple[int, int]]
) -> None:
    out = tmp_path / "p"
    prof = _loop(out, 13)
    m = prof.manifest
    assert m is not None and m["status"] == "ok" and m["total_steps"] == 13
    assert [p["steps"] for p in m["schedule"]] == [
        [1, 1], [2, 3], [4, 7], [8, 11], [12, 13], [14, 23], [24, 83],
    ]  # fmt: skip
    # the same marks in both passes, each its own marker: at the step ends that open the
    # recorded steps (6, 7 of the light pass; 10, 11 of the full) and one closing the last
    markers = list(dict.fromkeys(k for k, _ in as_on_cuda))
    assert len(markers) == 2
    light, full = ([n for k, n in as_on_cuda if k == mk] for mk in markers)
    assert light == [5, 6, 7] and full == [9, 10, 11]
    arts = m["artifacts"]
    assert arts["timeline_trace"].endswith(".timeline.json.gz")
    assert (
        arts["timeline_traces"] == [arts["timeline_trace"]]
        and arts["timeline_trace_absent"] is None
    )
    assert arts["trace"].endswith(".pt.trace.json.gz") and arts["trace"] != arts["timeline_trace"]
    assert arts["memory_timeline_pass"] == "category step (with stacks)"
    # the host marks (no marker kernel on the CPU) fall where each recorded step starts
    starts = json.loads((out / arts["timeline_steps"]).read_text())["starts_ns"]
    t = load(out / arts["timeline_trace"])
    bounds = PT.host_bounds(starts, t.meta)
    st = t.steps.sort_values("step")
    assert len(bounds) == 3 and len(st) == 2  # two recorded steps, one closing mark
    assert np.all(np.abs(bounds[:-1] - st["cpu_ts"].to_numpy()) < 2_000_000)
    # the light pass records no option: no shapes there, the full pass's have them
    assert _with_shapes(out, arts["timeline_trace"]) == 0 < _with_shapes(out, arts["trace"])
    met = m["metrics"]
    assert met["timeline_step_time"]["n"] == 2 and met["profiled_step_time"]["n"] == 2
    base = met["step_time_ms"]["median"]
    assert met["timeline_overhead_pct"] == pytest.approx(  # no cost rounds ran: the loop ended
        (met["timeline_step_time_ms"] / base - 1) * 100
    )
    assert met["timeline_cost"] is None
    tl = m["profiler"]["timeline"]
    assert tl["schedule"] == {"wait": 1, "warmup": 1, "active": 2}
    assert tl["order"] == "before the full pass, same schedule"
    assert tl["step_marker"] == "host time at each recorded step's start (sidecar timeline_steps)"


def _with_shapes(run: Path, name: str) -> int:
    """The trace's CPU operators that carry their input shapes (``record_shapes``)."""
    doc = json.loads(gzip.decompress((run / name).read_bytes()))
    return sum(e.get("cat") == "cpu_op" and "Input Dims" in e.get("args", {})
               for e in doc["traceEvents"])  # fmt: skip


def test_single_pass_turns_the_light_pass_off(
    tmp_path: Path, as_on_cuda: list[tuple[int, int]]
) -> None:
    prof = _loop(tmp_path / "p", 9, single_pass=True)
    m = prof.manifest
    assert m is not None and m["status"] == "ok" and m["total_steps"] == 9
    assert m["schedule_steps"] == 19  # the residual check follows where the loop runs on
    assert [p["phase"] for p in m["schedule"]] == [
        "warmup",
        "timed",
        "profiled",
        "category",
        "residual",
    ]
    assert m["observer"]["residual_absent"] == "the loop ended before the residual check"
    assert m["artifacts"]["timeline_trace"] is None
    assert m["artifacts"]["timeline_trace_absent"] == "disabled (--single-pass)"
    assert m["profiler"]["timeline_pass"] is False and m["profiler"]["timeline"] is None
    assert m["metrics"]["timeline_step_time_ms"] is None
    assert as_on_cuda == []  # the full pass marks nothing without a light pass to join
    assert not list((tmp_path / "p").glob("*.timeline*"))


def test_a_loop_ending_in_the_light_pass(tmp_path: Path, as_on_cuda: list[tuple[int, int]]) -> None:
    out = tmp_path / "p"
    with pytest.raises(
        tracekit.TracekitError, match=r"after 6 steps \(3 of the 4 steps of the light"
    ):
        _loop(out, 6)
    m = json.loads((out / "manifest.json").read_text())
    assert m["status"] == "incomplete" and m["total_steps"] == 6 and m["schedule_steps"] == 83
    arts = m["artifacts"]
    assert arts["timeline_trace"] is None and arts["trace"] is None
    assert arts["timeline_trace_absent"] == "the loop ended in the light timeline pass"
    assert arts["memory_timeline_absent"] == "the loop ended before the profiled steps"
    assert m["metrics"]["step_time_ms"]["n"] == 2 and m["metrics"]["timeline_step_time"] is None
    assert sorted(p.name for p in out.iterdir()) == ["manifest.json", "tensorboard"]


# ------------------------------------------------------------ tracekit run, CPU


def test_run_on_cpu_says_why_there_is_no_light_pass(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "mlp"
    argv = ["run", "--warmup", "1", "--steps", "3", "--profile-wait", "0", "--profile-warmup",
            "1", "--profile-active", "1", "--no-ceilings", "--no-memory-timeline",
            "--single-pass", "-o", str(out), "--", str(SCRIPTS / "mlp.py")]  # fmt: skip
    assert main(argv) == 0
    o, e = capsys.readouterr()
    m = json.loads((out / "manifest.json").read_text())
    assert m["config"]["profiler"]["timeline_pass"] is False
    assert m["artifacts"]["timeline_trace_absent"] == "disabled (--single-pass)"
    assert m["artifacts"]["memory_timeline_absent"] == "disabled (memory_timeline=False)"
    assert m["total_steps"] == 16 and m["schedule"][-2] == {"phase": "profiled", "steps": [5, 6]}
    assert m["schedule"][-1] == {"phase": "residual", "steps": [7, 16]}
    assert m["observer"]["residual"]["n_after"] == 10 and m["observer"]["left_behind"] == []
    assert "timeline trace: none (disabled (--single-pass))" in o
    assert "residual after the profiler passes " in o
    assert "schedule: 1 warm-up, 3 timed before any pass, 2 profiled (wait 0, warm-up 1, " in e
