"""Convolutions, forward and backward (data gradient ``dgrad``, weight gradient ``wgrad``):
the ``convolution`` class, on the matrix pipes. cuDNN, CUTLASS, MIOpen and Composable
Kernel run them as implicit GEMMs, Winograd or FFT transforms; under a convolution
operator every such kernel is ``convolution`` (the innermost operator decides), and their
names are the fallback for traces without operators.

Costs: ``2·N·Cout·∏out·(Cin/groups)·∏kernel`` (+ ``N·Cout·∏out`` for a bias), the output
size from stride, padding, dilation (and output padding for transposed convolutions); the
backward by its ``output_mask``: the data and the weight gradient each cost the forward's
FLOPs, the bias gradient one add per output-gradient element. The same count as torch's
own ``FlopCounterMode`` (which leaves the bias out).
"""

from __future__ import annotations

import math
from typing import NamedTuple

from tracekit.classify.families.family import P_GENERIC, P_NORMAL, ClassSpec, Family, Rule, aten
from tracekit.classify.families.inputs import NAN, Cost, Inputs, Tensor, conv_out

_CONV = (
    r"conv\dd",
    r"conv_transpose\dd",
    "convolution",
    "_convolution",
    "_convolution_mode",
    "convolution_overrideable",
    r"cudnn_convolution(?:_transpose|_relu|_add_relu)?",
    r"miopen_(?:depthwise_)?convolution(?:_transpose)?",
    r"mkldnn_convolution\w*",
    r"convolution_backward\w*",
    r"cudnn_convolution\w*_backward\w*",
    r"_slow_conv2d_\w+",
    r"slow_conv\w+",
    r"_conv_depthwise2d\w*",
    r"conv_depthwise\dd\w*",
    r"_convolution_double_backward",
    r"thnn_conv\w*",
)
# Also the operators whose fp32 math follows cuDNN's TF32 setting (devices.pipe_for).
CONVOLUTION_OPS = Rule(
    aten(*_CONV),
    "op",
    "convolution",
    P_NORMAL,
    "convolutions forward and backward; every kernel they launch (implicit GEMM, Winograd, "
    "FFT) is convolution, not gemm",
)

RULES: tuple[Rule, ...] = (
    CONVOLUTION_OPS,
    Rule(
        r"^(?:Convolution|CudnnConvolution\w*|MiopenConvolution\w*|MkldnnConvolution"
        r"|SlowConv\w*|ConvDepthwise\w*)Backward\d*$",
        "op",
        "convolution",
        P_NORMAL,
        "autograd nodes",
    ),
    Rule(
        r"(?i)implicit_?gemm|implicit_convolve|_?fprop|dgrad|wgrad|scudnn|hcudnn|winograd"
        r"|fft2d|conv2d|conv3d|convolution|_conv_|naive_conv|cudnn::cnn|cask_cudnn"
        r"|cutlass_cudnn|cutlass__\w*cudnn|igemm_(?:fwd|bwd|wrw)|conv_depthwise|DepthwiseConv",
        "kernel",
        "convolution",
        P_NORMAL,
        "cuDNN/CUTLASS convolution kernels (implicit GEMM `*_fprop_*`/`*dgrad*`/`*wgrad*`, "
        "`implicit_convolve_sgemm`, `scudnn`, Winograd, FFT), MIOpen `igemm_fwd/bwd/wrw`, "
        "`naive_conv`, PyTorch's depthwise kernels",
    ),
    Rule(
        r"^(?:void )?ck(?:_tile)?::.*(?:[Cc]onv|bwd_weight|bwd_data)"
        r"|_ZN2ck\w*(?:[Cc]onv|bwd_weight|bwd_data)",
        "kernel",
        "convolution",
        P_NORMAL,
        "Composable Kernel convolution incl. its bwd_weight/bwd_data GEMMs (demangled or mangled)",
    ),
    Rule(
        r"cudnn(?!::fusion)",
        "kernel",
        "convolution",
        P_GENERIC,
        "other cuDNN kernels (offsets, split-K reductions, scaling): cuDNN runs "
        "convolutions unless a more specific rule (attention, batch norm, layout) says so",
    ),
)

