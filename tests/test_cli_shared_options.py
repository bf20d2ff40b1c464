"""The options ``tracekit collect`` and ``tracekit run`` share are declared once
(``tracekit/cli_options.py``): same flag, default, help and type in both commands; an option
the two have by the same name but with another meaning is listed here, with why."""

from __future__ import annotations

import dataclasses
from typing import Any

import typer

from tracekit.cli import app
from tracekit.cli_options import SHARED, SharedDefaults

# Same name, another meaning: each help says what that command does.
DIFFERENT = {
    "steps": "collect's fixed count; run's is fitted unless given",
    "warmup": "collect's fixed count; run's is probed",
    "device": "run's auto follows the optimizer's parameters",
    "profile_active": "generate records every decode step in collect",
    "ceilings": "collect measures them first, run after the script",
    "counters": "collect replays its own step; run re-runs the script",
    "out": "the default folder is named after the preset or the script",
    "quiet": "collect's live display, run's progress lines",
    "comm_rounds": "--gpus N against --nproc-per-node",
    "comm_steps": "--gpus N against --nproc-per-node",
}


def _params(name: str) -> dict[str, Any]:
    command = typer.main.get_command(app).commands[name]  # type: ignore[attr-defined]
    return {p.name: p for p in command.params}


def _described(p: Any) -> tuple[Any, ...]:
    return (p.opts, p.secondary_opts, p.default, p.help, p.bare_type(), p.is_flag)


def test_shared_options_are_the_same_in_both_commands() -> None:
    collect, run = _params("collect"), _params("run")
    for f in dataclasses.fields(SharedDefaults):
        assert f.name in collect and f.name in run, f.name
        assert _described(collect[f.name]) == _described(run[f.name]), f.name
        assert collect[f.name].default == getattr(SHARED, f.name), f.name


def test_every_common_option_is_shared_or_said_to_differ() -> None:
    collect, run = _params("collect"), _params("run")
    shared = {f.name for f in dataclasses.fields(SharedDefaults)}
    common = set(collect) & set(run)
    assert common - shared == set(DIFFERENT), "declare a new common option in cli_options"
    same = [n for n in DIFFERENT if _described(collect[n]) == _described(run[n])]
    assert not same, f"{same} are the same in both commands: declare them in cli_options"


def test_shared_defaults_are_the_profiler_configs() -> None:
    from tracekit.collectors.profiler_config import ProfilerConfig

    pc = ProfilerConfig()
    assert (SHARED.profile_wait, SHARED.profile_warmup, SHARED.profile_repeat) == (
        pc.wait,
        pc.warmup,
        pc.repeat,
    )
    for name in ("record_shapes", "profile_memory", "with_flops", "with_stack", "with_modules"):
        assert getattr(SHARED, name) == getattr(pc, name), name
    assert SHARED.memory_timeline == pc.memory_timeline
    assert SHARED.single_pass == (not pc.timeline_pass)
    assert SHARED.light_cost_rounds == pc.light_cost_rounds
