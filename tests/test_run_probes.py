"""The timed steps of `tracekit run` / `tracekit.profile()` run without tracekit's probes.

The model's forward hooks, the global optimizer hooks that find the optimizer and sample
memory, and the input recorder run in the warm-up steps after the first (with one warm-up
step: the profiled steps); in the timed steps only the step marker and one timing mark per
step end are left.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.optim import optimizer as optim_mod

import tracekit
from tracekit.collectors import run_manifest
from tracekit.collectors.run_manifest import Measured
from tracekit.collectors.session import AT_STEP_END, BoundaryTimer

QUIET: dict[str, Any] = dict(wait=0, profile_warmup=1, active=1, ceilings=False, quiet=True,
                             memory_timeline=False)  # fmt: skip


def _global_hooks() -> int:
    return len(optim_mod._global_optimizer_pre_hooks) + len(optim_mod._global_optimizer_post_hooks)


def _watch(
    out: Path, warmup: int, steps: int, n: int, **kw: Any
) -> tuple[list[tuple[int, int]], int]:
    """Run a loop of ``n`` steps under tracekit.profile; per step (1-based) the number of
    the model's forward hooks and of global optimizer hooks *while the step ran*."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, y = torch.randn(4, 8), torch.randn(4, 1)
    base = _global_hooks()
    seen: list[tuple[int, int]] = []
    with tracekit.profile(out, warmup=warmup, steps=steps, **{**QUIET, **kw}) as prof:
        for _ in range(n):
            hooks = (len(model._forward_pre_hooks) + len(model._forward_hooks),
                     _global_hooks() - base)  # fmt: skip
            nn.functional.mse_loss(model(x), y).backward()
            opt.step()
            opt.zero_grad()
            prof.step()
            seen.append(hooks)
    assert _global_hooks() == base
    return seen, prof.steps_done


def test_probes_run_in_the_warm_up_and_leave_before_the_timed_steps(tmp_path: Path) -> None:
    seen, done = _watch(tmp_path / "p", warmup=3, steps=4, n=9)
    assert done == 9  # 3 warm-up + 4 timed + 2 profiled
    # step 1: the optimizer hooks find the optimizer; steps 2-3: the model's two hooks
    # too; the timed steps 4-7 and the profiled ones: nothing of tracekit's
    assert seen == [(0, 2), (2, 2), (2, 2)] + [(0, 0)] * 6
    m = json.loads((tmp_path / "p" / "manifest.json").read_text())
    assert m["inputs"]["steps"] == 2 and m["inputs"]["shape"] == [4, 8]
    assert m["config"]["samples_per_step"] == 4
    assert "(median over the warm-up steps 2-3)" in m["config"]["per_step_source"]
    assert m["inputs"]["probed"] == "the warm-up steps 2-3"
    assert m["metrics"]["step_time_ms"]["n"] == 4
    assert m["metrics"]["step_time_method"] == (
        "steps 4-7: time.perf_counter() at each step end, one mark per end (a step runs from "
        "one mark to the next), read once after the last timed step; without the profiler "
        "and without tracekit's probes (forward hooks on the model, global optimizer step "
        "hooks, torch.cuda.memory_allocated reads: in the warm-up steps 2-3); in the timed "
        "steps tracekit runs only its step marker"
    )


def test_with_one_warm_up_step_the_profiled_steps_are_probed(tmp_path: Path) -> None:
    seen, _ = _watch(tmp_path / "p", warmup=1, steps=2, n=7, memory_timeline=True)
    # step 1 finds the optimizer; the timed steps 2-3 run bare; the profiled steps 4-5
    # carry the probes (they run under the profiler anyway); the category step 6-7 not
    assert seen == [(0, 2), (0, 0), (0, 0), (2, 2), (2, 2), (0, 0), (0, 0)]
    m = json.loads((tmp_path / "p" / "manifest.json").read_text())
    assert m["inputs"]["steps"] == 2 and m["inputs"]["probed"] == "the profiled steps 4-5"
    assert "(median over the profiled steps 4-5)" in m["config"]["per_step_source"]
    assert m["metrics"]["step_time_method"].startswith("steps 2-3: time.perf_counter()")
    assert "reads: in the profiled steps 4-5)" in m["metrics"]["step_time_method"]


def test_the_inputs_of_a_loop_that_ends_in_the_warm_up_are_kept(tmp_path: Path) -> None:
    with pytest.raises(tracekit.TracekitError):
        _watch(tmp_path / "p", warmup=5, steps=2, n=3)
    m = json.loads((tmp_path / "p" / "manifest.json").read_text())
    assert m["status"] == "incomplete" and m["inputs"]["steps"] == 2


def test_timed_steps_share_one_mark_per_step_end() -> None:
    timer = BoundaryTimer(torch.device("cpu"))
    timer.start()
    for _ in range(3):
        timer.lap()
    timer.stop()
    spans = timer._spans
    assert len(spans) == 4
    # each step starts at the mark that ended the one before: no gap, no double mark
    assert all(a[1] == b[0] for a, b in itertools.pairwise(spans))
    assert len(timer.millis()) == 4 and min(timer.millis()) >= 0


def test_the_manifest_says_how_cuda_steps_were_timed_and_where_memory_was_read() -> None:
    m = Measured(timed_ms=[10.0, 12.0], device_type="cuda", probed="the warm-up steps 2-5",
                 timed_steps=(6, 7), memory_points=(AT_STEP_END,))  # fmt: skip
    got = run_manifest.metrics(m, None, None, None, "from one step end to the next")
    assert got is not None
    assert got["step_time_method"].startswith(
        "steps 6-7: a CUDA event recorded on the current stream at each step end, one mark per end"
    )
    assert got["memory_method"].endswith(
        "avg: mean of torch.cuda.memory_allocated sampled in the warm-up steps 2-5: at the "
        "step's end (after the optimizer step)"
    )


# torch.compile(model): the hooks run outside the compiled code; a compiled function that
# calls the model: dynamo does not guard on module hooks by default, and when it does, it
# compiles again for the probes' hooks (step 2) and the timed steps (4-6) find the first
# code in its cache
@pytest.mark.parametrize(
    ("how", "hook_guards", "want"),
    [("wrapper", False, [1]), ("function", False, [1]), ("function", True, [1, 2])],
)
def test_a_compiled_model_is_not_recompiled_in_the_timed_steps(
    tmp_path: Path, how: str, hook_guards: bool, want: list[int]
) -> None:
    compiled: list[int] = []  # the step during which each graph was compiled
    now = {"step": 0}

    def backend(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        compiled.append(now["step"])
        return gm.forward

    torch._dynamo.reset()
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    run: Any = (torch.compile(model, backend=backend) if how == "wrapper"
                else torch.compile(lambda x: model(x), backend=backend))  # fmt: skip
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(4, 8)
    guards = torch._dynamo.config.patch(skip_nnmodule_hook_guards=not hook_guards)
    with guards, tracekit.profile(tmp_path / "p", warmup=3, steps=3, **QUIET) as prof:
        for step in range(1, 9):
            now["step"] = step
            run(x).sum().backward()
            opt.step()
            opt.zero_grad()
            prof.step()
    torch._dynamo.reset()
    assert compiled == want
    # the forward hooks inside compiled code return at once: no input recorded there
    inputs = json.loads((tmp_path / "p" / "manifest.json").read_text())["inputs"]
    assert (inputs is not None) == (how == "wrapper")
