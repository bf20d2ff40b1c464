"""The ranked table of ``tracekit advise``: each lever's prediction beside its measurement
(pure: predictions and sweep rows in, a frame out), and ``advise.json``."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

import tracekit.advise.why as W
from tracekit.advise.limits import prediction_note
from tracekit.advise.predict import Prediction

FORMAT, VERSION = "tracekit.advise", 1
COLUMNS = (
    "rank", "lever", "title", "kind", "status", "error",
    "step_ms", "step_ratio", "ratio_lo", "ratio_hi", "rounds", "effect", "delta_ms",
    "tokens_per_s", "tokens_ratio",
    "peak_bytes", "peak_delta_bytes",
    "pred_step_ms", "pred_step_ratio", "step_error_pct", "pred_tokens_per_s",
    "pred_peak_bytes", "pred_peak_delta_bytes", "peak_error_pct",
    "addresses", "targets_verdict", "verdict_before", "verdict_after", "verdict_after_why",
    "time_evidence", "time_basis", "memory_evidence", "prediction_note", "slower_why", "key",
    "run_dir",
)  # fmt: skip
TIERS = {"faster": 0, "no measurable difference": 1, "slower": 2}
# objective -> (measured column, predicted column, ascending)
RANK_BY = {
    "time": ("step_ms", "pred_step_ms", True),
    "memory": ("peak_bytes", "pred_peak_bytes", True),
    "tokens-per-s": ("tokens_per_s", "pred_tokens_per_s", False),
}


def _f(v: Any) -> float:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return math.nan
    return f if math.isfinite(f) else math.nan


def _pct(pred: float, meas: float) -> float:
    return 100.0 * (pred - meas) / meas if meas == meas and meas != 0 and pred == pred else math.nan


def row(
    p: Prediction,
    kind: str,
    measured: Mapping[str, Any] | None,
    base: Mapping[str, Any] | None,
    base_pred: Mapping[str, float],
    verdicts: tuple[str | None, str | None],
    after_why: str | None = None,
) -> dict[str, Any]:
    """One line of the table. ``measured``: its sweep row (None: not run); ``base``: the
    re-measured baseline's sweep row; ``base_pred``: the baseline figures predictions are
    relative to when nothing was measured (``step_ms``, ``peak_bytes``); ``verdicts``: the
    baseline's and the row's run's; ``after_why``: why the row's run has no known verdict
    (``tracekit.advise.why.unknown_why``)."""
    status = "skipped" if p.skipped else ("not run" if measured is None else measured["status"])
    out: dict[str, Any] = {c: math.nan for c in COLUMNS}
    out.update(
        lever=p.lever, title=p.title, kind=kind, status=status,
        error=p.skipped if p.skipped else (measured or {}).get("error"),
        addresses=", ".join(p.addresses), targets_verdict=p.targets_verdict,
        verdict_before=verdicts[0], verdict_after=verdicts[1], verdict_after_why=after_why,
        time_evidence=p.time_evidence, time_basis=p.time_basis, memory_evidence=p.memory_evidence,
        key=(measured or {}).get("key"), run_dir=(measured or {}).get("run_dir"), rank=None,
    )  # fmt: skip
    b_ms = _f((base or {}).get("step_time_ms"))
    b_peak = _f((base or {}).get("peak_bytes"))
    b_tps = _f((base or {}).get("tokens_per_s"))
    ok = measured is not None and measured.get("status") == "ok"
    if ok:
        assert measured is not None
        ms, peak, tps = (
            _f(measured.get(c)) for c in ("step_time_ms", "peak_bytes", "tokens_per_s")
        )
        out.update(step_ms=ms, step_ratio=ms / b_ms, delta_ms=ms - b_ms, tokens_per_s=tps,
                   tokens_ratio=tps / b_tps, peak_bytes=peak,
                   peak_delta_bytes=peak - b_peak)  # fmt: skip
        # the paired rounds' interval of the step ratio (tracekit.advise.paired.overlay)
        out.update({k: measured[k] for k in ("ratio_lo", "ratio_hi", "rounds", "effect")
                    if k in measured})  # fmt: skip
    # predictions relative to the measured baseline row when there is one
    ref_ms = b_ms if b_ms == b_ms else _f(base_pred.get("step_ms"))
    ref_peak = b_peak if b_peak == b_peak else _f(base_pred.get("peak_bytes"))
    pred_ms = ref_ms * p.step_ratio
    out.update(
        pred_step_ratio=p.step_ratio, pred_step_ms=pred_ms,
        pred_tokens_per_s=p.tokens / (pred_ms / 1e3) if pred_ms > 0 else math.nan,
        pred_peak_delta_bytes=p.peak_delta_bytes, pred_peak_bytes=ref_peak + p.peak_delta_bytes,
    )  # fmt: skip
    if ok:
        out["step_error_pct"] = _pct(pred_ms, out["step_ms"])
        out["peak_error_pct"] = _pct(out["pred_peak_bytes"], out["peak_bytes"])
    out["prediction_note"] = prediction_note(p.lever, out["step_error_pct"])
    return out


def ratio_bounds(lo: float, hi: float) -> str:
    """``lo-hi`` at two decimals, or as many more (up to six) as tell its ends apart."""
    for d in range(2, 7):
        a, b = f"{lo:.{d}f}", f"{hi:.{d}f}"
        if a != b:
            break
    return f"{a}-{b}"


def interval_text(r: Mapping[str, Any]) -> str:
    """A row's 90 % interval and its rounds, for a sentence (its ends told apart as in the
    table: never ``1.01-1.01`` for an interval of 1.010-1.012)."""
    lo, hi, n = _f(r.get("ratio_lo")), _f(r.get("ratio_hi")), _f(r.get("rounds"))
    rounds = int(n) if n == n else 0
    if rounds == 0:
        return "1 collect, no interval"
    if rounds < 2 or lo != lo or hi != hi:
        return "1 round, no interval"
    if lo == hi:
        return f"{rounds} rounds, no spread"
    return f"90 % interval {ratio_bounds(lo, hi)}, {rounds} rounds"


def add_slower_why(
    rows: Sequence[dict[str, Any]],
    base: W.RunFacts | None,
    facts: Mapping[str, W.RunFacts | None],
) -> None:
    """Each measured row that slowed the step (its interval says slower; without an
    interval, its ratio is above 1) gets ``slower_why``: one line from its run's analysis
    against the re-measured baseline's (``tracekit.advise.why``)."""
    for r in rows:
        ratio = _f(r.get("step_ratio"))
        sure = r.get("effect") == "slower" or (math.isnan(_f(r.get("ratio_hi"))) and ratio > 1.0)
        if r.get("status") != "ok" or not sure:
            continue
        name = str(r["lever"])
        r["slower_why"] = W.slower_line(name, ratio, interval_text(r), base,
                                        facts.get(str(r.get("key"))))  # fmt: skip


