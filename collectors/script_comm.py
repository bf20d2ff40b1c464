"""The measured communication cost of a user's script (``tracekit run --nproc-per-node N``).

``collect --gpus N`` owns its loop and calls its step (:func:`tracekit.collectors.commcost.
measure`); here the loop is the script's, and tracekit only hears its step ends. So the
same measurement runs over the script's own iterations, after ``run``'s schedule is done
(the timed steps and the profiled passes ran on the script's unchanged training):
:class:`BoundaryRounds` follows :func:`~tracekit.collectors.commcost.round_order` over the
next ``rounds x 2 x steps`` step ends. At the step end that starts a step without gradient
sync it enters the model's sync-off context (DDP's ``no_sync()``, FSDP2's
``set_requires_gradient_sync(False)``: :func:`~tracekit.collectors.commcost.sync_control`)
and leaves it at the end of the half's last step; before each step every rank meets at a
barrier (the device idle, then ``dist.barrier()``), then the step is timed from that mark
to the next step end (CUDA events on the current stream, ``perf_counter`` on CPU). The
figures are :func:`~tracekit.collectors.commcost.rank_entry`'s: per round the median step,
cost = with - without, median over rounds.

Under ``no_sync()`` each rank's optimizer applies its own gradients: DDP's replicas drift
apart in those steps, and DDP never re-broadcasts parameters. When the script runs on after
the measurement (``--run-on``) :class:`CommHook` re-broadcasts rank 0's parameters and
buffers so the replicas agree again (optimizer state stays as each rank left it).

The model is the session's (:func:`tracekit.collectors.introspect.find_model`, found at the
first step's end): the outermost module holding the optimizer's parameters, looked through
(``torch.compile``'s ``_orig_mod``, ``.module``) for a DDP or FSDP2 module, else the live
DDP modules holding those parameters are searched (:func:`find_sync_target`).
"""

from __future__ import annotations

import contextlib
import gc
import time
from collections.abc import Callable
from typing import Any

import torch

from tracekit.collectors import commcost
from tracekit.collectors.commcost import SyncControl
from tracekit.collectors.introspect import INNER_ATTRS
from tracekit.collectors.session import Session, SessionFailure

Barrier = Callable[[], None]


def _is_sync_target(m: object) -> bool:
    from torch.nn.parallel import DistributedDataParallel

    return isinstance(m, DistributedDataParallel) or callable(
        getattr(m, "set_requires_gradient_sync", None)
    )


def _backend() -> str | None:
    import torch.distributed as dist

    return str(dist.get_backend()) if dist.is_available() and dist.is_initialized() else None


def script_barrier(device: torch.device) -> Barrier:
    """:func:`~tracekit.collectors.commcost.dist_barrier` on the script's default group,
    on this rank's GPU (``barrier_on``: NCCL would otherwise take the current device)."""
    from tracekit.collectors.commcost import dist_barrier

    return dist_barrier(device)


def find_sync_target(
    model: torch.nn.Module | None, candidates: Any = None
) -> torch.nn.Module | None:
    """The DDP (or FSDP2) module of ``model``: itself, one of its wrapped modules
    (``_orig_mod``, ``module``, ...), else a live DDP module that holds its parameters."""
    if model is None:
        return None
    seen: set[int] = set()
    todo: list[Any] = [model]
    while todo:
        obj = todo.pop(0)
        if id(obj) in seen or not isinstance(obj, torch.nn.Module):
            continue
        seen.add(id(obj))
        if _is_sync_target(obj):
            return obj
        todo.extend(getattr(obj, a, None) for a in INNER_ATTRS)
    from torch.nn.parallel import DistributedDataParallel

    wanted = {id(p) for p in model.parameters()}
    objs = gc.get_objects() if candidates is None else candidates
    for obj in objs:
        if issubclass(type(obj), DistributedDataParallel) and any(
            id(p) in wanted for p in obj.parameters()
        ):
            return obj  # type: ignore[no-any-return]
    return None


def parallel_kind(target: torch.nn.Module | None) -> str | None:
    """``ddp``, ``fsdp2`` or None: how :func:`find_sync_target`'s module is wrapped."""
    from torch.nn.parallel import DistributedDataParallel

    if target is None:
        return None
    return "ddp" if isinstance(target, DistributedDataParallel) else "fsdp2"


