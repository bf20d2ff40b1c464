"""Modelled FLOPs and minimal DRAM bytes of every operator, from its recorded shapes.

The models are the op families' (:mod:`tracekit.classify.families`, merged in
:mod:`~tracekit.classify.families.registry`); Inductor kernels recorded as operators use
:func:`tracekit.classify.inductor.triton_cost`. This module dispatches an operator to its
model (:func:`op_cost`, once per distinct name and shapes) and broadcasts the costs to a
table of operators (:func:`model_op_costs`).

* **FLOPs**: a multiply and an add are 2 FLOPs (GEMMs are ``2·M·N·K``); an exp, erf,
  tanh, sqrt or division counts as 1; copies and casts are 0. Per-element counts of
  the non-GEMM operators are listed in ``docs/classify.md`` (:func:`per_element_markdown`).
* **bytes**: the minimal DRAM traffic — every input read once and every output
  written once, at the element size of its dtype. Caches, re-reads and
  re-computation are not counted, so the real traffic is at least this.

Operators without a model return ``None``; operators whose shapes are absent return a
cost of NaN with a note. Numbers are never invented: where an assumption is needed
(the dtype of tensor lists, which the profiler does not record) the cost says so in
its ``note``.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracekit.classify.codes import combine_codes, factorized
from tracekit.classify.families.family import CostModel
from tracekit.classify.families.inputs import NAN, Cost, Inputs, ListOpts
from tracekit.classify.families.registry import FAMILIES, FORMULAS, PREFIXES
from tracekit.classify.inductor import triton_cost


def _model(name: str) -> CostModel | None:
    """The registered model of operator ``name``: its own, else its prefix's."""
    model = FORMULAS.get(name)
    if model is None:
        model = next((m for p, m in PREFIXES.items() if name.startswith(p)), None)
    return model


def has_formula(name: str) -> bool:
    return name.startswith("triton_") or _model(name) is not None


@functools.lru_cache(maxsize=200_000)
def op_cost(
    name: str,
    dims_json: str | None,
    types_json: str | None,
    concrete_json: str | None = None,
    list_bytes: int = 4,
    list_numel: int | None = None,
) -> Cost | None:
    """Cost of one call of operator ``name`` from its recorded inputs.

    ``None``: tracekit has no model for this operator. A cost with NaN FLOPs and bytes:
    it has one, but the inputs it needs were not recorded (the note says which).
    ``list_bytes`` is the element size assumed for tensor lists (the profiler records
    their shapes but not their dtype); ``list_numel`` the element count assumed for a
    list whose shapes were not recorded (long lists lose them), else such a list is
    unknown.
    """
    if not has_formula(name):
        return None
    if not dims_json or not types_json:
        return Cost(NAN, NAN, None, "no shapes recorded")
    try:
        dims = json.loads(dims_json)
        types = json.loads(types_json)
        concrete = json.loads(concrete_json) if concrete_json else []
    except ValueError:
        return Cost(NAN, NAN, None, "unreadable shape record")
    if not isinstance(dims, list) or not isinstance(types, list):
        return Cost(NAN, NAN, None, "unreadable shape record")
    x = Inputs(dims, types, concrete if isinstance(concrete, list) else [])
    try:
        if name.startswith("triton_"):
            cost = triton_cost(name, x)
        else:
            model = _model(name)
            cost = model(name, x, ListOpts(list_bytes, list_numel)) if model else None
    except (ArithmeticError, IndexError, KeyError, TypeError, ValueError):
        cost = None
    if cost is None:
        return Cost(NAN, NAN, None, f"inputs of {name} not in the expected form")
    return cost


@dataclass
class OpCosts:
    """:func:`model_ops` as arrays aligned with the ops (object arrays hold str/None)."""

    has_model: np.ndarray
    flops_model: np.ndarray
    flops_profiler: np.ndarray
    flops: np.ndarray
    bytes: np.ndarray
    dtype: np.ndarray
    source: np.ndarray
    cost_note: np.ndarray


