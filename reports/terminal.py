"""The report in the terminal: rich tables that fit an 80-column terminal.

Every string from the trace is passed to rich as a :class:`rich.text.Text`, never as a
``str`` (which rich would parse as console markup: a kernel named ``[bold]x`` would
change the styling, or raise on an unbalanced ``[/]``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

import tracekit.reports.fmt as fmt
import tracekit.reports.generate as GR
import tracekit.reports.parts as parts
import tracekit.reports.ranks as ranks_view
import tracekit.reports.ranksterm as ranksterm
import tracekit.reports.verdict as VR
import tracekit.summary.critical_path.anchor as CPA
from tracekit.summary import Summary

BAR = 14  # width of the time-share bars
# the label column of the first screen's grids (header, then verdict and step summary):
# one width, so that their texts start in one column ("throughput" is the longest label)
LABEL = len("throughput")


def _t(v: Any, style: str = "") -> Text:
    return Text(str(v), style=style)


def _name(v: Any) -> Text:
    """A name cell: one line, cut with an ellipsis when the column is narrowed."""
    return Text(str(v), no_wrap=True, overflow="ellipsis")


def _si(v: Any) -> str:
    """Compact SI for narrow columns: 6.55e9 -> '6.55G'."""
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return fmt.DASH
    f = float(v)
    for p, e in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(f) >= e:
            return f"{f / e:.3g}{p}"
    return f"{f:.3g}"


def _bar(p: Any) -> Text:
    if p is None or not math.isfinite(float(p)):
        return Text("")
    n = float(p) / 100.0 * BAR
    full = int(n)
    half = "▌" if n - full >= 0.5 else ""
    return Text("█" * full + half, style="cyan")


_table = parts.rich_table


def _labelled() -> Table:
    """A grid of (label, text) rows whose texts start at column ``LABEL`` + 1."""
    g = Table.grid(padding=(0, 1))
    g.add_column(style="bold", no_wrap=True, min_width=LABEL)
    g.add_column(overflow="fold")
    return g


def header(sm: Summary) -> RenderableType:
    h = sm.header
    g = _labelled()
    dev = [h.device or sm.roofs.device or "unknown device"]
    if h.cuda_runtime:
        dev.append(f"CUDA {h.cuda_runtime}")
    dev.append(f"PyTorch {h.torch_version}" if h.torch_version else "PyTorch version unknown")
    g.add_row("device", _t(" · ".join(dev)))
    if h.config:
        g.add_row("config", _t(" ".join(f"{k}={v}" for k, v in h.config.items())))
    steps = ", ".join(str(s) for s in h.steps[:8]) + (" …" if len(h.steps) > 8 else "")
    g.add_row("steps", _t(f"{len(h.steps)} analysed ({steps})"))
    g.add_row("step time", _t(VR.step_time_text(sm)))
    if sm.header.residual:
        g.add_row("residual", _t(sm.header.residual))
    if h.tokens_per_s or h.measured_tokens_per_s:
        tp = []
        if h.tokens_per_s:
            tp.append(f"{h.tokens_per_s:,.0f} tokens/s (trace)")
        if h.measured_tokens_per_s:
            tp.append(f"{h.measured_tokens_per_s:,.0f} tokens/s (measured)")
        g.add_row("throughput", _t(", ".join(tp)))
    opts = " ".join(f"{k}{'✓' if v else '✗'}" for k, v in h.options.items())
    g.add_row("profiler", _t(opts))
    return Group(Text(f"tracekit report: {h.title}", style="bold"), g)


def missing(sm: Summary) -> RenderableType:
    return Group(*(Text(f"  missing: {m}", style="yellow") for m in sm.header.missing))


EVIDENCE_SHOWN = 4  # verdict evidence lines on the terminal's first screen


def verdict(sm: Summary) -> RenderableType:
    """The verdict with its evidence and lever, then the step summary's figures (one grid,
    so that wrapped lines stay in their column)."""
    v = sm.verdict
    g = _labelled()
    g.add_row("verdict", Text(VR.verdict_line(sm), style="bold magenta"))
    if v is not None:
        for e in v.evidence[:EVIDENCE_SHOWN]:
            g.add_row("", _t(f"· {e}"))
        if len(v.evidence) > EVIDENCE_SHOWN:  # the first screen stays a screen
            more = len(v.evidence) - EVIDENCE_SHOWN
            where = "report.html and summary.json (step_summary.evidence)"
            g.add_row("", _t(f"· {more} more in {where}"))
        if v.lever:
            g.add_row("", Text.assemble(("next lever: ", "bold"), v.lever))
    for label, text in VR.figures(sm):
        g.add_row(label, _t(text))
    # which pass the idle and launch evidence comes from: the last line of the first
    # screen's grid (summary.json and the HTML say why in full)
    tl = VR.timeline_text(sm, brief=True)
    if tl:
        g.add_row("timeline", _t(tl))
    parts: list[RenderableType] = [g]
    ps = sm.step_summary.per_step
    if len(ps) > 1 and ps[["bandwidth_used", "flops_per_s"]].notna().any(axis=None):
        parts.append(per_step(sm))
    return Group(*parts)


def per_step(sm: Summary, n: int = 10) -> RenderableType:
    """Per analysed step (profiled step times): bandwidth, FLOP/s and their roofs."""
    t = _table(
        "Per step (profiled step time)",
        [
            ("step", "right"),
            ("ms", "right"),
            ("B/s", "right"),
            ("BW roof", "right"),
            ("FLOP/s", "right"),
            ("roof", "right"),
            ("FLOP/B", "right"),
        ],
    )
    for r in sm.step_summary.per_step.head(n).to_dict("records"):
        t.add_row(
            str(int(r["step"])),
            fmt.num(r["step_time_ms"]),
            _si(r["bandwidth_used"]),
            fmt.pct(r["bandwidth_utilisation_pct"]),
            _si(r["flops_per_s"]),
            fmt.pct(r["compute_utilisation_pct"]),
            fmt.intensity(r["arithmetic_intensity"]),
        )
    return t


def classes(sm: Summary) -> RenderableType:
    gpu_ms = float(sm.classes["ms_per_step"].sum()) if len(sm.classes) else 0.0
    w = fmt.words(sm)
    t = _table(
        f"{w.time} per class ({fmt.ms(gpu_ms)} of {w.activity} per step)",
        [
            ("class", "left"),
            ("ms/step", "right"),
            ("time", "right"),
            ("", "left"),
            ("FLOPs", "right"),
            ("mem-bound", "right"),
        ],
    )
    for r in sm.classes.itertuples(index=False):
        t.add_row(
            _t(r[0]),
            fmt.ms(r.ms_per_step),
            fmt.pct(r.time_share_pct),
            _bar(r.time_share_pct),
            fmt.pct(r.flop_share_pct),
            fmt.pct(r.memory_bound_pct, 0),
        )
    b = sm.bound
    line = " · ".join(f"{k} {fmt.pct(v)}" for k, v in b.items())
    union = ranks_view.union_note(sm)  # a multi-rank report's shares are of the union
    extra = [Text(union, style="dim")] if union else []
    return Group(t, Text(f"{w.time} by bound: {line}"), *extra)


SOURCES = {
    "measured": "msr",
    "modelled": "mod",
    "profiler": "prf",
    "none": fmt.DASH,
    "mixed": "mix",
}
BOUNDS = {"memory-bound": "mem", "compute-bound": "cmp"}


def operators(sm: Summary, n: int = 12) -> RenderableType:
    w = fmt.words(sm)
    t = _table(
        f"Roofline: top operators by {w.time}",
        [
            ("operator", "name"),
            ("class", "short"),
            ("ms/st", "right"),
            ("%", "right"),
            ("FLOP/B", "right"),
            ("FLOP/s", "right"),
            ("B/s", "right"),
            ("bnd", "left"),
            ("roof", "right"),
            ("src", "left"),
        ],
        gap=1,
    )
    for r in sm.operators.head(n).itertuples(index=False):
        sig = fmt.shapes(r.input_dims)
        t.add_row(
            _name(f"{r.name} {sig}" if sig else r.name),
            _name(r[1]),
            fmt.num(r.ms_per_step, 3),
            fmt.num(r.time_share_pct, 1),
            fmt.intensity(r.intensity),
            _si(r.attained_flops),
            _si(r.attained_bw),
            BOUNDS.get(str(r.bound), "?"),
            fmt.pct(r.roof_pct, 0).replace(" ", ""),
            SOURCES.get(str(r.source), str(r.source)[:3]),
        )
    legend = Text(
        f"ms/st: ms per step; %: of {w.time}; FLOP/B: arithmetic intensity; roof: "
        "attained share of the roof; src: FLOP count msr measured, mod modelled, "
        "prf profiler (with_flops)",
        style="dim",
    )
    if sm.roof_note:
        return Group(t, legend, Text(f"note: {sm.roof_note}", style="yellow"))
    return Group(t, legend)


def memory(sm: Summary) -> RenderableType:
    m = sm.memory
    if m is None:
        return Text(
            "Memory: no [memory] events in the trace and no measured figures.", style="yellow"
        )
    g = Table.grid(padding=(0, 1))
    g.add_column(style="bold", no_wrap=True)
    g.add_column(overflow="fold")
    g.add_row(
        "peak",
        _t(
            f"{fmt.nbytes(m.peak_allocated_bytes)} allocated, "
            f"{fmt.nbytes(m.peak_reserved_bytes)} reserved ({m.device})"
        ),
    )
    g.add_row(
        "average",
        _t(
            f"{fmt.nbytes(m.avg_allocated_bytes)} allocated, "
            f"{fmt.nbytes(m.avg_reserved_bytes)} reserved"
        ),
    )
    mf = sm.memory_facts
    floor = "weights, KV cache" if sm.generate is not None else "weights, optimizer state"
    if mf.dynamic_peak_bytes is not None:
        per = (
            f" = {fmt.nbytes(mf.activation_bytes_per_token)} per token "
            f"({sm.header.tokens_per_step} tokens per step)"
            if mf.activation_bytes_per_token is not None
            else ""
        )
        g.add_row(
            "dynamic",
            _t(
                f"{fmt.nbytes(mf.dynamic_peak_bytes)} above the floor of "
                f"{fmt.nbytes(mf.floor_bytes)} ({floor}){per}"
            ),
        )
    g.add_row("model", _t(VR.model_text(sm)))
    g.add_row("source", _t(sm.memory_source or ""))
    parts: list[RenderableType] = [Text("Memory", style="bold"), g]
    if mf.category_peak_model:
        parts.append(categories(sm))
    if len(sm.allocators):
        t = _table(
            "Top allocating operators",
            [
                ("operator", "name"),
                ("allocs", "right"),
                ("per step", "right"),
                ("largest", "right"),
                ("share", "right"),
            ],
        )
        for r in sm.allocators.itertuples(index=False):
            t.add_row(
                _name(r.op_name),
                fmt.count(r.allocations),
                fmt.nbytes(r.bytes_per_step),
                fmt.nbytes(r.largest_bytes),
                fmt.pct(r.pct),
            )
        parts.append(t)
    return Group(*parts)


def categories(sm: Summary) -> RenderableType:
    """Memory at the category timeline's peak, beside the analytic model's categories."""
    mf = sm.memory_facts
    assert mf.category_peak_model is not None
    model = mf.model.categories if mf.model is not None else {}
    t = _table(
        "Memory by category at the peak of its timeline",
        [("category", "left"), ("measured", "right"), ("model", "right")],
    )
    for cat, v in mf.category_peak_model.items():
        t.add_row(_t(cat), fmt.nbytes(v), fmt.nbytes(model.get(cat)))
    t.add_row(
        _t("total"),
        fmt.nbytes(sum(mf.category_peak_model.values())),
        fmt.nbytes(mf.model.peak if mf.model is not None else None),
    )
    return Group(
        t,
        Text(
            "measured: the per-category timeline at its peak (torch categories mapped: "
            "unknown → activations; autograd_detail, temporary, input and allocator memory "
            "the timeline does not see → other)",
            style="dim",
        ),
    )


def _step_of(sm: Summary) -> str:
    tf = sm.timeline_facts
    return "the light pass's step" if tf is not None and tf.source == "light" else "step time"


def gpu(sm: Summary) -> RenderableType:
    lc = sm.launch
    unprof = (
        f" ({fmt.pct(lc.gpu_idle_unprofiled_pct)} of the unprofiled step)"
        if lc.gpu_idle_unprofiled_pct is not None
        else ""
    )
    txt = (
        f"GPU idle {fmt.pct(lc.gpu_idle_pct)} of {_step_of(sm)}{unprof}; host busy "
        f"{fmt.pct(lc.host_busy_pct, 0)}; {lc.kernels_per_step:.0f} kernels per step, "
        f"median {fmt.us(lc.median_kernel_us)} (launch call {fmt.us(lc.median_launch_us)})"
    )
    parts: list[RenderableType] = [Text("GPU utilisation", style="bold"), Text(txt)]
    return Group(*parts)


def cpu(sm: Summary) -> RenderableType:
    """A CPU run's utilisation: operator work against the step, per thread."""
    cu = sm.cpu
    assert cu is not None
    prof = (
        f"; the profiler lengthened the step {fmt.pct(cu.profiler_overhead_pct, 0)}"
        if cu.profiler_overhead_pct is not None
        else ""
    )
    txt = (
        f"operators busy {fmt.pct(cu.busy_pct)} of step time, framework overhead "
        f"{fmt.pct(cu.overhead_pct)}{prof}; {cu.ops_per_step:.0f} work operators per step, "
        f"median {fmt.us(cu.median_op_us)}"
        + (f"; {cu.intra_op_threads} intra-op threads" if cu.intra_op_threads else "")
    )
    t = _table(
        "Operator work per thread",
        [("thread", "left"), ("ops/step", "right"), ("busy/step", "right"), ("busy", "right")],
    )
    for r in cu.threads.head(8).itertuples(index=False):
        t.add_row(
            _t(r.tid), f"{r.ops_per_step:.0f}", fmt.ms(r.busy_ms_per_step), fmt.pct(r.busy_pct)
        )
    return Group(Text("CPU utilisation", style="bold"), Text(txt), t)


