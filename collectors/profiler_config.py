"""``ProfilerConfig``: the profiler's schedule and options, validated without importing
torch (``tracekit collect`` checks its flags before the ~5 s of torch's import)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tracekit.errors import UsageError


@dataclass(frozen=True)
class ProfilerConfig:
    """Schedule and options of ``torch.profiler.profile``.

    Each cycle skips ``wait`` steps, runs ``warmup`` steps with the profiler on but
    discarding results, then records ``active`` steps; ``repeat`` cycles in all.
    """

    wait: int = 1
    warmup: int = 1
    active: int = 2
    repeat: int = 1
    record_shapes: bool = True
    profile_memory: bool = True
    with_flops: bool = True
    with_stack: bool = False
    with_modules: bool = False
    memory_timeline: bool = True  # per category: from this window, else one more step
    timeline_pass: bool = True  # a light CUDA-only pass first (collectors/passes.py)
    # the light pass's cost: rounds of interleaved windows after it (collectors/light_cost.py)
    light_cost_rounds: int = 6

    def __post_init__(self) -> None:
        for name, low in (("wait", 0), ("warmup", 0), ("active", 1), ("repeat", 1),
                          ("light_cost_rounds", 0)):  # fmt: skip
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < low:
                raise UsageError(f"profiler {name} must be an integer >= {low}, got {v!r}")
        if self.light_cost_rounds == 1:
            raise UsageError("--light-cost-rounds must be 0 (off) or at least 2 (one round "
                             "pairs nothing against drift), got 1")  # fmt: skip
        for f in dataclasses.fields(self):
            if f.type in ("bool", bool) and not isinstance(getattr(self, f.name), bool):
                raise UsageError(f"profiler option {f.name} must be true or false")

    @property
    def cycle(self) -> int:
        return self.wait + self.warmup + self.active

    @property
    def steps(self) -> int:
        """Steps to run so that every cycle completes (and its trace is written)."""
        return self.cycle * self.repeat

    def is_active(self, step: int) -> bool:
        """Whether 0-based ``step`` is recorded."""
        return 0 <= step < self.steps and step % self.cycle >= self.wait + self.warmup

    def memory_timeline_absent_reason(self) -> str | None:
        """Why the memory timeline cannot be exported with these options (None: it can)."""
        if not self.memory_timeline:
            return "disabled (memory_timeline=False)"
        # torch.profiler.profile._memory_profile() raises unless all three are on
        # (torch 2.1 - 2.13).
        needed = ("record_shapes", "profile_memory", "with_stack")
        missing = [n for n in needed if not getattr(self, n)]
        if missing:
            return (
                "torch's export_memory_timeline needs record_shapes, profile_memory and "
                f"with_stack; off here: {', '.join(missing)} (collect with --with-stack)"
            )
        return None

    def torch_kwargs(self) -> dict[str, bool]:
        """The option keywords for ``torch.profiler.profile``."""
        return {
            "record_shapes": self.record_shapes,
            "profile_memory": self.profile_memory,
            "with_flops": self.with_flops,
            "with_stack": self.with_stack,
            "with_modules": self.with_modules,
        }

    def schedule(self) -> Callable[[int], Any]:
        import torch

        return torch.profiler.schedule(
            wait=self.wait, warmup=self.warmup, active=self.active, repeat=self.repeat
        )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
