"""Generate sweeps (``tracekit sweep --workload generate``): where decoding turns from
memory- to compute-bound along the batch, and where the KV cache meets the device's
capacity along the context. Every sentence is computed from the table.

Definitions (docs/generate.md repeats them; thresholds are module constants):

* **Measured crossover** (per line along the batch): the batch at which the decode GEMMs'
  GPU time per step (``decode_gemm_ms``, from the trace) reaches :data:`CROSSOVER_GROWTH`
  times its value at the line's smallest batch, interpolated log-log between the two
  sweep points around it. Below the ridge a GEMM of M = batch rows reads the same weights
  whatever M, so its time stays flat; above it the time grows with M. With GEMM time =
  weight read + FLOPs at the peak (the roofline's sum form) the doubling batch is the
  ridge batch R·W/(2N) + 2·B₀ (B₀ the smallest batch), so it is compared with the decode
  model's ``model_gemm_ridge_batch``. Without GPU GEMM times (a CPU run) the time per
  step (``tpot_ms``) is used the same way; the KV cache read grows with the batch even
  below the ridge, so that doubling comes earlier than the GEMMs' (the sentence says
  which time it used).
* **Throughput plateau**: tokens/s grows by less than ``PLATEAU_GAIN`` (the training
  sweep's, :mod:`tracekit.sweep.findings`) from one batch
  to the next. At the plateau's batch the decode model says what a step reads: when the
  KV cache is at least :data:`KV_BOUND_PCT` % of it the plateau is the KV cache's (each
  sequence reads its own cache: batching does not amortise it), when the GEMMs have
  crossed over it is compute, else undetermined.
* **Capacity wall** (per line along batch or context): the first OOM row (as the training
  sweep records it); without one, the axis value at which the linear fit of the measured
  peak reaches the device's memory (extrapolated, with the fit's R²).
* **KV read bandwidth** (per line along the context): the slope of the time per step
  against the context, s, over the KV cache bytes one more token of context adds to a
  step, 2·L·B·C·b: the bandwidth at which the extra KV cache is read.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd

from tracekit.classify.models.decode import achieved_gemm_ridge_batch, weight_stream_time
from tracekit.sweep.decode_limits import HOST, change_words, host_words, span, with_limits
from tracekit.sweep.findings import PLATEAU_GAIN, _gib, _num, failed_findings
from tracekit.sweep.fit import fit_table
from tracekit.sweep.plan import config_columns
from tracekit.sweep.rows import complete

CROSSOVER_GROWTH = 2.0
KV_BOUND_PCT = 50.0
# the quantities a generate sweep fits: power laws along both axes, and straight lines
POWER_QUANTITIES = ("tokens_per_s", "time_per_token_ms", "tpot_ms", "peak_bytes")
LINEAR_QUANTITIES = ("tpot_ms", "peak_bytes", "kv_cache_bytes", "decode_gemm_ms")


def _ms(v: float) -> str:
    return f"{v:.3f} ms" if v < 10 else f"{v:.1f} ms"


def _bw(v: float) -> str:
    return f"{v / 1e12:.2f} TB/s" if v >= 1e12 else f"{v / 1e9:.1f} GB/s"


def prepared(table: pd.DataFrame) -> pd.DataFrame:
    """A generate table as the analysis reads it: every measured column (NaN where
    absent) and what limits each row (:func:`tracekit.sweep.decode_limits.with_limits`)."""
    return with_limits(complete(table))


def generating(table: pd.DataFrame) -> bool:
    """A generate sweep's table (every row from ``collect --workload generate``)."""
    if "workload" not in table.columns or not len(table):
        return False
    return bool((table["workload"] == "generate").all())


def line_groups(table: pd.DataFrame, axis: str) -> list[tuple[dict[str, Any], pd.DataFrame]]:
    """Every line along ``axis`` (all rows, ok or not, sorted along it) with at least two
    values of it."""
    fixed = [c for c in config_columns(table) if c != axis]
    out = []
    for keys, g in table.groupby(fixed, sort=True):
        if g[axis].nunique() >= 2:
            keys = keys if isinstance(keys, tuple) else (keys,)
            out.append((dict(zip(fixed, keys, strict=True)), g.sort_values(axis)))
    return out


