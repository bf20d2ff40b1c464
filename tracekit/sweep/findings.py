"""Findings generated from the sweep table: every sentence states what the rows show.

Which wall each axis hits first:

* capacity: a configuration ran out of memory, or its peak reached ``NEAR_CAPACITY`` of the
  device's memory;
* throughput plateau: tokens/s grew by less than ``PLATEAU_GAIN`` from one point to the
  next larger one. Its kind comes from the plateau row: ``launch-bound`` when the GPU
  idles at least ``IDLE_LAUNCH_PCT`` of the step, ``bandwidth-bound`` when the achieved
  DRAM bandwidth (classify stage) is at least ``BW_HIGH_PCT`` of the measured copy
  bandwidth or most kernel time is memory-bound, ``compute-bound`` when the model FLOP
  rate is at least ``FLOPS_HIGH_PCT`` of the measured matmul roof, else undetermined.

Along the GPU count (``--gpus 1,2``): the scaling efficiency, tokens/s per GPU with N
GPUs over tokens/s per GPU with the fewest (100 % = linear; the batch is per GPU).
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from tracekit.sweep.fit import fit_table, lines
from tracekit.sweep.plan import config_columns
from tracekit.sweep.rows import complete

NEAR_CAPACITY = 0.9
PLATEAU_GAIN = 1.10
IDLE_LAUNCH_PCT = 20.0
BW_HIGH_PCT = 60.0
FLOPS_HIGH_PCT = 60.0
MEMORY_BOUND_HIGH_PCT = 60.0


def _gib(b: float) -> str:
    """Bytes in the largest binary unit that keeps the number >= 1."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(b) >= scale:
            return f"{b / scale:.2f} {unit}"
    return f"{b:.0f} B"


def _num(v: Any) -> float:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return math.nan
    return f


def _line_name(fixed: dict[str, Any]) -> str:
    parts = []
    for k in ("batch", "seq"):
        if k in fixed:
            parts.append(f"{k} {fixed[k]}")
    parts += [str(fixed[k]) for k in ("dtype", "attention") if k in fixed]
    if int(fixed.get("gpus", 1)) > 1:
        parts.append(f"{fixed['gpus']} GPUs")
    return ", ".join(parts)


def plateau_kind(row: pd.Series) -> tuple[str, str]:
    """(kind, evidence) of a throughput plateau at ``row``."""
    idle = _num(row.get("gpu_idle_pct"))
    bw = _num(row.get("bw_util_pct"))
    mb = _num(row.get("memory_bound_time_pct"))
    fl = _num(row.get("model_flops_util_pct"))
    if idle >= IDLE_LAUNCH_PCT:
        return "launch-bound", f"the GPU idles {idle:.0f} % of the step"
    if bw >= BW_HIGH_PCT:
        return "bandwidth-bound", f"DRAM bandwidth at {bw:.0f} % of the measured copy roof"
    if mb >= MEMORY_BOUND_HIGH_PCT:
        return "bandwidth-bound", f"{mb:.0f} % of kernel time is memory-bound"
    if fl >= FLOPS_HIGH_PCT:
        return "compute-bound", f"model FLOP rate at {fl:.0f} % of the measured matmul roof"
    bits = []
    if not math.isnan(idle):
        bits.append(f"GPU idle {idle:.0f} %")
    if not math.isnan(fl):
        bits.append(f"model FLOP rate {fl:.0f} % of the matmul roof")
    # no bandwidth figure (no byte counts, a CPU row): absent, not "unknown until ..."
    return "undetermined", ", ".join(bits) or "no utilisation data"


def axis_findings(table: pd.DataFrame, axis: str) -> list[str]:
    """One sentence per line along ``axis``: the first wall, or that none was hit."""
    out = []
    fixed_cols = [c for c in config_columns(table) if c != axis]
    for fixed, _ in _all_lines(table, axis):
        g = table
        for k, v in fixed.items():
            g = g[g[k] == v]
        g = g.sort_values(axis)
        if g[axis].nunique() < 2:
            continue
        name = _line_name({k: fixed[k] for k in fixed_cols})
        sentence = _line_finding(g, axis, name)
        if sentence is not None:
            out.append(sentence)
    return out


