"""Activations (GELU, ReLU, SiLU, sigmoid, tanh, …), forward and backward."""

from __future__ import annotations

from tracekit.classify.families.family import P_NORMAL, ClassSpec, Family, Rule, aten

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
)
