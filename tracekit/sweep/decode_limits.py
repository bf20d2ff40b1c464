"""What limits each decode step of a generate sweep — the host or the GPU — and whether a
row's time per step is steady enough to read a change from it.

Definitions (docs/generate.md repeats them; thresholds are module constants):

* **GPU busy share** of a row: the decode steps' GPU busy time in the trace
  (``decode_gpu_busy_ms``, the union of their kernels) over the unprofiled time per step
  (``tpot_ms``, CUDA events). Kernel durations barely change under the profiler, so this
  is the share of an unprofiled step in which the GPU works.
* A row is **launch/host-bound** when the GPU idles at least :data:`HOST_IDLE_PCT` % of
  its step — the step verdict's threshold (:data:`tracekit.summary.verdict.OUTSIDE_PCT`),
  so a sweep row and the report of the same run say the same. Such a step's time is the
  host's (Python, one launch per kernel): it does not follow the batch, and the decode
  model's bytes over it measure the host's launch rate, not the memory. Over the GPU busy
  time instead (``decode_busy_bw_*``) they say what the kernels reach while they run.
* A row's time per step is **noisy** when its p10–p90 spread exceeds :data:`NOISE_PCT` %
  of its median: a throughput plateau smaller than that cannot be told from the noise.
* A change between two rows (the throughput plateau) is attributed to the GPU — the KV
  cache, compute — only when both rows are GPU-bound and steady; else it is the host's or
  the noise's, and the sentence says which, with the evidence.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from tracekit.summary.verdict import OUTSIDE_PCT

HOST_IDLE_PCT = OUTSIDE_PCT  # GPU idle share of the step from which it is launch/host-bound
NOISE_PCT = 10.0  # p10–p90 spread, % of the median time per step, above which it is noisy
HOST, GPU = "launch/host-bound", "GPU-bound"
LIMIT_COLUMNS = (
    "decode_gpu_busy_pct",
    "decode_host_idle_pct",
    "decode_limit",
    "tpot_spread_pct",
    "decode_us_per_kernel",
    "decode_busy_bw_Bps",
    "decode_busy_bw_util_pct",
)


def _f(v: Any) -> float:
    try:
        return math.nan if v is None else float(v)
    except (TypeError, ValueError):
        return math.nan


def limit_columns(row: Mapping[Any, Any]) -> dict[str, Any]:
    """:data:`LIMIT_COLUMNS` of one generate row (NaN / None where a figure is missing)."""
    tpot, busy = _f(row.get("tpot_ms")), _f(row.get("decode_gpu_busy_ms"))
    ok = tpot > 0 and busy > 0
    share = 100.0 * busy / tpot if ok else math.nan
    idle = max(0.0, 100.0 - share) if ok else math.nan
    kernels = _f(row.get("kernels_per_step"))
    p10, p90 = _f(row.get("tpot_p10_ms")), _f(row.get("tpot_p90_ms"))
    nbytes, roof = _f(row.get("model_decode_bytes_per_step")), _f(row.get("bandwidth_roof_Bps"))
    busy_bw = nbytes / (busy / 1e3) if busy > 0 else math.nan
    return {
        "decode_gpu_busy_pct": share,
        "decode_host_idle_pct": idle,
        "decode_limit": (HOST if idle >= HOST_IDLE_PCT else GPU) if ok else None,
        "tpot_spread_pct": 100.0 * (p90 - p10) / tpot if tpot > 0 else math.nan,
        "decode_us_per_kernel": 1e3 * tpot / kernels if kernels > 0 else math.nan,
        "decode_busy_bw_Bps": busy_bw,
        "decode_busy_bw_util_pct": 100.0 * busy_bw / roof if roof > 0 else math.nan,
    }


# the generate columns the analysis reads besides MEASURED_COLUMNS (NaN where absent: a
# CPU run has no GPU times, an older table no spread)
READ_COLUMNS = (
    "tpot_ms",
    "tpot_p10_ms",
    "tpot_p90_ms",
    "decode_gpu_busy_ms",
    "decode_gemm_ms",
    "decode_gemm_intensity",
    "decode_gemm_flops_util_pct",
    "decode_gemm_bw_util_pct",
    "decode_kernel_bw_util_pct",
    "kernels_per_step",
    "model_decode_bytes_per_step",
    "model_tpot_ms",
    "bandwidth_roof_Bps",
    "matmul_roof_flops",
)


def with_limits(table: pd.DataFrame) -> pd.DataFrame:
    """``table`` with :data:`READ_COLUMNS` (NaN where absent) and :data:`LIMIT_COLUMNS`
    (recomputed from the others, so a table written before they existed reads the same)."""
    missing = [c for c in READ_COLUMNS if c not in table.columns]
    if missing:
        table = table.assign(**{c: math.nan for c in missing})
    recs = [limit_columns(r) for r in table.to_dict("records")]
    extra = pd.DataFrame(recs, index=table.index, columns=list(LIMIT_COLUMNS))
    frame: pd.DataFrame = table.drop(columns=[*LIMIT_COLUMNS], errors="ignore").join(extra)
    return frame


def short_limit(v: object) -> str:
    """``host``, ``GPU`` or ``-``: a row's limit in a table's narrow column."""
    return {HOST: "host", GPU: "GPU"}.get(str(v), "-")


def host_bound(r: Mapping[Any, Any]) -> bool:
    return r.get("decode_limit") == HOST


def noisy(r: Mapping[Any, Any]) -> bool:
    return _f(r.get("tpot_spread_pct")) > NOISE_PCT


def _ms(v: float) -> str:
    return f"{v:.2f}" if v < 10 else f"{v:.1f}"


def where(values: list[int], axis: str, all_values: list[int]) -> str:
    """The sweep points ``values`` of ``all_values``: runs of three or more consecutive
    points as ``a–b``, the rest one by one — ``batch 1–4, 32 and 64``."""
    runs: list[list[int]] = []
    last = -2
    for v in values:
        i = all_values.index(v)
        if i == last + 1:
            runs[-1].append(v)
        else:
            runs.append([v])
        last = i
    names: list[str] = []
    for r in runs:
        names += [f"{r[0]}–{r[-1]}"] if len(r) >= 3 else [str(v) for v in r]
    listed = names[0] if len(names) == 1 else ", ".join(names[:-1]) + f" and {names[-1]}"
    return f"{axis} {listed}"


def span(v: np.ndarray, fmt: Any = _ms) -> str:
    """``lo–hi`` of the finite values, formatted (one figure when they print alike)."""
    lo, hi = float(np.nanmin(v)), float(np.nanmax(v))
    return fmt(lo) if fmt(lo) == fmt(hi) else f"{fmt(lo)}–{fmt(hi)}"


def host_words(ok: pd.DataFrame, axis: str, *, lever: bool = True) -> list[str]:
    """The host-bound rows of one line (ok rows with :data:`LIMIT_COLUMNS`, sorted along
    ``axis``): where, the evidence (GPU busy against the step, kernels per step, the
    spread), the GPU-bound rows beside them, and the lever. Empty when none is."""
    host = ok[(ok["decode_limit"] == HOST).to_numpy()]
    if not len(host):
        return []
    name = "context" if axis == "seq" else axis
    allv = [int(v) for v in ok[axis]]
    hv = [int(v) for v in host[axis]]
    busy, step = host["decode_gpu_busy_ms"].to_numpy(float), host["tpot_ms"].to_numpy(float)
    idle = host["decode_host_idle_pct"].to_numpy(float)
    s = (
        f"at {where(hv, name, allv)} the decode step is launch/host-bound: the GPU works "
        f"{span(busy)} ms of a {span(step)} ms step (idle {span(idle, lambda v: f'{v:.0f}')} "
        f"%; host-bound from {HOST_IDLE_PCT:.0f} % idle, the step verdict's threshold)"
    )
    kern = host["kernels_per_step"].to_numpy(float)
    if np.isfinite(kern).any():
        per = float(np.nanmedian(host["decode_us_per_kernel"].to_numpy(float)))
        s += (
            f", {float(np.nanmedian(kern)):.0f} kernels per step: {per:.0f} µs of step per "
            "kernel, the host's launch pace"
        )
    parts = [s]
    if len(host) >= 2:
        a, b = host.iloc[0], host.iloc[-1]
        ts, tb = _f(a["tpot_ms"]), _f(b["tpot_ms"])
        ba, bb = _f(a["decode_gpu_busy_ms"]), _f(b["decode_gpu_busy_ms"])
        parts.append(
            f"from {name} {int(a[axis])} to {int(b[axis])} the time per step goes {_ms(ts)} → "
            f"{_ms(tb)} ms (×{tb / ts:.2f}) while the GPU's work per step goes {_ms(ba)} → "
            f"{_ms(bb)} ms (×{bb / ba:.2f})" + _noise_words(host, axis, name)
        )
    gpu = ok[(ok["decode_limit"] == GPU).to_numpy()]
    if len(gpu):
        gv = [int(v) for v in gpu[axis]]
        gshare = gpu["decode_gpu_busy_pct"].to_numpy(float)
        parts.append(
            f"at {where(gv, name, allv)} the GPU is the bottleneck: busy "
            f"{span(gpu['decode_gpu_busy_ms'].to_numpy(float))} ms of "
            f"{span(gpu['tpot_ms'].to_numpy(float))} ms ({span(gshare, lambda v: f'{v:.0f}')} %)"
        )
    if not lever:
        return parts
    first = host.iloc[0]
    gain = _f(first["tpot_ms"]) / _f(first["decode_gpu_busy_ms"])
    parts.append(
        "the lever: capture the decode step as a CUDA graph (torch.compile(mode="
        "'reduce-overhead') or torch.cuda.graphs, as gpt-fast and vLLM do; the preallocated "
        "KV cache keeps its shapes static), so one launch replays every kernel and the step "
        f"falls toward its GPU time: at {name} {int(first[axis])}, {_ms(first['tpot_ms'])} → "
        f"{_ms(first['decode_gpu_busy_ms'])} ms, up to ×{gain:.1f} tokens/s"
    )
    return parts


def _noise_words(host: pd.DataFrame, axis: str, name: str) -> str:
    """How much the host-bound steps' time varies: the widest p10–p90 spread and the
    slowest row against the median of the rows."""
    spread = host["tpot_spread_pct"].to_numpy(float)
    if not np.isfinite(spread).any():
        return ""
    if not np.nanmax(spread) > NOISE_PCT:
        return f"; steady: p10–p90 within {float(np.nanmax(spread)):.0f} % of the median"
    w = host.iloc[int(np.nanargmax(spread))]
    step = host["tpot_ms"].to_numpy(float)
    slow = host.iloc[int(np.nanargmax(step))]
    med = float(np.median(step))
    s = (
        f"; it varies with the host: p10–p90 up to {float(np.nanmax(spread)):.0f} % of the "
        f"median ({name} {int(w[axis])}: {_ms(w['tpot_p10_ms'])}–{_ms(w['tpot_p90_ms'])} ms)"
    )
    if _f(slow["tpot_ms"]) >= 1.5 * med:
        s += (
            f", and {name} {int(slow[axis])} took {_ms(slow['tpot_ms'])} ms, "
            f"{_f(slow['tpot_ms']) / med:.1f}× the median {_ms(med)} ms of these rows, with "
            f"the GPU busy {_ms(slow['decode_gpu_busy_ms'])} ms"
        )
    return s


def change_words(a: Mapping[Any, Any], b: Mapping[Any, Any], axis: str) -> str | None:
    """Why a change from row ``a`` to row ``b`` cannot be read as the GPU's (None: both
    GPU-bound and steady, or unknown)."""
    if host_bound(a) or host_bound(b):
        return (
            f"the host's, not the GPU's: the GPU's work per step goes "
            f"{_ms(_f(a.get('decode_gpu_busy_ms')))} → {_ms(_f(b.get('decode_gpu_busy_ms')))} ms "
            f"while the time per step goes {_ms(_f(a.get('tpot_ms')))} → "
            f"{_ms(_f(b.get('tpot_ms')))} ms"
        )
    if noisy(a) or noisy(b):
        sa, sb = _f(a.get("tpot_spread_pct")), _f(b.get("tpot_spread_pct"))
        return (
            f"within the noise: the p10–p90 spread of the time per step is {sa:.0f} % at "
            f"{axis} {int(a[axis])} and {sb:.0f} % at {int(b[axis])} (steady below "
            f"{NOISE_PCT:.0f} %)"
        )
    return None
