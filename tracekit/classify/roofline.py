"""``classify``: every kernel and operator classed, costed and placed on the device roofline.

Kernel FLOPs and bytes
----------------------
FLOPs and bytes are modelled per *operator* (:mod:`tracekit.classify.flops`). A kernel
carries a share of the cost of its **cost operator**: the innermost operator that
launched it if that operator has a model, else the nearest ancestor of the same class
that has one. Where an operator launches several kernels (a GEMM and its split-K
reduction, a cuDNN convolution and its layout transforms) its totals are **split over
its kernels in proportion to their durations**, so the kernels' shares sum to the
operator's total and every kernel of an operator has the operator's intensity. (The
alternative — attributing everything to the longest kernel — would give the helper
kernels zero bytes and an undefined intensity.) memcpy/memset records carry their own
byte count (device-to-device copies count read + write). Measured counters replace the
modelled numbers kernel by kernel, with the modelled ones kept alongside.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, cast

import numpy as np
import pandas as pd

import tracekit.classify.classes as C
import tracekit.classify.costs as F
import tracekit.classify.counters as K
from tracekit.classify.codes import combine_codes, factorized, group_sums, text
from tracekit.classify.devices import Roofline, pipe_for, pipe_from_kernel_name, resolve_roofline
from tracekit.classify.families.inputs import LIST_SIZES_UNKNOWN
from tracekit.classify.families.registry import CLASSES, is_convolution
from tracekit.classify.schema import TABLES
from tracekit.errors import TraceError

NAN = math.nan
MAX_COST_HOPS = 6  # how far up the operator tree a kernel looks for its cost operator


class TraceLike(Protocol):
    kernels: pd.DataFrame
    ops: pd.DataFrame
    steps: pd.DataFrame
    meta: dict[str, Any]


@dataclass
class Classification:
    """The roofline tables of one trace (columns: :mod:`tracekit.classify.schema`)."""

    kernels: pd.DataFrame
    ops: pd.DataFrame
    classes: pd.DataFrame
    steps: pd.DataFrame
    device: Roofline
    notes: list[str] = field(default_factory=list)
    counters: pd.DataFrame | None = None
    unmatched: pd.DataFrame | None = None

    def device_frame(self) -> pd.DataFrame:
        return self.device.frame()

    def agreement(self) -> pd.DataFrame:
        """Modelled vs measured FLOPs and DRAM bytes per class, over the kernels that have
        counters and a model (the analysed steps): ``kernels``, ``flops_model``,
        ``flops_measured``, ``flops_ratio`` (measured / modelled), ``bytes_model``,
        ``bytes_measured``, ``bytes_ratio``, ``l2_bytes``, ``extrapolated`` (kernels whose
        counters came from another launch of the same signature)."""
        cols = [
            "kernels",
            "flops_model",
            "flops_measured",
            "flops_ratio",
            "bytes_model",
            "bytes_measured",
            "bytes_ratio",
            "l2_bytes",
            "extrapolated",
        ]
        k = self.kernels[_scope(self.kernels)]
        k = k[(k["source"] == "measured") & np.isfinite(k["flops_model"])]
        if not len(k):
            return cast(pd.DataFrame, pd.DataFrame(columns=["class", *cols]))
        g = k.groupby("class")
        out = pd.DataFrame(
            {
                "kernels": g.size(),
                "flops_model": g["flops_model"].sum(),
                "flops_measured": g["flops"].sum(),
                "bytes_model": g["bytes_model"].sum(),
                "bytes_measured": g["bytes"].sum(),
                "l2_bytes": g["l2_bytes"].sum(),
                "extrapolated": g["extrapolated"].sum(),
            }
        )
        with np.errstate(divide="ignore", invalid="ignore"):
            out["flops_ratio"] = out["flops_measured"] / out["flops_model"]
            out["bytes_ratio"] = out["bytes_measured"] / out["bytes_model"]
        return cast(pd.DataFrame, out[cols].reset_index())

    def summary(self) -> dict[str, Any]:
        """JSON-able summary: device, notes, per-class and per-step figures."""
        return {
            "device": self.device.to_dict(),
            "notes": list(self.notes),
            "classes": _records(self.classes),
            "steps": _records(self.steps),
            "sources": self.kernels["source"].value_counts().to_dict() if len(self.kernels) else {},
        }


def _records(df: pd.DataFrame) -> list[dict[str, Any]]:
    out = []
    for rec in df.to_dict(orient="records"):
        out.append(
            {
                str(k): (
                    None
                    if isinstance(v, float) and not math.isfinite(v)
                    else (v.item() if hasattr(v, "item") else v)
                )
                for k, v in rec.items()
            }
        )
    return out


def _col(df: pd.DataFrame, name: str, default: Any, dtype: Any = None) -> np.ndarray:
    if name in df.columns:
        s = df[name]
        if dtype is not None:
            s = s.fillna(default) if default is not None else s
            return s.to_numpy(dtype=dtype)
        return s.astype(object).to_numpy()
    return np.full(len(df), default, dtype=dtype if dtype is not None else object)


_STR = pd.Series(["x"]).dtype  # what pandas makes of Python strings (Arrow-backed str)


def _text(df: pd.DataFrame, name: str, default: str) -> tuple[np.ndarray, np.ndarray]:
    """Codes and distinct values of a text column, the values as ``ndarray.astype(str)``
    gives them (missing: 'nan'). Each distinct string is hashed once (in Arrow) and never
    copied per row: kernel names run to a thousand characters."""
    if name not in df.columns:
        return np.zeros(len(df), dtype=np.int64), np.array([default], dtype=object)
    codes, uniq = pd.factorize(df[name], use_na_sentinel=False)
    return codes.astype(np.int64), np.array([str(u) for u in uniq], dtype=object)


def _column(col: pd.Series | None, n: int, values: np.ndarray | None = None) -> Any:
    """An output column made from ``col`` (absent: None): ``values`` (:func:`_text`'s
    strings, which differ from the column where it has missing values), or the column's
    own objects. Where pandas would build exactly the column's own (Arrow) array from
    them, that array itself, so millions of characters are not encoded again."""
    if (
        col is not None
        and col.dtype == _STR
        # (pandas makes objects that are all missing an ``object`` column, not str)
        and (bool(col.notna().any()) if values is None else not col.hasnans)
    ):
        return col.array
    if values is not None:
        return values if len(values) else values.astype(str)  # empty: str, like a U array
    return col.astype(object).to_numpy() if col is not None else np.full(n, None, dtype=object)


def _require(df: pd.DataFrame, table: str, cols: tuple[str, ...]) -> None:
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise TraceError(f"the {table} table lacks column(s) {', '.join(missing)}")


# --- cost attribution --------------------------------------------------------------


def _cost_ops(
    kernels: pd.DataFrame,
    ops: pd.DataFrame,
    kcls: np.ndarray,
    list_bytes: int,
    n_params: int | None = None,
    ctx: C.OpContext | None = None,
    names: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, F.OpCosts]:
    """Row position in ``ops`` of each kernel's cost operator and of its innermost
    operator (-1: none), and the op costs.

    Optimizer tensor lists whose shapes the profiler dropped get ``n_params`` elements
    each when the op runs once per step inside ``Optimizer.step`` (one parameter group:
    its lists hold every parameter, gradient or state). ``names``: the kernel names as
    an object array, if already at hand.
    """
    n = len(kernels)
    if ops is None or not len(ops) or "op_id" not in kernels:
        none = np.full(n, -1, dtype=np.int64)
        return (
            none,
            none.copy(),
            F.model_op_costs(ops.iloc[:0] if ops is not None else pd.DataFrame({"name": []})),
        )
    ctx = ctx if ctx is not None else C.op_context(ops)
    pos = ctx.ids.get_indexer(pd.Index(kernels["op_id"].to_numpy(dtype=np.int64)))
    pos = pos.astype(np.int64)
    # only the launching ops and a few ancestors need a cost
    need = np.zeros(len(ops), dtype=bool)
    cur = np.unique(pos[pos >= 0])
    for _ in range(MAX_COST_HOPS + 1):
        need[cur] = True
        cur = ctx.ppos[cur]
        cur = cur[cur >= 0]  # repeats are harmless (and never more than the kernels)
        if not len(cur):
            break
    cost = F.model_op_costs(ops, list_bytes=list_bytes, only=need)
    if names is None:
        names = kernels["name"].to_numpy(dtype=object)
    _refine_lists(ops, cost, ctx, kernels, names, pos, n_params)
    finite = np.isfinite(cost.flops) | np.isfinite(cost.bytes)
    anchor = np.full(n, -1, dtype=np.int64)
    cur = pos.copy()
    for level in range(MAX_COST_HOPS + 1):
        valid = (cur >= 0) & (anchor < 0)
        if not valid.any():
            break
        idx = np.flatnonzero(valid)
        c = cur[idx]
        ok = finite[c]
        if level > 0:  # an ancestor carries the cost only if it is of the kernel's class
            ok &= ctx.cls[ctx.own[c]] == kcls[idx]
        anchor[idx[ok]] = c[ok]
        cur = np.where(cur >= 0, ctx.ppos[np.maximum(cur, 0)], -1)
    return anchor, pos, cost


_ELEM_RE = re.compile(
    r"OpaqueType<(\d+)u?>|(?:Functor|Metadata)\w*<(float|double|c10::BFloat16|c10::Half)\b"
)
_ELEM_BYTES = {"float": 4, "double": 8, "c10::BFloat16": 2, "c10::Half": 2}
MTA_CHUNK = 65536  # elements per block of PyTorch's multi_tensor_apply (kChunkSize)
_ONE_PER_GROUP = ("aten::_foreach_addcdiv_", "aten::_foreach_lerp_", "aten::_fused_adamw_",
                  "aten::_fused_adam_")  # fmt: skip


@functools.lru_cache(maxsize=4096)
def _name_element_size(name: str) -> int | None:
    m = _ELEM_RE.search(name)
    if m is None:
        return None
    return int(m.group(1)) if m.group(1) else _ELEM_BYTES[m.group(2)]


def _element_size(names: list[str]) -> int | None:
    """Element size of copy/multi-tensor kernels from their template arguments, if unique."""
    sizes = {_name_element_size(nm) for nm in names} - {None}
    return sizes.pop() if len(sizes) == 1 else None


def _refine_lists(
    ops: pd.DataFrame,
    cost: F.OpCosts,
    ctx: C.OpContext,
    kernels: pd.DataFrame,
    names: np.ndarray,
    kpos: np.ndarray,
    n_params: int | None,
) -> None:
    """Tensor-list ops (optimizer steps, cat): the profiler records no dtype for lists and
    drops the shapes of long ones. Take the element size from the ops' kernels' template
    arguments (``OpaqueType<2u>``, ``BinaryOpListAlphaFunctor<float, …>``); give optimizer
    lists without shapes the model's parameter count where that is what they hold: inside
    ``Optimizer.step``, one parameter group (one addcdiv/lerp/fused-AdamW call per step),
    and multi_tensor_apply kernels that ran enough 64 Ki-element blocks to cover it.
    Updates ``cost`` in place."""
    note_arr = cost.cost_note
    cand = np.zeros(len(note_arr), dtype=bool)
    has = np.flatnonzero(cost.has_model)
    cand[has] = [("tensor-list" in str(x)) for x in note_arr[has]]
    if not cand.any():
        return
    grid = (
        kernels["grid_x"].fillna(0).to_numpy(dtype=float)
        if "grid_x" in kernels
        else np.zeros(len(kernels))
    )
    sel = np.flatnonzero((kpos >= 0) & cand[np.maximum(kpos, 0)])
    by_op: dict[int, list[str]] = {}
    for kp, nm in zip(kpos[sel].tolist(), names[sel].tolist(), strict=True):
        by_op.setdefault(kp, []).append(nm)
    blocks = np.zeros(len(ops))
    np.add.at(blocks, kpos[sel], grid[sel])  # in kernel order, like a running sum
    one_group = False
    if n_params:
        step = ops["step"] if "step" in ops else pd.Series(0, index=ops.index)
        per_group = ops[ops["name"].isin(_ONE_PER_GROUP)]
        counts = per_group.groupby([step[per_group.index], per_group["name"]]).size()
        one_group = not len(counts) or int(counts.max()) == 1
    upd_i: list[int] = []
    upd: list[tuple[float, float, str]] = []
    idx = np.array(sorted(by_op), dtype=np.int64)
    rec = {
        c: dict(zip(idx.tolist(), ops[c].iloc[idx].astype(object).tolist(), strict=True))
        if c in ops
        else {}
        for c in ("name", "input_dims", "input_types", "concrete_inputs")
    }
    for i, kn in by_op.items():
        size = _element_size(kn)
        numel = None
        if (
            n_params
            and one_group
            and str(note_arr[i]).startswith(LIST_SIZES_UNKNOWN)
            and str(ctx.rule[ctx.anc[i]]).startswith("op:^Optimizer")
            and blocks[i] * MTA_CHUNK >= 0.5 * n_params
        ):
            numel = n_params
        if size is None and numel is None:
            continue
        c = F.op_cost(
            str(rec["name"][i]),
            text(rec["input_dims"].get(i)),
            text(rec["input_types"].get(i)),
            text(rec["concrete_inputs"].get(i)),
            size or 4,
            numel,
        )
        if c is None or not math.isfinite(c.bytes):
            continue
        note = c.note
        if size is not None:
            note = note.replace(
                f"tensor-list dtype not recorded by the profiler: {size} B/element assumed",
                f"tensor-list element size {size} B from the kernel names",
            )
        if numel is not None:
            note += " (the model's parameter count, from the manifest)"
        upd_i.append(i)
        upd.append((c.flops, c.bytes, note))
    if upd_i:
        rows = np.array(upd_i)
        cost.flops_model[rows] = [u[0] for u in upd]
        cost.flops[rows] = [u[0] for u in upd]
        cost.bytes[rows] = [u[1] for u in upd]
        cost.source[rows] = "modelled"
        cost.cost_note[rows] = [u[2] for u in upd]


def read_profiler_flops(path: str | Path) -> pd.DataFrame:
    """The collector's ``*.profiler_flops.json.gz``: ``name``, ``input_dims`` (JSON, as the
    trace writes it), ``flops`` per call."""
    import gzip
    import json

    p = Path(path)
    try:
        with gzip.open(p, "rt") if p.name.endswith(".gz") else p.open() as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        raise TraceError(f"{p}: unreadable profiler FLOPs file ({e})") from None
    rows = doc.get("rows") if isinstance(doc, dict) else None
    if doc.get("format") != "tracekit.profiler_flops" or not isinstance(rows, list):
        raise TraceError(f"{p}: not a tracekit.profiler_flops file")
    out = [
        {
            "name": r["name"],
            "input_dims": json.dumps(r["input_shapes"]),
            "flops": float(r["flops"]) / max(1, int(r.get("count", 1))),
        }
        for r in rows
        if isinstance(r, dict) and r.get("flops")
    ]
    return cast(pd.DataFrame, pd.DataFrame(out, columns=["name", "input_dims", "flops"]))


def _run_artifact(trace: TraceLike, key: str) -> Path | None:
    """``manifest['artifacts'][key]`` of the trace's run folder, if that file exists."""
    run_dir = getattr(trace, "run_dir", None)
    manifest = getattr(trace, "manifest", None) or {}
    arts = manifest.get("artifacts") if isinstance(manifest, Mapping) else None
    rel = arts.get(key) if isinstance(arts, Mapping) else None
    if run_dir is None or not rel:
        return None
    p = Path(run_dir) / str(rel)
    return p if p.is_file() else None


