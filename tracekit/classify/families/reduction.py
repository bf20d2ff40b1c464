"""Reductions, scans and sorts, e.g. bias-gradient sums (pooling is its own family)."""

from __future__ import annotations

import math
from typing import Any

from tracekit.classify.families.family import P_GENERIC, P_NORMAL, ClassSpec, Family, Rule, aten
from tracekit.classify.families.inputs import (
    Cost,
    Inputs,
    Tensor,
    elementwise,
    op_base,
)

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
            "sort",
            "argsort",
            "count_nonzero",
            "nonzero",
            r"_?unique\w*",
            "median",
            "mode",
            "kthvalue",
        ),
        "op",
        "reduction",
        P_NORMAL,
        "reductions, scans, sorts, e.g. bias-gradient sums",
    ),
    Rule(
        r"(?i)reduce_kernel|reduction|ReduceOp|cub::|DeviceRadixSort|DeviceReduce|DeviceScan"
        r"|radix_?sort|segmented|bitonic|scan_kernel|cumsum|argmax|norm_kernel",
        "kernel",
        "reduction",
        P_GENERIC,
        "generic reduction templates (reduce_kernel<…>), CUB sorts/scans",
    ),
)

FUSED_RULES: tuple[Rule, ...] = (
    Rule(
        r"(?:^| )(?:sum|mean|amax|amin|max|min|var|var_mean|std|argmax|argmin|prod|logsumexp"
        r"|norm|linalg_vector_norm|cumsum|any|all)(?: |$)",
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

# FLOPs per element (a transcendental counts 1). Documented in docs/classify.md.
PER_ELEMENT: dict[str, float] = {
    # reductions, per input element
    "sum": 1, "mean": 1, "amax": 1, "amin": 1, "max": 1, "min": 1, "prod": 1, "any": 0,
    "all": 0, "argmax": 1, "argmin": 1, "var": 3, "std": 3, "var_mean": 3, "std_mean": 3,
    "norm_reduce": 2, "logsumexp": 3, "cumsum": 1,
}  # fmt: skip

FAMILY = Family(
    "reduction",
    classes=(ClassSpec("reduction"),),
    rules=RULES,
    fused_rules=FUSED_RULES,
    fused_vocab=(
        "var_mean",
        "linalg_vector_norm",
    ),
    per_element=PER_ELEMENT,
)


def _reduce_out(t: Tensor, dims: Any, keep: Any) -> int | None:
    if dims is None or dims == []:
        return 1
    if isinstance(dims, bool):
        return None
    if isinstance(dims, int):
        dims = [dims]
    if not isinstance(dims, list) or not all(isinstance(d, int) for d in dims):
        return None
    nd = len(t.shape)
    red = {d % nd for d in dims} if nd else set()
    return math.prod(s for i, s in enumerate(t.shape) if i not in red)


# position of the ``dim`` argument of each reduction
_REDUCE = {
    "sum": 1,
    "mean": 1,
    "amax": 1,
    "amin": 1,
    "prod": 1,
    "any": 1,
    "all": 1,
    "argmax": 1,
    "argmin": 1,
    "var": 1,
    "std": 1,
    "var_mean": 1,
    "std_mean": 1,
    "logsumexp": 1,
    "linalg_vector_norm": 2,
    "norm": 2,
    "max": 1,
    "min": 1,
}


@FAMILY.cost(*(f"aten::{n}" for n in _REDUCE), "aten::cumsum")
def _reduce(name: str, x: Inputs) -> Cost | None:
    t = x.tensor(0)
    if t is None:
        return None
    base = op_base(name)
    key = "norm_reduce" if base in ("norm", "linalg_vector_norm") else base
    flops = PER_ELEMENT.get(key, 1.0) * t.numel
    if base == "cumsum":
        return Cost(flops, float(2 * t.nbytes), t.dtype)
    if base in ("max", "min") and x.tensor(1) is not None:  # max(a, b) is element-wise
        return elementwise(x, 1.0)
    dim_at = _REDUCE[base]
    if len(x) <= 2 and dim_at == 1:  # sum(self, dtype), mean(self, dtype), max(self): all
        out: int | None = 1
    else:
        out = _reduce_out(t, x.value(dim_at), None)
    note = "" if out is not None else "reduced dims not recorded: output bytes not counted"
    nbytes = t.nbytes + (out or 0) * t.itemsize
    return Cost(flops, float(nbytes), t.dtype, note)
