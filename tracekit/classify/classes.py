"""Which class of work is each GPU kernel? The rules are data: one table,
:data:`tracekit.classify.families.registry.RULES` (+ ``FUSED_RULES``), merged from the op
families' modules (:mod:`tracekit.classify.families`); this module applies it.

How a kernel gets its class
---------------------------
1. ``kind`` ``memcpy``/``memset`` decides first.
2. Candidates: the rule matched by the *innermost* operator that launched the kernel
   (rank 0), the kernel-name rule (rank 1), and the best rule matched by the operator's
   ancestors, nearest first (rank 2, 3, …). For a Triton kernel, the fused-op rules
   stand in for both the innermost operator and the kernel name (and a ``triton_for_*``
   kernel, a compiled foreach, is optimizer unless a priority-100 fused rule says else).
3. The candidate with the highest ``priority`` wins; among equal priorities the lowest
   rank wins. So the innermost operator decides (an ``aten::sum`` under
   ``AddmmBackward0`` is a reduction, a cast ``aten::copy_`` under ``aten::linear`` is
   element-wise), a specific kernel name beats a distant ancestor, generic kernel rules
   (priority 45) lose to any operator rule (50), and enclosing regions with a high
   priority (the optimizer step, fused attention, NCCL) claim everything inside them.
4. No candidate: ``other``.

Within a table target, the first rule with the highest priority wins (table order, i.e.
the order of :data:`~tracekit.classify.families.registry.FAMILIES`, is the tie-break).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import pandas as pd

from tracekit.classify.families.family import OTHER, P_NORMAL, Rule
from tracekit.classify.families.registry import FUSED_RULES, RULES
from tracekit.classify.inductor import fused_ops, triton_kind


@dataclass(frozen=True)
class Match:
    cls: str
    priority: int
    rule: str  # "<target>:<pattern>" of the winning rule, or "" for none


NO_MATCH = Match(OTHER, -1, "")


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
    text = f"<{triton_kind(name)}> " + " ".join(ops)
    m = _best(FUSED_RULES, text)
    if triton_kind(name) == "for" and m.priority < 100:
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
