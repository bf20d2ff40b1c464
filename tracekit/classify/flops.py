"""Modelled FLOPs and minimal DRAM bytes of an operator, from its recorded shapes.

With ``record_shapes=True`` every CPU operator carries ``Input Dims``, ``Input type``
and ``Concrete Inputs`` (kept as JSON text in ``ops.input_dims`` / ``input_types`` /
``concrete_inputs``). From these, :func:`op_cost` computes

* **FLOPs**: a multiply and an add are 2 FLOPs (GEMMs are ``2·M·N·K``); an exp, erf,
  tanh, sqrt or division counts as 1; copies and casts are 0. Per-element counts of
  the non-GEMM operators are listed in :data:`PER_ELEMENT` and ``docs/classify.md``.
* **bytes**: the minimal DRAM traffic — every input read once and every output
  written once, at the element size of its dtype. Caches, re-reads and
  re-computation are not counted, so the real traffic is at least this.

Operators without a model return ``None``; operators whose shapes are absent return a
cost of NaN with a note. Numbers are never invented: where an assumption is needed
(the dtype of tensor lists, which the profiler does not record) the cost says so in
its ``note``.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from tracekit.classify.codes import combine_codes, factorized
from tracekit.classify.inductor import fused_ops

NAN = float("nan")

# Element size and canonical name of every dtype string the profiler writes.
TYPE_BYTES: dict[str, int] = {
    "float": 4, "double": 8, "c10::Half": 2, "c10::BFloat16": 2,
    "c10::Float8_e4m3fn": 1, "c10::Float8_e5m2": 1, "c10::Float8_e4m3fnuz": 1,
    "c10::Float8_e5m2fnuz": 1, "c10::Float8_e8m0fnu": 1, "long int": 8, "int": 4,
    "short int": 2, "signed char": 1, "unsigned char": 1, "bool": 1,
    "c10::complex<float>": 8, "c10::complex<double>": 16, "c10::complex<c10::Half>": 4,
    "unsigned int": 4, "unsigned short": 2, "unsigned long": 8, "c10::qint8": 1,
    "c10::quint8": 1, "c10::qint32": 4,
}  # fmt: skip
DTYPE_NAME: dict[str, str] = {
    "float": "fp32", "double": "fp64", "c10::Half": "fp16", "c10::BFloat16": "bf16",
    "c10::Float8_e4m3fn": "fp8", "c10::Float8_e5m2": "fp8", "c10::Float8_e4m3fnuz": "fp8",
    "c10::Float8_e5m2fnuz": "fp8", "long int": "int64", "int": "int32", "short int": "int16",
    "signed char": "int8", "unsigned char": "uint8", "bool": "bool",
}  # fmt: skip
# c10::ScalarType codes, as ``Concrete Inputs`` records a dtype argument.
SCALAR_TYPE: dict[int, tuple[str, int]] = {
    0: ("uint8", 1), 1: ("int8", 1), 2: ("int16", 2), 3: ("int32", 4), 4: ("int64", 8),
    5: ("fp16", 2), 6: ("fp32", 4), 7: ("fp64", 8), 11: ("bool", 1), 15: ("bf16", 2),
    23: ("fp8", 1), 24: ("fp8", 1), 25: ("fp8", 1), 26: ("fp8", 1),
}  # fmt: skip
FLOAT_BYTES = {"fp64": 8, "fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}

# FLOPs per output element of element-wise and normalisation operators (a
# transcendental counts as one FLOP). Documented in docs/classify.md.
PER_ELEMENT: dict[str, float] = {
    # binary / unary arithmetic
    "add": 1, "sub": 1, "rsub": 1, "mul": 1, "div": 1, "neg": 1, "abs": 1, "pow": 1,
    "sqrt": 1, "rsqrt": 1, "exp": 1, "exp2": 1, "log": 1, "log1p": 1, "reciprocal": 1,
    "sin": 1, "cos": 1, "erf": 1, "sign": 1, "square": 1, "maximum": 1, "minimum": 1,
    "where": 1, "clamp": 1, "clamp_min": 1, "clamp_max": 1, "eq": 1, "ne": 1, "lt": 1,
    "le": 1, "gt": 1, "ge": 1, "floor": 1, "ceil": 1, "round": 1, "remainder": 1, "fmod": 1,
    "addcmul": 3, "addcdiv": 3, "lerp": 2,
    # data movement: no arithmetic
    "copy": 0, "_to_copy": 0, "clone": 0, "contiguous": 0, "cat": 0, "stack": 0,
    "masked_fill": 0, "fill": 0, "zero": 0, "constant_pad_nd": 0, "index_copy": 0,
    "tril": 0, "triu": 0,
    # activations (forward, backward)
    "relu": 1, "threshold": 1, "threshold_backward": 1, "gelu": 5, "gelu_tanh": 9,
    "gelu_backward": 10, "gelu_tanh_backward": 16, "silu": 4, "silu_backward": 8,
    "sigmoid": 3, "sigmoid_backward": 3, "tanh": 1, "tanh_backward": 3, "leaky_relu": 2,
    "leaky_relu_backward": 2, "hardtanh": 1, "hardtanh_backward": 1, "elu": 3,
    "softplus": 3, "mish": 5, "hardswish": 4,
    # dropout: compare against a random number, scale
    "native_dropout": 2, "native_dropout_backward": 2,
    # softmax: max, subtract, exp, sum, divide; backward: mul, sum, sub, mul
    "softmax": 5, "softmax_backward": 4,
    # layer/batch/group norm: mean 1, variance 3, normalise 2, affine 2; backward
    # dx 10, dgamma 2, dbeta 1; RMSNorm: square 1, sum 1, normalise 1, affine 1
    "norm": 6, "norm_affine": 2, "norm_backward_dx": 10, "norm_backward_dgamma": 2,
    "norm_backward_dbeta": 1, "rms_norm": 3, "rms_norm_affine": 1, "rms_norm_backward": 7,
    # AdamW per parameter: decay 1, first moment 2, second moment 4, denominator 3,
    # update 3
    "adamw": 13, "adam": 14, "sgd": 2, "sgd_momentum": 4,
    # reductions, per input element
    "sum": 1, "mean": 1, "amax": 1, "amin": 1, "max": 1, "min": 1, "prod": 1, "any": 0,
    "all": 0, "argmax": 1, "argmin": 1, "var": 3, "std": 3, "var_mean": 3, "std_mean": 3,
    "norm_reduce": 2, "logsumexp": 3, "cumsum": 1,
    # losses
    "mse_loss": 3, "mse_loss_backward": 3,
}  # fmt: skip

# Attention: backward does 5 matmuls (Q·Kᵀ recomputed, dV, dP, dQ, dK) to forward's 2.
ATTENTION_BWD_FACTOR = 2.5
CAUSAL_FACTOR = 0.5


@dataclass(frozen=True)
class Cost:
    """FLOPs and minimal bytes of one operator call (NaN: unknown)."""

    flops: float
    bytes: float
    dtype: str | None = None  # compute dtype (fp32, bf16, …) of the main inputs
    note: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "flops", float(self.flops))
        object.__setattr__(self, "bytes", float(self.bytes))


Shape = tuple[int, ...]


@dataclass(frozen=True)
class Tensor:
    shape: Shape
    dtype: str  # canonical (fp32, bf16, int64, …)
    itemsize: int

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * self.itemsize


@dataclass(frozen=True)
class TensorList:
    shapes: tuple[Shape, ...] | None  # None: the profiler did not record them

    @property
    def numel(self) -> int | None:
        return None if self.shapes is None else sum(math.prod(s) for s in self.shapes)


class Inputs:
    """Decoded inputs of one call: tensors, tensor lists and concrete scalars by position."""

    def __init__(self, dims: Sequence[Any], types: Sequence[Any], concrete: Sequence[Any]):
        self.dims = list(dims)
        self.types = [str(t) for t in types]
        self.concrete = [str(c) for c in concrete]

    def __len__(self) -> int:
        return len(self.dims)

    def tensor(self, i: int) -> Tensor | None:
        if i >= len(self.dims) or i >= len(self.types):
            return None
        t, d = self.types[i], self.dims[i]
        if t not in TYPE_BYTES or not isinstance(d, list):
            return None
        if not all(isinstance(x, int) for x in d):
            return None
        return Tensor(tuple(d), DTYPE_NAME.get(t, t), TYPE_BYTES[t])

    def tensor_list(self, i: int) -> TensorList | None:
        if i >= len(self.dims) or i >= len(self.types) or self.types[i] != "TensorList":
            return None
        d = self.dims[i]
        if d == []:  # long lists are recorded without their shapes
            return TensorList(None)
        if not isinstance(d, list) or not all(
            isinstance(s, list) and all(isinstance(x, int) for x in s) for s in d
        ):
            return None
        return TensorList(tuple(tuple(s) for s in d))

    def tensors(self) -> list[Tensor]:
        return [t for i in range(len(self.dims)) if (t := self.tensor(i)) is not None]

    def raw(self, i: int) -> str:
        return self.concrete[i] if i < len(self.concrete) else ""

    def value(self, i: int) -> Any:
        """Concrete input ``i`` decoded (int, float, bool, list) or None."""
        s = self.raw(i).strip()
        if not s:
            return None
        if s in ("True", "False"):
            return s == "True"
        if len(s) >= 2 and s[0] == s[-1] and s[0] in "'\"":
            return s[1:-1]
        try:
            return json.loads(s)
        except ValueError:
            pass
        if s.startswith("[") and ("True" in s or "False" in s):  # Python-style bool list
            try:
                return json.loads(s.replace("True", "true").replace("False", "false"))
            except ValueError:
                pass
        return s

    def ints(self, i: int, n: int) -> list[int] | None:
        """Concrete int list of length ``n`` (a scalar is broadcast), else None."""
        v = self.value(i)
        if isinstance(v, bool) or v is None:
            return None
        if isinstance(v, int):
            return [v] * n
        if isinstance(v, list) and all(isinstance(x, int) for x in v):
            if len(v) == 1:
                return v * n
            return v if len(v) == n else None
        return None

    def flag(self, i: int) -> bool | None:
        v = self.value(i)
        return v if isinstance(v, bool) else None


Formula = Callable[[str, Inputs], Cost | None]
FORMULAS: dict[str, Formula] = {}


def _register(*names: str) -> Callable[[Formula], Formula]:
    def deco(fn: Formula) -> Formula:
        for n in names:
            FORMULAS[n] = fn
        return fn

    return deco


def _broadcast(shapes: Sequence[Shape]) -> Shape:
    nd = max((len(s) for s in shapes), default=0)
    out = [1] * nd
    for s in shapes:
        for k, v in enumerate(s):
            j = nd - len(s) + k
            out[j] = v if out[j] == 1 else out[j]
    return tuple(out)


def _base(name: str) -> str:
    """``aten::add_`` → ``add``; ``aten::_foreach_mul_`` → ``_foreach_mul``."""
    n = name.split("::", 1)[-1]
    return n[:-1] if n.endswith("_") and not n.endswith("__") else n


# --- GEMM ------------------------------------------------------------------------


def _gemm(
    a: Tensor, b: Tensor, m: int, n: int, k: int, batch: int, extra: list[Tensor], epilogue: int
) -> Cost:
    flops = 2.0 * batch * m * n * k + epilogue * batch * m * n
    nbytes = a.nbytes + b.nbytes + sum(t.nbytes for t in extra) + batch * m * n * a.itemsize
    return Cost(flops, float(nbytes), a.dtype)


@_register("aten::mm")
def _mm(name: str, x: Inputs) -> Cost | None:
    a, b = x.tensor(0), x.tensor(1)
    if a is None or b is None or len(a.shape) != 2 or len(b.shape) != 2:
        return None
    (m, k), (_, n) = a.shape, b.shape
    return _gemm(a, b, m, n, k, 1, [], 0)


@_register("aten::addmm", "aten::_addmm_activation")
def _addmm(name: str, x: Inputs) -> Cost | None:
    c, a, b = x.tensor(0), x.tensor(1), x.tensor(2)
    if a is None or b is None or len(a.shape) != 2 or len(b.shape) != 2:
        return None
    (m, k), (_, n) = a.shape, b.shape
    extra = [c] if c is not None else []
    act = 1 if name.endswith("_activation") else 0
    return _gemm(a, b, m, n, k, 1, extra, (1 if c is not None and c.numel else 0) + act)


@_register("aten::bmm")
def _bmm(name: str, x: Inputs) -> Cost | None:
    a, b = x.tensor(0), x.tensor(1)
    if a is None or b is None or len(a.shape) != 3 or len(b.shape) != 3:
        return None
    (bs, m, k), (_, _, n) = a.shape, b.shape
    return _gemm(a, b, m, n, k, bs, [], 0)


@_register("aten::baddbmm")
def _baddbmm(name: str, x: Inputs) -> Cost | None:
    c, a, b = x.tensor(0), x.tensor(1), x.tensor(2)
    if a is None or b is None or len(a.shape) != 3 or len(b.shape) != 3:
        return None
    (bs, m, k), (_, _, n) = a.shape, b.shape
    extra = [c] if c is not None else []
    return _gemm(a, b, m, n, k, bs, extra, 1 if c is not None else 0)


@_register("aten::matmul")
def _matmul(name: str, x: Inputs) -> Cost | None:
    a, b = x.tensor(0), x.tensor(1)
    if a is None or b is None or not a.shape or not b.shape:
        return None
    sa = (1, *a.shape) if len(a.shape) == 1 else a.shape
    sb = (*b.shape, 1) if len(b.shape) == 1 else b.shape
    m, k, n = sa[-2], sa[-1], sb[-1]
    batch = math.prod(_broadcast([sa[:-2], sb[:-2]]))
    flops = 2.0 * batch * m * n * k
    return Cost(flops, float(a.nbytes + b.nbytes + batch * m * n * a.itemsize), a.dtype)


@_register("aten::linear")
def _linear(name: str, x: Inputs) -> Cost | None:
    a, w, bias = x.tensor(0), x.tensor(1), x.tensor(2)
    if a is None or w is None or len(w.shape) != 2 or not a.shape:
        return None
    n, k = w.shape
    m = a.numel // k if k else 0
    extra = [bias] if bias is not None else []
    return _gemm(a, w, m, n, k, 1, extra, 1 if bias is not None else 0)


@_register("aten::mv", "aten::addmv")
def _mv(name: str, x: Inputs) -> Cost | None:
    off = 1 if name == "aten::addmv" else 0
    a, v = x.tensor(off), x.tensor(off + 1)
    if a is None or v is None or len(a.shape) != 2:
        return None
    m, n = a.shape
    return Cost(2.0 * m * n, float(a.nbytes + v.nbytes + m * a.itemsize), a.dtype)


@_register("aten::_scaled_mm")
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


# --- convolution -------------------------------------------------------------------

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


def _conv_out(size: int, k: int, s: int, p: int, d: int) -> int:
    return (size + 2 * p - d * (k - 1) - 1) // s + 1


@_register(*_CONV_ARGS)
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
                _conv_out(i, k, s, p, d)
                for i, k, s, p, d in zip(in_sp, ksp, stride, pad, dil, strict=True)
            ]
        flops = 2.0 * n_b * cout * math.prod(out_sp) * cin_g * math.prod(ksp)
    out_numel = n_b * cout * math.prod(out_sp)
    if bias is not None:
        flops += out_numel
    nbytes = inp.nbytes + w.nbytes + (bias.nbytes if bias else 0) + out_numel * inp.itemsize
    return Cost(flops, float(nbytes), inp.dtype)


@_register("aten::convolution_backward")
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


# --- attention ----------------------------------------------------------------------

# name → (layout, is_causal position, causal from custom_mask_type position, backward)
_ATTN: dict[str, tuple[str, int | None, int | None, bool]] = {
    "aten::scaled_dot_product_attention": ("BHLE", 5, None, False),
    "aten::_scaled_dot_product_flash_attention": ("BHLE", 4, None, False),
    "aten::_scaled_dot_product_efficient_attention": ("BHLE", 6, None, False),
    "aten::_scaled_dot_product_cudnn_attention": ("BHLE", 6, None, False),
    "aten::_scaled_dot_product_flash_attention_for_cpu": ("BHLE", 4, None, False),
    "aten::_scaled_dot_product_flash_attention_for_cpu_backward": ("BHLE", 7, None, True),
    "aten::_flash_attention_forward": ("BLHE", 8, None, False),
    "aten::_efficient_attention_forward": ("BLHE", None, 9, False),
    "aten::_scaled_dot_product_flash_attention_backward": ("BHLE", 11, None, True),
    "aten::_scaled_dot_product_efficient_attention_backward": ("BHLE", 11, None, True),
    "aten::_scaled_dot_product_cudnn_attention_backward": ("BHLE", 14, None, True),
    "aten::_flash_attention_backward": ("BLHE", 11, None, True),
    "aten::_efficient_attention_backward": ("BLHE", None, 14, True),
}


@_register(*_ATTN)
def _attention(name: str, x: Inputs) -> Cost | None:
    layout, causal_at, mask_at, backward = _ATTN[name]
    off = 1 if backward else 0  # backward ops take grad_out first
    q, k, v = x.tensor(off), x.tensor(off + 1), x.tensor(off + 2)
    if q is None or k is None or v is None or len(q.shape) != 4 or len(k.shape) != 4:
        return None
    if layout == "BHLE":
        b, h, lq, e = q.shape
        s, ev = k.shape[2], v.shape[3]
    else:
        b, lq, h, e = q.shape
        s, ev = k.shape[1], v.shape[3]
    causal: bool | None = None
    if causal_at is not None:
        causal = x.flag(causal_at)
    elif mask_at is not None:
        mt = x.value(mask_at)
        causal = bool(mt) if isinstance(mt, int) else None
    notes = []
    fwd = 2.0 * b * h * lq * s * e + 2.0 * b * h * lq * s * ev
    if causal:
        fwd *= CAUSAL_FACTOR
        notes.append("causal: FLOPs ×0.5")
    elif causal is None:
        notes.append("causal flag not recorded: non-causal assumed")
    out_bytes = b * h * lq * ev * q.itemsize
    lse_bytes = b * h * lq * 4
    if backward:
        g = x.tensor(0)
        flops = ATTENTION_BWD_FACTOR * fwd
        reads = (
            (g.nbytes if g else out_bytes) + q.nbytes + k.nbytes + v.nbytes + out_bytes + lse_bytes
        )
        writes = q.nbytes + k.nbytes + v.nbytes
        notes.append("backward: 2.5× forward (5 matmuls incl. recomputed QKᵀ)")
        return Cost(flops, float(reads + writes), q.dtype, "; ".join(notes))
    mask = x.tensor(3)
    nbytes = q.nbytes + k.nbytes + v.nbytes + (mask.nbytes if mask else 0) + out_bytes
    if name != "aten::scaled_dot_product_attention":
        nbytes += lse_bytes
    return Cost(fwd, float(nbytes), q.dtype, "; ".join(notes))


# --- element-wise ---------------------------------------------------------------------


def _elementwise(
    x: Inputs,
    per_elem: float,
    *,
    out_dtype: tuple[str, int] | None = None,
    writes_out: bool = True,
    extra_out_bytes: float = 0.0,
) -> Cost | None:
    ts = x.tensors()
    if not ts:
        return None
    out_shape = _broadcast([t.shape for t in ts])
    out_n = math.prod(out_shape)
    floats = [t for t in ts if t.dtype in FLOAT_BYTES]
    # type promotion: a 0-dim tensor (a scalar) does not widen a dimensioned one
    dimmed = [t for t in floats if t.shape] or floats
    main = max(dimmed, key=lambda t: t.itemsize) if dimmed else ts[0]
    size = out_dtype[1] if out_dtype else main.itemsize
    reads = sum(t.nbytes for t in ts)
    writes = out_n * size if writes_out else 0
    return Cost(per_elem * out_n, float(reads + writes + extra_out_bytes), main.dtype)


_BINARY = (
    "bitwise_not",
    "bitwise_and",
    "bitwise_or",
    "logical_not",
    "logical_and",
    "logical_or",
    "add",
    "sub",
    "rsub",
    "mul",
    "div",
    "where",
    "maximum",
    "minimum",
    "remainder",
    "fmod",
    "eq",
    "ne",
    "lt",
    "le",
    "gt",
    "ge",
    "pow",
    "addcmul",
    "addcdiv",
    "lerp",
    "clamp",
    "clamp_min",
    "clamp_max",
    "masked_fill",
    "neg",
    "abs",
    "sqrt",
    "rsqrt",
    "exp",
    "exp2",
    "log",
    "log1p",
    "reciprocal",
    "sin",
    "cos",
    "erf",
    "sign",
    "square",
    "floor",
    "ceil",
    "round",
    "relu",
    "threshold",
    "threshold_backward",
    "sigmoid",
    "sigmoid_backward",
    "tanh",
    "tanh_backward",
    "silu",
    "silu_backward",
    "leaky_relu",
    "leaky_relu_backward",
    "hardtanh",
    "hardtanh_backward",
    "elu",
    "softplus",
    "mish",
    "hardswish",
    "tril",
    "triu",
    "clone",
    "contiguous",
    "constant_pad_nd",
)


@_register(*(f"aten::{n}" for n in _BINARY), *(f"aten::{n}_" for n in _BINARY))
def _pointwise(name: str, x: Inputs) -> Cost | None:
    return _elementwise(x, PER_ELEMENT.get(_base(name), 1.0))


@_register("aten::gelu", "aten::gelu_", "aten::gelu_backward")
def _gelu(name: str, x: Inputs) -> Cost | None:
    approx = x.value(2 if name.endswith("backward") else 1)
    key = "gelu_tanh" if approx == "tanh" else "gelu"
    key += "_backward" if name.endswith("backward") else ""
    return _elementwise(x, PER_ELEMENT[key])


@_register("aten::copy_")
def _copy(name: str, x: Inputs) -> Cost | None:
    dst, src = x.tensor(0), x.tensor(1)
    if dst is None or src is None:
        return None
    return Cost(0.0, float(src.nbytes + dst.numel * dst.itemsize), dst.dtype)


@_register("aten::_to_copy")
def _to_copy(name: str, x: Inputs) -> Cost | None:
    src = x.tensor(0)
    if src is None:
        return None
    code = x.value(1)
    dst = SCALAR_TYPE.get(code) if isinstance(code, int) and not isinstance(code, bool) else None
    dst = dst or (src.dtype, src.itemsize)
    return Cost(0.0, float(src.nbytes + src.numel * dst[1]), dst[0])


@_register("aten::fill_", "aten::zero_", "aten::uniform_", "aten::normal_", "aten::bernoulli_")
def _fill(name: str, x: Inputs) -> Cost | None:
    t = x.tensor(0)
    return None if t is None else Cost(0.0, float(t.nbytes), t.dtype)


@_register("aten::native_dropout")
def _dropout(name: str, x: Inputs) -> Cost | None:
    t = x.tensor(0)
    if t is None:
        return None
    # reads x, writes y and a bool mask
    return Cost(PER_ELEMENT["native_dropout"] * t.numel, float(2 * t.nbytes + t.numel), t.dtype)


@_register("aten::native_dropout_backward")
def _dropout_bwd(name: str, x: Inputs) -> Cost | None:
    return _elementwise(x, PER_ELEMENT["native_dropout_backward"])


# --- softmax ------------------------------------------------------------------------


@_register("aten::_softmax", "aten::_log_softmax", "aten::softmax", "aten::log_softmax")
def _softmax(name: str, x: Inputs) -> Cost | None:
    t = x.tensor(0)
    if t is None:
        return None
    out = t.itemsize
    if name.startswith("aten::_") and x.flag(2):  # half_to_float
        out = 4
    elif not name.startswith("aten::_"):
        code = x.value(2)
        if isinstance(code, int) and not isinstance(code, bool) and code in SCALAR_TYPE:
            out = SCALAR_TYPE[code][1]
    return Cost(PER_ELEMENT["softmax"] * t.numel, float(t.nbytes + t.numel * out), t.dtype)


@_register("aten::_softmax_backward_data", "aten::_log_softmax_backward_data")
def _softmax_bwd(name: str, x: Inputs) -> Cost | None:
    g, y = x.tensor(0), x.tensor(1)
    if g is None or y is None:
        return None
    code = x.value(3)
    out = SCALAR_TYPE[code][1] if isinstance(code, int) and code in SCALAR_TYPE else g.itemsize
    return Cost(
        PER_ELEMENT["softmax_backward"] * g.numel,
        float(g.nbytes + y.nbytes + g.numel * out),
        g.dtype,
    )


# --- normalisation -------------------------------------------------------------------


def _norm_fwd(
    t: Tensor, params: list[Tensor | None], rows: int, *, rms: bool = False, stats: int = 2
) -> Cost:
    affine = sum(1 for p in params if p is not None)
    if rms:
        per = PER_ELEMENT["rms_norm"] + (PER_ELEMENT["rms_norm_affine"] if affine else 0)
    else:
        per = PER_ELEMENT["norm"] + (PER_ELEMENT["norm_affine"] if affine else 0)
    pbytes = sum(p.nbytes for p in params if p is not None)
    return Cost(per * t.numel, float(2 * t.nbytes + pbytes + stats * rows * 4), t.dtype)


@_register("aten::native_layer_norm", "aten::layer_norm")
def _layer_norm(name: str, x: Inputs) -> Cost | None:
    t, w, b = x.tensor(0), x.tensor(2), x.tensor(3)
    if t is None:
        return None
    norm = x.value(1)
    inner = math.prod(norm) if isinstance(norm, list) else (w.numel if w else 0)
    rows = t.numel // inner if inner else 0
    return _norm_fwd(t, [w, b], rows, stats=2 if name == "aten::native_layer_norm" else 0)


def _mask3(x: Inputs, i: int) -> tuple[list[bool], str]:
    v = x.value(i)
    if isinstance(v, list) and len(v) == 3:
        return [bool(a) for a in v], ""
    return [True, True, True], "output_mask not recorded: all grads assumed"


def _norm_bwd(g: Tensor, reads: float, params_numel: int, mask: list[bool], note: str) -> Cost:
    flops = (
        PER_ELEMENT["norm_backward_dx"] * g.numel * mask[0]
        + PER_ELEMENT["norm_backward_dgamma"] * g.numel * mask[1]
        + PER_ELEMENT["norm_backward_dbeta"] * g.numel * mask[2]
    )
    writes = g.nbytes * mask[0] + params_numel * g.itemsize * (mask[1] + mask[2])
    return Cost(flops, float(reads + writes), g.dtype, note)


@_register("aten::native_layer_norm_backward")
def _layer_norm_bwd(name: str, x: Inputs) -> Cost | None:
    g, t = x.tensor(0), x.tensor(1)
    if g is None or t is None:
        return None
    mean, rstd, w = x.tensor(3), x.tensor(4), x.tensor(5)
    mask, note = _mask3(x, 7)
    reads = g.nbytes + t.nbytes + sum(a.nbytes for a in (mean, rstd, w) if a is not None)
    return _norm_bwd(g, reads, w.numel if w else 0, mask, note)


@_register(
    "aten::native_batch_norm",
    "aten::cudnn_batch_norm",
    "aten::miopen_batch_norm",
    "aten::_native_batch_norm_legit",
    "aten::_native_batch_norm_legit_functional",
    "aten::_native_batch_norm_legit_no_training",
    "aten::_batch_norm_with_update",
)
def _batch_norm(name: str, x: Inputs) -> Cost | None:
    t, w, b = x.tensor(0), x.tensor(1), x.tensor(2)
    if t is None or len(t.shape) < 2:
        return None
    return _norm_fwd(t, [w, b], t.shape[1])


@_register(
    "aten::native_batch_norm_backward",
    "aten::cudnn_batch_norm_backward",
    "aten::miopen_batch_norm_backward",
)
def _batch_norm_bwd(name: str, x: Inputs) -> Cost | None:
    a, b = x.tensor(0), x.tensor(1)
    if a is None or b is None or len(a.shape) < 2:
        return None
    if name == "aten::native_batch_norm_backward":
        mask, note = _mask3(x, 9)
    else:
        mask, note = [True, True, True], ""
    reads = a.nbytes + b.nbytes + 4 * a.shape[1] * 4
    return _norm_bwd(a, reads, a.shape[1], mask, note)


@_register("aten::native_group_norm")
def _group_norm(name: str, x: Inputs) -> Cost | None:
    t, w, b = x.tensor(0), x.tensor(1), x.tensor(2)
    groups = x.value(6)
    if t is None or len(t.shape) < 1:
        return None
    rows = t.shape[0] * (groups if isinstance(groups, int) else 1)
    return _norm_fwd(t, [w, b], rows)


@_register("aten::native_group_norm_backward")
def _group_norm_bwd(name: str, x: Inputs) -> Cost | None:
    g, t, w = x.tensor(0), x.tensor(1), x.tensor(4)
    if g is None or t is None:
        return None
    mask, note = _mask3(x, 9)
    return _norm_bwd(g, g.nbytes + t.nbytes, w.numel if w else 0, mask, note)


@_register("aten::_fused_rms_norm", "aten::rms_norm")
def _rms_norm(name: str, x: Inputs) -> Cost | None:
    t, w = x.tensor(0), x.tensor(2)
    if t is None:
        return None
    norm = x.value(1)
    inner = math.prod(norm) if isinstance(norm, list) else (w.numel if w else 0)
    rows = t.numel // inner if inner else 0
    return _norm_fwd(t, [w], rows, rms=True, stats=1 if name == "aten::_fused_rms_norm" else 0)


@_register("aten::_fused_rms_norm_backward")
def _rms_norm_bwd(name: str, x: Inputs) -> Cost | None:
    g, t, w = x.tensor(0), x.tensor(1), x.tensor(4)
    if g is None or t is None:
        return None
    flops = PER_ELEMENT["rms_norm_backward"] * g.numel
    return Cost(flops, float(g.nbytes * 3 + (2 * w.nbytes if w else 0)), g.dtype)


# --- reductions ------------------------------------------------------------------------


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


@_register(*(f"aten::{n}" for n in _REDUCE), "aten::cumsum")
def _reduce(name: str, x: Inputs) -> Cost | None:
    t = x.tensor(0)
    if t is None:
        return None
    base = _base(name)
    key = "norm_reduce" if base in ("norm", "linalg_vector_norm") else base
    flops = PER_ELEMENT.get(key, 1.0) * t.numel
    if base == "cumsum":
        return Cost(flops, float(2 * t.nbytes), t.dtype)
    if base in ("max", "min") and x.tensor(1) is not None:  # max(a, b) is element-wise
        return _elementwise(x, 1.0)
    dim_at = _REDUCE[base]
    if len(x) <= 2 and dim_at == 1:  # sum(self, dtype), mean(self, dtype), max(self): all
        out: int | None = 1
    else:
        out = _reduce_out(t, x.value(dim_at), None)
    note = "" if out is not None else "reduced dims not recorded: output bytes not counted"
    nbytes = t.nbytes + (out or 0) * t.itemsize
    return Cost(flops, float(nbytes), t.dtype, note)


@_register(
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
    out_sp = [_conv_out(i, k, s, p, d) for i, k, s, p, d in zip(sp, ks, st, pad, dil, strict=True)]
    out = math.prod(t.shape[:-nsp]) * math.prod(out_sp)
    idx = 8 * out if "max" in name else 0
    return Cost(float(out * math.prod(ks)), float(t.nbytes + out * t.itemsize + idx), t.dtype)


@_register(
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


@_register("aten::_adaptive_avg_pool2d", "aten::adaptive_avg_pool2d")
def _adaptive_pool(name: str, x: Inputs) -> Cost | None:
    t = x.tensor(0)
    if t is None or len(t.shape) < 3:
        return None
    size = x.ints(1, 2)
    if size is None:
        return Cost(float(t.numel), float(t.nbytes), t.dtype, "output size not recorded")
    out = math.prod(t.shape[:-2]) * math.prod(size)
    return Cost(float(t.numel), float(t.nbytes + out * t.itemsize), t.dtype)


# --- embedding / gather ----------------------------------------------------------------


@_register("aten::embedding")
def _embedding(name: str, x: Inputs) -> Cost | None:
    w, idx = x.tensor(0), x.tensor(1)
    if w is None or idx is None or len(w.shape) != 2:
        return None
    rows = idx.numel * w.shape[1] * w.itemsize
    # only the rows looked up are read (not the whole table), each written once
    return Cost(0.0, float(2 * rows + idx.nbytes), w.dtype, "reads only the gathered rows")


@_register("aten::embedding_dense_backward")
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


@_register("aten::index_select")
def _index_select(name: str, x: Inputs) -> Cost | None:
    t, idx = x.tensor(0), x.tensor(2)
    dim = x.value(1)
    if t is None or idx is None or not isinstance(dim, int) or not t.shape:
        return None
    row = t.numel // t.shape[dim % len(t.shape)] if t.shape[dim % len(t.shape)] else 0
    out = idx.numel * row
    return Cost(0.0, float(2 * out * t.itemsize + idx.nbytes), t.dtype)


@_register("aten::gather")
def _gather(name: str, x: Inputs) -> Cost | None:
    t, idx = x.tensor(0), x.tensor(2)
    if t is None or idx is None:
        return None
    return Cost(0.0, float(2 * idx.numel * t.itemsize + idx.nbytes), t.dtype)


# --- losses ------------------------------------------------------------------------------


@_register("aten::nll_loss_forward", "aten::nll_loss2d_forward")
def _nll(name: str, x: Inputs) -> Cost | None:
    t, tgt = x.tensor(0), x.tensor(1)
    if t is None or tgt is None:
        return None
    # one log-probability gathered per target, summed
    return Cost(
        float(tgt.numel), float(tgt.numel * t.itemsize + tgt.nbytes + 2 * t.itemsize), t.dtype
    )


@_register("aten::nll_loss_backward", "aten::nll_loss2d_backward")
def _nll_bwd(name: str, x: Inputs) -> Cost | None:
    t, tgt = x.tensor(1), x.tensor(2)
    if t is None or tgt is None:
        return None
    # scatter -grad into the (separately zeroed) input gradient
    return Cost(float(tgt.numel), float(tgt.nbytes + tgt.numel * t.itemsize), t.dtype)


@_register("aten::mse_loss", "aten::mse_loss_backward")
def _mse(name: str, x: Inputs) -> Cost | None:
    return _elementwise(
        x,
        PER_ELEMENT[_base(name)],
        writes_out=name.endswith("backward"),
        extra_out_bytes=0.0 if name.endswith("backward") else 4.0,
    )


# --- optimizer ------------------------------------------------------------------------


def _lists(x: Inputs) -> list[TensorList]:
    return [tl for i in range(len(x)) if (tl := x.tensor_list(i)) is not None]


_LIST_NOTE = "tensor-list dtype not recorded by the profiler: {b} B/element assumed"
LIST_SIZES_UNKNOWN = "tensor-list sizes not recorded by the profiler"


@dataclass(frozen=True)
class ListOpts:
    """Assumptions for tensor lists: element size, and element count where unrecorded."""

    bytes: int = 4
    numel: int | None = None  # per list, used only where the profiler dropped the shapes


def _numel(tl: TensorList, opts: ListOpts) -> tuple[int | None, str]:
    """Elements of a list (recorded, else assumed) and the note to add."""
    if tl.numel is not None:
        return tl.numel, ""
    if opts.numel is not None:
        return opts.numel, f"{LIST_SIZES_UNKNOWN}: {opts.numel:,} elements per list assumed"
    return None, LIST_SIZES_UNKNOWN


def _list_cost(flops: float, nbytes: float, opts: ListOpts, extra: str) -> Cost:
    note = "; ".join(n for n in (_LIST_NOTE.format(b=opts.bytes), extra) if n)
    return Cost(flops, nbytes, None, note)


@_register("aten::_fused_adamw_", "aten::_fused_adam_", "aten::_fused_adamw", "aten::_fused_adam")
def _fused_adam(name: str, x: Inputs, opts: ListOpts = ListOpts()) -> Cost | None:
    params, grads = x.tensor_list(0), x.tensor_list(1)
    if params is None:
        return None
    p, extra = _numel(params, opts)
    if p is None:
        return Cost(NAN, NAN, None, extra)
    if grads is not None and grads.numel is not None and grads.numel != p:
        return None
    amsgrad = bool(x.flag(11))
    key = "adamw" if "adamw" in name else "adam"
    reads = (4 + amsgrad) * p  # params, grads, exp_avg, exp_avg_sq (+ max_exp_avg_sq)
    writes = (3 + amsgrad) * p
    return _list_cost(PER_ELEMENT[key] * p, float((reads + writes) * opts.bytes), opts, extra)


_FOREACH_FLOPS = {
    "add": 1, "sub": 1, "mul": 1, "div": 1, "maximum": 1, "minimum": 1, "clamp_min": 1,
    "clamp_max": 1, "addcmul": 3, "addcdiv": 3, "lerp": 2, "sqrt": 1, "rsqrt": 1, "exp": 1,
    "log": 1, "neg": 1, "abs": 1, "reciprocal": 1, "sign": 1, "sigmoid": 3, "pow": 1,
    "norm": 2, "copy": 0, "zero": 0,
}  # fmt: skip


def _foreach(name: str, x: Inputs, opts: ListOpts = ListOpts()) -> Cost | None:
    op = name.split("_foreach_", 1)[1].rstrip("_")
    if op not in _FOREACH_FLOPS:
        return None
    lists = _lists(x)
    if not lists:
        return None
    n, extra = _numel(lists[0], opts)
    if n is None:
        return Cost(NAN, NAN, None, extra)
    sizes = [n if tl.numel is None else tl.numel for tl in lists]
    if op == "zero":
        return _list_cost(0.0, float(n * opts.bytes), opts, extra)
    scalar_tensors = sum(t.nbytes for t in x.tensors())
    reads = sum(sizes) * opts.bytes + scalar_tensors
    if op == "copy":  # _foreach_copy_(self, src): read src, write self
        reads -= n * opts.bytes
    writes = 0 if op == "norm" else n * opts.bytes
    return _list_cost(_FOREACH_FLOPS[op] * float(n), float(reads + writes), opts, extra)


@_register("aten::_amp_foreach_non_finite_check_and_unscale_")
def _amp_unscale(name: str, x: Inputs, opts: ListOpts = ListOpts()) -> Cost | None:
    tl = x.tensor_list(0)
    if tl is None:
        return None
    n, extra = _numel(tl, opts)
    if n is None:
        return Cost(NAN, NAN, None, extra)
    return _list_cost(2.0 * n, float(2 * n * opts.bytes), opts, extra)


@_register("aten::cat", "aten::stack")
def _cat(name: str, x: Inputs, opts: ListOpts = ListOpts()) -> Cost | None:
    tl = x.tensor_list(0)
    if tl is None or tl.numel is None:
        return None if tl is None else Cost(NAN, NAN, None, LIST_SIZES_UNKNOWN)
    return _list_cost(0.0, float(2 * tl.numel * opts.bytes), opts, "")  # read all, write all


_LIST_OPS = {
    "aten::cat",
    "aten::stack",
    "aten::_fused_adamw_",
    "aten::_fused_adam_",
    "aten::_fused_adamw",
    "aten::_fused_adam",
    "aten::_amp_foreach_non_finite_check_and_unscale_",
}


def is_list_op(name: str) -> bool:
    return name in _LIST_OPS or name.startswith("aten::_foreach_")


# --- torch.compile (Inductor) Triton kernels, recorded as an op named like the kernel ---

_NO_FLOPS = {
    "view", "_unsafe_view", "clone", "copy", "_to_copy", "t", "transpose", "permute", "expand",
    "slice", "select", "squeeze", "unsqueeze", "cat", "split", "split_with_sizes", "embedding",
    "arange", "full", "full_default", "lift_fresh", "convert_element_type", "index", "gather",
    "as_strided", "detach", "alias", "stack", "constant_pad_nd", "zeros", "ones", "scalar_tensor",
    "new_zeros", "new_ones", "new_empty", "empty", "empty_strided", "slice_scatter",
    "select_scatter", "embedding_dense_backward", "fill", "zero", "bernoulli", "rand", "randn",
    "masked_fill", "tril", "triu",
}  # fmt: skip
_TOKEN_FLOPS = {
    "native_layer_norm": 8.0, "layer_norm": 8.0, "native_layer_norm_backward": 13.0,
    "rms_norm": 4.0, "_fused_rms_norm": 4.0, "var_mean": 3.0, "_softmax": 5.0,
    "_log_softmax": 5.0, "softmax": 5.0, "_softmax_backward_data": 4.0,
    "_log_softmax_backward_data": 4.0, "prepare_softmax_online": 4.0, "gelu": 5.0,
    "gelu_backward": 10.0, "silu": 4.0, "silu_backward": 8.0, "native_dropout": 2.0,
}  # fmt: skip


def _token_flops(tok: str) -> float:
    if tok in _NO_FLOPS:
        return 0.0
    return _TOKEN_FLOPS.get(tok, PER_ELEMENT.get(tok.strip("_"), 1.0))


def _triton(name: str, x: Inputs) -> Cost | None:
    """An Inductor kernel: every tensor argument read or written once; FLOPs from the
    per-element counts of its fused ops times its largest argument's elements (a
    template GEMM ``triton_tem_*``: 2·M·N·K from its A, B and output)."""
    ts = x.tensors()
    if not ts:
        return None
    nbytes = float(sum(t.nbytes for t in ts))
    floats = [t for t in ts if t.dtype in FLOAT_BYTES]
    dtype = max(floats, key=lambda t: (t.numel, t.itemsize)).dtype if floats else None
    if name.startswith("triton_tem_"):
        mats = [t for t in ts if len(t.shape) >= 2]
        for a in mats:
            for b in mats:
                if a is not b and a.shape[-1] == b.shape[-2] and a.shape[:-2] == b.shape[:-2]:
                    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
                    if any(o.shape[-2:] == (m, n) for o in mats if o is not a and o is not b):
                        batch = math.prod(a.shape[:-2])
                        return Cost(
                            2.0 * batch * m * n * k,
                            nbytes,
                            a.dtype,
                            "Inductor GEMM template: 2·M·N·K, each argument once",
                        )
        return Cost(NAN, nbytes, dtype, "Inductor GEMM template: operands not recognised")
    elements = max(t.numel for t in ts)
    per = sum(_token_flops(tok) for tok in (fused_ops(name) or []))
    return Cost(
        per * elements,
        nbytes,
        dtype,
        "Inductor kernel: fused ops' per-element FLOPs × largest argument; each "
        "argument read or written once",
    )


def has_formula(name: str) -> bool:
    return name in FORMULAS or name.startswith("aten::_foreach_") or name.startswith("triton_")


@functools.lru_cache(maxsize=200_000)
def op_cost(
    name: str,
    dims_json: str | None,
    types_json: str | None,
    concrete_json: str | None = None,
    list_bytes: int = 4,
    list_numel: int | None = None,
) -> Cost | None:
    """Cost of one call of operator ``name`` from its recorded inputs.

    ``None``: tracekit has no model for this operator. A cost with NaN FLOPs and bytes:
    it has one, but the inputs it needs were not recorded (the note says which).
    ``list_bytes`` is the element size assumed for tensor lists (the profiler records
    their shapes but not their dtype); ``list_numel`` the element count assumed for a
    list whose shapes were not recorded (long lists lose them), else such a list is
    unknown.
    """
    if not has_formula(name):
        return None
    if not dims_json or not types_json:
        return Cost(NAN, NAN, None, "no shapes recorded")
    try:
        dims = json.loads(dims_json)
        types = json.loads(types_json)
        concrete = json.loads(concrete_json) if concrete_json else []
    except ValueError:
        return Cost(NAN, NAN, None, "unreadable shape record")
    if not isinstance(dims, list) or not isinstance(types, list):
        return Cost(NAN, NAN, None, "unreadable shape record")
    x = Inputs(dims, types, concrete if isinstance(concrete, list) else [])
    try:
        opts = ListOpts(list_bytes, list_numel)
        if name.startswith("triton_"):
            cost = _triton(name, x)
        elif name.startswith("aten::_foreach_"):
            cost = _foreach(name, x, opts)
        elif name in _LIST_OPS:
            cost = FORMULAS[name](name, x, opts)  # type: ignore[call-arg]
        else:
            cost = FORMULAS[name](name, x)
    except (ArithmeticError, IndexError, KeyError, TypeError, ValueError):
        cost = None
    if cost is None:
        return Cost(NAN, NAN, None, f"inputs of {name} not in the expected form")
    return cost


@dataclass
class OpCosts:
    """:func:`model_ops` as arrays aligned with the ops (object arrays hold str/None)."""

    has_model: np.ndarray
    flops_model: np.ndarray
    flops_profiler: np.ndarray
    flops: np.ndarray
    bytes: np.ndarray
    dtype: np.ndarray
    source: np.ndarray
    cost_note: np.ndarray


def model_op_costs(
    ops: pd.DataFrame, *, list_bytes: int = 4, only: np.ndarray | None = None
) -> OpCosts:
    """:func:`model_ops` without building a frame: one :func:`op_cost` per distinct
    (name, input dims, input types, concrete inputs), broadcast to its calls."""
    n = len(ops)
    has = np.zeros(n, dtype=bool)
    fl = np.full(n, NAN)
    by = np.full(n, NAN)
    dt = np.full(n, None, dtype=object)
    note = np.full(n, "", dtype=object)
    rows = np.flatnonzero(only) if only is not None else np.arange(n)

    def at(col: str) -> pd.Series | None:  # the column at the (current) rows
        return pd.Series(ops[col].array.take(rows)) if col in ops else None

    if len(rows):
        name_codes, names = factorized(at("name"), len(rows))
        modelled = np.array([u is not None and has_formula(u) for u in names], dtype=bool)
        keep = modelled[name_codes]
        rows, name_codes = rows[keep], name_codes[keep]
    if len(rows):
        parts = [(name_codes, names)]
        parts += [
            factorized(at(c), len(rows)) for c in ("input_dims", "input_types", "concrete_inputs")
        ]
        codes, first = combine_codes(*(c for c, _ in parts))
        nm, d, t, c = (np.array(v, dtype=object)[k[first]].tolist() for k, v in parts)
        costs = [
            op_cost(str(a or ""), b, e, f, list_bytes)
            for a, b, e, f in zip(nm, d, t, c, strict=True)
        ]
        ok = np.array([c is not None for c in costs], dtype=bool)
        u_fl = np.array([c.flops if c else NAN for c in costs], dtype=float)
        u_by = np.array([c.bytes if c else NAN for c in costs], dtype=float)
        u_dt = np.array([c.dtype if c else None for c in costs], dtype=object)
        u_no = np.array([c.note if c else "" for c in costs], dtype=object)
        has[rows], fl[rows], by[rows] = ok[codes], u_fl[codes], u_by[codes]
        dt[rows], note[rows] = u_dt[codes], u_no[codes]
    prof = (
        pd.to_numeric(ops["flops"], errors="coerce").to_numpy(dtype=float)
        if "flops" in ops
        else np.full(n, NAN)
    )
    use_prof = np.isfinite(prof) & (prof > 0)
    flops = np.where(use_prof, prof, fl)
    labels = np.array(["none", "modelled", "profiler"], dtype=object)
    source = labels[np.where(use_prof, 2, np.isfinite(fl).astype(np.int64))]
    return OpCosts(has, fl, prof, flops, by, dt, source, note)


def model_ops(
    ops: pd.DataFrame, *, list_bytes: int = 4, only: np.ndarray | None = None
) -> pd.DataFrame:
    """Modelled cost of every op (or of the rows selected by boolean mask ``only``).

    Returns a frame aligned with ``ops`` with columns ``has_model`` (bool),
    ``flops_model``, ``bytes`` (NaN: unknown), ``dtype``, ``flops_profiler`` (the
    trace's own ``flops`` where present) and ``flops`` (the profiler's where present,
    else the model's), ``source`` ('profiler' | 'modelled' | 'none') and ``cost_note``.
    """
    c = model_op_costs(ops, list_bytes=list_bytes, only=only)
    cols = ("has_model", "flops_model", "flops_profiler", "flops", "bytes", "dtype", "source",
            "cost_note")  # fmt: skip
    frame: pd.DataFrame = pd.DataFrame({k: getattr(c, k) for k in cols}, index=ops.index)
    return frame


def per_element_markdown() -> str:
    """The per-element FLOP counts as Markdown (docs/classify.md embeds it)."""
    out = ["| operator (per element) | FLOPs |", "| --- | --- |"]
    for k, v in PER_ELEMENT.items():
        out.append(f"| `{k}` | {v:g} |")
    out.append(f"| attention backward / forward | {ATTENTION_BWD_FACTOR:g} |")
    out.append(f"| causal attention factor | {CAUSAL_FACTOR:g} |")
    return "\n".join(out)