def _run_profiler_flops(trace: TraceLike) -> pd.DataFrame | None:
    p = _run_artifact(trace, "profiler_flops")
    return read_profiler_flops(p) if p is not None else None


def _with_profiler_flops(
    ops: pd.DataFrame, table: pd.DataFrame | str | Path, notes: list[str]
) -> pd.DataFrame:
    """``ops`` with the profiler's per-call FLOPs filled in by (name, input shapes)."""
    import json

    t = read_profiler_flops(table) if isinstance(table, (str, Path)) else table
    if not len(t):
        return ops

    def norm(s: Any) -> str | None:
        try:
            return json.dumps(json.loads(s)) if isinstance(s, str) else None
        except ValueError:
            return None

    lookup = {
        (n, norm(d)): f for n, d, f in zip(t["name"], t["input_dims"], t["flops"], strict=True)
    }
    # looked up once per distinct (name, input dims): half a million ops have a few hundred
    n_codes, n_uniq = pd.factorize(ops["name"].astype(str))
    d_codes, d_uniq = pd.factorize(ops["input_dims"])
    names = [*n_uniq.tolist(), math.nan]  # code -1: missing
    dims = [*(norm(d) for d in d_uniq), None]
    codes, first = combine_codes(n_codes % len(names), d_codes % len(dims))
    found = np.array(
        [lookup.get((names[n_codes[r]], dims[d_codes[r]]), math.nan) for r in first.tolist()],
        dtype=float,
    )[codes]
    have = (
        pd.to_numeric(ops["flops"], errors="coerce").to_numpy(dtype=float)
        if ("flops" in ops)
        else np.full(len(ops), math.nan)
    )
    fill = ~np.isfinite(have) & np.isfinite(found)
    if fill.any():
        ops = ops.copy()
        ops["flops"] = np.where(fill, found, have)
        notes.append(
            f"torch's own FLOP estimates (profiler_flops) used for {int(fill.sum())} "
            "operators (GEMMs and convolutions)"
        )
    return ops


