"""Stand-ins for what a CPU build of torch cannot do, shared by the tests and by the
processes they start (gloo ranks load this from a ``sitecustomize``, so it imports
neither pytest nor a test module: a rank pays only for what it uses).

The light timeline pass records CUDA activity only; here it records CPU activity, so a
CPU step goes through the same pass, the same files and the same cost rounds as a GPU
step does."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from tracekit.collectors import light_cost, passes
from tracekit.collectors.cupti_pass import TimelinePass
from tracekit.collectors.profiler import ProfilerConfig


class CpuLightProfiler(passes.LightProfiler):
    """The light pass with CPU activity in place of CUDA's (a CPU step launches none)."""

    def activities(self) -> list[torch.profiler.ProfilerActivity]:
        return [torch.profiler.ProfilerActivity.CPU]


class CpuKinetoSwitch(light_cost.KinetoSwitch):
    """The cost rounds' Kineto recorder with CPU activity in place of CUDA's."""

    def activities(self) -> list[torch.profiler.ProfilerActivity]:
        return [torch.profiler.ProfilerActivity.CPU]


def _timeline_on_cpu(config: ProfilerConfig, device: torch.device) -> str | None:
    return None if config.timeline_pass else "disabled (--single-pass)"


def stand_in_light_pass(setattr_: Callable[[Any, str, Any], None] = setattr) -> None:
    """Let ``collectors/collect.py`` (``tracekit collect``, a collect rank) run the light
    timeline pass on CPU."""
    import tracekit.collectors.collect as collect_mod

    setattr_(collect_mod, "timeline_absent_reason", _timeline_on_cpu)
    # CUPTI is not there on CPU: the pass falls back to Kineto's, which records CPU here
    setattr_(collect_mod, "TimelinePass", functools.partial(TimelinePass, kineto=CpuLightProfiler))
    setattr_(light_cost, "KinetoSwitch", CpuKinetoSwitch)  # the cost rounds' recorder, as the pass


def stand_in_script_light_pass() -> None:
    """Let a script rank's session (``tracekit run``) run the light timeline pass on CPU,
    as on a GPU: its files are a rank's too."""
    from tracekit.collectors import session, session_windows

    cuda = torch.device("cuda")
    session.timeline_absent_reason = lambda c, d: passes.timeline_absent_reason(c, cuda)  # type: ignore[assignment]
    session_windows.LightProfiler = CpuLightProfiler  # type: ignore[misc]
    light_cost.KinetoSwitch = CpuKinetoSwitch  # type: ignore[misc]  # the cost rounds' recorder
