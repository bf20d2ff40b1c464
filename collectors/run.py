"""``collect(config) -> Path``: one profiled training run, written as one run folder.

Phases: device ceilings -> build -> warm-up -> timed (unprofiled) steps ->
profiled steps (trace + memory timeline) -> CUDA memory snapshot -> manifest.

The folder appears only complete (``tracekit.io.atomic_dir``); ``manifest.json``
inside it is written last. Ctrl-C or a failure before the workload starts leaves
nothing. A CUDA out-of-memory error leaves a folder whose manifest has status
``oom`` and raises :class:`tracekit.errors.OutOfMemoryError` (exit 3); another
error during the workload leaves status ``error`` and is raised again.
"""

from __future__ import annotations

import contextlib
import math
import os
import platform
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

import tracekit
import tracekit.collectors.observer as observer
from tracekit.collectors.ceilings import measure_ceilings
from tracekit.collectors.config import CollectConfig, resolve_device
from tracekit.collectors.cupti_pass import TimelinePass, recorder_line
from tracekit.collectors.generate import kv_cache_bytes, run_generate
from tracekit.collectors.gpt import count_params, train_flops_per_token
from tracekit.collectors.light_cost import CostRounds, cost_text, overhead
from tracekit.collectors.light_cost import measure as measure_cost
from tracekit.collectors.passes import (
    CategoryProfiler,
    MarkedProfiler,
    StepMarker,
    category_config,
    category_pass_needed,
    profiled_steps,
    timeline_absent_reason,
)
from tracekit.collectors.profiler import ProfilerConfig, default_worker_name, snapshot_artifacts
from tracekit.collectors.train import (
    StepTimer,
    Workload,
    build_workload,
    cuda_graphs_method,
    run_steps,
    summarize_ms,
)
from tracekit.errors import OutOfMemoryError, TracekitError
from tracekit.io import atomic_dir, atomic_write_json

MANIFEST = "manifest.json"
SNAPSHOT = "memory_snapshot.pickle"
TENSORBOARD = "tensorboard"
SCHEMA_VERSION = 1


# --------------------------------------------------------------------------- display


class Display:
    """A rich progress display on a terminal; silent otherwise or when ``quiet``."""

    def __init__(self, quiet: bool) -> None:
        from rich.console import Console

        self.console = Console(stderr=True)
        self.enabled = not quiet and self.console.is_terminal
        self._progress: Any = None
        self._task: Any = None

    @contextlib.contextmanager
    def running(self) -> Iterator[Display]:
        if not self.enabled:
            yield self
            return
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            SpinnerColumn,
            TextColumn,
            TimeElapsedColumn,
        )

        with Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=self.console,
            transient=True,
        ) as progress:
            self._progress = progress
            try:
                yield self
            finally:
                self._progress = None

    def phase(self, description: str, total: int | None = None) -> None:
        if self._progress is None:
            return
        if self._task is not None:
            self._progress.update(self._task, visible=False)
        self._task = self._progress.add_task(description, total=total)

    def advance(self) -> None:
        if self._progress is not None and self._task is not None:
            self._progress.advance(self._task)

    def note(self, text: str) -> None:
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, description=text)


# ------------------------------------------------------------------- environment


def _driver_version() -> str | None:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return out.splitlines()[0].strip() if out else None


def versions(device: torch.device) -> dict[str, Any]:
    cudnn = torch.backends.cudnn.version() if device.type == "cuda" else None  # type: ignore[no-untyped-call]
    return {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": cudnn,
        "driver": _driver_version() if device.type == "cuda" else None,
        "python": platform.python_version(),
        "tracekit": tracekit.__version__,
    }


def device_info(device: torch.device) -> dict[str, Any]:
    if device.type == "cuda":
        p = torch.cuda.get_device_properties(device)
        return {
            "type": "cuda",
            "name": p.name,
            "index": device.index,
            "total_memory": int(p.total_memory),
            "sm_count": int(p.multi_processor_count),
            "capability": [int(p.major), int(p.minor)],
        }
    total = None
    with contextlib.suppress(ValueError, OSError, AttributeError):
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return {
        "type": "cpu",
        "name": platform.processor() or platform.machine(),
        "index": None,
        "total_memory": total,
        "sm_count": None,
        "capability": None,
        "threads": torch.get_num_threads(),
    }


