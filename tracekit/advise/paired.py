"""Each lever timed against the baseline in interleaved rounds (``tracekit advise``).

One collect per lever is one sample on a host whose speed moves a step by up to 1.6x
between seconds: it cannot rank levers whose effects are below ~20 %. Here each lever runs
in one process beside the baseline (``python -m tracekit.collectors.paired``): windows of
K steps of each, alternating, without the profiler, until the 90 % interval of the step
ratio is within +-``half_width`` (after ``min_rounds``), or the lever's share of the time
budget is spent. The sweep's collect of the lever still gives its peak memory and trace.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracekit.advise.search import BUDGET, Interval
from tracekit.io import atomic_write_json
from tracekit.sweep.runner import DONE

NO_INTERVAL = "1 round, no interval"
PAIRED = "paired"  # folder of the specs and results, in advise's output folder
MIN_LEVER_S = 10.0  # a lever's rounds get at least this much of the budget
START_S = 300.0  # allowance for a lever's build and warm-up (torch.compile) beyond its rounds


@dataclass(frozen=True)
class PairedOptions:
    min_rounds: int = 5
    max_rounds: int = 30
    half_width: float = 0.05  # stop once the 90 % interval is within +-5 %
    budget_s: float = 240.0  # seconds of rounds for all levers together
    search_s: float | None = None  # seconds of rounds for the search (None: budget_s / 2)
    window: int = 5  # steps per window
    warmup: int = 3

    def __post_init__(self) -> None:
        from tracekit.errors import UsageError

        if self.min_rounds < 2 or self.max_rounds < self.min_rounds:
            raise UsageError(f"--rounds must be >= 2 and <= --max-rounds, got {self.min_rounds} "
                             f"and {self.max_rounds}")  # fmt: skip
        if not 0 < self.half_width < 1 or not self.budget_s > 0 or self.window < 1:
            raise UsageError("--half-width must be in (0, 1) and --budget positive, got "
                             f"{self.half_width} and {self.budget_s}")  # fmt: skip
        if self.search_s is not None and self.search_s < 0:
            raise UsageError(f"the search's budget must be >= 0 s, got {self.search_s}")

    @property
    def search_budget_s(self) -> float:
        return self.budget_s / 2 if self.search_s is None else self.search_s


Progress = Callable[[str, str], None]  # (lever, what it is doing)


class BudgetBar:
    """A progress bar over the paired rounds' time budget: the lever being timed, its
    latest round and the time left (stderr; nothing when disabled)."""

    def __init__(self, budget_s: float, levers: int, enabled: bool = True) -> None:
        self.budget_s, self.levers, self.enabled = budget_s, levers, enabled
        self.t0 = time.monotonic()
        self.done: set[str] = set()
        self._bar: Any = None

    def __enter__(self) -> BudgetBar:
        if self.enabled:
            from rich.console import Console
            from rich.progress import BarColumn, Progress, TextColumn

            self._bar = Progress(
                TextColumn("[bold]paired rounds[/] {task.description}"), BarColumn(),
                TextColumn("{task.fields[left]}"), console=Console(stderr=True), transient=True,
            )  # fmt: skip
            self._bar.start()
            self._task = self._bar.add_task("", total=self.budget_s, left="")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()

    def __call__(self, lever: str, what: str) -> None:
        if self._bar is None:
            return
        self.done.add(lever)
        used = time.monotonic() - self.t0
        left = max(self.budget_s - used, 0.0)
        self._bar.update(self._task, completed=min(used, self.budget_s),
                         description=f"{lever} ({len(self.done)}/{self.levers}): {what}",
                         left=f"{left:.0f} s of {self.budget_s:.0f} s left")  # fmt: skip


def subprocess_env() -> dict[str, str]:
    """The workers' environment: the sweep's (this tracekit importable)."""
    from tracekit.sweep.runner import default_env

    return default_env()


def spec(
    base: Mapping[str, Any], other: Mapping[str, Any], opts: PairedOptions, budget_s: float
) -> dict[str, Any]:
    """The worker's spec: two collect configs (manifest form) and how to time them."""
    return {
        "base": dict(base),
        "other": dict(other),
        "warmup": opts.warmup,
        "rounds": {
            "steps": opts.window,
            "min_rounds": opts.min_rounds,
            "max_rounds": opts.max_rounds,
            "budget_s": budget_s,
            "half_width": opts.half_width,
        },
    }


