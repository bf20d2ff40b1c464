"""Embedding lookups and their backward, gather/index/scatter."""

from __future__ import annotations

from tracekit.classify.families.family import P_NORMAL, ClassSpec, Family, Rule, aten
from tracekit.classify.families.inputs import (
    Cost,
    Inputs,
)

RULES: tuple[Rule, ...] = (
    Rule(
        aten(
            "embedding",
            "embedding_backward",
            "embedding_dense_backward",
            r"_embedding_bag\w*",
            "embedding_bag",
            "embedding_renorm_",
            "index_select",
            "gather",
            r"scatter_?",
            r"scatter_add_?",
            r"scatter_reduce_?",
            "index",
            r"index_put_?",
            "_index_put_impl_",
            "take",
            "take_along_dim",
            r"_unsafe_index\w*",
            "one_hot",
            "index_select_backward",
            "gather_backward",
        ),
        "op",
        "embedding",
        P_NORMAL,
        "embedding lookups and their backward, gather/index/scatter",
    ),
    Rule(
        r"^(?:Embedding|EmbeddingBag|IndexSelect|Gather|Scatter\w*|Index\w*)Backward\d*$",
        "op",
        "embedding",
        P_NORMAL,
        "autograd nodes",
    ),
    Rule(
        r"indexSelect|index_select|embedding_backward|EmbeddingBag|embedding_bag|gather_kernel"
        r"|scatter_kernel|scatter_gather|index_elementwise_kernel|index_put_kernel"
        r"|indexing_backward|krn_partials_per_segment|compute_grad_weight"
        r"|sum_and_scatter|renorm_kernel|(?<!rotary_)embedding_kernel",
        "kernel",
        "embedding",
        P_NORMAL,
        "gather/scatter/index kernels",
    ),
)

FUSED_RULES: tuple[Rule, ...] = (
    Rule(
        r"(?:^| )(?:embedding|embedding_dense_backward|index_select)(?: |$)",
        "fused",
        "embedding",
        65,
        "embedding lookups",
    ),
)

FAMILY = Family(
    "embedding",
    classes=(ClassSpec("embedding"),),
    rules=RULES,
    fused_rules=FUSED_RULES,
    fused_vocab=(
        "embedding_dense_backward",
        "index_select",
        "index_put",
        "index_add",
        "_unsafe_index",
        "_unsafe_index_put",
        "scatter_add",
        "scatter_reduce",
    ),
)


@FAMILY.cost("aten::embedding")
def _embedding(name: str, x: Inputs) -> Cost | None:
    w, idx = x.tensor(0), x.tensor(1)
    if w is None or idx is None or len(w.shape) != 2:
        return None
    rows = idx.numel * w.shape[1] * w.itemsize
    # only the rows looked up are read (not the whole table), each written once
    return Cost(0.0, float(2 * rows + idx.nbytes), w.dtype, "reads only the gathered rows")


@FAMILY.cost("aten::embedding_dense_backward")
def _embedding_bwd(name: str, x: Inputs) -> Cost | None:
    g, idx = x.tensor(0), x.tensor(1)
    if g is None or idx is None or not g.shape:
        return None
    # scatter-add of every gradient row into the (separately zeroed) weight gradient
    return Cost(
        float(g.numel),
        float(2 * g.nbytes + idx.nbytes),
        g.dtype,
        "scatter-add of gradient rows; zeroing counted under its own fill",
    )


@FAMILY.cost("aten::index_select")
def _index_select(name: str, x: Inputs) -> Cost | None:
    t, idx = x.tensor(0), x.tensor(2)
    dim = x.value(1)
    if t is None or idx is None or not isinstance(dim, int) or not t.shape:
        return None
    row = t.numel // t.shape[dim % len(t.shape)] if t.shape[dim % len(t.shape)] else 0
    out = idx.numel * row
    return Cost(0.0, float(2 * out * t.itemsize + idx.nbytes), t.dtype)


@FAMILY.cost("aten::gather")
def _gather(name: str, x: Inputs) -> Cost | None:
    t, idx = x.tensor(0), x.tensor(2)
    if t is None or idx is None:
        return None
    return Cost(0.0, float(2 * idx.numel * t.itemsize + idx.nbytes), t.dtype)
