"""Losses (NLL/cross-entropy, MSE, L1, BCE, …); the log_softmax inside cross-entropy stays
softmax.
"""

from __future__ import annotations

from tracekit.classify.families.family import P_NORMAL, ClassSpec, Family, Rule, aten
from tracekit.classify.families.inputs import (
    Cost,
    Inputs,
    elementwise,
    op_base,
)

RULES: tuple[Rule, ...] = (
    Rule(
        aten(
            "cross_entropy_loss",
            "nll_loss",
            "nll_loss_forward",
            "nll_loss_backward",
            r"nll_loss2d\w*",
            "nll_loss_nd",
            "mse_loss",
            "mse_loss_backward",
            "l1_loss",
            r"smooth_l1_loss\w*",
            r"huber_loss\w*",
            r"binary_cross_entropy\w*",
            "kl_div",
            r"_?ctc_loss\w*",
            r"\w+_margin_loss\w*",
            "hinge_embedding_loss",
            "cosine_embedding_loss",
            "poisson_nll_loss",
        ),
        "op",
        "loss",
        P_NORMAL,
        "losses; log_softmax inside cross_entropy stays softmax",
    ),
    Rule(
        r"^(?:NllLoss\w*|MseLoss|L1Loss|SmoothL1Loss|BinaryCrossEntropy\w*)Backward\d*$",
        "op",
        "loss",
        P_NORMAL,
        "autograd nodes",
    ),
    Rule(
        r"(?i)nll_loss|cross_entropy|mse_kernel|mse_backward|smooth_l1|huber|bce_|"
        r"binary_cross_entropy",
        "kernel",
        "loss",
        P_NORMAL,
        "loss kernels",
    ),
)

FUSED_RULES: tuple[Rule, ...] = (
    Rule(
        r"(?:^| )(?:nll_loss\w*|cross_entropy\w*|mse_loss\w*|binary_cross_entropy\w*)(?: |$)",
        "fused",
        "loss",
        70,
        "losses",
    ),
)

# FLOPs per element (a transcendental counts 1). Documented in docs/classify.md.
PER_ELEMENT: dict[str, float] = {
    # losses
    "mse_loss": 3, "mse_loss_backward": 3,
}  # fmt: skip

FAMILY = Family(
    "loss",
    classes=(ClassSpec("loss"),),
    rules=RULES,
    fused_rules=FUSED_RULES,
    fused_vocab=(
        "nll_loss_forward",
        "nll_loss_backward",
        "nll_loss2d_forward",
        "nll_loss2d_backward",
        "mse_loss",
        "mse_loss_backward",
        "binary_cross_entropy",
    ),
    per_element=PER_ELEMENT,
)


@FAMILY.cost("aten::nll_loss_forward", "aten::nll_loss2d_forward")
def _nll(name: str, x: Inputs) -> Cost | None:
    t, tgt = x.tensor(0), x.tensor(1)
    if t is None or tgt is None:
        return None
    # one log-probability gathered per target, summed
    return Cost(
        float(tgt.numel), float(tgt.numel * t.itemsize + tgt.nbytes + 2 * t.itemsize), t.dtype
    )


@FAMILY.cost("aten::nll_loss_backward", "aten::nll_loss2d_backward")
def _nll_bwd(name: str, x: Inputs) -> Cost | None:
    t, tgt = x.tensor(1), x.tensor(2)
    if t is None or tgt is None:
        return None
    # scatter -grad into the (separately zeroed) input gradient
    return Cost(float(tgt.numel), float(tgt.nbytes + tgt.numel * t.itemsize), t.dtype)


@FAMILY.cost("aten::mse_loss", "aten::mse_loss_backward")
def _mse(name: str, x: Inputs) -> Cost | None:
    return elementwise(
        x,
        PER_ELEMENT[op_base(name)],
        writes_out=name.endswith("backward"),
        extra_out_bytes=0.0 if name.endswith("backward") else 4.0,
    )
