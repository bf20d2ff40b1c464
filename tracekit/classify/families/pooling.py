"""Pooling: max, average and adaptive pooling (1-, 2- and 3-d), forward and backward — the
``pooling`` class, out of ``reduction`` (a windowed reduction, but a CNN's own line).

Costs (per output element of the forward): a max pool compares its window (``∏kernel``
FLOPs) and writes an int64 index; an average pool adds its window; an adaptive average
pool reads every input element once. Backward: a max pool scatters each output gradient
to its argmax (one add each), an average pool spreads it over its window; both write the
whole input gradient. The output size follows stride, padding, dilation and ``ceil_mode``.
"""

from __future__ import annotations

import math

from tracekit.classify.families.family import (
    P_GENERIC,
    P_NORMAL,
    P_REGION,
    ClassSpec,
    Family,
    Rule,
    aten,
)
from tracekit.classify.families.inputs import NAN, Cost, Inputs, Tensor

RULES: tuple[Rule, ...] = (
    Rule(
        aten(r"adaptive_(?:avg|max)_pool\dd", r"(?:max|avg)_pool\dd", r"lp_pool\dd"),
        "op",
        "pooling",
        P_REGION,
        "composite pooling entry points: adaptive_avg_pool2d to 1×1 runs a mean, "
        "avg_pool1d an avg_pool2d; their kernels are pooling",
    ),
    Rule(
        aten(
            r"max_pool\dd_with_indices(?:_backward)?",
            r"avg_pool\dd_backward",
            r"_adaptive_avg_pool\dd(?:_backward)?",
            r"adaptive_max_pool\dd_backward",
            r"fractional_max_pool\dd\w*",
            r"max_unpool\dd\w*",
            r"mkldnn_(?:max|avg|adaptive_avg)_pool\dd\w*",
            r"quantized_max_pool\dd",
            r"_low_memory_max_pool\w*",
        ),
        "op",
        "pooling",
        P_NORMAL,
        "pooling forward and backward",
    ),
    Rule(
        r"^(?:MaxPool\dDWithIndices|AvgPool\dD|AdaptiveAvgPool\dD|AdaptiveMaxPool\dD"
        r"|FractionalMaxPool\dD|MaxUnpool\dD)Backward\d*$",
        "op",
        "pooling",
        P_NORMAL,
        "autograd nodes",
    ),
    Rule(
        r"(?i)max_?pool|avg_?pool|ave_?pool|adaptive_av\w*pool|adaptive_max|pool_?forward"
        r"|pool_?backward|pooling_(?:fw|bw)|MIOpenPooling|poolingNd|lp_?pool",
        "kernel",
        "pooling",
        P_GENERIC,
        "pooling kernels (PyTorch max_pool_forward_nchw/adaptive_average_pool, cuDNN "
        "pooling_fw/bw, MIOpen pooling); generic, so the launching operator decides",
    ),
)

FUSED_RULES: tuple[Rule, ...] = (
    Rule(
        r"(?:^| )(?:_low_memory_max_pool\w*|max_pool\w*|avg_pool\w*|adaptive_\w*pool\w*)(?: |$)",
        "fused",
        "pooling",
        62,
        "pooling (above the activation fused into it and the reductions it resembles)",
    ),
)

# FLOPs per element. Documented in docs/classify.md.
PER_ELEMENT: dict[str, float] = {
    # per window element of an output (compare or add); backward per output-gradient
    # element (max: one add to its argmax) or per window element (avg: spread)
    "pool_window": 1, "max_pool_backward": 1, "avg_pool_backward": 1,
}  # fmt: skip

FAMILY = Family(
    "pooling",
    classes=(ClassSpec("pooling"),),
    rules=RULES,
    fused_rules=FUSED_RULES,
    fused_vocab=(
        "max_pool2d_with_indices",
        "max_pool2d_with_indices_backward",
        "max_pool3d_with_indices",
        "avg_pool2d",
        "avg_pool2d_backward",
        "avg_pool3d",
        "_adaptive_avg_pool2d",
        "_adaptive_avg_pool2d_backward",
        "_low_memory_max_pool2d_with_offsets",
        "_low_memory_max_pool2d_offsets_to_indices",
    ),
    per_element=PER_ELEMENT,
)


def pool_out(size: int, k: int, s: int, p: int, d: int, ceil: bool) -> int:
    """Output size of a pooling window along one axis (PyTorch's pooling_output_shape)."""
    span = size + 2 * p - d * (k - 1) - 1
    out = (span + (s - 1 if ceil else 0)) // s + 1
    if ceil and (out - 1) * s >= size + p:  # the last window must start inside the input
        out -= 1
    return out


def _ndim(name: str) -> int:
    return 3 if "3d" in name else (1 if "1d" in name else 2)


