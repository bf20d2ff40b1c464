"""Leave nothing behind: the profilers' teardown, the check that the process runs after the
passes as it did before them, and the residual those steps show.

Every verdict tracekit gives rests on the step measured without the profiler, so that step
must be the one the script runs alone. Three things can outlive a pass in the user's
process:

* **CUPTI.** Kineto leaves CUPTI attached after a session unless ``TEARDOWN_CUPTI=1`` is in
  the environment when it stops (it then calls ``cuptiFinalize``; libkineto reads the
  variable at each stop, pytorch/pytorch#144455, #146604). Attached, it slowed a host-bound
  step by x1.23 (x1.12-x1.35) on an H200 (``benchmarks/cupti_teardown.py``). tracekit sets
  it before the first pass unless it is already set. Torch itself sets it to ``0`` where
  CUDA graphs meet CUDA < 12.6 (a re-init after teardown crashed there); tracekit does the
  same for its own CUDA-graph options and says so.
* **Hooks and recorders**: tracekit's optimizer and module hooks, the memory history.
  :func:`state` counts what it can see; :func:`left_behind` names the difference.
* **What nothing can see**: measured. After the passes a window of unprofiled steps is
  timed again and compared with the steps timed before any pass (:func:`residual`).

Only :func:`state` and :func:`settle` import torch (lazily): the rest is plain data.
"""

from __future__ import annotations

import math
import os
import random
import statistics
from collections.abc import MutableMapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

TEARDOWN_ENV = "TEARDOWN_CUPTI"
RESIDUAL_STEPS = 10  # unprofiled steps timed after the passes, where the loop runs on
RESIDUAL_WARN = 0.03  # a residual beyond +3 % is warned about
MIN_STEPS = 3  # steps a window needs for a residual
_BOOT = 2000  # bootstrap resamples of the ratio of medians
BLOCK = 5  # steps per level when the residual window is cut to measure the drift
MIN_WINDOWS = 3  # other windows (seconds apart) the drift between windows needs
_Z90 = 1.6449  # two-sided 90 % normal quantile
_GRAPHS_SAFE = (12, 6)  # CUDA from which teardown with CUDA graphs is safe (torch's rule)


@dataclass(frozen=True)
class Teardown:
    """Whether Kineto detaches CUPTI after each pass, and why."""

    enabled: bool
    set_by: str  # "tracekit" | "environment" | "tracekit (CUDA graphs)"
    why: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _version(text: str | None) -> tuple[int, int] | None:
    try:
        major, minor = (text or "").split(".")[:2]
        return int(major), int(minor)
    except ValueError:
        return None


def arrange_teardown(
    cuda_version: str | None,
    graphs: bool,
    env: MutableMapping[str, str] | None = None,
) -> Teardown:
    """Set ``TEARDOWN_CUPTI`` for the passes to come (in ``env``, the process's by default),
    unless it is set already; keep it off where CUDA graphs run on CUDA < 12.6."""
    env = os.environ if env is None else env
    given = env.get(TEARDOWN_ENV)
    if given is not None:
        on = given == "1"
        return Teardown(on, "environment", f"{TEARDOWN_ENV}={given} was set before tracekit ran"
                        + ("" if on else ": CUPTI stays attached after each pass"))  # fmt: skip
    v = _version(cuda_version)
    if graphs and (v is None or v < _GRAPHS_SAFE):
        env[TEARDOWN_ENV] = "0"
        return Teardown(False, "tracekit (CUDA graphs)", f"CUDA graphs on CUDA {cuda_version}: "
                        "a CUPTI re-init after teardown crashes before CUDA 12.6, so CUPTI stays "
                        "attached after each pass (torch keeps it so too)")  # fmt: skip
    env[TEARDOWN_ENV] = "1"
    return Teardown(True, "tracekit", f"{TEARDOWN_ENV}=1: Kineto detaches CUPTI "
                    "(cuptiFinalize) when each pass stops")  # fmt: skip


def teardown_now(env: MutableMapping[str, str] | None = None) -> str | None:
    """Why CUPTI stays attached now (the variable was changed during the run, e.g. by
    ``torch.compile``'s CUDA graphs), or None."""
    value = (os.environ if env is None else env).get(TEARDOWN_ENV)
    if value == "1":
        return None
    return f"{TEARDOWN_ENV}={value} at the end of the run: CUPTI stayed attached after the passes"


