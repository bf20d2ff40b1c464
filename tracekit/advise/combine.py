"""The best combination of ``tracekit advise``: the measured search
(``tracekit.advise.search``) run on the levers measured alone, its block of
``advise.json``, and the paired document that puts its ratio on the combination's row."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import tracekit.advise.levers as L
import tracekit.advise.paired as MP
import tracekit.advise.search as S
from tracekit.advise.predict import Prediction


def tokens_of(cfg: Mapping[str, Any]) -> float:
    """Tokens per step of a collect config (all micro-batches and GPUs)."""
    return float(
        int(cfg["batch"]) * int(cfg["seq"]) * int(cfg.get("grad_accum") or 1)
        * int(cfg.get("gpus") or 1)
    )  # fmt: skip


def candidates(
    rows: Mapping[str, Mapping[str, Any]],
    base_ms: float,
    preds: Sequence[Prediction],
    tokens: Callable[[tuple[str, ...]], float],
    per_token: bool,
) -> list[S.Candidate]:
    """Each lever measured alone (its paired row: ``step_time_ms`` over the re-measured
    baseline's ``base_ms``, ``ratio_lo``/``ratio_hi``/``rounds``) as a search candidate,
    in catalogue order; its cost ratio is over the tokens-per-step ratio when
    ``per_token``."""
    pred = {p.lever: p.step_ratio for p in preds}
    out = []
    for name in L.ORDER:
        r = rows.get(name)
        if r is None or r.get("status") != "ok":
            continue
        n = int(r.get("rounds") or 0)
        ratio = _f(r.get("step_time_ms")) / base_ms
        iv = S.Interval(ratio, _f(r.get("ratio_lo")), _f(r.get("ratio_hi")), n)
        if not math.isfinite(iv.ratio):
            continue
        k = tokens(()) / tokens((name,)) if per_token else 1.0
        p = pred.get(name, math.nan) * k
        out.append(S.Candidate(name, iv.scaled(k), p, L.LEVERS[name].group))
    return out


def _f(v: Any) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


def paired_doc(step_ratio: S.Interval) -> dict[str, Any]:
    """The combination's ratio against the baseline as a paired result
    (``tracekit.advise.paired.overlay``)."""
    iv = step_ratio
    if iv.faster:
        effect = "faster"
    elif iv.slower:
        effect = "slower"
    elif iv.has_interval:
        effect = "no measurable difference"
    else:
        effect = "1 round, no interval"
    lo, hi = (iv.lo, iv.hi) if iv.has_interval else (math.nan, math.nan)
    return {"status": "ok", "interval": {"ratio": iv.ratio, "lo": lo, "hi": hi,
                                         "rounds": iv.rounds, "effect": effect}}  # fmt: skip


def _iv(iv: S.Interval | None) -> dict[str, Any] | None:
    if iv is None:
        return None
    ok = iv.has_interval
    return {"ratio": iv.ratio, "lo": iv.lo if ok else None, "hi": iv.hi if ok else None,
            "rounds": iv.rounds}  # fmt: skip


def search_block(found: S.Search, objective: str) -> dict[str, Any]:
    """``advise.json``'s ``combination.search``: every step with its interval."""
    return {
        "cost": "step-time ratio" if objective == "time"
        else "step-time ratio / tokens-per-step ratio",
        "order": list(found.order),
        "steps": [
            {"levers": list(s.levers), "added": s.added, "against": list(s.against),
             "vs_best": _iv(s.vs_best), "vs_baseline": _iv(s.vs_baseline), "kept": s.kept,
             "why": s.why}
            for s in found.steps
        ],
        "best": list(found.best),
        "best_vs_baseline": _iv(found.ratio),
        "interactions": list(found.interactions),
        "stopped": found.stopped,
    }  # fmt: skip


def run_search(
    cands: Sequence[S.Candidate],
    config: Callable[[tuple[str, ...]], dict[str, Any]],
    tokens: Callable[[tuple[str, ...]], float],
    opts: MP.PairedOptions,
    dest: Any,
    *,
    per_token: bool,
    quiet: bool,
    resume: bool,
) -> S.Search:
    """The search with each step timed in a paired worker (``tracekit.advise.paired``)."""
    tries = max(0, len(S.order(cands)) - 1)
    if tries == 0:
        return S.search(cands, lambda best, tried: S.BUDGET)
    with MP.BudgetBar(opts.search_budget_s, tries, enabled=not quiet) as bar:
        m = MP.SearchMeasurer(config, tokens, dest, opts, tries, per_token=per_token,
                              env=MP.subprocess_env(), progress=bar, resume=resume)  # fmt: skip
        return S.search(cands, m)
