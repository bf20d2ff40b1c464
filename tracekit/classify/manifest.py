"""What a run folder's manifest tells the classifier: the model's parameter count, the
unprofiled step time, artifacts beside the trace, and the analytic traffic estimate."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

import pandas as pd


class TraceLike(Protocol):
    kernels: pd.DataFrame
    ops: pd.DataFrame
    steps: pd.DataFrame
    meta: dict[str, Any]


def run_artifact(trace: TraceLike, key: str) -> Path | None:
    """``manifest['artifacts'][key]`` of the trace's run folder, if that file exists."""
    run_dir = getattr(trace, "run_dir", None)
    manifest = getattr(trace, "manifest", None) or {}
    arts = manifest.get("artifacts") if isinstance(manifest, Mapping) else None
    rel = arts.get(key) if isinstance(arts, Mapping) else None
    if run_dir is None or not rel:
        return None
    p = Path(run_dir) / str(rel)
    return p if p.is_file() else None


def profiler_overhead(manifest: Mapping[str, Any] | None) -> str:
    """A clause for the launch-bound note when profiling itself slowed the step down."""
    m = (manifest or {}).get("metrics") if isinstance(manifest, Mapping) else None
    if not isinstance(m, Mapping):
        return ""
    prof = m.get("profiled_step_time_ms")
    med = (
        (m.get("step_time_ms") or {}).get("median")
        if isinstance(m.get("step_time_ms"), Mapping)
        else None
    )
    if not isinstance(prof, (int, float)) or not isinstance(med, (int, float)) or med <= 0:
        return ""
    if prof < 1.2 * med:
        return ""
    return (
        f"; the profiled step took {prof:.1f} ms against {med:.1f} ms unprofiled, so part "
        "of that idle time is the profiler's own overhead"
    )


def n_params(manifest: Mapping[str, Any] | None) -> int | None:
    for where in ((manifest or {}).get("model"), (manifest or {}).get("metrics"), manifest):
        if isinstance(where, Mapping):
            for k in ("n_params", "params", "num_params", "parameters"):
                v = where.get(k)
                if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0:
                    return int(v)
    return None


def analytic_traffic(
    params: float,
    *,
    batch: int,
    seq: int,
    n_layer: int,
    n_embd: int,
    n_head: int,
    vocab: int = 0,
    act_bytes: int = 2,
    flash: bool = False,
) -> dict[str, float]:
    """Per-step traffic users estimate by hand: each of parameters (fp32), gradients
    (fp32), AdamW state (2 × fp32) and saved activations moved twice.

    Activations: Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large
    Transformer Models"), per layer ``s·b·h·(34 + 5·a·s/h)`` bytes at 2-byte elements
    (the ``5·a·s/h`` attention-score term vanishes with fused attention), scaled by
    ``act_bytes / 2``, plus the logits ``b·s·vocab`` in fp32 (and their gradient).
    """
    per_layer = seq * batch * n_embd * (34 + (0 if flash else 5 * n_head * seq / n_embd))
    act = n_layer * per_layer * act_bytes / 2 + 2 * batch * seq * vocab * 4
    p = params * 4.0
    out = {
        "analytic_param_bytes": 2 * p,
        "analytic_grad_bytes": 2 * p,
        "analytic_optim_bytes": 2 * 2 * p,
        "analytic_act_bytes": 2 * act,
    }
    out["analytic_bytes"] = sum(out.values())
    return out


def analytic_from_manifest(manifest: Mapping[str, Any] | None) -> dict[str, float] | None:
    if not manifest:
        return None
    cfg: dict[str, Any] = {}
    for key in ("model", "config"):
        v = manifest.get(key)
        if isinstance(v, Mapping):
            for k2 in ("model", "gpt"):
                if isinstance(v.get(k2), Mapping):
                    cfg.update(v[k2])
            cfg.update({k: x for k, x in v.items() if not isinstance(x, Mapping)})
    params = None
    for where in (manifest.get("model"), manifest.get("metrics"), manifest, cfg):
        if isinstance(where, Mapping):
            for k in ("params", "n_params", "num_params", "parameters"):
                if isinstance(where.get(k), (int, float)) and not isinstance(where.get(k), bool):
                    params = float(where[k])
                    break
        if params is not None:
            break

    def geti(*keys: str) -> int | None:
        for k in keys:
            v = cfg.get(k)
            if isinstance(v, int) and not isinstance(v, bool) and v > 0:
                return v
        return None

    batch, seq = geti("batch", "batch_size"), geti("seq", "seq_len", "block_size")
    n_layer, n_embd = geti("n_layer", "layers", "n_layers"), geti("n_embd", "d_model", "width")
    n_head = geti("n_head", "heads", "n_heads")
    if params is None or None in (batch, seq, n_layer, n_embd, n_head):
        return None
    dtype = str(cfg.get("dtype", "fp32"))
    return analytic_traffic(
        params,
        batch=batch or 0,
        seq=seq or 0,
        n_layer=n_layer or 0,
        n_embd=n_embd or 0,
        n_head=n_head or 0,
        vocab=geti("vocab_size", "vocab") or 0,
        act_bytes=4 if dtype in ("fp32", "float32") else 2,
        flash=str(cfg.get("attention", "")) == "sdpa",
    )
