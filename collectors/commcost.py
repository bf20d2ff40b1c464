"""The measured communication cost of a data-parallel step, without any profiler.

A profiled window cannot say what communication costs a multi-GPU step: the profiler slows
each rank's host by a different amount, one rank falls behind and the others wait for it
inside the collectives, so the trace's exposed communication is partly the profiler's. This
module measures it on the unprofiled job instead: **rounds** of ``K`` steps with gradient
sync and ``K`` steps without it (DDP under ``no_sync()``, FSDP2 with
``set_requires_gradient_sync(False)``), the order alternating per round (with, without;
without, with; ...) so that a drift of the host's speed cancels, a barrier before each timed
step so every rank starts it together, each step timed on its own (CUDA events on a GPU; on
CPU/gloo a host timer, ``time.perf_counter``, stands in). Per rank and round the step is
the median of its ``K`` steps; the cost of a round is with - without; the rank's cost is the
median over rounds, its spread the rounds' min and max (docs/multi-gpu.md, "The measured
communication cost"; the manifest's ``distributed.comm_cost``, COMMCOST_SPEC).

:func:`measure_rounds` is the schedule (a pure function of its callables: the step, a
"sync off" context, a barrier and a timer), :func:`rank_cost` one rank's figures,
:func:`rank_entry` one rank's ``comm_cost`` block and :func:`combine` the run's from the
ranks'. :func:`measure` runs it on a DDP / FSDP2 model (``tracekit collect --gpus N``,
``tracekit run --nproc-per-node N``).
"""

from __future__ import annotations

import contextlib
import functools
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from tracekit.collectors.train import suspend_grad_sync

DDP_SYNC_OFF = "DistributedDataParallel.no_sync()"
FSDP_SYNC_OFF = "FSDPModule.set_requires_gradient_sync(False)"
FSDP_CAVEAT = (
    "parameter all-gathers stay in the steps without gradient sync: the cost is the "
    "gradient reduce-scatter's; those steps' optimizer step also has no sharded gradients "
    "to apply (FSDP2 keeps them unsharded until a synchronised backward), so the cost "
    "includes the shard's optimizer update: an upper bound of the reduce-scatter's"
)
CUDA_TIMER = "CUDA events per rank"
HOST_TIMER = "a host timer per rank (time.perf_counter; the CPU stand-in for CUDA events)"

Timer = Callable[[Callable[[], Any]], float]  # runs the callable, returns its time in ms
SyncOff = Callable[[], contextlib.AbstractContextManager[Any]]


@dataclass(frozen=True)
class SyncControl:
    """How gradient sync is switched off for whole steps of one model."""

    name: str  # the manifest's sync_off
    off: SyncOff
    caveat: str | None


@dataclass(frozen=True)
class Rounds:
    """What :func:`measure_rounds` timed: per round, its steps' times (ms) with and without
    gradient sync; ``next_step`` is the global step after the last one."""

    with_ms: list[list[float]]
    without_ms: list[list[float]]
    next_step: int


def round_order(r: int) -> tuple[bool, bool]:
    """Round ``r``'s halves (True: with sync): with then without on even rounds, without
    then with on odd ones, so the pairs go with, without, without, with, ..."""
    return (True, False) if r % 2 == 0 else (False, True)


def measure_rounds(step: Callable[[int], Any], sync_off: SyncOff, barrier: Callable[[], None],
                   timer: Timer, *, rounds: int, steps: int, start: int = 0) -> Rounds:  # fmt: skip
    """Run ``rounds`` rounds of ``steps`` steps with sync and ``steps`` without, in
    :func:`round_order`, ``barrier()`` before each step, each step timed by ``timer``;
    ``step(i)`` runs global step ``i`` (from ``start``)."""
    with_ms: list[list[float]] = []
    without_ms: list[list[float]] = []
    i = start
    for r in range(rounds):
        half: dict[bool, list[float]] = {}
        for sync in round_order(r):
            times = []
            for _ in range(steps):
                barrier()
                with contextlib.nullcontext() if sync else sync_off():
                    times.append(timer(functools.partial(step, i)))
                i += 1
            half[sync] = times
        with_ms.append(half[True])
        without_ms.append(half[False])
    return Rounds(with_ms, without_ms, i)


def rank_cost(rank: int, with_ms: Sequence[Sequence[float]],
              without_ms: Sequence[Sequence[float]]) -> dict[str, Any]:  # fmt: skip
    """One rank's figures (``comm_cost.ranks[i]``) from its rounds' step times."""
    rw = [float(statistics.median(x)) for x in with_ms]
    ro = [float(statistics.median(x)) for x in without_ms]
    diffs = [a - b for a, b in zip(rw, ro, strict=True)]
    with_sync = float(statistics.median(rw))
    cost = float(statistics.median(diffs))
    return {
        "rank": rank,
        "with_sync_ms": with_sync,
        "without_sync_ms": float(statistics.median(ro)),
        "cost_ms": cost,
        "cost_ms_range": [min(diffs), max(diffs)],
        "cost_pct": 100.0 * cost / with_sync if with_sync > 0 else None,
        "rounds_with_ms": rw,
        "rounds_without_ms": ro,
    }


def method(sync_off: str, timer: str) -> str:
    """The manifest's ``method``, in words."""
    return (
        "interleaved rounds: K steps with gradient sync, then K without "
        f"({sync_off}), the order alternating per round (with, without; without, with), "
        f"a barrier before each timed step, {timer}; per round the median step, "
        "cost = with - without, median over rounds; no profiler"
    )