def worker_command(spec_path: Path, res_path: Path) -> list[str]:
    """The worker that times one lever (``python -m tracekit.collectors.paired``)."""
    return [sys.executable, "-m", "tracekit.collectors.paired", str(spec_path), str(res_path)]


def _same_timing(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Two specs time the same configs the same way (the budget share may differ)."""

    def key(x: Mapping[str, Any]) -> Any:
        rounds = {k: v for k, v in dict(x.get("rounds") or {}).items() if k != "budget_s"}
        return {**x, "rounds": rounds}

    return bool(key(a) == key(b))


def finished(spec_path: Path, res_path: Path, wanted: Mapping[str, Any]) -> dict[str, Any] | None:
    """The result an earlier advise left for this very timing (``--resume``): one whose
    spec matches ``wanted`` and whose status is done (ok, oom); None where it must run."""
    try:
        old = json.loads(spec_path.read_text())
        doc = json.loads(res_path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or not isinstance(old, dict) or not _same_timing(old, wanted):
        return None
    return doc if doc.get("status") in DONE else None


def run_one(
    name: str,
    base: Mapping[str, Any],
    other: Mapping[str, Any],
    out: Path,
    budget_s: float,
    opts: PairedOptions,
    env: Mapping[str, str] | None = None,
    progress: Progress | None = None,
    resume: bool = False,
) -> dict[str, Any]:
    """Time one lever against the baseline in a worker process; its result document
    (``status`` ok, oom or error). ``resume``: an earlier finished timing of the same
    spec is kept instead."""
    out.mkdir(parents=True, exist_ok=True)
    spec_path, res_path = out / f"{name}.spec.json", out / f"{name}.json"
    wanted = spec(base, other, opts, budget_s)
    if resume and (done := finished(spec_path, res_path, wanted)) is not None:
        if progress is not None:
            progress(name, "kept from the earlier run (--resume)")
        return done
    atomic_write_json(spec_path, wanted)
    res_path.unlink(missing_ok=True)
    tail: list[str] = []
    with subprocess.Popen(
        worker_command(spec_path, res_path), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        text=True, env=env,
    ) as p:  # fmt: skip
        assert p.stderr is not None
        # killed at its deadline whether or not it prints (a hung worker prints nothing)
        killer = threading.Timer(budget_s + START_S, p.kill)
        killer.daemon = True
        killer.start()
        try:
            for line in p.stderr:
                tail = [*tail[-20:], line.rstrip()]
                if progress is not None and line.startswith("round "):
                    progress(name, line.strip())
        finally:
            killer.cancel()
        code = p.wait()
    if res_path.is_file():
        doc: dict[str, Any] = json.loads(res_path.read_text())
        return doc
    why = "timed out" if code < 0 else f"exit {code}"
    return {"status": "error", "error": f"paired timing {why}: " + " | ".join(tail[-3:])}


def run_all(
    levers: Mapping[str, Mapping[str, Any]],
    base: Mapping[str, Any],
    out: Path,
    opts: PairedOptions,
    env: Mapping[str, str] | None = None,
    progress: Progress | None = None,
    resume: bool = False,
) -> dict[str, dict[str, Any]]:
    """Each lever's config timed against ``base``; the budget is shared out as it goes
    (what a quick lever leaves goes to the next; one kept by ``resume`` takes none)."""
    results: dict[str, dict[str, Any]] = {}
    t0 = time.monotonic()
    names = list(levers)
    for i, name in enumerate(names):
        left = opts.budget_s - (time.monotonic() - t0)
        share = max(MIN_LEVER_S, left / (len(names) - i))
        if progress is not None:
            progress(name, f"building; {max(left, 0):.0f} s of the time budget left")
        results[name] = run_one(
            name, base, levers[name], out / PAIRED, share, opts, env, progress, resume
        )
    return results


def overlay(
    measured: Mapping[str, Any], base: Mapping[str, Any], paired: Mapping[str, Any] | None
) -> dict[str, Any]:
    """A lever's sweep row with its step time from the paired rounds: the re-measured
    baseline's step times the paired ratio, and the ratio's interval. Without a paired
    result the row keeps its single collect's time and says so."""
    row = dict(measured)
    if paired is None or paired.get("status") != "ok":
        row.update(ratio_lo=math.nan, ratio_hi=math.nan, rounds=0,
                   effect="one sample (no paired rounds)" if paired is None
                   else f"paired timing failed: {paired.get('error')}")  # fmt: skip
        return row
    iv = paired["interval"]
    b_ms = float(base["step_time_ms"])
    ms = b_ms * float(iv["ratio"])
    tokens = float(measured["tokens_per_s"]) * float(measured["step_time_ms"]) / 1e3
    n = int(iv["rounds"])
    lo, hi = float(iv["lo"]), float(iv["hi"])
    effect = str(iv["effect"])
    if n < 2 or not (math.isfinite(lo) and math.isfinite(hi)):  # one round: no interval
        lo, hi, effect = math.nan, math.nan, NO_INTERVAL
    row.update(step_time_ms=ms, tokens_per_s=tokens / (ms / 1e3), ratio_lo=lo, ratio_hi=hi,
               rounds=n, effect=effect)  # fmt: skip
    return row


def sure_gains(
    rows: Mapping[str, Mapping[str, Any]], base: Mapping[str, Any], objective: str
) -> set[str]:
    """The levers whose interval says they improve the objective: the step ratio's upper
    end below 1 (time), the tokens/s gain at that end above 1 (tokens/s). All for memory:
    a peak needs no repetition."""
    if objective == "memory":
        return set(rows)
    out = set()
    b_tokens = float(base["tokens_per_s"]) * float(base["step_time_ms"])
    for name, r in rows.items():
        hi = float(r.get("ratio_hi", math.nan))
        tokens = float(r["tokens_per_s"]) * float(r["step_time_ms"]) / b_tokens
        if (objective == "time" and hi < 1.0) or (
            objective == "tokens-per-s" and tokens / hi > 1.0
        ):
            out.add(name)
    return out


def interval_of(doc: Mapping[str, Any] | None) -> Interval | str:
    """A worker's result as an :class:`~tracekit.advise.search.Interval`, or why there is
    none. One round gives no interval (NaN bounds), whatever the worker computed."""
    if doc is None:
        return "not timed"
    if doc.get("status") != "ok":
        return str(doc.get("error") or doc.get("status"))
    iv = doc["interval"]
    n = int(iv["rounds"])
    lo, hi = (float(iv["lo"]), float(iv["hi"])) if n >= 2 else (math.nan, math.nan)
    return Interval(float(iv["ratio"]), lo, hi, n)


class SearchMeasurer:
    """The search's measurer (``tracekit.advise.search.Measurer``): a combination timed
    against the best so far in a worker, as a cost ratio (``per_token``: over the
    tokens-per-step ratio). The search's budget is shared out as it goes, a step getting
    at least ``MIN_LEVER_S``; once it is spent the answer is ``BUDGET``."""

    def __init__(
        self,
        config: Callable[[tuple[str, ...]], dict[str, Any]],
        tokens: Callable[[tuple[str, ...]], float],
        out: Path,
        opts: PairedOptions,
        steps_left: int,
        *,
        per_token: bool = False,
        env: Mapping[str, str] | None = None,
        progress: Progress | None = None,
        resume: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config, self.tokens, self.out, self.opts = config, tokens, out, opts
        self.steps_left, self.per_token = max(1, steps_left), per_token
        self.env, self.progress, self.resume, self.clock = env, progress, resume, clock
        self.t0 = clock()

    def __call__(self, best: tuple[str, ...], tried: tuple[str, ...]) -> Interval | str:
        left = self.opts.search_budget_s - (self.clock() - self.t0)
        if left <= 0:
            return BUDGET
        share = max(MIN_LEVER_S, left / self.steps_left)
        self.steps_left = max(1, self.steps_left - 1)
        name = "search-" + "+".join(tried)
        doc = run_one(name, self.config(best), self.config(tried), self.out / PAIRED, share,
                      self.opts, self.env, self.progress, self.resume)  # fmt: skip
        got = interval_of(doc)
        if isinstance(got, str) or not self.per_token:
            return got
        return got.scaled(self.tokens(best) / self.tokens(tried))