def _profiler_overhead(manifest: Mapping[str, Any] | None) -> str:
    """A clause for the launch-bound note when profiling itself slowed the step down."""
    m = (manifest or {}).get("metrics") if isinstance(manifest, Mapping) else None
    if not isinstance(m, Mapping):
        return ""
    prof = m.get("profiled_step_time_ms")
    med = (
        (m.get("step_time_ms") or {}).get("median")
        if isinstance(m.get("step_time_ms"), Mapping)
        else None
    )
    if not isinstance(prof, (int, float)) or not isinstance(med, (int, float)) or med <= 0:
        return ""
    if prof < 1.2 * med:
        return ""
    return (
        f"; the profiled step took {prof:.1f} ms against {med:.1f} ms unprofiled, so part "
        "of that idle time is the profiler's own overhead"
    )


def _n_params(manifest: Mapping[str, Any] | None) -> int | None:
    for where in ((manifest or {}).get("model"), (manifest or {}).get("metrics"), manifest):
        if isinstance(where, Mapping):
            for k in ("n_params", "params", "num_params", "parameters"):
                v = where.get(k)
                if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0:
                    return int(v)
    return None


def _take(values: np.ndarray | pd.Series | None, pos: np.ndarray, default: Any) -> np.ndarray:
    """``values`` at row positions ``pos`` (``default`` where ``pos`` < 0), as objects."""
    out = np.full(len(pos), default, dtype=object)
    has = pos >= 0
    if values is not None and len(values) and has.any():
        if isinstance(values, pd.Series):  # convert only the rows taken
            out[has] = values.iloc[pos[has]].to_numpy(dtype=object)
        else:
            out[has] = values[pos[has]]
    return out