def _line_finding(g: pd.DataFrame, axis: str, name: str) -> str | None:
    """The sentence for one line (rows sorted along ``axis``): its first wall and the next,
    or how far it got without one; None when fewer than two rows ran."""
    ok = g[g["status"] == "ok"]
    oom = g[g["status"] == "oom"]
    total = _num(ok["device_total_bytes"].max()) if len(ok) else math.nan
    walls = [w for w in (_capacity_wall(ok, oom, axis, total), _plateau_wall(ok, axis)) if w]
    s = f"Along {axis} ({name}): "
    xs = ok[axis].to_numpy()
    if walls:
        walls.sort(key=lambda w: w[0])
        s += "first " + walls[0][1]
        if len(walls) > 1:
            s += "; then " + walls[1][1]
    elif len(ok) >= 2:
        tps = ok["tokens_per_s"].to_numpy(dtype=float)
        gain = 100 * (tps[-1] / tps[0] - 1)
        peak = ok.iloc[-1]["peak_bytes"]
        cap = (
            f", {100 * peak / total:.0f} % of the device's {_gib(total)}"
            if not math.isnan(total)
            else ""
        )
        s += (
            f"no wall up to {axis} {int(xs[-1])}: tokens/s still grows ({gain:+.0f} % "
            f"from {axis} {int(xs[0])}) and the peak is {_gib(peak)}{cap}"
        )
    else:
        return None
    idle = ok["gpu_idle_pct"].to_numpy(dtype=float) if len(ok) else []
    if len(idle) >= 2 and not math.isnan(idle[0]) and idle[0] >= IDLE_LAUNCH_PCT:
        s += (
            f". At {axis} {int(xs[0])} the GPU idles {idle[0]:.0f} % of the step "
            f"(launch-bound), at {axis} {int(xs[-1])} {idle[-1]:.0f} %"
        )
    return s + "."


def _capacity_wall(
    ok: pd.DataFrame, oom: pd.DataFrame, axis: str, total: float
) -> tuple[float, str] | None:
    """(position, text) of the capacity wall: the first OOM, else the first peak at
    ``NEAR_CAPACITY`` of the device's memory."""
    if len(oom):
        first_oom = oom.iloc[0]
        req = _num(first_oom.get("oom_requested_bytes"))
        ask = f", asking for {_gib(req)} more" if not math.isnan(req) else ""
        last_ok = ok[ok[axis] < first_oom[axis]]
        prev = (
            (
                f" after {axis} {int(last_ok.iloc[-1][axis])} peaked at "
                f"{_gib(last_ok.iloc[-1]['peak_bytes'])}"
            )
            if len(last_ok)
            else ""
        )
        return (
            float(first_oom[axis]),
            f"the capacity wall: {axis} {int(first_oom[axis])} ran out of memory{ask}{prev}",
        )
    if not len(ok) or math.isnan(total):
        return None
    near = ok[ok["peak_bytes"] >= NEAR_CAPACITY * total]
    if not len(near):
        return None
    cap_at = near.iloc[0]
    return (
        float(cap_at[axis]),
        f"the capacity wall: at {axis} "
        f"{int(cap_at[axis])} the peak ({_gib(cap_at['peak_bytes'])}) is "
        f"{100 * cap_at['peak_bytes'] / total:.0f} % of the device's "
        f"{_gib(total)}",
    )


def _plateau_wall(ok: pd.DataFrame, axis: str) -> tuple[float, str] | None:
    """(position, text) of the first step along the axis where tokens/s grows by less
    than ``PLATEAU_GAIN``, with the plateau's kind."""
    tps = ok["tokens_per_s"].to_numpy(dtype=float)
    for i in range(1, len(ok)):
        if tps[i] < PLATEAU_GAIN * tps[i - 1]:
            a, b = ok.iloc[i - 1], ok.iloc[i]
            kind, why = plateau_kind(b)
            gain = 100 * (b["tokens_per_s"] / a["tokens_per_s"] - 1)
            verb = "stops growing" if gain >= 0 else "falls"
            return (
                float(a[axis]),
                f"a throughput plateau ({kind}): tokens/s {verb} "
                f"from {axis} {int(a[axis])} to {int(b[axis])} ({gain:+.0f} %: "
                f"{a['tokens_per_s']:,.0f} -> {b['tokens_per_s']:,.0f}; {why})",
            )
    return None


