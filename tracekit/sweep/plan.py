"""Which configurations a sweep runs: one parameter at a time (axes) or the full grid."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from tracekit.errors import UsageError

DTYPES = ("fp32", "bf16", "fp16")
ATTENTIONS = ("naive", "sdpa")
DEVICES = ("cuda", "cpu")


@dataclass(frozen=True, order=True)
class Point:
    """One configuration of the sweep."""

    batch: int
    seq: int
    dtype: str
    attention: str

    @property
    def key(self) -> str:
        return f"b{self.batch}-s{self.seq}-{self.dtype}-{self.attention}"

    @property
    def tokens(self) -> int:
        return self.batch * self.seq


def parse_int_list(text: str, name: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            v = int(part)
        except ValueError:
            raise UsageError(f"--{name}: {part!r} is not an integer") from None
        if v < 1:
            raise UsageError(f"--{name}: values must be >= 1, got {v}")
        if v not in out:
            out.append(v)
    if not out:
        raise UsageError(f"--{name}: give at least one value")
    return out


def parse_choice_list(text: str, name: str, choices: Sequence[str]) -> list[str]:
    out: list[str] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if part not in choices:
            raise UsageError(f"--{name}: {part!r} is not one of {', '.join(choices)}")
        if part not in out:
            out.append(part)
    if not out:
        raise UsageError(f"--{name}: give at least one value")
    return out


@dataclass(frozen=True)
class SweepPlan:
    """Everything that decides what a sweep runs and how each configuration is collected."""

    batches: tuple[int, ...] = (4, 8, 16, 32)
    seqs: tuple[int, ...] = (64, 128, 256, 512, 1024)
    dtypes: tuple[str, ...] = ("fp32", "bf16")
    attentions: tuple[str, ...] = ("naive", "sdpa")
    preset: str = "gpt2-small"
    device: str = "cuda"
    grid: bool = False
    base_batch: int = 8
    base_seq: int = 128
    layers: int | None = None
    steps: int = 10  # timed, unprofiled steps per configuration
    warmup: int = 3
    profile_wait: int = 0
    profile_warmup: int = 1
    profile_active: int = 1
    timeout_s: float = 300.0
    with_stack: bool = True
    collect_args: tuple[str, ...] = field(default_factory=tuple)  # passed on verbatim

    def __post_init__(self) -> None:
        if self.device not in DEVICES:
            raise UsageError(f"--device must be one of {', '.join(DEVICES)}, got {self.device!r}")
        for d in self.dtypes:
            if d not in DTYPES:
                raise UsageError(f"--dtype: {d!r} is not one of {', '.join(DTYPES)}")
        for a in self.attentions:
            if a not in ATTENTIONS:
                raise UsageError(f"--attention: {a!r} is not one of {', '.join(ATTENTIONS)}")
        if not (self.batches and self.seqs and self.dtypes and self.attentions):
            raise UsageError("every sweep axis needs at least one value")
        for name, v, low in (
            ("steps", self.steps, 1),
            ("warmup", self.warmup, 0),
            ("base-batch", self.base_batch, 1),
            ("base-seq", self.base_seq, 1),
            ("profile-active", self.profile_active, 1),
        ):
            if isinstance(v, bool) or not isinstance(v, int) or v < low:
                raise UsageError(f"--{name} must be an integer >= {low}, got {v!r}")
        if not self.timeout_s > 0:
            raise UsageError(f"--timeout must be > 0 seconds, got {self.timeout_s}")

    @property
    def base(self) -> Point:
        return Point(self.base_batch, self.base_seq, self.dtypes[0], self.attentions[0])

    def points(self) -> list[Point]:
        """Axes: the base, then each parameter varied alone around it; the sequence axis
        runs once per attention (at the base dtype) so naive and SDPA can be compared.
        Grid: the full product."""
        if self.grid:
            return [
                Point(b, s, d, a)
                for d, a, b, s in itertools.product(
                    self.dtypes, self.attentions, self.batches, self.seqs
                )
            ]
        base = self.base
        pts = [base]
        pts += [Point(b, base.seq, base.dtype, base.attention) for b in self.batches]
        pts += [Point(base.batch, s, base.dtype, a) for a in self.attentions for s in self.seqs]
        pts += [Point(base.batch, base.seq, d, base.attention) for d in self.dtypes]
        pts += [Point(base.batch, base.seq, base.dtype, a) for a in self.attentions]
        seen: set[Point] = set()
        return [p for p in pts if not (p in seen or seen.add(p))]  # type: ignore[func-returns-value]

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["mode"] = "grid" if self.grid else "axes"
        d["points"] = [p.key for p in self.points()]
        return d
