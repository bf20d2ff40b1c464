"""Kernel FLOPs and bytes from the operators that launched them.

FLOPs and bytes are modelled per *operator* (:mod:`tracekit.classify.costs`). A kernel
carries a share of the cost of its **cost operator**: the innermost operator that
launched it if that operator has a model, else the nearest ancestor of the same class
that has one. Where an operator launches several kernels (a GEMM and its split-K
reduction, a cuDNN convolution and its offset kernels) its totals are **split over
its kernels in proportion to their durations**, so the kernels' shares sum to the
operator's total and every kernel of an operator has the operator's intensity. (The
alternative — attributing everything to the longest kernel — would give the helper
kernels zero bytes and an undefined intensity.) A data-movement kernel (``layout``: a
convolution's NCHW↔NHWC transform) takes bytes but no FLOPs of another class's
operator. memcpy/memset records carry their own byte count (device-to-device copies
count read + write). Measured counters replace the
modelled numbers kernel by kernel (:mod:`tracekit.classify.measured`), with the modelled
ones kept alongside.
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracekit.classify.classes import OpContext, match_op, op_context
from tracekit.classify.codes import text
from tracekit.classify.columns import KernelColumns, take
from tracekit.classify.costs import OpCosts, model_op_costs, op_cost
from tracekit.classify.families.inputs import LIST_SIZES_UNKNOWN
from tracekit.classify.families.registry import DATA_MOVEMENT_CLASSES
from tracekit.classify.params import MTA_CHUNK, ParamLists, trace_params

NAN = math.nan
MAX_COST_HOPS = 6  # how far up the operator tree a kernel looks for its cost operator
LIST_BYTES = 4  # element size assumed for tensor lists whose kernels do not reveal it


def cost_ops(
    kernels: pd.DataFrame,
    ops: pd.DataFrame,
    kcls: np.ndarray,
    list_bytes: int,
    n_params: int | None = None,
    ctx: OpContext | None = None,
    names: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, OpCosts]:
    """Row position in ``ops`` of each kernel's cost operator and of its innermost
    operator (-1: none), and the op costs.

    Optimizer tensor lists whose shapes the profiler dropped get ``n_params`` elements
    each when the op runs once per step inside ``Optimizer.step`` (one parameter group:
    its lists hold every parameter, gradient or state). ``names``: the kernel names as
    an object array, if already at hand.
    """
    n = len(kernels)
    if ops is None or not len(ops) or "op_id" not in kernels:
        none = np.full(n, -1, dtype=np.int64)
        return (
            none,
            none.copy(),
            model_op_costs(ops.iloc[:0] if ops is not None else pd.DataFrame({"name": []})),
        )
    ctx = ctx if ctx is not None else op_context(ops)
    pos = ctx.ids.get_indexer(pd.Index(kernels["op_id"].to_numpy(dtype=np.int64)))
    pos = pos.astype(np.int64)
    # only the launching ops and a few ancestors need a cost
    need = np.zeros(len(ops), dtype=bool)
    cur = np.unique(pos[pos >= 0])
    for _ in range(MAX_COST_HOPS + 1):
        need[cur] = True
        cur = ctx.ppos[cur]
        cur = cur[cur >= 0]  # repeats are harmless (and never more than the kernels)
        if not len(cur):
            break
    cost = model_op_costs(ops, list_bytes=list_bytes, only=need)
    if names is None:
        names = kernels["name"].to_numpy(dtype=object)
    _refine_lists(ops, cost, ctx, kernels, names, pos, n_params)
    finite = np.isfinite(cost.flops) | np.isfinite(cost.bytes)
    anchor = np.full(n, -1, dtype=np.int64)
    cur = pos.copy()
    for level in range(MAX_COST_HOPS + 1):
        valid = (cur >= 0) & (anchor < 0)
        if not valid.any():
            break
        idx = np.flatnonzero(valid)
        c = cur[idx]
        ok = finite[c]
        if level > 0:  # an ancestor carries the cost only if it is of the kernel's class
            ok &= ctx.cls[ctx.own[c]] == kcls[idx]
        anchor[idx[ok]] = c[ok]
        cur = np.where(cur >= 0, ctx.ppos[np.maximum(cur, 0)], -1)
    return anchor, pos, cost


_ELEM_RE = re.compile(
    r"OpaqueType<(\d+)u?>|(?:Functor|Metadata)\w*<(float|double|c10::BFloat16|c10::Half)\b"
)
_ELEM_BYTES = {"float": 4, "double": 8, "c10::BFloat16": 2, "c10::Half": 2}
_ONE_PER_GROUP = ("aten::_foreach_addcdiv_", "aten::_foreach_lerp_", "aten::_fused_adamw_",
                  "aten::_fused_adam_")  # fmt: skip


@functools.lru_cache(maxsize=4096)
def _name_element_size(name: str) -> int | None:
    m = _ELEM_RE.search(name)
    if m is None:
        return None
    return int(m.group(1)) if m.group(1) else _ELEM_BYTES[m.group(2)]


def _element_size(names: list[str]) -> int | None:
    """Element size of copy/multi-tensor kernels from their template arguments, if unique."""
    sizes = {_name_element_size(nm) for nm in names} - {None}
    return sizes.pop() if len(sizes) == 1 else None


def _refine_lists(
    ops: pd.DataFrame,
    cost: OpCosts,
    ctx: OpContext,
    kernels: pd.DataFrame,
    names: np.ndarray,
    kpos: np.ndarray,
    n_params: int | None,
) -> None:
    """Tensor-list ops (optimizer steps, cat): the profiler records no dtype for lists and
    drops the shapes of long ones. Take the element size from the ops' kernels' template
    arguments (``OpaqueType<2u>``, ``BinaryOpListAlphaFunctor<float, …>``); give optimizer
    lists without shapes a size (:func:`_list_size`): the manifest's parameter count, else
    the parameter sizes the trace's AccumulateGrad calls show
    (:mod:`tracekit.classify.params`). Updates ``cost`` in place."""
    note_arr = cost.cost_note
    cand = np.zeros(len(note_arr), dtype=bool)
    has = np.flatnonzero(cost.has_model)
    cand[has] = [("tensor-list" in str(x)) for x in note_arr[has]]
    if not cand.any():
        return
    grid = (
        kernels["grid_x"].fillna(0).to_numpy(dtype=float)
        if "grid_x" in kernels
        else np.zeros(len(kernels))
    )
    sel = np.flatnonzero((kpos >= 0) & cand[np.maximum(kpos, 0)])
    by_op: dict[int, list[str]] = {}  # list op -> its kernels' names
    for kp, nm in zip(kpos[sel].tolist(), names[sel].tolist(), strict=True):
        by_op.setdefault(kp, []).append(nm)
    blocks = np.zeros(len(ops))
    np.add.at(blocks, kpos[sel], grid[sel])  # in kernel order, like a running sum
    mta = np.array(["multi_tensor_apply" in str(nm) for nm in names[sel]], dtype=bool)
    mta_blocks = np.zeros(len(ops))
    np.add.at(mta_blocks, kpos[sel][mta], grid[sel][mta])
    lists = ListSizes(n_params if n_params and _one_param_group(ops) else None, trace_params(ops))
    idx = np.array(sorted(by_op), dtype=np.int64)
    rec = {
        c: dict(zip(idx.tolist(), ops[c].iloc[idx].astype(object).tolist(), strict=True))
        if c in ops
        else {}
        for c in ("name", "input_dims", "input_types", "concrete_inputs")
    }
    upd_i: list[int] = []
    upd: list[tuple[float, float, str]] = []
    for i, kn in by_op.items():
        ksize = size = _element_size(kn)
        numel, origin = None, ""
        if str(note_arr[i]).startswith(LIST_SIZES_UNKNOWN):
            in_step = str(ctx.rule[ctx.anc[i]]).startswith("op:^Optimizer")
            numel, origin, psize = lists.size(blocks[i], mta_blocks[i], in_step)
            size = ksize if ksize is not None or numel is None else psize
        if size is not None or numel is not None:
            u = _list_cost(rec, i, size, numel, origin, from_kernels=ksize is not None)
            if u is not None:
                upd_i.append(i)
                upd.append(u)
    if upd_i:
        rows = np.array(upd_i)
        cost.flops_model[rows] = [u[0] for u in upd]
        cost.flops[rows] = [u[0] for u in upd]
        cost.bytes[rows] = [u[1] for u in upd]
        cost.source[rows] = "modelled"
        cost.cost_note[rows] = [u[2] for u in upd]


@dataclass(frozen=True)
class ListSizes:
    """Where an optimizer list without recorded shapes gets its size: ``n_params`` (the
    manifest's parameter count, with one parameter group) or the trace's parameters."""

    n_params: int | None
    params: ParamLists | None

    def size(
        self, blocks: float, mta_blocks: float, in_step: bool
    ) -> tuple[int | None, str, int | None]:
        """Elements per list, the note saying where they came from, and the parameters'
        element size (trace only). The manifest's count applies inside ``Optimizer.step``
        to lists whose kernels ran enough 64 Ki-element blocks to cover it; the trace's
        candidates to lists whose multi_tensor_apply kernels ran exactly their blocks."""
        if self.n_params and in_step and blocks * MTA_CHUNK >= 0.5 * self.n_params:
            return self.n_params, " (the model's parameter count, from the manifest)", None
        if self.params is not None and int(mta_blocks) in self.params.by_blocks:
            numel, what = self.params.by_blocks[int(mta_blocks)]
            note = f" (sizes of the {what} from the trace's AccumulateGrad calls)"
            return numel, note, self.params.itemsize
        return None, "", None


def _one_param_group(ops: pd.DataFrame) -> bool:
    """Whether the optimizer ran one parameter group: at most one addcdiv/lerp/fused-AdamW
    call of each kind per step."""
    step = ops["step"] if "step" in ops else pd.Series(0, index=ops.index)
    per_group = ops[ops["name"].isin(_ONE_PER_GROUP)]
    counts = per_group.groupby([step[per_group.index], per_group["name"]]).size()
    return not len(counts) or int(counts.max()) == 1


def _list_cost(
    rec: dict[str, dict[int, object]],
    i: int,
    size: int | None,
    numel: int | None,
    origin: str,
    *,
    from_kernels: bool,
) -> tuple[float, float, str] | None:
    """FLOPs, bytes and note of list op ``i`` modelled again with the element size (from its
    kernels' names, or the parameters' dtype) and/or the elements per list (None: still
    unknown)."""
    c = op_cost(
        str(rec["name"][i]),
        text(rec["input_dims"].get(i)),
        text(rec["input_types"].get(i)),
        text(rec["concrete_inputs"].get(i)),
        size or LIST_BYTES,
        numel,
    )
    if c is None or not math.isfinite(c.bytes):
        return None
    note = c.note
    if size is not None:
        where = "the kernel names" if from_kernels else "the parameters' dtype"
        note = note.replace(
            f"tensor-list dtype not recorded by the profiler: {size} B/element assumed",
            f"tensor-list element size {size} B from {where}",
        )
    return c.flops, c.bytes, note + origin


def split_by_duration(
    anchor: np.ndarray, dur: np.ndarray, total: np.ndarray, takes: np.ndarray | None = None
) -> np.ndarray:
    """Each kernel's share of its cost operator's total, by duration. ``takes``: which
    kernels take a share (the others get 0), unless none of the operator's does."""
    out = np.full(len(anchor), NAN)
    has = anchor >= 0
    if not has.any():
        return out
    a = anchor[has]
    d = dur[has].astype(float)
    codes, _ = pd.factorize(a)
    if takes is not None:
        t = takes[has]
        some = np.bincount(codes, weights=t.astype(float)) > 0
        d = np.where(t | ~some[codes], d, 0.0)
        mask = t | ~some[codes]
    else:
        mask = np.ones(len(d), dtype=bool)
    dsum = np.bincount(codes, weights=d)
    cnt = np.bincount(codes, weights=mask.astype(float))
    share = np.where(
        dsum[codes] > 0, d / np.where(dsum[codes] > 0, dsum[codes], 1.0), mask / cnt[codes]
    )
    out[has] = total[a] * share
    return out


def takes_flops(kcls: np.ndarray, anchor: np.ndarray, op_names: np.ndarray) -> np.ndarray:
    """Whether each kernel takes a share of its cost operator's FLOPs: not a data-movement
    kernel (a layout transform) launched by an operator of another class (a convolution's
    NCHW↔NHWC conversions carry bytes, not the convolution's FLOPs)."""
    mover = np.isin(kcls.astype(object), list(DATA_MOVEMENT_CLASSES)) & (anchor >= 0)
    if not mover.any():
        return np.ones(len(anchor), dtype=bool)
    codes, uniq = pd.factorize(pd.Series(op_names[mover], dtype=object))
    op_cls = np.array([match_op(str(u)).cls for u in uniq], dtype=object)[codes]
    out = np.ones(len(anchor), dtype=bool)
    out[np.flatnonzero(mover)[op_cls != kcls[mover]]] = False
    return out


@dataclass
class KernelCosts:
    """FLOPs and bytes of every kernel (aligned with the kernels table) and where they came
    from. ``flops_model``/``bytes_model`` keep the modelled figures when measured counters
    replace ``flops``/``bytes`` (``l2_bytes`` and ``extrapolated`` are the counters')."""

    flops: np.ndarray
    bytes: np.ndarray
    source: np.ndarray  # 'modelled' | 'profiler' | 'measured' | 'none'
    note: np.ndarray
    dtype: np.ndarray  # compute dtype of the cost operator
    op_name: np.ndarray  # the cost operator's name (None: none)
    op_id: np.ndarray  # the cost operator's op_id (-1: none)
    is_copy: np.ndarray  # memcpy/memset records
    host_copy: np.ndarray  # host<->device transfers: not judged against DRAM
    flops_model: np.ndarray
    bytes_model: np.ndarray
    l2_bytes: np.ndarray
    extrapolated: np.ndarray


def kernel_costs(
    k: KernelColumns,
    ops: pd.DataFrame,
    kcls: np.ndarray,
    ctx: OpContext | None,
    n_params: int | None,
) -> KernelCosts:
    """Each kernel's share of its cost operator's modelled cost (memcpy/memset: their own
    byte count; device-to-device copies read and write)."""
    anchor, inner, cost = cost_ops(k.frame, ops, kcls, LIST_BYTES, n_params, ctx, k.names)
    is_copy = np.isin(k.kind, ("memcpy", "memset"))
    anchor[is_copy] = -1  # copies carry their own byte count, not a share of an op
    op_name = take(ops.get("name"), anchor, None)
    flops = split_by_duration(anchor, k.dur, cost.flops, takes_flops(kcls, anchor, op_name))
    nbytes = split_by_duration(anchor, k.dur, cost.bytes)
    src = take(cost.source, anchor, "none")
    src[~(np.isfinite(flops) | np.isfinite(nbytes))] = "none"
    note = take(cost.cost_note, anchor, "")
    why = take(cost.cost_note, inner, "")  # why a kernel without a cost operator has none
    note = np.where(anchor >= 0, note, why).astype(object)
    op_id = np.full(k.n, -1, dtype=np.int64)
    if len(ops):
        has = anchor >= 0
        op_id[has] = ops["op_id"].to_numpy(dtype=np.int64)[anchor[has]]
    host_copy = _copies(k, is_copy, flops, nbytes, src, note)
    return KernelCosts(
        flops=flops,
        bytes=nbytes,
        source=src,
        note=note,
        dtype=take(cost.dtype, anchor, None),
        op_name=op_name,
        op_id=op_id,
        is_copy=is_copy,
        host_copy=host_copy,
        flops_model=flops.copy(),
        bytes_model=nbytes.copy(),
        l2_bytes=np.full(k.n, NAN),
        extrapolated=np.zeros(k.n, dtype=bool),
    )


def _copies(
    k: KernelColumns,
    is_copy: np.ndarray,
    flops: np.ndarray,
    nbytes: np.ndarray,
    src: np.ndarray,
    note: np.ndarray,
) -> np.ndarray:
    """memcpy/memset records carry their own byte count (in place); returns which are host
    transfers."""
    kernels, kind = k.frame, k.kind
    copy_bytes = (
        pd.to_numeric(kernels["bytes"], errors="coerce").to_numpy(dtype=float)
        if ("bytes" in kernels)
        else np.full(k.n, NAN)
    )
    dtod = np.zeros(k.n, dtype=bool)
    dtod[kind == "memcpy"] = ["DtoD" in str(x) for x in k.names[kind == "memcpy"]]
    factor = np.where((kind == "memcpy") & dtod, 2.0, 1.0)
    flops[is_copy] = 0.0
    nbytes[is_copy] = copy_bytes[is_copy] * factor[is_copy]
    src[is_copy] = np.where(np.isfinite(nbytes[is_copy]), "profiler", "none")
    host_copy = (kind == "memcpy") & ~dtod
    note[host_copy] = "host transfer: PCIe/NVLink-bound, not judged against DRAM"
    out: np.ndarray = host_copy
    return out


def cost_notes(ops: pd.DataFrame, cost: KernelCosts) -> list[str]:
    """Plain sentences about what the cost model could not determine or assumed."""
    notes = []
    flops, is_copy = cost.flops, cost.is_copy
    if len(ops) and "input_dims" in ops and ops["input_dims"].notna().sum() == 0:
        notes.append("no shapes recorded (record_shapes=False): FLOPs unavailable")
    elif len(ops) and not np.isfinite(flops[~is_copy]).any() and (~is_copy).any():
        notes.append("no kernel could be given FLOPs from the recorded shapes")
    distinct_notes = [str(x) for x in pd.unique(cost.note)]
    if any(x.startswith(LIST_SIZES_UNKNOWN) for x in distinct_notes):
        notes.append(
            "the profiler dropped the shapes of long tensor lists (optimizer steps): their "
            "FLOPs and bytes are unknown unless the manifest gives the parameter count or "
            "their kernels' block counts match the parameters of the trace's AccumulateGrad "
            "calls"
        )
    if any(LIST_SIZES_UNKNOWN + ":" in x and "manifest" in x for x in distinct_notes):
        notes.append(
            "optimizer tensor lists without recorded shapes were given the model's parameter "
            "count (manifest) per list"
        )
    if any(LIST_SIZES_UNKNOWN + ":" in x and "AccumulateGrad" in x for x in distinct_notes):
        notes.append(
            "optimizer tensor lists without recorded shapes were sized from the trace: their "
            "kernels ran the 64 Ki-element blocks of the parameters the AccumulateGrad calls "
            "show"
        )
    if any("B/element assumed" in x for x in distinct_notes):
        notes.append(
            "the profiler does not record the dtype of tensor lists (optimizer "
            "states): fp32 (4 B/element) assumed for their bytes"
        )
    if len(ops) and "flops" in ops and ops["flops"].notna().any():
        notes.append("the trace carries the profiler's own FLOPs (with_flops): used where present")
    return notes