def _all_lines(table: pd.DataFrame, axis: str) -> list[tuple[dict[str, Any], pd.DataFrame]]:
    """Lines along ``axis`` over all rows (ok or not) with at least two points."""
    fixed = [c for c in config_columns(table) if c != axis]
    out = []
    for keys, g in table.groupby(fixed, sort=True):
        if g[axis].nunique() >= 2:
            out.append((dict(zip(fixed, keys, strict=True)), g))
    return out


def gpu_findings(table: pd.DataFrame) -> list[str]:
    """One sentence per line along the GPU count: speed-up and scaling efficiency."""
    out = []
    lines_ = _all_lines(table, "gpus") if "gpus" in config_columns(table) else []
    for fixed, g in lines_:
        ok = g[g["status"] == "ok"].sort_values("gpus")
        if len(ok) < 2:
            continue
        base = ok.iloc[0]
        parts = []
        for _, r in ok.iloc[1:].iterrows():
            eff = 100 * _num(r["tokens_per_s_per_gpu"]) / _num(base["tokens_per_s_per_gpu"])
            s = (
                f"{int(r['gpus'])} GPUs ({r.get('parallel') or 'ddp'}) reach "
                f"{_num(r['tokens_per_s']) / _num(base['tokens_per_s']):.2f}x the tokens/s of "
                f"{int(base['gpus'])}, a scaling efficiency of {eff:.0f} % "
                f"({_num(r['tokens_per_s_per_gpu']):,.0f} vs "
                f"{_num(base['tokens_per_s_per_gpu']):,.0f} tokens/s per GPU; step "
                f"{_num(base['step_time_ms']):.2f} -> {_num(r['step_time_ms']):.2f} ms)"
            )
            busbw = _num(r.get("interconnect_busbw_Bps"))
            if not math.isnan(busbw):
                s += f", all-reduce busbw up to {busbw / 1e9:.1f} GB/s"
            parts.append(s)
        out.append(f"Across GPUs ({_line_name(fixed)} per GPU): " + "; ".join(parts) + ".")
    return out


def pair_savings(table: pd.DataFrame, column: str, new: str, old: str) -> list[dict[str, Any]]:
    """Measured savings of ``new`` over ``old`` in ``column`` ('dtype' or 'attention') for
    every pair of ok rows equal in everything else."""
    ok = table[table["status"] == "ok"]
    others = [c for c in config_columns(table) if c != column]
    a = ok[ok[column] == new].set_index(others)
    b = ok[ok[column] == old].set_index(others)
    recs = []
    for idx in a.index.intersection(b.index):
        ra, rb = a.loc[idx], b.loc[idx]
        if isinstance(ra, pd.DataFrame) or isinstance(rb, pd.DataFrame):
            continue
        recs.append(
            {
                **dict(zip(others, idx if isinstance(idx, tuple) else (idx,), strict=True)),
                "peak_new": float(ra["peak_bytes"]),
                "peak_old": float(rb["peak_bytes"]),
                "memory_saving_pct": 100 * (1 - float(ra["peak_bytes"]) / float(rb["peak_bytes"])),
                "speedup": float(rb["step_time_ms"]) / float(ra["step_time_ms"]),
            }
        )
    return recs


def savings_findings(table: pd.DataFrame) -> list[str]:
    out = []
    for column, new, old in (
        ("dtype", "bf16", "fp32"),
        ("dtype", "fp16", "fp32"),
        ("attention", "sdpa", "naive"),
    ):
        recs = pair_savings(table, column, new, old)
        if not recs:
            continue
        recs.sort(key=lambda r: (r.get("seq", 0), r.get("batch", 0)))
        parts = []
        for r in (recs[0], recs[-1]) if len(recs) > 1 else (recs[0],):
            where = ", ".join(
                f"{k} {r[k]}" for k in ("batch", "seq", "dtype", "attention", "gpus") if k in r
            )
            parts.append(
                f"at {where} it {'saves' if r['memory_saving_pct'] >= 0 else 'adds'} "
                f"{abs(r['memory_saving_pct']):.1f} % of peak memory "
                f"({_gib(r['peak_new'])} vs {_gib(r['peak_old'])}) and runs "
                f"{r['speedup']:.2f}x as fast"
            )
        s = f"{new} vs {old}: " + "; ".join(parts)
        if column == "dtype":
            r = recs[0]
            row = table[(table["status"] == "ok") & (table["dtype"] == new)].iloc[0]
            static = 12 * _num(row.get("n_params"))
            if not math.isnan(static) and r["peak_new"] > 0:
                s += (
                    f" (fp32 weights and AdamW state, 12 bytes per parameter, stay: "
                    f"{100 * static / r['peak_new']:.0f} % of the {new} peak)"
                )
        out.append(s + ".")
    return out