def _split(anchor: np.ndarray, dur: np.ndarray, total: np.ndarray) -> np.ndarray:
    """Each kernel's share of its cost operator's total, by duration."""
    out = np.full(len(anchor), NAN)
    has = anchor >= 0
    if not has.any():
        return out
    a = anchor[has]
    d = dur[has].astype(float)
    codes, _ = pd.factorize(a)
    dsum = np.bincount(codes, weights=d)
    cnt = np.bincount(codes).astype(float)
    share = np.where(
        dsum[codes] > 0, d / np.where(dsum[codes] > 0, dsum[codes], 1.0), 1.0 / cnt[codes]
    )
    out[has] = total[a] * share
    return out


# --- bounds ---------------------------------------------------------------------------


_BOUNDS = ("memory-bound", "compute-bound", "unknown")
_BOUND_LABELS = np.array(_BOUNDS, dtype=object)
_LEVELS = np.array(["dram", "compute", "l2", None], dtype=object)


def _bounds(
    flops: np.ndarray,
    nbytes: np.ndarray,
    dur: np.ndarray,
    peak: np.ndarray,
    bw: float | None,
    l2_bytes: np.ndarray | None = None,
    l2_bw: float | None = None,
) -> dict[str, np.ndarray]:
    n = len(flops)
    bwv = bw if bw else NAN
    with np.errstate(divide="ignore", invalid="ignore"):
        intensity = np.where(nbytes > 0, flops / nbytes, np.where(flops > 0, np.inf, NAN))
        secs = dur.astype(float) * 1e-9
        att_f = np.where(secs > 0, flops / secs, NAN)
        att_b = np.where(secs > 0, nbytes / secs, NAN)
        roof_dram = np.minimum(peak, intensity * bwv)
        binding = roof_dram.copy()
        # labels as indices into _LEVELS / _BOUND_LABELS: one shared str object per label
        level = np.where(np.isfinite(roof_dram) & (roof_dram < peak), 0, 1)
        i_l2 = np.full(n, NAN)
        if l2_bytes is not None:
            i_l2 = np.where(l2_bytes > 0, flops / l2_bytes, NAN)
            if l2_bw:
                roof_l2 = np.minimum(peak, i_l2 * l2_bw)
                use_l2 = np.isfinite(roof_l2) & (roof_l2 < binding)
                binding = np.where(use_l2, roof_l2, binding)
                level[use_l2] = 2
        known = np.isfinite(flops) & np.isfinite(nbytes) & np.isfinite(peak) & math.isfinite(bwv)
        known &= (flops > 0) | (nbytes > 0)
        mem = binding < peak
        bound = np.where(known, np.where(mem, 0, 1), 2)
        roof_pct = np.where(
            known,
            np.where(
                mem & (flops > 0),
                att_f / binding * 100.0,
                np.where(mem, att_b / bwv * 100.0, att_f / peak * 100.0),
            ),
            NAN,
        )
    level[~known] = 3
    return {
        "intensity": np.where(np.isinf(intensity), NAN, intensity),
        "intensity_l2": i_l2,
        "attained_flops": att_f,
        "attained_bw": att_b,
        "bound": _BOUND_LABELS[bound],
        "bound_level": _LEVELS[level],
        "roof_pct": roof_pct,
        "ridge": np.where(np.isfinite(peak), peak / bwv, NAN),
    }


# --- analytic traffic -------------------------------------------------------------------


def analytic_traffic(
    params: float,
    *,
    batch: int,
    seq: int,
    n_layer: int,
    n_embd: int,
    n_head: int,
    vocab: int = 0,
    act_bytes: int = 2,
    flash: bool = False,
) -> dict[str, float]:
    """Per-step traffic users estimate by hand: each of parameters (fp32), gradients
    (fp32), AdamW state (2 × fp32) and saved activations moved twice.

    Activations: Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large
    Transformer Models"), per layer ``s·b·h·(34 + 5·a·s/h)`` bytes at 2-byte elements
    (the ``5·a·s/h`` attention-score term vanishes with fused attention), scaled by
    ``act_bytes / 2``, plus the logits ``b·s·vocab`` in fp32 (and their gradient).
    """
    per_layer = seq * batch * n_embd * (34 + (0 if flash else 5 * n_head * seq / n_embd))
    act = n_layer * per_layer * act_bytes / 2 + 2 * batch * seq * vocab * 4
    p = params * 4.0
    out = {
        "analytic_param_bytes": 2 * p,
        "analytic_grad_bytes": 2 * p,
        "analytic_optim_bytes": 2 * 2 * p,
        "analytic_act_bytes": 2 * act,
    }
    out["analytic_bytes"] = sum(out.values())
    return out


def _analytic_from_manifest(manifest: Mapping[str, Any] | None) -> dict[str, float] | None:
    if not manifest:
        return None
    cfg: dict[str, Any] = {}
    for key in ("model", "config"):
        v = manifest.get(key)
        if isinstance(v, Mapping):
            for k2 in ("model", "gpt"):
                if isinstance(v.get(k2), Mapping):
                    cfg.update(v[k2])
            cfg.update({k: x for k, x in v.items() if not isinstance(x, Mapping)})
    params = None
    for where in (manifest.get("model"), manifest.get("metrics"), manifest, cfg):
        if isinstance(where, Mapping):
            for k in ("params", "n_params", "num_params", "parameters"):
                if isinstance(where.get(k), (int, float)) and not isinstance(where.get(k), bool):
                    params = float(where[k])
                    break
        if params is not None:
            break

    def geti(*keys: str) -> int | None:
        for k in keys:
            v = cfg.get(k)
            if isinstance(v, int) and not isinstance(v, bool) and v > 0:
                return v
        return None

    batch, seq = geti("batch", "batch_size"), geti("seq", "seq_len", "block_size")
    n_layer, n_embd = geti("n_layer", "layers", "n_layers"), geti("n_embd", "d_model", "width")
    n_head = geti("n_head", "heads", "n_heads")
    if params is None or None in (batch, seq, n_layer, n_embd, n_head):
        return None
    dtype = str(cfg.get("dtype", "fp32"))
    return analytic_traffic(
        params,
        batch=batch or 0,
        seq=seq or 0,
        n_layer=n_layer or 0,
        n_embd=n_embd or 0,
        n_head=n_head or 0,
        vocab=geti("vocab_size", "vocab") or 0,
        act_bytes=4 if dtype in ("fp32", "float32") else 2,
        flash=str(cfg.get("attention", "")) == "sdpa",
    )


# --- the main entry point --------------------------------------------------------------


