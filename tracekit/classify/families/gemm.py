"""GEMM: matrix products (incl. the grouped GEMMs of mixture-of-experts layers), and the
library kernels that run them (cuBLAS/cuBLASLt, CUTLASS, rocBLAS/Tensile, hipBLASLt,
Composable Kernel). Convolutions are their own family (:mod:`.convolution`).

Costs: ``2·M·N·K`` (+ ``M·N`` per bias/epilogue).
"""

from __future__ import annotations

import math

from tracekit.classify.families.family import P_NORMAL, ClassSpec, Family, Rule, aten
from tracekit.classify.families.inputs import (
    SCALAR_TYPE,
    Cost,
    Inputs,
    Tensor,
    broadcast,
)

RULES: tuple[Rule, ...] = (
    Rule(
        aten(
            "mm",
            "addmm",
            "bmm",
            "baddbmm",
            "addbmm",
            "matmul",
            "linear",
            "mv",
            "addmv",
            "dot",
            "vdot",
            "_addmm_activation",
            "_scaled_mm",
            "_int_mm",
            "einsum",
            "tensordot",
            "bilinear",
            "linear_backward",
            "_grouped_mm",
            "_scaled_grouped_mm",
        ),
        "op",
        "gemm",
        P_NORMAL,
        "matrix products (and their backward pieces: mm, bmm)",
    ),
    Rule(
        r"(?i)gemm|gemv|Cijk_|nvjet|xmma|cublas|hipblaslt|rocblas|tensile|splitKreduce"
        r"|wvSplitK|^bmm_|matmul|epilogue::impl",
        "kernel",
        "gemm",
        P_NORMAL,
        "cuBLAS(Lt)/CUTLASS/nvjet/xmma, rocBLAS/Tensile Cijk_, hipBLASLt and GEMM "
        "epilogue/split-K kernels (convolution kernels are matched first, by the "
        "convolution family)",
    ),
    Rule(
        r"^(?:void )?ck(?:_tile)?::.*[Gg]emm|_ZN2ck\w*[Gg]emm",
        "kernel",
        "gemm",
        P_NORMAL,
        "Composable Kernel GEMM (demangled or mangled)",
    ),
)

FUSED_RULES: tuple[Rule, ...] = (
    Rule(r"^<tem>", "fused", "gemm", 100, "triton_tem_*: Inductor GEMM templates"),
    Rule(
        r"(?:^| )(?:mm|addmm|bmm|baddbmm|_scaled_mm|_grouped_mm)(?: |$)",
        "fused",
        "gemm",
        90,
        "a matrix product fused with its epilogue",
    ),
)

FAMILY = Family(
    "gemm",
    classes=(ClassSpec("gemm", matrix=True),),
    rules=RULES,
    fused_rules=FUSED_RULES,
    fused_vocab=(
        "_scaled_mm",
        "_grouped_mm",
    ),
)


def _gemm(
    a: Tensor, b: Tensor, m: int, n: int, k: int, batch: int, extra: list[Tensor], epilogue: int
) -> Cost:
    flops = 2.0 * batch * m * n * k + epilogue * batch * m * n
    nbytes = a.nbytes + b.nbytes + sum(t.nbytes for t in extra) + batch * m * n * a.itemsize
    return Cost(flops, float(nbytes), a.dtype)


@FAMILY.cost("aten::mm")
def _mm(name: str, x: Inputs) -> Cost | None:
    a, b = x.tensor(0), x.tensor(1)
    if a is None or b is None or len(a.shape) != 2 or len(b.shape) != 2:
        return None
    (m, k), (_, n) = a.shape, b.shape
    return _gemm(a, b, m, n, k, 1, [], 0)


@FAMILY.cost("aten::addmm", "aten::_addmm_activation")
def _addmm(name: str, x: Inputs) -> Cost | None:
    c, a, b = x.tensor(0), x.tensor(1), x.tensor(2)
    if a is None or b is None or len(a.shape) != 2 or len(b.shape) != 2:
        return None
    (m, k), (_, n) = a.shape, b.shape
    extra = [c] if c is not None else []
    act = 1 if name.endswith("_activation") else 0
    return _gemm(a, b, m, n, k, 1, extra, (1 if c is not None and c.numel else 0) + act)


@FAMILY.cost("aten::bmm")
def _bmm(name: str, x: Inputs) -> Cost | None:
    a, b = x.tensor(0), x.tensor(1)
    if a is None or b is None or len(a.shape) != 3 or len(b.shape) != 3:
        return None
    (bs, m, k), (_, _, n) = a.shape, b.shape
    return _gemm(a, b, m, n, k, bs, [], 0)