def scaling_findings(fits: pd.DataFrame) -> list[str]:
    out = []
    q = "dynamic_peak_bytes"
    f = fits[(fits["quantity"] == q) & (fits["axis"] == "batch")]
    for _, r in f.iterrows():
        out.append(
            f"Peak memory above weights and optimizer state grows as batch^"
            f"{r['exponent']:.2f} (R² {r['r2']:.3f}; {r['line']})."
        )
    f = fits[(fits["quantity"] == q) & (fits["axis"] == "seq")]
    for _, r in f.iterrows():
        s = f"Along seq ({r['line']}) it grows as seq^{r['exponent']:.2f} (R² {r['r2']:.3f})"
        if not pd.isna(r["t2_share_at_max"]):
            s += (
                f"; the quadratic fit (R² {r['quad_r2']:.3f}) puts "
                f"{100 * r['t2_share_at_max']:.0f} % of it in the T² term at seq "
                f"{r['x_values'].split(',')[-1]}: "
                f"{'a quadratic term' if r['t2_term'] else 'no material quadratic term'}"
            )
        out.append(s + ".")
    return out


def model_findings(table: pd.DataFrame) -> list[str]:
    ok = table[(table["status"] == "ok")]
    if "model_error_pct" not in ok.columns:
        return []
    err = ok["model_error_pct"].dropna()
    if not len(err):
        return []
    worst = ok.loc[err.abs().idxmax()]
    return [
        f"The analytic memory model is within {err.abs().max():.1f} % of the measured "
        f"peak on all {len(err)} configurations (mean error {err.mean():+.1f} %; worst "
        f"{worst['key']})."
    ]


def findings(table: pd.DataFrame, fits: pd.DataFrame | None = None) -> list[str]:
    """All findings, in reading order."""
    table = complete(table)
    if fits is None:
        fits = fit_table(table)
    out: list[str] = timing_caveat(table)
    failed = table[table["status"] == "error"]
    for axis in ("batch", "seq"):
        out += axis_findings(table, axis)
    out += gpu_findings(table)
    out += savings_findings(table)
    out += scaling_findings(fits)
    out += model_findings(table)
    return out + failed_findings(failed)


# Below this many timed steps per configuration a step time is one draw (noise of ~10-50 %
# on a shared CPU), so the timing trends and fits say so; memory does not depend on it.
FEW_TIMED_STEPS = 3


def timing_caveat(table: pd.DataFrame) -> list[str]:
    """One sentence when the configurations' timings rest on fewer than
    :data:`FEW_TIMED_STEPS` timed steps each (the manifests' ``config.steps``)."""
    if "timed_steps" not in table:
        return []
    ok = table.loc[table["status"] == "ok", "timed_steps"]
    steps = pd.to_numeric(ok, errors="coerce").dropna()
    if not len(steps) or steps.min() >= FEW_TIMED_STEPS:
        return []
    n = int(steps.min())
    return [
        f"{n} timed step{'s' if n != 1 else ''} per configuration: step times, tokens/s and "
        "their trends and fits are indicative only (memory figures do not depend on it)."
    ]


def failed_findings(failed: pd.DataFrame) -> list[str]:
    """The sentence naming the failed configurations (``failed``: their rows), if any."""
    if not len(failed):
        return []
    by_error: dict[str, list[str]] = {}
    for _, r in failed.iterrows():  # one reason, the configurations it stopped
        by_error.setdefault(str(r["error"]), []).append(str(r["key"]))
    return [
        f"{len(failed)} configuration(s) failed: "
        + "; ".join(f"{', '.join(keys)} ({err})" for err, keys in by_error.items())
        + "."
    ]


def paragraph(table: pd.DataFrame, fits: pd.DataFrame | None = None) -> str:
    return " ".join(findings(table, fits))


__all__ = ["findings", "lines", "paragraph"]