def classify(
    trace: TraceLike,
    *,
    manifest: Mapping[str, Any] | None = None,
    peak_tflops: float | None = None,
    bandwidth_gbs: float | None = None,
    counters: pd.DataFrame | str | Path | None = None,
    tf32: bool | None = None,
    counters_mode: str = "auto",
    profiler_flops: pd.DataFrame | str | Path | None = None,
    gemm_counters: pd.DataFrame | str | Path | None = None,
) -> Classification:
    """Classify every GPU activity and operator of ``trace`` against the device roofline.

    ``trace`` has the parsed tables (``kernels``, ``ops``, ``steps``) and ``meta``
    (tracekit.parse.load's Trace). ``manifest`` defaults to ``trace.manifest`` (run
    folders). ``counters``: an Nsight Compute ``--csv --page raw`` file, or its parsed
    frame (:func:`tracekit.classify.counters.read_ncu_csv`); ``gemm_counters``: the
    collector's second pass with every GEMM launch (``counters-gemm.csv``), joined in launch
    order before ``counters`` (both found through the manifest by default).
    ``profiler_flops``: torch's own per-(operator, shapes) FLOP estimates (the collector's
    ``*.profiler_flops.json.gz``, found through the manifest by default); they fill
    ``ops.flops`` where the trace has none, and are preferred to the model.
    """
    kernels, ops = trace.kernels, trace.ops if trace.ops is not None else pd.DataFrame()
    steps_in = getattr(trace, "steps", None)
    meta = getattr(trace, "meta", None) or {}
    if manifest is None:
        manifest = getattr(trace, "manifest", None)
    _require(kernels, "kernels", ("kernel_id", "kind", "name", "ts", "dur"))
    if len(ops):
        _require(ops, "ops", ("op_id", "name", "parent"))
    notes: list[str] = []
    n = len(kernels)
    if not n:
        notes.append("no GPU activity in the trace (a CPU-only run?): nothing to classify")
    dur = _col(kernels, "dur", 0, np.int64)
    kind_codes, kind_uniq = _text(kernels, "kind", "kernel")
    kind = kind_uniq[kind_codes]
    name_codes, name_uniq = _text(kernels, "name", "")
    names = name_uniq[name_codes]
    step = _col(kernels, "step", -1, np.int64)

    # roofline of the device most kernels ran on
    dev = _col(kernels, "device", 0, np.int64)
    main_dev = int(pd.Series(dev).mode().iloc[0]) if n else None
    props = meta.get("device_properties") or meta.get("deviceProperties") or []
    roof = resolve_roofline(
        props,
        device=main_dev,
        manifest=manifest,
        peak_tflops=peak_tflops,
        bandwidth_gbs=bandwidth_gbs,
        tf32=tf32,
    )
    notes.extend(roof.notes)
    names_seen = {str(p.get("name")) for p in props if p.get("name")}
    if len(names_seen) > 1:
        notes.append(
            f"several device types in one trace ({', '.join(sorted(names_seen))}); "
            f"all judged against device {main_dev}'s roofline"
        )

    # classes
    ctx = C.op_context(ops) if len(ops) else None
    cls_df = C.kernel_classes(kernels, ops if len(ops) else None, ctx, (name_codes, name_uniq))
    kcls = cls_df["class"]
    if not len(ops):
        notes.append("no CPU operators in the trace: classes from kernel names only, no FLOPs")

    # costs (torch's own FLOP estimates, kept beside the trace by the collector, where given)
    prof_flops = profiler_flops if profiler_flops is not None else _run_profiler_flops(trace)
    if prof_flops is not None and len(ops):
        ops = _with_profiler_flops(ops, prof_flops, notes)
    list_bytes = 4
    anchor, inner, cost = _cost_ops(kernels, ops, kcls, list_bytes, _n_params(manifest), ctx, names)
    is_copy = np.isin(kind, ("memcpy", "memset"))
    anchor[is_copy] = -1  # copies carry their own byte count, not a share of an op
    flops = _split(anchor, dur, cost.flops)
    nbytes = _split(anchor, dur, cost.bytes)
    src = _take(cost.source, anchor, "none")
    src[~(np.isfinite(flops) | np.isfinite(nbytes))] = "none"
    cost_note = _take(cost.cost_note, anchor, "")
    why = _take(cost.cost_note, inner, "")  # why a kernel without a cost operator has none
    cost_note = np.where(anchor >= 0, cost_note, why).astype(object)
    cost_dtype = _take(cost.dtype, anchor, None)
    cost_name = _take(ops.get("name"), anchor, None)
    cost_op_id = np.full(n, -1, dtype=np.int64)
    if len(ops):
        has = anchor >= 0
        cost_op_id[has] = ops["op_id"].to_numpy(dtype=np.int64)[anchor[has]]

    # memcpy / memset carry their own byte count
    copy_bytes = (
        pd.to_numeric(kernels["bytes"], errors="coerce").to_numpy(dtype=float)
        if ("bytes" in kernels)
        else np.full(n, NAN)
    )
    dtod = np.zeros(n, dtype=bool)
    dtod[kind == "memcpy"] = ["DtoD" in str(x) for x in names[kind == "memcpy"]]
    factor = np.where((kind == "memcpy") & dtod, 2.0, 1.0)
    flops[is_copy] = 0.0
    nbytes[is_copy] = copy_bytes[is_copy] * factor[is_copy]
    src[is_copy] = np.where(np.isfinite(nbytes[is_copy]), "profiler", "none")
    host_copy = (kind == "memcpy") & ~dtod
    cost_note[host_copy] = "host transfer: PCIe/NVLink-bound, not judged against DRAM"

    if len(ops) and "input_dims" in ops and ops["input_dims"].notna().sum() == 0:
        notes.append("no shapes recorded (record_shapes=False): FLOPs unavailable")
    elif len(ops) and not np.isfinite(flops[~is_copy]).any() and (~is_copy).any():
        notes.append("no kernel could be given FLOPs from the recorded shapes")
    distinct_notes = [str(x) for x in pd.unique(cost_note)]
    if any(x.startswith(LIST_SIZES_UNKNOWN) for x in distinct_notes):
        notes.append(
            "the profiler dropped the shapes of long tensor lists (optimizer steps): their "
            "FLOPs and bytes are unknown unless the manifest gives the parameter count"
        )
    if any(LIST_SIZES_UNKNOWN + ":" in x for x in distinct_notes):
        notes.append(
            "optimizer tensor lists without recorded shapes were given the model's parameter "
            "count (manifest) per list"
        )
    if any("B/element assumed" in x for x in distinct_notes):
        notes.append(
            "the profiler does not record the dtype of tensor lists (optimizer "
            "states): fp32 (4 B/element) assumed for their bytes"
        )
    if len(ops) and "flops" in ops and ops["flops"].notna().any():
        notes.append("the trace carries the profiler's own FLOPs (with_flops): used where present")

    # pipes
    pipe = _pipes(kcls, cost_dtype, cost_name, name_codes, name_uniq, roof)
    pipe[is_copy] = None

    flops_model, bytes_model = flops.copy(), nbytes.copy()
    l2 = np.full(n, NAN)
    extrap = np.zeros(n, dtype=bool)
    counters_df = unmatched = None
    if counters is None:
        counters = _run_artifact(trace, "counters")
        if gemm_counters is None:
            gemm_counters = _run_artifact(trace, "counters_gemm")
    if counters is not None:
        counters_df = K.read_ncu_csv(counters) if isinstance(counters, (str, Path)) else counters
        launches = (
            K.read_ncu_csv(gemm_counters)
            if isinstance(gemm_counters, (str, Path))
            else gemm_counters
        )
        joined, unmatched, cnotes = K.join_counters(
            kernels, counters_df, mode=counters_mode, launches=launches
        )
        notes.extend(cnotes)
        if len(joined):
            idx = pd.Index(kernels["kernel_id"].to_numpy()).get_indexer(joined["kernel_id"])
            ok = idx >= 0
            j, rows = joined[ok], idx[ok]
            flops[rows] = j["flops"].to_numpy(dtype=float)
            nbytes[rows] = j["dram_bytes"].to_numpy(dtype=float)
            l2[rows] = j["l2_bytes"].to_numpy(dtype=float)
            extrap[rows] = j["extrapolated"].to_numpy(dtype=bool)
            src[rows] = "measured"
            mp = j["pipe"].to_numpy(dtype=object)
            has_mp = np.array([p is not None and p == p for p in mp], dtype=bool)
            pipe[rows[has_mp]] = mp[has_mp]
            l2bw = (
                counters_df["l2_peak_bw"].to_numpy(dtype=float)
                if "l2_peak_bw" in counters_df
                else np.zeros(0)
            )
            if np.isfinite(l2bw).any():
                roof = roof.with_l2(
                    float(np.nanmedian(l2bw)),
                    "measured (ncu lts__t_bytes.sum."
                    "peak_sustained × lts__cycles_elapsed.avg.per_second)",
                )
            else:
                notes.append(
                    "L2 roof unknown (peak metrics not in the counters): the class of "
                    "measured kernels is decided by DRAM intensity alone"
                )

    peak = _peaks(roof, pipe)
    b = _bounds(flops, nbytes, dur, peak, roof.bandwidth, l2, roof.l2_bandwidth)
    b["bound"][is_copy & np.isfinite(nbytes)] = "memory-bound"
    b["roof_pct"][host_copy] = NAN
    if not roof.known:
        b["bound"][:] = "unknown"

    kr = pd.DataFrame(
        {
            "kernel_id": kernels["kernel_id"].to_numpy(dtype=np.int64),
            "name": _column(kernels.get("name"), n, names),
            "kind": _column(kernels.get("kind"), n, kind),
            "class": kcls,
            "class_source": cls_df["class_source"],
            "class_rule": cls_df["class_rule"],
            "fused_ops": cls_df["fused_ops"],
            "device": dev.astype(np.int32),
            "stream": _col(kernels, "stream", -1, np.int64),
            "op_id": _col(kernels, "op_id", -1, np.int64),
            "op_name": _column(kernels.get("op_name"), n),
            "autograd_node": cls_df["autograd_node"],
            "top_op": _column(kernels.get("top_op_name"), n),
            "module": _column(kernels.get("module"), n),
            "step": step.astype(np.int32),
            "ts": _col(kernels, "ts", 0, np.int64),
            "dur": dur,
            "cost_op_id": cost_op_id.astype(np.int64),
            "cost_op_name": cost_name,
            "flops": flops,
            "bytes": nbytes,
            "flops_model": flops_model,
            "bytes_model": bytes_model,
            "l2_bytes": l2,
            "intensity": b["intensity"],
            "intensity_l2": b["intensity_l2"],
            "pipe": pipe,
            "peak_flops": peak,
            "peak_bw": np.full(n, roof.bandwidth if roof.bandwidth else NAN),
            "ridge": b["ridge"],
            "bound": b["bound"],
            "bound_level": b["bound_level"],
            "attained_flops": b["attained_flops"],
            "attained_bw": b["attained_bw"],
            "roof_pct": b["roof_pct"],
            "source": src,
            "extrapolated": extrap,
            "cost_note": cost_note,
        }
    )
    kr = kr[[c.name for c in TABLES["kernel_roofline"]]]

    scope = _scope(kr)
    op_df = _op_roofline(kr, ops, roof, ctx)
    in_scope = kr[["class", "dur", "flops", "bytes", "bound", "step"]]
    if not scope.all():
        in_scope = in_scope[scope]
    classes = _classes(in_scope, _n_steps(in_scope))
    steps = _steps(kr, steps_in, roof, _analytic_from_manifest(manifest), notes)
    overhead = _profiler_overhead(manifest)
    for r in steps.itertuples():
        if r.launch_bound:
            notes.append(
                f"step {r.step}: GPU idle {r.gpu_idle_pct:.0f}% of its span — "
                "launch/host-bound (the GPU waits for the CPU)" + overhead
            )
    return Classification(kr, op_df, classes, steps, roof, notes, counters_df, unmatched)


