"""Mixture-of-experts routing: choosing each token's experts (``topk`` over the router's
scores), counting tokens per expert (``histc``, ``bincount``), combining the experts'
outputs (``index_add_``), and the routing/permutation kernels of MoE libraries (vLLM
``moe_align_block_size``, TensorRT-LLM ``moe::dev::routing``, Transformer Engine
``moe_permute``, torchtitan's ``_fill_indices_kernel``, aiter ``moe_sorting``). The
``moe`` class: a MoE layer's overhead next to its expert compute.

The experts' grouped GEMMs (``_grouped_mm``) are ``gemm``: they run on the matrix pipes
and are judged like the other GEMMs (the operator table shows them apart). Token
gathers and scatters through ``index_select``/``gather``/``scatter_add`` cannot be told
from an embedding lookup by name: they stay ``embedding``. All-to-all token exchange is
``communication``.
"""

from __future__ import annotations

from tracekit.classify.families.family import (
    P_GENERIC,
    P_NORMAL,
    ClassSpec,
    Family,
    Rule,
    aten,
)
from tracekit.classify.families.inputs import Cost, Inputs

RULES: tuple[Rule, ...] = (
    Rule(
        aten("topk", "histc", "bincount", r"index_add_?", r"_?moe_\w+"),
        "op",
        "moe",
        P_NORMAL,
        "router top-k, tokens per expert (histc/bincount), combining expert outputs "
        "(index_add_), moe_* operators",
    ),
    Rule(r"^(?:Topk|IndexAdd)Backward\d*$", "op", "moe", P_NORMAL, "autograd nodes"),
    Rule(
        r"(?i)moe_(?:align|sort|sum|permute|unpermute|topk|gating|routing)|moe::dev::routing"
        r"|routingIndices|topk_?gating|topkGating|topk_softmax|token_?dispatch"
        r"|(?:un)?permute_tokens|_fill_indices_kernel|expert_?(?:count|offset|histogram)",
        "kernel",
        "moe",
        P_NORMAL,
        "MoE routing and token permutation kernels (vLLM, TensorRT-LLM, Transformer Engine, "
        "torchtitan, aiter)",
    ),
    Rule(
        r"(?i)topk",
        "kernel",
        "moe",
        P_GENERIC,
        "top-k kernels (gatherTopK, sbtopk/mbtopk): in a training step, a router",
    ),
)

FAMILY = Family(
    "moe",
    classes=(ClassSpec("moe"),),
    rules=RULES,
)


@FAMILY.cost("aten::topk")
def _topk(name: str, x: Inputs) -> Cost | None:
    """``topk(self, k, dim, largest, sorted)``: every element compared once; the values and
    int64 indices of the ``k`` largest along ``dim`` written."""
    t, k, dim = x.tensor(0), x.value(1), x.value(2)
    if t is None or not isinstance(k, int) or isinstance(k, bool):
        return None
    d = dim if isinstance(dim, int) and not isinstance(dim, bool) else -1
    axis = t.shape[d % len(t.shape)] if t.shape else 1
    out = (t.numel // axis if axis else 0) * k
    return Cost(float(t.numel), float(t.nbytes + out * (t.itemsize + 8)), t.dtype)


@FAMILY.cost("aten::histc", "aten::bincount")
def _count(name: str, x: Inputs) -> Cost | None:
    """One add per input element; the counts written (``bins`` for histc)."""
    t = x.tensor(0)
    if t is None:
        return None
    weights = x.tensor(1) if name == "aten::bincount" else None
    bins = x.value(1) if name == "aten::histc" else None
    out = bins if isinstance(bins, int) and not isinstance(bins, bool) else 0
    reads = t.nbytes + (weights.nbytes if weights else 0)
    return Cost(float(t.numel), float(reads + out * max(t.itemsize, 4)), t.dtype)


@FAMILY.cost("aten::index_add_", "aten::index_add")
def _index_add(name: str, x: Inputs) -> Cost | None:
    """``index_add_(self, dim, index, source, alpha)``: each source row added into the row
    of ``self`` its index names (read and written)."""
    src, idx = x.tensor(3), x.tensor(2)
    if src is None or idx is None:
        return None
    return Cost(float(src.numel), float(3 * src.nbytes + idx.nbytes), src.dtype)
