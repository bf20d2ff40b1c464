"""``tracekit advise RUN``: predict each lever's effect on a ``tracekit collect`` run, then
measure it (the baseline again, each lever alone, the best combination: rows of one
sweep), and rank the levers by the objective with prediction and measurement side by
side (docs/advise.md)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

import tracekit.advise.combine as CB
import tracekit.advise.levers as L
import tracekit.advise.measure as MS
import tracekit.advise.paired as MP
import tracekit.advise.search as S
import tracekit.advise.table as TB
import tracekit.advise.why as W
import tracekit.summary.critical_path.anchor as CPA
from tracekit.advise.baseline import Baseline, analyse
from tracekit.advise.predict import Prediction, predict, predict_all
from tracekit.errors import UsageError
from tracekit.io import atomic_write_bytes, atomic_write_json
from tracekit.sweep.plan import Point

JSON, CSV = "advise.json", "advise.csv"
SEARCH_METHOD = (
    "measured search: from the best single lever, the next lever (in order of its measured "
    "gain alone, predictions breaking ties) is added only when the combination beats the "
    "best so far in paired rounds against it, by its 90 % interval"
)


@dataclass(frozen=True)
class AdviseOptions:
    levers: tuple[str, ...] = L.ORDER
    objective: str = "time"
    factor: int = 2  # batch and grad-accum multiplier
    steps: int = 10
    warmup: int = 3
    timeout_s: float = 600.0
    predict_only: bool = False
    resume: bool = False
    quiet: bool = False
    paired: bool = True  # time each lever against the baseline in interleaved rounds
    rounds: MP.PairedOptions = field(default_factory=MP.PairedOptions)

    def __post_init__(self) -> None:
        if self.objective not in MS.OBJECTIVES:
            raise UsageError(
                f"--objective must be one of {', '.join(MS.OBJECTIVES)}, got {self.objective!r}"
            )
        unknown = [n for n in self.levers if n not in L.LEVERS]
        if unknown or not self.levers:
            raise UsageError(f"levers: {', '.join(unknown) or 'none given'}; choose from "
                             f"{', '.join(L.ORDER)}")  # fmt: skip
        if isinstance(self.factor, bool) or self.factor < 2:
            raise UsageError(f"--factor must be an integer >= 2, got {self.factor!r}")


@dataclass
class Advice:
    doc: dict[str, Any]  # advise.json
    table: pd.DataFrame  # ranked
    out: Path | None
    files: list[Path] = field(default_factory=list)


def default_out(run: Path) -> Path:
    """``<run>-advise`` beside the run folder."""
    run = Path(run)
    return run.parent / f"{run.name}-advise"


def facts_of(run_dir: Path) -> W.RunFacts | None:
    """What a measured row's run says about its step: its verdict and host work (None
    where the run cannot be read)."""
    from tracekit.analyse import host_and_report

    try:
        own, rep = host_and_report(run_dir)  # as the baseline reads its run
        assert rep.summary is not None
        return W.facts(own.trace, rep.summary)
    except Exception:  # a run we cannot read has no verdict
        return None


def baseline_block(b: Baseline, measured: Mapping[str, Any] | None) -> dict[str, Any]:
    v = b.summary.verdict
    cfg = b.config
    return {
        "run_dir": str(b.run_dir),
        "config": {k: cfg.get(k) for k in ("preset", "device", "batch", "seq", "dtype",
                                            "attention", "compile", "checkpoint", "optimizer",
                                            "grad_accum", "cuda_graphs", "gpus", "layers")},
        "optimizer": L.optimizer_of(cfg),
        "step_ms": b.step_ms,
        "tokens": b.tokens,
        "tokens_per_s": b.tokens / (b.step_ms / 1e3),
        "peak_bytes": b.peak_bytes if math.isfinite(b.peak_bytes) else None,
        "peak_source": b.peak_source,
        "verdict": None if v is None else v.verdict,
        **verdict_step(b.summary),
        "next_lever": None if v is None else v.lever,
        **path_block(b, None if v is None else v.verdict),
        "host_speedup": b.host_speedup,
        "host_basis": b.host_basis,
        "remeasured_step_ms": (measured or {}).get("step_time_ms"),
        "remeasured_peak_bytes": (measured or {}).get("peak_bytes"),
        "notes": list(b.notes),
    }  # fmt: skip


def verdict_step(sm: Any) -> dict[str, Any]:
    """The step the verdict splits, as the report has it: its ms and basis (``profiled``,
    ``unprofiled``; None: no verdict)."""
    v, bd = sm.verdict, sm.breakdown
    if v is None or bd is None or not math.isfinite(bd.step_ms):
        return {"verdict_step_ms": None, "verdict_basis": None}
    return {"verdict_step_ms": float(bd.step_ms), "verdict_basis": str(v.basis)}


def path_block(b: Baseline, verdict: str | None) -> dict[str, Any]:
    """The critical path's bound, the pass it is of and its disagreement with the verdict;
    all None where the report computes no critical path (a CPU run)."""
    if not b.has_path:
        return {"critical_path_bound": None, "critical_path_of": None, "verdict_note": None}
    bound, of = CPA.path_bound(b.cp, b.summary.cp_anchor)[:2]
    return {"critical_path_bound": bound, "critical_path_of": of,
            "verdict_note": CPA.disagreement(verdict, b.cp, b.summary.cp_anchor)}  # fmt: skip


def advise(
    run: Path | str,
    out: Path | str | None = None,
    opts: AdviseOptions | None = None,
    *,
    env: Mapping[str, str] | Callable[[Point], Mapping[str, str]] | None = None,
) -> Advice:
    """Predict, then (unless ``opts.predict_only``) measure and rank; writes
    ``advise.json`` and ``advise.csv`` beside the sweep's files in ``out``."""
    opts = opts or AdviseOptions()
    b = analyse(Path(run))
    preds = predict_all(b, opts.levers, opts.factor)
    notes = list(b.notes)
    base_pred = {"step_ms": b.step_ms, "peak_bytes": b.peak_bytes}
    if opts.predict_only:
        rows = [TB.row(p, "lever", None, None, base_pred, (b.verdict, None)) for p in preds]
        table = TB.rank(pd.DataFrame(rows, columns=list(TB.COLUMNS)), opts.objective, False)
        doc = TB.document(run=str(run), objective=opts.objective, table=table,
                          baseline=baseline_block(b, None), combination=None, notes=notes,
                          predicted_only=True)  # fmt: skip
        return Advice(doc, table, None)
    dest = Path(out) if out is not None else default_out(Path(run))
    mopts = MS.MeasureOptions(opts.steps, opts.warmup, opts.timeout_s, opts.factor)
    points = MS.points_for(b, opts.levers, opts.factor)
    sweep = MS.run(b, points, dest, mopts, resume=opts.resume, quiet=opts.quiet, env=env)
    by_key = _by_key(sweep)
    base = by_key.get(points[MS.BASELINE].key)
    if base is None or base.get("status") != "ok":
        notes.append("the baseline's re-run failed: measured ratios are missing")
        base = None
    ok = {n: p for n, p in points.items() if n != MS.BASELINE and base is not None
          and by_key.get(p.key, {}).get("status") == "ok"}  # fmt: skip
    measured = (
        _paired(b, {n: _config(b, n, opts) for n in ok}, by_key, ok, base, dest, opts)
        if base is not None
        else {}
    )
    gains = {n: MS.gain(r, base, opts.objective) for n, r in measured.items() if base}
    found: S.Search | None = None
    if opts.paired and base is not None and opts.objective != "memory":
        found = _search(b, measured, float(base["step_time_ms"]), preds, dest, opts)
        chosen, dropped = list(found.best), list[tuple[str, str, str]]()
    else:
        sure = MP.sure_gains(measured, base, opts.objective) if opts.paired and base else None
        chosen, dropped = MS.choose(gains, sure=sure)
    notes += [f"{d} left out of the combination: {why} ({k} gained more)" for k, d, why in dropped]
    combo: Prediction | None = None
    if len(chosen) >= 2:
        combo = predict(b, chosen, opts.factor)
        ccfg = L.combine([L.LEVERS[n] for n in chosen], b.config, opts.factor)
        cpoint = L.point(ccfg)
        sweep = MS.run(b, {**points, "combination": cpoint}, dest, mopts, resume=True,
                       quiet=opts.quiet, env=env)  # fmt: skip
        by_key = _by_key(sweep)
        row = by_key.get(cpoint.key, {})
        if base is not None and row.get("status") == "ok" and found is not None:
            assert found.ratio is not None  # two levers: a measured search
            k = CB.tokens_of(ccfg) / CB.tokens_of(b.config) if opts.objective != "time" else 1
            measured["combination"] = MP.overlay(row, base, CB.paired_doc(found.ratio.scaled(k)))
        elif base is not None and row.get("status") == "ok":
            measured.update(_paired(b, {"combination": ccfg}, by_key,
                                    {"combination": cpoint}, base, dest, opts))  # fmt: skip
    facts = {k: facts_of(dest / str(r["run_dir"])) for k, r in by_key.items()
             if r.get("status") == "ok" and r.get("run_dir")}  # fmt: skip
    rows = []
    for p in preds:
        meas = measured.get(p.lever) or (by_key.get(points[p.lever].key) if p.lever in points
                                         else None)  # fmt: skip
        after, why = _verdict_of(facts, str((meas or {}).get("key")))
        rows.append(TB.row(p, "lever", meas, base, base_pred, (b.verdict, after), why))
    if combo is not None:
        meas = measured.get("combination") or by_key.get(cpoint.key)
        after, why = _verdict_of(facts, cpoint.key)
        rows.append(TB.row(combo, "combination", meas, base, base_pred, (b.verdict, after), why))
    if base is not None:
        TB.add_slower_why(rows, facts.get(str(base.get("key"))), facts)
    table = TB.rank(pd.DataFrame(rows, columns=list(TB.COLUMNS)), opts.objective)
    combination = _combination(chosen, dropped, gains, combo, table, opts.objective)
    if found is not None:
        combination["method"] = SEARCH_METHOD
        combination["search"] = CB.search_block(found, opts.objective)
        if len(found.best) == 1 and len(found.order) > 1:
            combination["result"] = (f"{found.best[0]} alone: no other lever gained on top of "
                                     f"it ({found.stopped})")  # fmt: skip
    doc = TB.document(run=str(run), objective=opts.objective, table=table,
                      baseline=baseline_block(b, base), combination=combination, notes=notes,
                      predicted_only=False)  # fmt: skip
    atomic_write_json(dest / JSON, doc)
    atomic_write_bytes(dest / CSV, table.to_csv(index=False).encode())
    return Advice(doc, table, dest, [dest / JSON, dest / CSV])


