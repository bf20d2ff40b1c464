"""The CPU view of a CPU-only trace: its work operators stand in for GPU kernels.

A run on the CPU has no GPU activity: the operators *are* the device's work (the view
PyTorch's profiler gives with ``key_averages()``). :func:`cpu_view` returns the trace with
a ``kernels`` table built from its **work operators** (same columns as the parsed kernels
table, ``kind`` ``'cpu_op'``) and the ``steps`` table's GPU columns filled from them, so that
classify and summary treat each work operator as they treat a kernel: its class from the
operator rules, its FLOPs and bytes from its own shapes, its step from the operator.

Each instant of a thread belongs to the innermost operator running then (as a GPU kernel
belongs to the innermost operator that launched it); the rule (:data:`RULE`,
:func:`work_ops`) says which operators' instants are the device's work:

* **wrappers** are not: annotations (``ProfilerStep#``, ``Optimizer.step#``,
  ``record_function`` ranges: category ``user_annotation``) and the autograd engine's
  frames (``autograd::engine::evaluate_function: …``, ``…Backward0``,
  ``torch::autograd::…``);
* **view and metadata operators** are not (:data:`METADATA_OPS`: ``aten::view``,
  ``aten::t``, ``aten::as_strided``, ``aten::empty``, ``aten::to`` without a copy, …):
  they move no data;
* every other operator is a **work operator**, and its row carries its **self time**: its
  span minus its children's spans (the profiler's "Self CPU"). ``aten::addmm``'s self time
  is its GEMM, its bias copy is ``aten::copy_``'s; ``aten::mse_loss`` computes the squared
  error itself and calls ``aten::mean``; ``aten::linear`` only dispatches to
  ``aten::addmm``, so its self time is small.

The rule reads only the operator tree, so the same trace always gives the same operators.
Self time never overlaps on a thread, so the steps' busy time (``gpu_busy``) is the exact
union of the work operators' self time over the threads; the rest of the step is framework
and Python overhead (wrappers, views, Python between operators, and the profiler's own).
A row starts where its operator starts and lasts its self time: exact for operators
without children, a stand-in interval for the others.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd

from tracekit.manifest import manifest_or_empty, read_manifest
from tracekit.parse.intervals import climb_top, union_length

KIND = "cpu_op"  # the kernels table's ``kind`` of a work operator
DEVICE = -1  # the kernels table's ``device`` of a work operator (c10's CPU index)
RULE = (
    "every operator that is neither a wrapper (annotation, autograd frame) nor a "
    "view/metadata op (aten::view, aten::t, aten::empty, …), with its self time: its span "
    "minus its children's"
)
# Operators that move no data: views, metadata, allocation without initialisation, and
# the no-op forms of aten::to / aten::contiguous (their copying forms call a child).
_METADATA = (
    "view", "_unsafe_view", "_reshape_alias", "reshape", "view_as", "as_strided",
    "as_strided_", "t", "numpy_T", "transpose", "transpose_", "permute", "movedim", "moveaxis",
    "swapaxes", "expand", "expand_as", "squeeze", "squeeze_", "unsqueeze", "unsqueeze_",
    "select", "slice", "narrow", "split", "split_with_sizes", "tensor_split", "chunk", "unbind",
    "flatten", "unflatten", "unfold", "diagonal", "alias", "detach", "detach_", "lift_fresh",
    "resolve_conj", "resolve_neg", "conj", "_conj", "_neg_view", "view_as_real",
    "view_as_complex", "real", "imag", "mT", "mH", "matrix_H", "adjoint", "empty", "empty_like",
    "empty_strided", "new_empty", "new_empty_strided", "resize_", "result_type", "contiguous",
    "to", "type_as", "item", "_local_scalar_dense", "is_nonzero", "set_", "size", "stride",
    "dim", "_has_compatible_shallow_copy_type", "broadcast_tensors", "broadcast_to",
    "atleast_1d", "atleast_2d", "atleast_3d", "numel", "sym_size", "sym_stride",
)  # fmt: skip
METADATA_OPS: frozenset[str] = frozenset("aten::" + n for n in _METADATA) | {"detach"}
# Frames of the autograd engine and of torch.compile: they run work, they are not work.
_WRAPPER = re.compile(
    r"^autograd::engine::|^torch::autograd::|^\w*Backward\d*$|^CompiledFunction"
    r"|^Torch-Compiled Region|^TorchDynamo"
)


def candidates(ops: pd.DataFrame) -> np.ndarray:
    """Which operators may stand in for a kernel: ``cpu_op`` rows that are neither
    wrappers nor view/metadata operators (one test per distinct name)."""
    if not len(ops):
        return np.zeros(0, dtype=bool)
    codes, uniq = pd.factorize(ops["name"].astype(str), sort=False)
    names = [str(u) for u in uniq]
    ok = np.array([n not in METADATA_OPS and not _WRAPPER.search(n) for n in names], bool)
    is_op = (ops["category"].astype(str) == "cpu_op").to_numpy(dtype=bool)
    out: np.ndarray = is_op & ok[codes]
    return out


def _parents(ops: pd.DataFrame) -> np.ndarray:
    """Row position of each operator's parent (-1: a root)."""
    ids = pd.Index(ops["op_id"].to_numpy(dtype=np.int64))
    ppos: np.ndarray = ids.get_indexer(pd.Index(ops["parent"].to_numpy(dtype=np.int64)))
    return ppos.astype(np.int64)


