"""The generate workload (``tracekit collect --workload generate``): prefill, then decode.

The GPT of ``collectors/gpt.py`` runs in ``torch.inference_mode`` with its weights in
``--dtype`` (cast once, as inference servers load them; training uses autocast instead)
and a KV cache preallocated for the whole context (``KVCache``: 2·L·B·S·C elements,
S = prompt + new tokens). One generation is:

* **prefill**: the ``--prompt`` tokens of each of the ``--batch`` sequences in one
  forward, which fills cache positions ``0 .. prompt`` and yields the first new token;
* **decode**: ``--new-tokens`` steps; step ``d`` feeds the last token, writes cache
  position ``prompt + d``, attends to ``prompt + d + 1`` cached tokens and picks the next
  token. Every step reads every weight once and the filled part of the cache.

Sampling is greedy (argmax on the device), so nothing waits for the GPU inside a
generation. In the profiled generation the prefill is the record_function range
:data:`PREFILL_RANGE` outside every step, and decode step ``d`` is ``ProfilerStep#d``
holding the range :data:`DECODE_RANGE` (names the analysis relies on; docs/collect.md).

Metrics come from unprofiled generations timed like training steps (CUDA events read
after the last one; ``perf_counter`` on CPU): time to first token (the prefill and its
argmax), time per output token (each decode step), tokens/s, and the peak memory split
into weights, KV cache and the rest.
"""

from __future__ import annotations

import contextlib
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch

from tracekit.collectors.config import CollectConfig, torch_dtype
from tracekit.collectors.gpt import GPT, KVCache, decode_flops_per_token
from tracekit.collectors.profiler import Profiler, snapshot_artifacts
from tracekit.collectors.train import POOL_BATCHES, StepTimer, sample_tokens, summarize_ms

PREFILL_RANGE = "tracekit.prefill"
DECODE_RANGE = "tracekit.decode"
STEP_RANGE = "ProfilerStep#{}"  # decode step d: the name torch gives its own steps
KV_CACHE_FORMULA = "2 * n_layer * batch * context * n_embd * bytes_per_elem"
DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
SNAPSHOT = "memory_snapshot.pickle"


class UI(Protocol):
    def phase(self, description: str, total: int | None = None) -> None: ...
    def advance(self) -> None: ...
    def note(self, text: str) -> None: ...


@dataclass
class Generator:
    """Model, cache and prompts of a generate run, and what they occupy."""

    cfg: CollectConfig
    model: GPT
    forward: Callable[..., torch.Tensor]
    cache: KVCache
    prompts: torch.Tensor  # (POOL_BATCHES, B, prompt)
    device: torch.device
    weight_bytes: int
    buffer_bytes: int
    kv_cache_bytes: int  # measured: the allocator's growth (CUDA), the tensors' bytes (CPU)


def kv_cache_bytes(cfg: CollectConfig) -> int:
    """The analytic KV cache: :data:`KV_CACHE_FORMULA`."""
    m = cfg.model_config()
    return 2 * m.n_layer * cfg.batch * cfg.context * m.n_embd * DTYPE_BYTES[cfg.dtype]


def build_generator(cfg: CollectConfig, device: torch.device) -> Generator:
    """The model in ``cfg.dtype`` (eval mode), the preallocated cache and the prompts."""
    torch.manual_seed(cfg.seed)
    torch.set_float32_matmul_precision("high" if cfg.tf32 else "highest")
    mcfg = cfg.model_config()
    dtype = torch_dtype(cfg.dtype)
    model = GPT(mcfg).to(device=device, dtype=dtype).eval()
    weight_bytes = sum(p.nbytes for p in model.parameters())
    buffer_bytes = sum(b.nbytes for b in model.buffers())
    cuda = device.type == "cuda"
    before = torch.cuda.memory_allocated(device) if cuda else 0
    cache = KVCache.allocate(mcfg, cfg.batch, cfg.context, dtype=dtype, device=device)
    measured = torch.cuda.memory_allocated(device) - before if cuda else cache.nbytes
    prompts = sample_tokens(cfg, cfg.prompt_tokens, device)
    forward: Callable[..., torch.Tensor] = model
    if cfg.compile:
        forward = torch.compile(model)
    return Generator(cfg, model, forward, cache, prompts, device, weight_bytes, buffer_bytes,
                     measured)  # fmt: skip


@dataclass
class GenerationTimers:
    prefill: StepTimer
    decode: StepTimer


def _range(name: str, on: bool) -> contextlib.AbstractContextManager[Any]:
    return torch.profiler.record_function(name) if on else contextlib.nullcontext()


def _timed(timer: StepTimer | None) -> contextlib.AbstractContextManager[None]:
    return timer.time() if timer is not None else contextlib.nullcontext()


