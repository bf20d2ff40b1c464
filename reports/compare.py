"""``tracekit compare A B``: the comparison in the terminal, ``compare.html``, plots,
``compare.json`` and TensorBoard text/images of a :class:`~tracekit.compare.Comparison` it
is handed (analysis: :mod:`tracekit.compare`; the command that analyses both runs:
:mod:`tracekit.commands.compare`).

Every string from the traces goes through the same escaping as the report: rich ``Text``
in the terminal, :func:`html.esc` in the page, :func:`markdown.esc` in TensorBoard text.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

import tracekit.reports.draw as draw
import tracekit.reports.fmt as fmt
import tracekit.reports.html as html
import tracekit.reports.markdown as markdown
import tracekit.reports.plots as plots
import tracekit.reports.terminal as term
from tracekit.compare import Comparison
from tracekit.io import atomic_dir, atomic_write_json, atomic_write_text

# ----------------------------------------------------------------------------- values


def value(v: Any, unit: str) -> str:
    """A headline figure in its unit."""
    if unit == "ms":
        return fmt.ms(v)
    if unit == "%":
        return fmt.pct(v)
    if unit == "B":
        return fmt.nbytes(v)
    if unit == "FLOP":
        return fmt.si(v, "FLOP")
    if unit == "tokens/s":
        return fmt.count(round(float(v))) if fmt._ok(v) else fmt.DASH
    return fmt.num(v, 0)


def delta(v: Any, unit: str) -> str:
    """A signed difference (B - A); shares in percentage points."""
    if not fmt._ok(v):
        return fmt.DASH
    sign = "+" if float(v) > 0 else ("-" if float(v) < 0 else "±")
    text = f"{float(v):+.1f} pp" if unit == "%" else sign + value(abs(float(v)), unit)
    return text


def ratio(v: Any) -> str:
    return f"{float(v):.3f}×" if fmt._ok(v) else fmt.DASH


def sdelta_ms(v: Any) -> str:
    return f"{float(v):+.3f}" if fmt._ok(v) else fmt.DASH


def op_label(name: Any, dims: Any) -> str:
    sig = fmt.shapes(dims)
    return f"{name} {sig}" if sig else str(name)


# --------------------------------------------------------------------------- terminal


def header(c: Comparison) -> RenderableType:
    g = Table.grid(padding=(0, 1))
    g.add_column(style="bold", no_wrap=True)
    g.add_column(overflow="fold")
    for tag, lab, sm in (("A", c.label_a, c.a), ("B", c.label_b, c.b)):
        h = sm.header
        g.add_row(tag, term._t(f"{lab} · {h.device or sm.roofs.device or 'unknown device'}"))
    if c.config_diff:
        txt = "; ".join(f"{d['key']}: {d['a']} → {d['b']}" for d in c.config_diff)
        g.add_row("differs", term._t(txt))
    else:
        g.add_row("differs", term._t("no manifest config key (or no manifests)"))
    parts: list[RenderableType] = [Text("tracekit compare: B against A", style="bold"), g]
    parts += [Text(f"note: {n}", style="yellow") for n in c.notes]
    return Group(*parts)


# the per-step figures of GPU activity: absent from a comparison of two CPU runs
GPU_METRICS = frozenset(("gpu_busy_ms", "gpu_time_ms", "gpu_idle_pct", "gpu_idle_unprofiled_pct",
                         "kernels_per_step", "flops_per_step", "memory_bound_pct",
                         "compute_bound_pct", "peak_reserved_bytes"))  # fmt: skip


# a CPU pair (its CPU view): what does not apply, and the words of what does
NOT_ON_CPU = frozenset(("gpu_idle_pct", "gpu_idle_unprofiled_pct", "kernels_per_step",
                        "peak_reserved_bytes"))  # fmt: skip
CPU_LABELS = {"gpu_busy_ms": "operators busy (union)", "gpu_time_ms": "operator time (summed)"}


def where(c: Comparison) -> str:
    """Whose time the class table sums: the GPU's, or a CPU pair's operators'."""
    return "CPU" if c.cpu else "GPU"


