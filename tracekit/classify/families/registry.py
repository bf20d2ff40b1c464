"""The op families tracekit knows, and the tables merged from them.

:data:`FAMILIES` is the one list of families: adding a family is a module in this package
and a line here. Its order is the **rule order**: among rules of one target with equal
priority the first wins, so a family listed earlier takes the kernels both would match
(``…gemm…softmax…`` is gemm). :data:`CLASSES` is the order of the class tables and
reports; every class a family declares must be in it (checked here, at import).

Merged tables, read by the classifier (:mod:`tracekit.classify.classes`) and the cost
model (:mod:`tracekit.classify.costs`): :data:`RULES`, :data:`FUSED_RULES`,
:data:`FUSED_VOCAB`, :data:`PER_ELEMENT`, :data:`FORMULAS`, :data:`PREFIXES`.
"""

from __future__ import annotations

import re

from tracekit.classify.families import (
    activation,
    attention,
    communication,
    convolution,
    copies,
    elementwise,
    embedding,
    gemm,
    layout,
    loss,
    moe,
    norms,
    optimizer,
    pooling,
    reduction,
    softmax,
)
from tracekit.classify.families.family import OTHER, ClassSpec, CostModel, Family, Rule

FAMILIES: tuple[Family, ...] = (
    communication.FAMILY,
    copies.FAMILY,
    optimizer.FAMILY,
    attention.FAMILY,
    moe.FAMILY,
    layout.FAMILY,
    convolution.FAMILY,
    gemm.FAMILY,
    softmax.FAMILY,
    norms.FAMILY,
    pooling.FAMILY,
    activation.FAMILY,
    loss.FAMILY,
    embedding.FAMILY,
    reduction.FAMILY,
    elementwise.FAMILY,
)

# The order of the class tables (classes.parquet, reports); ``other`` (no rule) last.
CLASSES: tuple[str, ...] = (
    "gemm",
    "convolution",
    "attention",
    "softmax",
    "layernorm",
    "rmsnorm",
    "batchnorm",
    "groupnorm",
    "activation",
    "pooling",
    "elementwise",
    "layout",
    "reduction",
    "embedding",
    "moe",
    "loss",
    "optimizer",
    "memcpy",
    "memset",
    "communication",
    OTHER,
)

CLASS_SPECS: dict[str, ClassSpec] = {c.name: c for f in FAMILIES for c in f.classes}
MATRIX_CLASSES: frozenset[str] = frozenset(c.name for c in CLASS_SPECS.values() if c.matrix)
# The heading each class is shown under (``normalization`` for its four kinds; else itself).
CLASS_GROUPS: dict[str, str] = {c: (CLASS_SPECS[c].group if c in CLASS_SPECS else "") or c
                                for c in CLASSES}  # fmt: skip
# Classes that only move data: they take no FLOPs of another class's operator.
DATA_MOVEMENT_CLASSES: frozenset[str] = frozenset(
    c.name for c in CLASS_SPECS.values() if c.data_movement
)

RULES: tuple[Rule, ...] = tuple(r for f in FAMILIES for r in f.rules)
# Fused rules decide by priority alone (stable: equal priorities in family order).
FUSED_RULES: tuple[Rule, ...] = tuple(
    sorted((r for f in FAMILIES for r in f.fused_rules), key=lambda r: -r.priority)
)
# Inductor op names with underscores, longest first: the kernel-name tokenizer tries them
# before splitting at ``_`` (tracekit.classify.inductor.fused_ops).
FUSED_VOCAB: tuple[str, ...] = tuple(
    sorted(set().union(*(f.fused_vocab for f in FAMILIES)), key=lambda s: (-len(s), s))
)
CONVOLUTION_OPS: tuple[Rule, ...] = tuple(
    f.convolution_ops for f in FAMILIES if f.convolution_ops is not None
)


def _merged(tables: list[tuple[str, dict[str, CostModel]]]) -> dict[str, CostModel]:
    out: dict[str, CostModel] = {}
    owner: dict[str, str] = {}
    for fam, table in tables:
        for k, v in table.items():
            if k in out:
                raise ValueError(f"{k!r} has a cost model in both {owner[k]} and {fam}")
            out[k], owner[k] = v, fam
    return out


FORMULAS: dict[str, CostModel] = _merged([(f.name, f.formulas) for f in FAMILIES])
PREFIXES: dict[str, CostModel] = _merged([(f.name, f.prefixes) for f in FAMILIES])


def _per_element() -> dict[str, float]:
    out: dict[str, float] = {}
    for f in FAMILIES:
        for k, v in f.per_element.items():
            if k in out:
                raise ValueError(f"per-element FLOPs of {k!r} given twice (family {f.name})")
            out[k] = v
    return out


PER_ELEMENT: dict[str, float] = _per_element()


def is_convolution(op_name: str) -> bool:
    """Whether an operator is a convolution (its fp32 math follows cuDNN's TF32 setting)."""
    return any(r.regex.search(op_name) for r in CONVOLUTION_OPS)


def _check() -> None:
    """Fail at import on a class missing from :data:`CLASSES`, a rule naming an unknown
    class, a bad regex, or a cost model shadowed by a prefix model."""
    declared = set(CLASS_SPECS) | {OTHER}
    if declared != set(CLASSES):
        raise ValueError(
            f"classes declared by families {sorted(declared - set(CLASSES))} missing from "
            f"registry.CLASSES, or listed there but declared by none: "
            f"{sorted(set(CLASSES) - declared)}"
        )
    for r in (*RULES, *FUSED_RULES):
        if r.cls not in CLASSES:
            raise ValueError(f"rule {r.pattern!r} names unknown class {r.cls!r}")
        _ = r.regex
    for name in FORMULAS:
        for p in PREFIXES:
            if name.startswith(p):
                raise ValueError(f"cost model of {name} is under the prefix model {p!r}")
    for name in FUSED_VOCAB:
        if not re.fullmatch(r"\w+", name):
            raise ValueError(f"fused vocabulary entry {name!r} is not an op name")


_check()