def rank(df: pd.DataFrame, objective: str, measured: bool = True) -> pd.DataFrame:
    """Rows ordered by the objective: measured (``measured``; rows that failed or did not
    run are last, unranked), else predicted."""
    meas, pred, asc = RANK_BY[objective]
    key = df[meas if measured else pred].astype(float)
    has = key.notna().to_numpy()
    value = np.where(has, key.to_numpy() * (1 if asc else -1), np.inf)
    # measured time: a lever whose interval says faster ranks above one with no measurable
    # difference, which ranks above one whose interval says slower
    tier = df["effect"].map(TIERS).fillna(1).to_numpy() if measured and objective != "memory" \
        else np.zeros(len(df))  # fmt: skip
    order = np.lexsort((value, np.where(has, tier, len(TIERS))))  # unranked rows last
    out: pd.DataFrame = df.iloc[order].reset_index(drop=True)
    ranked = has[order]
    out["rank"] = pd.array([i + 1 if r else None for i, r in enumerate(ranked)], dtype="Int64")
    return out


def document(
    *,
    run: str,
    objective: str,
    baseline: Mapping[str, Any],
    table: pd.DataFrame,
    combination: Mapping[str, Any] | None,
    notes: Sequence[str],
    predicted_only: bool,
) -> dict[str, Any]:
    """``advise.json``."""
    rows = [
        {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in r.items()}
        for r in table.astype(object).where(table.notna(), None).to_dict(orient="records")
    ]
    return {
        "format": FORMAT,
        "version": VERSION,
        "run": run,
        "objective": objective,
        "predicted_only": predicted_only,
        "baseline": dict(baseline),
        "levers": rows,
        "combination": dict(combination) if combination is not None else None,
        "notes": list(notes),
    }
