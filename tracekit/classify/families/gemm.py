"""GEMM: matrix products and convolutions (tensor contractions: implicit GEMM, Winograd,
FFT), and the library kernels that run them (cuBLAS/cuBLASLt, CUTLASS, rocBLAS/Tensile,
hipBLASLt, Composable Kernel, cuDNN, MIOpen).

Costs: ``2·M·N·K`` (+ ``M·N`` per bias/epilogue); convolutions
``2·N·Cout·∏out·(Cin/groups)·∏kernel`` (+ bias), backward by its ``output_mask``.
"""

from __future__ import annotations

import math

from tracekit.classify.families.family import P_NORMAL, ClassSpec, Family, Rule, aten
from tracekit.classify.families.inputs import (
    NAN,
    SCALAR_TYPE,
    Cost,
    Inputs,
    Tensor,
    broadcast,
    conv_out,
)

_CONV = (
    r"conv\dd",
    r"conv_transpose\dd",
    "convolution",
    "_convolution",
    r"cudnn_convolution(?:_transpose|_relu|_add_relu)?",
    r"miopen_(?:depthwise_)?convolution(?:_transpose)?",
    "mkldnn_convolution",
    r"convolution_backward\w*",
    r"cudnn_convolution\w*_backward\w*",
    r"_slow_conv2d_\w+",
    r"slow_conv\w+",
    r"_conv_depthwise2d\w*",
    r"conv_depthwise\dd\w*",
)
# Also the operators whose fp32 math follows cuDNN's TF32 setting (devices.pipe_for).
CONVOLUTION_OPS = Rule(
    aten(*_CONV),
    "op",
    "gemm",
    P_NORMAL,
    "convolutions: tensor contractions (implicit GEMM, Winograd, FFT), counted as gemm",
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
        aten(*_CONV),
        "op",
        "gemm",
        P_NORMAL,
        "convolutions: tensor contractions (implicit GEMM, Winograd, FFT), counted as gemm",
    ),
    Rule(
        r"(?i)gemm|gemv|Cijk_|nvjet|xmma|cutlass_cudnn|cublas|hipblaslt|rocblas|tensile"
        r"|splitKreduce|wvSplitK|igemm_|winograd|implicit_?gemm|scudnn|hcudnn|wgrad|dgrad"
        r"|fprop|conv2d|conv3d|convolution|_conv_|naive_conv|fft2d|fft_|^bmm_|matmul"
        r"|cask_cudnn|cudnn::cnn|cudnn::detail::(?:dgrad|wgrad)|epilogue::impl",
        "kernel",
        "gemm",
        P_NORMAL,
        "cuBLAS(Lt)/CUTLASS/nvjet/xmma, rocBLAS/Tensile Cijk_, hipBLASLt, CK, MIOpen igemm, "
        "cuDNN conv (implicit GEMM, Winograd, FFT) and GEMM epilogue/split-K kernels",
    ),
    Rule(
        r"^(?:void )?ck(?:_tile)?::.*(?:[Gg]emm|[Cc]onv)|_ZN2ck\w*(?:[Gg]emm|[Cc]onv)",
        "kernel",
        "gemm",
        P_NORMAL,
        "Composable Kernel GEMM/convolution (demangled or mangled)",
    ),
)

