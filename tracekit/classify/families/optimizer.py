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

FAMILY = Family(
    "optimizer",
    classes=(ClassSpec("optimizer"),),
    rules=RULES,
    fused_vocab=("_foreach_add", "_foreach_mul"),
)
