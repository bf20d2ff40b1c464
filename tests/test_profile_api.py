"""tracekit.profile(): the session of `tracekit run` as a context manager in the user's loop."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import tracekit
from tracekit.collectors import api
from tracekit.errors import TracekitError, UsageError

ROOT = Path(__file__).resolve().parents[1]
FAST: dict[str, Any] = dict(
    steps=2, warmup=1, wait=0, profile_warmup=1, active=1, ceilings=False, quiet=True
)
# 1 warm-up, 2 timed, 2 profiled, 2 in the category step (CPU: no light pass), 10 in the
# residual check
STEPS = 17


def _loop(n: int, prof: api.Profile, after: Any = None) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, y = torch.randn(4, 8), torch.randn(4, 1)
    for i in range(n):
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        opt.zero_grad()
        prof.step()
        if after is not None:
            after(i + 1)


def test_profile_writes_the_run_folder_once_complete(tmp_path: Path) -> None:
    out = tmp_path / "p"
    seen: dict[int, bool] = {}
    with tracekit.profile(out, **FAST) as prof:
        _loop(19, prof, lambda n: seen.setdefault(n, (out / "manifest.json").exists()))
    # written at the end of step 17, the residual check's last, while the loop went on
    assert [n for n, there in seen.items() if there] == [17, 18, 19]
    assert prof.status == "ok" and prof.run_dir == out and prof.steps_done == 19
    m = json.loads((out / "manifest.json").read_text())
    assert m == prof.manifest
    assert m["workload"] == "profile" and m["status"] == "ok" and m["total_steps"] == STEPS
    assert m["model"]["n_params"] == 8 * 16 + 16 + 16 + 1 == 161
    assert m["optimizer"]["classes"] == ["Adam"] and m["config"]["samples_per_step"] == 4
    assert m["config"]["step_definition"] == "from one prof.step() call to the next"
    assert m["metrics"]["step_time_ms"]["n"] == 2
    assert m["metrics"]["profiled_step_time"]["n"] == 1
    assert (out / m["artifacts"]["trace"]).is_file() and (out / "tensorboard").is_dir()
    assert "script" not in m
    # memory by category by default, from the category step (steps 6-7)
    assert m["schedule"][-2] == {"phase": "category", "steps": [6, 7]}
    arts = m["artifacts"]
    assert arts["memory_timeline_pass"] == "category step (with stacks)"
    doc = json.loads(gzip.decompress((out / arts["memory_timeline"]).read_bytes()))
    params = [row[doc["categories"].index("parameter")] for row in doc["bytes"]]
    assert max(params) == 161 * 4
    assert "CUDA activity only" in arts["timeline_trace_absent"] and arts["timeline_trace"] is None
    assert m["metrics"]["timeline_step_time_ms"] is None and m["profiler"]["timeline"] is None


def test_a_loop_too_short_raises_and_records_incomplete(tmp_path: Path) -> None:
    out = tmp_path / "p"
    with pytest.raises(TracekitError) as ex, tracekit.profile(out, **FAST) as prof:
        _loop(3, prof)
    assert str(ex.value) == (
        "tracekit.profile: the loop ended after 3 steps (the timed steps done); the schedule "
        "needs 7 (1 warm-up, 2 timed before any pass, 2 profiled (wait 0, warm-up 1, active 1, "
        "repeat 1), 2 in the category step (memory by category): 7 steps; then 10 in the "
        "residual check where the loop runs on) "
        f"({out}/manifest.json has status 'incomplete')"
    )
    m = json.loads((out / "manifest.json").read_text())
    assert m["status"] == "incomplete" and m["metrics"]["step_time_ms"]["n"] == 2


def test_an_exception_in_the_block_is_recorded_and_passed_on(tmp_path: Path) -> None:
    out = tmp_path / "p"

    def boom(n: int) -> None:
        if n == 2:
            raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"), tracekit.profile(out, **FAST) as prof:
        _loop(8, prof, boom)
    m = json.loads((out / "manifest.json").read_text())
    assert m["status"] == "error" and m["error"] == "ValueError: boom" and m["total_steps"] == 2


def test_ctrl_c_in_the_block_leaves_nothing(tmp_path: Path) -> None:
    def interrupt(n: int) -> None:
        if n == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt), tracekit.profile(tmp_path / "p", **FAST) as prof:
        _loop(8, prof, interrupt)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"steps": 0}, "steps must be an integer >= 1, got 0"),
        ({"warmup": 0}, "warmup must be an integer >= 1, got 0"),
        ({"steps": 2.5}, "steps must be an integer >= 1, got 2.5"),
        ({"active": 0}, "profiler active must be an integer >= 1, got 0"),
        ({"device": "tpu"}, "device must be one of auto, cuda, cpu, got 'tpu'"),
        ({"tokens_per_step": -1}, "tokens_per_step must be an integer >= 1, got -1"),
        ({"with_stack": "yes"}, "profiler option with_stack must be true or false"),
        ({"ceilings": 1}, "ceilings must be true or false"),
    ],
)
def test_options_are_validated_first(tmp_path: Path, kw: dict[str, Any], message: str) -> None:
    with pytest.raises(UsageError) as ex:
        tracekit.profile(tmp_path / "p", **kw)
    assert str(ex.value) == message
    assert list(tmp_path.iterdir()) == []


def test_out_must_be_a_folder(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    with pytest.raises(UsageError, match="exists and is not a folder"):
        tracekit.profile(tmp_path / "f")


def test_step_outside_the_block(tmp_path: Path) -> None:
    prof = tracekit.profile(tmp_path / "p", **FAST)
    with pytest.raises(UsageError, match="outside its"):
        prof.step()


def test_cuda_device_without_cuda_is_one_line(tmp_path: Path) -> None:
    if torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    with (
        pytest.raises(TracekitError, match="CUDA is not available"),
        tracekit.profile(tmp_path / "p", device="cuda", **FAST),
    ):
        pass
    assert list(tmp_path.iterdir()) == []


def test_public_names_and_lazy_torch() -> None:
    assert tracekit.profile is api.profile and tracekit.Profile is api.Profile
    assert "profile" in tracekit.__all__
    code = "import sys, tracekit; print('torch' in sys.modules)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.stdout.strip() == "False", r.stderr
