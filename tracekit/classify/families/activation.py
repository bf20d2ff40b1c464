"""Activations (GELU, ReLU, SiLU, sigmoid, tanh, …), forward and backward."""

from __future__ import annotations

from tracekit.classify.families.family import P_NORMAL, ClassSpec, Family, Rule, aten
from tracekit.classify.families.inputs import (
    Cost,
    Inputs,
    aten_inplace,
    elementwise,
    per_element_model,
)

RULES: tuple[Rule, ...] = (
    Rule(
        aten(
            r"gelu_?",
            "gelu_backward",
            r"relu_?",
            "relu6",
            r"threshold_?",
            "threshold_backward",
            r"silu_?",
            "silu_backward",
            r"sigmoid_?",
            "sigmoid_backward",
            r"tanh_?",
            "tanh_backward",
            r"elu_?",
            "elu_backward",
            r"leaky_relu_?",
            "leaky_relu_backward",
            r"hardswish_?",
            "hardswish_backward",
            r"hardtanh_?",
            "hardtanh_backward",
            r"hardsigmoid_?",
            "hardsigmoid_backward",
            r"mish_?",
            "mish_backward",
            "softplus",
            "softplus_backward",
            "glu",
            "glu_backward",
            "prelu",
            r"_prelu_kernel\w*",
            "selu",
            "celu",
            r"log_sigmoid\w*",
            "swiglu",
        ),
        "op",
        "activation",
        P_NORMAL,
        "activations; relu_ decides over its inner clamp_min_ (which has no rule)",
    ),
    Rule(
        r"^(?:Gelu|Relu|Silu|Sigmoid|Tanh|Elu|LeakyRelu|Hardswish|Hardtanh|Mish|Softplus"
        r"|Glu|Threshold)Backward\d*$",
        "op",
        "activation",
        P_NORMAL,
        "autograd nodes",
    ),
    Rule(
        r"(?i)gelu|silu|swiglu|act_and_mul|threshold_kernel|relu|sigmoid|tanh_kernel|mish|"
        r"softplus|hardswish|hardtanh|elu_kernel|glu_kernel",
        "kernel",
        "activation",
        P_NORMAL,
        "activation kernels (GeluCUDAKernelImpl, silu_kernel, …)",
    ),
)

FUSED_RULES: tuple[Rule, ...] = (
    Rule(
        r"(?:^| )(?:gelu|gelu_backward|relu|threshold_backward|silu|silu_backward|sigmoid"
        r"|sigmoid_backward|tanh|tanh_backward|elu|leaky_relu|hardswish|mish|softplus|glu"
        r"|clamp_min)(?: |$)",
        "fused",
        "activation",
        60,
        "activations",
    ),
)

# FLOPs per element (a transcendental counts 1). Documented in docs/classify.md.
PER_ELEMENT: dict[str, float] = {
    # activations (forward, backward)
    "relu": 1, "threshold": 1, "threshold_backward": 1, "gelu": 5, "gelu_tanh": 9,
    "gelu_backward": 10, "gelu_tanh_backward": 16, "silu": 4, "silu_backward": 8,
    "sigmoid": 3, "sigmoid_backward": 3, "tanh": 1, "tanh_backward": 3, "leaky_relu": 2,
    "leaky_relu_backward": 2, "hardtanh": 1, "hardtanh_backward": 1, "elu": 3,
    "softplus": 3, "mish": 5, "hardswish": 4,
}  # fmt: skip

FAMILY = Family(
    "activation",
    classes=(ClassSpec("activation"),),
    rules=RULES,
    fused_rules=FUSED_RULES,
    fused_vocab=(
        "gelu_backward",
        "silu_backward",
        "sigmoid_backward",
        "tanh_backward",
        "threshold_backward",
        "leaky_relu",
    ),
    per_element=PER_ELEMENT,
)


# activations (and their in-place forms ``name_``): PER_ELEMENT FLOPs per output element
_POINTWISE = (
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
)
FAMILY.cost(*aten_inplace(_POINTWISE))(per_element_model(PER_ELEMENT))


@FAMILY.cost("aten::gelu", "aten::gelu_", "aten::gelu_backward")
def _gelu(name: str, x: Inputs) -> Cost | None:
    approx = x.value(2 if name.endswith("backward") else 1)
    key = "gelu_tanh" if approx == "tanh" else "gelu"
    key += "_backward" if name.endswith("backward") else ""
    return elementwise(x, PER_ELEMENT[key])
