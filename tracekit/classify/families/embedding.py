"""Embedding lookups and their backward, gather/index/scatter."""

from __future__ import annotations

from tracekit.classify.families.family import P_NORMAL, ClassSpec, Family, Rule, aten

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
            r"index_add_?",
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