FUSED_RULES: tuple[Rule, ...] = (
    Rule(
        r"(?:^| )(?:convolution|convolution_backward)(?: |$)",
        "fused",
        "convolution",
        101,
        "a convolution fused with its epilogue, incl. Inductor's conv templates "
        "(triton_tem_fused_convolution_*, above the GEMM templates' rule)",
    ),
)

FAMILY = Family(
    "convolution",
    classes=(ClassSpec("convolution", matrix=True),),
    rules=RULES,
    fused_rules=FUSED_RULES,
    fused_vocab=("convolution_backward",),
    convolution_ops=CONVOLUTION_OPS,
)


class ConvArgs(NamedTuple):
    """Positions of a convolution operator's arguments (None: not an argument of it)."""

    bias: int | None
    stride: int
    padding: int
    dilation: int | None
    transposed: int | bool  # position of the flag, or fixed
    output_padding: int | None
    groups: int | None


# from native_functions.yaml (torch 2.x)
CONV_ARGS: dict[str, ConvArgs] = {
    "aten::conv1d": ConvArgs(2, 3, 4, 5, False, None, 6),
    "aten::conv2d": ConvArgs(2, 3, 4, 5, False, None, 6),
    "aten::conv3d": ConvArgs(2, 3, 4, 5, False, None, 6),
    "aten::_convolution_mode": ConvArgs(2, 3, 4, 5, False, None, 6),
    "aten::conv_transpose1d": ConvArgs(2, 3, 4, 7, True, 5, 6),
    "aten::conv_transpose2d": ConvArgs(2, 3, 4, 7, True, 5, 6),
    "aten::conv_transpose3d": ConvArgs(2, 3, 4, 7, True, 5, 6),
    "aten::convolution": ConvArgs(2, 3, 4, 5, 6, 7, 8),
    "aten::_convolution": ConvArgs(2, 3, 4, 5, 6, 7, 8),
    "aten::convolution_overrideable": ConvArgs(2, 3, 4, 5, 6, 7, 8),
    "aten::cudnn_convolution": ConvArgs(None, 3, 2, 4, False, None, 5),
    "aten::cudnn_convolution_transpose": ConvArgs(None, 4, 2, 5, True, 3, 6),
    "aten::cudnn_convolution_relu": ConvArgs(2, 3, 4, 5, False, None, 6),
    "aten::miopen_convolution": ConvArgs(2, 4, 3, 5, False, None, 6),
    "aten::miopen_depthwise_convolution": ConvArgs(2, 4, 3, 5, False, None, 6),
    "aten::miopen_convolution_transpose": ConvArgs(2, 5, 3, 6, True, 4, 7),
    "aten::mkldnn_convolution": ConvArgs(2, 4, 3, 5, False, None, 6),
    "aten::_slow_conv2d_forward": ConvArgs(3, 4, 5, None, False, None, None),
    "aten::slow_conv3d_forward": ConvArgs(3, 4, 5, None, False, None, None),
    "aten::slow_conv3d": ConvArgs(3, 4, 5, None, False, None, None),
    "aten::thnn_conv2d": ConvArgs(3, 4, 5, None, False, None, None),
    "aten::_conv_depthwise2d": ConvArgs(3, 4, 5, 6, False, None, None),
    "aten::conv_depthwise3d": ConvArgs(3, 4, 5, 6, False, None, None),
    "aten::slow_conv_dilated2d": ConvArgs(3, 4, 5, 6, False, None, None),
    "aten::slow_conv_dilated3d": ConvArgs(3, 4, 5, 6, False, None, None),
    "aten::slow_conv_transpose2d": ConvArgs(3, 4, 5, 7, True, 6, None),
    "aten::slow_conv_transpose3d": ConvArgs(3, 4, 5, 7, True, 6, None),
}


def conv_flops(n: int, w: Tensor, sp: list[int] | tuple[int, ...], transposed: bool) -> float:
    """FLOPs of the contraction: ``2·N·∏w·∏sp`` where ``sp`` is the output's spatial size
    (the input's for a transposed convolution) — ``∏w`` is ``Cout·Cin/groups·∏kernel``."""
    return 2.0 * n * math.prod(w.shape) * math.prod(sp)


