"""Reductions, scans, sorts and pooling (a windowed reduction), e.g. bias-gradient sums."""

from __future__ import annotations

import math
from typing import Any

from tracekit.classify.families.family import P_GENERIC, P_NORMAL, ClassSpec, Family, Rule, aten
from tracekit.classify.families.inputs import (
    NAN,
    Cost,
    Inputs,
    Tensor,
    conv_out,
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
        "max_pool2d_with_indices",
        "max_pool2d_with_indices_backward",
        "avg_pool2d",
        "avg_pool2d_backward",
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


@FAMILY.cost(
    "aten::max_pool2d_with_indices",
    "aten::avg_pool2d",
    "aten::max_pool3d_with_indices",
    "aten::avg_pool3d",
)
def _pool(name: str, x: Inputs) -> Cost | None:
    t = x.tensor(0)
    if t is None or len(t.shape) < 3:
        return None
    nsp = 3 if "3d" in name else 2
    ks, st = x.ints(1, nsp), x.ints(2, nsp)
    pad = x.ints(3, nsp) or [0] * nsp
    dil = x.ints(4, nsp) if "max" in name else [1] * nsp
    if ks is None:
        return Cost(NAN, NAN, t.dtype, "pool: kernel size not recorded")
    st = st or ks
    dil = dil or [1] * nsp
    sp = t.shape[-nsp:]
    out_sp = [conv_out(i, k, s, p, d) for i, k, s, p, d in zip(sp, ks, st, pad, dil, strict=True)]
    out = math.prod(t.shape[:-nsp]) * math.prod(out_sp)
    idx = 8 * out if "max" in name else 0
    return Cost(float(out * math.prod(ks)), float(t.nbytes + out * t.itemsize + idx), t.dtype)


@FAMILY.cost(
    "aten::max_pool2d_with_indices_backward",
    "aten::max_pool3d_with_indices_backward",
    "aten::avg_pool2d_backward",
    "aten::_adaptive_avg_pool2d_backward",
    "aten::adaptive_max_pool2d_backward",
)
def _pool_bwd(name: str, x: Inputs) -> Cost | None:
    g, t = x.tensor(0), x.tensor(1)
    if g is None or t is None:
        return None
    idx = x.tensor(7) if "max_pool" in name else None
    flops = float(max(g.numel, t.numel))
    return Cost(flops, float(g.nbytes + (idx.nbytes if idx else 0) + t.nbytes), g.dtype)


@FAMILY.cost("aten::_adaptive_avg_pool2d", "aten::adaptive_avg_pool2d")
def _adaptive_pool(name: str, x: Inputs) -> Cost | None:
    t = x.tensor(0)
    if t is None or len(t.shape) < 3:
        return None
    size = x.ints(1, 2)
    if size is None:
        return Cost(float(t.numel), float(t.nbytes), t.dtype, "output size not recorded")
    out = math.prod(t.shape[:-2]) * math.prod(size)
    return Cost(float(t.numel), float(t.nbytes + out * t.itemsize), t.dtype)
