"""What an op family declares: :class:`ClassSpec` (a class of work), :class:`Rule` (a
class rule) and :class:`Family` (the family's classes, rules, per-element FLOP counts and
op cost models).

A rule is a regular expression matched (``re.search``) against one of three things:

* ``op``: the name of a CPU operator (``aten::mm``, ``AddmmBackward0``,
  ``Optimizer.step#AdamW.step`` …);
* ``kernel``: the GPU kernel name as the trace gives it (``ampere_sgemm_…``,
  ``Cijk_Alik_Bljk_…``, ``void at::native::vectorized_elementwise_kernel<…>``);
* ``fused``: the op list of a torch.compile (Inductor) Triton kernel, e.g.
  ``<per> _softmax add eq masked_fill mul`` for
  ``triton_per_fused__softmax_add_eq_masked_fill_mul_14``.

How the rules decide a kernel's class: :mod:`tracekit.classify.classes`.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from tracekit.classify.families.inputs import Cost, Inputs, ListOpts

Target = Literal["op", "kernel", "fused"]

# Rule priorities: the highest priority among a kernel's candidate rules wins.
P_OVERRIDE = 100  # NCCL/RCCL kernels, memcpy/memset names
P_OPTIMIZER = 90  # everything inside Optimizer.step / zero_grad
P_FUSED_ATTENTION = 80  # everything inside a fused attention operator
P_REGION = 60  # composite operators (rms_norm, batch_norm, contiguous, …): all work inside
P_NAMED_KERNEL = 55  # kernel names that beat the launching op (cuDNN's NCHW↔NHWC transforms)
P_NORMAL = 50
P_GENERIC = 45  # generic kernel templates (elementwise_kernel, reduce_kernel)

OTHER = "other"  # the class of a kernel no rule matches


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


@dataclass(frozen=True)
class ClassSpec:
    """A class of work. ``matrix``: its operators run on the matrix (tensor-core) pipes,
    so their pipe follows the dtype and the TF32 setting
    (:func:`tracekit.classify.devices.pipe_for`); else the SIMT pipe of the dtype.
    ``group``: the heading the class is shown under (``normalization`` for ``batchnorm``,
    ``layernorm``, …; empty: the class is its own group). ``data_movement``: its kernels
    only move data (layout transforms, copies), so a kernel of this class launched by an
    operator of another class carries none of that operator's FLOPs (only bytes)."""

    name: str
    matrix: bool = False
    group: str = ""
    data_movement: bool = False


def aten(*names: str) -> str:
    """An anchored alternation of ``aten::`` operator names (names may be regexes)."""
    return r"^aten::(?:" + "|".join(names) + r")$"


Formula = Callable[[str, Inputs], Cost | None]
ListFormula = Callable[[str, Inputs, ListOpts], Cost | None]
F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class CostModel:
    """A registered op cost model. ``lists``: it is called with the tensor-list
    assumptions (:class:`ListOpts`) as a third argument."""

    fn: Callable[..., Cost | None]
    lists: bool = False

    def __call__(self, name: str, x: Inputs, opts: ListOpts) -> Cost | None:
        return self.fn(name, x, opts) if self.lists else self.fn(name, x)


class Family:
    """One op family: its classes, class rules, per-element FLOP counts and cost models.

    ``rules`` (targets ``op`` and ``kernel``) keep their order within the family (the
    first of equal priorities wins); ``fused_rules`` are matched by priority alone.
    ``fused_vocab``: the family's operator names with underscores, as Inductor writes them
    into kernel names (``native_layer_norm``), so that the kernel-name tokenizer keeps
    them whole. ``convolution_ops``: the rule naming operators whose fp32 math follows
    cuDNN's TF32 setting (on by default) rather than the matmul one. ``per_element``: the
    FLOPs per element its models use (``factors``: other constants), listed in the docs.
    """

    def __init__(
        self,
        name: str,
        *,
        classes: Iterable[ClassSpec] = (),
        rules: Iterable[Rule] = (),
        fused_rules: Iterable[Rule] = (),
        fused_vocab: Iterable[str] = (),
        per_element: Mapping[str, float] | None = None,
        convolution_ops: Rule | None = None,
        factors: Mapping[str, float] | None = None,
    ) -> None:
        if isinstance(fused_vocab, str):
            raise TypeError(f"{name}: fused_vocab is a collection of names, not one string")
        self.name = name
        self.classes = tuple(classes)
        self.rules = tuple(rules)
        self.fused_rules = tuple(fused_rules)
        self.fused_vocab = frozenset(fused_vocab)
        self.per_element: dict[str, float] = dict(per_element or {})
        self.convolution_ops = convolution_ops
        self.factors: dict[str, float] = dict(factors or {})
        self.formulas: dict[str, CostModel] = {}
        self.prefixes: dict[str, CostModel] = {}
        for r in self.rules:
            if r.target == "fused":
                raise ValueError(f"{name}: fused rule {r.pattern!r} belongs in fused_rules")
        for r in self.fused_rules:
            if r.target != "fused":
                raise ValueError(f"{name}: {r.target} rule {r.pattern!r} in fused_rules")

    def cost(self, *names: str, lists: bool = False) -> Callable[[F], F]:
        """Register the decorated function as the cost model of operators ``names``:
        ``fn(name, inputs) -> Cost | None`` (``lists``: ``fn(name, inputs, opts)``)."""

        def deco(fn: F) -> F:
            for n in names:
                if n in self.formulas:
                    raise ValueError(f"{self.name}: two cost models for {n}")
                self.formulas[n] = CostModel(fn, lists)
            return fn

        return deco

    def cost_prefix(self, prefix: str, *, lists: bool = False) -> Callable[[F], F]:
        """Register the decorated function for every operator whose name starts with
        ``prefix`` (``aten::_foreach_``) and has no model of its own."""

        def deco(fn: F) -> F:
            self.prefixes[prefix] = CostModel(fn, lists)
            return fn

        return deco
