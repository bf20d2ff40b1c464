"""The manifest of a ``tracekit run`` / ``tracekit.profile()`` folder, from what a session
measured: pure functions over plain data (no torch objects are read here).

It keeps ``collect``'s schema (schema_version 1): every key ``tracekit report`` reads from a
``collect`` manifest is present (``config.batch``/``seq``/``tf32``, ``model.n_params``,
``metrics.step_time_ms``/``tokens_per_s``/``peak_*``/``profiled_step_time_ms``, ``device``,
``versions``, ``ceilings``, ``artifacts``; ``tests/test_run_script.py`` checks that a report
built from it matches one built from ``collect``'s), plus ``workload``, ``optimizer``,
``inputs``, ``ceilings_absent`` and ``schedule_steps``. The session writes it with
``tracekit.manifest.write_manifest`` (which stamps ``schema_version`` and checks it).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any

from tracekit.collectors.collect import timeline_metrics
from tracekit.collectors.observer import block
from tracekit.collectors.train import summarize_ms


@dataclass
class Measured:
    """What a session measured so far (None: not reached)."""

    timed_ms: list[float] | None = None
    profiled_ms: list[float] | None = None
    timeline_ms: list[float] | None = None  # the light timeline pass's recorded steps
    timeline_cost: dict[str, Any] | None = None  # its cost, interleaved (light_cost.py)
    peak_allocated: int | None = None
    peak_reserved: int | None = None
    avg_allocated: float | None = None
    tf32: bool | None = None
    matmul_precision: str | None = None
    optimizer: dict[str, Any] | None = None
    inputs: dict[str, Any] | None = None
    device_type: str | None = None
    memory_points: tuple[str, ...] = ()
    probed: str = "the timed steps"  # where inputs and average memory were read
    timed_steps: tuple[int, int] | None = None  # the first and last timed step (1-based)
    residual_ms: list[float] | None = None  # unprofiled steps timed after every pass
    residual_steps: tuple[int, int] | None = None


def step_time_method(m: Measured) -> str:
    """How the timed steps were timed, and what of tracekit's ran in them."""
    clock = (
        "a CUDA event recorded on the current stream"
        if m.device_type == "cuda"
        else "time.perf_counter()"
    )
    steps = f"steps {m.timed_steps[0]}-{m.timed_steps[1]}" if m.timed_steps else "the timed steps"
    return (
        f"{steps}: {clock} at each step end, one mark per end (a step runs from one mark to "
        "the next), read once after the last timed step; without the profiler and without "
        "tracekit's probes (forward hooks on the model, global optimizer step hooks, "
        f"torch.cuda.memory_allocated reads: in {m.probed}); in the timed steps tracekit "
        "runs only its step marker"
    )


def per_step(
    samples: int | None,
    tokens: int | None,
    inputs: dict[str, Any] | None,
    probed: str = "the timed steps",
) -> tuple[int | None, int | None, str]:
    """Samples and tokens per step: the options' values, else those inferred from the
    model's inputs (:class:`tracekit.collectors.introspect.InputRecorder`); and a sentence
    saying which is which."""
    given = [n for n, v in (("samples", samples), ("tokens", tokens)) if v is not None]
    inferred: list[str] = []
    if inputs:
        if samples is None and isinstance(inputs.get("samples_per_step"), (int, float)):
            samples = int(inputs["samples_per_step"])
            inferred.append("samples")
        if tokens is None and isinstance(inputs.get("tokens_per_step"), (int, float)):
            tokens = int(inputs["tokens_per_step"])
            inferred.append("tokens")
    parts = []
    if given:
        parts.append(f"{' and '.join(given)} per step given as options")
    if inferred:
        parts.append(
            f"{' and '.join(inferred)} per step inferred from the model's input "
            f"{inputs['argument'] if inputs else ''} (median over {probed})"
        )
    if samples is None or tokens is None:
        parts.append(
            "tokens per step unknown (give --tokens-per-step)"
            if samples is not None
            else "samples and tokens per step unknown"
        )
    return samples, tokens, "; ".join(parts)


