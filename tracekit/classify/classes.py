"""Which class of work is each GPU kernel? The rules are data: one table, :data:`RULES`.

A rule is a regular expression matched (``re.search``) against one of three things:

* ``op``: the name of a CPU operator (``aten::mm``, ``AddmmBackward0``,
  ``Optimizer.step#AdamW.step`` …);
* ``kernel``: the GPU kernel name as the trace gives it (``ampere_sgemm_…``,
  ``Cijk_Alik_Bljk_…``, ``void at::native::vectorized_elementwise_kernel<…>``);
* ``fused``: the op list of a torch.compile (Inductor) Triton kernel, e.g.
  ``_softmax add eq masked_fill mul`` for ``triton_per_fused__softmax_add_eq_masked_fill_mul_14``.

How a kernel gets its class
---------------------------
1. ``kind`` ``memcpy``/``memset`` decides first.
2. Candidates: the rule matched by the *innermost* operator that launched the kernel
   (rank 0), the kernel-name rule (rank 1), and the best rule matched by the operator's
   ancestors, nearest first (rank 2, 3, …). For a Triton kernel, the fused-op rules
   stand in for both the innermost operator and the kernel name.
3. The candidate with the highest ``priority`` wins; among equal priorities the lowest
   rank wins. So the innermost operator decides (an ``aten::sum`` under
   ``AddmmBackward0`` is a reduction, a cast ``aten::copy_`` under ``aten::linear`` is
   element-wise), a specific kernel name beats a distant ancestor, generic kernel rules
   (priority 45) lose to any operator rule (50), and enclosing regions with a high
   priority (the optimizer step, fused attention, NCCL) claim everything inside them.
4. No candidate: ``other``.

Within a table target, the first rule with the highest priority wins (table order is
the tie-break).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any, Literal, cast

import numpy as np
import pandas as pd

Target = Literal["op", "kernel", "fused"]

CLASSES: tuple[str, ...] = (
    "gemm",
    "attention",
    "softmax",
    "layernorm",
    "activation",
    "elementwise",
    "reduction",
    "embedding",
    "loss",
    "optimizer",
    "memcpy",
    "memset",
    "communication",
    "other",
)

# Priorities (see the module docstring).
P_OVERRIDE = 100  # NCCL/RCCL kernels, memcpy/memset names
P_OPTIMIZER = 90  # everything inside Optimizer.step / zero_grad
P_FUSED_ATTENTION = 80  # everything inside a fused attention operator
P_NORMAL = 50
P_GENERIC = 45  # generic kernel templates (elementwise_kernel, reduce_kernel)


@dataclass(frozen=True)
class Rule:
    pattern: str
    target: Target
    cls: str
    priority: int
    note: str

    @functools.cached_property
    def regex(self) -> re.Pattern[str]:
        return re.compile(self.pattern)


def _ops(*names: str) -> str:
    """An anchored alternation of ``aten::`` operator names (names may be regexes)."""
    return r"^aten::(?:" + "|".join(names) + r")$"


_CONV = (
    r"conv\dd",
    r"conv_transpose\dd",
    "convolution",
    "_convolution",
    r"cudnn_convolution(?:_transpose|_relu|_add_relu)?",
    r"miopen_(?:depthwise_)?convolution(?:_transpose)?",
    "mkldnn_convolution",
    r"convolution_backward\w*",
    r"cudnn_convolution\w*_backward\w*",
    r"_slow_conv2d_\w+",
    r"slow_conv\w+",
    r"_conv_depthwise2d\w*",
    r"conv_depthwise\dd\w*",
)

RULES: tuple[Rule, ...] = (
    # --- communication -------------------------------------------------------
    Rule(
        r"(?i)nccl|rccl|msccl",
        "kernel",
        "communication",
        P_OVERRIDE,
        "NCCL/RCCL collectives (ncclDevKernel_*, ncclKernel_*)",
    ),
    Rule(
        r"(?:multimem|one_shot|two_shot|cross_device)_all_?reduce|all_reduce_\w*_kernel"
        r"|AllReduce|all_gather\w*_kernel|reduce_scatter\w*_kernel",
        "kernel",
        "communication",
        P_OVERRIDE,
        "symmetric-memory / custom all-reduce kernels (torch SymmetricMemory, vLLM)",
    ),
    Rule(
        r"^(?:c10d::|c10d_functional::|_c10d_functional::|nccl:|gloo:)|^record_param_comms$",
        "op",
        "communication",
        P_NORMAL,
        "collective operators and their annotations",
    ),
    # --- memcpy / memset by name (the `kind` column decides first) -------------
    Rule(r"^Memcpy", "kernel", "memcpy", P_OVERRIDE, "CUPTI/roctracer copy records"),
    Rule(r"^Memset", "kernel", "memset", P_OVERRIDE, "CUPTI/roctracer memset records"),
    # --- optimizer -------------------------------------------------------------
    Rule(
        r"^Optimizer\.(?:step|zero_grad)#",
        "op",
        "optimizer",
        P_OPTIMIZER,
        "all work inside the optimizer step / zero_grad annotation",
    ),
    Rule(
        _ops(
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
    # --- attention ---------------------------------------------------------------
    Rule(
        _ops(
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
        _ops("scaled_dot_product_attention"),
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
    # --- gemm ----------------------------------------------------------------------
    Rule(
        _ops(
            "mm",
            "addmm",
            "bmm",
            "baddbmm",
            "addbmm",
            "matmul",
            "linear",
            "mv",
            "addmv",
            "dot",
            "vdot",
            "_addmm_activation",
            "_scaled_mm",
            "_int_mm",
            "einsum",
            "tensordot",
            "bilinear",
            "linear_backward",
            "_grouped_mm",
            "_scaled_grouped_mm",
        ),
        "op",
        "gemm",
        P_NORMAL,
        "matrix products (and their backward pieces: mm, bmm)",
    ),
    Rule(
        _ops(*_CONV),
        "op",
        "gemm",
        P_NORMAL,
        "convolutions: tensor contractions (implicit GEMM, Winograd, FFT), counted as gemm",
    ),
    Rule(
        r"(?i)gemm|gemv|Cijk_|nvjet|xmma|cutlass_cudnn|cublas|hipblaslt|rocblas|tensile"
        r"|splitKreduce|wvSplitK|igemm_|winograd|implicit_?gemm|scudnn|hcudnn|wgrad|dgrad"
        r"|fprop|conv2d|conv3d|convolution|_conv_|naive_conv|fft2d|fft_|^bmm_|matmul"
        r"|cask_cudnn|cudnn::cnn|cudnn::detail::(?:dgrad|wgrad)|epilogue::impl",
        "kernel",
        "gemm",
        P_NORMAL,
        "cuBLAS(Lt)/CUTLASS/nvjet/xmma, rocBLAS/Tensile Cijk_, hipBLASLt, CK, MIOpen igemm, "
        "cuDNN conv (implicit GEMM, Winograd, FFT) and GEMM epilogue/split-K kernels",
    ),
    Rule(
        r"^(?:void )?ck(?:_tile)?::.*(?:[Gg]emm|[Cc]onv)|_ZN2ck\w*(?:[Gg]emm|[Cc]onv)",
        "kernel",
        "gemm",
        P_NORMAL,
        "Composable Kernel GEMM/convolution (demangled or mangled)",
    ),
    # --- softmax -------------------------------------------------------------------
    Rule(
        _ops(
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
    # --- layernorm (all normalisations) ----------------------------------------------
    Rule(
        _ops(
            "layer_norm",
            "native_layer_norm",
            "native_layer_norm_backward",
            "rms_norm",
            "_fused_rms_norm",
            "_fused_rms_norm_backward",
            "group_norm",
            "native_group_norm",
            "native_group_norm_backward",
            "batch_norm",
            "native_batch_norm",
            "native_batch_norm_backward",
            "_batch_norm_impl_index",
            "_batch_norm_impl_index_backward",
            "cudnn_batch_norm",
            "cudnn_batch_norm_backward",
            "miopen_batch_norm",
            "miopen_batch_norm_backward",
            r"_native_batch_norm_legit\w*",
            r"_batch_norm_with_update\w*",
            "_batch_norm_no_update",
            r"batch_norm_\w+",
            "instance_norm",
            "local_response_norm",
        ),
        "op",
        "layernorm",
        P_NORMAL,
        "normalisations (layer, RMS, group, batch, instance), forward and backward",
    ),
    Rule(
        r"^(?:NativeLayerNorm|LayerNorm|NativeGroupNorm|NativeBatchNorm|CudnnBatchNorm"
        r"|MiopenBatchNorm|FusedRmsNorm|RmsNorm)Backward\d*$",
        "op",
        "layernorm",
        P_NORMAL,
        "autograd nodes",
    ),
    Rule(
        r"(?i)layer_?norm|rms_?norm|group_?norm|batch_?norm|instance_?norm|\bbn_|::bn_"
        r"|GammaBetaBackward|RowwiseMoments|ComputeInternalGradients|ComputeFusedParams"
        r"|ComputeBackwardFusedParams|cuComputePartGradGammaBeta|cuComputeGradGammaBeta"
        r"|cuApply(?:Layer|RMS)Norm|welford|MIOpenBatchNorm|LRN",
        "kernel",
        "layernorm",
        P_NORMAL,
        "PyTorch/apex layer_norm & batch_norm kernels (incl. GammaBetaBackward), cuDNN bn_*, "
        "MIOpen batch norm, CK/vLLM RMSNorm",
    ),
    # --- activation ------------------------------------------------------------------
    Rule(
        _ops(
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
    # --- loss ------------------------------------------------------------------------
    Rule(
        _ops(
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
    # --- embedding (gather / index / scatter) ----------------------------------------
    Rule(
        _ops(
            "embedding",
            "embedding_backward",
            "embedding_dense_backward",
            r"_embedding_bag\w*",
            "embedding_bag",
            "embedding_renorm_",
            "index_select",
            "gather",
            r"scatter_?",
            r"scatter_add_?",
            r"scatter_reduce_?",
            "index",
            r"index_put_?",
            "_index_put_impl_",
            r"index_add_?",
            "take",
            "take_along_dim",
            r"_unsafe_index\w*",
            "one_hot",
            "index_select_backward",
            "gather_backward",
        ),
        "op",
        "embedding",
        P_NORMAL,
        "embedding lookups and their backward, gather/index/scatter",
    ),
    Rule(
        r"^(?:Embedding|EmbeddingBag|IndexSelect|Gather|Scatter\w*|Index\w*)Backward\d*$",
        "op",
        "embedding",
        P_NORMAL,
        "autograd nodes",
    ),
    Rule(
        r"indexSelect|index_select|embedding_backward|EmbeddingBag|embedding_bag|gather_kernel"
        r"|scatter_kernel|scatter_gather|index_elementwise_kernel|index_put_kernel"
        r"|indexing_backward|krn_partials_per_segment|compute_grad_weight"
        r"|sum_and_scatter|renorm_kernel|(?<!rotary_)embedding_kernel",
        "kernel",
        "embedding",
        P_NORMAL,
        "gather/scatter/index kernels",
    ),
    # --- reduction ---------------------------------------------------------------------
    Rule(
        _ops(
            "sum",
            "mean",
            "amax",
            "amin",
            "max",
            "min",
            "aminmax",
            "var",
            "std",
            "var_mean",
            "std_mean",
            "norm",
            "linalg_vector_norm",
            "prod",
            "argmax",
            "argmin",
            "all",
            "any",
            "logsumexp",
            "cumsum",
            r"cumsum_",
            "cumprod",
            "topk",
            "sort",
            "argsort",
            r"max_pool\dd",
            r"max_pool\dd_with_indices",
            r"max_pool\dd_with_indices_backward",
            r"avg_pool\dd",
            r"avg_pool\dd_backward",
            r"adaptive_avg_pool\dd",
            r"_adaptive_avg_pool\dd",
            r"_adaptive_avg_pool\dd_backward",
            r"adaptive_max_pool\dd\w*",
            "count_nonzero",
            "nonzero",
            r"_?unique\w*",
            "bincount",
            "histc",
            "median",
            "mode",
            "kthvalue",
        ),
        "op",
        "reduction",
        P_NORMAL,
        "reductions, scans, sorts, pooling (a windowed reduction), e.g. bias-gradient sums",
    ),
    Rule(
        r"(?i)reduce_kernel|reduction|ReduceOp|cub::|DeviceRadixSort|DeviceReduce|DeviceScan"
        r"|radix_?sort|segmented|max_pool|avg_pool|adaptive_av\w*pool|adaptive_max|pool_forward"
        r"|pool_backward|topk|bitonic|scan_kernel|cumsum|argmax|norm_kernel",
        "kernel",
        "reduction",
        P_GENERIC,
        "generic reduction templates (reduce_kernel<…>), CUB sorts/scans, pooling",
    ),
    # --- elementwise -------------------------------------------------------------------
    Rule(
        _ops(
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
            "contiguous",
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
            r"im2col",
            r"col2im",
            "upsample\\w*",
            "pixel_shuffle",
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
        r"CatArrayBatchedCopy|fill_kernel|FillFunctor|dropout|nchwToNhwc|nhwcToNchw|"
        r"transpose|SubTensorOp|OpTensor|Op\d?dTensor|scalePackedTensor|tensor_kernel_scalar|"
        r"im2col|col2im|_copy_|rotary|fused_add|triu_tril|where_kernel|masked_fill|"
        r"distribution_elementwise|philox|bernoulli|curand|arange|upsample|pad_kernel|quant",
        "kernel",
        "elementwise",
        P_GENERIC,
        "generic element-wise templates, copies, layout transforms, RNG, MIOpen tensor ops",
    ),
)

# Rules for the op list of an Inductor Triton kernel (the fused op tokens joined by
# spaces); the highest priority wins: a fused kernel is named by its dominant op.
FUSED_RULES: tuple[Rule, ...] = (
    Rule(r"^<tem>", "fused", "gemm", 100, "triton_tem_*: Inductor GEMM/conv templates"),
    Rule(
        r"(?:^| )(?:mm|addmm|bmm|baddbmm|_scaled_mm|convolution|convolution_backward)(?: |$)",
        "fused",
        "gemm",
        90,
        "a matrix product fused with its epilogue",
    ),
    Rule(
        r"(?:^| )(?:_scaled_dot_product\w*|_flash_attention\w*|_efficient_attention\w*)(?: |$)",
        "fused",
        "attention",
        85,
        "fused attention",
    ),
    Rule(
        r"(?:^| )_?(?:log_)?softmax(?:_backward_data)?(?: |$)",
        "fused",
        "softmax",
        80,
        "softmax dominates whatever is fused with it (masking, scaling, dropout)",
    ),
    Rule(
        r"(?:^| )(?:native_layer_norm(?:_backward)?|layer_norm|native_group_norm(?:_backward)?"
        r"|native_batch_norm(?:_backward)?|_native_batch_norm_legit\w*|rms_norm|_fused_rms_norm"
        r"(?:_backward)?)(?: |$)",
        "fused",
        "layernorm",
        75,
        "normalisations",
    ),
    Rule(
        r"^(?=.*(?:^| )rsqrt(?: |$))(?=.*(?:^| )(?:mean|var_mean)(?: |$))",
        "fused",
        "layernorm",
        75,
        "decomposed norm: a mean/var_mean with rsqrt is an RMSNorm/LayerNorm",
    ),
    Rule(
        r"(?:^| )(?:nll_loss\w*|cross_entropy\w*|mse_loss\w*|binary_cross_entropy\w*)(?: |$)",
        "fused",
        "loss",
        70,
        "losses",
    ),
    Rule(
        r"(?:^| )(?:embedding|embedding_dense_backward|index_select)(?: |$)",
        "fused",
        "embedding",
        65,
        "embedding lookups",
    ),
    Rule(
        r"(?:^| )(?:gelu|gelu_backward|relu|threshold_backward|silu|silu_backward|sigmoid"
        r"|sigmoid_backward|tanh|tanh_backward|elu|leaky_relu|hardswish|mish|softplus|glu"
        r"|clamp_min)(?: |$)",
        "fused",
        "activation",
        60,
        "activations",
    ),
    Rule(
        r"(?:^| )(?:sum|mean|amax|amin|max|min|var|var_mean|std|argmax|argmin|prod|logsumexp"
        r"|norm|linalg_vector_norm|cumsum|any|all|max_pool\w*|avg_pool\w*)(?: |$)",
        "fused",
        "reduction",
        40,
        "reductions",
    ),
    Rule(
        r"^<(?:red|per)>",
        "fused",
        "reduction",
        10,
        "triton_red_/triton_per_ without a known op name: a reduction",
    ),
    Rule(r".", "fused", "elementwise", 5, "anything else (add, mul, casts, dropout, …)"),
)

# Inductor op names that contain underscores: the tokenizer prefers these over splitting.
_FUSED_VOCAB: tuple[str, ...] = tuple(
    sorted(
        {
            "_softmax",
            "_log_softmax",
            "_softmax_backward_data",
            "_log_softmax_backward_data",
            "native_layer_norm",
            "native_layer_norm_backward",
            "layer_norm",
            "native_group_norm",
            "native_group_norm_backward",
            "native_batch_norm",
            "native_batch_norm_backward",
            "_native_batch_norm_legit",
            "_native_batch_norm_legit_functional",
            "_native_batch_norm_legit_no_training",
            "rms_norm",
            "_fused_rms_norm",
            "_fused_rms_norm_backward",
            "nll_loss_forward",
            "nll_loss_backward",
            "nll_loss2d_forward",
            "nll_loss2d_backward",
            "mse_loss",
            "mse_loss_backward",
            "binary_cross_entropy",
            "embedding_dense_backward",
            "index_select",
            "index_put",
            "index_add",
            "_unsafe_index",
            "_unsafe_index_put",
            "scatter_add",
            "scatter_reduce",
            "gelu_backward",
            "silu_backward",
            "sigmoid_backward",
            "tanh_backward",
            "threshold_backward",
            "leaky_relu",
            "clamp_min",
            "clamp_max",
            "masked_fill",
            "_to_copy",
            "_unsafe_view",
            "native_dropout",
            "native_dropout_backward",
            "var_mean",
            "constant_pad_nd",
            "split_with_sizes",
            "bitwise_and",
            "bitwise_or",
            "bitwise_not",
            "bitwise_xor",
            "logical_and",
            "logical_or",
            "logical_not",
            "convolution_backward",
            "_scaled_mm",
            "_scaled_dot_product_flash_attention",
            "_scaled_dot_product_efficient_attention",
            "_scaled_dot_product_cudnn_attention",
            "_flash_attention_forward",
            "_flash_attention_backward",
            "_efficient_attention_forward",
            "_efficient_attention_backward",
            "linalg_vector_norm",
            "max_pool2d_with_indices",
            "max_pool2d_with_indices_backward",
            "avg_pool2d",
            "avg_pool2d_backward",
            "all_reduce",
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
            "_foreach_add",
            "_foreach_mul",
            "reflection_pad2d",
        },
        key=lambda s: (-len(s), s),
    )
)

_TRITON_RE = re.compile(r"^triton_(poi|per|red|tem|for|mm|bmm|\w+?)_(?:fused_)?(.*?)(?:_\d+)?$")


def fused_ops(name: str) -> list[str] | None:
    """The op list of an Inductor Triton kernel name (None if it is not one).

    ``triton_per_fused__softmax_add_eq_masked_fill_mul_14`` →
    ``['_softmax', 'add', 'eq', 'masked_fill', 'mul']``. Multi-word op names are
    recognised from a vocabulary, longest first; other words split at ``_``.
    """
    if not name.startswith("triton_"):
        return None
    m = _TRITON_RE.match(name)
    if m is None:
        return []
    rest = m.group(2)
    tokens: list[str] = []
    i, n = 0, len(rest)
    while i < n:
        for word in _FUSED_VOCAB:
            j = i + len(word)
            if rest.startswith(word, i) and (j == n or rest[j] == "_"):
                tokens.append(word)
                i = j + 1
                break
        else:
            j = rest.find("_", i + 1) if rest[i] == "_" else rest.find("_", i)
            j = n if j < 0 else j
            word = rest[i:j]
            if word and word != "_" and not word.isdigit():
                tokens.append(word)
            i = j + 1
    return tokens


def _triton_kind(name: str) -> str:
    m = _TRITON_RE.match(name)
    return m.group(1) if m else ""


@dataclass(frozen=True)
class Match:
    cls: str
    priority: int
    rule: str  # "<target>:<pattern>" of the winning rule, or "" for none


NO_MATCH = Match("other", -1, "")


def _best(rules: tuple[Rule, ...], text: str) -> Match:
    best = NO_MATCH
    for r in rules:
        if r.priority > best.priority and r.regex.search(text):
            best = Match(r.cls, r.priority, f"{r.target}:{r.pattern}")
    return best


_OP_RULES = tuple(r for r in RULES if r.target == "op")
_KERNEL_RULES = tuple(r for r in RULES if r.target == "kernel")


@functools.lru_cache(maxsize=65536)
def match_fused(name: str) -> Match:
    """Class of an Inductor Triton kernel (or op) name by its dominant fused op."""
    ops = fused_ops(name)
    if ops is None:
        return NO_MATCH
    text = f"<{_triton_kind(name)}> " + " ".join(ops)
    m = _best(FUSED_RULES, text)
    if _triton_kind(name) == "for" and m.priority < 100:
        return Match("optimizer", P_NORMAL, "fused:^triton_for_")
    # A fused kernel competes with operator rules at normal priority.
    return Match(m.cls, P_NORMAL, m.rule)


@functools.lru_cache(maxsize=65536)
def match_op(name: str) -> Match:
    """The best ``op`` rule for an operator name (Triton op names use the fused rules)."""
    if name.startswith("triton_"):
        return match_fused(name)
    return _best(_OP_RULES, name)


@functools.lru_cache(maxsize=65536)
def match_kernel(name: str) -> Match:
    """The best ``kernel`` rule for a kernel name (Triton kernels use the fused rules)."""
    if name.startswith("triton_"):
        return match_fused(name)
    return _best(_KERNEL_RULES, name)


def classify_kernel_name(name: str, kind: str = "kernel") -> str:
    """Class of a kernel from its name alone (the fallback for traces without ops)."""
    if kind in ("memcpy", "memset"):
        return kind
    return match_kernel(name).cls


_AUTOGRAD_RE = re.compile(r"^autograd::engine::evaluate_function: (.+)$|^(\w*Backward\d*)$")


def _autograd_name(name: str) -> str | None:
    m = _AUTOGRAD_RE.match(name)
    if m is None:
        return None
    node = m.group(1) or m.group(2)
    return node.split("::")[-1] if node else None


def id_index(ids: np.ndarray) -> pd.Index:
    """An index of ids for ``get_indexer``: a RangeIndex (arithmetic, no hash table) when
    the ids are the row numbers, as the parser writes them."""
    n = len(ids)
    index: pd.Index = pd.Index(ids)
    if n and ids[0] == 0 and ids[-1] == n - 1 and bool((np.diff(ids) == 1).all()):
        index = pd.RangeIndex(n)
    return index


def _positions(ops: pd.DataFrame) -> tuple[pd.Index, np.ndarray]:
    """Row positions of ops and of each op's parent (-1: none)."""
    ids = id_index(ops["op_id"].to_numpy(dtype=np.int64))
    parent = ops["parent"].to_numpy(dtype=np.int64)
    ppos = ids.get_indexer(pd.Index(parent))  # -1 where parent is -1 or unknown
    return ids, ppos.astype(np.int64)


