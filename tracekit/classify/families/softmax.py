"""Softmax and log-softmax, forward and backward (also inside cross-entropy)."""

from __future__ import annotations

from tracekit.classify.families.family import P_NORMAL, ClassSpec, Family, Rule, aten

RULES: tuple[Rule, ...] = (
    Rule(
        aten(
            "softmax",
            "_softmax",
            "log_softmax",
            "_log_softmax",
            "_softmax_backward_data",
            "_log_softmax_backward_data",
            "_masked_softmax",
            "_masked_softmax_backward",
            "special_softmax",
        ),
        "op",
        "softmax",
        P_NORMAL,
        "softmax and log_softmax, forward and backward",
    ),
    Rule(r"^(?:Log)?Softmax(?:Backward\d*)?$", "op", "softmax", P_NORMAL, "autograd nodes"),
    Rule(
        r"(?i)softmax",
        "kernel",
        "softmax",
        P_NORMAL,
        "cunn_SoftMaxForward/Backward, softmax_warp_*, MIOpenSoftmax",
    ),
)

FUSED_RULES: tuple[Rule, ...] = (
    Rule(
        r"(?:^| )_?(?:log_)?softmax(?:_backward_data)?(?: |$)",
        "fused",
        "softmax",
        80,
        "softmax dominates whatever is fused with it (masking, scaling, dropout)",
    ),
)

FAMILY = Family(
    "softmax",
    classes=(ClassSpec("softmax"),),
    rules=RULES,
    fused_rules=FUSED_RULES,
    fused_vocab=(
        "_softmax",
        "_log_softmax",
        "_softmax_backward_data",
        "_log_softmax_backward_data",
    ),
)
