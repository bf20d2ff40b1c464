"""The profiled window's multi-rank figures beside what the run measured without the
profiler (docs/multi-gpu.md, "The profiled window and the measured cost").

The profiler slows each rank's host by a different amount: one rank falls behind and the
others wait for it inside the collectives, so a trace's sync wait (and the exposed
communication it makes) can be the profiler's rather than the job's. The run manifest of
``tracekit collect --gpus N`` says what the job does without it, first found first:

* ``measured``: ``distributed.comm_cost`` (status ``ok``): per rank the step with and
  without gradient synchronisation and their difference, the measured communication cost;
  the skew of the steps without sync is the straggler figure (no rank waits for another);
* ``unprofiled steps``: the ranks' unprofiled timed steps
  (``distributed.ranks[i].metrics.step_time_ms``), whose skew is the straggler figure;
* ``profiled window``: neither (a bare folder of rank traces): every figure is the trace's.

The profiled window's ranks are :attr:`Measured.profiled_spread_ms` apart (per step, the
longest own work minus the shortest: how far apart they arrive at the collectives). When
that exceeds the unprofiled spread by more than :data:`DISAGREE_MS` and
:data:`DISAGREE_PCT` % of the unprofiled step, the trace's wait is the profiler's: the
verdict then takes the measured cost, or without one the trace's exposed communication less
its sync wait (the exposed transfer), never the wait alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import pandas as pd

from tracekit.manifest import as_manifest
from tracekit.ranks.groups import Groups, nanmax, series_mean, with_added

DISAGREE_MS = 1.0  # the profiled spread must exceed the unprofiled one by more than this ...
DISAGREE_PCT = 10.0  # ... and by more than this share of the unprofiled step
MEASURE_HINT = "tracekit collect --gpus N measures it without the profiler"
BASES = ("measured", "unprofiled steps", "profiled window")


@dataclass(frozen=True)
class RankFigures:
    """One rank's unprofiled figures (ms; None where the manifest has none)."""

    rank: int
    step_ms: float | None  # median unprofiled timed step
    with_sync_ms: float | None = None
    without_sync_ms: float | None = None
    cost_ms: float | None = None
    cost_lo_ms: float | None = None
    cost_hi_ms: float | None = None
    cost_pct: float | None = None  # of with_sync_ms


@dataclass(frozen=True)
class Measured:
    """The reconciliation of the trace with the measurements (see the module's docstring)."""

    basis: str  # one of BASES
    ranks: dict[int, RankFigures]
    comm_cost: dict[str, Any] | None  # the manifest's block, without its per-rank entries
    unprofiled_step_ms: float | None  # the job's (manifest metrics.step_time_ms.median)
    step_spread_ms: float | None  # unprofiled medians, largest - smallest
    step_skew_pct: float | None
    step_slowest_rank: int | None
    own_spread_ms: float | None  # steps without gradient sync, largest - smallest
    own_skew_pct: float | None
    own_slowest_rank: int | None
    profiled_spread_ms: float | None  # mean over steps of (longest - shortest own work)
    profiled_wait_rank: int | None  # the rank with the longest sync wait in the trace
    profiled_wait_ms: float | None  # its sync wait per step
    profilers_wait: bool  # the trace's wait disagrees with the unprofiled figures
    comm_ms: float | None  # the communication on the unprofiled basis, mean over ranks (ms)
    comm_pct: float | None  # ... as a share of the unprofiled step
    comm_source: str | None  # its words; None: the trace's exposed communication stands
    statements: list[str] = field(default_factory=list)
    comm_by_rank: dict[int, float] = field(default_factory=dict)  # each rank's (the verdict's)

    @property
    def unprofiled_spread_ms(self) -> float | None:
        """The straggler figure: the steps without sync when measured, else the steps'."""
        return self.own_spread_ms if self.own_spread_ms is not None else self.step_spread_ms

    def to_json(self) -> dict[str, Any]:
        return {
            "basis": self.basis,
            "comm_cost": self.comm_cost,
            "unprofiled_step_ms": self.unprofiled_step_ms,
            "step_spread_ms": self.step_spread_ms,
            "step_skew_pct": self.step_skew_pct,
            "step_slowest_rank": self.step_slowest_rank,
            "own_spread_ms": self.own_spread_ms,
            "own_skew_pct": self.own_skew_pct,
            "own_slowest_rank": self.own_slowest_rank,
            "profiled_spread_ms": self.profiled_spread_ms,
            "profiled_wait_rank": self.profiled_wait_rank,
            "profiled_wait_ms": self.profiled_wait_ms,
            "profilers_wait": self.profilers_wait,
            "comm_ms": self.comm_ms,
            "comm_pct": self.comm_pct,
            "comm_source": self.comm_source,
            "comm_ms_by_rank": {str(r): v for r, v in self.comm_by_rank.items()},
            "statements": list(self.statements),
        }


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and math.isfinite(v) else None