def work_ops(ops: pd.DataFrame) -> np.ndarray:
    """Which rows of ``ops`` are work operators (see the module doc): a boolean mask."""
    return candidates(ops)


def self_segments(ops: pd.DataFrame, rows: np.ndarray) -> tuple[np.ndarray, ...]:
    """The self time of the operators at positions ``rows`` as intervals: (row, start,
    end) arrays, one entry per gap between an operator's children (empty gaps left out)."""
    ppos = _parents(ops)
    ts = ops["ts"].to_numpy(dtype=np.int64)
    end = ts + ops["dur"].to_numpy(dtype=np.int64)
    mine = np.zeros(len(ops), dtype=bool)
    mine[rows] = True
    kids = np.flatnonzero((ppos >= 0) & mine[np.maximum(ppos, 0)])
    kids = kids[np.lexsort((ts[kids], ppos[kids]))]  # by parent, then start
    par = ppos[kids]
    first = np.ones(len(kids), dtype=bool)
    first[1:] = par[1:] != par[:-1]
    last = np.ones(len(kids), dtype=bool)
    last[:-1] = par[:-1] != par[1:]
    prev_end = np.where(first, ts[par], np.roll(end[kids], 1))
    # before each child; after each parent's last child; childless operators whole
    childless = rows[~np.isin(rows, par)]
    seg_row = np.concatenate([par, par[last], childless])
    seg_start = np.concatenate([prev_end, end[kids][last], ts[childless]])
    seg_end = np.concatenate([ts[kids], end[par[last]], end[childless]])
    keep = seg_end > seg_start
    return seg_row[keep], seg_start[keep], seg_end[keep]


def cpu_activities(ops: pd.DataFrame) -> pd.DataFrame:
    """The work operators as a kernels table (the parsed kernels table's columns, in start
    order): ``kind`` ``'cpu_op'``, ``device`` -1, ``stream`` the thread id, ``dur`` the self
    time, ``op_id`` the operator itself, ``top_op_id`` its outermost ``cpu_op`` ancestor."""
    rows = np.flatnonzero(work_ops(ops))
    rows = rows[np.lexsort((ops["op_id"].to_numpy()[rows], ops["ts"].to_numpy()[rows]))]
    n = len(rows)
    seg_row, seg_start, seg_end = self_segments(ops, rows)
    own = np.zeros(len(ops), dtype=np.int64)
    np.add.at(own, seg_row, seg_end - seg_start)
    top = _top_ops(ops)[rows]

    def pick(col: str, default: Any = None) -> Any:
        if col not in ops:
            return np.full(n, default, dtype=object)
        return ops[col].to_numpy()[rows]

    frame: pd.DataFrame = pd.DataFrame(
        {
            "kernel_id": np.arange(n, dtype=np.int64),
            "kind": np.full(n, KIND, dtype=object),
            "name": pick("name"),
            "device": np.full(n, DEVICE, dtype=np.int32),
            "stream": pick("tid").astype(np.int64),
            "ts": pick("ts").astype(np.int64),
            "dur": own[rows],
            "correlation": np.full(n, -1, dtype=np.int64),
            "external_id": pick("external_id", -1).astype(np.int64),
            **{
                c: pd.array([pd.NA] * n, dtype="Int32")
                for c in ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z")
            },
            "registers_per_thread": pd.array([pd.NA] * n, dtype="Int32"),
            "shared_memory": pd.array([pd.NA] * n, dtype="Int64"),
            "bytes": pd.array([pd.NA] * n, dtype="Int64"),
            "step": pick("step", -1).astype(np.int32),
            "runtime_id": np.full(n, -1, dtype=np.int64),
            "op_id": pick("op_id").astype(np.int64),
            "op_name": pick("name"),
            "op_input_dims": pick("input_dims"),
            "op_input_types": pick("input_types"),
            "top_op_id": ops["op_id"].to_numpy(dtype=np.int64)[top],
            "top_op_name": ops["name"].to_numpy()[top],
            "module": pick("module"),
        }
    )
    return frame


