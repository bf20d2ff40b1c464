"""The measured search for the best configuration (pure: measurements in, steps out).

Levers do not add: SDPA on top of ``torch.compile`` can take away part of what inductor
fused, so a greedy union of the levers that gained alone can be slower than the best of
them. The search starts from the best single lever and adds the next one (in order of its
measured gain alone, the prediction breaking ties) only when the combination beats the
current best **in paired rounds against it**, by its interval; it stops when no lever is
left or the budget ends. The recommendation is the best configuration measured: never
slower than a single lever measured, since a step is kept only when its interval says it
is faster than the best so far.

Every figure is a *cost* ratio (lower is better): the step-time ratio for ``time``, the
step-time ratio over the tokens-per-step ratio for ``tokens-per-s``; the caller converts.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

BUDGET = "budget spent"  # a measurer's answer when no time is left for the step


@dataclass(frozen=True)
class Interval:
    """A paired ratio and its 90 % interval over ``rounds`` rounds (``lo``/``hi`` NaN: no
    interval, fewer than two rounds)."""

    ratio: float
    lo: float
    hi: float
    rounds: int

    @property
    def has_interval(self) -> bool:
        return self.rounds >= 2 and math.isfinite(self.lo) and math.isfinite(self.hi)

    @property
    def faster(self) -> bool:
        """The interval says lower than 1 (one round never says so)."""
        return self.has_interval and self.hi < 1.0

    @property
    def slower(self) -> bool:
        return self.has_interval and self.lo > 1.0

    def scaled(self, k: float) -> Interval:
        """The ratio and its interval times ``k`` (a tokens-per-step factor)."""
        return Interval(self.ratio * k, self.lo * k, self.hi * k, self.rounds)

    def chain(self, other: Interval) -> Interval:
        """``self × other`` (a ratio against the best so far, chained onto the best's ratio
        against the baseline): the log half-widths add in quadrature (two independent
        intervals); ``rounds`` is the fewer of the two. No interval if either has none."""
        ratio = self.ratio * other.ratio
        n = min(self.rounds, other.rounds)
        if not (self.has_interval and other.has_interval):
            return Interval(ratio, math.nan, math.nan, n)
        h = math.hypot(_log_half(self), _log_half(other))
        mid = math.log(ratio)
        return Interval(ratio, math.exp(mid - h), math.exp(mid + h), n)


def _log_half(iv: Interval) -> float:
    return (math.log(iv.hi) - math.log(iv.lo)) / 2


@dataclass(frozen=True)
class Candidate:
    """A lever measured alone: its cost ratio against the baseline, its predicted ratio
    (NaN: not modelled), its group (levers of one group are alternatives)."""

    lever: str
    alone: Interval
    predicted: float = math.nan
    group: str = ""


@dataclass(frozen=True)
class Step:
    """One step of the search: ``added`` tried on top of ``against`` (the best so far)."""

    added: str
    against: tuple[str, ...]
    vs_best: Interval | None  # the combination / the best so far (None: not measured)
    vs_baseline: Interval | None  # chained onto the best's ratio against the baseline
    kept: bool
    why: str

    @property
    def levers(self) -> tuple[str, ...]:
        return (*self.against, self.added)


@dataclass(frozen=True)
class Search:
    """The best configuration found, its ratio against the baseline, how it was found."""

    best: tuple[str, ...]  # () : the baseline stays
    ratio: Interval | None  # of ``best`` against the baseline (None: the baseline)
    order: tuple[str, ...]  # the levers that gained alone, in the order they were tried
    steps: tuple[Step, ...]
    interactions: tuple[str, ...]  # levers whose gain did not add on top of the best
    stopped: str


# (best so far, the combination to try) -> the combination's cost ratio against the best,
# or why it was not measured (BUDGET: no time left; anything else: it failed)
Measurer = Callable[[tuple[str, ...], tuple[str, ...]], "Interval | str"]


def order(cands: Sequence[Candidate]) -> list[Candidate]:
    """The levers whose interval says they gain alone, best first: by the measured ratio
    as shown (two decimals), then the predicted ratio (unmodelled last), then as given."""

    def key(ic: tuple[int, Candidate]) -> tuple[float, float, int]:
        i, c = ic
        pred = c.predicted if math.isfinite(c.predicted) else math.inf
        return (round(c.alone.ratio, 2), pred, i)

    gained = [(i, c) for i, c in enumerate(cands) if c.alone.faster]
    return [c for _, c in sorted(gained, key=key)]


def _fmt(iv: Interval) -> str:
    if not iv.has_interval:
        return f"×{iv.ratio:.2f} ({iv.rounds} round{'s' * (iv.rounds != 1)}, no interval)"
    return f"×{iv.ratio:.2f} [{iv.lo:.2f}–{iv.hi:.2f}, {iv.rounds} rounds]"


def interaction(c: Candidate, best: tuple[str, ...], vs_best: Interval) -> str:
    """One line naming a lever whose gain alone did not add on top of the best."""
    on = "+".join(best)
    head = f"{c.lever} on top of {on}: {_fmt(vs_best)} (alone {_fmt(c.alone)})"
    if vs_best.slower:
        return f"{head}: it undoes part of {on}'s gain"
    return f"{head}: its gain does not add"


def search(cands: Sequence[Candidate], measure: Measurer) -> Search:
    """The search (module doc). ``cands``: every lever measured alone (any order)."""
    ranked = order(cands)
    names = tuple(c.lever for c in ranked)
    if not ranked:
        return Search((), None, names, (), (), "no lever gained alone")
    best: tuple[str, ...] = (ranked[0].lever,)
    groups = {ranked[0].group} - {""}
    ratio = ranked[0].alone
    steps: list[Step] = []
    notes: list[str] = []
    stopped = "nothing more gains"
    for c in ranked[1:]:
        if c.group and c.group in groups:
            steps.append(Step(c.lever, best, None, None, False,
                              f"an alternative to a lever of the best ({c.group})"))  # fmt: skip
            continue
        got = measure(best, (*best, c.lever))
        if isinstance(got, str):
            if got == BUDGET:
                stopped = BUDGET
                break
            steps.append(Step(c.lever, best, None, None, False, f"not measured: {got}"))
            continue
        chained = ratio.chain(got)
        if got.faster:
            steps.append(Step(c.lever, best, got, chained, True, "faster than the best"))
            best, ratio = (*best, c.lever), chained
            groups |= {c.group} - {""}
            continue
        why = "slower than the best" if got.slower else "no measurable gain on the best"
        steps.append(Step(c.lever, best, got, chained, False, why))
        notes.append(interaction(c, best, got))
    return Search(best, ratio, names, tuple(steps), tuple(notes), stopped)
