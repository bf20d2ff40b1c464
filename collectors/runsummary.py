"""The terminal summary of a run folder (``tracekit collect``'s last lines, ``tracekit run``'s):
what the manifest says, a multi-GPU run's ranks included (``collectors/dist_manifest.py``).
It reads the manifest only."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tracekit.collectors.collect import light_line
from tracekit.collectors.cupti_pass import recorder_line
from tracekit.collectors.dist_manifest import summary_lines
from tracekit.manifest import MANIFEST, Observer, RunManifest, manifest_or_empty

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


def _generate_lines(man: RunManifest) -> list[str]:
    met, g = man.metrics.raw, man.generate or {}
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


def observer_lines(obs: Observer | Mapping[str, Any] | None) -> list[str]:
    """The summary's lines on what the passes left behind and the residual, a warning
    where the steps after them ran more than 3 % slower (``obs``: the manifest's
    ``observer``, typed or as written)."""
    if isinstance(obs, Mapping):
        obs = Observer.of(obs)
    if obs is None:
        return []
    lines = []
    who = f"rank {obs.rank}: " if obs.rank is not None else ""
    if obs.residual_sentence:
        warn = "warning: " if obs.residual_beyond_3pct else ""
        lines.append(f"{warn}{who}{obs.residual_sentence}")
    elif obs.residual_absent:
        lines.append(f"{who}residual not checked: {obs.residual_absent}")
    left = list(obs.left_behind)
    if obs.cupti_attached:
        left.append(obs.cupti_attached)
    if left:
        lines.append(f"warning: {who}left behind by the profiler passes: {'; '.join(left)}")
    return lines


def summary(run_dir: Path) -> str:
    """A few lines describing a finished run folder (what the CLI prints)."""
    m = json.loads((Path(run_dir) / MANIFEST).read_text())
    man = manifest_or_empty(m)
    lines = [f"run folder: {run_dir}  (status {man.status})"]
    lines += [f"shortened: {shortened_text(c)}" for c in man.schedule_shortened]
    met = man.metrics.raw
    if met and met.get("workload") == "generate":
        lines += _generate_lines(man)
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
        if (rec := recorder_line((man.profiler or {}).get("timeline"))) is not None:
            lines.append(rec)
        lines += observer_lines(man.observer)
        lines.append(
            f"memory: peak allocated {_bytes(met['peak_allocated_bytes'])}, peak reserved "
            f"{_bytes(met['peak_reserved_bytes'])}, average allocated "
            f"{_bytes(met['avg_allocated_bytes'])}"
            if met.get("peak_allocated_bytes") is not None
            else f"memory: {NO_CPU_PEAK}"
        )
    c = man.ceilings
    if c is not None and c.memory_bandwidth_Bps is not None:
        rates = ", ".join(
            f"{k} {v / 1e12:.1f} TFLOP/s" if v >= 1e11 else f"{k} {v / 1e9:.1f} GFLOP/s"
            for k, v in c.matmul_flops.items()
            if v is not None
        )
        lines.append(f"ceilings: copy {c.memory_bandwidth_Bps / 1e9:.0f} GB/s; matmul {rates}")
    if man.distributed is not None and man.distributed.raw:  # a multi-GPU run (dist_manifest)
        lines += summary_lines(m)
    arts = man.artifacts.raw
    lines.append(f"trace: {man.artifacts.trace or 'none'}")
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
