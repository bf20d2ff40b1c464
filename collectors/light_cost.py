"""What the light timeline pass costs the step, measured in interleaved windows.

The host's speed drifts by up to 1.6x between seconds, so the light pass's steps against
the unprofiled steps timed a second earlier mix the pass's cost with that drift. This pass
runs ``rounds`` rounds of two windows, each of ``settle`` untimed steps then ``window``
timed ones: one unprofiled, one with the light pass's recorder on (CUPTI kernels-only
where it ran, else Kineto's CUDA-only profiler), the order alternated every round (U L,
L U, ...). The device is synchronised at each window's ends and the recorder switched
there, between the steps' timing marks, so neither window carries the switch or the
other's queued work. Each round gives the ratio of its light window's timed steps to its
unprofiled one's; the pass's cost is the median of those ratios (with their interquartile
range): the paired estimate that drift between rounds cannot bias. The records made in
the light windows are dropped.

:class:`CostRounds` is the schedule (``--light-cost-rounds``; 0: not measured),
:class:`CostPass` the profiler-shaped pass (``with``, :meth:`~CostPass.step`) that collect's
``profiled_steps`` and ``tracekit run``'s windows drive, and :func:`light_cost` the
manifest's ``metrics.timeline_cost`` from the step times.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol

import torch

from tracekit.collectors.cupti_pass import (
    CUPTI_RECORDER,
    KINETO_RECORDER,
    CuptiUnavailable,
    KernelRecorder,
    load_cupti,
    requested_recorder,
)
from tracekit.collectors.observer import settle
from tracekit.collectors.passes import light_experimental_kwargs, profiled_steps
from tracekit.collectors.profiler import Profiler, ProfilerConfig, TorchProfile
from tracekit.collectors.train import percentile
from tracekit.errors import UsageError

UNPROFILED, LIGHT = "unprofiled", "light"
# metrics.timeline_overhead_basis: where timeline_overhead_pct comes from
INTERLEAVED = "interleaved rounds (metrics.timeline_cost)"
APART = "the light pass's steps against the timed steps, run apart"
METHOD = (
    "interleaved windows: each round one unprofiled window and one under the light pass's "
    "recorder, the order alternated every round, the device synchronised and the recorder "
    "switched between the windows; ratio = median over rounds of light / unprofiled"
)


@dataclasses.dataclass(frozen=True)
class CostRounds:
    """``rounds`` rounds of two windows (0 rounds: not measured), each ``settle`` untimed
    steps then ``window`` timed ones: the light pass records its steps after a wait and a
    warm-up step with CUPTI already on (the first steps after CUPTI is enabled run slower,
    +10 to +30 % over 3 steps on an H100), so each window's timed steps follow as many."""

    rounds: int = 6
    window: int = 3
    settle: int = 2

    def __post_init__(self) -> None:
        if self.rounds < 0 or self.rounds == 1:
            raise UsageError(
                f"--light-cost-rounds must be 0 (off) or at least 2, got {self.rounds}"
            )
        if self.window < 1 or self.settle < 0:
            raise UsageError(
                f"light-cost windows need >= 1 timed and >= 0 settling steps, got {self.window}"
                f" and {self.settle}"
            )

    @property
    def span(self) -> int:
        """Steps per window."""
        return self.settle + self.window

    @property
    def steps(self) -> int:
        return 2 * self.rounds * self.span

    def plan(self) -> list[str]:
        """Each step's window kind, in order (round r: unprofiled first when r is even)."""
        out: list[str] = []
        for r in range(self.rounds):
            pair = (UNPROFILED, LIGHT) if r % 2 == 0 else (LIGHT, UNPROFILED)
            for kind in pair:
                out += [kind] * self.span
        return out

    def timed(self) -> list[bool]:
        """Whether each step counts (a window's settling steps do not)."""
        return [i % self.span >= self.settle for i in range(self.steps)]

    def config(self) -> ProfilerConfig:
        """A schedule whose every step is recorded (so the drivers time them all)."""
        return ProfilerConfig(wait=0, warmup=0, active=max(self.steps, 1), repeat=1,
                              record_shapes=False, profile_memory=False, with_flops=False,
                              memory_timeline=False)  # fmt: skip