def line_name(fixed: dict[str, Any]) -> str:
    parts = [
        f"context {fixed['seq']}" if "seq" in fixed else "",
        *([f"batch {fixed['batch']}"] if "batch" in fixed else []),
    ]
    parts += [str(fixed[k]) for k in ("dtype", "attention") if k in fixed]
    return ", ".join(p for p in parts if p)


# --------------------------------------------------------------------------- crossover


@dataclass(frozen=True)
class Crossover:
    """The measured crossover of one line along the batch: a straight line
    t = flat + slope·B through the GEMM times (relative least squares), its knee
    flat / slope, and whether the sweep went past it."""

    column: str  # decode_gemm_ms, or tpot_ms without GPU GEMM times (a CPU run)
    base_batch: int
    base_value: float
    flat_ms: float  # the fit's intercept: the part that does not grow with the batch
    slope_ms: float  # per sequence
    r2: float
    knee: float | None  # flat / slope: the batch at which the growing part equals it
    reached: bool  # the sweep measured it: knee <= max batch, time there >= 2 × flat
    batch: float | None  # the knee when reached
    between: tuple[int, int] | None  # the sweep points around it
    max_batch: int
    growth_at_max: float  # value at the largest batch / at the smallest
    # the decode model's prediction: the ridge at the bandwidth the GEMMs stream their
    # weights at, from their time at the smallest batch (models.decode.achieved_gemm_ridge_batch)
    predicted: float | None
    weight_stream_Bps: float  # W / t_w at the smallest batch, the prediction's bandwidth
    roofline: float | None  # the roofline's ridge batch R·W/(2N): weights at the copy ceiling
    flat_bw_pct: float  # W / flat over the copy ceiling: the fit's flat part as a bandwidth
    slope_flops: float  # 2N / slope: the FLOP/s the GEMMs add per sequence past the knee
    slope_flops_pct: float  # of the matmul roof

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _relative_line(b: np.ndarray, y: np.ndarray) -> tuple[float, float, float]:
    """(intercept, slope, R²) of y = a + c·b minimising the squared *relative* residuals
    (each point weighs alike, whatever its size)."""
    w = 1.0 / y
    (a, c), *_ = np.linalg.lstsq(np.c_[w, b * w], np.ones_like(y), rcond=None)
    fitted = a + c * b
    ss = float(np.sum((y - y.mean()) ** 2))
    r2 = 1.0 - float(np.sum((y - fitted) ** 2)) / ss if ss else 1.0
    return float(a), float(c), r2


