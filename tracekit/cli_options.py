"""Options of ``tracekit collect``, ``run``, ``report`` and ``advise`` kept out of ``cli.py``
(a module under 700 lines): the profiled passes, the measured communication cost, where the
report's timeline comes from, collect's workload defaults, advise's paired rounds.

The options ``collect`` and ``run`` share (the profiler's schedule and options, the memory
timeline and snapshot, the light pass and its cost rounds, ``--xspace``) are declared here
once: the help in the ``...Option`` alias, the default in :data:`SHARED`, so that the two
commands cannot drift apart (``tests/test_cli_shared_options.py``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

import typer

from tracekit.errors import UsageError


@dataclass(frozen=True)
class SharedDefaults:
    """The defaults of the options ``collect`` and ``run`` share, by parameter name (those
    of :class:`tracekit.collectors.ProfilerConfig`; ``--single-pass`` is its
    ``timeline_pass`` negated)."""

    profile_wait: int = 1
    profile_warmup: int = 1
    profile_repeat: int = 1
    record_shapes: bool = True
    profile_memory: bool = True
    with_flops: bool = True
    with_stack: bool = False
    with_modules: bool = False
    memory_timeline: bool = True
    single_pass: bool = False
    memory_snapshot: bool = True
    snapshot_steps: int = 1
    light_cost_rounds: int = 6
    xspace: bool = False


SHARED = SharedDefaults()

ProfileWaitOption = Annotated[int, typer.Option(help="Profiler schedule: wait steps.")]
ProfileWarmupOption = Annotated[int, typer.Option(help="Profiler schedule: warm-up steps.")]
ProfileRepeatOption = Annotated[int, typer.Option(help="Profiler schedule: cycles.")]
RecordShapesOption = Annotated[bool, typer.Option(help="Record operator input shapes.")]
ProfileMemoryOption = Annotated[bool, typer.Option(help="Record allocations.")]
WithFlopsOption = Annotated[bool, typer.Option(help="Profiler FLOP estimates.")]
WithStackOption = Annotated[
    bool, typer.Option(help="Record Python stacks (needed for the memory timeline).")
]
WithModulesOption = Annotated[bool, typer.Option(help="Record the module hierarchy.")]
MemorySnapshotOption = Annotated[
    bool, typer.Option(help="Record a CUDA memory snapshot (pickle; CUDA only).")
]
SnapshotStepsOption = Annotated[int, typer.Option(help="Steps in the memory snapshot.")]
XspaceOption = Annotated[
    bool, typer.Option("--xspace", help="Also export the trace for TensorBoard's PROFILE tab.")
]
MemoryTimelineOption = Annotated[
    bool,
    typer.Option(
        help="Export the per-category memory timeline (from the window with --with-stack, "
        "else from one more step recorded with stacks)."
    ),
]
SinglePassOption = Annotated[
    bool,
    typer.Option(
        "--single-pass",
        help="Record one profiled pass (no light CUDA-only timeline pass before it).",
    ),
]
LightCostRoundsOption = Annotated[
    int,
    typer.Option(
        help="Rounds measuring the light pass's cost (CUDA): 5 unprofiled steps and 5 under "
        "its recorder per round (the last 3 of each timed), interleaved; 0 skips it."
    ),
]
CommRoundsOption = Annotated[
    int,
    typer.Option(
        help="With --gpus N>1: rounds of the measured communication cost (unprofiled steps "
        "with and without gradient sync, interleaved); 0 skips it."
    ),
]
CommStepsOption = Annotated[
    int, typer.Option(help="With --gpus N>1: steps with and steps without sync per round.")
]

TimelineOption = Annotated[
    str,
    typer.Option(
        help="Where idle, launch and overlap figures come from: auto (the run's light "
        "CUDA-only pass when it matches the full pass, else the full pass), light (an error "
        "when it cannot be used) or full."
    ),
]

RoundsOption = Annotated[
    int, typer.Option(help="Paired rounds per lever against the baseline, at least (>= 2).")
]
MaxRoundsOption = Annotated[int, typer.Option(help="Paired rounds per lever, at most.")]
HalfWidthOption = Annotated[
    float,
    typer.Option(help="A lever's rounds stop once its ratio's 90 % interval is within +-this."),
]
BudgetOption = Annotated[
    float,
    typer.Option(
        help="Seconds of paired rounds for all levers together; the search for the best "
        "combination gets half as many seconds of wall time, its collects included."
    ),
]
PairedOption = Annotated[
    bool,
    typer.Option(
        help="Time each lever against the baseline in interleaved rounds without the profiler "
        "(--no-paired: each lever's single collect)."
    ),
]


def paired_options(rounds: int, max_rounds: int, half_width: float, budget: float) -> Any:
    """advise's ``PairedOptions`` (validated there)."""
    from tracekit.advise.paired import PairedOptions

    return PairedOptions(
        min_rounds=rounds, max_rounds=max_rounds, half_width=half_width, budget_s=budget
    )


def workload_defaults(
    workload: str, seq: int | None, profile_active: int | None, new_tokens: int | None
) -> tuple[int, int]:
    """(seq, profile_active): training defaults 128 and 2; generate takes no --seq and
    records every decode step unless told otherwise."""
    from tracekit.collectors.config import GENERATE_NEW_TOKENS

    generating = workload == "generate"
    if generating and seq is not None:
        raise UsageError("--seq is the training length; generate takes --prompt and --new-tokens")
    if profile_active is None:
        profile_active = (new_tokens or GENERATE_NEW_TOKENS) if generating else 2
    return (128 if seq is None else seq), profile_active