def metrics(c: Comparison) -> RenderableType:
    t = term._table(
        "Per analysed step",
        [("", "left"), ("A", "right"), ("B", "right"), ("B - A", "right"), ("B/A", "right")],
    )
    labels = {
        "step_time_ms": "step time (trace)",
        "measured_step_time_ms": "step time (unprofiled)",
        "tokens_per_s": "tokens/s (trace)",
        "measured_tokens_per_s": "tokens/s (unprofiled)",
        "gpu_busy_ms": "GPU busy",
        "gpu_time_ms": "GPU activity (summed)",
        "gpu_idle_pct": "GPU idle (trace)",
        "gpu_idle_unprofiled_pct": "GPU idle (unprofiled)",
        "kernels_per_step": "kernels",
        "flops_per_step": "FLOPs",
        "memory_bound_pct": "memory-bound time",
        "compute_bound_pct": "compute-bound time",
        "peak_allocated_bytes": "peak allocated",
        "peak_reserved_bytes": "peak reserved",
        "avg_allocated_bytes": "avg allocated",
    }
    for r in c.metrics.to_dict("records"):
        if r["a"] is None and r["b"] is None:
            continue
        if not c.per_class and r["metric"] in GPU_METRICS:
            continue  # no activity to compare: no GPU figure, absent rather than 0
        if c.cpu and r["metric"] in NOT_ON_CPU:
            continue  # a CPU pair: no kernels, no GPU idle, no caching allocator
        u = r["unit"]
        label = labels.get(r["metric"], r["metric"])
        t.add_row(
            term._t(CPU_LABELS.get(r["metric"], label) if c.cpu else label),
            value(r["a"], u),
            value(r["b"], u),
            delta(r["delta"], u),
            ratio(r["ratio"]),
        )
    return t


def classes(c: Comparison) -> RenderableType:
    t = term._table(
        f"{where(c)} time per class (ms per step)",
        [
            ("class", "left"),
            ("A", "right"),
            ("B", "right"),
            ("B - A", "right"),
            ("share A", "right"),
            ("share B", "right"),
            ("Δ pp", "right"),
        ],
    )
    for r in c.classes.to_dict("records"):
        t.add_row(
            term._t(r["class"]),
            fmt.num(r["a_ms"], 3),
            fmt.num(r["b_ms"], 3),
            sdelta_ms(r["delta_ms"]),
            fmt.pct(r["a_share_pct"]),
            fmt.pct(r["b_share_pct"]),
            f"{r['delta_pp']:+.1f}",
        )
    return t


def _op_table(title: str, df: pd.DataFrame) -> Table:
    t = term._table(
        title,
        [
            ("operator", "name"),
            ("A ms", "right"),
            ("B ms", "right"),
            ("Δ ms", "right"),
            ("Δ calls", "right"),
        ],
    )
    for r in df.to_dict("records"):
        t.add_row(
            term._name(op_label(r["name"], r["input_dims"])),
            fmt.num(r["a_ms"], 3),
            fmt.num(r["b_ms"], 3),
            sdelta_ms(r["delta_ms"]),
            f"{r['delta_calls']:+.0f}",
        )
    return t


def operators(c: Comparison, n: int = 8) -> RenderableType:
    d = c.doc["operators"]
    only = c.operators[c.operators["status"] != "both"]
    oa = float(only.loc[only["status"] == "only A", "a_ms"].sum())
    ob = float(only.loc[only["status"] == "only B", "b_ms"].sum())
    line = Text(
        f"Operators (name + input shapes + module): {d['matched']} matched, "
        f"{d['only_a']} only in A ({oa:.3f} ms/step), {d['only_b']} only in B "
        f"({ob:.3f} ms/step)"
    )
    parts: list[RenderableType] = [line]
    if len(c.regressions):
        parts.append(
            _op_table("Matched operators: top regressions (B slower)", c.regressions.head(n))
        )
    if len(c.improvements):
        parts.append(
            _op_table("Matched operators: top improvements (B faster)", c.improvements.head(n))
        )
    return Group(*parts)


def kernels(c: Comparison) -> RenderableType:
    k = c.doc["kernels"]
    return Text(
        f"Kernels by name: {k['distinct_a']} in A, {k['distinct_b']} in B; "
        f"{k['only_a']} only in A ({k['only_a_ms_per_step']:.3f} ms/step), "
        f"{k['only_b']} only in B ({k['only_b_ms_per_step']:.3f} ms/step)"
    )


