"""Normalisations (layer, RMS, group, batch, instance), forward and backward: the
``layernorm`` class.
"""

from __future__ import annotations

from tracekit.classify.families.family import P_NORMAL, ClassSpec, Family, Rule, aten

RULES: tuple[Rule, ...] = (
    Rule(
        aten(
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
)

FUSED_RULES: tuple[Rule, ...] = (
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
)

FAMILY = Family(
    "norms",
    classes=(ClassSpec("layernorm"),),
    rules=RULES,
    fused_rules=FUSED_RULES,
    fused_vocab=(
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
    ),
)