def _depth_order(ops: pd.DataFrame, ppos: np.ndarray) -> list[np.ndarray]:
    """Op positions grouped by depth, shallowest first (parents before children)."""
    if "depth" in ops.columns:
        depth = ops["depth"].to_numpy(dtype=np.int64)
    else:  # compute by pointer chasing
        depth = np.zeros(len(ops), dtype=np.int64)
        cur = ppos.copy()
        while (cur >= 0).any():
            depth[cur >= 0] += 1
            cur = np.where(cur >= 0, ppos[np.maximum(cur, 0)], -1)
    if len(depth) and depth.min() >= 0 and depth.max() < 2**15:
        depth = depth.astype(np.int16)  # a stable sort of 16-bit keys is a radix sort
    order = np.argsort(depth, kind="stable")
    d_sorted = depth[order]
    cuts = np.flatnonzero(np.diff(d_sorted)) + 1
    return np.split(order, cuts)


@dataclass(frozen=True)
class OpContext:
    """Per-op rule matches: own match and the best match among its ancestors, each an
    index into ``cls`` / ``prio`` / ``rule`` (one entry per distinct op name, then
    :data:`NO_MATCH`), and the nearest autograd node (self included), an index into
    ``nodes`` (-1: none). Integers per op, so that half a million ops cost no objects."""

    ids: pd.Index
    ppos: np.ndarray
    own: np.ndarray
    anc: np.ndarray
    cls: np.ndarray  # object
    prio: np.ndarray
    rule: np.ndarray  # object
    node: np.ndarray
    nodes: np.ndarray  # object

    def autograd(self, pos: np.ndarray) -> np.ndarray:
        """Nearest autograd node name (or None) of the ops at ``pos``."""
        out = np.full(len(pos), None, dtype=object)
        k = self.node[pos]
        out[k >= 0] = self.nodes[k[k >= 0]]
        return out