def kernels(sm: Summary, n: int = 10) -> RenderableType:
    w = fmt.words(sm)
    t = _table(
        f"Top {w.kernels} by {w.time}",
        [
            (w.kernel, "name"),
            ("class", "left"),
            ("calls", "right"),
            ("ms/step", "right"),
            ("mean", "right"),
            ("time", "right"),
        ],
    )
    for r in sm.kernels.head(n).itertuples(index=False):
        t.add_row(
            _name(r.name),
            _t(r[1]),
            fmt.count(r.calls),
            fmt.ms(r.ms_per_step),
            fmt.us(r.mean_us),
            fmt.pct(r.time_share_pct),
        )
    return t


def render(sm: Summary, console: Console, outputs: Iterable[str] = ()) -> None:
    """Print every section to ``console``; a job at scale: the job, not each rank's detail
    (reports/ranksterm.py)."""
    scale = ranksterm.at_scale(sm)
    console.print(header(sm))
    console.print(verdict(sm))
    said = sm.verdict is not None and sm.verdict.verdict == "launch/host-bound"
    for w in sm.warnings:
        if not (said and w.startswith("launch-bound")):  # the verdict says it with evidence
            console.print(Text(f"warning: {w}", style="bold yellow"))
    console.print(missing(sm))
    if sm.generate is not None:
        console.print()
        console.print(generate(sm))
    for part in ranksterm.terminal(sm) if scale else ranks_view.terminal(sm):
        console.print()
        console.print(part)
    if not scale:
        _detail(sm, console)
    outs = list(outputs)
    if outs:
        console.print()
        for o in outs:
            console.print(Text(ranksterm.short_output(o) if scale else o, style="green"))


