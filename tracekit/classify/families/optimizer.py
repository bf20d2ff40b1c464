"""Optimizer: the work inside ``Optimizer.step``/``zero_grad``, fused and multi-tensor
(foreach) optimizer operators and their kernels, AMP grad unscaling.

A torch.compile'd optimizer step (Inductor ``triton_for_*`` kernels) is optimizer too
(:func:`tracekit.classify.classes.match_fused`).

Costs: tensor-list operators (the profiler records their shapes but not their dtype, and
drops the shapes of long lists; see :class:`~tracekit.classify.families.inputs.ListOpts`).
"""

from __future__ import annotations

from tracekit.classify.families.family import (
    P_GENERIC,
    P_NORMAL,
    P_OPTIMIZER,
    ClassSpec,
    Family,
    Rule,
    aten,
)
from tracekit.classify.families.inputs import (
    NAN,
    Cost,
    Inputs,
    ListOpts,
    list_cost,
    list_numel,
    tensor_lists,
)

RULES: tuple[Rule, ...] = (
    Rule(
        r"^Optimizer\.(?:step|zero_grad)#",
        "op",
        "optimizer",
        P_OPTIMIZER,
        "all work inside the optimizer step / zero_grad annotation",
    ),
    Rule(
        aten(
            r"_fused_(?:adam|adamw|sgd|adagrad)_?",
            r"_foreach_\w+",
            r"_amp_foreach_non_finite_check_and_unscale_",
            r"_amp_update_scale_",
        ),
        "op",
        "optimizer",
        P_NORMAL,
        "fused and multi-tensor (foreach) optimizer ops, grad clipping, AMP grad unscaling",
    ),
    Rule(
        r"(?i)multi_tensor_apply_kernel.*(?:adam|sgd|lamb|lion)|fused_adam|FusedAdam"
        r"|adam_kernel|_fused_adamw?_kernel",
        "kernel",
        "optimizer",
        P_NORMAL,
        "optimizer update kernels",
    ),
    Rule(
        r"multi_tensor_apply_kernel|multi_tensor_apply_for_fused",
        "kernel",
        "optimizer",
        P_GENERIC,
        "other multi-tensor (foreach) kernels: optimizer steps, clipping, AMP unscale",
    ),
)

# FLOPs per element (a transcendental counts 1). Documented in docs/classify.md.
PER_ELEMENT: dict[str, float] = {
    # AdamW per parameter: decay 1, first moment 2, second moment 4, denominator 3,
    # update 3
    "adamw": 13, "adam": 14, "sgd": 2, "sgd_momentum": 4,
}  # fmt: skip

FAMILY = Family(
    "optimizer",
    classes=(ClassSpec("optimizer"),),
    rules=RULES,
    fused_vocab=(
        "_foreach_add",
        "_foreach_mul",
    ),
    per_element=PER_ELEMENT,
)


@FAMILY.cost(
    "aten::_fused_adamw_",
    "aten::_fused_adam_",
    "aten::_fused_adamw",
    "aten::_fused_adam",
    lists=True,
)
def _fused_adam(name: str, x: Inputs, opts: ListOpts) -> Cost | None:
    params, grads = x.tensor_list(0), x.tensor_list(1)
    if params is None:
        return None
    p, extra = list_numel(params, opts)
    if p is None:
        return Cost(NAN, NAN, None, extra)
    if grads is not None and grads.numel is not None and grads.numel != p:
        return None
    amsgrad = bool(x.flag(11))
    key = "adamw" if "adamw" in name else "adam"
    reads = (4 + amsgrad) * p  # params, grads, exp_avg, exp_avg_sq (+ max_exp_avg_sq)
    writes = (3 + amsgrad) * p
    return list_cost(PER_ELEMENT[key] * p, float((reads + writes) * opts.bytes), opts, extra)


_FOREACH_FLOPS = {
    "add": 1, "sub": 1, "mul": 1, "div": 1, "maximum": 1, "minimum": 1, "clamp_min": 1,
    "clamp_max": 1, "addcmul": 3, "addcdiv": 3, "lerp": 2, "sqrt": 1, "rsqrt": 1, "exp": 1,
    "log": 1, "neg": 1, "abs": 1, "reciprocal": 1, "sign": 1, "sigmoid": 3, "pow": 1,
    "norm": 2, "copy": 0, "zero": 0,
}  # fmt: skip


@FAMILY.cost_prefix("aten::_foreach_", lists=True)
def _foreach(name: str, x: Inputs, opts: ListOpts) -> Cost | None:
    op = name.split("_foreach_", 1)[1].rstrip("_")
    if op not in _FOREACH_FLOPS:
        return None
    lists = tensor_lists(x)
    if not lists:
        return None
    n, extra = list_numel(lists[0], opts)
    if n is None:
        return Cost(NAN, NAN, None, extra)
    sizes = [n if tl.numel is None else tl.numel for tl in lists]
    if op == "zero":
        return list_cost(0.0, float(n * opts.bytes), opts, extra)
    scalar_tensors = sum(t.nbytes for t in x.tensors())
    reads = sum(sizes) * opts.bytes + scalar_tensors
    if op == "copy":  # _foreach_copy_(self, src): read src, write self
        reads -= n * opts.bytes
    writes = 0 if op == "norm" else n * opts.bytes
    return list_cost(_FOREACH_FLOPS[op] * float(n), float(reads + writes), opts, extra)


@FAMILY.cost("aten::_amp_foreach_non_finite_check_and_unscale_", lists=True)
def _amp_unscale(name: str, x: Inputs, opts: ListOpts) -> Cost | None:
    tl = x.tensor_list(0)
    if tl is None:
        return None
    n, extra = list_numel(tl, opts)
    if n is None:
        return Cost(NAN, NAN, None, extra)
    return list_cost(2.0 * n, float(2 * n * opts.bytes), opts, extra)