def _cost_entries(cost: Any) -> dict[int, dict[str, Any]]:
    rows = cost.get("ranks") if isinstance(cost, dict) else None
    out: dict[int, dict[str, Any]] = {}
    for i, e in enumerate(rows if isinstance(rows, list) else []):
        if isinstance(e, dict):
            r = e.get("rank")
            out[int(r) if isinstance(r, int) else i] = e
    return out


def rank_figures(manifest: Any, ranks: list[int]) -> tuple[dict[int, RankFigures], Any]:
    """Per rank the manifest's unprofiled figures; and its ``comm_cost`` block (or None)."""
    dist = as_manifest(manifest).distributed
    steps = dist.rank_step_medians() if dist is not None else {}
    cost = dist.comm_cost if dist is not None else None
    ok = isinstance(cost, dict) and cost.get("status") == "ok"
    by_rank = _cost_entries(cost) if ok else {}
    out = {}
    for r in ranks:
        c = by_rank.get(r, {})
        rng = c.get("cost_ms_range")
        lo, hi = (rng[0], rng[1]) if isinstance(rng, list) and len(rng) == 2 else (None, None)
        out[r] = RankFigures(
            rank=r,
            step_ms=steps.get(r),
            with_sync_ms=_num(c.get("with_sync_ms")),
            without_sync_ms=_num(c.get("without_sync_ms")),
            cost_ms=_num(c.get("cost_ms")),
            cost_lo_ms=_num(lo),
            cost_hi_ms=_num(hi),
            cost_pct=_num(c.get("cost_pct")),
        )
    return out, cost if isinstance(cost, dict) else None


def _spread(values: dict[int, float | None]) -> tuple[float | None, float | None, int | None]:
    """(largest - smallest, that over the smallest in %, the largest's rank)."""
    got = {r: v for r, v in values.items() if v is not None}
    if len(got) < 2 or len(got) < len(values):
        return None, None, None
    lo, hi = min(got.values()), max(got.values())
    slow = max(got, key=lambda r: got[r])
    return hi - lo, (100.0 * (hi - lo) / lo if lo > 0 else None), slow


def profiled_spread(rank_steps: pd.DataFrame) -> float | None:
    """Per step, the longest own work (step - sync wait) minus the shortest; mean over steps."""
    if not len(rank_steps) or len(np.unique(rank_steps["rank"].to_numpy())) < 2:
        return None
    g = Groups.of(rank_steps["step"].to_numpy())
    work = rank_steps["own_work_ms"].to_numpy(dtype=float)
    return series_mean(nanmax(g, work) + nanmax(g, -work))  # max - min per step (NaN skipped)


def _ms(v: float | None) -> str:
    return "unknown" if v is None else f"{v:.2f} ms"


def _each(ranks: dict[int, RankFigures], attr: str) -> str:
    return ", ".join(f"rank {r} {_ms(getattr(f, attr))}" for r, f in sorted(ranks.items())[:8])


def _each_ms(values: dict[int, float]) -> str:
    return ", ".join(f"rank {r} {_ms(v)}" for r, v in sorted(values.items())[:8])


def _mean(values: list[float | None]) -> float | None:
    got = [v for v in values if v is not None]
    return sum(got) / len(got) if got and len(got) == len(values) else None


