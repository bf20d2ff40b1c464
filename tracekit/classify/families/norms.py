"""Normalisations (layer, RMS, group, batch, instance), forward and backward: the
``layernorm`` class.
"""

from __future__ import annotations

import math

from tracekit.classify.families.family import P_NORMAL, ClassSpec, Family, Rule, aten
from tracekit.classify.families.inputs import (
    Cost,
    Inputs,
    Tensor,
)

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

# FLOPs per element (a transcendental counts 1). Documented in docs/classify.md.
PER_ELEMENT: dict[str, float] = {
    # layer/batch/group norm: mean 1, variance 3, normalise 2, affine 2; backward
    # dx 10, dgamma 2, dbeta 1; RMSNorm: square 1, sum 1, normalise 1, affine 1
    "norm": 6, "norm_affine": 2, "norm_backward_dx": 10, "norm_backward_dgamma": 2,
    "norm_backward_dbeta": 1, "rms_norm": 3, "rms_norm_affine": 1, "rms_norm_backward": 7,
}  # fmt: skip

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
)
def _batch_norm_bwd(name: str, x: Inputs) -> Cost | None:
    a, b = x.tensor(0), x.tensor(1)
    if a is None or b is None or len(a.shape) < 2:
        return None
    if name == "aten::native_batch_norm_backward":
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
    g, t, w = x.tensor(0), x.tensor(1), x.tensor(4)
    if g is None or t is None:
        return None
    flops = PER_ELEMENT["rms_norm_backward"] * g.numel
    return Cost(flops, float(g.nbytes * 3 + (2 * w.nbytes if w else 0)), g.dtype)