class BoundaryRounds:
    """``rounds`` rounds of ``steps`` steps with and ``steps`` without gradient sync over
    step ends (:meth:`boundary`, once per step end from the one before the first step)."""

    def __init__(self, control: SyncControl, barrier: Barrier, device: torch.device,
                 *, rounds: int, steps: int) -> None:  # fmt: skip
        self.control, self.barrier, self.device = control, barrier, device
        self.rounds, self.steps = rounds, steps
        order = [commcost.round_order(r) for r in range(rounds)]
        self.plan = [s for halves in order for s in halves for _ in range(steps)]
        self.i = -1  # the step running (index into plan)
        self._marks: list[tuple[Any, Any]] = []
        self._start: Any = None
        self._off = contextlib.ExitStack()
        self.off = False

    @property
    def total(self) -> int:
        return len(self.plan)

    @property
    def done(self) -> bool:
        return self.i >= len(self.plan)

    def _mark(self) -> Any:
        if self.device.type == "cuda":
            ev = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            with torch.cuda.device(self.device):  # the rank's device, whatever is current
                ev.record()
            return ev
        return time.perf_counter()

    def boundary(self) -> bool:
        """A step ended: close its timing, switch sync for the next, meet at the barrier,
        start the next one's timing. True once every step of the plan is timed."""
        if self.done:
            return True
        if self.i >= 0:
            self._marks.append((self._start, self._mark()))
        self.i += 1
        if self.done:
            self.close()
            return True
        sync = self.plan[self.i]
        if not sync and not self.off:
            self._off.enter_context(self.control.off())
            self.off = True
        elif sync and self.off:
            self.close()
        self.barrier()
        self._start = self._mark()
        return False

    def close(self) -> None:
        """Gradient sync back on (also when the loop ended in a half without it)."""
        self._off.close()
        self.off = False

    def millis(self) -> list[float]:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            return [float(s.elapsed_time(e)) for s, e in self._marks]
        return [(e - s) * 1e3 for s, e in self._marks]

    def measured(self) -> commcost.Rounds:
        """The timed steps as :class:`~tracekit.collectors.commcost.Rounds`."""
        ms = self.millis()
        with_ms: list[list[float]] = []
        without_ms: list[list[float]] = []
        k = self.steps
        for r in range(self.rounds):
            first, second = ms[2 * r * k : (2 * r + 1) * k], ms[(2 * r + 1) * k : (2 * r + 2) * k]
            a, b = (first, second) if commcost.round_order(r)[0] else (second, first)
            with_ms.append(a)
            without_ms.append(b)
        return commcost.Rounds(with_ms, without_ms, len(ms))