def measured_crossover(ok: pd.DataFrame) -> Crossover | None:
    """The crossover of the ok rows of one line along the batch (sorted by batch), or
    None when fewer than two rows have the time it needs. The decode GEMMs' GPU time per
    step (the trace) is fitted, never the step time, which a host-bound step sets; only
    without any GPU time (a CPU run) the time per step stands in."""
    column = "decode_gemm_ms"
    if column not in ok or (ok[column].fillna(0) <= 0).all():
        column = "tpot_ms"
    b = ok["batch"].to_numpy(dtype=np.float64)
    y = ok[column].to_numpy(dtype=np.float64)
    keep = np.isfinite(y) & (y > 0)
    b, y = b[keep], y[keep]
    if len(b) < 2:
        return None
    a, c, r2 = _relative_line(b, y)
    knee = a / c if a > 0 and c > 0 else None
    reached = bool(knee is not None and knee <= b[-1] and y[-1] >= CROSSOVER_GROWTH * a)
    between = None
    if reached and knee is not None:
        i = int(np.searchsorted(b, knee))
        between = (int(b[max(0, i - 1)]), int(b[min(i, len(b) - 1)]))
    roof = _roofs(ok)
    pred = weight_bw = math.nan
    if column == "decode_gemm_ms" and b[0] < roof["ridge_batch"]:  # a flat part measured
        got = achieved_gemm_ridge_batch(
            y[0] / 1e3, batch=int(b[0]), gemm_flops_per_seq=roof["flops_per_seq"],
            peak_flops=roof["peak"],
        )  # fmt: skip
        t_w = weight_stream_time(
            y[0] / 1e3, batch=int(b[0]), gemm_flops_per_seq=roof["flops_per_seq"],
            peak_flops=roof["peak"],
        )  # fmt: skip
        pred, weight_bw = _num(got), float(roof["weight_bytes"] / t_w) if t_w > 0 else math.nan
    slope_flops = roof["flops_per_seq"] / (c / 1e3) if c > 0 else math.nan
    return Crossover(
        column=column,
        base_batch=int(b[0]),
        base_value=float(y[0]),
        flat_ms=a,
        slope_ms=c,
        r2=r2,
        knee=knee,
        reached=reached,
        batch=knee if reached else None,
        between=between,
        max_batch=int(b[-1]),
        growth_at_max=float(y[-1] / y[0]),
        predicted=pred if math.isfinite(pred) else None,
        weight_stream_Bps=weight_bw,
        roofline=roof["ridge_batch"] if math.isfinite(roof["ridge_batch"]) else None,
        flat_bw_pct=100.0 * roof["weight_bytes"] / (a / 1e3) / roof["bw"] if a > 0 else math.nan,
        slope_flops=slope_flops,
        slope_flops_pct=100.0 * slope_flops / roof["peak"],
    )


def _roofs(ok: pd.DataFrame) -> dict[str, float]:
    """The line's roofs and decode-model figures (medians of its rows; NaN where the
    table lacks them): the copy ceiling ``bw``, the matmul roof ``peak``, the weights W,
    the roofline's ridge batch R·W/(2N) and 2N, recovered from that batch."""

    def med(col: str) -> float:
        return _num(ok[col].dropna().median()) if col in ok and ok[col].notna().any() else math.nan

    bw, peak = med("bandwidth_roof_Bps"), med("matmul_roof_flops")
    w, ridge = med("model_weight_bytes"), med("model_gemm_ridge_batch")
    return {
        "bw": bw,
        "peak": peak,
        "weight_bytes": w,
        "ridge_batch": ridge,
        "flops_per_seq": peak * w / (bw * ridge),  # R·W/(2N) = ridge batch, R = peak / bw
    }


def crossover_words(c: Crossover, ok: pd.DataFrame) -> str:
    """The measured crossover in words: where the GEMMs' time doubles its flat part, or
    how far the sweep is from it, beside the decode model's prediction."""
    gemm = c.column == "decode_gemm_ms"
    what = (
        "the decode GEMMs' GPU time per step (the trace)"
        if gemm
        else "the time per step (no GPU GEMM times: a CPU run, or no trace)"
    )
    last = ok[ok["batch"] == c.max_batch].iloc[-1]
    fit = f"a + c·B fit, R² {c.r2:.3f}"
    roof = _gemm_roof_words(ok, last, c.predicted is None) if gemm else ""
    if c.reached and c.batch is not None and c.between is not None:
        s = (
            f"the measured crossover from memory- to compute-bound: {what}, flat at "
            f"{_ms(c.flat_ms)}, doubles at batch ≈ {c.batch:.0f} (between {c.between[0]} and "
            f"{c.between[1]}; {fit})"
        )
        return s + _predicted_words(c, ok) + _why_words(c)
    s = (
        f"the memory-to-compute crossover is not reached up to batch {c.max_batch}: "
        f"{what} grew {c.growth_at_max:.2f}× ({_ms(c.base_value)} → "
        f"{_ms(c.base_value * c.growth_at_max)}) while the batch grew "
        f"{c.max_batch / c.base_batch:.0f}×{roof}"
    )
    if c.knee is not None:
        s += (
            f"; a line through it ({fit}) would double its flat part at batch ≈ "
            f"{c.knee:,.0f} (extrapolated)"
        )
    return s + _predicted_words(c, ok)