def _pipes(
    kcls: np.ndarray,
    dtype: np.ndarray,
    cost_name: np.ndarray,
    name_codes: np.ndarray,
    name_uniq: np.ndarray,
    roof: Roofline,
) -> np.ndarray:
    """Pipe of every kernel, computed once per distinct (class, dtype, conv, kernel name);
    ``name_codes`` index the distinct kernel names ``name_uniq``."""
    n = len(kcls)
    if not n:
        return np.zeros(0, dtype=object)
    named = [pipe_from_kernel_name(str(u)) for u in name_uniq]
    conv_codes, uniq_ops = pd.factorize(pd.Series(cost_name, dtype=object), sort=False)
    is_conv = np.array([is_convolution(str(o)) for o in uniq_ops], dtype=bool)
    conv = np.zeros(n, dtype=np.int64)
    if len(is_conv):
        conv = np.where(conv_codes >= 0, is_conv[np.maximum(conv_codes, 0)], False)
    cls_codes, cls_vals = factorized(pd.Series(kcls, dtype=object), n)
    dt_codes, dt_vals = factorized(pd.Series(dtype, dtype=object), n)
    conv = conv.astype(np.int64)
    codes, first = combine_codes(cls_codes, dt_codes, conv, name_codes)
    vals = np.array(
        [
            pipe_for(cls_vals[c] or "", dt_vals[d], roof, conv=bool(cv), named=named[k])
            for c, d, cv, k in zip(
                cls_codes[first].tolist(),
                dt_codes[first].tolist(),
                conv[first].tolist(),
                name_codes[first].tolist(),
                strict=True,
            )
        ],
        dtype=object,
    )
    out: np.ndarray = vals[codes]
    return out


