"""The optimisation levers ``tracekit advise`` knows: what each changes in a ``tracekit
collect`` configuration, when it applies, and which bottleneck it addresses.

A configuration is the manifest's ``config`` (a mapping); a lever returns the changed
copy. :func:`point` turns a configuration into the sweep point that collects it (batch,
seq, dtype and attention are the point's fields; the other levers are collect options).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tracekit.sweep.plan import Point, parse_choice_list

Config = Mapping[str, Any]

# verdicts (tracekit.summary.verdict.VERDICTS) and the memory capacity a lever addresses
COMPUTE = "compute-bound"
MEMORY_BW = "memory-bandwidth-bound"
HOST = "launch/host-bound"
CAPACITY = "memory capacity"
THROUGHPUT = "tokens per step"
DEFAULT_OPTIMIZER = {"cuda": "adamw-foreach", "cpu": "adamw"}  # torch's choice


@dataclass(frozen=True)
class Lever:
    """One lever: its name (``--levers``), what it does, the bottlenecks it addresses."""

    name: str
    title: str
    addresses: tuple[str, ...]
    how: str  # how it addresses them, one line
    change: Callable[[Config, int], dict[str, Any]]  # (config, factor) -> the new config
    skip: Callable[[Config], str | None]  # why it does not apply, or None
    cuda_only: bool = False
    group: str = ""  # levers of one group are alternatives: a combination takes one

    def apply(self, cfg: Config, factor: int = 2) -> dict[str, Any]:
        return self.change(cfg, factor)


def _set(**kw: Any) -> Callable[[Config, int], dict[str, Any]]:
    return lambda cfg, factor: {**cfg, **kw}


def optimizer_of(cfg: Config) -> str:
    """The AdamW implementation the run used (the manifest records it; older runs: torch's
    choice for the device)."""
    return str(cfg.get("optimizer") or DEFAULT_OPTIMIZER.get(str(cfg.get("device")), "adamw"))


def _no(cond: Callable[[Config], bool], why: str) -> Callable[[Config], str | None]:
    return lambda cfg: why if cond(cfg) else None


def _graphs_skip(cfg: Config) -> str | None:
    if cfg.get("cuda_graphs"):
        return "the baseline already runs as a CUDA graph"
    if cfg.get("dtype") == "fp16" and not cfg.get("compile"):
        return "eager fp16's GradScaler reads its inf flag on the host every step"
    if int(cfg.get("gpus") or 1) > 1:
        return "collect captures CUDA graphs on one GPU only"
    if int(cfg.get("warmup") or 0) < 1:
        return "the capture happens in a warm-up step (the baseline has --warmup 0)"
    return None


LEVERS: dict[str, Lever] = {
    lv.name: lv
    for lv in (
        Lever("sdpa", "fused attention (SDPA)", (MEMORY_BW, HOST, CAPACITY),
              "flash/memory-efficient attention: no T×T matrix in memory, a few kernels "
              "instead of the naive chain", _set(attention="sdpa"),
              _no(lambda c: c.get("attention") != "naive", "the baseline already uses SDPA")),
        Lever("bf16", "bf16 autocast", (COMPUTE, MEMORY_BW),
              "GEMMs on the tensor cores, half the activation bytes; fp32 weights and AdamW "
              "state stay", _set(dtype="bf16"),
              _no(lambda c: c.get("dtype") != "fp32", "the baseline already runs in reduced "
                  "precision")),
        Lever("compile", "torch.compile", (MEMORY_BW, HOST),
              "fuses elementwise chains into Triton kernels: fewer bytes and launches",
              _set(compile=True), _no(lambda c: bool(c.get("compile")),
                                      "the baseline is already compiled")),
        Lever("adamw-fused", "fused AdamW", (HOST, MEMORY_BW, CAPACITY),
              "one multi-tensor kernel per chunk instead of a dozen foreach ops",
              _set(optimizer="adamw-fused"),
              _no(lambda c: optimizer_of(c) == "adamw-fused", "the baseline already uses the "
                  "fused AdamW")),
        Lever("checkpoint", "activation checkpointing", (CAPACITY,),
              "each block keeps only its input and recomputes its forward in the backward",
              _set(checkpoint=True), _no(lambda c: bool(c.get("checkpoint")),
                                         "the baseline already checkpoints")),
        Lever("cuda-graphs", "CUDA graphs", (HOST,),
              "the step replayed as one graph: no per-kernel launch cost on the host",
              _set(cuda_graphs=True), _graphs_skip, cuda_only=True),
        Lever("batch", "larger batch", (HOST, THROUGHPUT),
              "more tokens per kernel launch: launch and host costs amortised",
              lambda cfg, f: {**cfg, "batch": int(cfg["batch"]) * f}, lambda cfg: None,
              group="tokens"),
        Lever("grad-accum", "gradient accumulation", (THROUGHPUT, HOST),
              "more micro-batches per optimizer step: the same memory, the optimizer amortised",
              lambda cfg, f: {**cfg, "grad_accum": int(cfg.get("grad_accum") or 1) * f},
              lambda cfg: None, group="tokens"),
    )
}  # fmt: skip
ORDER = tuple(LEVERS)


def parse_levers(text: str | None) -> list[str]:
    """``--levers a,b,c`` (None: all of them), validated."""
    return list(ORDER) if text is None else parse_choice_list(text, "levers", ORDER)


def skip_reason(lever: Lever, cfg: Config) -> str | None:
    """Why ``lever`` is not measured on the baseline ``cfg`` (None: it applies)."""
    if lever.cuda_only and cfg.get("device") != "cuda":
        return f"needs CUDA (the baseline runs on {cfg.get('device')})"
    return lever.skip(cfg)


def combine(levers: Sequence[Lever], cfg: Config, factor: int = 2) -> dict[str, Any]:
    """``cfg`` with every lever of ``levers`` applied."""
    out = dict(cfg)
    for lv in levers:
        out = lv.apply(out, factor)
    return out


def conflicts(levers: Sequence[Lever]) -> list[tuple[str, str, str]]:
    """(kept, dropped, why) for levers that cannot go together: in a group, the first
    one (the better ranked) is kept."""
    out: list[tuple[str, str, str]] = []
    seen: dict[str, str] = {}
    for lv in levers:
        if lv.group and lv.group in seen:
            out.append((seen[lv.group], lv.name, f"both raise the {THROUGHPUT}: alternatives"))
        elif lv.group:
            seen[lv.group] = lv.name
    return out


# the config keys a point carries as collect options, and how
_FLAGS = (("compile", "--compile"), ("checkpoint", "--checkpoint"),
          ("cuda_graphs", "--cuda-graphs"), ("tf32", "--tf32"))  # fmt: skip


def options(cfg: Config) -> tuple[str, ...]:
    """The collect options (besides the point's fields) that run ``cfg``."""
    out: list[str] = [flag for key, flag in _FLAGS if cfg.get(key)]
    opt = optimizer_of(cfg)
    if opt != DEFAULT_OPTIMIZER.get(str(cfg.get("device")), "adamw"):
        out += ["--optimizer", opt]
    if int(cfg.get("grad_accum") or 1) > 1:
        out += ["--grad-accum", str(int(cfg["grad_accum"]))]
    return tuple(out)


def point(cfg: Config) -> Point:
    """The sweep point that collects ``cfg``."""
    return Point(
        int(cfg["batch"]),
        int(cfg["seq"]),
        str(cfg.get("dtype") or "fp32"),
        str(cfg.get("attention") or "naive"),
        int(cfg.get("gpus") or 1),
        options(cfg),
    )