def _detail(sm: Summary, console: Console) -> None:
    """The (detailed rank's) sections: classes, operators, memory, GPU, kernels, path."""
    console.print()
    console.print(classes(sm))
    console.print()
    console.print(operators(sm))
    console.print()
    console.print(memory(sm))
    console.print()
    console.print(gpu(sm) if sm.cpu is None else cpu(sm))
    console.print()
    console.print(kernels(sm))
    if sm.critical_path is not None:
        console.print()
        console.print(critical_path(sm))
    for note in sm.notes:
        console.print(Text(f"note: {note}", style="dim"))


def critical_path(sm: Summary) -> RenderableType:
    """The critical path's length against the traced step, what lies on it, and what-ifs."""
    cp = sm.critical_path
    if cp is None:
        return Text("")
    s = cp.summary
    a = sm.cp_anchor
    head = Text(
        f"Critical path {fmt.ms(s.path_ms)} per step (profiled window; traced "
        f"{fmt.ms(s.step_ms)}, {round(s.path_vs_step_pct, 2) + 0.0:+.2f} %): {s.bound}-bound"
        + (f"; unprofiled step {fmt.ms(a.measured_ms)}: {a.bound}-bound" if a else ""),
        style="bold",
    )
    t = _table(
        "On the path, per step (off: GPU time off the path)",
        [
            ("on the path", "left"),
            ("ms", "right"),
            ("path", "right"),
            ("", "left"),
            ("GPU ms", "right"),
            ("off", "right"),
        ],
    )
    for r in cp.on_path.itertuples(index=False):
        t.add_row(
            _t(r.key),
            fmt.ms(r.on_path_ms),
            fmt.pct(r.on_path_pct),
            _bar(r.on_path_pct),
            fmt.ms(r.gpu_ms),
            fmt.pct(r.off_path_pct, 0),
        )
    basis = (
        f"on the unprofiled step, {a.basis}" if a else "on the profiled window: no unprofiled step"
    )
    w = _table(
        f"What if (steady-state step time {basis}; {len(cp.what_if_steps)} step(s))",
        [("scenario", "name"), ("step", "right"), ("change", "right"), ("speed-up", "right")],
    )
    for r in (a.what_if if a else cp.what_if).itertuples(index=False):
        w.add_row(
            _name(r.scenario),
            fmt.ms(r.path_ms),
            fmt.pct(r.delta_pct),
            (f"{r.speedup:.2f}x" if r.speedup == r.speedup else fmt.DASH)
            + ("*" if getattr(r, "capped", False) else ""),
        )
    why = CPA.disagreement(sm.verdict.verdict if sm.verdict else None, cp, a)
    notes = [Text(n, style="dim") for n in [*(a.notes if a else []), *([why] if why else [])]]
    return Group(head, t, Text(""), w, *notes)