def _scope(kr: pd.DataFrame) -> np.ndarray:
    """Kernels of the analysed steps (all of them for a trace without steps)."""
    st = kr["step"].to_numpy()
    return st >= 0 if (st >= 0).any() else np.ones(len(kr), dtype=bool)


def _n_steps(kr: pd.DataFrame) -> int:
    return max(1, int(kr["step"].nunique()))


_SUMMED = ("flops", "bytes", "flops_model", "bytes_model")
_FIRST = ("pipe", "source", "cost_note", "autograd_node")


def _peaks(roof: Roofline, pipes: Any) -> np.ndarray:
    """Peak FLOP/s of each pipe name (NaN: none), looked up once per distinct pipe."""
    codes, uniq = pd.factorize(np.asarray(pipes, dtype=object))
    vals = [roof.peak(p) if isinstance(p, str) else None for p in uniq]
    return np.array([*vals, None], dtype=float)[codes]  # code -1 (missing): the last


def _op_roofline(
    kr: pd.DataFrame, ops: pd.DataFrame, roof: Roofline, ctx: C.OpContext | None = None
) -> pd.DataFrame:
    """One row per cost operator (else launching operator) of the kernels, by GPU time.

    Only numbers and row positions are grouped: per operator the sums of its kernels (in
    the order longest first), the position of its longest kernel with a pipe, source, note
    and autograd node, and its class of most GPU time; the text is taken once at the end."""
    cols = [c.name for c in TABLES["op_roofline"]]
    key = np.where(kr["cost_op_id"] >= 0, kr["cost_op_id"], kr["op_id"])
    sel = np.flatnonzero(key >= 0)
    if not len(sel):
        return cast(pd.DataFrame, pd.DataFrame({c: pd.Series(dtype=object) for c in cols}))
    dur = kr["dur"].to_numpy(dtype=np.int64)
    rows = sel[np.argsort(-dur[sel], kind="stable")]  # longest first, ties in kernel order
    cls_codes, cls_uniq = pd.factorize(kr["class"], sort=True)
    at = np.arange(len(rows), dtype=float)
    k = pd.DataFrame(
        {
            "_key": key[rows],
            "dur": dur[rows],
            **{c: kr[c].to_numpy(dtype=float)[rows] for c in _SUMMED},
            # position in ``rows`` where the column has a value
            **{c: np.where(kr[c].notna().to_numpy()[rows], at, NAN) for c in _FIRST},
        }
    )
    g = k.groupby("_key", sort=True)
    size = g.size()
    out = {"op_id": size.index.to_numpy(dtype=np.int64), "gpu_dur": g["dur"].sum().to_numpy()}
    out["kernel_count"] = size.to_numpy()
    sums = g[list(_SUMMED)].sum(min_count=1)
    partial = g[list(_SUMMED)].count().to_numpy() < size.to_numpy()[:, None]
    for i, c in enumerate(_SUMMED):
        v = sums[c].to_numpy(dtype=float, copy=True)
        v[partial[:, i]] = NAN  # a NaN in any kernel: total unknown
        out[c] = v
    firsts = g[list(_FIRST)].first()
    first = {c: firsts[c].to_numpy(dtype=float) for c in _FIRST}
    # each op's class of most GPU time (ties: the first class name), from a (op, class) grid
    op_code = np.searchsorted(out["op_id"], key[rows])
    n_cls = len(cls_uniq)
    cell = op_code * n_cls + cls_codes[rows]
    grid = np.bincount(cell, weights=dur[rows], minlength=len(size) * n_cls)
    grid[np.bincount(cell, minlength=len(grid)) == 0] = -1.0  # absent, even beside 0 ns
    best = grid.reshape(len(size), n_cls).argmax(axis=1)
    # by GPU time, descending (stable: ties in op id order); every column taken in that order
    order = np.argsort(-out["gpu_dur"], kind="stable")
    res: dict[str, Any] = {c: v[order] for c, v in out.items()}
    res["class"] = cls_uniq[best[order]].array
    for c in _FIRST:
        p = first[c][order]
        res[c] = kr[c].array.take(
            np.where(np.isnan(p), -1, rows[np.nan_to_num(p).astype(np.int64)]), allow_fill=True
        )
    n = len(order)
    if len(ops):
        ids = ctx.ids if ctx is not None else C.id_index(ops["op_id"].to_numpy(dtype=np.int64))
        pos = ids.get_indexer(res["op_id"])
        found = pos >= 0
        for c in ("name", "step", "module", "input_dims", "input_types"):
            if c not in ops:
                res[c] = np.full(n, None, dtype=object)
                continue
            col = pd.Series(ops[c].array.take(np.maximum(pos, 0)))
            if not found.all():
                col = col.where(found)
            res[c] = _column(col, n)
    else:
        for c in ("name", "step", "module", "input_dims", "input_types"):
            res[c] = np.full(n, None, dtype=object)
    res["step"] = pd.to_numeric(pd.Series(res["step"]), errors="coerce").fillna(-1)
    res["step"] = res["step"].to_numpy().astype(np.int32)
    is_copy = np.isin(np.asarray(res["class"], dtype=object), ["memcpy", "memset"])
    peak = _peaks(roof, res["pipe"])
    b = _bounds(res["flops"], res["bytes"], res["gpu_dur"], peak, roof.bandwidth)
    bound = b["bound"]
    bound[is_copy & np.isfinite(res["bytes"])] = "memory-bound"
    if not roof.known:
        bound[:] = "unknown"
    res["intensity"], res["ridge"], res["bound"] = b["intensity"], b["ridge"], bound
    res["attained_flops"], res["attained_bw"] = b["attained_flops"], b["attained_bw"]
    res["roof_pct"] = b["roof_pct"]
    res["gpu_dur"] = res["gpu_dur"].astype(np.int64)
    res["kernel_count"] = res["kernel_count"].astype(np.int64)
    return cast(pd.DataFrame, pd.DataFrame({c: res[c] for c in cols}))