def op_context(ops: pd.DataFrame) -> OpContext:
    """Match every distinct op name once and propagate the best ancestor match down the
    tree, level by level."""
    ids, ppos = _positions(ops)
    inv, uniq_idx = pd.factorize(ops["name"].astype(str), sort=False)
    inv = inv.astype(np.int64)
    uniq = [str(u) for u in uniq_idx]
    matches = [*(match_op(n) for n in uniq), NO_MATCH]
    cls = np.array([m.cls for m in matches], dtype=object)
    prio = np.array([m.priority for m in matches], dtype=np.int64)
    rule = np.array([m.rule for m in matches], dtype=object)
    nodes = np.array([_autograd_name(n) for n in uniq], dtype=object)
    has_node = np.array([a is not None for a in nodes], dtype=bool)

    anc = np.full(len(ops), len(matches) - 1, dtype=np.int64)  # NO_MATCH
    node = np.where(has_node[inv], inv, -1) if len(nodes) else np.full(len(ops), -1)
    for level in _depth_order(ops, ppos):
        p = ppos[level]
        has = p >= 0
        c, pp = level[has], p[has]
        if len(c) == 0:
            continue
        # the parent's own match is nearer than the parent's ancestors: it wins ties
        own_p, anc_p = inv[pp], anc[pp]
        anc[c] = np.where(prio[own_p] >= prio[anc_p], own_p, anc_p)
        missing = node[c] < 0
        node[c[missing]] = node[pp[missing]]
    return OpContext(ids, ppos, inv, anc, cls, prio, rule, node.astype(np.int64), nodes)


