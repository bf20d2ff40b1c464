"""Attention: fused scaled-dot-product attention (flash, efficient, cuDNN), flash-attn
library operators and attention kernels. With the math fallback the inner bmm/softmax
operators decide.

Costs: ``2·B·H·L·S·(E+Ev)`` for QKᵀ and PV, ×0.5 when causal, backward 2.5× forward.
"""

from __future__ import annotations

from tracekit.classify.families.family import (
    P_FUSED_ATTENTION,
    P_NORMAL,
    ClassSpec,
    Family,
    Rule,
    aten,
)

RULES: tuple[Rule, ...] = (
    Rule(
        aten(
            r"_scaled_dot_product_(?:flash|efficient|cudnn)_attention(?:_for_cpu)?(?:_backward)?",
            r"_scaled_dot_product_fused_attention_overrideable(?:_backward)?",
            r"_flash_attention_(?:forward|backward)",
            r"_efficient_attention_(?:forward|backward)",
            r"_cudnn_attention_(?:forward|backward)",
        ),
        "op",
        "attention",
        P_FUSED_ATTENTION,
        "fused SDPA: every kernel inside (incl. its fills) is attention",
    ),
    Rule(
        r"^flash_attn::|^FlashAttn\w*Func$|^ScaledDotProduct\w*AttentionBackward\d*$",
        "op",
        "attention",
        P_FUSED_ATTENTION,
        "flash-attn library ops, fused SDPA autograd nodes",
    ),
    Rule(
        aten("scaled_dot_product_attention"),
        "op",
        "attention",
        P_NORMAL,
        "SDPA dispatcher; with the math fallback the inner bmm/softmax ops decide",
    ),
    Rule(
        r"(?i)flash_fwd|flash_bwd|flash::|pytorch_flash|fmha|attn_fwd|attn_bwd|attention"
        r"|sdpa|paged_attention|mla_dec|_attn_|mha_fwd|mha_bwd",
        "kernel",
        "attention",
        P_NORMAL,
        "FlashAttention, xFormers/CUTLASS fmha, cuDNN SDPA, CK/aiter fmha, Triton attn_fwd",
    ),
)

FUSED_RULES: tuple[Rule, ...] = (
    Rule(
        r"(?:^| )(?:_scaled_dot_product\w*|_flash_attention\w*|_efficient_attention\w*)(?: |$)",
        "fused",
        "attention",
        85,
        "fused attention",
    ),
)

FAMILY = Family(
    "attention",
    classes=(ClassSpec("attention", matrix=True),),
    rules=RULES,
    fused_rules=FUSED_RULES,
    fused_vocab=(
        "_scaled_dot_product_flash_attention",
        "_scaled_dot_product_efficient_attention",
        "_scaled_dot_product_cudnn_attention",
        "_flash_attention_forward",
        "_flash_attention_backward",
        "_efficient_attention_forward",
        "_efficient_attention_backward",
    ),
)
