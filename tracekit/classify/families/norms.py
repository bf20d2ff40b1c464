"""Normalisations, forward and backward: four classes shown under one heading,
``normalization`` — ``layernorm``, ``rmsnorm``, ``batchnorm`` and ``groupnorm`` (with
instance norm and local response norm).
"""

from __future__ import annotations

import math

from tracekit.classify.families.family import (
    P_NORMAL,
    P_REGION,
    ClassSpec,
    Family,
    Rule,
    aten,
)
from tracekit.classify.families.inputs import (
    Cost,
    Inputs,
    Tensor,
)

G = "normalization"  # the heading of the four norm classes in class tables
_LAYER, _RMS, _BATCH, _GROUP = "layernorm", "rmsnorm", "batchnorm", "groupnorm"

RULES: tuple[Rule, ...] = (
    # composite entry points claim everything they run (an RMSNorm decomposed into
    # pow/mean/rsqrt/mul, a cast inside batch_norm): regions, like fused attention
    Rule(
        aten("rms_norm", "_fused_rms_norm"),
        "op",
        _RMS,
        P_REGION,
        "RMSNorm (composite on some backends: its pow/mean/rsqrt/mul are RMSNorm)",
    ),
    Rule(aten("layer_norm"), "op", _LAYER, P_REGION, "LayerNorm"),
    Rule(
        aten("batch_norm", "_batch_norm_impl_index", r"_batch_norm_with_update\w*"),
        "op",
        _BATCH,
        P_REGION,
        "BatchNorm (whichever of the cuDNN, MIOpen or native kernels it runs)",
    ),
    Rule(
        aten("group_norm", "local_response_norm"),
        "op",
        _GROUP,
        P_REGION,
        "GroupNorm; local response norm (per sample, across a window of channels)",
    ),
    Rule(
        aten("instance_norm"),
        "op",
        _GROUP,
        P_REGION + 1,
        "instance norm: a group per channel; above the batch_norm it runs",
    ),
    Rule(
        aten("native_layer_norm", "native_layer_norm_backward"),
        "op",
        _LAYER,
        P_NORMAL,
        "LayerNorm forward and backward",
    ),
    Rule(
        aten("_fused_rms_norm_backward", r"rms_norm_backward"),
        "op",
        _RMS,
        P_NORMAL,
        "RMSNorm backward",
    ),
    Rule(
        aten(
            "native_batch_norm",
            "native_batch_norm_backward",
            "_batch_norm_impl_index_backward",
            "cudnn_batch_norm",
            "cudnn_batch_norm_backward",
            "miopen_batch_norm",
            "miopen_batch_norm_backward",
            r"_native_batch_norm_legit\w*",
            "_batch_norm_no_update",
            r"batch_norm_\w+",
        ),
        "op",
        _BATCH,
        P_NORMAL,
        "BatchNorm forward and backward (incl. SyncBatchNorm's batch_norm_gather_stats…)",
    ),
    Rule(
        aten("native_group_norm", "native_group_norm_backward"),
        "op",
        _GROUP,
        P_NORMAL,
        "GroupNorm forward and backward",
    ),
    Rule(r"^(?:NativeLayerNorm|LayerNorm)Backward\d*$", "op", _LAYER, P_NORMAL, "autograd nodes"),
    Rule(r"^(?:FusedRmsNorm|RmsNorm)Backward\d*$", "op", _RMS, P_NORMAL, "autograd nodes"),
    Rule(
        r"^(?:NativeBatchNorm|CudnnBatchNorm|MiopenBatchNorm|BatchNormWithUpdate)Backward\d*$",
        "op",
        _BATCH,
        P_NORMAL,
        "autograd nodes",
    ),
    Rule(r"^NativeGroupNormBackward\d*$", "op", _GROUP, P_NORMAL, "autograd nodes"),
    # kernel names, the fallback without operators: the most specific first
    Rule(
        r"(?i)rms_?norm|cuApplyRMSNorm|RMSNorm",
        "kernel",
        _RMS,
        P_NORMAL,
        "RMSNorm kernels (PyTorch _fused_rms_norm, apex, vLLM, CK tile Rmsnorm2d)",
    ),
    Rule(
        r"(?i)batch_?norm|\bbn_|::bn_|MIOpenBatchNorm",
        "kernel",
        _BATCH,
        P_NORMAL,
        "BatchNorm kernels (PyTorch batch_norm_*, cuDNN bn_fw/bn_bw, MIOpen)",
    ),
    Rule(
        r"(?i)group_?norm|instance_?norm|ComputeInternalGradients|ComputeFusedParams"
        r"|ComputeBackwardFusedParams|RowwiseMomentsCUDAKernel<[^,<>]+>\("
        r"|GammaBetaBackwardCUDAKernel[12]<[^,<>]+>\(|LRN",
        "kernel",
        _GROUP,
        P_NORMAL,
        "GroupNorm kernels (PyTorch group_norm_kernel.cu: one template argument where the "
        "LayerNorm kernels of the same name have two), MIOpen LRN",
    ),
    Rule(
        r"(?i)layer_?norm|GammaBetaBackward|RowwiseMoments|cuComputePartGradGammaBeta"
        r"|cuComputeGradGammaBeta|cuApplyLayerNorm|welford",
        "kernel",
        _LAYER,
        P_NORMAL,
        "LayerNorm kernels (PyTorch, apex incl. GammaBetaBackward, Welford statistics)",
    ),
)

