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
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

import tracekit.collectors.observer as observer
from tracekit.collectors.ceilings import measure_ceilings
from tracekit.collectors.config import CollectConfig, resolve_device
from tracekit.collectors.cupti_pass import TimelinePass
from tracekit.collectors.display import Display
from tracekit.collectors.faults import fault_hook
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
    HOST_PROBE_STEPS,
    StepTimer,
    Workload,
    build_workload,
    cuda_graphs_method,
    run_steps,
    summarize_ms,
    time_host_issue,
)
from tracekit.errors import OutOfMemoryError, TracekitError, UsageError
from tracekit.io import atomic_dir
from tracekit.manifest import MANIFEST, write_manifest
from tracekit.version import __version__

SNAPSHOT = "memory_snapshot.pickle"
TENSORBOARD = "tensorboard"


# --------------------------------------------------------------------------- display


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
        "tracekit": __version__,
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
    hook = fault_hook(0)
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

    n, host_probe = host_probe_phase(wl, ui, n)

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
    manifest["metrics"].update(host_probe)

    def snapshot_steps() -> None:
        ui.phase("recording CUDA memory snapshot", cfg.snapshot_steps)
        run_steps(wl.step, cfg.snapshot_steps, start=n, on_step=ui.advance)

    path = run_dir / (prefix + SNAPSHOT)
    arts.update(snapshot_artifacts(cfg.memory_snapshot, device, path, snapshot_steps))
    if arts["memory_snapshot"]:
        n += cfg.snapshot_steps
    timed = (cfg.warmup + 1, cfg.warmup + cfg.steps)
    windows = (cost or {}).get("unprofiled_ms") or []
    n = _residual_check(wl, ui, manifest, seen, (timed_ms, timed), windows, n)
    manifest["total_steps"] = n


def host_probe_phase(wl: Workload, ui: Display, n: int) -> tuple[int, dict[str, Any]]:
    """On CUDA, the host-issue probe's steps from step ``n``: the next step and the
    manifest's entries (:func:`host_probe_metrics`). On CPU the step is the host's own
    time: nothing hidden to time, no steps."""
    if wl.device.type != "cuda":
        return n, {}
    ui.phase("host-issue probe (unprofiled)", HOST_PROBE_STEPS)
    host_ms, synced_ms = time_host_issue(wl.step, HOST_PROBE_STEPS, start=n, device=wl.device)
    return n + HOST_PROBE_STEPS, host_probe_metrics(host_ms, synced_ms)


def host_probe_metrics(host_ms: list[float], synced_ms: list[float]) -> dict[str, Any]:
    """The manifest's host-issue entries (:func:`~tracekit.collectors.train.time_host_issue`):
    ``host_issue_ms``, the host's time per step from its start to its return with the GPU
    idle at the start, and ``synced_step_ms``, the same steps until the GPU is done."""
    return {
        "host_issue_ms": summarize_ms(host_ms),
        "synced_step_ms": summarize_ms(synced_ms),
        "host_issue_method": (
            f"{len(host_ms)} unprofiled steps after the timed ones, each after "
            "torch.cuda.synchronize: time.perf_counter from the step's start to its return "
            "(host_issue_ms) and to the next synchronize (synced_step_ms)"
        ),
    }


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
    timed: tuple[list[float], tuple[int, int]],
    windows: list[float],
    n: int,
) -> int:
    """After every pass: what was left switched on, and the residual of
    :data:`~tracekit.collectors.observer.RESIDUAL_STEPS` unprofiled steps against the
    ``timed`` steps (their times and numbers) before any pass, with the drift between the
    cost rounds' unprofiled ``windows`` (the manifest's ``observer``). Returns the next
    step."""
    timed_ms, timed_steps = timed
    seen.update(observer.after_passes(seen["state_before"], wl.model, wl.device))
    ui.phase("residual check (unprofiled)", observer.RESIDUAL_STEPS)
    timer = StepTimer(wl.device)
    run_steps(wl.step, observer.RESIDUAL_STEPS, start=n, timer=timer, on_step=ui.advance)
    after = (n + 1, n + observer.RESIDUAL_STEPS)
    manifest["observer"] = observer.block(
        seen, timed_ms, timer.millis(), windows=windows, before_steps=timed_steps,
        after_steps=after,
    )  # fmt: skip
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
    """Run ``cfg`` in this process and write its run folder; returns the folder's path.
    ``tracekit collect`` goes through :func:`tracekit.collectors.distributed.collect`, which
    runs a config of several GPUs as one process per GPU."""
    if cfg.gpus > 1:
        raise UsageError(
            f"--gpus {cfg.gpus}: one process per GPU (tracekit.collectors.distributed.collect)"
        )
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
        write_manifest(tmp / MANIFEST, manifest)
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
