"""Element-wise math, casts and copies, fills, dropout, masking, concatenation and random
numbers: the last family, whose generic kernel rules (priority 45) lose to any operator
rule. (Layout transforms are their own family.)
"""

from __future__ import annotations

from tracekit.classify.families.family import P_GENERIC, P_NORMAL, ClassSpec, Family, Rule, aten
from tracekit.classify.families.inputs import (
    LIST_SIZES_UNKNOWN,
    NAN,
    SCALAR_TYPE,
    Cost,
    Inputs,
    ListOpts,
    aten_inplace,
    elementwise,
    list_cost,
    per_element_model,
)

RULES: tuple[Rule, ...] = (
    Rule(
        aten(
            r"add_?",
            r"sub_?",
            "rsub",
            r"mul_?",
            r"div_?",
            r"neg_?",
            r"abs_?",
            r"pow_?",
            r"sqrt_?",
            r"rsqrt_?",
            r"exp_?",
            r"exp2_?",
            r"log_?",
            r"log1p_?",
            r"reciprocal_?",
            r"where",
            r"masked_fill_?",
            r"masked_scatter_?",
            r"fill_",
            r"zero_",
            "zeros",
            "zeros_like",
            "ones",
            "ones_like",
            "full",
            "full_like",
            "empty_like_fill",
            r"copy_",
            "_to_copy",
            "to",
            "clone",
            "cat",
            "_cat",
            "stack",
            r"index_copy_?",
            "dropout",
            "native_dropout",
            "native_dropout_backward",
            r"feature_dropout_?",
            r"_fused_dropout",
            r"_masked_scale",
            r"bernoulli_?",
            r"uniform_",
            r"normal_",
            r"rand\w*",
            "arange",
            r"addcmul_?",
            r"addcdiv_?",
            r"lerp_?",
            r"clamp_?",
            r"sign_?",
            r"sin_?",
            r"cos_?",
            r"tril_?",
            r"triu_?",
            r"eq_?",
            r"ne_?",
            r"lt_?",
            r"le_?",
            r"gt_?",
            r"ge_?",
            r"logical_\w+",
            r"bitwise_\w+",
            r"floor_?",
            r"ceil_?",
            r"round_?",
            r"trunc_?",
            r"remainder_?",
            r"fmod_?",
            "maximum",
            "minimum",
            r"erf_?",
            r"erfinv_?",
            "flip",
            "roll",
            "repeat",
            r"repeat_interleave",
            r"constant_pad_nd",
            r"reflection_pad\w*",
            r"replication_pad\w*",
            "split_with_sizes_copy",
            "expand_copy",
            "_unsafe_view",
            "resize_",
            "scalar_tensor",
            "lift_fresh_copy",
            r"nan_to_num_?",
            r"square_?",
            r"isnan",
            r"isinf",
            r"isfinite",
            "upsample\\w*",
        ),
        "op",
        "elementwise",
        P_NORMAL,
        "element-wise math, casts and copies (to/_to_copy/copy_), fills, dropout, "
        "masking, concatenation; clamp_min/clamp_max have no rule, so relu_ decides over "
        "its inner clamp_min_",
    ),
    Rule(
        r"^(?:Add|Sub|Mul|Div|Neg|Pow|Exp|Log|Sqrt|Rsqrt|Where|MaskedFill|NativeDropout|Clone"
        r"|ToCopy|Copy\w*|Cat|Stack|Expand|Repeat|Unsafe\w*|Permute|Transpose|View|Reshape|"
        r"Select|Slice|Split\w*|Squeeze|Unsqueeze|T|Cumsum)Backward\d*$",
        "op",
        "elementwise",
        P_NORMAL,
        "autograd nodes of element-wise/view ops",
    ),
    Rule(
        r"(?i)elementwise|unrolled_elementwise|vectorized_elementwise|copy_kernel|"
        r"CatArrayBatchedCopy|fill_kernel|FillFunctor|dropout|"
        r"SubTensorOp|OpTensor|Op\d?dTensor|scalePackedTensor|tensor_kernel_scalar|"
        r"_copy_|rotary|fused_add|triu_tril|where_kernel|masked_fill|"
        r"distribution_elementwise|philox|bernoulli|curand|arange|upsample|pad_kernel|quant",
        "kernel",
        "elementwise",
        P_GENERIC,
        "generic element-wise templates, copies, RNG, MIOpen tensor ops",
    ),
)

FUSED_RULES: tuple[Rule, ...] = (
    Rule(r".", "fused", "elementwise", 5, "anything else (add, mul, casts, dropout, …)"),
)