def generate(
    gen: Generator,
    i: int,
    *,
    timers: GenerationTimers | None = None,
    profiler: Profiler | None = None,
    on_token: Callable[[], None] | None = None,
    decode_steps: int | None = None,
) -> torch.Tensor:
    """Generation ``i`` (prompt ``i`` of the pool): prefill, then the decode steps (all,
    or the first ``decode_steps``). Returns the last token ids (B, 1). Under ``profiler``
    the ranges are marked and ``profiler.step()`` follows the prefill and every decode
    step."""
    P = gen.cfg.prompt_tokens
    N = gen.cfg.decode_steps if decode_steps is None else decode_steps
    marks = profiler is not None
    fwd, cache = gen.forward, gen.cache
    prompt = gen.prompts[i % POOL_BATCHES]  # (B, P)
    with torch.inference_mode():
        with _range(PREFILL_RANGE, marks), _timed(timers.prefill if timers else None):
            logits = fwd(prompt, cache=cache, pos=0)  # (B, 1, V)
            token = logits[:, -1].argmax(dim=-1, keepdim=True)  # (B, 1), greedy
        if profiler is not None:
            profiler.step()
        for d in range(N):
            with (
                _range(STEP_RANGE.format(d), marks),
                _range(DECODE_RANGE, marks),
                _timed(timers.decode if timers else None),
            ):
                logits = fwd(token, cache=cache, pos=P + d)  # (B, 1, V)
                token = logits[:, -1].argmax(dim=-1, keepdim=True)  # (B, 1)
            if profiler is not None:
                profiler.step()
            if on_token is not None:
                on_token()
    return token


def profiler_schedule(cfg: CollectConfig) -> tuple[Callable[[int], Any], int, bool]:
    """(schedule, decode steps recorded, whether a profiler warm-up generation runs).

    The profiler steps once after the prefill and once after every decode step. With
    ``profile_warmup`` W > 0 one whole generation runs first with the profiler warming
    up over its last W intervals; then the profiled generation's prefill and its first
    ``min(profile_active, new_tokens)`` decode steps are recorded."""
    p = cfg.profiler
    intervals = 1 + cfg.decode_steps
    active = min(p.active, cfg.decode_steps)
    warm = min(p.warmup, intervals)
    wait = intervals - warm if warm else 0
    sched = torch.profiler.schedule(wait=wait, warmup=warm, active=1 + active, repeat=1)
    return sched, active, warm > 0


def _decode_summary(decode_ms: list[float], runs: int, n: int) -> list[float]:
    """Median time of each decode step index over ``runs`` generations."""
    return [statistics.median(decode_ms[r * n + d] for r in range(runs)) for d in range(n)]


def run_generate(
    cfg: CollectConfig, device: torch.device, run_dir: Path, ui: UI, manifest: dict[str, Any]
) -> None:
    """Every phase of a generate run, filling ``manifest`` in place."""
    arts = manifest["artifacts"]
    ui.phase("building model and KV cache")
    gen = build_generator(cfg, device)
    manifest["generate"] = generate_entry(cfg, gen)
    n = 0  # generations run

    ui.phase("warm-up generations", cfg.warmup)
    for _ in range(cfg.warmup):
        generate(gen, n)
        n += 1
        ui.advance()

    ui.phase("timed generations (unprofiled)", cfg.steps)
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
    timers = GenerationTimers(StepTimer(device), StepTimer(device))
    for _ in range(cfg.steps):
        generate(gen, n, timers=timers)
        n += 1
        ui.advance()
    ttft, tpot = timers.prefill.millis(), timers.decode.millis()
    peak = int(torch.cuda.max_memory_allocated(device)) if cuda else None
    reserved = int(torch.cuda.max_memory_reserved(device)) if cuda else None

    sched, active, warm = profiler_schedule(cfg)
    ui.phase("profiling (decode steps)", (2 if warm else 1) * cfg.decode_steps)
    ptimers = GenerationTimers(StepTimer(device), StepTimer(device))
    profiler = Profiler(cfg.profiler, run_dir, device=device, schedule=sched, step_ranges=False,
                        on_export=lambda what: ui.note(f"exporting {what}"))  # fmt: skip
    with profiler:
        if warm:
            generate(gen, n, profiler=profiler, on_token=ui.advance)
            n += 1
        generate(gen, n, timers=ptimers, profiler=profiler, on_token=ui.advance)
        n += 1
    arts.update(profiler.artifacts())
    manifest["profiler"]["decode_steps_recorded"] = active
    manifest["metrics"] = generate_metrics(
        cfg, gen, ttft, tpot, ptimers.prefill.millis(), ptimers.decode.millis()[:active],
        peak, reserved,
    )  # fmt: skip

    def one_generation() -> None:
        ui.phase("recording CUDA memory snapshot (one generation)")
        generate(gen, n)

    arts.update(snapshot_artifacts(cfg.memory_snapshot, device, run_dir / SNAPSHOT, one_generation))
    if arts["memory_snapshot"]:
        n += 1
    manifest["total_generations"] = n