def _verdict_of(facts: Mapping[str, W.RunFacts | None], key: str) -> tuple[str | None, str | None]:
    """A measured row's verdict and, where it is ``unknown``, why (None, None: no analysis)."""
    f = facts.get(key)
    return (None, None) if f is None else (f.verdict, f.verdict_why)


def _config(b: Baseline, name: str, opts: AdviseOptions) -> dict[str, Any]:
    """A lever's collect config in the manifest's form."""
    return dict(L.LEVERS[name].apply(b.config, opts.factor))


def _paired(
    b: Baseline,
    configs: Mapping[str, Mapping[str, Any]],
    by_key: Mapping[str, dict[str, Any]],
    points: Mapping[str, Point],
    base: Mapping[str, Any],
    dest: Path,
    opts: AdviseOptions,
) -> dict[str, dict[str, Any]]:
    """Each collected lever's sweep row with its step time from paired rounds against the
    baseline (``tracekit.advise.paired``; ``opts.paired`` off: the single collects')."""
    rows = {n: by_key[p.key] for n, p in points.items()}
    if not opts.paired or not configs:
        return {n: dict(r) for n, r in rows.items()}
    with MP.BudgetBar(opts.rounds.budget_s, len(configs), enabled=not opts.quiet) as bar:
        results = MP.run_all(
            configs, b.config, dest, opts.rounds, MP.subprocess_env(), bar, resume=opts.resume
        )
    return {n: MP.overlay(r, base, results.get(n)) for n, r in rows.items()}


