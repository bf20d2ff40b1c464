"""``tracekit run [OPTIONS] -- python train.py ARGS``: the command-line side of
``tracekit.collectors.script`` (registered on the app in ``tracekit/cli.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

try:  # typer >= 0.20 vendors click
    from typer._click import core as click_core
    from typer._click import exceptions as click_exc
except ImportError:  # pragma: no cover
    from click import core as click_core  # type: ignore[no-redef]
    from click import exceptions as click_exc  # type: ignore[no-redef]
from typer.core import TyperCommand

import tracekit.cli_options as CO
from tracekit.cli_options import SHARED
from tracekit.errors import UsageError

RUN_METAVAR = "[OPTIONS] -- python SCRIPT [ARGS]..."


class ScriptCommand(TyperCommand):
    """``tracekit run [OPTIONS] -- COMMAND…``: everything after ``--`` is the script's command
    line, kept out of option parsing (``ctx.meta["tracekit.script"]``)."""

    def parse_args(self, ctx: click_core.Context, args: list[str]) -> list[str]:
        if "--" in args:
            i = args.index("--")
            ctx.meta["tracekit.script"] = args[i + 1 :]
            args = args[:i]
            if not ctx.meta["tracekit.script"] and not {"--help", "-h"} & set(args):
                raise UsageError(
                    "no script after `--`: tracekit run [OPTIONS] -- python train.py ARGS"
                )
        elif not {"--help", "-h"} & set(args):
            raise click_exc.UsageError(
                "put the script's command after `--`: tracekit run [OPTIONS] -- python "
                "train.py ARGS",
                ctx,
            )
        return super().parse_args(ctx, args)


_Steps = Annotated[
    int | None,
    typer.Option(
        help="Timed (unprofiled) steps for the metrics; given (or --warmup): the fixed "
        "schedule, which the script must complete  [default: 5 fitted, 20 fixed]"
    ),
]
_Warmup = Annotated[
    int | None,
    typer.Option(help="Warm-up steps, probed after the first (>= 1)  [default: 3 fitted, 5 fixed]"),
]
_StepMarker = Annotated[
    str,
    typer.Option(
        help="What ends a step: optimizer (each optimizer.step()), function:NAME, "
        "function:module:qualname (each call of that function), cuda-graph (each replay "
        "of the first CUDA graph)."
    ),
]
_StopAfter = Annotated[
    bool,
    typer.Option(
        "--stop-after/--run-on",
        " /--no-stop-after",
        help="Stop the script once the schedule is done (after the category step and "
        "the snapshot), or let it run to its end.",
    ),
]


_Nproc = Annotated[
    int | None,
    typer.Option(
        "--nproc-per-node",
        help="Launch the script on N ranks as torchrun does (RANK, LOCAL_RANK, WORLD_SIZE, "
        "MASTER_ADDR/PORT...): per-rank traces and logs, one manifest, and the measured "
        "communication cost when the model is a DDP module.",
    ),
]
_CommRounds = Annotated[
    int,
    typer.Option(
        help="With --nproc-per-node: rounds of the measured communication cost (the "
        "script's steps with and without gradient sync, interleaved, after the schedule); "
        "0 skips it."
    ),
]
_CommSteps = Annotated[
    int, typer.Option(help="With --nproc-per-node: steps with and steps without sync per round.")
]


def run_script_cmd(
    ctx: typer.Context,
    steps: _Steps = None,
    warmup: _Warmup = None,
    step_marker: _StepMarker = "optimizer",
    stop_after: _StopAfter = True,
    device: Annotated[
        str, typer.Option(help="auto (the optimizer's parameters' device), cuda or cpu.")
    ] = "auto",
    samples_per_step: Annotated[
        int | None, typer.Option(help="Samples per step (default: inferred from the inputs).")
    ] = None,
    tokens_per_step: Annotated[
        int | None, typer.Option(help="Tokens per step (default: inferred from token ids).")
    ] = None,
    profile_wait: CO.ProfileWaitOption = SHARED.profile_wait,
    profile_warmup: CO.ProfileWarmupOption = SHARED.profile_warmup,
    profile_active: Annotated[int, typer.Option(help="Profiler schedule: recorded steps.")] = 2,
    profile_repeat: CO.ProfileRepeatOption = SHARED.profile_repeat,
    record_shapes: CO.RecordShapesOption = SHARED.record_shapes,
    profile_memory: CO.ProfileMemoryOption = SHARED.profile_memory,
    with_flops: CO.WithFlopsOption = SHARED.with_flops,
    with_stack: CO.WithStackOption = SHARED.with_stack,
    with_modules: CO.WithModulesOption = SHARED.with_modules,
    memory_timeline: CO.MemoryTimelineOption = SHARED.memory_timeline,
    single_pass: CO.SinglePassOption = SHARED.single_pass,
    memory_snapshot: CO.MemorySnapshotOption = SHARED.memory_snapshot,
    snapshot_steps: CO.SnapshotStepsOption = SHARED.snapshot_steps,
    ceilings: Annotated[
        bool, typer.Option(help="Measure copy bandwidth and matmul FLOP/s after the run.")
    ] = True,
    counters: Annotated[
        bool,
        typer.Option(
            "--counters",
            help="Re-run the script under Nsight Compute (ncu) around one step for measured "
            "FLOPs and DRAM/L2 bytes per kernel (CUDA only).",
        ),
    ] = False,
    out: Annotated[
        Path | None, typer.Option("-o", "--out", help="Run folder (default: runs/<script>).")
    ] = None,
    quiet: Annotated[bool, typer.Option("-q", "--quiet", help="No progress messages.")] = False,
    xspace: CO.XspaceOption = SHARED.xspace,
    nproc_per_node: _Nproc = None,
    comm_rounds: _CommRounds = 6,
    light_cost_rounds: CO.LightCostRoundsOption = SHARED.light_cost_rounds,
    comm_steps: _CommSteps = 5,
) -> None:
    """Profile a training script without editing it: tracekit run [OPTIONS] -- python
    train.py ARGS. Writes the same run folder as collect.

    Schedule, in the script's steps, fitted by default: 3 warm-up, 5 timed before any
    profiler runs, on CUDA the light timeline pass (CUDA activity only; not with
    --single-pass), the profiled steps (--profile-wait + --profile-warmup + --profile-active,
    x --profile-repeat), two category steps (unless --with-stack or --no-memory-timeline; on
    CUDA the memory snapshot records the last): at least 18 steps on CUDA, 14 on CPU.
    --steps or --warmup fix it (warm-up, timed, profiled: 36 steps on CUDA, all needed).
    Where the script runs on, the residual check (10 unprofiled steps after every pass,
    against the first timed ones) and the light pass's cost rounds follow."""
    command = ctx.meta["tracekit.script"]
    if counters:
        _check_script_counters(device)
    from tracekit.collectors import ProfilerConfig
    from tracekit.collectors import script as S
    from tracekit.collectors.session import SessionConfig
    from tracekit.collectors.session_windows import schedule_options

    cfg = S.RunConfig(
        command=tuple(command),
        step_marker=step_marker,
        stop_after=stop_after,
        session=SessionConfig(
            out=out if out is not None else S.default_out(command),
            **schedule_options(steps, warmup),
            device=device, ceilings=ceilings, memory_snapshot=memory_snapshot,
            snapshot_steps=snapshot_steps, samples_per_step=samples_per_step,
            tokens_per_step=tokens_per_step, counters=counters, quiet=quiet,
            profiler=ProfilerConfig(
                wait=profile_wait, warmup=profile_warmup, active=profile_active,
                repeat=profile_repeat, record_shapes=record_shapes,
                profile_memory=profile_memory, with_flops=with_flops, with_stack=with_stack,
                with_modules=with_modules, memory_timeline=memory_timeline,
                timeline_pass=not single_pass, light_cost_rounds=light_cost_rounds,
            ),
        ),
    )  # fmt: skip
    result = _run(cfg, nproc_per_node, comm_rounds, comm_steps, counters=counters)
    S.report_result(result, counters=counters, quiet=quiet)
    if xspace and result.status == "ok":
        from tracekit.cli_xspace import export_xspace_of

        export_xspace_of(result.run_dir, None, None, None)
    raise typer.Exit(result.exit_code)


def _run(cfg: Any, nproc: int | None, rounds: int, steps: int, *, counters: bool) -> Any:
    """The script in this process, or on ``nproc`` ranks as torchrun starts them
    (``collectors/script_dist.py``)."""
    from tracekit.collectors import script as S

    if nproc is None:
        return S.run_script(cfg)
    if counters:
        raise UsageError("--counters profiles one process: leave out --nproc-per-node")
    from tracekit.collectors.script_dist import run_distributed

    return run_distributed(cfg, nproc, rounds=rounds, steps=steps, log=S._log)


def _check_script_counters(device: str) -> None:
    """``--counters`` can work here: CUDA, and ncu on PATH (before the script runs)."""
    import shutil

    from tracekit.errors import DeviceError

    if device == "cpu":
        raise UsageError("--counters needs CUDA (Nsight Compute replays CUDA kernels)")
    if shutil.which("ncu") is None:
        raise DeviceError("--counters needs Nsight Compute: no 'ncu' on PATH")