def generate_entry(cfg: CollectConfig, gen: Generator) -> dict[str, Any]:
    """The manifest's ``generate`` block: the run's shape and the analytic decode model's
    inputs (``tracekit.classify.models.decode`` reads them with ``model``)."""
    return {
        "prompt": cfg.prompt_tokens,
        "new_tokens": cfg.decode_steps,
        "batch": cfg.batch,
        "context": cfg.context,
        "dtype": cfg.dtype,
        "bytes_per_elem": DTYPE_BYTES[cfg.dtype],
        "weights": f"cast to {cfg.dtype} (no autocast)",
        "sampling": "greedy (argmax on the device)",
        "weight_bytes": gen.weight_bytes,
        "buffer_bytes": gen.buffer_bytes,
        "kv_cache_bytes": kv_cache_bytes(cfg),
        "kv_cache_formula": KV_CACHE_FORMULA,
        "kv_cache_bytes_measured": gen.kv_cache_bytes,
        "kv_cache_measured_by": (
            "torch.cuda.memory_allocated before and after allocating the cache"
            if gen.device.type == "cuda"
            else "the cache tensors' nbytes (CPU: no allocator counters)"
        ),
        "kv_cache_shape": list(gen.cache.k.shape),  # (L, B, H, S, D), keys and values each
        "decode_flops_per_token_formula": "2*N_matmul_params + 4*n_layer*n_embd*context",
        "ranges": {
            "prefill": PREFILL_RANGE,
            "decode": DECODE_RANGE,
            "step": "ProfilerStep#<d>: decode step d (0-based); writes cache position "
            "prompt + d, attends to prompt + d + 1 tokens",
        },
    }


def generate_metrics(
    cfg: CollectConfig,
    gen: Generator,
    ttft_ms: list[float],
    tpot_ms: list[float],
    profiled_ttft_ms: list[float],
    profiled_tpot_ms: list[float],
    peak: int | None,
    reserved: int | None,
) -> dict[str, Any]:
    B, N = cfg.batch, cfg.decode_steps
    runs = len(ttft_ms)
    per_run = [ttft_ms[r] + sum(tpot_ms[r * N : (r + 1) * N]) for r in range(runs)]
    tpot = summarize_ms(tpot_ms)
    ttft = summarize_ms(ttft_ms)
    gen_ms = summarize_ms(per_run)
    prof = summarize_ms(profiled_tpot_ms)
    tpot_s = float(tpot["median"]) / 1e3
    mean_context = cfg.prompt_tokens + (N + 1) / 2  # decode step d attends P + d + 1
    flops = decode_flops_per_token(cfg.model_config(), round(mean_context))
    other = None if peak is None else peak - gen.weight_bytes - gen.kv_cache_bytes
    return {
        "workload": "generate",
        "step_time_ms": tpot,  # a step is a decode step
        "ttft_ms": ttft,
        "tpot_ms": tpot,
        "tpot_ms_by_step": _decode_summary(tpot_ms, runs, N),
        "generation_ms": gen_ms,
        "tokens_per_s": B / tpot_s,  # decode: one token per sequence per step
        "generated_tokens_per_s": B * (N + 1) / (float(gen_ms["median"]) / 1e3),
        "prefill_tokens_per_s": B * cfg.prompt_tokens / (float(ttft["median"]) / 1e3),
        "samples_per_s": B / (float(gen_ms["median"]) / 1e3),
        "model_flops_per_s": flops * B / tpot_s,
        "peak_allocated_bytes": peak,
        "peak_reserved_bytes": reserved,
        "avg_allocated_bytes": None,
        "memory": {
            "weights_bytes": gen.weight_bytes,
            "kv_cache_bytes": gen.kv_cache_bytes,
            "other_bytes": other,
        },
        "profiled_step_time_ms": prof["median"],
        "profiled_step_time": prof,
        "profiled_ttft_ms": profiled_ttft_ms[0] if profiled_ttft_ms else None,
        "profiler_overhead_pct": (float(prof["median"]) / float(tpot["median"]) - 1.0) * 100,
        "final_loss": None,
        "definitions": {
            "ttft_ms": "prefill forward + argmax of the first token, per generation",
            "tpot_ms": "one decode step (forward of one token per sequence + argmax)",
            "tokens_per_s": "batch / median tpot (decode throughput)",
            "generated_tokens_per_s": "batch * (new_tokens + 1) / median generation time",
            "prefill_tokens_per_s": "batch * prompt / median ttft",
            "model_flops_per_s": "decode FLOPs per token at the mean context * batch / median tpot",
        },
        "memory_method": (
            "peak: torch.cuda.max_memory_allocated/reserved over the timed generations "
            "after reset_peak_memory_stats; weights and KV cache as allocated; other = "
            "peak - weights - KV cache (activations, logits, prompts, buffers, workspaces)"
            if peak is not None
            else "peak not measured on CPU (no caching-allocator counters)"
        ),
    }