def metrics(
    m: Measured,
    samples: int | None,
    tokens: int | None,
    n_params: int | None,
    step_definition: str,
) -> dict[str, Any] | None:
    """``collect``'s ``metrics`` entry (None before the timed steps were done)."""
    if not m.timed_ms or m.device_type is None:
        return None
    step = summarize_ms(m.timed_ms)
    median_s = float(step["median"]) / 1e3
    prof = summarize_ms(m.profiled_ms) if m.profiled_ms else None
    flops = 6 * n_params * tokens / median_s if tokens and n_params else None
    return {
        "step_time_ms": step,
        "step_definition": step_definition,
        "step_time_method": step_time_method(m),
        "samples_per_s": samples / median_s if samples else None,
        "tokens_per_s": tokens / median_s if tokens else None,
        "model_flops_per_s": flops,
        "model_flops_formula": (
            "6*N*tokens (N: the optimizer's parameters; no attention term)" if flops else None
        ),
        "peak_allocated_bytes": m.peak_allocated,
        "peak_reserved_bytes": m.peak_reserved,
        "avg_allocated_bytes": m.avg_allocated,
        "profiled_step_time_ms": prof["median"] if prof else None,
        "profiled_step_time": prof,
        "profiler_overhead_pct": (
            (float(prof["median"]) / float(step["median"]) - 1.0) * 100 if prof else None
        ),
        "final_loss": None,
        "memory_method": (
            "peak: torch.cuda.max_memory_allocated/reserved over the timed steps after "
            "reset_peak_memory_stats; avg: mean of torch.cuda.memory_allocated sampled in "
            f"{m.probed}: {'; '.join(m.memory_points) if m.memory_points else 'nowhere'}"
            if m.device_type == "cuda"
            else "not measured on CPU (no caching-allocator counters)"
        ),
        **timeline_metrics(m.timeline_ms or [], m.timed_ms, m.timeline_cost),
    }


def build(
    *,
    workload: str,
    status: str,
    error: str | None,
    config: dict[str, Any],
    measured: Measured,
    optimizer: dict[str, Any] | None,
    model: dict[str, Any],
    versions: dict[str, Any],
    device: dict[str, Any] | None,
    ceilings: dict[str, Any] | None,
    ceilings_absent: str | None,
    profiler: dict[str, Any],
    artifacts: dict[str, Any],
    total_steps: int,
    schedule_steps: int | None,
    extra: dict[str, Any],
    schedule: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The manifest. ``config``: the session's options (``samples_per_step`` and
    ``tokens_per_step`` as given, None otherwise) and the runner's (``step_definition``)."""
    m = measured
    samples, tokens, source = per_step(
        config.get("samples_per_step"), config.get("tokens_per_step"), m.inputs, m.probed
    )
    n_params = optimizer["n_params"] if optimizer else None
    step_definition = str(config.get("step_definition", "from one step end to the next"))
    return {
        "workload": workload,
        "status": status,
        "error": error,
        "config": {
            **config,
            "batch": samples,
            "seq": tokens // samples if tokens and samples and tokens % samples == 0 else None,
            "samples_per_step": samples,
            "tokens_per_step": tokens,
            "per_step_source": source,
            "tf32": m.tf32,
            "float32_matmul_precision": m.matmul_precision,
        },
        "model": model,
        "optimizer": optimizer,
        "inputs": m.inputs,
        "versions": versions,
        "device": device,
        "metrics": metrics(m, samples, tokens, n_params, step_definition),
        "ceilings": ceilings,
        "ceilings_absent": ceilings_absent,
        "profiler": profiler,
        "artifacts": artifacts,
        "total_steps": total_steps,
        "schedule_steps": schedule_steps,
        "schedule": schedule,
        "command": list(sys.argv),
        "pid": os.getpid(),
        **extra,
    }


def observer_block(seen: dict[str, Any], m: Measured) -> dict[str, Any]:
    """The manifest's ``observer`` of a session (:func:`tracekit.collectors.observer.block`)."""
    windows = (m.timeline_cost or {}).get("unprofiled_ms") or []
    return block(seen, m.timed_ms, m.residual_ms, windows=windows, before_steps=m.timed_steps,
                 after_steps=m.residual_steps)  # fmt: skip