def measure(manifest: Any, per_rank: pd.DataFrame, rank_steps: pd.DataFrame) -> Measured:
    """The reconciliation from the manifest (None for a bare folder) and the reduction's
    per-rank and per-(rank, step) tables."""
    ranks = [int(r) for r in per_rank["rank"]] if len(per_rank) else []
    figs, cost = rank_figures(manifest, ranks)
    step_spread, step_skew, step_slow = _spread({r: f.step_ms for r, f in figs.items()})
    own_spread, own_skew, own_slow = _spread({r: f.without_sync_ms for r, f in figs.items()})
    unprofiled = as_manifest(manifest).metrics.step_median_ms
    if unprofiled is None:
        known = [f.step_ms for f in figs.values() if f.step_ms is not None]
        unprofiled = max(known) if known else None
    costs = [f.cost_ms for f in figs.values()]
    measured = bool(figs) and all(c is not None for c in costs)
    basis = (
        "measured" if measured else "unprofiled steps" if step_spread is not None else
        "profiled window"
    )  # fmt: skip
    p_spread = profiled_spread(rank_steps)
    wait_rank, wait_ms = None, None
    waits = per_rank["sync_wait_ms"].to_numpy(dtype=float) if len(per_rank) else np.zeros(0)
    if (~np.isnan(waits)).any():
        at = int(np.nanargmax(waits))  # idxmax: the first largest
        wait_rank, wait_ms = int(per_rank["rank"].iloc[at]), float(waits[at])
    spread = own_spread if own_spread is not None else step_spread
    disagree = (
        p_spread is not None
        and spread is not None
        and unprofiled is not None
        and p_spread - spread > max(DISAGREE_MS, DISAGREE_PCT / 100.0 * unprofiled)
    )
    by_rank, source = _verdict_comm(basis, disagree, figs, per_rank)
    comm_ms = _mean(list(by_rank.values())) if by_rank else None
    comm_pct = 100.0 * comm_ms / unprofiled if comm_ms is not None and unprofiled else None
    m = Measured(
        basis=basis,
        ranks=figs,
        comm_cost={k: v for k, v in cost.items() if k != "ranks"} if cost else None,
        unprofiled_step_ms=unprofiled,
        step_spread_ms=step_spread,
        step_skew_pct=step_skew,
        step_slowest_rank=step_slow,
        own_spread_ms=own_spread,
        own_skew_pct=own_skew,
        own_slowest_rank=own_slow,
        profiled_spread_ms=p_spread,
        profiled_wait_rank=wait_rank,
        profiled_wait_ms=wait_ms,
        profilers_wait=disagree,
        comm_ms=comm_ms,
        comm_pct=comm_pct,
        comm_source=source,
        comm_by_rank=by_rank,
    )
    m.statements.extend(statements(m))
    return m


def _light(per_rank: pd.DataFrame) -> pd.Series:
    """Per rank: its exposed communication comes from its light timeline pass."""
    if "timeline_source" not in per_rank:
        return cast(pd.Series, pd.Series(False, index=per_rank.index))
    return cast(pd.Series, per_rank["timeline_source"] == "light")


def exposed_transfer_ms(per_rank: pd.DataFrame) -> dict[int, float]:
    """Per rank, the trace's exposed communication less its sync wait (what is left when
    the wait is the profiler's); a rank whose figures come from its light timeline pass
    keeps its exposed communication whole (the profiled window's wait is not that pass's)."""
    wait = per_rank["sync_wait_ms"].where(~_light(per_rank), 0.0)
    left = (per_rank["exposed_comm_ms"] - wait).clip(lower=0)
    return {int(r): float(v) for r, v in zip(per_rank["rank"], left, strict=True)}


TRANSFER = "exposed communication in the trace less its sync wait"
COUNTED = {TRANSFER: "the trace's exposed communication less its sync wait"}


def _transfer_words(per_rank: pd.DataFrame) -> str:
    light = _light(per_rank)
    if bool(light.all()):
        return "exposed communication of the light timeline pass"
    if bool(light.any()):
        return (
            "exposed communication of the light timeline pass where the rank has one, else "
            "in the trace less its sync wait"
        )
    return TRANSFER


def _verdict_comm(
    basis: str, disagree: bool, figs: dict[int, RankFigures], per_rank: pd.DataFrame
) -> tuple[dict[int, float], str | None]:
    """Per rank the communication figure the verdict takes (ms per step), and its words;
    empty: the trace's exposed communication, as for any trace."""
    if basis == "measured":
        costs = {r: f.cost_ms for r, f in figs.items() if f.cost_ms is not None}
        return costs, "communication cost measured without the profiler"
    if disagree and len(per_rank):
        return exposed_transfer_ms(per_rank), (
            f"{_transfer_words(per_rank)} (the profiled window's wait is the profiler's)"
        )
    return {}, None