def _predicted_words(c: Crossover, ok: pd.DataFrame) -> str:
    """The decode model's crossover (from the GEMMs' time at the smallest batch) and the
    roofline's ridge, each against the measured crossover when there is one."""

    def vs(p: float, what: str) -> str:
        return f" (measured / {what} {c.batch / p:.2f})" if c.batch is not None else ""

    s = ""
    if c.predicted is not None:
        bw = _num(ok["bandwidth_roof_Bps"].dropna().median())
        s += (
            f"; the decode model puts it at batch {c.predicted:.0f}{vs(c.predicted, 'predicted')}"
            f", from the GEMMs' {_ms(c.base_value)} at batch {c.base_batch}: their weights "
            f"stream at {_bw(c.weight_stream_Bps)} ({100 * c.weight_stream_Bps / bw:.0f} % of "
            "the copy ceiling), their FLOPs at the matmul roof"
        )
    if c.roofline is not None:
        s += (
            f"; the roofline's ridge, weights at the copy ceiling, is batch {c.roofline:.0f}"
            f"{vs(c.roofline, 'roofline')}"
        )
    return s


def _why_words(c: Crossover) -> str:
    """Why the measured crossover is where it is against the roofline's ridge, exactly:
    measured / roofline = (copy ceiling / the flat part's bandwidth) × (the FLOP/s the
    GEMMs add past it / the matmul roof)."""
    if c.roofline is None or c.batch is None or not math.isfinite(c.flat_bw_pct * c.slope_flops):
        return ""
    return (
        f": below the crossover the GEMMs move their weights at {c.flat_bw_pct:.0f} % of the "
        f"copy ceiling (the fit's flat part), past it they add "
        f"{c.slope_flops / 1e12:.0f} TFLOP/s, {c.slope_flops_pct:.0f} % of the matmul roof "
        f"({c.batch / c.roofline:.2f} = {100 / c.flat_bw_pct:.2f} × {c.slope_flops_pct / 100:.2f})"
    )


def _gemm_roof_words(ok: pd.DataFrame, last: pd.Series, smallest: bool) -> str:
    """Where the GEMMs run against the roofs: at the largest batch (matmul roof, their
    intensity against the ridge point) and, with ``smallest``, at the smallest (copy
    ceiling; the prediction's words say it otherwise)."""
    s = ""
    fl = _num(last.get("decode_gemm_flops_util_pct"))
    if math.isfinite(fl):
        s += f"; at batch {int(last['batch'])} they run at {fl:.0f} % of the matmul roof"
        it = _num(last.get("decode_gemm_intensity"))
        ridge = _num(last.get("matmul_roof_flops")) / _num(last.get("bandwidth_roof_Bps"))
        if math.isfinite(it) and math.isfinite(ridge):
            s += f" (intensity {it:.0f} FLOP/B vs ridge {ridge:.0f})"
    first = ok.iloc[0]
    bw = _num(first.get("decode_gemm_bw_util_pct"))
    if smallest and math.isfinite(bw):
        s += (
            f"; at batch {int(first['batch'])} they move their bytes at {bw:.0f} % of the "
            "copy ceiling"
        )
    return s