@FAMILY.cost("aten::baddbmm")
def _baddbmm(name: str, x: Inputs) -> Cost | None:
    c, a, b = x.tensor(0), x.tensor(1), x.tensor(2)
    if a is None or b is None or len(a.shape) != 3 or len(b.shape) != 3:
        return None
    (bs, m, k), (_, _, n) = a.shape, b.shape
    extra = [c] if c is not None else []
    return _gemm(a, b, m, n, k, bs, extra, 1 if c is not None else 0)


@FAMILY.cost("aten::matmul")
def _matmul(name: str, x: Inputs) -> Cost | None:
    a, b = x.tensor(0), x.tensor(1)
    if a is None or b is None or not a.shape or not b.shape:
        return None
    sa = (1, *a.shape) if len(a.shape) == 1 else a.shape
    sb = (*b.shape, 1) if len(b.shape) == 1 else b.shape
    m, k, n = sa[-2], sa[-1], sb[-1]
    batch = math.prod(broadcast([sa[:-2], sb[:-2]]))
    flops = 2.0 * batch * m * n * k
    return Cost(flops, float(a.nbytes + b.nbytes + batch * m * n * a.itemsize), a.dtype)


@FAMILY.cost("aten::linear")
def _linear(name: str, x: Inputs) -> Cost | None:
    a, w, bias = x.tensor(0), x.tensor(1), x.tensor(2)
    if a is None or w is None or len(w.shape) != 2 or not a.shape:
        return None
    n, k = w.shape
    m = a.numel // k if k else 0
    extra = [bias] if bias is not None else []
    return _gemm(a, w, m, n, k, 1, extra, 1 if bias is not None else 0)


@FAMILY.cost("aten::mv", "aten::addmv")
def _mv(name: str, x: Inputs) -> Cost | None:
    off = 1 if name == "aten::addmv" else 0
    a, v = x.tensor(off), x.tensor(off + 1)
    if a is None or v is None or len(a.shape) != 2:
        return None
    m, n = a.shape
    return Cost(2.0 * m * n, float(a.nbytes + v.nbytes + m * a.itemsize), a.dtype)


@FAMILY.cost("aten::_scaled_mm")
def _scaled_mm(name: str, x: Inputs) -> Cost | None:
    a, b = x.tensor(0), x.tensor(1)
    if a is None or b is None or len(a.shape) != 2 or len(b.shape) != 2:
        return None
    (m, k), (_, n) = a.shape, b.shape
    code = x.value(6)
    out_size = SCALAR_TYPE[code][1] if isinstance(code, int) and code in SCALAR_TYPE else None
    note = "" if out_size else "output dtype not recorded: bf16 (2 B) assumed"
    nbytes = a.nbytes + b.nbytes + m * n * (out_size or 2)
    return Cost(2.0 * m * n * k, float(nbytes), a.dtype, note)


@FAMILY.cost("aten::_grouped_mm", "aten::_scaled_grouped_mm")
def _grouped_mm(name: str, x: Inputs) -> Cost | None:
    """Grouped GEMM of mixture-of-experts layers: ``mat_a`` and ``mat_b`` 2-D or 3-D, the
    groups given by the leading dimension of a 3-D operand or by ``offs`` along the ragged
    dimension. FLOPs ``2·M·N·K`` summed over the groups (each row, or each K slice, belongs
    to one group)."""
    a, b = x.tensor(0), x.tensor(1)
    if a is None or b is None or len(a.shape) not in (2, 3) or len(b.shape) not in (2, 3):
        return None
    offs = x.tensor(2)
    if len(a.shape) == 2 and len(b.shape) == 3:  # tokens [M, K] · experts [G, K, N]
        flops, out = 2.0 * a.shape[0] * a.shape[1] * b.shape[2], a.shape[0] * b.shape[2]
    elif len(a.shape) == 3 and len(b.shape) == 3:  # [G, M, K] · [G, K, N]
        flops = 2.0 * a.shape[0] * a.shape[1] * a.shape[2] * b.shape[2]
        out = a.shape[0] * a.shape[1] * b.shape[2]
    elif len(a.shape) == 3:  # [G, M, K] · [K, N_total]
        flops, out = 2.0 * a.shape[1] * a.shape[2] * b.shape[1], a.shape[1] * b.shape[1]
    else:  # [M, K_total] · [K_total, N] -> [G, M, N] (weight gradients)
        if offs is None or len(offs.shape) != 1:
            return None
        flops = 2.0 * a.shape[0] * a.shape[1] * b.shape[1]
        out = offs.shape[0] * a.shape[0] * b.shape[1]
    note = ""
    out_size = a.itemsize
    if name == "aten::_scaled_grouped_mm":  # fp8 operands, bf16 output unless recorded
        out_size, note = 2, "output dtype not recorded: bf16 (2 B) assumed"
    nbytes = a.nbytes + b.nbytes + (offs.nbytes if offs else 0) + out * out_size
    return Cost(flops, float(nbytes), a.dtype, note)