FUSED_RULES: tuple[Rule, ...] = (
    Rule(r"^<tem>", "fused", "gemm", 100, "triton_tem_*: Inductor GEMM/conv templates"),
    Rule(
        r"(?:^| )(?:mm|addmm|bmm|baddbmm|_scaled_mm|convolution|convolution_backward)(?: |$)",
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
        "convolution_backward",
        "_scaled_mm",
    ),
    convolution_ops=CONVOLUTION_OPS,
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


# (stride, padding, dilation, transposed, output_padding, groups) positions per op.
_CONV_ARGS: dict[str, tuple[int, int, int, int | None, int | None, int]] = {
    "aten::conv1d": (3, 4, 5, None, None, 6),
    "aten::conv2d": (3, 4, 5, None, None, 6),
    "aten::conv3d": (3, 4, 5, None, None, 6),
    "aten::convolution": (3, 4, 5, 6, 7, 8),
    "aten::_convolution": (3, 4, 5, 6, 7, 8),
    "aten::cudnn_convolution": (3, 2, 4, None, None, 5),
    "aten::miopen_convolution": (4, 3, 5, None, None, 6),
    "aten::mkldnn_convolution": (4, 3, 5, None, None, 6),
}


@FAMILY.cost(*_CONV_ARGS)
def _conv(name: str, x: Inputs) -> Cost | None:
    inp, w, bias = x.tensor(0), x.tensor(1), x.tensor(2)
    if inp is None or w is None or len(w.shape) < 3 or len(inp.shape) != len(w.shape):
        return None
    si, pi, di, ti, opi, gi = _CONV_ARGS[name]
    nsp = len(w.shape) - 2
    groups = x.value(gi)
    groups = groups if isinstance(groups, int) and not isinstance(groups, bool) else 1
    stride, dil = x.ints(si, nsp), x.ints(di, nsp)
    padv = x.value(pi)
    pad = [0] * nsp if padv == "valid" else x.ints(pi, nsp)
    transposed = bool(x.flag(ti)) if ti is not None else False
    n_b, in_sp = inp.shape[0], inp.shape[2:]
    ksp = w.shape[2:]
    if transposed:
        cin, cout_g = w.shape[0], w.shape[1]
        flops = 2.0 * n_b * math.prod(in_sp) * cin * cout_g * math.prod(ksp)
        outp = x.ints(opi, nsp) if opi is not None else [0] * nsp
        if stride is None or pad is None or dil is None or outp is None:
            return Cost(flops, NAN, inp.dtype, "conv: stride/padding not recorded")
        out_sp = [
            (i - 1) * s - 2 * p + d * (k - 1) + o + 1
            for i, s, p, d, k, o in zip(in_sp, stride, pad, dil, ksp, outp, strict=True)
        ]
        cout = cout_g * groups
    else:
        cout, cin_g = w.shape[0], w.shape[1]
        if padv == "same":
            out_sp = list(in_sp)
        elif stride is None or pad is None or dil is None:
            return Cost(NAN, NAN, inp.dtype, "conv: stride/padding not recorded")
        else:
            out_sp = [
                conv_out(i, k, s, p, d)
                for i, k, s, p, d in zip(in_sp, ksp, stride, pad, dil, strict=True)
            ]
        flops = 2.0 * n_b * cout * math.prod(out_sp) * cin_g * math.prod(ksp)
    out_numel = n_b * cout * math.prod(out_sp)
    if bias is not None:
        flops += out_numel
    nbytes = inp.nbytes + w.nbytes + (bias.nbytes if bias else 0) + out_numel * inp.itemsize
    return Cost(flops, float(nbytes), inp.dtype)


@FAMILY.cost("aten::convolution_backward")
def _conv_bwd(name: str, x: Inputs) -> Cost | None:
    g, inp, w = x.tensor(0), x.tensor(1), x.tensor(2)
    if g is None or inp is None or w is None or len(w.shape) < 3:
        return None
    transposed = bool(x.flag(7))
    mask = x.value(10)
    m = [bool(v) for v in mask] if isinstance(mask, list) and len(mask) == 3 else [True] * 3
    if transposed:
        conv = (
            2.0
            * inp.shape[0]
            * math.prod(inp.shape[2:])
            * w.shape[0]
            * w.shape[1]
            * math.prod(w.shape[2:])
        )
    else:
        conv = (
            2.0
            * g.shape[0]
            * g.shape[1]
            * math.prod(g.shape[2:])
            * w.shape[1]
            * math.prod(w.shape[2:])
        )
    flops = conv * (m[0] + m[1]) + (g.numel if m[2] else 0)
    reads = g.nbytes + (w.nbytes if m[0] else 0) + (inp.nbytes if m[1] else 0)
    cout = g.shape[1]
    writes = (
        (inp.nbytes if m[0] else 0) + (w.nbytes if m[1] else 0) + (cout * g.itemsize if m[2] else 0)
    )
    note = "" if isinstance(mask, list) else "output_mask not recorded: all grads assumed"
    return Cost(flops, float(reads + writes), g.dtype, note)