def _plateau_words(ok: pd.DataFrame, c: Crossover | None) -> str:
    """The first throughput plateau between two GPU-bound, steady rows, with its cause;
    a dip between other rows is named the host's or the noise's."""
    tps = ok["tokens_per_s"].to_numpy(dtype=np.float64)
    recs = ok.to_dict("records")
    aside = ""
    for i in range(1, len(ok)):
        if not tps[i] < PLATEAU_GAIN * tps[i - 1]:
            continue
        a, b = recs[i - 1], recs[i]
        gain = 100 * (tps[i] / tps[i - 1] - 1)
        what = f"from batch {int(a['batch'])} to {int(b['batch'])} ({gain:+.0f} %)"
        why = change_words(a, b, "batch")
        if why is not None:
            aside = aside or f"; the dip in tokens/s {what} is {why}"
            continue
        kv = (
            100
            * _num(b.get("model_kv_read_bytes_per_step"))
            / _num(b.get("model_decode_bytes_per_step"))
        )
        s = f"tokens/s stops growing {what}"
        if kv >= KV_BOUND_PCT:
            return s + (
                f": there the KV cache is {kv:.0f} % of the bytes a step reads (decode "
                "model), and each sequence reads its own: batching does not amortise it" + aside
            )
        if c is not None and c.batch is not None and b["batch"] >= c.batch:
            return s + ": the decode GEMMs are past the crossover (compute-bound)" + aside
        return s + f" (KV cache {kv:.0f} % of the bytes; kind undetermined)" + aside
    gain = tps[-1] / tps[0]
    lo, hi = int(ok.iloc[0]["batch"]), int(ok.iloc[-1]["batch"])
    if gain < 1:  # no wall found, and no growth either: say so, not "grows x0.9"
        return f"tokens/s does not grow from batch {lo} to {hi} (×{gain:.2f})" + aside
    return f"tokens/s still grows ×{gain:.1f} from batch {lo} to {hi}" + aside


# --------------------------------------------------------------------------- capacity


@dataclass(frozen=True)
class CapacityWall:
    """Where one line along ``axis`` runs out of device memory."""

    axis: str
    oom_at: int | None  # the first OOM row
    oom_requested_bytes: float
    last_ok: int | None  # the largest ok row below it (or at all)
    last_ok_peak_bytes: float
    device_bytes: float
    slope_bytes: float  # of the peak's linear fit, per unit of the axis
    intercept_bytes: float
    r2: float
    wall: float | None  # the axis value at which the fit reaches the device's memory

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _linear(x: np.ndarray, y: np.ndarray) -> tuple[float, float, float]:
    """(slope, intercept, R²) of a least-squares line."""
    k, a = np.polyfit(x, y, 1)
    fitted = a + k * x
    ss = float(np.sum((y - y.mean()) ** 2))
    r2 = 1.0 - float(np.sum((y - fitted) ** 2)) / ss if ss else 1.0
    return float(k), float(a), r2


def capacity_wall(g: pd.DataFrame, axis: str) -> CapacityWall | None:
    """The capacity wall of one line (all its rows, sorted along ``axis``)."""
    ok = g[g["status"] == "ok"]
    oom = g[g["status"] == "oom"]
    if not len(ok) and not len(oom):
        return None
    oom_at = int(oom.iloc[0][axis]) if len(oom) else None
    below = ok[ok[axis] < oom_at] if oom_at is not None else ok
    last = below.iloc[-1] if len(below) else None
    total = _num(ok["device_total_bytes"].max()) if len(ok) else math.nan
    x = ok[axis].to_numpy(dtype=np.float64)
    y = ok["peak_bytes"].to_numpy(dtype=np.float64)
    keep = np.isfinite(y)
    k = a = r2 = math.nan
    wall = None
    if keep.sum() >= 2 and len(np.unique(x[keep])) >= 2:
        k, a, r2 = _linear(x[keep], y[keep])
        if k > 0 and math.isfinite(total):
            wall = (total - a) / k
    return CapacityWall(
        axis=axis,
        oom_at=oom_at,
        oom_requested_bytes=_num(oom.iloc[0].get("oom_requested_bytes")) if len(oom) else math.nan,
        last_ok=int(last[axis]) if last is not None else None,
        last_ok_peak_bytes=_num(last["peak_bytes"]) if last is not None else math.nan,
        device_bytes=total,
        slope_bytes=k,
        intercept_bytes=a,
        r2=r2,
        wall=wall,
    )