def settle(device: Any) -> None:
    """After a Kineto pass stopped: one CUDA runtime call, at whose exit Kineto's deferred
    teardown completes, so the next pass cannot start while it is pending (a pass started
    then recorded no GPU activity on an H200, ``benchmarks/cupti_teardown.py``)."""
    if getattr(device, "type", None) == "cuda":
        import torch

        if torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
            torch.cuda.synchronize(device)


def state(model: Any = None) -> dict[str, Any]:
    """What tracekit could leave switched on in this process, as counts and flags."""
    import torch
    from torch.optim import optimizer as optim

    out: dict[str, Any] = {
        "profiler_enabled": bool(torch.autograd.profiler._is_profiler_enabled),
        "optimizer_hooks": len(optim._global_optimizer_pre_hooks)
        + len(optim._global_optimizer_post_hooks),
    }
    if model is not None:
        out["model_hooks"] = sum(
            len(getattr(model, name, {}))
            for name in ("_forward_pre_hooks", "_forward_hooks", "_backward_hooks")
        )
    return out


def left_behind(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """Each thing switched on after the passes that was off before them, in words."""
    out = []
    for key, now in after.items():
        was = before.get(key)
        if was is None or now == was:
            continue
        if isinstance(now, bool):
            if now:
                out.append(f"{key.replace('_', ' ')}")
        elif isinstance(now, int) and isinstance(was, int) and now > was:
            out.append(f"{now - was} more {key.replace('_', ' ')}")
    return out


def after_passes(before: dict[str, Any], model: Any, device: Any) -> dict[str, Any]:
    """The manifest's ``observer`` entries once every pass has stopped: the state then, what
    differs from ``before`` and, on CUDA, whether CUPTI stayed attached."""
    after = state(model)
    seen: dict[str, Any] = {"state_before": before, "state_after": after,
                            "left_behind": left_behind(before, after)}  # fmt: skip
    if getattr(device, "type", None) == "cuda":
        seen["cupti_attached"] = teardown_now()
    return seen


@dataclass(frozen=True)
class Drift:
    """How far apart windows of unprofiled steps run when nothing differs between them but
    the moment: the spread of the levels (each window's mean step) of the windows timed
    after the passes: the residual check in blocks of :data:`BLOCK` steps and, where they
    ran, the light pass's cost rounds' unprofiled windows, seconds apart."""

    sigma: float  # robust SD of the windows' log levels (1.4826 x MAD)
    windows: int

    @property
    def pct(self) -> float:
        return self.sigma * 100


def drift(after: Sequence[float], windows: Sequence[float] = ()) -> Drift | None:
    """The drift between windows timed after the passes: ``after`` cut into blocks of
    :data:`BLOCK` steps, with ``windows`` (other unprofiled windows' mean steps); None
    with fewer than :data:`MIN_WINDOWS` of those: consecutive blocks of one window show
    the steps' jitter, not the drift over seconds."""
    others = [float(x) for x in windows if x > 0]
    if len(others) < MIN_WINDOWS:
        return None
    levels = drift_levels(after) + others
    logs = [math.log(x) for x in levels]
    mid = statistics.median(logs)
    mad = statistics.median(abs(x - mid) for x in logs)
    return Drift(1.4826 * mad, len(levels))


def drift_levels(after: Sequence[float]) -> list[float]:
    """The mean step of each whole block of :data:`BLOCK` steps of ``after``."""
    a = [float(x) for x in after if x > 0]
    return [statistics.fmean(a[i : i + BLOCK]) for i in range(0, len(a) - BLOCK + 1, BLOCK)]


@dataclass(frozen=True)
class Residual:
    """The steps timed after the passes against those timed before any pass."""

    before_ms: float  # median
    after_ms: float
    ratio: float  # after / before
    lo: float  # 90 % interval of the ratio: the wider of the steps' and the drift's
    hi: float
    n_before: int
    n_after: int
    before_steps: tuple[int, int] | None = None
    after_steps: tuple[int, int] | None = None
    drift_pct: float | None = None  # the drift between windows (Drift.pct), None: unknown
    drift_windows: int = 0

    @property
    def pct(self) -> float:
        return (self.ratio - 1.0) * 100

    @property
    def beyond(self) -> bool:
        """Beyond +3 %, and the interval says it is not noise."""
        return self.ratio - 1.0 > RESIDUAL_WARN and self.lo > 1.0

    def _basis(self) -> str:
        if self.drift_pct is None:
            return "the interval holds the steps' spread, not the host's drift between windows"
        return (
            f"the interval holds the host's drift between windows, {self.drift_pct:.1f} % "
            f"over {self.drift_windows} windows after the passes"
        )

    def sentence(self) -> str:
        steps = (
            f" (steps {self.after_steps[0]}-{self.after_steps[1]} against "
            f"{self.before_steps[0]}-{self.before_steps[1]})"
            if self.after_steps and self.before_steps
            else ""
        )
        head = (
            f"residual after the profiler passes {self.pct:+.1f} % [90 %: "
            f"{(self.lo - 1) * 100:+.1f} to {(self.hi - 1) * 100:+.1f} %], {self.n_after} steps "
            f"after against {self.n_before} before any pass{steps}"
        )
        if self.beyond:
            return f"{head}: beyond 3 %: the steps after the passes ran slower ({self._basis()})"
        return f"{head}: within 3 % or within the noise ({self._basis()})"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["before_steps"] = list(self.before_steps) if self.before_steps else None
        d["after_steps"] = list(self.after_steps) if self.after_steps else None
        return {**d, "pct": self.pct, "beyond_3pct": self.beyond, "sentence": self.sentence()}


def residual(
    before: Sequence[float],
    after: Sequence[float],
    *,
    windows: Sequence[float] = (),
    before_steps: tuple[int, int] | None = None,
    after_steps: tuple[int, int] | None = None,
    seed: int = 0,
) -> Residual | None:
    """The ratio of the two windows' medians with a 90 % interval; None when a window has
    fewer than :data:`MIN_STEPS` steps.

    Two intervals, the wider kept at each end: a bootstrap of both windows' steps (their
    spread), and the host's drift between windows (:func:`drift`, from ``after`` in blocks
    and the other unprofiled ``windows`` timed after the passes): the two windows compared
    are each one draw of that drift, so their log ratio carries ``sqrt(2)`` times its SD."""
    b = [float(x) for x in before if x > 0]
    a = [float(x) for x in after if x > 0]
    if len(b) < MIN_STEPS or len(a) < MIN_STEPS:
        return None
    mb, ma = statistics.median(b), statistics.median(a)
    rng = random.Random(seed)
    boots = sorted(
        statistics.median(rng.choices(a, k=len(a))) / statistics.median(rng.choices(b, k=len(b)))
        for _ in range(_BOOT)
    )
    lo, hi = boots[int(0.05 * _BOOT)], boots[int(0.95 * _BOOT) - 1]
    ratio = ma / mb
    d = drift(a, windows)
    if d is not None:
        half = _Z90 * math.sqrt(2.0) * d.sigma
        lo, hi = min(lo, ratio * math.exp(-half)), max(hi, ratio * math.exp(half))
    return Residual(
        mb, ma, ratio, lo, hi, len(b), len(a), before_steps, after_steps,
        d.pct if d else None, d.windows if d else 0,
    )  # fmt: skip


def block(
    seen: dict[str, Any],
    before: Sequence[float] | None,
    after: Sequence[float] | None,
    *,
    windows: Sequence[float] = (),
    before_steps: tuple[int, int] | None = None,
    after_steps: tuple[int, int] | None = None,
) -> dict[str, Any]:
    """The manifest's ``observer``: ``seen`` (the teardown arranged, what the passes left
    switched on) and the residual of the steps timed ``after`` the passes against those
    timed ``before`` any, its interval widened by the drift among ``windows`` (the light
    pass's cost rounds' unprofiled windows' mean steps, where they ran) and ``after`` (None,
    with ``residual_absent`` saying why: the loop ended before the check, or too few
    steps)."""
    r = (
        residual(before, after, windows=windows, before_steps=before_steps, after_steps=after_steps)
        if before and after
        else None
    )
    why = None
    if r is None:
        why = (
            "the loop ended before the residual check"
            if not after
            else "too few steps timed before or after the passes"
        )
    return {
        **seen,
        "left_behind": seen.get("left_behind"),
        "residual": r.to_dict() if r else None,
        "residual_absent": why,
    }
