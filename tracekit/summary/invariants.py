"""What every report must satisfy, checked in one place: a report never contradicts itself.

:func:`violations` is a pure function over a report's ``summary.json`` document (and, for
the FLOP count, the classified kernel rows with the operator tree); it returns one
:class:`Violation` per broken invariant, empty when the report is consistent. ``tracekit
report`` runs it on every report and lists what it finds among the warnings; the tests run
it on every fixture, the traces in ``tests/data`` and CPU runs of each kind.

The invariants (``name``: what holds):

* ``share``: every share (``*share*`` keys) lies in 0–100 %, and a set of shares that
  partitions a whole sums to at most 100 %;
* ``flops_once``: a CPU run's FLOPs are counted once per step: no work operator carrying
  FLOPs lies below another that carries FLOPs (a wrapper carries none of its children's);
* ``roof``: no attained rate above its roof unless the report says why (``roof_note``);
* ``verdict``: a bandwidth-bound verdict does not stand beside evidence placing the step on
  the compute side of the ridge point, nor a compute-bound one beside evidence placing it
  on the memory side (unless the evidence says why they differ);
* ``step_time``: every step time a sentence quotes is one of the report's named bases
  (profiled, light pass, unprofiled);
* ``light_apart``: the light pass's steps and the unprofiled ones, timed apart, agree
  within the light pass's cost from its interleaved rounds, or a note says why not;
* ``memory_floor``: the memory floor is at least the parameters and optimizer state;
* ``memory_peak``: the peak allocated is at least the per-category total at its peak
  (the same memory counted two ways; the per-category timeline comes from a step of its
  own, so within :data:`PEAK_TOLERANCE`, and :data:`PEAK_SLACK_BYTES` on a tiny model);
* ``absent``: a figure that does not apply is absent: no class row without time or FLOPs,
  no ``None``/"unknown until" placeholders in sentences, no note that a figure is
  unavailable beside that figure.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

WARNING = "report invariant broken: "  # a broken invariant's warning starts so
SHARE_TOLERANCE_PCT = 0.5  # rounding of shares computed from sums of floats
PEAK_TOLERANCE = 0.10  # the category step's peak against the trace's, another step
# ... and at least this much: a tiny CPU model's step (140 KiB) differs from another step by
# a temporary buffer or two (19 KiB seen), which no relative tolerance of a GPU run's GiB
# should admit
PEAK_SLACK_BYTES = 64 * 2**10
# a step time quoted in a sentence: "345.65 ms step", "the profiled step took 23.6 ms",
# "unprofiled 11.6 ms", "profiled 24.05 ms"
_STEP_MS = re.compile(
    r"(?P<a>\d+(?:\.\d+)?) ms step\b|step (?:took|of|time) (?P<b>\d+(?:\.\d+)?) ms"
    r"|\bprofiled (?:step )?\(?(?P<c>\d+(?:\.\d+)?) ms|(?P<d>\d+(?:\.\d+)?) ms unprofiled"
)
_PLACEHOLDERS = ("(None)", "unknown until", "nan %", "none (None")


@dataclass(frozen=True)
class Violation:
    """One broken invariant: its name (module doc) and what breaks it."""

    name: str
    detail: str

    def __str__(self) -> str:
        return f"{self.name}: {self.detail}"


def violations(
    doc: Mapping[str, Any],
    kernels: pd.DataFrame | None = None,
    ops: pd.DataFrame | None = None,
) -> list[Violation]:
    """Every invariant ``doc`` (a ``summary.json`` document) breaks; ``kernels`` (the
    classified kernel rows: ``kind``, ``op_id``, ``flops``) and ``ops`` (``op_id``,
    ``parent``) add the FLOP-count check of a CPU run."""
    out = [*shares(doc), *roof(doc), *verdict(doc), *step_times(doc), *memory(doc)]
    out += light_apart(doc) + absent(doc)
    if kernels is not None and ops is not None:
        out += flops_once(kernels, ops)
    return out


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and math.isfinite(float(x)) else None


def _leaves(x: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(x, Mapping):
        for k, v in x.items():
            yield from _leaves(v, f"{path}.{k}" if path else str(k))
    elif isinstance(x, list):
        for i, v in enumerate(x):
            yield from _leaves(v, f"{path}[{i}]")
    else:
        yield path, x


def shares(doc: Mapping[str, Any]) -> list[Violation]:
    """``share``: shares within 0–100 %; a partition's shares sum to at most 100 %."""
    out = []
    for path, v in _leaves(doc):
        x = _num(v)
        if x is None or "share" not in path or "pct" not in path:
            continue
        if x < -SHARE_TOLERANCE_PCT or x > 100 + SHARE_TOLERANCE_PCT:
            out.append(Violation("share", f"{path} = {x:.4g} %"))
    for key in ("time_share_pct", "bound_time_share_pct", "flop_share_pct"):
        part = doc.get(key)
        if isinstance(part, Mapping):
            total = sum(_num(v) or 0.0 for v in part.values())
            if total > 100 + SHARE_TOLERANCE_PCT:
                out.append(Violation("share", f"{key} sums to {total:.4g} %"))
    return out