def _wall_words(w: CapacityWall) -> str:
    unit = "token of context" if w.axis == "seq" else "sequence"
    name = "context" if w.axis == "seq" else "batch"
    if w.oom_at is not None:
        ask = (
            f", asking for {_gib(w.oom_requested_bytes)} more"
            if math.isfinite(w.oom_requested_bytes)
            else ""
        )
        after = (
            f" after {name} {w.last_ok} peaked at {_gib(w.last_ok_peak_bytes)}"
            if w.last_ok is not None
            else ""
        )
        return f"the capacity wall: {name} {w.oom_at} ran out of memory{ask}{after}"
    if w.wall is None:
        return "no capacity wall in reach (no device memory figure or no growth)"
    used = 100 * w.last_ok_peak_bytes / w.device_bytes if w.device_bytes else math.nan
    return (
        f"the peak grows {_gib(w.slope_bytes)} per {unit} (linear fit, R² {w.r2:.3f}) and "
        f"would fill the device's {_gib(w.device_bytes)} at {name} ≈ {w.wall:,.0f} — the "
        f"capacity wall, extrapolated (the largest run, {name} {w.last_ok}, used "
        f"{used:.1f} %)"
    )


# --------------------------------------------------------------------------- context


def kv_read_bandwidth(ok: pd.DataFrame) -> tuple[float, float, float, str] | None:
    """(bandwidth [B/s], slope [ms per token of context], R², the time fitted) of the KV
    read along one line of context (ok rows), or None with fewer than two contexts. The
    GPU busy time per step (the trace) is fitted where known — a host-bound step's time
    does not follow the bytes it reads — else the time per step."""
    x = ok["seq"].to_numpy(dtype=np.float64)
    per_tok = ok["model_kv_bytes_per_token"].to_numpy(dtype=np.float64) * ok["batch"].to_numpy(
        dtype=np.float64
    )
    for column in ("decode_gpu_busy_ms", "tpot_ms"):
        if column not in ok:
            continue
        y = ok[column].to_numpy(dtype=np.float64)
        keep = np.isfinite(y) & np.isfinite(per_tok) & (y > 0)
        if len(np.unique(x[keep])) < 2:
            continue
        k, _, r2 = _linear(x[keep], y[keep])
        if not k > 0:
            return None
        return float(np.median(per_tok[keep])) / (k / 1e3), k, r2, column
    return None


def _context_words(ok: pd.DataFrame) -> list[str]:
    first, last = ok.iloc[0], ok.iloc[-1]
    per = _num(first.get("model_kv_bytes_per_token"))
    share = 100 * _num(last["kv_cache_bytes"]) / _num(last["peak_bytes"])
    at = f"{_gib(_num(first['kv_cache_bytes']))} at context {int(first['seq'])}"
    if len(ok) > 1:
        at += f", {_gib(_num(last['kv_cache_bytes']))} at {int(last['seq'])}"
    s = (
        f"the KV cache holds {_gib(per)} per token of a sequence (2·L·C·b), "
        f"{_gib(per * _num(first['batch']))} per token of context at batch "
        f"{int(first['batch'])}: {at} (measured allocations), {share:.0f} % of that run's peak"
    )
    kv = kv_read_bandwidth(ok)
    if kv is not None:
        bw, k, r2, column = kv
        roof = (
            _num(ok["bandwidth_roof_Bps"].dropna().median())
            if "bandwidth_roof_Bps" in ok
            else math.nan
        )
        pct = f" = {100 * bw / roof:.0f} % of the copy ceiling" if math.isfinite(roof) else ""
        what = "of GPU time per step (the trace)" if column != "tpot_ms" else "per step"
        s += (
            f"; each 1k tokens of context add {1e3 * k:.3f} ms {what} (R² {r2:.3f}): the "
            f"extra KV cache is read at {_bw(bw)}{pct}"
        )
    return [s, *host_words(ok, "seq", lever=False)]


# --------------------------------------------------------------------------- findings