FUSED_RULES: tuple[Rule, ...] = (
    Rule(
        r"(?:^| )(?:native_layer_norm(?:_backward)?|layer_norm)(?: |$)",
        "fused",
        _LAYER,
        75,
        "LayerNorm",
    ),
    Rule(
        r"(?:^| )(?:rms_norm|_fused_rms_norm(?:_backward)?)(?: |$)",
        "fused",
        _RMS,
        75,
        "RMSNorm",
    ),
    Rule(
        r"(?:^| )(?:native_batch_norm(?:_backward)?|_native_batch_norm_legit\w*"
        r"|batch_norm\w*)(?: |$)",
        "fused",
        _BATCH,
        75,
        "BatchNorm",
    ),
    Rule(
        r"(?:^| )(?:native_group_norm(?:_backward)?|group_norm)(?: |$)",
        "fused",
        _GROUP,
        75,
        "GroupNorm",
    ),
    Rule(
        r"^(?=.*(?:^| )rsqrt(?: |$))(?=.*(?:^| )var_mean(?: |$))",
        "fused",
        _LAYER,
        74,
        "decomposed LayerNorm: a var_mean with rsqrt",
    ),
    Rule(
        r"^(?=.*(?:^| )rsqrt(?: |$))(?=.*(?:^| )mean(?: |$))",
        "fused",
        _RMS,
        74,
        "decomposed RMSNorm: a mean (of squares) with rsqrt, no var_mean",
    ),
)

# FLOPs per element (a transcendental counts 1). Documented in docs/classify.md.
PER_ELEMENT: dict[str, float] = {
    # layer/batch/group norm: mean 1, variance 3, normalise 2, affine 2; backward
    # dx 10, dgamma 2, dbeta 1; RMSNorm: square 1, sum 1, normalise 1, affine 1; backward
    # dx 5 (dy·g, the row's dot with x, the scaled sum), dgamma 2
    "norm": 6, "norm_affine": 2, "norm_backward_dx": 10, "norm_backward_dgamma": 2,
    "norm_backward_dbeta": 1, "rms_norm": 3, "rms_norm_affine": 1, "rms_norm_backward_dx": 5,
    "rms_norm_backward_dgamma": 2,
}  # fmt: skip

FAMILY = Family(
    "normalization",
    classes=(
        ClassSpec(_LAYER, group=G),
        ClassSpec(_RMS, group=G),
        ClassSpec(_BATCH, group=G),
        ClassSpec(_GROUP, group=G),
    ),
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
        "_batch_norm_with_update",
        "batch_norm_backward",
    ),
    per_element=PER_ELEMENT,
)


def _norm_fwd(
    t: Tensor, params: list[Tensor | None], rows: int, *, rms: bool = False, stats: int = 2
) -> Cost:
    affine = sum(1 for p in params if p is not None)
    if rms:
        per = PER_ELEMENT["rms_norm"] + (PER_ELEMENT["rms_norm_affine"] if affine else 0)
    else:
        per = PER_ELEMENT["norm"] + (PER_ELEMENT["norm_affine"] if affine else 0)
    pbytes = sum(p.nbytes for p in params if p is not None)
    return Cost(per * t.numel, float(2 * t.nbytes + pbytes + stats * rows * 4), t.dtype)


@FAMILY.cost("aten::native_layer_norm", "aten::layer_norm")
def _layer_norm(name: str, x: Inputs) -> Cost | None:
    t, w, b = x.tensor(0), x.tensor(2), x.tensor(3)
    if t is None:
        return None
    norm = x.value(1)
    inner = math.prod(norm) if isinstance(norm, list) else (w.numel if w else 0)
    rows = t.numel // inner if inner else 0
    return _norm_fwd(t, [w, b], rows, stats=2 if name == "aten::native_layer_norm" else 0)


def _mask3(x: Inputs, i: int) -> tuple[list[bool], str]:
    v = x.value(i)
    if isinstance(v, list) and len(v) == 3:
        return [bool(a) for a in v], ""
    return [True, True, True], "output_mask not recorded: all grads assumed"


def _norm_bwd(g: Tensor, reads: float, params_numel: int, mask: list[bool], note: str) -> Cost:
    flops = (
        PER_ELEMENT["norm_backward_dx"] * g.numel * mask[0]
        + PER_ELEMENT["norm_backward_dgamma"] * g.numel * mask[1]
        + PER_ELEMENT["norm_backward_dbeta"] * g.numel * mask[2]
    )
    writes = g.nbytes * mask[0] + params_numel * g.itemsize * (mask[1] + mask[2])
    return Cost(flops, float(reads + writes), g.dtype, note)