def roof(doc: Mapping[str, Any]) -> list[Violation]:
    """``roof``: a rate above its roof is said (``roof_note``)."""
    ss = doc.get("step_summary") or {}
    over = [
        f"{k} = {x:.4g} %"
        for k in ("bandwidth_utilisation_pct", "compute_utilisation_pct")
        if (x := _num(ss.get(k))) is not None and x > 100 + SHARE_TOLERANCE_PCT
    ]
    if over and not doc.get("roof_note"):
        return [Violation("roof", f"{', '.join(over)} without a roof note")]
    return []


def verdict(doc: Mapping[str, Any]) -> list[Violation]:
    """``verdict``: the verdict agrees with the roofline side its evidence states."""
    ss = doc.get("step_summary") or {}
    word = str(ss.get("verdict") or "")
    text = " ".join(str(e) for e in ss.get("evidence") or [])
    if "differ" in text:  # the evidence says why verdict and roofline side differ
        return []
    compute_side = "above the ridge point" in text or "(compute side)" in text
    memory_side = "below the ridge point" in text or "(memory side)" in text
    if word.startswith("memory") and compute_side:
        return [Violation("verdict", f"{word!r} beside evidence on the compute side")]
    if word.startswith("compute") and memory_side:
        return [Violation("verdict", f"{word!r} beside evidence on the memory side")]
    return []


def _bases(doc: Mapping[str, Any]) -> list[float]:
    """The step times a report may quote: every named basis (profiled, light, unprofiled)
    and the per-step times."""
    tl = doc.get("timeline") or {}
    vals = [doc.get("step_time_ms"), doc.get("measured_step_time_ms")]
    vals += [v for k, v in tl.items() if k.endswith("step_time_ms")]
    vals.append((doc.get("step_summary") or {}).get("step_time_ms"))
    vals += list((doc.get("step_time_ms_per_step") or {}).values())
    gen = doc.get("generate") or {}
    vals += [v for _, v in _leaves(gen) if _num(v) is not None]
    return [x for v in vals if (x := _num(v)) is not None]


def _matches(quoted: str, bases: list[float]) -> bool:
    x = float(quoted)
    decimals = len(quoted.split(".")[1]) if "." in quoted else 0
    tol = 0.5 * 10.0**-decimals + 1e-9
    return any(abs(x - b) <= max(tol, 0.005 * abs(b)) for b in bases)


