"""The statistics of paired timing (no torch): a ratio's 90 % interval over rounds.

Each round times the baseline and the other configuration back to back, so the host's
drift (which moves a step by up to 1.6x between seconds) is shared by both and cancels in
the round's ratio. The rounds' log ratios give a Student-t interval: exponentiated, it is
an interval for the geometric mean ratio that holds for the skewed, positive ratios of
step times.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

LEVEL = 0.90  # two-sided
# Student's t, 0.95 quantile, df = 1..30 (any statistics table); 1.645 beyond (normal)
_T95 = (6.314, 2.920, 2.353, 2.132, 2.015, 1.943, 1.895, 1.860, 1.833, 1.812,
        1.796, 1.782, 1.771, 1.761, 1.753, 1.746, 1.740, 1.734, 1.729, 1.725,
        1.721, 1.717, 1.714, 1.711, 1.708, 1.706, 1.703, 1.701, 1.699, 1.697)  # fmt: skip


def t95(df: int) -> float:
    """The 0.95 quantile of Student's t with ``df`` degrees of freedom."""
    if df < 1:
        return math.inf
    return _T95[df - 1] if df <= len(_T95) else 1.645


@dataclass(frozen=True)
class RatioInterval:
    """A ratio (other / baseline) over paired rounds with its 90 % interval."""

    ratio: float  # geometric mean of the rounds' ratios
    lo: float
    hi: float
    median: float  # median of the rounds' ratios
    rounds: int

    @property
    def half_width(self) -> float:
        """Half the interval's width relative to the ratio (0.05: +-5 %)."""
        return (self.hi - self.lo) / 2 / self.ratio if self.ratio > 0 else math.inf

    @property
    def effect(self) -> str:
        """'faster' or 'slower' when the interval excludes 1, else no measurable
        difference."""
        if self.hi < 1.0:
            return "faster"
        if self.lo > 1.0:
            return "slower"
        return "no measurable difference"

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "half_width": self.half_width, "effect": self.effect}


def ratio_interval(ratios: Sequence[float]) -> RatioInterval:
    """The 90 % interval of the geometric mean of ``ratios`` (positive, finite ones)."""
    logs = [math.log(r) for r in ratios if r > 0 and math.isfinite(r)]
    n = len(logs)
    if n == 0:
        nan = math.nan
        return RatioInterval(nan, nan, nan, nan, 0)
    mean = sum(logs) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / (n - 1)) if n > 1 else math.inf
    h = t95(n - 1) * sd / math.sqrt(n) if n > 1 else math.inf
    med = sorted(logs)[n // 2] if n % 2 else (sorted(logs)[n // 2 - 1] + sorted(logs)[n // 2]) / 2
    return RatioInterval(math.exp(mean), math.exp(mean - h), math.exp(mean + h), math.exp(med), n)


def settled(iv: RatioInterval, min_rounds: int, half_width: float) -> bool:
    """Whether enough rounds were run: at least ``min_rounds`` and the interval within
    +-``half_width`` of the ratio."""
    return iv.rounds >= min_rounds and iv.half_width <= half_width