class Switch(Protocol):
    """The light pass's recorder, switched on and off between windows."""

    def on(self) -> None: ...
    def off(self) -> None: ...


class CuptiSwitch:
    """CUPTI's kernels, memcpy and memset records (the light pass's recorder); the
    records are dropped as CUPTI hands them over."""

    def __init__(self, cupti: Any) -> None:
        self.recorder = KernelRecorder(cupti, keep=False)

    def on(self) -> None:
        self.recorder.start()

    def off(self) -> None:
        self.recorder.stop()


class KinetoSwitch:
    """Kineto's CUDA-only profiler (the fallback light pass), started and stopped."""

    def __init__(self) -> None:
        self._prof: torch.profiler.profile | None = None

    def activities(self) -> list[torch.profiler.ProfilerActivity]:
        return [torch.profiler.ProfilerActivity.CUDA]  # as the light pass's

    def on(self) -> None:
        kw = light_experimental_kwargs()
        cfg = torch._C._profiler._ExperimentalConfig(**kw) if kw else None
        self._prof = TorchProfile(activities=self.activities(), experimental_config=cfg)
        self._prof.__enter__()

    def off(self) -> None:
        if self._prof is not None:
            prof, self._prof = self._prof, None
            prof.__exit__(None, None, None)
            settle(torch.device("cuda"))  # Kineto's teardown done before the next window


def make_switch(recorder: str | None) -> tuple[Switch, str]:
    """The switch for the light pass's ``recorder`` (CUPTI where it ran and still loads)."""
    if recorder != KINETO_RECORDER and requested_recorder() == "auto":
        try:
            return CuptiSwitch(load_cupti()), CUPTI_RECORDER
        except CuptiUnavailable:
            pass
    return KinetoSwitch(), KINETO_RECORDER


class CostPass(Profiler):
    """:class:`CostRounds` run as a profiler: enter before the first step, :meth:`step`
    after each; switches the recorder at every window boundary."""

    def __init__(self, rounds: CostRounds, out_dir: Path, *, device: torch.device,
                 recorder: str | None, switch: Switch | None = None) -> None:  # fmt: skip
        super().__init__(rounds.config(), out_dir, device=device)
        self.rounds = rounds
        self.kinds = rounds.plan()
        if switch is None:
            switch, recorder = make_switch(recorder)
        self.switch, self.recorder = switch, recorder
        self.notes: list[str] = []
        self._i = 0
        self._on = False

    def __enter__(self) -> CostPass:
        self._i = 0
        self._sync()
        self._set(0)
        return self

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def _set(self, i: int) -> None:
        """Step ``i`` begins: switch the recorder if its window's kind differs."""
        want = i < len(self.kinds) and self.kinds[i] == LIGHT
        if want == self._on:
            return
        try:
            self.switch.on() if want else self.switch.off()
            self._on = want
        except Exception as e:  # CUPTI refused mid-run: the figure is then not measured
            self.notes.append(f"the recorder could not be switched {'on' if want else 'off'}: "
                              f"{type(e).__name__}: {e}")  # fmt: skip
            self._on = False

    def step(self) -> None:
        self._i += 1
        if self._i % self.rounds.span == 0 and self._i < len(self.kinds):
            self._sync()  # every window starts with an idle device, whatever its kind
            self._set(self._i)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._on:
            self._on = False
            try:
                self.switch.off()
            except Exception as e:
                self.notes.append(f"the recorder could not be switched off: {e}")

    def artifacts(self) -> dict[str, Any]:
        return {}