@FAMILY.cost("aten::native_layer_norm_backward")
def _layer_norm_bwd(name: str, x: Inputs) -> Cost | None:
    g, t = x.tensor(0), x.tensor(1)
    if g is None or t is None:
        return None
    mean, rstd, w = x.tensor(3), x.tensor(4), x.tensor(5)
    mask, note = _mask3(x, 7)
    reads = g.nbytes + t.nbytes + sum(a.nbytes for a in (mean, rstd, w) if a is not None)
    return _norm_bwd(g, reads, w.numel if w else 0, mask, note)


@FAMILY.cost(
    "aten::native_batch_norm",
    "aten::cudnn_batch_norm",
    "aten::miopen_batch_norm",
    "aten::_native_batch_norm_legit",
    "aten::_native_batch_norm_legit_functional",
    "aten::_native_batch_norm_legit_no_training",
    "aten::_batch_norm_with_update",
    "aten::_batch_norm_with_update_functional",
    "aten::_batch_norm_no_update",
)
def _batch_norm(name: str, x: Inputs) -> Cost | None:
    t, w, b = x.tensor(0), x.tensor(1), x.tensor(2)
    if t is None or len(t.shape) < 2:
        return None
    return _norm_fwd(t, [w, b], t.shape[1])


@FAMILY.cost(
    "aten::native_batch_norm_backward",
    "aten::cudnn_batch_norm_backward",
    "aten::miopen_batch_norm_backward",
    "aten::batch_norm_backward",
)
def _batch_norm_bwd(name: str, x: Inputs) -> Cost | None:
    """The native and ``batch_norm_backward`` ops take ``(grad_out, input, …)`` with an
    ``output_mask`` at 9; cuDNN's and MIOpen's ``(input, grad_out, …)`` compute all three."""
    a, b = x.tensor(0), x.tensor(1)
    if a is None or b is None or len(a.shape) < 2:
        return None
    if name in ("aten::native_batch_norm_backward", "aten::batch_norm_backward"):
        mask, note = _mask3(x, 9)
    else:
        mask, note = [True, True, True], ""
    reads = a.nbytes + b.nbytes + 4 * a.shape[1] * 4
    return _norm_bwd(a, reads, a.shape[1], mask, note)


@FAMILY.cost("aten::native_group_norm")
def _group_norm(name: str, x: Inputs) -> Cost | None:
    t, w, b = x.tensor(0), x.tensor(1), x.tensor(2)
    groups = x.value(6)
    if t is None or len(t.shape) < 1:
        return None
    rows = t.shape[0] * (groups if isinstance(groups, int) else 1)
    return _norm_fwd(t, [w, b], rows)


@FAMILY.cost("aten::native_group_norm_backward")
def _group_norm_bwd(name: str, x: Inputs) -> Cost | None:
    g, t, w = x.tensor(0), x.tensor(1), x.tensor(4)
    if g is None or t is None:
        return None
    mask, note = _mask3(x, 9)
    return _norm_bwd(g, g.nbytes + t.nbytes, w.numel if w else 0, mask, note)


@FAMILY.cost("aten::_fused_rms_norm", "aten::rms_norm")
def _rms_norm(name: str, x: Inputs) -> Cost | None:
    t, w = x.tensor(0), x.tensor(2)
    if t is None:
        return None
    norm = x.value(1)
    inner = math.prod(norm) if isinstance(norm, list) else (w.numel if w else 0)
    rows = t.numel // inner if inner else 0
    return _norm_fwd(t, [w], rows, rms=True, stats=1 if name == "aten::_fused_rms_norm" else 0)


@FAMILY.cost("aten::_fused_rms_norm_backward")
def _rms_norm_bwd(name: str, x: Inputs) -> Cost | None:
    """``_fused_rms_norm_backward(grad_out, input, normalized_shape, rstd, weight,
    output_mask)``."""
    g, t, rstd, w = x.tensor(0), x.tensor(1), x.tensor(3), x.tensor(4)
    if g is None or t is None:
        return None
    v = x.value(5)
    mask, note = (
        ([bool(a) for a in v], "")
        if isinstance(v, list) and len(v) == 2
        else (
            [True, True],
            "output_mask not recorded: both grads assumed",
        )
    )
    flops = (
        PER_ELEMENT["rms_norm_backward_dx"] * g.numel * mask[0]
        + PER_ELEMENT["rms_norm_backward_dgamma"] * g.numel * mask[1]
    )
    reads = g.nbytes + t.nbytes + (rstd.nbytes if rstd else 0) + (w.nbytes if w else 0)
    writes = g.nbytes * mask[0] + (w.nbytes if w else 0) * mask[1]
    return Cost(flops, float(reads + writes), g.dtype, note)