def _sentences(doc: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    ss = doc.get("step_summary") or {}
    for key, seq in (("evidence", ss.get("evidence")), ("notes", doc.get("notes"))):
        for s in seq or []:
            yield key, str(s)
    for s in doc.get("warnings") or []:
        yield "warnings", str(s)
    if ss.get("next_lever"):
        yield "next_lever", str(ss["next_lever"])


def step_times(doc: Mapping[str, Any]) -> list[Violation]:
    """``step_time``: a quoted step time is one of the named bases."""
    bases = _bases(doc)
    out = []
    for where, s in _sentences(doc):
        for m in _STEP_MS.finditer(s):
            if not _matches(next(g for g in m.groups() if g), bases):
                out.append(Violation("step_time", f"{where}: {m.group(0)!r} is no basis"))
    return out


def light_apart(doc: Mapping[str, Any]) -> list[Violation]:
    """``light_apart``: a light pass whose steps and the unprofiled ones disagree beyond
    its stated cost (``timeline.apart_agrees`` false) has the note that says both."""
    tl = doc.get("timeline") or {}
    if tl.get("apart_agrees") is not False:
        return []
    if any("timed apart" in str(n) for n in doc.get("notes") or []):
        return []
    light, unprof = tl.get("light_step_time_ms"), tl.get("unprofiled_step_time_ms")
    return [Violation("light_apart", f"light pass {light} ms against unprofiled {unprof} ms, "
                      "outside its stated cost, with no note")]  # fmt: skip


def memory(doc: Mapping[str, Any]) -> list[Violation]:
    """``memory_floor`` and ``memory_peak``."""
    mem = doc.get("memory") or {}
    cat = mem.get("peak_by_model_category") or {}
    out = []
    static = sum(_num(cat.get(k)) or 0.0 for k in ("parameters", "optimizer_state"))
    floor = _num(mem.get("floor_allocated_bytes"))
    if floor is not None and static > 0 and floor < 0.99 * static:
        out.append(
            Violation(
                "memory_floor",
                f"floor {floor:.0f} B < parameters + optimizer state {static:.0f} B",
            )
        )
    peak = _num(mem.get("peak_allocated_bytes"))
    total = sum(_num(v) or 0.0 for v in cat.values())
    if (
        peak is not None
        and total > 0
        and peak < total - max(PEAK_TOLERANCE * total, PEAK_SLACK_BYTES)
    ):
        out.append(Violation("memory_peak", f"peak {peak:.0f} B < category total {total:.0f} B"))
    return out


def absent(doc: Mapping[str, Any]) -> list[Violation]:
    """``absent``: no empty class row, no placeholder, no 'unavailable' beside the figure."""
    out = []
    ms = doc.get("ms_per_step") or {}
    flops = doc.get("flops_per_step") or {}
    for c, v in ms.items():
        if not (_num(v) or 0.0) > 0 and not (_num(flops.get(c)) or 0.0) > 0:
            out.append(Violation("absent", f"class {c!r} listed with no time and no FLOPs"))
    for path, v in _leaves(doc):
        if isinstance(v, str) and any(p in v for p in _PLACEHOLDERS):
            out.append(Violation("absent", f"{path}: placeholder in {v[:80]!r}"))
    traffic = (doc.get("step_summary") or {}).get("analytic_traffic")
    if traffic and any("traffic estimate unavailable" in str(n) for n in doc.get("notes") or []):
        out.append(Violation("absent", "a traffic estimate beside a note that it is unavailable"))
    return out


def flops_once(kernels: pd.DataFrame, ops: pd.DataFrame) -> list[Violation]:
    """``flops_once``: on a CPU view, no operator row with FLOPs below another with FLOPs."""
    if not len(kernels) or "op_id" not in kernels or not len(ops):
        return []
    cpu = kernels["kind"].astype(str).to_numpy() == "cpu_op" if "kind" in kernels else None
    if cpu is None or not cpu.any():
        return []
    k = kernels[cpu]
    carries = np.nan_to_num(pd.to_numeric(k["flops"], errors="coerce").to_numpy(float)) > 0
    ids = pd.Index(ops["op_id"].to_numpy(dtype=np.int64))
    ppos = ids.get_indexer(pd.Index(ops["parent"].to_numpy(dtype=np.int64))).astype(np.int64)
    pos = ids.get_indexer(pd.Index(k["op_id"].to_numpy(dtype=np.int64))).astype(np.int64)
    with_flops = np.zeros(len(ops), dtype=bool)
    with_flops[pos[carries & (pos >= 0)]] = True
    # climb from every FLOP-carrying operator: an ancestor with FLOPs counts them twice
    cur = ppos[pos[carries & (pos >= 0)]]
    seen = np.zeros(len(ops), dtype=bool)
    twice: list[int] = []
    while len(cur):
        cur = np.unique(cur[cur >= 0])
        cur = cur[~seen[cur]]
        seen[cur] = True
        twice += cur[with_flops[cur]].tolist()
        cur = ppos[cur]
    if not twice:
        return []
    names = ops["name"].to_numpy()[twice]
    top = ", ".join(sorted({str(n) for n in names})[:5])
    return [Violation("flops_once", f"{len(twice)} operators carry their children's FLOPs ({top})")]