def precisions_used(cfg: CollectConfig) -> list[str]:
    """Matmul precisions this run uses: fp32 always (the reference), tf32 if enabled,
    and the autocast dtype."""
    used = ["fp32"]
    if cfg.tf32:
        used.append("tf32")
    if cfg.dtype != "fp32":
        used.append(cfg.dtype)
    return used


def _one_line(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return f"{type(e).__name__}: {lines[0] if lines else ''}".strip()


def _is_oom(e: BaseException) -> bool:
    return isinstance(e, torch.OutOfMemoryError)


# ------------------------------------------------------------------------ collect


def peak_from_warmup(cfg: CollectConfig) -> bool:
    """Whether the peak is read over the warm-up too: a CUDA graph's replay allocates
    nothing (its tensors live in the private pool its capture, in warm-up, allocated), so
    a peak over the timed steps alone would miss the step's activations."""
    return cfg.cuda_graphs


def memory_method(cfg: CollectConfig, device_type: str) -> str:
    """How the manifest's memory metrics were measured, in words."""
    if device_type != "cuda":
        return "not measured on CPU (no caching-allocator counters)"
    window = (
        "over the warm-up (which captures the CUDA graph: its private pool holds the "
        "step's tensors, which the replays reuse without allocating) and the timed steps"
        if peak_from_warmup(cfg)
        else "over the timed steps"
    )
    return (
        f"peak: torch.cuda.max_memory_allocated/reserved {window} after "
        "reset_peak_memory_stats; avg: mean of torch.cuda.memory_allocated sampled at "
        "step start, after forward, after backward and after the optimizer step"
    )


def _metrics(
    cfg: CollectConfig,
    wl: Workload,
    timed_ms: list[float],
    profiled_ms: list[float],
    peak_alloc: int | None,
    peak_reserved: int | None,
    avg_alloc: float | None,
    final_loss: float,
) -> dict[str, Any]:
    step = summarize_ms(timed_ms)
    median_s = float(step["median"]) / 1e3
    prof = summarize_ms(profiled_ms)
    tokens = cfg.tokens_per_step  # grad_accum micro-batches of batch x seq
    flops_per_step = train_flops_per_token(cfg.model_config(), cfg.seq) * tokens
    return {
        "step_time_ms": step,
        "samples_per_s": cfg.grad_accum * cfg.batch / median_s,
        "tokens_per_s": tokens / median_s,
        "model_flops_per_s": flops_per_step / median_s,
        "peak_allocated_bytes": peak_alloc,
        "peak_reserved_bytes": peak_reserved,
        "avg_allocated_bytes": avg_alloc,
        "profiled_step_time_ms": prof["median"],
        "profiled_step_time": prof,
        "profiler_overhead_pct": (float(prof["median"]) / float(step["median"]) - 1.0) * 100,
        "final_loss": final_loss,
        "memory_method": memory_method(cfg, wl.device.type),
    }


def _test_fault(model: torch.nn.Module) -> None:
    """The multi-GPU runs' test hook (``TRACEKIT_TEST_FAULT``, ``collectors/rank.py``) in
    one process, as rank 0: how tests make a run fail or run out of memory."""
    if os.environ.get("TRACEKIT_TEST_FAULT"):
        from tracekit.collectors.rank import _fault_hook

        hook = _fault_hook(0)
        if hook is not None:
            hook(model)


def _workload(cfg: CollectConfig, device: torch.device, run_dir: Path, ui: Display,
              manifest: dict[str, Any], *, prefix: str = "",
              wrap: Callable[[torch.nn.Module], torch.nn.Module] | None = None,
              data_seed: int | None = None,
              after_timed: Callable[[Workload, int], int] | None = None) -> None:  # fmt: skip
    """Run every phase, filling ``manifest`` in place (so a failure keeps what was done).

    One rank of a multi-GPU run (``collectors/rank.py``) passes ``prefix`` (``rank<R>.``,
    the start of each of its file names), ``wrap`` (DDP / FSDP2), its ``data_seed`` and
    ``after_timed``: steps of its own between the timed steps and the profiled passes (the
    measured communication cost), called with the workload and the next global step,
    returning the step after its own."""
    if cfg.ceilings:
        ui.phase("measuring device ceilings")
        manifest["ceilings"] = measure_ceilings(device, precisions_used(cfg)).to_dict()
    if cfg.workload == "generate":
        run_generate(cfg, device, run_dir, ui, manifest)
        return
    arts = manifest["artifacts"]

    ui.phase("building model" + (" (torch.compile happens in warm-up)" if cfg.compile else ""))
    if wrap is None and data_seed is None:  # one process: the call tests substitute
        wl = build_workload(cfg, device)
        _test_fault(wl.model)
    else:
        wl = build_workload(cfg, device, wrap=wrap, data_seed=data_seed)
    n = 0  # global step counter: every phase continues the same training run

    from_warmup = peak_from_warmup(cfg)
    if device.type == "cuda" and from_warmup:
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
    ui.phase("warm-up", cfg.warmup)
    run_steps(wl.step, cfg.warmup, start=n, on_step=ui.advance)
    n += cfg.warmup

    ui.phase("timed steps (unprofiled)", cfg.steps)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        if not from_warmup:
            torch.cuda.reset_peak_memory_stats(device)
    wl.probe.samples.clear()
    timer = StepTimer(device)
    loss = run_steps(wl.step, cfg.steps, start=n, timer=timer, on_step=ui.advance)
    n += cfg.steps
    timed_ms = timer.millis()  # synchronises once, after the last timed step
    peak_alloc = peak_reserved = None
    avg_alloc: float | None = None
    if device.type == "cuda":
        peak_alloc = int(torch.cuda.max_memory_allocated(device))
        peak_reserved = int(torch.cuda.max_memory_reserved(device))
        avg_alloc = sum(wl.probe.samples) / len(wl.probe.samples)
    assert loss is not None
    final_loss = float(loss)
    if not math.isfinite(final_loss):
        raise TracekitError(f"the training loss is {final_loss} after {n} steps")

    if after_timed is not None:
        ui.phase("communication cost (unprofiled)")
        n = after_timed(wl, n)
    name = prefix + default_worker_name()
    seen = _observe_before(cfg, device, wl)
    n, profiled_ms, timeline_ms, cost = _profile(
        wl, cfg.profiler, device, run_dir, ui, manifest, name, n
    )
    manifest["metrics"] = _metrics(
        cfg, wl, timed_ms, profiled_ms, peak_alloc, peak_reserved, avg_alloc, final_loss
    )
    manifest["metrics"].update(timeline_metrics(timeline_ms, timed_ms, cost))

    def snapshot_steps() -> None:
        ui.phase("recording CUDA memory snapshot", cfg.snapshot_steps)
        run_steps(wl.step, cfg.snapshot_steps, start=n, on_step=ui.advance)

    path = run_dir / (prefix + SNAPSHOT)
    arts.update(snapshot_artifacts(cfg.memory_snapshot, device, path, snapshot_steps))
    if arts["memory_snapshot"]:
        n += cfg.snapshot_steps
    timed = (cfg.warmup + 1, cfg.warmup + cfg.steps)
    n = _residual_check(wl, ui, manifest, seen, timed_ms, timed, n)
    manifest["total_steps"] = n


def _observe_before(cfg: CollectConfig, device: torch.device, wl: Workload) -> dict[str, Any]:
    """Before the first pass: CUPTI's teardown arranged, what is switched on now."""
    seen: dict[str, Any] = {"state_before": observer.state(wl.model)}
    if device.type == "cuda":
        graphs = bool(getattr(cfg, "cuda_graphs", False))
        seen["cupti_teardown"] = observer.arrange_teardown(torch.version.cuda, graphs).to_dict()
    return seen


def _residual_check(
    wl: Workload,
    ui: Display,
    manifest: dict[str, Any],
    seen: dict[str, Any],
    timed_ms: list[float],
    timed_steps: tuple[int, int],
    n: int,
) -> int:
    """After every pass: what was left switched on, and the residual of
    :data:`~tracekit.collectors.observer.RESIDUAL_STEPS` unprofiled steps against the
    steps timed before any pass (the manifest's ``observer``). Returns the next step."""
    after = observer.state(wl.model)
    seen["state_after"] = after
    seen["left_behind"] = observer.left_behind(seen["state_before"], after)
    if wl.device.type == "cuda":
        seen["cupti_attached"] = observer.teardown_now()
    ui.phase("residual check (unprofiled)", observer.RESIDUAL_STEPS)
    timer = StepTimer(wl.device)
    run_steps(wl.step, observer.RESIDUAL_STEPS, start=n, timer=timer, on_step=ui.advance)
    r = observer.residual(timed_ms, timer.millis(), before_steps=timed_steps,
                          after_steps=(n + 1, n + observer.RESIDUAL_STEPS))  # fmt: skip
    manifest["observer"] = {**seen, "residual": r.to_dict() if r else None,
                            "residual_absent": None if r else "too few timed steps"}  # fmt: skip
    return n + observer.RESIDUAL_STEPS


def _profile(wl: Workload, pcfg: ProfilerConfig, device: torch.device, run_dir: Path,
             ui: Display, manifest: dict[str, Any], name: str, n: int,
             ) -> tuple[int, list[float], list[float], dict[str, Any] | None]:  # fmt: skip
    """The profiled passes from global step ``n``: the light timeline pass (CUDA only),
    the full pass, and the category step where the full pass could not export the memory
    timeline (``collectors/passes.py``), the light pass's cost in interleaved rounds
    between the first two (``collectors/light_cost.py``). Returns the next step, the full
    and light passes' recorded step times and the light pass's cost."""
    arts = manifest["artifacts"]

    def note(what: str) -> None:
        ui.note(f"exporting {what}")

    timeline_ms: list[float] = []
    cost: dict[str, Any] | None = None
    why = timeline_absent_reason(pcfg, device)
    arts["timeline_trace_absent"] = why
    if why is None:
        ui.phase("profiling the timeline (CUDA activity only)", pcfg.steps)
        light = TimelinePass(pcfg, run_dir, device=device, worker_name=name, on_export=note)
        timeline_ms = profiled_steps(wl.step, light, n, ui.advance)
        n += pcfg.steps
        arts.update(light.artifacts())
        manifest["profiler"]["timeline"] = light.describe()
        if pcfg.light_cost_rounds:
            ui.phase("the light pass's cost: unprofiled and light windows, interleaved",
                     CostRounds(pcfg.light_cost_rounds).steps)  # fmt: skip
        ran, cost = measure_cost(wl.step, pcfg, device, run_dir, n, light.recorder, ui.advance)
        n += ran
    ui.phase("profiling", pcfg.steps)
    marker = StepMarker(device) if why is None else None  # the same launches as the light pass
    full = MarkedProfiler(pcfg, run_dir, device=device, worker_name=name, on_export=note,
                          marker=marker)  # fmt: skip
    profiled_ms = profiled_steps(wl.step, full, n, ui.advance)
    n += pcfg.steps
    arts.update(full.artifacts())
    if category_pass_needed(pcfg):
        ui.phase("memory by category: one more step, with stacks", category_config(pcfg).steps)
        cat = CategoryProfiler(pcfg, run_dir, device=device, worker_name=name, on_export=note)
        profiled_steps(wl.step, cat, n, ui.advance)
        n += cat.config.steps
        arts.update(cat.artifacts())
    return n, profiled_ms, timeline_ms, cost


def timeline_metrics(
    timeline_ms: list[float], timed_ms: list[float], cost: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The manifest metrics of the light pass: its recorded steps' median time, and its cost
    (``timeline_overhead_pct``): from ``cost``, the interleaved rounds, where they ran, else
    its median against the unprofiled median timed apart (``timeline_overhead_basis``
    says which; None: no light pass)."""
    if not timeline_ms or not timed_ms:
        return {"timeline_step_time_ms": None, "timeline_step_time": None,
                **overhead(cost, None, 1.0)}  # fmt: skip
    light = summarize_ms(timeline_ms)
    base = float(summarize_ms(timed_ms)["median"])
    return {
        "timeline_step_time_ms": light["median"],
        "timeline_step_time": light,
        **overhead(cost, float(light["median"]), base),
    }


def light_line(met: dict[str, Any]) -> str | None:
    """The summary's line on the light pass's step and its cost, saying how it was timed."""
    if met.get("timeline_step_time_ms") is None:
        return None
    head = f"light timeline pass step: {met['timeline_step_time_ms']:.2f} ms"
    if met.get("timeline_cost"):
        return f"{head}; its cost {cost_text(met['timeline_cost'])}"
    return (
        f"{head} ({met['timeline_overhead_pct']:+.1f} % against the unprofiled steps, timed "
        "apart, not interleaved: the host's drift is in this figure)"
    )


def step_entry(cfg: CollectConfig) -> dict[str, Any]:
    """The manifest's ``step``: what one step (one ProfilerStep, one timed sample) is."""
    if cfg.workload == "generate":
        return {
            "definition": "one decode step: one new token for each of the batch's sequences "
            "(the prefill is timed and marked apart)",
            "micro_batches": 1,
            "tokens": cfg.batch,
        }
    return {
        "definition": "one optimizer step: grad_accum micro-batches of batch x seq tokens, "
        "a forward and a backward each (loss / grad_accum), then one AdamW step",
        "micro_batches": cfg.grad_accum,
        "micro_batch_tokens": cfg.batch * cfg.seq,
        "tokens": cfg.tokens_per_step,
        "activation_checkpointing": "per block, torch.utils.checkpoint(use_reentrant=False)"
        if cfg.checkpoint
        else None,
        "optimizer": cfg.optimizer_name,
        "cuda_graphs": cuda_graphs_method(cfg),
        "model_flops_exclude": "the checkpoint recompute" if cfg.checkpoint else None,
    }


def empty_artifacts() -> dict[str, Any]:
    """The manifest's ``artifacts`` before anything is written (paths relative to the run)."""
    return {
        "trace": None,
        "traces": [],
        "memory_timeline": None,
        "memory_timeline_absent": None,
        "memory_timeline_pass": None,
        "timeline_trace": None,
        "timeline_traces": [],
        "timeline_trace_absent": None,
        "timeline_steps": None,
        "memory_snapshot": None,
        "memory_snapshot_absent": None,
        "profiler_flops": None,
        "tensorboard": TENSORBOARD,
    }


def base_manifest(cfg: CollectConfig, device: torch.device) -> dict[str, Any]:
    mcfg = cfg.model_config()
    return {
        "schema_version": SCHEMA_VERSION,
        "status": "error",  # until the run completes
        "error": None,
        "config": cfg.to_dict(),
        "model": {
            "n_params": count_params(mcfg),
            "train_flops_per_token": train_flops_per_token(mcfg, cfg.seq),
            "flops_formula": "6*N_matmul_params + 12*n_layer*n_embd*seq (Kaplan 2020; PaLM app. B)",
            **mcfg.to_dict(),
        },
        "step": step_entry(cfg),
        "versions": versions(device),
        "device": device_info(device),
        "metrics": None,
        "ceilings": None,
        "profiler": {
            **cfg.profiler.to_dict(),
            "activities": ["cpu", "cuda"] if device.type == "cuda" else ["cpu"],
            "steps": cfg.profiler.steps,
            "timeline": None,  # the light pass as it ran (collectors/passes.py)
        },
        "artifacts": empty_artifacts(),
        "command": sys.argv if Path(sys.argv[0]).name == "tracekit" else None,
    }


def collect(cfg: CollectConfig) -> Path:
    """Run ``cfg`` and write its run folder; returns the folder's path."""
    if cfg.gpus > 1:  # one process per GPU: collectors/distributed.py
        from tracekit.collectors.distributed import collect_distributed

        return collect_distributed(cfg)
    device = resolve_device(cfg)  # DeviceError / UsageError before anything is written
    out: Path = cfg.out_dir()
    ui = Display(cfg.quiet)
    failure: BaseException | None = None
    with ui.running(), atomic_dir(out) as tmp:
        (tmp / TENSORBOARD).mkdir()
        manifest = base_manifest(cfg, device)
        try:
            _workload(cfg, device, tmp, ui, manifest)
            manifest["status"] = "ok"
        except Exception as e:  # recorded in the manifest, raised again below
            failure = e
            manifest["status"] = "oom" if _is_oom(e) else "error"
            manifest["error"] = _one_line(e)
        ui.phase("writing manifest")
        atomic_write_json(tmp / MANIFEST, manifest)
    if failure is None:
        return out
    if _is_oom(failure) and cfg.workload == "generate":
        raise OutOfMemoryError(
            f"CUDA out of memory generating with --preset {cfg.preset} --batch {cfg.batch} "
            f"--prompt {cfg.prompt} --new-tokens {cfg.new_tokens} --dtype {cfg.dtype}; "
            f"{out}/{MANIFEST} has status 'oom' (the KV cache alone needs "
            f"{kv_cache_bytes(cfg) / 2**30:.2f} GiB: try a smaller --batch or context)"
        ) from failure
    if _is_oom(failure):
        raise OutOfMemoryError(
            f"CUDA out of memory with --preset {cfg.preset} --batch {cfg.batch} --seq {cfg.seq} "
            f"--dtype {cfg.dtype} --attention {cfg.attention}; {out}/{MANIFEST} has status "
            "'oom' (try a smaller --batch or --seq, --attention sdpa or --dtype bf16)"
        ) from failure
    if isinstance(failure, TracekitError):
        raise failure
    if isinstance(failure, RuntimeError):  # torch's errors: one line, manifest says more
        raise TracekitError(
            f"collect failed: {_one_line(failure)} ({out}/{MANIFEST} has status 'error')"
        ) from failure
    raise failure  # anything else is a bug: keep its traceback


# a run without CUDA allocator statistics (CPU): why collect's summary has no peak
NO_CPU_PEAK = (
    "peak allocated not measured while collecting (no CUDA allocator statistics); the "
    "report reads it from the trace's allocator events"
)


def _bytes(n: float | None) -> str:
    return "n/a" if n is None else f"{n / 2**30:.2f} GiB"


def overhead_words(met: dict[str, Any], digits: int) -> str:
    """The profiler's overhead against the unprofiled median it is measured from, named:
    a percentage up to doubling, a factor past it (a tiny CPU step profiled with shapes
    takes many times its own length; "+18718.9 %" read as a contradiction)."""
    base = met["step_time_ms"]["median"]
    pct = met["profiler_overhead_pct"]
    if pct >= 100:
        return f"{1 + pct / 100:.1f}× the unprofiled {base:.{digits}f} ms median"
    return f"profiler overhead {pct:+.1f} % over the unprofiled {base:.{digits}f} ms median"


def _generate_lines(m: dict[str, Any]) -> list[str]:
    met, g = m["metrics"], m["generate"]
    ft, tp, mem = met["ttft_ms"], met["tpot_ms"], met["memory"]
    return [
        f"generate: batch {g['batch']}, prompt {g['prompt']}, {g['new_tokens']} decode steps "
        f"(context {g['context']})",
        f"time to first token: {ft['median']:.2f} ms median (p10 {ft['p10']:.2f}, "
        f"p90 {ft['p90']:.2f}, n={ft['n']})",
        f"time per output token: {tp['median']:.3f} ms median (p10 {tp['p10']:.3f}, "
        f"p90 {tp['p90']:.3f}, n={tp['n']}); {met['tokens_per_s']:,.0f} tokens/s decoding, "
        f"{met['generated_tokens_per_s']:,.0f} tokens/s end to end",
        f"profiled decode step: {met['profiled_step_time_ms']:.3f} ms timed around the step "
        f"({overhead_words(met, 3)})",
        f"memory: peak allocated {_bytes(met['peak_allocated_bytes'])} = weights "
        f"{_bytes(mem['weights_bytes'])} + KV cache {_bytes(mem['kv_cache_bytes'])} "
        f"(formula {_bytes(g['kv_cache_bytes'])}) + other {_bytes(mem['other_bytes'])}"
        if met["peak_allocated_bytes"] is not None
        else f"memory: {NO_CPU_PEAK}; weights {_bytes(mem['weights_bytes'])}, KV cache "
        f"{_bytes(mem['kv_cache_bytes'])} (formula {_bytes(g['kv_cache_bytes'])})",
    ]


def shortened_text(cut: dict[str, Any]) -> str:
    """A window of a fitted schedule that the loop cut short (``schedule_shortened``)."""
    a, b = cut["steps"]
    return (
        f"the {cut['phase']} window ran {cut['ran']} of its {cut['planned']} steps "
        f"({a}-{b}): {cut['why']}"
    )


def observer_lines(obs: dict[str, Any] | None) -> list[str]:
    """The summary's lines on what the passes left behind and the residual, a warning
    where the steps after them ran more than 3 % slower."""
    if not obs:
        return []
    lines = []
    who = f"rank {obs['rank']}: " if isinstance(obs.get("rank"), int) else ""
    res = obs.get("residual")
    if res:
        warn = "warning: " if res.get("beyond_3pct") else ""
        lines.append(f"{warn}{who}{res['sentence']}")
    elif obs.get("residual_absent"):
        lines.append(f"{who}residual not checked: {obs['residual_absent']}")
    left = list(obs.get("left_behind") or [])
    if obs.get("cupti_attached"):
        left.append(obs["cupti_attached"])
    if left:
        lines.append(f"warning: {who}left behind by the profiler passes: {'; '.join(left)}")
    return lines


def summary(run_dir: Path) -> str:
    """A few lines describing a finished run folder (what the CLI prints)."""
    import json

    m = json.loads((Path(run_dir) / MANIFEST).read_text())
    lines = [f"run folder: {run_dir}  (status {m['status']})"]
    lines += [f"shortened: {shortened_text(c)}" for c in m.get("schedule_shortened") or []]
    met = m.get("metrics")
    if met and met.get("workload") == "generate":
        lines += _generate_lines(m)
    elif met:
        st = met["step_time_ms"]
        rates = [  # unknown for a script without tokens (tracekit run)
            f"{v:,.{d}f} {unit}/s"
            for v, unit, d in ((met.get("tokens_per_s"), "tokens", 0),
                               (met.get("samples_per_s"), "samples", 1))
            if v is not None
        ]  # fmt: skip
        lines.append(
            f"step time: {st['median']:.2f} ms median (p10 {st['p10']:.2f}, p90 {st['p90']:.2f}, "
            f"n={st['n']})" + "".join(f"; {r}" if i == 0 else f", {r}" for i, r in enumerate(rates))
        )
        if met.get("profiled_step_time_ms") is not None:
            lines.append(
                f"profiled step: {met['profiled_step_time_ms']:.2f} ms ({overhead_words(met, 2)})"
            )
        if (line := light_line(met)) is not None:
            lines.append(line)
        if (rec := recorder_line((m.get("profiler") or {}).get("timeline"))) is not None:
            lines.append(rec)
        lines += observer_lines(m.get("observer"))
        lines.append(
            f"memory: peak allocated {_bytes(met['peak_allocated_bytes'])}, peak reserved "
            f"{_bytes(met['peak_reserved_bytes'])}, average allocated "
            f"{_bytes(met['avg_allocated_bytes'])}"
            if met.get("peak_allocated_bytes") is not None
            else f"memory: {NO_CPU_PEAK}"
        )
    c = m.get("ceilings")
    if c:
        rates = ", ".join(
            f"{k} {v / 1e12:.1f} TFLOP/s" if v >= 1e11 else f"{k} {v / 1e9:.1f} GFLOP/s"
            for k, v in c["matmul_flops"].items()
            if v is not None
        )
        lines.append(f"ceilings: copy {c['memory_bandwidth_Bps'] / 1e9:.0f} GB/s; matmul {rates}")
    if m.get("distributed"):  # a multi-GPU run (collectors/dist_manifest.py)
        from tracekit.collectors.dist_manifest import summary_lines

        lines += summary_lines(m)
    arts = m["artifacts"]
    lines.append(f"trace: {arts['trace'] or 'none'}")
    for key in ("timeline_trace", "memory_timeline", "memory_snapshot"):
        if key not in arts:  # a manifest from before the light timeline pass
            continue
        why = arts.get(key + "_absent")
        if not arts[key] and not why:
            continue  # a pass this kind of run does not have: absent, not "none (None)"
        what = arts[key] or f"none ({why})"
        if key == "memory_timeline" and arts[key] and arts.get("memory_timeline_pass"):
            what += f", from the {arts['memory_timeline_pass']}"
        lines.append(f"{key.replace('_', ' ')}: {what}")
    return "\n".join(lines)
