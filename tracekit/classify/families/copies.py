"""Copies and fills recorded by CUPTI/roctracer (``Memcpy …``, ``Memset …``).

The ``kind`` column decides these first (:func:`tracekit.classify.classes.kernel_classes`);
the rules below catch the names. Their bytes are the records' own byte counts
(:mod:`tracekit.classify.attribution`), not an operator's model.
"""

from __future__ import annotations

from tracekit.classify.families.family import P_OVERRIDE, ClassSpec, Family, Rule

RULES: tuple[Rule, ...] = (
    Rule(r"^Memcpy", "kernel", "memcpy", P_OVERRIDE, "CUPTI/roctracer copy records"),
    Rule(r"^Memset", "kernel", "memset", P_OVERRIDE, "CUPTI/roctracer memset records"),
)

FAMILY = Family(
    "copies",
    classes=(
        ClassSpec("memcpy"),
        ClassSpec("memset"),
    ),
    rules=RULES,
)