def statements(m: Measured) -> list[str]:
    """The plain sentences the report shows about the trace against the measurements."""
    out: list[str] = []
    waits = (
        f" (rank {m.profiled_wait_rank} waits {_ms(m.profiled_wait_ms)} per step in its "
        "collectives)"
        if m.profiled_wait_rank is not None
        else ""
    )
    if m.basis == "profiled window":
        out.append(
            "no unprofiled figures (no run manifest with the ranks' steps): every figure is "
            "the profiled window's, and its waits may be overstated: the profiler slows each "
            "rank's host by a different amount, so one rank falls behind and the others wait "
            f"for it in the collectives{waits}; {MEASURE_HINT}"
        )
        return out
    what = "steps without gradient sync" if m.own_spread_ms is not None else "steps"
    each = _each(m.ranks, "without_sync_ms" if m.own_spread_ms is not None else "step_ms")
    apart = (
        f"the profiled window's ranks are {_ms(m.profiled_spread_ms)} apart{waits} while the "
        f"unprofiled {what} are {_ms(m.unprofiled_spread_ms)} apart ({each})"
    )
    verdict = (
        "the trace's wait is the profiler's"
        if m.profilers_wait
        else "the trace's waits agree with the unprofiled steps"
    )
    if m.basis == "measured":
        cost = m.comm_cost or {}
        caveat = f" ({cost['caveat']})" if cost.get("caveat") else ""
        out.append(
            f"{apart}: {verdict}; the measured communication cost is {_ms(m.comm_ms)} "
            f"({m.comm_pct:.1f} % of the unprofiled {_ms(m.unprofiled_step_ms)} step; "
            f"{_each(m.ranks, 'cost_ms')}){caveat}"
            if m.comm_pct is not None
            else f"{apart}: {verdict}; the measured communication cost is {_ms(m.comm_ms)}"
        )
        return out
    cost = m.comm_cost or {}
    why = (
        f"the communication cost was not measured ({cost.get('status')}: {cost.get('reason')})"
        if cost
        else f"the communication cost was not measured ({MEASURE_HINT})"
    )
    words = (m.comm_source or "").split(" (")[0]
    words = COUNTED.get(words, f"the {words}")
    used = (
        f"; the verdict counts {words} ({_each_ms(m.comm_by_rank)} per step)"
        if m.profilers_wait
        else ""
    )
    out.append(f"{apart}: {verdict}{used}; {why}")
    return out


COLUMNS = (
    "unprofiled_step_ms", "with_sync_ms", "without_sync_ms", "comm_cost_ms", "comm_cost_pct",
)  # fmt: skip


def with_columns(per_rank: pd.DataFrame, m: Measured) -> pd.DataFrame:
    """``per_rank`` with each rank's unprofiled figures (:data:`COLUMNS`; NaN: unknown)."""
    attrs = ("step_ms", "with_sync_ms", "without_sync_ms", "cost_ms", "cost_pct")
    ranks = per_rank["rank"].tolist()
    cols = {
        col: _numeric([getattr(m.ranks.get(int(r)), attr, None) for r in ranks], per_rank.index)
        for col, attr in zip(COLUMNS, attrs, strict=True)
    }
    return with_added(per_rank, cols)


def _numeric(vals: list[Any], index: pd.Index) -> Any:
    """``pd.to_numeric(pd.Series(vals, dtype=object), errors="coerce")``: an array of
    floats where every value is a float or None (None: NaN), else pandas' own."""
    if vals and all(v is None or type(v) is float for v in vals):
        return np.asarray([math.nan if v is None else v for v in vals], dtype=np.float64)
    return pd.to_numeric(pd.Series(vals, index=index, dtype=object), errors="coerce")


def reconcile(
    manifest: Any, per_rank: pd.DataFrame, rank_steps: pd.DataFrame
) -> tuple[Measured, pd.DataFrame]:
    """:func:`measure`, and ``per_rank`` with its columns (:func:`with_columns`)."""
    m = measure(manifest, per_rank, rank_steps)
    return m, with_columns(per_rank, m)
