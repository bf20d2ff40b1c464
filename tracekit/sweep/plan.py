"""Which configurations a sweep runs: one parameter at a time (axes) or the full grid.

A point may carry extra ``tracekit collect`` options (``Point.options``, e.g.
``("--checkpoint",)`` or ``("--optimizer", "adamw-fused")``): they are appended to its
command line and named in its key (``b8-s128-fp32-naive+optimizer=adamw-fused``), so a
caller (``tracekit advise``) can run the same configuration with each lever toggled as
rows of one sweep (``SweepPlan.explicit``).

``workload="generate"`` sweeps ``collect --workload generate``: ``seq`` is then the
context (prompt + ``new_tokens``), so the sequence axis is the KV cache's length.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from tracekit.errors import UsageError

DTYPES = ("fp32", "bf16", "fp16")
ATTENTIONS = ("naive", "sdpa")
DEVICES = ("cuda", "cpu")
PARALLELS = ("ddp", "fsdp")
# The columns that identify a configuration (a sweep table's rows differ in these only).
CONFIG_COLUMNS = ("batch", "seq", "dtype", "attention", "gpus")


def config_columns(table: Any) -> list[str]:
    """CONFIG_COLUMNS of ``table`` (a DataFrame); ``gpus`` only where some row ran on more
    than one GPU, so a one-GPU sweep's lines and names are what they always were."""
    cols = [c for c in CONFIG_COLUMNS if c in table.columns]
    if "gpus" in cols and not (table["gpus"].fillna(1) != 1).any():
        cols.remove("gpus")
    return cols


WORKLOADS = ("train", "generate")
# Options the runner sets from the point and the plan; a point's options may not repeat them.
RESERVED_OPTIONS = frozenset(
    {"--preset", "--device", "--batch", "--seq", "--dtype", "--attention", "--gpus",
     "--workload", "--prompt", "--new-tokens", "--block-size", "-o", "--out"}
)  # fmt: skip
_UNSAFE = re.compile(r"[^A-Za-z0-9._=+-]")


@dataclass(frozen=True, order=True)
class Point:
    """One configuration of the sweep."""

    batch: int  # per GPU
    seq: int
    dtype: str
    attention: str
    gpus: int = 1
    options: tuple[str, ...] = ()  # extra collect options, e.g. ("--grad-accum", "2")

    @property
    def key(self) -> str:
        key = f"b{self.batch}-s{self.seq}-{self.dtype}-{self.attention}"
        key = key if self.gpus == 1 else f"{key}-g{self.gpus}"
        return key + options_suffix(self.options)

    @property
    def tokens(self) -> int:
        """Tokens per step on one GPU (the whole step on ``gpus`` GPUs: x gpus)."""
        return self.batch * self.seq


def options_suffix(options: Sequence[str]) -> str:
    """``+name[=value]`` per option (``("--optimizer", "adamw-fused", "--checkpoint")`` ->
    ``+optimizer=adamw-fused+checkpoint``), safe as a folder name."""
    parts: list[str] = []
    for tok in options:
        if tok.startswith("-"):
            parts.append(tok.lstrip("-"))
        elif parts:
            parts[-1] += f"={tok}"
        else:
            raise UsageError(f"sweep point options must start with an option, got {tok!r}")
    return "".join("+" + _UNSAFE.sub("_", p) for p in parts)


def check_options(options: Sequence[str]) -> None:
    """A point's options may not set what the runner sets from the point itself."""
    options_suffix(options)
    clash = sorted({o.split("=")[0] for o in options if o.startswith("-")} & RESERVED_OPTIONS)
    if clash:
        raise UsageError(
            f"sweep point options {', '.join(clash)}: set by the sweep itself "
            "(vary batch, seq, dtype and attention as the point's fields)"
        )


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


def fit_contexts(
    given: list[int] | None, default: list[int], base: int | None, base_default: int, block: int
) -> tuple[list[int], int]:
    """The sequence axis and the base seq: the values given, as given (one past the model's
    context ``block`` becomes that configuration's error row, as any collect that refuses
    its options); the defaults (made for gpt2-small's 1,024) only where they fit, else the
    block itself."""
    seqs = given or ([s for s in default if s <= block] or [block])
    return seqs, base or min(base_default, max(seqs))