def _classes(kr: pd.DataFrame, n_steps: int) -> pd.DataFrame:
    """One row per class of :data:`~tracekit.classify.families.registry.CLASSES` (sums per
    class in row order, as a mask and ``Series.sum`` per class gave them)."""
    known = list(CLASSES)
    codes, uniq = pd.factorize(kr["class"])  # in Arrow; then map the few distinct names
    codes = np.append(pd.Index(known).get_indexer(uniq), -1)[codes]
    ok = codes >= 0
    gid, n = codes[ok], len(known)
    dur = kr["dur"].to_numpy(dtype=np.int64)
    flops = kr["flops"].to_numpy(dtype=float)
    flops = np.where(np.isfinite(flops), flops, 0.0)
    total_t, total_f = float(dur.sum()), float(flops.sum())
    mem = (kr["bound"] == "memory-bound").to_numpy()
    t = np.bincount(gid, weights=dur[ok], minlength=n)  # exact: integers below 2**53
    mem_t = np.bincount(gid, weights=np.where(mem, dur, 0)[ok], minlength=n)
    f = group_sums(flops[ok], gid, n)
    b = group_sums(kr["bytes"].to_numpy(dtype=float)[ok], gid, n)
    count = np.bincount(gid, minlength=n)
    rows = [
        {
            "class": c,
            "gpu_time": int(t[i]),
            "time_share_pct": 100.0 * int(t[i]) / total_t if total_t else 0.0,
            "ms_per_step": int(t[i]) / n_steps / 1e6,
            "flops": float(f[i]),
            "flop_share_pct": 100.0 * float(f[i]) / total_f if total_f else 0.0,
            "bytes": float(b[i]),
            "kernel_count": int(count[i]),
            "memory_bound_pct": 100.0 * float(mem_t[i]) / int(t[i]) if t[i] else 0.0,
        }
        for i, c in enumerate(known)
    ]
    return cast(pd.DataFrame, pd.DataFrame(rows)[[c.name for c in TABLES["classes"]]])


def _union(starts: np.ndarray, ends: np.ndarray) -> int:
    if not len(starts):
        return 0
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    run_end = np.maximum.accumulate(e)
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] > run_end[:-1]
    gid = np.cumsum(new) - 1
    gs = s[new]
    ge = np.zeros(len(gs), dtype=np.int64)
    np.maximum.at(ge, gid, e)
    return int((ge - gs).sum())


def _steps(
    kr: pd.DataFrame,
    steps_in: pd.DataFrame | None,
    roof: Roofline,
    analytic: dict[str, float] | None,
    notes: list[str],
) -> pd.DataFrame:
    cols = [c.name for c in TABLES["step_summary"]]
    scope = _scope(kr)
    step_all = kr["step"].to_numpy()[scope]
    order = np.argsort(step_all, kind="stable")
    sel = np.flatnonzero(scope)[order]
    steps_sorted = step_all[order]
    cut = np.flatnonzero(np.diff(steps_sorted)) + 1
    groups = np.split(np.arange(len(sel)), cut) if len(sel) else []
    a_ts = kr["ts"].to_numpy(np.int64)[sel]
    a_dur = kr["dur"].to_numpy(np.int64)[sel]
    a_fl = kr["flops"].to_numpy(float)[sel]
    a_by = kr["bytes"].to_numpy(float)[sel]
    a_kind = (kr["kind"] == "kernel").to_numpy()[sel]
    a_bound = {b: (kr["bound"] == b).to_numpy()[sel] for b in _BOUNDS}
    # the parser's per-step GPU span and busy time, where it has them
    given: dict[str, dict[int, Any]] = {}
    if steps_in is not None and len(steps_in) and ("step" in steps_in):
        for c in ("gpu_dur", "gpu_busy"):
            if c in steps_in:
                given[c] = dict(zip(steps_in["step"].tolist(), steps_in[c].tolist(), strict=True))
    rows = []
    for g in groups:
        s = int(steps_sorted[g[0]])
        ts, dur = a_ts[g], a_dur[g]
        end = ts + dur
        span = int(end.max() - ts.min()) if len(g) else 0
        busy = _union(ts, end)
        if pd.notna(v := given.get("gpu_dur", {}).get(s)):
            span = int(v)
        if pd.notna(v := given.get("gpu_busy", {}).get(s)):
            busy = int(v)
        kt = float(dur.sum())
        fl, by = a_fl[g], a_by[g]
        is_k = a_kind[g]
        k_t = float(dur[is_k].sum())
        known_t = float(dur[is_k & np.isfinite(fl)].sum())
        # FLOPs are only meaningful for kernels: unknown if no kernel has them
        f = float(np.nansum(fl)) if known_t > 0 else NAN
        b_ = float(np.nansum(by))
        secs = span * 1e-9
        row = {
            "step": s,
            "gpu_span": span,
            "gpu_busy": busy,
            "kernel_time": int(kt),
            "kernel_count": len(g),
            "flops": f,
            "bytes": b_,
            "flops_coverage_pct": 100.0 * known_t / k_t if k_t else NAN,
            "intensity": f / b_ if b_ else NAN,
            "achieved_flops": f / secs if secs else NAN,
            "achieved_bw": b_ / secs if secs else NAN,
            **{
                f"{b.split('-')[0]}_bound_time_pct": 100.0 * dur[a_bound[b][g]].sum() / kt
                if kt
                else NAN
                for b in _BOUNDS
            },
            "gpu_idle_pct": 100.0 * (1.0 - busy / span) if span else NAN,
        }
        row["bw_util_pct"] = 100.0 * row["achieved_bw"] / roof.bandwidth if roof.bandwidth else NAN
        row["launch_bound"] = bool(span and row["gpu_idle_pct"] > 50.0)
        for key in (
            "analytic_bytes",
            "analytic_param_bytes",
            "analytic_grad_bytes",
            "analytic_optim_bytes",
            "analytic_act_bytes",
        ):
            row[key] = analytic[key] if analytic else NAN
        row["bytes_vs_analytic"] = b_ / analytic["analytic_bytes"] if analytic else NAN
        rows.append(row)
    if analytic is None:
        notes.append(
            "analytic traffic estimate unavailable: the manifest gives no model "
            "parameter count and config"
        )
    if not rows:
        return cast(pd.DataFrame, pd.DataFrame({c: pd.Series(dtype=object) for c in cols}))
    out = pd.DataFrame(rows)
    out["step"] = out["step"].astype(np.int32)
    return cast(pd.DataFrame, out[cols])