def classify_kernels(
    kernels: pd.DataFrame, ops: pd.DataFrame | None, ctx: OpContext | None = None
) -> pd.DataFrame:
    """Class of every GPU activity, with the rule that decided it.

    Returns a frame aligned with ``kernels`` (same index) with columns ``class``,
    ``class_source`` ('kind' | 'op' | 'kernel' | 'ancestor' | 'none'), ``class_rule``,
    ``autograd_node`` and ``fused_ops`` (comma-separated Inductor op list, else null).
    ``ctx``: :func:`op_context` of ``ops``, if already computed.
    """
    return cast(pd.DataFrame, pd.DataFrame(kernel_classes(kernels, ops, ctx), index=kernels.index))


def _fused_text(names: Any) -> np.ndarray:
    """:func:`fused_ops` of each name, comma-joined (None: not an Inductor kernel)."""
    return np.array(
        [(",".join(f) if (f := fused_ops(str(s))) is not None else None) for s in names],
        dtype=object,
    )


_SOURCES = np.array(["op", "kernel", "ancestor", "none"], dtype=object)


def kernel_classes(
    kernels: pd.DataFrame,
    ops: pd.DataFrame | None,
    ctx: OpContext | None = None,
    names: tuple[np.ndarray, Any] | None = None,
) -> dict[str, np.ndarray]:
    """:func:`classify_kernels`' columns as arrays. Names are matched once per distinct
    name; ``names``: the codes and distinct values of ``kernels['name']`` (as str), if
    already at hand."""
    n = len(kernels)
    kinds = kernels["kind"].astype(str).to_numpy() if "kind" in kernels else np.full(n, "kernel")
    if names is None:
        names = pd.factorize(kernels["name"].astype(str), sort=False)
    inv, uniq = names[0], [str(u) for u in names[1]]
    # every candidate match as an index into one table: NO_MATCH, the kernel names' matches,
    # then the op context's (its own NO_MATCH last)
    km = [NO_MATCH, *(match_kernel(s) for s in uniq)]
    t_cls = np.array([m.cls for m in km], dtype=object)
    t_prio = np.array([m.priority for m in km], dtype=np.int64)
    t_rule = np.array([m.rule for m in km], dtype=object)
    fused = _fused_text(uniq)[inv]

    k_idx = 1 + np.asarray(inv, dtype=np.int64)
    o_idx = np.zeros(n, dtype=np.int64)  # NO_MATCH
    a_idx = np.zeros(n, dtype=np.int64)
    autograd = np.full(n, None, dtype=object)
    if ops is not None and len(ops) and "op_id" in kernels:
        ctx = ctx if ctx is not None else op_context(ops)
        pos = ctx.ids.get_indexer(pd.Index(kernels["op_id"].to_numpy(dtype=np.int64)))
        ok = pos >= 0
        q = pos[ok]
        base = len(km)
        t_cls = np.concatenate([t_cls, ctx.cls])
        t_prio = np.concatenate([t_prio, ctx.prio])
        t_rule = np.concatenate([t_rule, ctx.rule])
        o_idx[ok], a_idx[ok] = base + ctx.own[q], base + ctx.anc[q]
        autograd[ok] = ctx.autograd(q)
        # an innermost Triton op carries the fused list of its kernel
        if "op_name" in kernels:
            codes, op_names = pd.factorize(
                kernels["op_name"].astype(object).iloc[np.flatnonzero(ok)], use_na_sentinel=False
            )
            op_fused = _fused_text(op_names)[codes]
            sub = fused[ok]
            fill = np.array([s is None for s in sub], dtype=bool)
            sub[fill] = op_fused[fill]
            fused[ok] = sub

    # candidates in rank order: innermost op (0), kernel name (1), ancestors (2+)
    chosen = np.zeros(n, dtype=np.int64)
    src_code = np.full(n, 3, dtype=np.int64)  # _SOURCES: "none"
    best = np.full(n, -1, dtype=np.int64)
    for code, idx in enumerate((o_idx, k_idx, a_idx)):
        prio = t_prio[idx]
        win = prio > best
        chosen[win], src_code[win], best[win] = idx[win], code, prio[win]
    cls, src, rule = t_cls[chosen], _SOURCES[src_code], t_rule[chosen]
    for kind in ("memcpy", "memset"):
        is_kind = kinds == kind
        cls[is_kind], src[is_kind], rule[is_kind] = kind, "kind", f"kind:{kind}"
    return {
        "class": cls,
        "class_source": src,
        "class_rule": rule,
        "autograd_node": autograd,
        "fused_ops": fused,
    }


def rules_frame() -> pd.DataFrame:
    """The rule table as a DataFrame (for docs and reports)."""
    rows = [(r.pattern, r.target, r.cls, r.priority, r.note) for r in (*RULES, *FUSED_RULES)]
    return cast(
        pd.DataFrame, pd.DataFrame(rows, columns=["pattern", "target", "class", "priority", "note"])
    )


def rules_markdown() -> str:
    """The rule table as Markdown (docs/classify.md embeds it; a test keeps them in sync)."""
    out = ["| target | class | priority | pattern | note |", "| --- | --- | --- | --- | --- |"]
    for r in (*RULES, *FUSED_RULES):
        pat = r.pattern.replace("|", r"\|")
        out.append(f"| {r.target} | {r.cls} | {r.priority} | `{pat}` | {r.note} |")
    return "\n".join(out)


for _r in (*RULES, *FUSED_RULES):  # fail at import on a typo'd class or a bad regex
    if _r.cls not in CLASSES:
        raise ValueError(f"rule {_r.pattern!r} names unknown class {_r.cls!r}")
    _ = _r.regex