def fused(c: Comparison, n: int = 10) -> RenderableType:
    if c.fused.empty:
        return Text("No Triton (torch.compile) fused kernels in either run.", style="dim")
    parts: list[RenderableType] = []
    for side in ("A", "B"):
        g = c.fused[c.fused["side"] == side]
        if g.empty:
            continue
        other = "B" if side == "A" else "A"
        t = term._table(
            f"Triton kernels of {side} by the ops they fused (ms per step)",
            [
                ("fused ops", "name"),
                ("class", "short"),
                ("calls", "right"),
                (side, "right"),
                (f"{other} eager", "right"),
            ],
        )
        for r in g.head(n).to_dict("records"):
            t.add_row(
                term._name(r["fused_ops"]),
                term._name(r["class"]),
                fmt.num(r["calls"], 0),
                fmt.num(r["ms"], 3),
                fmt.num(r["other_ms"], 3),
            )
        tot = c.fused_totals[side]
        parts += [
            t,
            Text(
                f"all {tot['kernels']:.0f} Triton kernels of {side}: {tot['calls']:.0f} calls, "
                f"{tot['ms']:.3f} ms/step; {other}'s unfused kernels of those ops: "
                f"{tot['other_calls']:.0f} calls, {tot['other_ms']:.3f} ms/step",
            ),
            Text(
                f"{other} eager: kernels of {other} launched by aten::<op> for any fused op "
                "(groups overlap; the total line does not)",
                style="dim",
            ),
        ]
    return Group(*parts)


def render(c: Comparison, console: Console, outputs: Iterable[str] = ()) -> None:
    """Print every section to ``console``."""
    per_class = (classes(c), operators(c), kernels(c), fused(c)) if c.per_class else ()
    for part in (header(c), metrics(c), *per_class):
        console.print(part)
        console.print()
    for o in outputs:
        console.print(Text(o, style="green"))


# ------------------------------------------------------------------------------ plots


def class_bars(c: Comparison) -> bytes:
    """GPU ms per step per class, A and B side by side."""
    cl = c.classes
    fig = Figure(figsize=(9, 0.5 * max(4, len(cl)) + 1.2))
    fig.subplots_adjust(left=0.15, right=0.97, top=0.9, bottom=0.12)
    if cl.empty:
        return draw.message(fig, f"{where(c)} time per class", "no activity in either run")
    ax = fig.add_subplot()
    y = np.arange(len(cl))
    h = 0.4
    colors = [plots._color(str(x)) for x in cl["class"]]
    ax.barh(y - h / 2, cl["a_ms"], height=h, color=colors, label=draw.plain(f"A: {c.label_a}"))
    ax.barh(y + h / 2, cl["b_ms"], height=h, color=colors, alpha=0.45, hatch="//",
            edgecolor="0.3", label=draw.plain(f"B: {c.label_b}"))  # fmt: skip
    for yi, (a, b, d) in enumerate(zip(cl["a_ms"], cl["b_ms"], cl["delta_ms"], strict=True)):
        ax.text(max(a, b), yi, f" {d:+.3f} ms", va="center", fontsize=8)
    ax.set_yticks(y, [draw.plain(str(x)) for x in cl["class"]])
    ax.invert_yaxis()
    ax.set_xlabel(f"{where(c)} time per step [ms]")
    ax.set_title(f"{where(c)} time per class: A (solid) vs B (hatched)")
    ax.legend(loc="lower right", fontsize=8)
    ax.grid(axis="x", alpha=0.3)
    return draw.png(fig)


def roofline_pair(c: Comparison) -> bytes:
    """Both runs' operators on one roofline: A circles, B triangles; B's roofs dashed when
    B ran on another device."""
    fig = Figure(figsize=(9, 6))
    fig.subplots_adjust(left=0.1, right=0.97, top=0.93, bottom=0.09)
    pa, pb = plots.roofline_points(c.a.operators), plots.roofline_points(c.b.operators)
    if pa.empty and pb.empty and not (c.a.roofs.known or c.b.roofs.known):
        return draw.message(fig, "Roofline", "no operator of either run can be placed")
    ax = fig.add_subplot()
    xs_all = [*pa["intensity"].tolist(), *pb["intensity"].tolist()]
    lo = min([0.01, *xs_all]) / 2
    hi = max([1e4, *xs_all]) * 2
    xs = np.logspace(np.log10(lo), np.log10(hi), 256)
    plots.roof_lines(ax, c.a.roofs, xs, prefix="" if c.same_device else "A ")
    if not c.same_device:
        plots.roof_lines(ax, c.b.roofs, xs, ls="--", prefix="B ")
    tmax = max([1.0, *pa["gpu_time_ns"].tolist(), *pb["gpu_time_ns"].tolist()])
    for pts, marker, lab in ((pa, "o", c.label_a), (pb, "^", c.label_b)):
        if pts.empty:
            continue
        t = pts["gpu_time_ns"].to_numpy(dtype=float)
        ax.scatter(
            pts["intensity"], pts["attained_flops"], s=20 + 500 * np.sqrt(t / tmax),
            c=[plots._color(str(x)) for x in pts["class"]], marker=marker, alpha=0.55,
            edgecolors="0.2", linewidths=0.5,
        )  # fmt: skip
        ax.scatter([], [], marker=marker, color="0.5", label=draw.plain(lab))
    draw.log_axes(ax)
    ax.set_xlim(lo, hi)
    ax.set_xlabel("arithmetic intensity [FLOP/byte]")
    ax.set_ylabel("attained [FLOP/s]")
    ax.set_title("Roofline: A (circles) vs B (triangles), area ∝ GPU time")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", ncols=2)
    return draw.png(fig)