def light_cost(
    ms: list[float], rounds: CostRounds, recorder: str | None, notes: list[str] | None = None
) -> dict[str, Any] | None:
    """The manifest's ``metrics.timeline_cost`` from each step's time in plan order (None:
    no rounds ran, or the recorder failed)."""
    kinds = rounds.plan()
    if notes or len(ms) != len(kinds) or rounds.rounds < 2:
        return None
    span, w = rounds.span, rounds.window
    timed = rounds.timed()
    per_window = [
        (
            kinds[i],
            sum(t for t, on in zip(ms[i : i + span], timed[i : i + span], strict=True) if on) / w,
        )
        for i in range(0, len(ms), span)
    ]
    ratios: list[float] = []
    unprof: list[float] = []
    light: list[float] = []
    for a, b in zip(per_window[::2], per_window[1::2], strict=True):
        (_, u), (_, li) = (a, b) if a[0] == UNPROFILED else (b, a)
        unprof.append(u)
        light.append(li)
        ratios.append(li / u if u > 0 else float("nan"))
    ok = [x for x in ratios if x == x]
    if not ok:
        return None
    ratio = statistics.median(ok)
    return {
        "ratio": ratio,
        "iqr": [percentile(ok, 25), percentile(ok, 75)],
        "pct": (ratio - 1.0) * 100,
        "rounds": rounds.rounds,
        "window_steps": w,
        "settle_steps": rounds.settle,
        "recorder": recorder,
        "round_ratios": ratios,
        "unprofiled_ms": unprof,
        "light_ms": light,
        "method": METHOD,
    }


def worst_cost(per_rank: list[Any]) -> dict[str, Any] | None:
    """Across ranks' metrics: the ``timeline_cost`` of the rank whose rounds put the light
    pass's cost highest, with its ``rank`` (None unless every rank measured one)."""
    costs = [m.get("timeline_cost") for m in per_rank]
    if not costs or not all(isinstance(c, dict) for c in costs):
        return None
    worst = max(range(len(costs)), key=lambda i: float(costs[i]["ratio"]))  # type: ignore[index]
    return {**costs[worst], "rank": worst}  # type: ignore[dict-item]


def overhead(cost: dict[str, Any] | None, light_ms: float | None, base_ms: float) -> dict[str, Any]:
    """``timeline_overhead_pct``, ``timeline_overhead_basis`` and ``timeline_cost``: the
    interleaved rounds' figure where ``cost`` holds one, else the light pass's median step
    ``light_ms`` against the unprofiled ``base_ms`` (all None without a light step)."""
    if light_ms is None:
        return {"timeline_overhead_pct": None, "timeline_overhead_basis": None,
                "timeline_cost": cost}  # fmt: skip
    if cost:
        return {"timeline_overhead_pct": cost["pct"], "timeline_overhead_basis": INTERLEAVED,
                "timeline_cost": cost}  # fmt: skip
    return {"timeline_overhead_pct": (float(light_ms) / base_ms - 1.0) * 100,
            "timeline_overhead_basis": APART, "timeline_cost": None}  # fmt: skip


def cost_text(cost: dict[str, Any]) -> str:
    """One line: ``x1.031 (IQR 1.012-1.048), 6 interleaved rounds of 3 + 3 timed steps``."""
    lo, hi = cost["iqr"]
    return (
        f"x{cost['ratio']:.3f} (IQR {lo:.3f}-{hi:.3f}), {cost['rounds']} interleaved rounds "
        f"of {cost['window_steps']} + {cost['window_steps']} timed steps"
    )


def measure(
    step: Callable[[int], torch.Tensor], pcfg: ProfilerConfig, device: torch.device,
    out_dir: Path, start: int, recorder: str | None, on_step: Callable[[], None] | None = None,
) -> tuple[int, dict[str, Any] | None]:  # fmt: skip
    """Run ``pcfg.light_cost_rounds`` rounds from global step ``start`` (collect's schedule,
    after the light pass): the steps run and ``metrics.timeline_cost`` (None: 0 rounds, or
    the recorder could not be switched)."""
    rounds = CostRounds(pcfg.light_cost_rounds)
    if rounds.rounds == 0:
        return 0, None
    cost = CostPass(rounds, out_dir, device=device, recorder=recorder)
    ms = profiled_steps(step, cost, start, on_step)
    return rounds.steps, light_cost(ms, rounds, cost.recorder, cost.notes)
