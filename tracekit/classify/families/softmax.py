"""Softmax and log-softmax, forward and backward (also inside cross-entropy)."""

from __future__ import annotations

from tracekit.classify.families.family import P_NORMAL, ClassSpec, Family, Rule, aten
from tracekit.classify.families.inputs import (
    SCALAR_TYPE,
    Cost,
    Inputs,
)

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

# FLOPs per element (a transcendental counts 1). Documented in docs/classify.md.
PER_ELEMENT: dict[str, float] = {
    # softmax: max, subtract, exp, sum, divide; backward: mul, sum, sub, mul
    "softmax": 5, "softmax_backward": 4,
}  # fmt: skip

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
    per_element=PER_ELEMENT,
)


@FAMILY.cost("aten::_softmax", "aten::_log_softmax", "aten::softmax", "aten::log_softmax")
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


@FAMILY.cost("aten::_softmax_backward_data", "aten::_log_softmax_backward_data")
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