class CommHook:
    """``run_script``'s ``after_step`` on one rank: keeps the session's model from the
    first step's end, and once the schedule is complete runs :class:`BoundaryRounds` over
    the next step ends; :attr:`entry` is this rank's ``comm_cost`` block."""

    def __init__(self, rank: int, *, rounds: int, steps: int, run_on: bool = False,
                 barrier: Callable[[torch.device], Barrier] = script_barrier,
                 interconnect: Callable[[torch.device], dict[str, Any]] | None = None,
                 log: Callable[[str], None] | None = None) -> None:  # fmt: skip
        self.rank, self.rounds_n, self.steps_n, self.run_on = rank, rounds, steps, run_on
        self._barrier, self._log, self._interconnect = barrier, log, interconnect
        self.finished = False  # the measurement (and the sweep) done or skipped
        self.backend: str | None = None  # the script's default group's, at its first step
        self.parallel: str | None = None  # ddp, fsdp2 or None: the model's wrapping
        self.sweep: dict[str, Any] | None = None  # the interconnect sweep's figures
        self.sweep_absent: str | None = "not measured" if interconnect else "ceilings off"
        self.target: torch.nn.Module | None = None
        self.searched = False
        self.why = "no step ended"  # why there is no DDP module, once searched
        self.rounds: BoundaryRounds | None = None
        self.entry: dict[str, Any] = self._block("failed", "the schedule did not complete")
        self.started_at: int | None = None  # steps completed when the rounds began

    @property
    def extra_steps(self) -> int:
        return 2 * self.rounds_n * self.steps_n

    def _block(self, status: str, reason: str | None) -> dict[str, Any]:
        return commcost.block(status, reason, rounds=self.rounds_n, steps=self.steps_n)

    def __call__(self, sess: Session) -> bool:
        try:
            return self._step(sess)
        except Exception as e:  # tracekit's own failure: stop the script, as the session does
            if self.rounds is not None:
                self.rounds.close()
            self.entry = self._block("failed", f"{type(e).__name__}: {e}".splitlines()[0])
            raise SessionFailure(e) from e

    def _step(self, sess: Session) -> bool:
        if not self.searched and sess.n >= 1 and sess.phases is not None:
            self.searched = True
            self.backend = _backend()
            self.target = find_sync_target(sess.model)
            self.parallel = parallel_kind(self.target)
            if sess.model is None:
                self.why = f"no model was found ({sess.model_absent})"
            elif self.target is None:
                self.why = (f"the model is a {type(sess.model).__name__}, not a "
                            "DistributedDataParallel (or FSDP2) module")  # fmt: skip
        if not sess.finished or self.finished:  # the schedule and the light cost rounds done
            return True
        if self.rounds is None:
            if not self._begin(sess):
                return False  # the rounds' steps follow
            self._done(sess)
            return True
        if not self.rounds.boundary():
            return False
        self._finish(sess)
        self._done(sess)
        return True

    def _done(self, sess: Session) -> None:
        """After the measurement (or its skip), on every rank at the same step end: the
        interconnect sweep of ``collect --gpus N`` (``collectors/interconnect.py``) on the
        script's process group, when the ceilings are measured."""
        self.finished = True
        if self._interconnect is None or sess.device is None:
            return
        if self._log is not None:
            self._log("measuring the interconnect (collectives by message size)")
        try:
            self.sweep, self.sweep_absent = self._interconnect(sess.device), None
        except Exception as e:  # e.g. a backend without all_gather for these tensors
            self.sweep_absent = f"not measured: {type(e).__name__}: {e}".splitlines()[0]

    def _begin(self, sess: Session) -> bool:
        """The schedule just completed: start the rounds (False), or say why there are
        none (True)."""
        if self.rounds_n == 0:
            self.entry = self._block("skipped", "--comm-rounds 0")
            return True
        control = commcost.sync_control(self.target) if self.target is not None else self.why
        if not isinstance(control, SyncControl):
            self.entry = self._block("skipped", control)
            self.target = None
            return True
        device = sess.device
        assert device is not None
        self.started_at = sess.n
        self.rounds = BoundaryRounds(control, self._barrier(device), device,
                                     rounds=self.rounds_n, steps=self.steps_n)  # fmt: skip
        if self._log is not None:
            self._log(f"communication cost: {self.rounds_n} rounds x {self.steps_n} steps with "
                      f"and {self.steps_n} without {control.name}: {self.extra_steps} more "
                      "steps, unprofiled")  # fmt: skip
        self.entry = self._block("failed", "the loop ended during the measurement")
        self.rounds.boundary()
        return False  # not done: the rounds' steps follow

    def _finish(self, sess: Session) -> None:
        rounds = self.rounds
        assert rounds is not None and self.target is not None
        timer = commcost.CUDA_TIMER if rounds.device.type == "cuda" else commcost.HOST_TIMER
        self.entry = commcost.rank_entry(self.rank, rounds.control, timer, rounds.measured(),
                                         rounds=self.rounds_n, steps=self.steps_n)  # fmt: skip
        if self.run_on and rounds.control.name == commcost.DDP_SYNC_OFF:
            resync(self.target)
        self.target = None  # the script's model is the script's again

    def ended(self, steps: int) -> None:
        """The script ended after ``steps`` steps: say how far an unfinished
        measurement got (and turn gradient sync back on)."""
        r = self.rounds
        if r is None and not self.finished and self.rounds_n > 0:
            self.entry = self._block(
                "failed", f"the loop ended after {steps} steps, before the measurement, whose "
                f"{self.extra_steps} steps follow the schedule's last",
            )  # fmt: skip
        if r is None or r.done:
            return
        r.close()
        got = max(0, steps - (self.started_at or 0))
        self.entry = self._block(
            "failed", f"the loop ended after {got} of the {r.total} steps of the measurement"
        )


def resync(ddp: torch.nn.Module) -> None:
    """Rank 0's parameters and buffers to every rank of the DDP module's group: the
    replicas agree again after steps without gradient sync."""
    import torch.distributed as dist

    group = getattr(ddp, "process_group", None)
    with torch.no_grad():
        for t in [*ddp.parameters(), *ddp.buffers()]:
            dist.broadcast(t.data, src=dist.get_global_rank(group, 0) if group else 0,
                           group=group)  # fmt: skip
