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
from tracekit.classify.families.inputs import (
    Cost,
    Inputs,
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
        r"^flash_attn::|^FlashAttn\w*Func$|^ScaledDotProduct\w*Attention\w*Backward\d*$",
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

# Attention: backward does 5 matmuls (Q·Kᵀ recomputed, dV, dP, dQ, dK) to forward's 2.
ATTENTION_BWD_FACTOR = 2.5
CAUSAL_FACTOR = 0.5

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
    factors={
        "attention backward / forward": ATTENTION_BWD_FACTOR,
        "causal attention factor": CAUSAL_FACTOR,
    },
)


# name → (layout, is_causal position, causal from custom_mask_type position, backward)
_ATTN: dict[str, tuple[str, int | None, int | None, bool]] = {
    "aten::scaled_dot_product_attention": ("BHLE", 5, None, False),
    "aten::_scaled_dot_product_flash_attention": ("BHLE", 4, None, False),
    "aten::_scaled_dot_product_efficient_attention": ("BHLE", 6, None, False),
    "aten::_scaled_dot_product_cudnn_attention": ("BHLE", 6, None, False),
    "aten::_scaled_dot_product_flash_attention_for_cpu": ("BHLE", 4, None, False),
    "aten::_scaled_dot_product_flash_attention_for_cpu_backward": ("BHLE", 7, None, True),
    "aten::_flash_attention_forward": ("BLHE", 8, None, False),
    "aten::_efficient_attention_forward": ("BLHE", None, 9, False),
    "aten::_scaled_dot_product_flash_attention_backward": ("BHLE", 11, None, True),
    "aten::_scaled_dot_product_efficient_attention_backward": ("BHLE", 11, None, True),
    "aten::_scaled_dot_product_cudnn_attention_backward": ("BHLE", 14, None, True),
    "aten::_flash_attention_backward": ("BLHE", 11, None, True),
    "aten::_efficient_attention_backward": ("BLHE", None, 14, True),
}


@FAMILY.cost(*_ATTN)
def _attention(name: str, x: Inputs) -> Cost | None:
    layout, causal_at, mask_at, backward = _ATTN[name]
    off = 1 if backward else 0  # backward ops take grad_out first
    q, k, v = x.tensor(off), x.tensor(off + 1), x.tensor(off + 2)
    if q is None or k is None or v is None or len(q.shape) != 4 or len(k.shape) != 4:
        return None
    if layout == "BHLE":
        b, h, lq, e = q.shape
        s, ev = k.shape[2], v.shape[3]
    else:
        b, lq, h, e = q.shape
        s, ev = k.shape[1], v.shape[3]
    causal: bool | None = None
    if causal_at is not None:
        causal = x.flag(causal_at)
    elif mask_at is not None:
        mt = x.value(mask_at)
        causal = bool(mt) if isinstance(mt, int) else None
    notes = []
    fwd = 2.0 * b * h * lq * s * e + 2.0 * b * h * lq * s * ev
    if causal:
        fwd *= CAUSAL_FACTOR
        notes.append("causal: FLOPs ×0.5")
    elif causal is None:
        notes.append("causal flag not recorded: non-causal assumed")
    out_bytes = b * h * lq * ev * q.itemsize
    lse_bytes = b * h * lq * 4
    if backward:
        g = x.tensor(0)
        flops = ATTENTION_BWD_FACTOR * fwd
        reads = (
            (g.nbytes if g else out_bytes) + q.nbytes + k.nbytes + v.nbytes + out_bytes + lse_bytes
        )
        writes = q.nbytes + k.nbytes + v.nbytes
        notes.append("backward: 2.5× forward (5 matmuls incl. recomputed QKᵀ)")
        return Cost(flops, float(reads + writes), q.dtype, "; ".join(notes))
    mask = x.tensor(3)
    nbytes = q.nbytes + k.nbytes + v.nbytes + (mask.nbytes if mask else 0) + out_bytes
    if name != "aten::scaled_dot_product_attention":
        nbytes += lse_bytes
    return Cost(fwd, float(nbytes), q.dtype, "; ".join(notes))