def _window(name: str, x: Inputs, t: Tensor, first: int) -> tuple[list[int], list[int]] | None:
    """Kernel size and output spatial size of a (max|avg)_pool call whose kernel_size is
    argument ``first`` (stride, padding, then dilation and ceil_mode for max, ceil_mode for
    avg follow it)."""
    nsp = _ndim(name)
    if len(t.shape) < nsp + 1:
        return None
    ks = x.ints(first, nsp)
    if ks is None:
        return None
    st = x.ints(first + 1, nsp) or ks  # an empty stride defaults to the kernel size
    pad = x.ints(first + 2, nsp) or [0] * nsp
    if "max" in name:
        dil, ceil = x.ints(first + 3, nsp) or [1] * nsp, x.flag(first + 4)
    else:
        dil, ceil = [1] * nsp, x.flag(first + 3)
    sp = t.shape[-nsp:]
    out = [
        pool_out(i, k, s, p, d, bool(ceil))
        for i, k, s, p, d in zip(sp, ks, st, pad, dil, strict=True)
    ]
    return ks, out


@FAMILY.cost(
    "aten::max_pool1d",
    "aten::max_pool2d",
    "aten::max_pool3d",
    "aten::max_pool1d_with_indices",
    "aten::max_pool2d_with_indices",
    "aten::max_pool3d_with_indices",
    "aten::avg_pool1d",
    "aten::avg_pool2d",
    "aten::avg_pool3d",
)
def _pool(name: str, x: Inputs) -> Cost | None:
    t = x.tensor(0)
    if t is None:
        return None
    w = _window(name, x, t, 1)
    if w is None:
        return Cost(NAN, NAN, t.dtype, "pool: kernel size not recorded")
    ks, out_sp = w
    out = math.prod(t.shape[: -len(out_sp)]) * math.prod(out_sp)
    idx = 8 * out if name.endswith("_with_indices") else 0
    flops = PER_ELEMENT["pool_window"] * out * math.prod(ks)
    return Cost(flops, float(t.nbytes + out * t.itemsize + idx), t.dtype)


@FAMILY.cost(
    "aten::max_pool2d_with_indices_backward",
    "aten::max_pool3d_with_indices_backward",
    "aten::adaptive_max_pool2d_backward",
    "aten::adaptive_max_pool3d_backward",
)
def _max_pool_bwd(name: str, x: Inputs) -> Cost | None:
    """``(grad_output, self, …, indices)``: reads the gradient and the indices, writes the
    input-sized gradient (the input itself only gives the shape)."""
    g, t = x.tensor(0), x.tensor(1)
    if g is None or t is None:
        return None
    idx = x.tensor(2 if name.startswith("aten::adaptive") else 7)
    flops = PER_ELEMENT["max_pool_backward"] * g.numel
    return Cost(flops, float(g.nbytes + (idx.nbytes if idx else 0) + t.nbytes), g.dtype)


@FAMILY.cost("aten::avg_pool2d_backward", "aten::avg_pool3d_backward")
def _avg_pool_bwd(name: str, x: Inputs) -> Cost | None:
    """``(grad_output, self, kernel_size, stride, padding, ceil_mode, …)``: each output
    gradient is spread over its window."""
    g, t = x.tensor(0), x.tensor(1)
    if g is None or t is None:
        return None
    ks = x.ints(2, _ndim(name))
    window = math.prod(ks) if ks else 1
    note = "" if ks else "kernel size not recorded: one add per gradient element assumed"
    flops = PER_ELEMENT["avg_pool_backward"] * g.numel * window
    return Cost(flops, float(g.nbytes + t.nbytes), g.dtype, note)


@FAMILY.cost(
    "aten::_adaptive_avg_pool2d",
    "aten::adaptive_avg_pool2d",
    "aten::_adaptive_avg_pool3d",
    "aten::adaptive_avg_pool3d",
    "aten::adaptive_avg_pool1d",
    "aten::adaptive_max_pool1d",
    "aten::adaptive_max_pool2d",
    "aten::adaptive_max_pool3d",
)
def _adaptive_pool(name: str, x: Inputs) -> Cost | None:
    """Every input element read (and added or compared) once; the output written (with
    int64 indices for max)."""
    t = x.tensor(0)
    nsp = _ndim(name)
    if t is None or len(t.shape) < nsp + 1:
        return None
    size = x.ints(1, nsp)
    if size is None:
        return Cost(float(t.numel), float(t.nbytes), t.dtype, "output size not recorded")
    out = math.prod(t.shape[:-nsp]) * math.prod(size)
    idx = 8 * out if "max" in name else 0
    return Cost(float(t.numel), float(t.nbytes + out * t.itemsize + idx), t.dtype)


@FAMILY.cost("aten::_adaptive_avg_pool2d_backward", "aten::_adaptive_avg_pool3d_backward")
def _adaptive_avg_pool_bwd(name: str, x: Inputs) -> Cost | None:
    """``(grad_output, self)``: every input position receives its share of the gradient."""
    g, t = x.tensor(0), x.tensor(1)
    if g is None or t is None:
        return None
    return Cost(float(t.numel), float(g.nbytes + t.nbytes), g.dtype)
