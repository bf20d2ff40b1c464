"""Reductions, scans, sorts and pooling (a windowed reduction), e.g. bias-gradient sums."""

from __future__ import annotations

from tracekit.classify.families.family import P_GENERIC, P_NORMAL, ClassSpec, Family, Rule, aten

RULES: tuple[Rule, ...] = (
    Rule(
        aten(
            "sum",
            "mean",
            "amax",
            "amin",
            "max",
            "min",
            "aminmax",
            "var",
            "std",
            "var_mean",
            "std_mean",
            "norm",
            "linalg_vector_norm",
            "prod",
            "argmax",
            "argmin",
            "all",
            "any",
            "logsumexp",
            "cumsum",
            r"cumsum_",
            "cumprod",
            "topk",
            "sort",
            "argsort",
            r"max_pool\dd",
            r"max_pool\dd_with_indices",
            r"max_pool\dd_with_indices_backward",
            r"avg_pool\dd",
            r"avg_pool\dd_backward",
            r"adaptive_avg_pool\dd",
            r"_adaptive_avg_pool\dd",
            r"_adaptive_avg_pool\dd_backward",
            r"adaptive_max_pool\dd\w*",
            "count_nonzero",
            "nonzero",
            r"_?unique\w*",
            "bincount",
            "histc",
            "median",
            "mode",
            "kthvalue",
        ),
        "op",
        "reduction",
        P_NORMAL,
        "reductions, scans, sorts, pooling (a windowed reduction), e.g. bias-gradient sums",
    ),
    Rule(
        r"(?i)reduce_kernel|reduction|ReduceOp|cub::|DeviceRadixSort|DeviceReduce|DeviceScan"
        r"|radix_?sort|segmented|max_pool|avg_pool|adaptive_av\w*pool|adaptive_max|pool_forward"
        r"|pool_backward|topk|bitonic|scan_kernel|cumsum|argmax|norm_kernel",
        "kernel",
        "reduction",
        P_GENERIC,
        "generic reduction templates (reduce_kernel<…>), CUB sorts/scans, pooling",
    ),
)

FUSED_RULES: tuple[Rule, ...] = (
    Rule(
        r"(?:^| )(?:sum|mean|amax|amin|max|min|var|var_mean|std|argmax|argmin|prod|logsumexp"
        r"|norm|linalg_vector_norm|cumsum|any|all|max_pool\w*|avg_pool\w*)(?: |$)",
        "fused",
        "reduction",
        40,
        "reductions",
    ),
    Rule(
        r"^<(?:red|per)>",
        "fused",
        "reduction",
        10,
        "triton_red_/triton_per_ without a known op name: a reduction",
    ),
)

FAMILY = Family(
    "reduction",
    classes=(ClassSpec("reduction"),),
    rules=RULES,
    fused_rules=FUSED_RULES,
    fused_vocab=(
        "var_mean",
        "linalg_vector_norm",
        "max_pool2d_with_indices",
        "max_pool2d_with_indices_backward",
        "avg_pool2d",
        "avg_pool2d_backward",
    ),
)