def _utilisation_words(ok: pd.DataFrame) -> str:
    """The decode model's bytes per step over the time per step and over the GPU's busy
    time, as % of the copy ceiling."""
    u = ok["decode_bw_util_pct"].to_numpy(dtype=np.float64)
    if not np.isfinite(u).any():
        return ""
    i = int(np.nanargmax(u))
    r = ok.iloc[i]
    s = (
        f"the decode model's bytes per step reach {span(u, _pct)} % of the copy ceiling over "
        f"the time per step (at most {_bw(_num(r['decode_model_bw_Bps']))}, batch "
        f"{int(r['batch'])})"
    )
    busy = ok["decode_busy_bw_util_pct"].to_numpy(dtype=np.float64)
    if np.isfinite(busy).any():
        s += f" and {span(busy, _pct)} % over the GPU's busy time (the kernels while they run)"
    k = _num(r.get("decode_kernel_bw_util_pct"))
    if math.isfinite(k):
        s += f"; by the kernels' bytes {k:.0f} % at batch {int(r['batch'])}"
    if (ok["decode_limit"] == HOST).any():
        s += "; over a host-bound step the figure measures the host's launch pace, not the memory"
    return s


def _pct(v: float) -> str:
    return f"{v:.0f}"


def batch_findings(table: pd.DataFrame) -> list[str]:
    out = []
    for fixed, g in line_groups(table, "batch"):
        ok = g[g["status"] == "ok"]
        if len(ok) < 2:
            continue
        a, b = ok.iloc[0], ok.iloc[-1]
        ta, tb = _num(a["time_per_token_ms"]), _num(b["time_per_token_ms"])
        sa, sb = _num(a["tpot_ms"]), _num(b["tpot_ms"])
        s = (
            f"Along batch ({line_name(fixed)}): the time per token "
            f"{'falls' if tb < ta else 'rises'} from {_ms(ta)} at batch {int(a['batch'])} to "
            f"{_ms(tb)} at batch {int(b['batch'])} (tokens/s {_num(a['tokens_per_s']):,.0f} → "
            f"{_num(b['tokens_per_s']):,.0f}) while the time per step "
            f"{'grows' if sb >= sa else 'falls'} from {_ms(sa)} to {_ms(sb)}"
        )
        c = measured_crossover(ok)
        parts = [s, *host_words(ok, "batch")]
        if c is not None:
            parts.append(crossover_words(c, ok))
        parts.append(_plateau_words(ok, c))
        parts.append(_utilisation_words(ok))
        w = capacity_wall(g, "batch")
        if w is not None and (w.oom_at is not None or w.wall is not None):
            parts.append(_wall_words(w))
        out.append(_sentences(parts))
    return out


def _sentences(parts: list[str]) -> str:
    """The parts as sentences: each capitalised, ended with a full stop."""
    return " ".join(p[:1].upper() + p[1:] + "." for p in parts if p)


def context_findings(table: pd.DataFrame) -> list[str]:
    out = []
    for fixed, g in line_groups(table, "seq"):
        ok = g[g["status"] == "ok"]
        parts = [f"Along context ({line_name(fixed)})"]
        if len(ok):
            first, *rest = _context_words(ok)
            parts = [parts[0] + ": " + first, *rest]
        w = capacity_wall(g, "seq")
        if w is not None and (w.oom_at is not None or w.wall is not None):
            parts.append(_wall_words(w))
        if len(parts) > 1 or len(ok):
            out.append(_sentences(parts))
    return out


def roofline_findings(table: pd.DataFrame) -> list[str]:
    """The time per step, and the GPU's busy time per step, against the decode model's
    roofline time."""
    ok = table[(table["status"] == "ok")]
    r = (ok["tpot_ms"] / ok["model_tpot_ms"]).replace([np.inf, -np.inf], np.nan).dropna()
    if not len(r):
        return []
    roof = (
        "the decode model's roofline time (weights and KV cache at the copy ceiling, FLOPs "
        "at the matmul roof)"
    )
    lo, hi = _ends(ok, r)
    if len(r) == 1:  # one configuration: its figure, not a range with two equal ends
        s = f"The measured time per step is {r.min():.2f}× {roof} at {lo}"
    else:
        s = (
            f"The measured time per step is {r.min():.2f}–{r.max():.2f}× {roof}: closest at "
            f"{lo}, farthest at {hi}"
        )
    busy = (ok["decode_gpu_busy_ms"] / ok["model_tpot_ms"]).replace([np.inf, -np.inf], np.nan)
    busy = busy.dropna()
    if len(busy) == 1:
        s += f"; the GPU's busy time per step {busy.min():.2f}× it"
    elif len(busy):
        blo, bhi = _ends(ok, busy)
        s += (
            f"; the GPU's busy time per step {busy.min():.2f}–{busy.max():.2f}× it (closest "
            f"at {blo}, farthest at {bhi})"
        )
    return [s + "."]


