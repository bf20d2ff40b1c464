"""torch.compile (Inductor) Triton kernels: the op list their names carry.

Inductor names a kernel after the operators it fuses: ``triton_<kind>_fused_<ops>_<n>``
with kind ``poi`` (pointwise), ``per``/``red`` (persistent / looped reduction), ``tem``
(a GEMM/conv template), ``for`` (a foreach, e.g. a compiled optimizer step). The class
rules of target ``fused`` read the op list (:mod:`tracekit.classify.classes`).
"""

from __future__ import annotations

import re

from tracekit.classify.families.registry import FUSED_VOCAB

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