def generate(sm: Summary) -> RenderableType:
    """A generate run: prefill against decode, the decode steps' bandwidth against the
    roof, the decode GEMMs, the KV cache and the decode model."""
    g = sm.generate
    if g is None:
        return Text("")
    grid = Table.grid(padding=(0, 1))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold")
    for label, text in GR.lines(sm):
        grid.add_row(label, _t(text))
    cols = GR.TERMINAL_STEP
    if not g.measured:
        cols = [c for c in cols if c[1] != "measured_bw_pct"]
    steps = _table(
        "Decode steps: time per step, % of the bandwidth roof, GPU ms",
        [(h, "right") for h, _, _ in cols],
        gap=1,
    )
    for r in g.per_step.head(12).to_dict("records"):
        steps.add_row(*(f(r[k]) for _, k, f in cols))
    gemms = _table(
        "Decode GEMMs (per step)",
        [("operator", "name")] + [(h, "right") for h, _, _ in GR.TERMINAL_GEMM],
        gap=1,
    )
    for r in GR.gemm_rows(g).head(8).to_dict("records"):
        gemms.add_row(_name(r["name"]), *(f(r[k]) for _, k, f in GR.TERMINAL_GEMM))
    return Group(Text(GR.title(g), style="bold"), grid, steps, gemms)