# FLOPs per element (a transcendental counts 1). Documented in docs/classify.md.
PER_ELEMENT: dict[str, float] = {
    # binary / unary arithmetic
    "add": 1, "sub": 1, "rsub": 1, "mul": 1, "div": 1, "neg": 1, "abs": 1, "pow": 1,
    "sqrt": 1, "rsqrt": 1, "exp": 1, "exp2": 1, "log": 1, "log1p": 1, "reciprocal": 1,
    "sin": 1, "cos": 1, "erf": 1, "sign": 1, "square": 1, "maximum": 1, "minimum": 1,
    "where": 1, "clamp": 1, "clamp_min": 1, "clamp_max": 1, "eq": 1, "ne": 1, "lt": 1,
    "le": 1, "gt": 1, "ge": 1, "floor": 1, "ceil": 1, "round": 1, "remainder": 1, "fmod": 1,
    "addcmul": 3, "addcdiv": 3, "lerp": 2,
    # data movement: no arithmetic
    "copy": 0, "_to_copy": 0, "clone": 0, "cat": 0, "stack": 0,
    "masked_fill": 0, "fill": 0, "zero": 0, "constant_pad_nd": 0, "index_copy": 0,
    "tril": 0, "triu": 0,
    # dropout: compare against a random number, scale
    "native_dropout": 2, "native_dropout_backward": 2,
}  # fmt: skip

FAMILY = Family(
    "elementwise",
    classes=(ClassSpec("elementwise"),),
    rules=RULES,
    fused_rules=FUSED_RULES,
    fused_vocab=(
        "_to_copy",
        "_unsafe_view",
        "masked_fill",
        "native_dropout",
        "native_dropout_backward",
        "constant_pad_nd",
        "split_with_sizes",
        "bitwise_and",
        "bitwise_or",
        "bitwise_not",
        "bitwise_xor",
        "logical_and",
        "logical_or",
        "logical_not",
        "clamp_min",
        "clamp_max",
        "lift_fresh",
        "full_default",
        "scalar_tensor",
        "new_zeros",
        "new_ones",
        "new_empty",
        "empty_strided",
        "as_strided",
        "select_scatter",
        "slice_scatter",
        "diagonal_scatter",
        "squeeze",
        "unsqueeze",
        "reflection_pad2d",
    ),
    per_element=PER_ELEMENT,
)

# element-wise operators (and their in-place forms ``name_``): PER_ELEMENT FLOPs per output
# element (1 if not listed)
_POINTWISE = (
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
    "tril",
    "triu",
    "clone",
    "constant_pad_nd",
)


FAMILY.cost(*aten_inplace(_POINTWISE))(per_element_model(PER_ELEMENT))


@FAMILY.cost("aten::copy_")
def _copy(name: str, x: Inputs) -> Cost | None:
    dst, src = x.tensor(0), x.tensor(1)
    if dst is None or src is None:
        return None
    return Cost(0.0, float(src.nbytes + dst.numel * dst.itemsize), dst.dtype)


@FAMILY.cost("aten::_to_copy")
def _to_copy(name: str, x: Inputs) -> Cost | None:
    src = x.tensor(0)
    if src is None:
        return None
    code = x.value(1)
    dst = SCALAR_TYPE.get(code) if isinstance(code, int) and not isinstance(code, bool) else None
    dst = dst or (src.dtype, src.itemsize)
    return Cost(0.0, float(src.nbytes + src.numel * dst[1]), dst[0])


@FAMILY.cost("aten::fill_", "aten::zero_", "aten::uniform_", "aten::normal_", "aten::bernoulli_")
def _fill(name: str, x: Inputs) -> Cost | None:
    t = x.tensor(0)
    return None if t is None else Cost(0.0, float(t.nbytes), t.dtype)


@FAMILY.cost("aten::native_dropout")
def _dropout(name: str, x: Inputs) -> Cost | None:
    t = x.tensor(0)
    if t is None:
        return None
    # reads x, writes y and a bool mask
    return Cost(PER_ELEMENT["native_dropout"] * t.numel, float(2 * t.nbytes + t.numel), t.dtype)


@FAMILY.cost("aten::native_dropout_backward")
def _dropout_bwd(name: str, x: Inputs) -> Cost | None:
    return elementwise(x, PER_ELEMENT["native_dropout_backward"])


@FAMILY.cost("aten::cat", "aten::stack", lists=True)
def _cat(name: str, x: Inputs, opts: ListOpts) -> Cost | None:
    tl = x.tensor_list(0)
    if tl is None or tl.numel is None:
        return None if tl is None else Cost(NAN, NAN, None, LIST_SIZES_UNKNOWN)
    return list_cost(0.0, float(2 * tl.numel * opts.bytes), opts, "")  # read all, write all