def model_op_costs(
    ops: pd.DataFrame, *, list_bytes: int = 4, only: np.ndarray | None = None
) -> OpCosts:
    """:func:`model_ops` without building a frame: one :func:`op_cost` per distinct
    (name, input dims, input types, concrete inputs), broadcast to its calls."""
    n = len(ops)
    has = np.zeros(n, dtype=bool)
    fl = np.full(n, NAN)
    by = np.full(n, NAN)
    dt = np.full(n, None, dtype=object)
    note = np.full(n, "", dtype=object)
    rows = np.flatnonzero(only) if only is not None else np.arange(n)

    def at(col: str) -> pd.Series | None:  # the column at the (current) rows
        return pd.Series(ops[col].array.take(rows)) if col in ops else None

    if len(rows):
        name_codes, names = factorized(at("name"), len(rows))
        modelled = np.array([u is not None and has_formula(u) for u in names], dtype=bool)
        keep = modelled[name_codes]
        rows, name_codes = rows[keep], name_codes[keep]
    if len(rows):
        parts = [(name_codes, names)]
        parts += [
            factorized(at(c), len(rows)) for c in ("input_dims", "input_types", "concrete_inputs")
        ]
        codes, first = combine_codes(*(c for c, _ in parts))
        nm, d, t, c = (np.array(v, dtype=object)[k[first]].tolist() for k, v in parts)
        costs = [
            op_cost(str(a or ""), b, e, f, list_bytes)
            for a, b, e, f in zip(nm, d, t, c, strict=True)
        ]
        ok = np.array([c is not None for c in costs], dtype=bool)
        u_fl = np.array([c.flops if c else NAN for c in costs], dtype=float)
        u_by = np.array([c.bytes if c else NAN for c in costs], dtype=float)
        u_dt = np.array([c.dtype if c else None for c in costs], dtype=object)
        u_no = np.array([c.note if c else "" for c in costs], dtype=object)
        has[rows], fl[rows], by[rows] = ok[codes], u_fl[codes], u_by[codes]
        dt[rows], note[rows] = u_dt[codes], u_no[codes]
    prof = (
        pd.to_numeric(ops["flops"], errors="coerce").to_numpy(dtype=float)
        if "flops" in ops
        else np.full(n, NAN)
    )
    use_prof = np.isfinite(prof) & (prof > 0)
    flops = np.where(use_prof, prof, fl)
    labels = np.array(["none", "modelled", "profiler"], dtype=object)
    source = labels[np.where(use_prof, 2, np.isfinite(fl).astype(np.int64))]
    return OpCosts(has, fl, prof, flops, by, dt, source, note)


def model_ops(
    ops: pd.DataFrame, *, list_bytes: int = 4, only: np.ndarray | None = None
) -> pd.DataFrame:
    """Modelled cost of every op (or of the rows selected by boolean mask ``only``).

    Returns a frame aligned with ``ops`` with columns ``has_model`` (bool),
    ``flops_model``, ``bytes`` (NaN: unknown), ``dtype``, ``flops_profiler`` (the
    trace's own ``flops`` where present) and ``flops`` (the profiler's where present,
    else the model's), ``source`` ('profiler' | 'modelled' | 'none') and ``cost_note``.
    """
    c = model_op_costs(ops, list_bytes=list_bytes, only=only)
    cols = ("has_model", "flops_model", "flops_profiler", "flops", "bytes", "dtype", "source",
            "cost_note")  # fmt: skip
    frame: pd.DataFrame = pd.DataFrame({k: getattr(c, k) for k in cols}, index=ops.index)
    return frame


def per_element_markdown() -> str:
    """The families' per-element FLOP counts and factors as Markdown (docs/classify.md
    embeds it), family by family."""
    out = ["| family | operator (per element) | FLOPs |", "| --- | --- | --- |"]
    for fam in FAMILIES:
        out += [f"| {fam.name} | `{k}` | {v:g} |" for k, v in fam.per_element.items()]
        out += [f"| {fam.name} | {k} | {v:g} |" for k, v in fam.factors.items()]
    return "\n".join(out)
