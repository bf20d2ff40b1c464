"""The ``tracekit`` command line: parses arguments and calls the library, nothing more."""

from __future__ import annotations

import gc
import os
import sys
from pathlib import Path
from typing import Annotated

import typer

try:  # typer >= 0.20 vendors click
    from typer._click import exceptions as click_exc
except ImportError:  # pragma: no cover
    from click import exceptions as click_exc  # type: ignore[no-redef]

import tracekit.cli_options as CO
from tracekit.cli_options import (
    SHARED,
    BudgetOption,
    CommRoundsOption,
    CommStepsOption,
    HalfWidthOption,
    MaxRoundsOption,
    PairedOption,
    RoundsOption,
    TimelineOption,
    paired_options,
    workload_defaults,
)
from tracekit.cli_run import RUN_METAVAR, ScriptCommand, run_script_cmd
from tracekit.cli_xspace import export_xspace_of
from tracekit.errors import TracekitError, UsageError
from tracekit.io import freeze_before_exit, keep_freed_memory, readable_input

app = typer.Typer(
    name="tracekit",
    help="Where did my step time and my GPU memory go? Analyse PyTorch profiler traces.",
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


@app.callback()
def _root() -> None:
    """Where did my step time and my GPU memory go? Analyse PyTorch profiler traces."""


@app.command()
def parse(
    trace: Annotated[
        Path,
        typer.Argument(
            help="Trace file (.json, .json.gz/.xz/.bz2/.zst), a run folder, or a folder of a "
            "job's rank traces (each rank into OUT/rank<R>/)."
        ),
    ],
    out: Annotated[
        Path | None,
        typer.Option(
            "-o", "--out", help="Output folder (default: TRACE.tracekit/, FOLDER/tables/)."
        ),
    ] = None,
) -> None:
    """Parse a trace into Parquet tables (kernels, ops, memory, steps, runtime, comms) +
    meta.json."""
    readable_input(trace)  # before the heavy imports: a bad path fails at once
    # This process only parses, then exits: tuned as dedicate_process() says, and no cyclic
    # GC (the parse makes no cycles; the collector would rescan the imports' objects).
    gc.disable()
    try:
        dedicate_process()
        from tracekit.parse import parse_to_dir, skip_pandas_probe
        from tracekit.ranks.commands import parse_ranks

        skip_pandas_probe()  # the command never needs pandas
        many = parse_ranks(trace, out)  # a folder of several ranks' traces
        text = many if many is not None else parse_to_dir(trace, out).describe()
    finally:
        gc.enable()  # for callers of main() that go on (tests)
    typer.echo(text)


# collect's options that take several lines
_Counters = Annotated[
    bool,
    typer.Option(
        "--counters",
        help="Replay one step under Nsight Compute (ncu) for measured "
        "FLOPs and DRAM/L2 bytes per kernel (CUDA only).",
    ),
]
_Gpus = Annotated[
    int,
    typer.Option(
        help="GPUs of this host, one process each (torch's elastic launcher, NCCL; "
        "with --device cpu: gloo processes). --batch is per GPU.",
    ),
]
_Parallel = Annotated[
    str, typer.Option(help="With --gpus N>1: ddp (DistributedDataParallel) or fsdp (FSDP2).")
]
_Ceilings = Annotated[
    bool,
    typer.Option(
        help="Measure copy bandwidth and matmul FLOP/s first (with --gpus N: and the "
        "interconnect's bus bandwidth)."
    ),
]
# collect's workload and lever options
_Workload = Annotated[
    str, typer.Option(help="train (default) or generate (prefill + decode, KV cache).")
]
_Checkpoint = Annotated[
    bool, typer.Option("--checkpoint", help="Activation checkpointing per block (train).")
]
_Optimizer = Annotated[
    str | None,
    typer.Option(
        help="adamw, adamw-foreach or adamw-fused (train; default: torch's choice, "
        "foreach on CUDA, the adamw loop on CPU)."
    ),
]
_GradAccum = Annotated[
    int, typer.Option(help="Micro-batches of --batch per optimizer step (train).")
]
_CudaGraphs = Annotated[
    bool,
    typer.Option(
        "--cuda-graphs",
        help="Replay the step as a CUDA graph (train, CUDA; with --compile: mode=reduce-overhead).",
    ),
]
_Prompt = Annotated[
    int | None, typer.Option(help="Prompt tokens per sequence (generate; default 128).")
]
_NewTokens = Annotated[int | None, typer.Option(help="Decode steps (generate; default 64).")]
_BlockSize = Annotated[
    int | None,
    typer.Option(
        help="Override the preset's context (position embeddings; the longest --seq, or "
        "--prompt + --new-tokens). Naive attention's mask buffer grows as its square."
    ),
]


@app.command()
def collect(
    preset: Annotated[
        str, typer.Option(help="Model: tiny, gpt2-small, gpt2-medium, gpt2-large.")
    ] = "gpt2-small",
    device: Annotated[str, typer.Option(help="cuda or cpu.")] = "cuda",
    dtype: Annotated[str, typer.Option(help="fp32, bf16 or fp16 (autocast).")] = "fp32",
    attention: Annotated[str, typer.Option(help="naive (explicit softmax) or sdpa.")] = "naive",
    compile: Annotated[bool, typer.Option("--compile", help="torch.compile the model.")] = False,
    batch: Annotated[int, typer.Option(help="Sequences per step.")] = 8,
    seq: Annotated[
        int | None, typer.Option(help="Tokens per sequence (<= the preset's context; default 128).")
    ] = None,
    layers: Annotated[
        int | None, typer.Option(help="Override the preset's number of layers.")
    ] = None,
    block_size: _BlockSize = None,
    steps: Annotated[int, typer.Option(help="Timed (unprofiled) steps for the metrics.")] = 20,
    warmup: Annotated[int, typer.Option(help="Untimed warm-up steps first.")] = 5,
    seed: Annotated[int, typer.Option(help="Seed of the weights and the data.")] = 0,
    data: Annotated[
        Path | None, typer.Option(help="Train on this text file (bytes as tokens).")
    ] = None,
    lr: Annotated[float, typer.Option(help="AdamW learning rate.")] = 3e-4,
    tf32: Annotated[bool, typer.Option("--tf32", help="Allow TF32 for fp32 matmuls.")] = False,
    profile_wait: CO.ProfileWaitOption = SHARED.profile_wait,
    profile_warmup: CO.ProfileWarmupOption = SHARED.profile_warmup,
    profile_active: Annotated[
        int | None,
        typer.Option(help="Profiler schedule: recorded steps (default 2; generate: all)."),
    ] = None,
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
    ceilings: _Ceilings = True,
    out: Annotated[
        Path | None,
        typer.Option("-o", "--out", help="Run folder (default: runs/<preset>-b<B>-s<S>-...)."),
    ] = None,
    quiet: Annotated[bool, typer.Option("-q", "--quiet", help="No progress display.")] = False,
    xspace: CO.XspaceOption = SHARED.xspace,
    counters: _Counters = False,
    gpus: _Gpus = 1,
    parallel: _Parallel = "ddp",
    comm_rounds: CommRoundsOption = 6,
    comm_steps: CommStepsOption = 5,
    light_cost_rounds: CO.LightCostRoundsOption = SHARED.light_cost_rounds,
    workload: _Workload = "train",
    checkpoint: _Checkpoint = False,
    optimizer: _Optimizer = None,
    grad_accum: _GradAccum = 1,
    cuda_graphs: _CudaGraphs = False,
    prompt: _Prompt = None,
    new_tokens: _NewTokens = None,
) -> None:
    """Train a GPT under torch.profiler and write a run folder (trace, memory, manifest).
    With --gpus N: N ranks, one trace each (rank<R>.*), one manifest. With --workload
    generate: profile its prefill and decode steps instead."""
    from tracekit.collectors.config import CollectConfig  # flags checked before torch loads
    from tracekit.collectors.profiler_config import ProfilerConfig

    seq, profile_active = workload_defaults(workload, seq, profile_active, new_tokens)
    cfg = CollectConfig(
        preset=preset, device=device, dtype=dtype, attention=attention, compile=compile,
        batch=batch, seq=seq, layers=layers, block_size=block_size, steps=steps,
        warmup=warmup, seed=seed, data=data, lr=lr, tf32=tf32, workload=workload,
        checkpoint=checkpoint, optimizer=optimizer, grad_accum=grad_accum,
        cuda_graphs=cuda_graphs, prompt=prompt, new_tokens=new_tokens,
        memory_snapshot=memory_snapshot, snapshot_steps=snapshot_steps,
        ceilings=ceilings, out=out, quiet=quiet, gpus=gpus, parallel=parallel,
        comm_rounds=comm_rounds, comm_steps=comm_steps,
        profiler=ProfilerConfig(
            wait=profile_wait, warmup=profile_warmup, active=profile_active,
            repeat=profile_repeat, record_shapes=record_shapes, profile_memory=profile_memory,
            with_flops=with_flops, with_stack=with_stack, with_modules=with_modules,
            memory_timeline=memory_timeline, timeline_pass=not single_pass,
            light_cost_rounds=light_cost_rounds,
        ),
    )  # fmt: skip
    _check_counters(counters, device, gpus)
    from tracekit.collectors import collect_run, summary

    run_dir = collect_run(cfg)
    if counters:
        _replay_counters(run_dir)
    typer.echo(summary(run_dir))
    if xspace:
        export_xspace_of(run_dir, None, None, None)


def _check_counters(counters: bool, device: str, gpus: int) -> None:
    if counters and device != "cuda":
        raise UsageError("--counters needs --device cuda (Nsight Compute replays CUDA kernels)")
    if counters and gpus > 1:
        raise UsageError("--counters replays one process's step: use it with --gpus 1")


def _replay_counters(run_dir: Path) -> None:
    """``collect --counters``: replay one step of the run under Nsight Compute."""
    from tracekit.collectors.replay import run_counters

    entry = run_counters(run_dir)
    typer.echo(
        f"counters: {entry['profiled_launches']} launch configurations replayed "
        f"in {entry['replay_seconds']:.1f} s -> {run_dir / entry['csv']}"
    )
    if "gemm" in entry:
        g = entry["gemm"]
        typer.echo(
            f"counters: {g['profiled_launches']} GEMM launches replayed "
            f"in {g['replay_seconds']:.1f} s -> {run_dir / g['csv']}"
        )


app.command("run", cls=ScriptCommand, options_metavar=RUN_METAVAR)(run_script_cmd)


@app.command("export-xspace")
def export_xspace_cmd(
    trace: Annotated[
        Path, typer.Argument(help="Trace file (.json or .json.gz), run folder or parsed folder.")
    ],
    logdir: Annotated[
        Path | None,
        typer.Option(
            "--logdir", help="TensorBoard log folder (default: tensorboard/ beside the trace)."
        ),
    ] = None,
    run: Annotated[
        str | None, typer.Option("--run", help="Run name (default: the run folder or trace name).")
    ] = None,
    host: Annotated[
        str | None,
        typer.Option("--host", help="Host name (default: rank<N> if distributed, else localhost)."),
    ] = None,
) -> None:
    """Write the trace as XSpace for TensorBoard's PROFILE tab (xprof)."""
    readable_input(trace)
    export_xspace_of(trace, logdir, run, host)


@app.command()
def sweep(
    batch: Annotated[
        str | None,
        typer.Option(help="Batch sizes, comma-separated (default 4,8,16,32; generate: 1-256)."),
    ] = None,
    seq: Annotated[
        str | None,
        typer.Option(
            help="Sequence lengths, comma-separated (default 64-1024; generate: the "
            "contexts, prompt + new tokens, 128-1024; defaults past the model's context "
            "are left out)."
        ),
    ] = None,
    dtype: Annotated[
        str | None, typer.Option(help="Precisions: fp32, bf16, fp16 (default fp32,bf16).")
    ] = None,
    attention: Annotated[
        str | None, typer.Option(help="Attentions: naive, sdpa (default naive,sdpa).")
    ] = None,
    gpus: Annotated[
        str, typer.Option(help="GPU counts, comma-separated (an axis; --batch is per GPU).")
    ] = "1",
    parallel: Annotated[str, typer.Option(help="ddp or fsdp, for GPU counts above 1.")] = "ddp",
    preset: Annotated[str, typer.Option(help="Model preset (as for collect).")] = "gpt2-small",
    grid: Annotated[
        bool, typer.Option("--grid/--axes", help="Full product, or one axis at a time (default).")
    ] = False,
    device: Annotated[str, typer.Option(help="cuda or cpu.")] = "cuda",
    base_batch: Annotated[int, typer.Option(help="Batch of the axes' base configuration.")] = 8,
    base_seq: Annotated[
        int | None,
        typer.Option(help="Seq of the axes' base configuration (default 128; generate: 1024)."),
    ] = None,
    workload: Annotated[
        str, typer.Option(help="train (default) or generate (collect --workload generate).")
    ] = "train",
    new_tokens: Annotated[
        int, typer.Option(help="Generate: decode steps; the prompt is seq - new tokens.")
    ] = 64,
    layers: Annotated[
        int | None, typer.Option(help="Override the preset's number of layers.")
    ] = None,
    block_size: _BlockSize = None,
    steps: Annotated[int, typer.Option(help="Timed steps per configuration.")] = 10,
    warmup: Annotated[int, typer.Option(help="Warm-up steps per configuration.")] = 3,
    profile_active: Annotated[int, typer.Option(help="Profiled steps per configuration.")] = 1,
    timeout: Annotated[float, typer.Option(help="Seconds allowed per configuration.")] = 300.0,
    resume: Annotated[
        bool, typer.Option("--resume", help="Continue the sweep in -o, skipping done rows.")
    ] = False,
    out: Annotated[Path, typer.Option("-o", "--out", help="Sweep folder.")] = Path("sweep"),
    quiet: Annotated[bool, typer.Option("-q", "--quiet", help="No progress display.")] = False,
) -> None:
    """Collect a grid of configurations (each in its own process) and report how memory and
    speed scale: sweep table, analytic memory model, fits, plots and findings."""
    from tracekit.collectors.gpt_config import preset as preset_config
    from tracekit.commands.sweep import sweep as run_sweep
    from tracekit.sweep import SweepPlan, describe
    from tracekit.sweep.plan import ATTENTIONS as ATTN
    from tracekit.sweep.plan import DTYPES, fit_contexts, parse_choice_list, parse_int_list

    gen = workload == "generate"  # its defaults: the batch and context axes, bf16
    block = block_size or preset_config(preset).block_size
    seqs, base = fit_contexts(
        parse_int_list(seq, "seq") if seq else None,
        parse_int_list("128,256,512,1024" if gen else "64,128,256,512,1024", "seq"),
        base_seq, 1024 if gen else 128, block,
    )  # fmt: skip
    plan = SweepPlan(
        batches=tuple(
            parse_int_list(batch or ("1,2,4,8,16,32,64,128,256" if gen else "4,8,16,32"), "batch")
        ),
        seqs=tuple(seqs),
        dtypes=tuple(parse_choice_list(dtype or ("bf16" if gen else "fp32,bf16"), "dtype", DTYPES)),
        attentions=tuple(
            parse_choice_list(attention or ("sdpa" if gen else "naive,sdpa"), "attention", ATTN)
        ),
        gpus=tuple(parse_int_list(gpus, "gpus")),
        parallel=parallel,
        preset=preset,
        device=device,
        grid=grid,
        base_batch=base_batch,
        base_seq=base,
        workload=workload,
        new_tokens=new_tokens,
        layers=layers,
        block_size=block_size,
        steps=steps,
        warmup=warmup,
        profile_active=profile_active,
        timeout_s=timeout,
    )
    table, outs = run_sweep(plan, out, resume=resume, quiet=quiet)
    typer.echo(describe(table, outs))


@app.command()
def advise(
    run: Annotated[Path, typer.Argument(help="A `tracekit collect` training run folder.")],
    levers: Annotated[
        str | None,
        typer.Option(
            help="Levers to try, comma-separated (default: all): sdpa, bf16, compile, "
            "adamw-fused, checkpoint, cuda-graphs, batch, grad-accum."
        ),
    ] = None,
    objective: Annotated[
        str, typer.Option(help="Rank by: time (step time), memory (peak), tokens-per-s.")
    ] = "time",
    factor: Annotated[
        int, typer.Option(help="The batch and grad-accum levers multiply by this.")
    ] = 2,
    dry_run: Annotated[
        bool,
        typer.Option("--dry-run", "--predict-only", help="Print the predictions; run nothing."),
    ] = False,
    steps: Annotated[int, typer.Option(help="Timed steps per measured run.")] = 10,
    warmup: Annotated[int, typer.Option(help="Warm-up steps per measured run (>= 1).")] = 3,
    timeout: Annotated[float, typer.Option(help="Seconds allowed per measured run.")] = 600.0,
    resume: Annotated[
        bool, typer.Option("--resume", help="Continue in -o, skipping the rows already done.")
    ] = False,
    out: Annotated[
        Path | None,
        typer.Option("-o", "--out", help="Output folder (default: RUN-advise/ beside RUN)."),
    ] = None,
    format: Annotated[
        str, typer.Option("--format", help="Terminal output: 'text' (tables) or 'json'.")
    ] = "text",
    quiet: Annotated[bool, typer.Option("-q", "--quiet", help="No progress display.")] = False,
    rounds: RoundsOption = 5,
    max_rounds: MaxRoundsOption = 30,
    half_width: HalfWidthOption = 0.05,
    budget: BudgetOption = 240.0,
    paired: PairedOption = True,
) -> None:
    """Rank the optimisation levers for a run: predict each one's step time and peak memory
    from the run's critical path and memory model, then measure it (each lever's collect for
    its peak and trace; its step time against the baseline's in interleaved rounds, with a
    90 % interval; the best combination the same way)."""
    readable_input(run)
    if format not in ("text", "json"):
        raise UsageError(f"--format must be 'text' or 'json', not {format!r}")
    from tracekit.advise.advice import AdviseOptions
    from tracekit.advise.advice import advise as run_advise
    from tracekit.advise.levers import parse_levers

    opts = AdviseOptions(
        levers=tuple(parse_levers(levers)), objective=objective, factor=factor, steps=steps,
        warmup=warmup, timeout_s=timeout, predict_only=dry_run, resume=resume, quiet=quiet,
        paired=paired, rounds=paired_options(rounds, max_rounds, half_width, budget),
    )  # fmt: skip
    result = run_advise(run, out, opts)
    files: list[str] = []
    if result.out is not None:
        from tracekit.reports.advise import write_outputs

        written = write_outputs(result.doc, result.table, result.out)
        files = [f"wrote {p}" for p in [*result.files, *written]]
    if format == "json":
        import json

        typer.echo(json.dumps(result.doc, indent=2))
        return
    from rich.console import Console

    from tracekit.reports.advise import render

    render(result.doc, result.table, Console(), files)


@app.command()
def classify(
    trace: Annotated[
        Path,
        typer.Argument(
            help="Trace file, run folder, a `tracekit parse` folder, or a folder of a job's "
            "rank traces (each rank into OUT/rank<R>/)."
        ),
    ],
    out: Annotated[
        Path | None,
        typer.Option("-o", "--out", help="Output folder (default: TRACE.classify/, RUN/classify/)"),
    ] = None,
    peak_tflops: Annotated[
        float | None,
        typer.Option("--peak-tflops", help="Peak TFLOP/s where no measurement or spec gives one."),
    ] = None,
    bandwidth: Annotated[
        float | None,
        typer.Option("--bandwidth", help="Memory bandwidth (GB/s) where nothing else gives it."),
    ] = None,
    counters: Annotated[
        Path | None,
        typer.Option("--counters", help="Nsight Compute CSV (ncu --csv --page raw) to merge."),
    ] = None,
) -> None:
    """Class every kernel and operator and place it on the device roofline."""
    readable_input(trace)
    from tracekit.analyse import classify_path
    from tracekit.ranks.commands import classify_ranks

    many = None
    if counters is None:  # Nsight Compute counters are of one process: one trace
        many = classify_ranks(trace, out, peak_tflops=peak_tflops, bandwidth_gbs=bandwidth)
    report = many or classify_path(
        trace, out, peak_tflops=peak_tflops, bandwidth_gbs=bandwidth, counters=counters
    )
    typer.echo(report)


# report's multi-rank options
_Rank = Annotated[
    int | None,
    typer.Option(help="On a folder of rank traces: the rank reported in detail (default: lowest)."),
]
_Scheduler = Annotated[
    str | None,
    typer.Option(
        help="On a folder of rank traces: run the per-rank work on this Dask scheduler "
        "(tcp://HOST:PORT; pip install 'tracekit[dask]'), not on local processes."
    ),
]
_Workers = Annotated[
    int | None, typer.Option(help="On a folder of rank traces: local worker processes.")
]


@app.command()
def report(
    trace: Annotated[
        Path,
        typer.Argument(
            help="Trace file (.json/.json.gz), run folder, parsed folder, or a folder of a "
            "job's rank traces (every rank analysed; see --rank)."
        ),
    ],
    out: Annotated[
        Path | None,
        typer.Option("-o", "--out", help="Output folder (default: TRACE.report/ or RUN/report/)."),
    ] = None,
    format: Annotated[
        str, typer.Option("--format", help="Terminal output: 'text' (tables) or 'json' (summary).")
    ] = "text",
    tensorboard: Annotated[
        Path | None,
        typer.Option(
            "--tensorboard",
            help="TensorBoard logdir (default for a run folder: its "
            "tensorboard/ folder; for a trace file: none).",
        ),
    ] = None,
    no_tensorboard: Annotated[
        bool, typer.Option("--no-tensorboard", help="Write no TensorBoard output.")
    ] = False,
    peak_tflops: Annotated[
        float | None,
        typer.Option("--peak-tflops", help="Peak TFLOP/s, for a device tracekit does not know."),
    ] = None,
    bandwidth: Annotated[
        float | None,
        typer.Option("--bandwidth", help="Memory bandwidth in GB/s, for an unknown device."),
    ] = None,
    rank: _Rank = None,
    scheduler: _Scheduler = None,
    workers: _Workers = None,
    timeline: TimelineOption = "auto",
) -> None:
    """Report time per class, roofline, memory and GPU idle time: terminal, HTML, JSON,
    plots, Parquet and TensorBoard. On a folder of a job's rank traces: every rank's
    communication, exposed communication, stragglers and collectives (bus bandwidth), and
    one rank in detail."""
    readable_input(trace)
    if format not in ("text", "json"):
        raise UsageError(f"--format must be 'text' or 'json', not {format!r}")
    dedicate_process()
    from tracekit.commands.report import report as run_report
    from tracekit.reports.render import summary_text

    result = run_report(
        trace,
        out,
        tensorboard=tensorboard,
        no_tensorboard=no_tensorboard,
        peak_tflops=peak_tflops,
        bandwidth_gbs=bandwidth,
        rank=rank,
        scheduler=scheduler,
        workers=workers,
        timeline=timeline,
    )
    if format == "json":
        typer.echo(summary_text(result), nl=False)
        return
    from rich.console import Console

    from tracekit.reports import terminal

    terminal.render(result.summary, Console(), result.describe())
    _finished_cleanly()


def dedicate_process() -> None:
    """Tune this process for a command that exits after its output (`tracekit parse`,
    `tracekit report`). Call it before numpy and pyarrow are imported: no OpenBLAS threads
    (no linear algebra here: they would only spin, ~0.1 s on 2 cores), freed memory kept in
    the heap for reuse and Arrow allocating from that heap
    (:func:`tracekit.parse.dedicate_process`). benchmarks/report_speed.py calls it too, to
    measure the same."""
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    keep_freed_memory()
    from tracekit.parse import dedicate_process as tune_parse

    tune_parse()


# Set by a command that has written, closed and joined everything it started: the console
# entry point may then end the process without the interpreter's teardown of pandas,
# pyarrow and matplotlib (0.3-0.5 s after a report; nothing is left to clean up).
_EXIT_NOW = False


def _finished_cleanly() -> None:
    global _EXIT_NOW
    _EXIT_NOW = True


@app.command()
def compare(
    a: Annotated[Path, typer.Argument(help="Run A: trace file, run folder or parsed folder.")],
    b: Annotated[Path, typer.Argument(help="Run B, compared against A.")],
    out: Annotated[
        Path | None,
        typer.Option("-o", "--out", help="Output folder (default: compare-A-vs-B/ beside A)."),
    ] = None,
    format: Annotated[
        str, typer.Option("--format", help="Terminal output: 'text' (tables) or 'json'.")
    ] = "text",
) -> None:
    """What changed from run A to run B, per step: time, classes, operators, kernels."""
    readable_input(a, b)
    if format not in ("text", "json"):
        raise UsageError(f"--format must be 'text' or 'json', not {format!r}")
    import tracekit.reports.compare as cmp
    from tracekit.commands.compare import run_compare

    result = run_compare(a, b, out)
    if format == "json":
        typer.echo(cmp.json_text(result), nl=False)
        return
    from rich.console import Console

    cmp.render(result.comparison, Console(), result.describe())


def main(argv: list[str] | None = None) -> int:
    """Console entry point: one-line errors and exit codes, never a traceback for bad input."""
    try:
        rv = app(args=argv, prog_name="tracekit", standalone_mode=False)
        # typer >= 0.16 turns Ctrl-C into Exit(130) and, outside standalone mode, returns
        # the code instead of raising it
        if isinstance(rv, int) and not isinstance(rv, bool) and rv:
            if rv == 130:
                typer.echo("tracekit: interrupted", err=True)
            return rv
    except click_exc.NoArgsIsHelpError as e:
        typer.echo(e.ctx.get_help() if e.ctx else "", err=True)
        return 2
    except typer.Exit as e:
        return int(getattr(e, "exit_code", 0) or 0)
    except click_exc.UsageError as e:
        typer.echo(f"tracekit: error: {e.format_message()}", err=True)
        return 2
    except (typer.Abort, KeyboardInterrupt):
        typer.echo("tracekit: interrupted", err=True)
        return 130
    except TracekitError as e:
        typer.echo(f"tracekit: error: {e}", err=True)
        return e.exit_code
    return 0


def run() -> None:
    code = main()
    if _EXIT_NOW:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    freeze_before_exit()  # collect, run, sweep, ...: torch's objects need no collection
    sys.exit(code)


if __name__ == "__main__":
    run()