def _groups(x: Inputs, i: int | None) -> int:
    g = x.value(i) if i is not None else None
    return g if isinstance(g, int) and not isinstance(g, bool) and g > 0 else 1


@FAMILY.cost(*CONV_ARGS)
def _conv(name: str, x: Inputs) -> Cost | None:
    a = CONV_ARGS[name]
    inp, w = x.tensor(0), x.tensor(1)
    bias = x.tensor(a.bias) if a.bias is not None else None
    if inp is None or w is None or len(w.shape) < 3 or len(inp.shape) != len(w.shape):
        return None
    nsp = len(w.shape) - 2
    stride, padv = x.ints(a.stride, nsp), x.value(a.padding)
    pad = [0] * nsp if padv == "valid" else x.ints(a.padding, nsp)
    dil = x.ints(a.dilation, nsp) if a.dilation is not None else [1] * nsp
    transposed = a.transposed if isinstance(a.transposed, bool) else bool(x.flag(a.transposed))
    n_b, in_sp, ksp = inp.shape[0], list(inp.shape[2:]), w.shape[2:]
    if transposed:
        flops = conv_flops(n_b, w, in_sp, True)
        outp = x.ints(a.output_padding, nsp) if a.output_padding is not None else [0] * nsp
        if stride is None or pad is None or dil is None or outp is None:
            return Cost(flops, NAN, inp.dtype, "conv: stride/padding not recorded")
        out_sp = [
            (i - 1) * s - 2 * p + d * (k - 1) + o + 1
            for i, s, p, d, k, o in zip(in_sp, stride, pad, dil, ksp, outp, strict=True)
        ]
        cout = w.shape[1] * _groups(x, a.groups)
    else:
        if padv == "same":
            out_sp = in_sp
        elif stride is None or pad is None or dil is None:
            return Cost(NAN, NAN, inp.dtype, "conv: stride/padding not recorded")
        else:
            out_sp = [
                conv_out(i, k, s, p, d)
                for i, k, s, p, d in zip(in_sp, ksp, stride, pad, dil, strict=True)
            ]
        flops = conv_flops(n_b, w, out_sp, False)
        cout = w.shape[0]
    out_numel = n_b * cout * math.prod(out_sp)
    if bias is not None:
        flops += out_numel
    nbytes = inp.nbytes + w.nbytes + (bias.nbytes if bias else 0) + out_numel * inp.itemsize
    return Cost(flops, float(nbytes), inp.dtype)


@FAMILY.cost("aten::convolution_backward", "aten::convolution_backward_overrideable")
def _conv_bwd(name: str, x: Inputs) -> Cost | None:
    """``convolution_backward(grad_output, input, weight, bias_sizes, stride, padding,
    dilation, transposed, output_padding, groups, output_mask)``: data gradient (dgrad) and
    weight gradient (wgrad) each cost the forward's contraction; the bias gradient sums the
    output gradient."""
    g, inp, w = x.tensor(0), x.tensor(1), x.tensor(2)
    if g is None or inp is None or w is None or len(w.shape) < 3 or len(g.shape) < 3:
        return None
    transposed = bool(x.flag(7))
    mask = x.value(10)
    m = [bool(v) for v in mask] if isinstance(mask, list) and len(mask) == 3 else [True] * 3
    # the forward's output spatial size is grad_output's (its input's when transposed)
    conv = conv_flops(g.shape[0], w, inp.shape[2:] if transposed else g.shape[2:], transposed)
    flops = conv * (m[0] + m[1]) + (g.numel if m[2] else 0)
    reads = g.nbytes + (w.nbytes if m[0] else 0) + (inp.nbytes if m[1] else 0)
    writes = (
        (inp.nbytes if m[0] else 0)
        + (w.nbytes if m[1] else 0)
        + (g.shape[1] * g.itemsize if m[2] else 0)
    )
    note = "" if isinstance(mask, list) else "output_mask not recorded: all grads assumed"
    return Cost(flops, float(reads + writes), g.dtype, note)