@dataclass(frozen=True)
class SweepPlan:
    """Everything that decides what a sweep runs and how each configuration is collected."""

    batches: tuple[int, ...] = (4, 8, 16, 32)
    seqs: tuple[int, ...] = (64, 128, 256, 512, 1024)
    dtypes: tuple[str, ...] = ("fp32", "bf16")
    attentions: tuple[str, ...] = ("naive", "sdpa")
    gpus: tuple[int, ...] = (1,)  # > 1: collect --gpus N --parallel <parallel>
    parallel: str = "ddp"
    preset: str = "gpt2-small"
    device: str = "cuda"
    grid: bool = False
    base_batch: int = 8
    base_seq: int = 128
    layers: int | None = None
    block_size: int | None = None  # collect --block-size: contexts past the preset's
    steps: int = 10  # timed, unprofiled steps per configuration
    warmup: int = 3
    profile_wait: int = 0
    profile_warmup: int = 1
    profile_active: int = 1
    timeout_s: float = 300.0
    with_stack: bool = True
    collect_args: tuple[str, ...] = field(default_factory=tuple)  # passed on verbatim
    workload: str = "train"  # "generate": collect --workload generate, seq = context
    new_tokens: int = 64  # generate: decode steps; the prompt is seq - new_tokens
    explicit: tuple[Point, ...] = ()  # when given: exactly these points, in this order

    def __post_init__(self) -> None:
        if self.device not in DEVICES:
            raise UsageError(f"--device must be one of {', '.join(DEVICES)}, got {self.device!r}")
        for d in self.dtypes:
            if d not in DTYPES:
                raise UsageError(f"--dtype: {d!r} is not one of {', '.join(DTYPES)}")
        for a in self.attentions:
            if a not in ATTENTIONS:
                raise UsageError(f"--attention: {a!r} is not one of {', '.join(ATTENTIONS)}")
        if self.parallel not in PARALLELS:
            raise UsageError(f"--parallel must be one of {', '.join(PARALLELS)}")
        if not self.gpus or any(
            isinstance(g, bool) or not isinstance(g, int) or g < 1 for g in self.gpus
        ):
            raise UsageError(f"--gpus: give GPU counts >= 1, got {self.gpus!r}")
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
        if self.block_size is not None and (
            isinstance(self.block_size, bool)
            or not isinstance(self.block_size, int)
            or self.block_size < 1
        ):
            raise UsageError(f"--block-size must be an integer >= 1, got {self.block_size!r}")
        if not self.timeout_s > 0:
            raise UsageError(f"--timeout must be > 0 seconds, got {self.timeout_s}")
        if self.workload not in WORKLOADS:
            raise UsageError(
                f"--workload must be one of {', '.join(WORKLOADS)}, got {self.workload!r}"
            )
        if (
            isinstance(self.new_tokens, bool)
            or not isinstance(self.new_tokens, int)
            or (self.new_tokens < 1)
        ):
            raise UsageError(f"--new-tokens must be an integer >= 1, got {self.new_tokens!r}")
        if self.workload == "generate":
            short = [s for s in {p.seq for p in self.points()} if s <= self.new_tokens]
            if short:
                raise UsageError(
                    f"--seq {min(short)}: a generate sweep's seq is the context (prompt + "
                    f"--new-tokens {self.new_tokens}); each must exceed {self.new_tokens}"
                )
        for p in self.explicit:
            check_options(p.options)

    @property
    def base(self) -> Point:
        return Point(
            self.base_batch, self.base_seq, self.dtypes[0], self.attentions[0], self.gpus[0]
        )

    def points(self) -> list[Point]:
        """Axes: the base, then each parameter varied alone around it; the sequence axis
        runs once per attention (at the base dtype) so naive and SDPA can be compared; the
        GPU counts last, at the base. Grid: the full product. ``explicit``: those points."""
        if self.explicit:
            seen_keys: set[str] = set()
            return [p for p in self.explicit if not (p.key in seen_keys or seen_keys.add(p.key))]  # type: ignore[func-returns-value]
        if self.grid:
            return [
                Point(b, s, d, a, g)
                for g, d, a, b, s in itertools.product(
                    self.gpus, self.dtypes, self.attentions, self.batches, self.seqs
                )
            ]
        base = self.base
        g = base.gpus
        pts = [base]
        pts += [Point(b, base.seq, base.dtype, base.attention, g) for b in self.batches]
        pts += [Point(base.batch, s, base.dtype, a, g) for a in self.attentions for s in self.seqs]
        pts += [Point(base.batch, base.seq, d, base.attention, g) for d in self.dtypes]
        pts += [Point(base.batch, base.seq, base.dtype, a, g) for a in self.attentions]
        pts += [Point(base.batch, base.seq, base.dtype, base.attention, n) for n in self.gpus]
        seen: set[Point] = set()
        return [p for p in pts if not (p in seen or seen.add(p))]  # type: ignore[func-returns-value]

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["mode"] = "grid" if self.grid else "axes"
        d["points"] = [p.key for p in self.points()]
        return d