def _ends(ok: pd.DataFrame, r: pd.Series) -> tuple[str, str]:
    """The configurations at the low and the high end of ``r`` (indexed as ``ok``)."""
    i_lo: Any = r.idxmin()
    i_hi: Any = r.idxmax()
    return str(ok.loc[i_lo]["key"]), str(ok.loc[i_hi]["key"])


def generate_findings(table: pd.DataFrame) -> list[str]:
    """All findings of a generate sweep, in reading order."""
    table = prepared(table)
    out = batch_findings(table) + context_findings(table) + roofline_findings(table)
    return out + failed_findings(table[table["status"] == "error"])


# --------------------------------------------------------------------------- tables


def linear_fits(table: pd.DataFrame) -> pd.DataFrame:
    """Straight lines of :data:`LINEAR_QUANTITIES` along each axis, per line of ok rows:
    ``slope`` (per unit of the axis), ``intercept``, ``r2``."""
    recs = []
    for axis in ("batch", "seq"):
        for fixed, g in line_groups(table, axis):
            ok = g[g["status"] == "ok"]
            for q in LINEAR_QUANTITIES:
                if q not in ok:
                    continue
                x = ok[axis].to_numpy(dtype=np.float64)
                y = ok[q].to_numpy(dtype=np.float64)
                keep = np.isfinite(y)
                if len(np.unique(x[keep])) < 2:
                    continue
                k, a, r2 = _linear(x[keep], y[keep])
                line = ", ".join(f"{c}={v}" for c, v in fixed.items())
                xs = ",".join(str(int(v)) for v in x[keep])
                recs.append({"fit": "linear", "quantity": q, "axis": axis, "line": line,
                             **fixed, "x_values": xs, "slope": k, "intercept": a, "r2": r2,
                             "n": int(keep.sum())})  # fmt: skip
    frame: pd.DataFrame = pd.DataFrame(recs)
    return frame


def generate_fits(table: pd.DataFrame) -> pd.DataFrame:
    """``fits.csv`` of a generate sweep: power laws (``fit`` power) and lines."""
    table = prepared(table)
    power = fit_table(table, POWER_QUANTITIES).assign(fit="power")
    lin = linear_fits(table)
    frame: pd.DataFrame = pd.concat([power, lin], ignore_index=True) if len(lin) else power
    return frame


def walls_table(table: pd.DataFrame) -> pd.DataFrame:
    """``decode.csv``: per line, the measured crossover against the predicted one (along
    batch) and the capacity wall (along batch and context)."""
    table = prepared(table)
    recs: list[dict[str, Any]] = []
    for axis in ("batch", "seq"):
        for fixed, g in line_groups(table, axis):
            ok = g[g["status"] == "ok"]
            rec: dict[str, Any] = {"axis": axis, "line": line_name(fixed)}
            c = measured_crossover(ok) if axis == "batch" and len(ok) >= 2 else None
            if c is not None:
                rec.update({f"crossover_{k}": v for k, v in c.to_dict().items()})
            w = capacity_wall(g, axis)
            if w is not None:
                rec.update({f"capacity_{k}": v for k, v in w.to_dict().items()})
            if axis == "seq" and len(ok):
                kv = kv_read_bandwidth(ok)
                rec["kv_read_bw_Bps"] = kv[0] if kv else math.nan
                rec["kv_read_fitted"] = kv[3] if kv else None
            host = ok[(ok["decode_limit"] == HOST).to_numpy()]
            rec["host_bound"] = ",".join(str(int(v)) for v in host[axis]) or None
            recs.append(rec)
    frame: pd.DataFrame = pd.DataFrame(recs)
    return frame