def all_plots(c: Comparison) -> dict[str, bytes]:
    return {"class_time": class_bars(c), "roofline": roofline_pair(c)}


# ------------------------------------------------------------------------------- HTML


def _metrics_frame(c: Comparison) -> pd.DataFrame:
    rows = [
        {"metric": r["metric"], "a": value(r["a"], r["unit"]), "b": value(r["b"], r["unit"]),
         "delta": delta(r["delta"], r["unit"]), "ratio": ratio(r["ratio"])}
        for r in c.metrics.to_dict("records")
    ]  # fmt: skip
    frame: pd.DataFrame = pd.DataFrame(rows)
    return frame


def _s(v: Any) -> str:
    return "" if v is None else str(v)


OP_HTML: list[html.Col] = [
    ("operator", "name", _s), ("input shapes", "shape", fmt.shapes), ("module", "l", _s),
    ("class", "l", _s), ("match", "l", _s), ("A calls", "", lambda v: fmt.num(v, 0)),
    ("B calls", "", lambda v: fmt.num(v, 0)), ("A ms", "", lambda v: fmt.num(v, 3)),
    ("B ms", "", lambda v: fmt.num(v, 3)), ("Δ ms", "", sdelta_ms),
]  # fmt: skip
OP_FIELDS = ["name", "input_dims", "module", "class", "match", "a_calls", "b_calls", "a_ms",
             "b_ms", "delta_ms"]  # fmt: skip


def render_html(c: Comparison, pngs: Mapping[str, bytes], n: int = 25) -> str:
    """The whole self-contained page."""
    e = html.esc
    sides = {
        f"{tag}": f"{lab} · {sm.header.device or sm.roofs.device or 'unknown'} · {sm.header.source}"
        for tag, lab, sm in (("A", c.label_a, c.a), ("B", c.label_b, c.b))
    }
    sides["config differs"] = (
        "; ".join(f"{d['key']}: {d['a']} → {d['b']}" for d in c.config_diff) or "nothing"
    )
    mcols: list[html.Col] = [("per step", "l", _s), ("A", "", _s), ("B", "", _s),
                             ("B - A", "", _s), ("B/A", "", _s)]  # fmt: skip
    ccols: list[html.Col] = [
        ("class", "l", _s), ("A ms", "", lambda v: fmt.num(v, 3)),
        ("B ms", "", lambda v: fmt.num(v, 3)), ("Δ ms", "", sdelta_ms),
        ("A share", "", fmt.pct), ("B share", "", fmt.pct),
        ("Δ pp", "", lambda v: fmt.num(v, 1)), ("A FLOPs", "", lambda v: fmt.si(v, "FLOP")),
        ("B FLOPs", "", lambda v: fmt.si(v, "FLOP")), ("A mem-bound", "", fmt.pct),
        ("B mem-bound", "", fmt.pct),
    ]  # fmt: skip
    cfields = ["class", "a_ms", "b_ms", "delta_ms", "a_share_pct", "b_share_pct", "delta_pp",
               "a_flops", "b_flops", "a_memory_bound_pct", "b_memory_bound_pct"]  # fmt: skip
    only = c.kernels[c.kernels["status"] != "both"]
    kcols: list[html.Col] = [("kernel", "name", _s), ("status", "l", _s), ("class", "l", _s),
                             ("A ms", "", lambda v: fmt.num(v, 3)),
                             ("B ms", "", lambda v: fmt.num(v, 3))]  # fmt: skip
    fcols: list[html.Col] = [("run", "l", _s), ("fused ops", "name", _s), ("class", "l", _s),
                             ("kernels", "", fmt.count), ("calls", "", lambda v: fmt.num(v, 0)),
                             ("ms", "", lambda v: fmt.num(v, 3)),
                             ("other run, eager ms", "", lambda v: fmt.num(v, 3))]  # fmt: skip
    body = [
        f"<h1>tracekit compare: {e(c.label_b)} against {e(c.label_a)}</h1>",
        html._kv(sides),
        *[f'<div class="warn">{e(x)}</div>' for x in c.notes],
        "<h2>Per analysed step</h2>",
        html._table(_metrics_frame(c), mcols, ["metric", "a", "b", "delta", "ratio"]),
        f"<h2>{where(c)} time per class</h2>",
        html._table(c.classes, ccols, cfields),
        html._img(pngs["class_time"], f"{where(c)} time per class, A vs B")
        if "class_time" in pngs
        else "",
        "<h2>Roofline</h2>",
        html._img(pngs["roofline"], "both rooflines") if "roofline" in pngs else "",
        "<h2>Matched operators: top regressions</h2>",
        html._table(c.regressions, OP_HTML, OP_FIELDS),
        "<h2>Matched operators: top improvements</h2>",
        html._table(c.improvements, OP_HTML, OP_FIELDS),
        f"<h2>Operators by |Δ ms| (top {n})</h2>",
        html._table(c.operators.head(n), OP_HTML, OP_FIELDS),
        f"<h2>Kernels only in one run (top {n} by time)</h2>",
        html._table(only.head(n), kcols, ["name", "status", "class", "a_ms", "b_ms"]),
        "<h2>Triton kernels by the ops they fused</h2>",
        html._table(
            c.fused.rename(columns={"side": "run"}),
            fcols,
            ["run", "fused_ops", "class", "kernels", "calls", "ms", "other_ms"],
        )
        if len(c.fused)
        else "<p class='muted'>No Triton fused kernels.</p>",
        "<p class='note'>Generated by tracekit compare. Numbers: compare.json.</p>",
    ]
    return (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        f"<meta http-equiv='Content-Security-Policy' content=\"{html.CSP}\">"
        f"<title>tracekit compare: {e(c.label_b)} vs {e(c.label_a)}</title>"
        f"<style>{html.CSS}</style></head><body><main>\n"
        + "\n".join(body)
        + "\n</main></body></html>\n"
    )


