"""torch.compile (Inductor) Triton kernels: the op list their names carry.

Inductor names a kernel after the operators it fuses: ``triton_<kind>_fused_<ops>_<n>``
with kind ``poi`` (pointwise), ``per``/``red`` (persistent / looped reduction), ``tem``
(a GEMM/conv template), ``for`` (a foreach, e.g. a compiled optimizer step). The class
rules of target ``fused`` read the op list (:mod:`tracekit.classify.classes`); the cost
model :func:`triton_cost` reads it with the families' per-element FLOP counts (an Inductor
kernel is recorded as an operator named like the kernel, its buffers as inputs).
"""

from __future__ import annotations

import math
import re

from tracekit.classify.families.inputs import FLOAT_BYTES, NAN, Cost, Inputs
from tracekit.classify.families.registry import FUSED_VOCAB, PER_ELEMENT

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
        for word in FUSED_VOCAB:
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


def triton_kind(name: str) -> str:
    """The kind of an Inductor kernel name (``poi``, ``per``, ``red``, ``tem``, ``for``, …)."""
    m = _TRITON_RE.match(name)
    return m.group(1) if m else ""


# --- torch.compile (Inductor) Triton kernels, recorded as an op named like the kernel ---

_NO_FLOPS = {
    "view", "_unsafe_view", "clone", "copy", "_to_copy", "t", "transpose", "permute", "expand",
    "slice", "select", "squeeze", "unsqueeze", "cat", "split", "split_with_sizes", "embedding",
    "arange", "full", "full_default", "lift_fresh", "convert_element_type", "index", "gather",
    "as_strided", "detach", "alias", "stack", "constant_pad_nd", "zeros", "ones", "scalar_tensor",
    "new_zeros", "new_ones", "new_empty", "empty", "empty_strided", "slice_scatter",
    "select_scatter", "embedding_dense_backward", "fill", "zero", "bernoulli", "rand", "randn",
    "masked_fill", "tril", "triu",
}  # fmt: skip
_TOKEN_FLOPS = {
    "native_layer_norm": 8.0, "layer_norm": 8.0, "native_layer_norm_backward": 13.0,
    "rms_norm": 4.0, "_fused_rms_norm": 4.0, "var_mean": 3.0, "_softmax": 5.0,
    "_log_softmax": 5.0, "softmax": 5.0, "_softmax_backward_data": 4.0,
    "_log_softmax_backward_data": 4.0, "prepare_softmax_online": 4.0, "gelu": 5.0,
    "gelu_backward": 10.0, "silu": 4.0, "silu_backward": 8.0, "native_dropout": 2.0,
}  # fmt: skip


def _token_flops(tok: str) -> float:
    if tok in _NO_FLOPS:
        return 0.0
    return _TOKEN_FLOPS.get(tok, PER_ELEMENT.get(tok.strip("_"), 1.0))


def triton_cost(name: str, x: Inputs) -> Cost | None:
    """An Inductor kernel: every tensor argument read or written once; FLOPs from the
    per-element counts of its fused ops times its largest argument's elements (a
    template GEMM ``triton_tem_*``: 2·M·N·K from its A, B and output)."""
    ts = x.tensors()
    if not ts:
        return None
    nbytes = float(sum(t.nbytes for t in ts))
    floats = [t for t in ts if t.dtype in FLOAT_BYTES]
    dtype = max(floats, key=lambda t: (t.numel, t.itemsize)).dtype if floats else None
    if name.startswith("triton_tem_"):
        mats = [t for t in ts if len(t.shape) >= 2]
        for a in mats:
            for b in mats:
                if a is not b and a.shape[-1] == b.shape[-2] and a.shape[:-2] == b.shape[:-2]:
                    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
                    if any(o.shape[-2:] == (m, n) for o in mats if o is not a and o is not b):
                        batch = math.prod(a.shape[:-2])
                        return Cost(
                            2.0 * batch * m * n * k,
                            nbytes,
                            a.dtype,
                            "Inductor GEMM template: 2·M·N·K, each argument once",
                        )
        return Cost(NAN, nbytes, dtype, "Inductor GEMM template: operands not recognised")
    elements = max(t.numel for t in ts)
    per = sum(_token_flops(tok) for tok in (fused_ops(name) or []))
    return Cost(
        per * elements,
        nbytes,
        dtype,
        "Inductor kernel: fused ops' per-element FLOPs × largest argument; each "
        "argument read or written once",
    )
