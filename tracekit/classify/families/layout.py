"""Layout transforms: work that only rearranges elements — a transposed or permuted view
made contiguous (``contiguous``, the copy behind a ``reshape`` that cannot be a view),
cuDNN's and MIOpen's NCHW↔NHWC conversions around a convolution, im2col/col2im, pixel and
channel shuffles. The ``layout`` class: the time a channels-last model, a fused attention
or a different tensor order would save.

Rule order: ``contiguous``/``reshape`` are regions (everything inside is layout, though
their copy is an ``aten::copy_``, which alone would be element-wise); a kernel whose name
says it converts NCHW↔NHWC is layout even under a convolution (priority above the
operator rules); a generic ``transpose`` kernel name is a fallback. Casts
(``to``/``_to_copy``), plain copies (``copy_``, ``clone`` of a contiguous tensor) and
concatenation stay element-wise.

Costs: read once, write once, no FLOPs. A layout kernel launched by an operator of another
class (a convolution) carries a share of that operator's bytes but none of its FLOPs
(``data_movement``).
"""

from __future__ import annotations

import math

from tracekit.classify.families.family import (
    P_GENERIC,
    P_NAMED_KERNEL,
    P_REGION,
    ClassSpec,
    Family,
    Rule,
    aten,
)
from tracekit.classify.families.inputs import Cost, Inputs, elementwise

RULES: tuple[Rule, ...] = (
    Rule(
        aten(
            "contiguous",
            "reshape",
            "_reshape_copy",
            r"(?:permute|transpose|t|view|_reshape_alias|unfold|as_strided|expand|unsqueeze"
            r"|squeeze|select|slice|diagonal|alias)_copy",
            "pixel_shuffle",
            "pixel_unshuffle",
            r"(?:native_)?channel_shuffle",
            "im2col",
            "col2im",
        ),
        "op",
        "layout",
        P_REGION,
        "materialised views: contiguous(), the copy of a reshape that cannot be a view, "
        "the *_copy view ops, shuffles, im2col/col2im",
    ),
    Rule(
        r"(?i)nchwToNhwc|nhwcToNchw|nchw2nhwc|nhwc2nchw|batched_transpose"
        r"|transpose_(?:NCHW|CNHW|NHWC)|NCHW2CNHW|CNHW2NCHW",
        "kernel",
        "layout",
        P_NAMED_KERNEL,
        "NCHW↔NHWC conversions (cuDNN nchwToNhwcKernel, MIOpen batched_transpose, "
        "transpose_NCHW2CNHW): layout even inside a convolution",
    ),
    Rule(
        r"(?i)transpose|permute_kernel|im2col|col2im|vol2col|col2vol|pixel_(?:un)?shuffle"
        r"|channel_shuffle",
        "kernel",
        "layout",
        P_GENERIC,
        "generic transpose/permute, im2col/col2im kernels",
    ),
)

FUSED_RULES: tuple[Rule, ...] = (
    Rule(
        r"^<poi>(?: (?:clone|permute|transpose|t|view|_unsafe_view|reshape|expand|squeeze"
        r"|unsqueeze|as_strided|select|slice|alias))+$",
        "fused",
        "layout",
        6,
        "a pointwise kernel of views and clones only: a materialised permute",
    ),
)

FAMILY = Family(
    "layout",
    classes=(ClassSpec("layout", data_movement=True),),
    rules=RULES,
    fused_rules=FUSED_RULES,
    per_element={"contiguous": 0},
)


@FAMILY.cost(
    "aten::contiguous",
    "aten::pixel_shuffle",
    "aten::pixel_unshuffle",
    "aten::channel_shuffle",
    "aten::native_channel_shuffle",
)
def _rearrange(name: str, x: Inputs) -> Cost | None:
    """Every element read once and written once."""
    t = x.tensor(0)
    return None if t is None else Cost(0.0, float(2 * t.nbytes), t.dtype)


@FAMILY.cost("aten::im2col")
def _im2col(name: str, x: Inputs) -> Cost | None:
    """``im2col(self, kernel_size, dilation, padding, stride)``: writes ``∏kernel`` copies
    of each output position's patch."""
    t = x.tensor(0)
    if t is None or len(t.shape) < 3:
        return None
    ks, dil, pad, st = (x.ints(i, 2) for i in (1, 2, 3, 4))
    if ks is None or dil is None or pad is None or st is None:
        return elementwise(x, 0.0)
    sp = t.shape[-2:]
    blocks = [
        (i + 2 * p - d * (k - 1) - 1) // s + 1
        for i, k, d, p, s in zip(sp, ks, dil, pad, st, strict=True)
    ]
    out = math.prod(t.shape[:-2]) * math.prod(ks) * math.prod(blocks)
    return Cost(0.0, float(t.nbytes + out * t.itemsize), t.dtype)