def block(status: str, reason: str | None, *, rounds: int, steps: int,
          sync_off: str | None = None, caveat: str | None = None, how: str | None = None,
          ranks: list[dict[str, Any]] | None = None) -> dict[str, Any]:  # fmt: skip
    """A ``comm_cost`` block (a rank's, with its one rank; or the run's)."""
    return {
        "status": status,
        "reason": reason,
        "method": how,
        "sync_off": sync_off,
        "caveat": caveat,
        "rounds": rounds,
        "steps_per_round": steps,
        "ranks": ranks or [],
    }


def rank_entry(rank: int, control: SyncControl, timer_name: str, measured: Rounds,
               *, rounds: int, steps: int) -> dict[str, Any]:  # fmt: skip
    """One rank's ``comm_cost`` block (status ok), from what it measured."""
    return block(
        "ok", None, rounds=rounds, steps=steps, sync_off=control.name, caveat=control.caveat,
        how=method(control.name, timer_name),
        ranks=[rank_cost(rank, measured.with_ms, measured.without_ms)],
    )  # fmt: skip


def combine(entries: Mapping[int, Mapping[str, Any] | None], world_size: int,
            *, rounds: int, steps: int) -> dict[str, Any]:  # fmt: skip
    """The run's ``comm_cost`` from each rank's block (None: that rank has none): ok when
    every rank measured it; skipped when the ranks skipped it (with their reason); failed
    otherwise, saying which ranks have no measurement."""
    got = {r: e for r in range(world_size) if (e := entries.get(r)) is not None}
    skipped = [e for e in got.values() if e.get("status") == "skipped"]
    if skipped:
        return block("skipped", skipped[0].get("reason"), rounds=rounds, steps=steps)
    ok = {r: e for r, e in got.items() if e.get("status") == "ok" and e.get("ranks")}
    missing = [r for r in range(world_size) if r not in ok]
    if missing:
        why = next((e.get("reason") for e in got.values() if e.get("reason")), None)
        which = ", ".join(str(r) for r in missing)
        reason = f"no measurement from rank {which}" + (f" ({why})" if why else "")
        return block("failed", reason, rounds=rounds, steps=steps)
    first = ok[0]
    return block(
        "ok", None, rounds=int(first["rounds"]), steps=int(first["steps_per_round"]),
        sync_off=first["sync_off"], caveat=first["caveat"], how=first["method"],
        ranks=[dict(ok[r]["ranks"][0]) for r in range(world_size)],
    )  # fmt: skip


# ------------------------------------------------------------------ torch adapters


def sync_control(model: torch.nn.Module) -> SyncControl | str:
    """How to switch gradient sync off for ``model`` (a DDP module or an FSDP2 one), or
    why it cannot be."""
    from torch.nn.parallel import DistributedDataParallel

    if isinstance(model, DistributedDataParallel):
        return SyncControl(DDP_SYNC_OFF, lambda: suspend_grad_sync(model), None)
    if callable(getattr(model, "set_requires_gradient_sync", None)):
        return SyncControl(FSDP_SYNC_OFF, lambda: suspend_grad_sync(model), FSDP_CAVEAT)
    return f"the model is a {type(model).__name__}, neither a DDP nor an FSDP2 module"


def cuda_timer(device: torch.device) -> Timer:
    """Times one call with CUDA events on ``device``'s current stream (waits for the end
    event after it, outside the timed interval)."""

    def timed(fn: Callable[[], Any]) -> float:
        start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        with torch.cuda.device(device):
            start.record()
            fn()
            end.record()
        end.synchronize()  # type: ignore[no-untyped-call]
        return float(start.elapsed_time(end))

    return timed


def host_timer(fn: Callable[[], Any]) -> float:
    """Times one call with ``time.perf_counter`` (CPU: a step is synchronous)."""
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1e3


def dist_barrier(device: torch.device) -> Callable[[], None]:
    """Every rank's device idle, then a process-group barrier, then the barrier's own work
    done: the next step starts together on every rank, on an empty queue."""
    from tracekit.collectors.interconnect import barrier_on

    def barrier() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        barrier_on(device)
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    return barrier


def measure(model: torch.nn.Module, step: Callable[[int], Any], device: torch.device,
            *, rank: int, rounds: int, steps: int, start: int = 0
            ) -> tuple[dict[str, Any], int]:  # fmt: skip
    """This rank's ``comm_cost`` block for ``model`` (its DDP / FSDP2 wrapper) trained by
    ``step``, and the next global step. ``rounds`` 0: skipped. Every rank must call it
    with the same arguments (the barriers and the model's collectives pair them up)."""
    if rounds == 0:
        return block("skipped", "--comm-rounds 0", rounds=0, steps=steps), start
    control = sync_control(model)
    if isinstance(control, str):
        return block("skipped", control, rounds=rounds, steps=steps), start
    on_gpu = device.type == "cuda"
    timer = cuda_timer(device) if on_gpu else host_timer
    measured = measure_rounds(step, control.off, dist_barrier(device), timer,
                              rounds=rounds, steps=steps, start=start)  # fmt: skip
    timer_name = CUDA_TIMER if on_gpu else HOST_TIMER
    entry = rank_entry(rank, control, timer_name, measured, rounds=rounds, steps=steps)
    return entry, measured.next_step