def _search(
    b: Baseline,
    measured: Mapping[str, Mapping[str, Any]],
    base_ms: float,
    preds: list[Prediction],
    dest: Path,
    opts: AdviseOptions,
) -> S.Search:
    """The measured search over the levers measured alone (``tracekit.advise.search``)."""

    def config(names: tuple[str, ...]) -> dict[str, Any]:
        return L.combine([L.LEVERS[n] for n in names], b.config, opts.factor)

    def tokens(names: tuple[str, ...]) -> float:
        return CB.tokens_of(config(names))

    per_token = opts.objective == "tokens-per-s"
    cands = CB.candidates(measured, base_ms, preds, tokens, per_token)
    return CB.run_search(cands, config, tokens, opts.rounds, dest, per_token=per_token,
                         quiet=opts.quiet, resume=opts.resume)  # fmt: skip


def _by_key(sweep: pd.DataFrame) -> dict[str, dict[str, Any]]:
    return {
        str(r["key"]): {str(k): v for k, v in r.items()} for r in sweep.to_dict(orient="records")
    }


def _combination(
    chosen: list[str],
    dropped: list[tuple[str, str, str]],
    gains: Mapping[str, float],
    combo: Prediction | None,
    table: pd.DataFrame,
    objective: str,
) -> dict[str, Any]:
    """The best combination found, and how it was chosen."""
    doc: dict[str, Any] = {
        "method": "greedy: every lever whose measured gain on the objective exceeds "
        f"{100 * MS.MIN_GAIN:g} %, best first, one of each group of alternatives",
        "objective": objective,
        "gains": {k: v for k, v in gains.items() if math.isfinite(v)},
        "levers": chosen,
        "dropped": [{"kept": k, "dropped": d, "why": w} for k, d, w in dropped],
    }
    if not chosen:
        doc["result"] = "no lever improved the objective: the baseline stays"
    elif combo is None:
        doc["result"] = f"only {chosen[0]} improved the objective: it is the best combination"
    else:
        r = table[table["kind"] == "combination"]
        doc["result"] = "measured" if len(r) and r.iloc[0]["status"] == "ok" else "failed"
        doc["row"] = combo.lever
    return doc