# ---------------------------------------------------------------------- TensorBoard


def markdown_tables(c: Comparison) -> dict[str, str]:
    md = markdown
    return {
        "metrics": md.table(_metrics_frame(c), [("per step", "metric", _s), ("A", "a", _s),
                            ("B", "b", _s), ("B - A", "delta", _s), ("B/A", "ratio", _s)]),
        "classes": md.table(c.classes, [("class", "class", _s), ("A ms", "a_ms", fmt.num),
                            ("B ms", "b_ms", fmt.num), ("Δ ms", "delta_ms", sdelta_ms),
                            ("Δ pp", "delta_pp", fmt.num)]),
        "operators": md.table(c.operators.head(25), [("operator", "name", _s),
                              ("shapes", "input_dims", _s), ("status", "status", _s),
                              ("A ms", "a_ms", fmt.num), ("B ms", "b_ms", fmt.num),
                              ("Δ ms", "delta_ms", sdelta_ms)]),
    }  # fmt: skip


def write_tensorboard(c: Comparison, pngs: Mapping[str, bytes], run_dir: Path) -> Path:
    import tracekit.reports.tensorboard as tb

    tables, t = markdown_tables(c), time.time()

    def fill(w: Any) -> None:
        for name, png in pngs.items():
            w.image(f"compare/{name}", png, 0, t)
        for name, text in tables.items():
            w.text(f"compare/{name}", text, 0, t)

    return tb.write_event_file(run_dir, fill)


# ------------------------------------------------------------------------------ files


@dataclass
class CompareResult:
    comparison: Comparison
    out: Path
    files: list[Path] = field(default_factory=list)

    def describe(self) -> list[str]:
        return [
            f"wrote {self.out}/: " + ", ".join(str(p.relative_to(self.out)) for p in self.files)
        ]


def write(c: Comparison, dest: Path) -> CompareResult:
    """Every output of the comparison ``c`` into ``dest``, atomically: ``compare.json``,
    ``compare.html``, the plots, the Parquet tables and TensorBoard text and images."""
    pngs = all_plots(c)
    with atomic_dir(dest) as tmp:
        atomic_write_json(tmp / "compare.json", c.doc)
        atomic_write_text(tmp / "compare.html", render_html(c, pngs))
        (tmp / "plots").mkdir()
        for name, png in pngs.items():
            (tmp / "plots" / f"{name}.png").write_bytes(png)
        for name, df in (("classes", c.classes), ("operators", c.operators),
                         ("kernels", c.kernels), ("fused", c.fused)):  # fmt: skip
            df.reset_index(drop=True).to_parquet(tmp / f"{name}.parquet", index=False)
        write_tensorboard(c, pngs, tmp / "tensorboard")
        names = sorted(p.relative_to(tmp) for p in tmp.rglob("*") if p.is_file())
    return CompareResult(c, dest, [dest / n for n in names])


def json_text(result: CompareResult) -> str:
    return json.dumps(result.comparison.doc, indent=2) + "\n"
