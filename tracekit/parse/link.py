"""The links between tables that several builders share: thread keys, "the innermost
operator enclosing a CPU event", GPU activity -> launching runtime call (correlation),
the External-id fallback, the outermost operator, and the step of a timestamp.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from tracekit.errors import TraceError
from tracekit.parse.arrays import str_test
from tracekit.parse.columns import Accumulator
from tracekit.parse.events import ANNOT, FLOW_END, MEMORY, PYMODULE, RUNTIME
from tracekit.parse.intervals import climb_top, enclosing, thread_key

I64 = npt.NDArray[np.int64]
I32 = npt.NDArray[np.int32]
B = npt.NDArray[np.bool_]
STEP_NAME = re.compile(r"^ProfilerStep#([0-9]+)$")  # ASCII digits, as Arrow's RE2 reads \d
STEP_MAX = 2**31 - 1  # the tables' step column is int32
_THREAD_KINDS = (RUNTIME, MEMORY, PYMODULE, FLOW_END)  # kinds with a (pid, tid) besides ops


@dataclass
class Threads:
    """One int64 key per (pid, tid) pair, the same key for the same pair in every kind."""

    ops: I64  # per op (in the order of the op rows given)
    other: dict[int, I64]  # kind -> key per accumulated row of that kind (file order)


def thread_keys(acc: Accumulator, op_pid: I64, op_tid: I64) -> Threads:
    """Thread keys of the ops and of every other kind that has threads."""
    all_pid, all_tid, kinds = [op_pid], [op_tid], []
    for kind in _THREAD_KINDS:
        pid = acc.column(kind, "pid")
        if pid is not None:
            all_pid.append(pid)
            all_tid.append(acc.column(kind, "tid"))
            kinds.append(kind)
    keys = thread_key(np.concatenate(all_pid), np.concatenate(all_tid))
    parts = np.split(keys, np.cumsum([len(p) for p in all_pid])[:-1])
    return Threads(parts[0], dict(zip(kinds, parts[1:], strict=True)))


@dataclass
class OpIndex:
    """The ops as nested intervals on their threads (see :func:`~.intervals.nest`)."""

    order: I64
    thread: I64
    start: I64
    end: I64
    parent: I64

    def enclosing(self, q_thread: I64, q_time: I64) -> I64:
        """The innermost op on ``q_thread`` running at ``q_time`` (-1: none)."""
        return enclosing(
            self.order, self.thread, self.start, self.end, self.parent, q_thread, q_time
        )


@dataclass
class StepSpans:
    """The ``ProfilerStep#N`` annotations, in start order."""

    num: I64
    start: I64
    end: I64
    names: list[str]

    def of(self, ts: I64) -> I32:
        """The step running at each ``ts`` (-1: outside every step)."""
        if len(self.start) == 0:
            return np.full(len(ts), -1, dtype=np.int32)
        k = np.searchsorted(self.start, ts, side="right") - 1
        ok = (k >= 0) & (ts < self.end[np.maximum(k, 0)])
        return np.where(ok, self.num[np.maximum(k, 0)], -1).astype(np.int32)


def step_of(steps: StepSpans | None, ts: I64) -> I32:
    """Step per timestamp; a trace without step markers is one step, 0."""
    return steps.of(ts) if steps is not None else np.zeros(len(ts), dtype=np.int32)


def find_steps(
    name: pa.Array, category: npt.NDArray[np.int8], ts: I64, end: I64
) -> StepSpans | None:
    """The step spans: user annotations named ``ProfilerStep#N`` (None: no steps)."""
    if len(name) == 0:
        return None
    is_step = str_test(name, lambda a: pc.match_substring_regex(a, STEP_NAME.pattern))
    si = np.flatnonzero(is_step & (category == ANNOT))
    if not len(si):
        return None
    names = name.take(pa.array(si)).to_pylist()
    num = np.asarray([step_number(nm) for nm in names], dtype=np.int64)
    so = np.argsort(ts[si], kind="stable")
    si, num = si[so], num[so]
    return StepSpans(num, ts[si], end[si], [names[i] for i in so])


def pick(values: npt.NDArray[Any], idx: I64, fill: int) -> npt.NDArray[Any]:
    """``values[idx]`` where ``idx >= 0``, else ``fill``. Only the rows that point
    somewhere are read: ``values`` may be empty (every ``idx`` then -1), as a runtime
    table is when a damaged trace lost its calls but kept the kernels pointing at them."""
    out = np.full(len(idx), fill, dtype=np.result_type(values.dtype, np.min_scalar_type(fill)))
    hit = idx >= 0
    out[hit] = values[idx[hit]]
    return out


def step_number(name: str) -> int:
    """N of a ``ProfilerStep#N`` name (one Arrow matched); a number the int32 step
    column cannot hold (a damaged trace) is a one-line TraceError, not a wrapped step."""
    digits = name[len("ProfilerStep#") :]
    n = int(digits) if len(digits.lstrip("0")) <= 10 else STEP_MAX + 1  # no 4300-digit int()
    if n > STEP_MAX:
        shown = name if len(name) <= 40 else name[:37] + "..."
        raise TraceError(
            f"step marker '{shown}': step number beyond {STEP_MAX}; the trace is damaged"
        )
    return n


def launch_rows(k_corr: I64, r_corr: I64, r_cat: npt.NDArray[np.int8]) -> I64:
    """The runtime row that launched each GPU activity: the call with the same correlation
    id, the runtime API preferred over the driver (-1: none)."""
    if not len(r_corr):  # no runtime calls (e.g. all lost from a damaged trace)
        return np.full(len(k_corr), -1, dtype=np.int64)
    ro = np.lexsort((r_cat, r_corr))
    sc = r_corr[ro]
    pos = np.minimum(np.searchsorted(sc, k_corr, side="left"), len(sc) - 1)
    ok = (k_corr >= 0) & (sc[pos] == k_corr)
    return np.where(ok, ro[pos], -1)


def link_by_external_id(k_op: I64, k_ext: I64, op_ext: I64) -> None:
    """Where ``k_op`` is -1 (no launch event), the op with the activity's External id."""
    need = (k_op < 0) & (k_ext >= 0)
    if not need.any() or not len(op_ext):
        return
    eo = np.argsort(op_ext, kind="stable")
    se = op_ext[eo]
    pos = np.searchsorted(se, k_ext[need])
    hit = (pos < len(se)) & (se[np.minimum(pos, len(se) - 1)] == k_ext[need])
    k_op[need] = np.where(hit, eo[np.minimum(pos, len(se) - 1)], -1)


def top_ops(k_op: I64, parent: I64, is_op: B) -> I64:
    """The outermost ``cpu_op`` (not annotation) enclosing each op of ``k_op`` (-1: none)."""
    if not len(parent):
        return k_op
    top = climb_top(parent, is_op)
    k_top = pick(top, k_op, -1)
    return np.where(pick(is_op, k_top, False), k_top, -1)
