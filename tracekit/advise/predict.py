"""Each lever's predicted effect on the baseline: step time (the critical path's what-if,
calibrated to the unprofiled step), tokens/s, peak memory (the analytic memory model's
difference, added to the measured peak) and the bottleneck it addresses."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import tracekit.advise.levers as L
import tracekit.advise.models as M
from tracekit.advise.baseline import Baseline
from tracekit.advise.effects import Effect, predict_ratio
from tracekit.classify.models.memory import MemoryEstimate


@dataclass
class Prediction:
    """One lever (or a combination) predicted on the baseline; ``lever`` names it."""

    lever: str
    title: str
    levers: list[str]  # the levers it applies (one, or a combination's)
    config: dict[str, Any]  # what it changes in the baseline's config
    skipped: str | None = None  # why it is not measured (None: it is)
    step_ratio: float = math.nan  # predicted step time / baseline's (NaN: not modelled)
    step_ms: float = math.nan  # the baseline's unprofiled step x step_ratio
    tokens: int = 0  # per step
    tokens_per_s: float = math.nan
    peak_delta_bytes: float = math.nan  # the memory model's difference
    peak_bytes: float = math.nan  # the baseline's measured peak + the difference
    addresses: list[str] = field(default_factory=list)
    targets_verdict: bool = False  # the baseline's verdict is one it addresses
    time_evidence: str = ""
    time_basis: str = ""  # what the time model rests on: its constants and their source
    memory_evidence: str = ""

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                for k, v in d.items()}  # fmt: skip


def _changes(base: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in new.items() if base.get(k) != v}


def _memory_words(lever: str, b: Baseline, m0: MemoryEstimate, m1: MemoryEstimate) -> str:
    def mb(v: float) -> str:
        return f"{v / 1e6:,.0f} MB"

    head = f"model peak {mb(m0.peak)} ({m0.peak_phase}) -> {mb(m1.peak)} ({m1.peak_phase})"
    extra = {
        "sdpa": f"saved T² attention matrices {mb(b.shape.n_layer * m0.attention_matrix_per_layer)}"
        " -> 0",
        "bf16": f"activations at 2 B; fp32 weights + AdamW state ({mb(12 * b.shape.n_params())}) "
        f"stay, +{mb(m1.autocast_weights)} of bf16 weight copies",
        "checkpoint": f"saved activations {mb(m0.activations_saved)} -> "
        f"{mb(m1.activations_saved)} (each block keeps its input)",
        "adamw-fused": "no optimizer temporaries (foreach: a 4 B/parameter sqrt)",
        "grad-accum": "gradients (4 B/parameter) held through the micro-batches",
        "cuda-graphs": "gradients (4 B/parameter) kept between steps",
        "batch": f"activations x{m1.activations_saved / max(1, m0.activations_saved):.2f}",
    }.get(lever, "")
    return f"{head}; {extra}" if extra else head


def _memory(b: Baseline, lever: str, cfg: dict[str, Any]) -> tuple[float, float, str]:
    """(peak difference, predicted peak, evidence)."""
    if cfg.get("compile") and not b.config.get("compile"):
        peak = b.peak_bytes if b.peak_bytes == b.peak_bytes else math.nan
        return 0.0, peak, "not modelled: torch.compile changes what is saved (taken as unchanged)"
    m0, m1 = b.model(), b.model(cfg)
    if m0 is None or m1 is None:
        return math.nan, math.nan, "no memory model for this configuration"
    delta = float(m1.peak - m0.peak)
    base = b.peak_bytes if b.peak_bytes == b.peak_bytes else float(m0.peak)
    return delta, base + delta, _memory_words(lever, b, m0, m1)


def _time(b: Baseline, names: Sequence[str], factor: int) -> tuple[float, str]:
    """(predicted step-time ratio, evidence) of ``names`` applied together."""
    eff: Effect | None = None
    words: list[str] = []
    for name in names:
        e, w = M.model_for(name)(b, factor)
        if w == M.NOT_MODELLED:
            on = "a CPU run" if not b.gpu else "this trace"
            return math.nan, f"{name}: not modelled on {on}"
        eff = e if eff is None else eff.then(e)
        words.append(w if len(names) == 1 else f"{name}: {w}")
    assert eff is not None
    base, lever = predict_ratio(b.cp, eff, b.host_speedup)
    return lever / base, "; ".join(words)


def predict(b: Baseline, names: Sequence[str], factor: int = 2) -> Prediction:
    """The prediction for ``names`` applied together (one lever, or a combination)."""
    levers = [L.LEVERS[n] for n in names]
    new = L.combine(levers, b.config, factor)
    title = levers[0].title if len(levers) == 1 else " + ".join(names)
    name = names[0] if len(names) == 1 else "+".join(names)
    why = [(lv.name, r) for lv in levers if (r := L.skip_reason(lv, b.config))]
    skip = None if not why else why[0][1] if len(levers) == 1 else f"{why[0][0]}: {why[0][1]}"
    p = Prediction(name, title, list(names), _changes(b.config, new), skipped=skip)
    addr = [a for lv in levers for a in lv.addresses]
    p.addresses = list(dict.fromkeys(addr))
    p.targets_verdict = b.verdict in p.addresses
    if skip is not None and len(levers) == 1:
        return p
    p.tokens = int(new["batch"]) * int(new["seq"]) * int(new.get("grad_accum") or 1)
    p.tokens *= int(new.get("gpus") or 1)
    p.step_ratio, p.time_evidence = _time(b, names, factor)
    p.time_basis = "; ".join(
        M.basis(n, b) if len(names) == 1 else f"{n}: {M.basis(n, b)}" for n in names
    )
    p.step_ms = b.step_ms * p.step_ratio
    p.tokens_per_s = p.tokens / (p.step_ms / 1e3) if p.step_ms > 0 else math.nan
    p.peak_delta_bytes, p.peak_bytes, p.memory_evidence = _memory(b, name, new)
    return p


def predict_all(b: Baseline, names: Sequence[str], factor: int = 2) -> list[Prediction]:
    """One prediction per lever (skipped ones say why)."""
    return [predict(b, [n], factor) for n in names]