def _top_ops(ops: pd.DataFrame) -> np.ndarray:
    """Row position of each operator's outermost ``cpu_op`` ancestor (itself if none)."""
    ppos = _parents(ops)
    is_op = (ops["category"].astype(str) == "cpu_op").to_numpy(dtype=bool)
    top: np.ndarray = climb_top(ppos, is_op)
    return top


def cpu_steps(steps: pd.DataFrame, ops: pd.DataFrame) -> pd.DataFrame:
    """``steps`` with its GPU columns (``gpu_ts``, ``gpu_dur``, ``gpu_busy``,
    ``kernel_count``) computed from the work operators, as the parser computes them from
    GPU activities: first start, span to the last end, union of their self time over the
    threads (exact: from the self segments), count."""
    out: pd.DataFrame = steps.copy()
    rows = np.flatnonzero(work_ops(ops))
    op_step = ops["step"].to_numpy()
    seg_row, start, end = self_segments(ops, rows)
    seg_step = op_step[seg_row]
    n_ops = pd.Series(op_step[rows]).value_counts()
    g_ts: list[Any] = []
    g_dur: list[Any] = []
    busy: list[int] = []
    for s in out["step"].to_numpy():
        sel = seg_step == s
        busy.append(union_length(start[sel], end[sel]) if sel.any() else 0)
        g_ts.append(int(start[sel].min()) if sel.any() else pd.NA)
        g_dur.append(int(end[sel].max() - start[sel].min()) if sel.any() else pd.NA)
    out["gpu_ts"] = pd.array(g_ts, dtype="Int64")
    out["gpu_dur"] = pd.array(g_dur, dtype="Int64")
    out["gpu_busy"] = np.asarray(busy, dtype=np.int64)
    out["kernel_count"] = np.asarray(
        [int(n_ops.get(s, 0)) for s in out["step"].to_numpy()], dtype=np.int64
    )
    return out


def not_cpu_run(trace: Any) -> str | None:
    """Why ``trace`` (a :class:`tracekit.parse.Trace`) cannot be read as a CPU run, or None
    when it is one: no GPU activity, CPU operators, and no sign that the work ran on a
    GPU (a run manifest's ``device.type`` other than ``cpu``, or CUDA/HIP runtime calls)."""
    if len(trace.kernels):
        return "it has GPU activity"
    ops = trace.ops
    if not len(ops) or not (ops["category"].astype(str) == "cpu_op").any():
        return "a trace without GPU activity and without CPU operators: nothing to report"
    man = manifest_or_empty(trace.manifest if isinstance(trace.manifest, Mapping) else None)
    dev = (man.device or {}).get("type")
    if dev is not None and dev != "cpu":
        return (
            f"the run's device is {dev!r} (manifest) but the trace has no kernel, memcpy or "
            "memset events: the profiler recorded no GPU activity"
        )
    if dev is None and len(trace.runtime):
        return (
            f"no kernel, memcpy or memset events, yet the host made {len(trace.runtime)} "
            "CUDA/HIP runtime calls: the GPU activity is missing from the trace"
        )
    return None


def cpu_view(trace: Any) -> Any:
    """``trace`` with the work operators as its kernels and its steps' GPU columns filled
    from them; ``activity`` ``'cpu'``. Call it on a CPU run (:func:`not_cpu_run` is None)."""
    acts = cpu_activities(trace.ops)
    return replace(trace, kernels=acts, steps=cpu_steps(trace.steps, trace.ops), activity="cpu")


def device_label(manifest: Any) -> str:
    """The CPU as the report names it: ``CPU (x86_64, 8 threads)`` from a run manifest's
    ``device`` (its ``name`` and intra-op ``threads``), else ``CPU``."""
    man = read_manifest(manifest) if isinstance(manifest, Mapping) else None
    dev = man.device if man is not None else None
    if dev is None:
        return "CPU"
    what = [str(dev["name"])] if dev.get("name") else []
    if isinstance(dev.get("threads"), int):
        what.append(f"{dev['threads']} thread{'s' if dev['threads'] != 1 else ''}")
    return f"CPU ({', '.join(what)})" if what else "CPU"


CPU_NOTE = "CPU run:"  # how the CPU view's note begins (a classification of a CPU run)


def cpu_note(trace: Any) -> str:
    """The report's note on the rule, with the counts of this trace's CPU view."""
    acts = trace.kernels
    n_ops = int((trace.ops["category"].astype(str) == "cpu_op").sum())
    threads = int(acts["stream"].nunique()) if len(acts) else 0
    return (
        f"{CPU_NOTE} {len(acts)} work operators of {n_ops} stand in for kernels, on "
        f"{threads} thread(s) (rule: {RULE}); see docs/report.md#cpu-runs"
    )
