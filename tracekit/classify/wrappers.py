"""A CPU run's cost counted once: a wrapper operator carries none of its children's cost.

On a CPU run every work operator is a kernel row (:mod:`tracekit.parse.cpuview`) and each
row is costed from its own operator's shapes. Composite operators dispatch to others that
do the work: ``aten::linear`` to ``aten::addmm``, ``aten::matmul`` to ``aten::mm`` or
``aten::bmm``, ``aten::softmax`` to ``aten::_softmax``. Costed from its shapes, the
composite would count its child's FLOPs and bytes a second time. The rule
(:func:`count_once`):

* an operator below which another operator carries FLOPs is a **wrapper**: its FLOPs and
  bytes are zero (the innermost operator with FLOPs carries them);
* an operator without FLOPs of its own below which another carries bytes (``aten::clone``
  over ``aten::copy_``) carries no bytes;
* an operator with FLOPs keeps its bytes even when a child copies (``aten::addmm``'s bias).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.classify.attribution import KernelCosts
from tracekit.classify.classes import OpContext

WRAPPER_NOTE = "wrapper operator: the operators it calls carry its FLOPs and bytes"


def ancestors_of(ppos: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Mask over the operators: which are a strict ancestor of an operator at ``rows``."""
    mark = np.zeros(len(ppos), dtype=bool)
    cur = ppos[rows[rows >= 0]] if len(rows) else np.zeros(0, dtype=np.int64)
    while len(cur):
        cur = np.unique(cur[cur >= 0])
        cur = cur[~mark[cur]]
        mark[cur] = True
        cur = ppos[cur]
    return mark


def count_once(op_ids: np.ndarray, ctx: OpContext, cost: KernelCosts) -> int:
    """Apply the rule of the module doc to ``cost`` in place, for kernel rows that are the
    operators ``op_ids`` (a CPU view); returns how many rows became wrappers."""
    pos = ctx.ids.get_indexer(pd.Index(op_ids)).astype(np.int64)
    has = pos >= 0
    flops = np.nan_to_num(cost.flops, nan=0.0) > 0
    nbytes = np.nan_to_num(cost.bytes, nan=0.0) > 0
    over_flops = ancestors_of(ctx.ppos, pos[has & flops])
    over_bytes = ancestors_of(ctx.ppos, pos[has & nbytes])
    at = np.maximum(pos, 0)
    wrapper = has & over_flops[at]
    copier = has & ~wrapper & ~flops & over_bytes[at]
    for arr in (cost.flops, cost.flops_model):
        arr[wrapper] = 0.0
    for arr in (cost.bytes, cost.bytes_model):
        arr[wrapper | copier] = 0.0
    cost.note[wrapper] = WRAPPER_NOTE
    return int(wrapper.sum())
