"""Starting the collectors' profiler does not import Inductor (and with it Dynamo)."""

from __future__ import annotations

import sys
import types

import pytest
import torch

from tracekit.collectors.profiler import TorchProfile


@pytest.fixture
def inductor_unloaded(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """torch as in a fresh process: Inductor not imported; the names torch's lazy
    attribute hook is asked for are recorded (and Inductor is never imported by it)."""
    asked: list[str] = []
    lazy = torch.__dict__["__getattr__"]

    def recording(name: str) -> object:
        asked.append(name)
        if name == "_inductor":
            raise AttributeError(name)
        return lazy(name)

    for mod in [m for m in sys.modules if m.split(".")[:2] == ["torch", "_inductor"]]:
        monkeypatch.delitem(sys.modules, mod)
    monkeypatch.delattr(torch, "_inductor", raising=False)
    monkeypatch.setattr(torch, "__getattr__", recording)
    return asked


def _profile_one_step(cls: type[torch.profiler.profile]) -> None:
    sched = torch.profiler.schedule(wait=1, warmup=1, active=1)
    with cls(activities=[torch.profiler.ProfilerActivity.CPU], schedule=sched) as prof:
        for _ in range(3):
            torch.ones(4).add_(1)
            prof.step()


def test_torch_asks_for_inductor_at_every_start(inductor_unloaded: list[str]) -> None:
    _profile_one_step(torch.profiler.profile)
    assert "_inductor" in inductor_unloaded  # what TorchProfile spares


def test_tracekit_profile_never_asks_and_restores_the_hook(inductor_unloaded: list[str]) -> None:
    hook = torch.__dict__["__getattr__"]
    _profile_one_step(TorchProfile)
    assert "_inductor" not in inductor_unloaded
    assert torch.__dict__["__getattr__"] is hook
    assert "torch._inductor" not in sys.modules


def test_with_inductor_loaded_torchs_own_path_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    # Inductor stood in (importing it costs seconds): its config's cudagraphs flag set
    config = types.ModuleType("torch._inductor.config")
    config.triton = types.SimpleNamespace(cudagraphs=True)  # type: ignore[attr-defined]
    package = types.ModuleType("torch._inductor")
    package.config = config  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "torch._inductor", package)
    monkeypatch.setitem(sys.modules, "torch._inductor.config", config)
    monkeypatch.setattr(torch, "_inductor", package, raising=False)
    prof = TorchProfile(activities=[torch.profiler.ProfilerActivity.CPU])
    prof.prepare_trace()
    try:
        assert prof.has_cudagraphs is True
    finally:
        prof.start_trace()
        prof.stop_trace()
