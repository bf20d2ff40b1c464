"""``report.html``: one self-contained file (inline CSS, plots as base64 PNG ``<img>``s,
no script, no external resource).

Every string that comes from the trace, the manifest or the file system goes through
:func:`esc` (``html.escape`` with quotes) exactly once, when it is placed into markup;
nothing else is ever interpolated into the page. Markup is built only from the literal
strings in this module.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import tracekit.reports.fmt as fmt
import tracekit.reports.generate as GR
import tracekit.reports.parts as parts
import tracekit.reports.ranks as ranks_view
import tracekit.reports.verdict as VR
from tracekit.summary import Summary
from tracekit.summary.document import OPERATOR_KEYS

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;
 color:#1d1f23;background:#fff}
main{max-width:1500px;margin:0 auto;padding:16px 20px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;
 border-bottom:1px solid #dde;padding-bottom:4px}
table{border-collapse:collapse;margin:6px 0 10px;font-variant-numeric:tabular-nums}
th,td{padding:3px 6px;border-bottom:1px solid #eef;text-align:right;vertical-align:top;
 white-space:nowrap}
th{white-space:normal}table.wide{font-size:12.5px}table.wide td,table.wide th{padding:3px 4px}
.scroll{overflow-x:auto;max-width:100%}
th{background:#f4f5f9;font-weight:600}
td.l,th.l,th.name,th.shape{text-align:left}td.name{min-width:120px}td.shape{min-width:120px}
td.name,td.shape{text-align:left;max-width:420px;
 white-space:normal;overflow-wrap:anywhere;font-family:ui-monospace,Menlo,Consolas,monospace;
 font-size:12px}
dl.kv{display:grid;grid-template-columns:max-content 1fr;gap:2px 14px;margin:8px 0}
dl.kv dt{font-weight:600}dl.kv dd{margin:0}
.warn{background:#fff6e0;border-left:4px solid #e0a000;padding:6px 10px;margin:6px 0}
.miss{color:#8a5a00}.note{color:#667;font-size:13px}
.bar{display:inline-block;height:10px;background:#4a90d9;vertical-align:middle}
img{max-width:100%;border:1px solid #eee;margin:6px 0}
.muted{color:#667}
.verdict{background:#f3effa;border-left:4px solid #7a4fc2;padding:8px 12px;margin:8px 0}
.verdict b.v{font-size:17px;color:#4b2a8a}.verdict ul{margin:4px 0 4px 18px;padding:0}
"""


# Defence in depth: even a markup bug could not run a script or reach the network.
CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"


esc = parts.esc
_img = parts.img
Col = parts.Col
_table = parts.html_table


def _kv(items: Mapping[str, Any]) -> str:
    body = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in items.items())
    return f'<dl class="kv">{body}</dl>'


def _s(v: Any) -> str:
    return "" if v is None else str(v)


def header(sm: Summary) -> str:
    h = sm.header
    items: dict[str, Any] = {
        "trace": h.source,
        "device": h.device or sm.roofs.device or "unknown",
        "CUDA runtime": h.cuda_runtime or "unknown",
        "PyTorch": h.torch_version or "unknown (not recorded in a bare trace)",
    }
    if h.config:
        items["config"] = ", ".join(f"{k}={v}" for k, v in h.config.items())
    if h.n_params:
        items["parameters"] = f"{h.n_params:,}"
    items["steps analysed"] = (
        f"{len(h.steps)}: "
        + ", ".join(str(s) for s in h.steps[:20])
        + (" …" if len(h.steps) > 20 else "")
    )
    items["step time"] = VR.step_time_text(sm)
    if sm.header.residual:
        items["residual"] = sm.header.residual
    tl = VR.timeline_text(sm)
    if tl:
        items["timeline"] = tl
    tp = []
    if h.tokens_per_s:
        tp.append(f"{h.tokens_per_s:,.0f} tokens/s from the trace step time")
    if h.measured_tokens_per_s:
        tp.append(f"{h.measured_tokens_per_s:,.0f} tokens/s measured")
    if tp:
        items["throughput"] = "; ".join(tp)
    items["profiler options"] = ", ".join(
        f"{k} {'on' if v else 'off'}" for k, v in h.options.items()
    )
    out = [f"<h1>tracekit report: {esc(h.title)}</h1>", _kv(items)]
    out += [f'<div class="miss">missing: {esc(m)}</div>' for m in h.missing]
    out += [f'<div class="warn">{esc(w)}</div>' for w in sm.warnings]
    return "\n".join(out)


def verdict(sm: Summary) -> str:
    """The verdict with its evidence and next lever, the step summary's figures, the
    analytic traffic's terms and the per-step table."""
    v = sm.verdict
    box = [f"<div class='verdict'><b>Verdict:</b> <b class='v'>{esc(VR.verdict_line(sm))}</b>"]
    if v is not None:
        box.append("<ul>" + "".join(f"<li>{esc(e)}</li>" for e in v.evidence) + "</ul>")
        if v.lever:
            box.append(f"<div><b>Next lever:</b> {esc(v.lever)}</div>")
    box.append("</div>")
    out = ["<h2>Verdict and step summary</h2>", "".join(box), _kv(dict(VR.figures(sm)))]
    t = sm.summary.get("step_summary", {}).get("analytic_traffic")
    if t:
        rows = "".join(
            f"<tr><td class='l'>{esc(name)}</td><td>{esc(size)}</td><td>{esc(moved)}</td></tr>"
            for name, size, moved in VR.traffic_rows(t)
        )
        model = "decode model" if sm.generate is not None else "analytic memory model"
        out.append(
            f"<p>Analytic traffic per step: {esc(t['formula'])} (sizes from the {model} "
            "of the run's config).</p><table><thead><tr><th class='l'>term</th>"
            f"<th>size</th><th>moved per step</th></tr></thead><tbody>{rows}"
            f"<tr><td class='l'>total</td><td></td><td>{esc(fmt.si(t['total'], 'B'))}</td>"
            "</tr></tbody></table>"
        )
    per = VR.per_step_rows(sm)
    if per:
        head = "".join(f"<th>{esc(k)}</th>" for k in per[0])
        body = "".join(
            "<tr>" + "".join(f"<td>{esc(x)}</td>" for x in r.values()) + "</tr>" for r in per[:50]
        )
        out.append(
            "<p>Per analysed step (over the profiled step time):</p>"
            f"<div class='scroll'><table><thead><tr>{head}</tr></thead><tbody>{body}"
            "</tbody></table></div>"
        )
    return "\n".join(out)


def _bar(p: Any) -> str:
    try:
        w = max(0.0, min(100.0, float(p)))
    except (TypeError, ValueError):
        return ""
    return f'<span class="bar" style="width:{w * 2:.1f}px"></span>'


# what the class table's time is the sum of
_SHARED = {
    "kernels": "GPU activity time (kernels + memcpy + memset)",
    "work operators": "work-operator time (a CPU run: docs/report.md, CPU runs)",
}


def classes(sm: Summary, plots: Mapping[str, bytes]) -> str:
    cl = sm.classes
    w = fmt.words(sm)
    head = (
        f"<tr><th class='l'>class</th><th>ms/step</th><th>{w.time}</th><th></th>"
        "<th>FLOPs</th><th>FLOPs/step</th><th>time with FLOP count</th>"
        "<th>memory-bound</th><th>compute-bound</th><th>activities</th></tr>"
    )
    n = max(1, len(sm.steps))
    rows = []
    for r in cl.to_dict("records"):
        rows.append(
            f"<tr><td class='l'>{esc(r['class'])}</td><td>{esc(fmt.ms(r['ms_per_step']))}</td>"
            f"<td>{esc(fmt.pct(r['time_share_pct']))}</td><td class='l'>"
            f"{_bar(r['time_share_pct'])}</td><td>{esc(fmt.pct(r['flop_share_pct'], 2))}</td>"
            f"<td>{esc(fmt.si(r['flops'] / n, 'FLOP'))}</td>"
            f"<td>{esc(fmt.pct(r['flops_known_pct'], 0))}</td>"
            f"<td>{esc(fmt.pct(r['memory_bound_pct'], 0))}</td>"
            f"<td>{esc(fmt.pct(r['compute_bound_pct'], 0))}</td>"
            f"<td>{esc(fmt.count(r['kernel_count']))}</td></tr>"
        )
    bound = " · ".join(f"{k}: {fmt.pct(v)}" for k, v in sm.bound.items())
    src = ", ".join(f"{k} {fmt.pct(v, 0)}" for k, v in sm.flop_sources.items())
    return "\n".join(
        [
            f"<h2>{w.time} and FLOPs per class</h2>",
            f"<p class='muted'>Share of summed {_SHARED[w.kernels]} over "
            "the analysed steps; FLOP share of the FLOPs counted. In BERT, tensor contractions "
            "were 99.8 % of FLOPs but 61 % of runtime (Ivanov et al., <i>Data Movement Is All "
            "You Need</i>, MLSys 2021).</p>",
            f"<table><thead>{head}</thead><tbody>{''.join(rows)}</tbody></table>",
            f"<p class='note'>{esc(ranks_view.union_note(sm))}</p>"
            if ranks_view.union_note(sm)
            else "",
            f"<p>{w.time} by bound: {esc(bound)}</p>",
            f"<p class='note'>FLOP counts by source, as share of {w.time}: "
            f"{esc(src or 'none')}</p>",
            _img(plots["time_share"], f"{w.time} and FLOP share per class")
            if "time_share" in plots
            else "",
        ]
    )


def _roofs(sm: Summary) -> str:
    """Peaks per pipe with ridge points; each distinct source listed once, numbered."""
    r = sm.roofs
    if not r.peaks and not r.bandwidth:
        return "<p class='miss'>Device roofline unknown (see notes).</p>"
    sources: list[str] = []

    def ref(src: str) -> str:
        if src not in sources:
            sources.append(src)
        return f"[{sources.index(src) + 1}]"

    rows = []
    for pipe, peak in sorted(r.peaks.items(), key=lambda kv: -kv[1]):
        rows.append(
            f"<tr><td class='l'>{esc(pipe)}</td><td>{esc(fmt.si(peak, 'FLOP/s'))}</td>"
            f"<td>{esc(fmt.intensity(r.ridge(pipe)))}</td>"
            f"<td class='l'>{esc(ref(r.peak_sources.get(pipe, '') or 'unknown'))}</td></tr>"
        )
    bw = (
        f"<tr><td class='l'>memory bandwidth</td><td>{esc(fmt.si(r.bandwidth, 'B/s'))}</td>"
        f"<td></td><td class='l'>{esc(ref(r.bandwidth_source or 'unknown'))}</td></tr>"
        if r.bandwidth
        else ""
    )
    notes = "".join(f"<li>{esc(s)}</li>" for s in sources)
    return (
        "<table><thead><tr><th class='l'>pipe</th><th>peak</th><th>ridge FLOP/byte</th>"
        f"<th class='l'>source</th></tr></thead><tbody>{''.join(rows)}{bw}</tbody></table>"
        f"<ol class='note'>{notes}</ol>"
    )


def roofline(sm: Summary, plots: Mapping[str, bytes], n: int = 25) -> str:
    w = fmt.words(sm)
    cols: list[Col] = [
        ("operator", "name", _s),
        ("class", "l", _s),
        ("input shapes", "shape", fmt.shapes),
        ("calls", "", fmt.count),
        ("ms/step", "", fmt.ms),
        (w.time, "", fmt.pct),
        ("FLOPs", "", lambda v: fmt.si(v, "FLOP")),
        ("bytes", "", fmt.nbytes),
        ("FLOP/byte", "", fmt.intensity),
        ("attained FLOP/s", "", lambda v: fmt.si(v, "")),
        ("attained B/s", "", lambda v: fmt.si(v, "")),
        ("pipe", "l", _s),
        ("bound", "l", lambda v: str(v).replace("-bound", "") if v else ""),
        ("% of roof", "", lambda v: fmt.pct(v, 1)),
        ("FLOPs from", "l", _s),
    ]
    fields = OPERATOR_KEYS  # the columns above, in summary.json's order
    return "\n".join(
        [
            "<h2>Roofline</h2>",
            _roofs(sm),
            f"<p>Top {n} operators by {w.time} (grouped by name, class and input shapes).</p>",
            _table(sm.operators.head(n), cols, fields, "wide"),
            f"<p class='miss'>{esc(sm.roof_note)}</p>" if sm.roof_note else "",
            _img(plots["roofline"], "roofline plot") if "roofline" in plots else "",
        ]
    )


def memory(sm: Summary, plots: Mapping[str, bytes]) -> str:
    m = sm.memory
    out = ["<h2>Memory</h2>"]
    if m is None:
        out.append(
            "<p class='miss'>No [memory] events in the trace and no measured figures "
            "in a run manifest.</p>"
        )
    else:
        items = {
            "device": m.device,
            "peak allocated": fmt.nbytes(m.peak_allocated_bytes),
            "peak reserved": fmt.nbytes(m.peak_reserved_bytes),
            "average allocated": fmt.nbytes(m.avg_allocated_bytes),
            "average reserved": fmt.nbytes(m.avg_reserved_bytes),
        }
        mf = sm.memory_facts
        if mf.dynamic_peak_bytes is not None:
            items["floor (lowest allocated in the steps)"] = fmt.nbytes(mf.floor_bytes)
            items["dynamic peak (peak − floor)"] = fmt.nbytes(mf.dynamic_peak_bytes)
        if mf.activation_bytes_per_token is not None:
            items["dynamic memory per token"] = (
                f"{fmt.nbytes(mf.activation_bytes_per_token)} "
                f"({sm.header.tokens_per_step} tokens/step)"
            )
        items["analytic model"] = VR.model_text(sm)
        items["source"] = sm.memory_source or ""
        out.append(_kv(items))
        out.append(_categories(sm))
    if "memory_timeline" in plots:
        out.append(_img(plots["memory_timeline"], "memory timeline"))
    if len(sm.allocators):
        out.append("<p>Top allocating operators</p>")
        cols: list[Col] = [
            ("operator", "name", _s),
            ("allocations", "", fmt.count),
            ("bytes/step", "", fmt.nbytes),
            ("largest", "", fmt.nbytes),
            ("share", "", fmt.pct),
        ]
        out.append(
            _table(
                sm.allocators,
                cols,
                ["op_name", "allocations", "bytes_per_step", "largest_bytes", "pct"],
            )
        )
    return "\n".join(out)


def _categories(sm: Summary) -> str:
    """Memory at the category timeline's peak: torch's categories, then mapped onto the
    analytic model's five beside the model."""
    mf = sm.memory_facts
    if not mf.category_peak or not mf.category_peak_model:
        return ""
    raw = "".join(
        f"<tr><td class='l'>{esc(c)}</td><td>{esc(fmt.nbytes(v))}</td></tr>"
        for c, v in mf.category_peak.items()
    )
    model = mf.model.categories if mf.model is not None else {}
    rows = "".join(
        f"<tr><td class='l'>{esc(c)}</td><td>{esc(fmt.nbytes(v))}</td>"
        f"<td>{esc(fmt.nbytes(model.get(c)))}</td></tr>"
        for c, v in mf.category_peak_model.items()
    )
    return (
        "<p>Memory by category at the peak of the per-category timeline (PyTorch's "
        "categories), and mapped onto the analytic model's: unknown → activations; "
        "autograd_detail, temporary, input and the allocator memory the timeline does not "
        "see → other.</p><div class='scroll' style='display:flex;gap:24px'>"
        "<table><thead><tr><th class='l'>timeline category</th><th>at the peak</th></tr>"
        f"</thead><tbody>{raw}</tbody></table><table><thead><tr><th class='l'>category</th>"
        f"<th>measured</th><th>analytic model</th></tr></thead><tbody>{rows}</tbody></table>"
        "</div>"
    )


def _traced(sm: Summary) -> str:
    tf = sm.timeline_facts
    light = tf is not None and tf.source == "light"
    return "light timeline pass, CUDA activity only" if light else "with the profiler"


def gpu(sm: Summary) -> str:
    lc = sm.launch
    items = {
        "GPU idle": f"{fmt.pct(lc.gpu_idle_pct)} of step time ({_traced(sm)})",
        "GPU idle, unprofiled": (
            f"{fmt.pct(lc.gpu_idle_unprofiled_pct)} of the step time measured without the "
            "profiler (estimate: traced GPU busy time / unprofiled step time)"
            if lc.gpu_idle_unprofiled_pct is not None
            else "no unprofiled step time (run folder manifest) available"
        ),
        "host busy": f"{fmt.pct(lc.host_busy_pct, 0)} of step time",
        "kernels per step": f"{lc.kernels_per_step:.0f}",
        "median kernel": fmt.us(lc.median_kernel_us),
        "median launch call": fmt.us(lc.median_launch_us),
        "kernels shorter than their launch call": fmt.pct(lc.shorter_than_launch_pct, 0),
        "launch-bound": "yes" if lc.launch_bound else "no",
    }
    cols: list[Col] = [
        ("step", "", _s),
        ("CPU", "", fmt.ms),
        ("GPU span", "", fmt.ms),
        ("GPU busy", "", fmt.ms),
        ("step time", "", fmt.ms),
        ("GPU idle", "", fmt.pct),
        ("GPU activities", "", fmt.count),
    ]
    fields = [
        "step",
        "cpu_ms",
        "gpu_span_ms",
        "gpu_busy_ms",
        "step_time_ms",
        "gpu_idle_pct",
        "kernel_count",
    ]
    return "\n".join(
        ["<h2>GPU utilisation</h2>", _kv(items), _table(sm.step_table.head(50), cols, fields)]
    )


def cpu(sm: Summary) -> str:
    """A CPU run's utilisation: operator work against the step, per step and per thread."""
    cu = sm.cpu
    assert cu is not None
    items = {
        "operators busy": f"{fmt.pct(cu.busy_pct)} of step time (union of the work "
        "operators, all threads; with the profiler)",
        "framework overhead": f"{fmt.pct(cu.overhead_pct)} of step time (Python, dispatcher, "
        "autograd engine, the profiler's own bookkeeping)",
        "profiler overhead": (
            f"the profiler lengthened the step {fmt.pct(cu.profiler_overhead_pct, 0)} (manifest)"
            if cu.profiler_overhead_pct is not None
            else "no unprofiled step time (run folder manifest) available"
        ),
        "work operators per step": f"{cu.ops_per_step:.0f}",
        "median work operator": fmt.us(cu.median_op_us),
        "intra-op threads": str(cu.intra_op_threads) if cu.intra_op_threads else "unknown",
    }
    steps: list[Col] = [
        ("step", "", _s),
        ("step time", "", fmt.ms),
        ("operators busy", "", fmt.ms),
        ("framework overhead", "", fmt.pct),
        ("work operators", "", fmt.count),
    ]
    fields = ["step", "step_time_ms", "gpu_busy_ms", "gpu_idle_pct", "kernel_count"]
    threads: list[Col] = [
        ("thread", "", _s),
        ("work operators/step", "", lambda v: fmt.num(v, 0)),
        ("busy/step", "", fmt.ms),
        ("busy", "", fmt.pct),
    ]
    return "\n".join(
        [
            "<h2>CPU utilisation</h2>",
            _kv(items),
            _table(sm.step_table.head(50), steps, fields),
            _table(cu.threads, threads, ["tid", "ops_per_step", "busy_ms_per_step", "busy_pct"]),
        ]
    )


def kernels(sm: Summary, n: int = 20) -> str:
    w = fmt.words(sm)
    cols: list[Col] = [
        (w.kernel, "name", _s),
        ("class", "l", _s),
        ("kind", "l", _s),
        ("calls", "", fmt.count),
        ("ms/step", "", fmt.ms),
        ("mean", "", fmt.us),
        (w.time, "", fmt.pct),
    ]
    fields = ["name", "class", "kind", "calls", "ms_per_step", "mean_us", "time_share_pct"]
    return "\n".join(
        [f"<h2>Top {n} {w.kernels} by {w.time}</h2>", _table(sm.kernels.head(n), cols, fields)]
    )


def render(sm: Summary, plots: Mapping[str, bytes]) -> str:
    """The whole page."""
    notes = "".join(f"<li>{esc(n)}</li>" for n in sm.notes)
    body = "\n".join(
        [
            header(sm),
            verdict(sm),
            generate(sm, plots),
            ranks_view.html(sm, plots),
            classes(sm, plots),
            roofline(sm, plots),
            memory(sm, plots),
            gpu(sm) if sm.cpu is None else cpu(sm),
            kernels(sm),
            critical_path(sm),
            f"<h2>Notes</h2><ul class='note'>{notes}</ul>" if notes else "",
            "<p class='note'>Generated by tracekit. Numbers: summary.json; tables: *.parquet.</p>",
        ]
    )
    return (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        f"<meta http-equiv='Content-Security-Policy' content=\"{CSP}\">"
        "<meta name='viewport' content='width=device-width,initial-scale=1'>"
        f"<title>tracekit report: {esc(sm.header.title)}</title>"
        f"<style>{CSS}</style></head><body><main>\n{body}\n</main></body></html>\n"
    )


def critical_path(sm: Summary) -> str:
    """The critical path section: length against the traced step, what lies on it (and
    how much of each class's GPU time does not), the what-ifs and the per-step check."""
    cp = sm.critical_path
    if cp is None:
        return ""
    s = cp.summary
    g = cp.graphs[0]
    a = sm.cp_anchor
    items = {
        "critical path": f"{fmt.ms(s.path_ms)} per step in the steady state of the profiled "
        f"window; traced step {fmt.ms(s.step_ms)} ({round(s.path_vs_step_pct, 2) + 0.0:+.2f} %)",
        "bound": f"{s.bound} (on the path: GPU {fmt.ms(s.gpu_ms)}, host {fmt.ms(s.host_ms)}, "
        f"launch latency {fmt.ms(s.launch_ms)}, idle and waits {fmt.ms(s.idle_ms)})",
        "model": f"launch latency {fmt.us(g.l0 / 1e3)}, gap between queued kernels "
        f"{fmt.us(g.g0 / 1e3)}, {cp.copies} steps solved in a row",
    }
    on_cols: list[Col] = [
        ("on the path", "l", _s),
        ("group", "l", _s),
        ("ms/step", "", fmt.ms),
        ("share of the path", "", fmt.pct),
        ("GPU ms/step", "", fmt.ms),
        ("GPU time off the path", "", fmt.pct),
    ]
    on_fields = ["key", "group", "on_path_ms", "on_path_pct", "gpu_ms", "off_path_pct"]
    wi_cols: list[Col] = [
        ("scenario", "l", _s),
        ("what changes", "l", _s),
        ("step", "", fmt.ms),
        ("change", "", fmt.pct),
        ("speed-up", "", lambda v: f"{float(v):.2f}x" if v == v else fmt.DASH),
    ]
    wi_fields = ["scenario", "description", "path_ms", "delta_pct", "speedup"]
    st_cols: list[Col] = [
        ("step", "", _s),
        ("path", "", fmt.ms),
        ("traced", "", fmt.ms),
        ("difference", "", fmt.pct),
        ("CPU span", "", fmt.ms),
        ("GPU span", "", fmt.ms),
        ("replayed exactly", "", fmt.pct),
        ("points", "", fmt.count),
        ("cross edges", "", fmt.count),
    ]
    st_fields = [
        "step",
        "path_ms",
        "traced_ms",
        "path_vs_traced_pct",
        "cpu_ms",
        "gpu_span_ms",
        "replay_exact_pct",
        "points",
        "edges",
    ]
    if a is not None:
        items["unprofiled step"] = (
            f"{fmt.ms(a.measured_ms)}, {a.bound}-bound; GPU work {fmt.ms(a.gpu_ms)}; what-ifs "
            f"{a.basis} (host x{a.host_speedup:.2f}, scale {a.scale:.3f})"
        )
        wi_cols.append(("capped at the GPU's work", "", lambda v: "yes" if v else ""))
        wi_fields.append("capped")
    basis = "on the unprofiled step" if a is not None else "on the profiled window"
    notes = "".join(f"<p class='note'>{esc(n)}</p>" for n in [*(a.notes if a else []), *cp.notes])
    return "\n".join(
        [
            "<h2>Critical path</h2>",
            "<p class='muted'>The step as a dependency graph (CPU threads, launches, GPU "
            "streams, synchronisations, waits between streams and threads), solved as a loop "
            "of identical steps: its longest path is the step time, the time on it is what "
            "a speed-up can buy, and GPU time off it buys nothing (docs/critical-path.md).</p>",
            _kv(items),
            _table(cp.on_path, on_cols, on_fields),
            f"<h3>What if ({basis})</h3>",
            _table(a.what_if if a is not None else cp.what_if, wi_cols, wi_fields),
            "<h3>Path against the traced step</h3>",
            _table(cp.per_step.head(50), st_cols, st_fields),
            notes,
        ]
    )


def generate(sm: Summary, plots: Mapping[str, bytes]) -> str:
    """A generate run's section: prefill and decode, per-step bandwidth, decode GEMMs,
    KV cache and the decode model (empty for a training run)."""
    g = sm.generate
    if g is None:
        return ""
    step_cols: list[Col] = [(h, "", f) for h, _, _, f in GR.STEP_COLUMNS]
    gemm_cols: list[Col] = [
        (h, "name" if k == "name" else "", f) for h, _, k, f in GR.GEMM_COLUMNS_OUT
    ]
    out = [
        f"<h2>{esc(GR.title(g))}</h2>",
        "<p class='muted'>A decode step reads every weight and the filled KV cache to make "
        "one token per sequence: its bytes over its time are the bandwidth the memory wall "
        "is about (docs/generate.md).</p>",
        _kv(dict(GR.lines(sm))),
    ]
    if "decode_bandwidth" in plots:
        out.append(_img(plots["decode_bandwidth"], "decode bandwidth per step"))
    out += [
        "<h3>Decode steps</h3>",
        _table(g.per_step.head(200), step_cols, [k for _, _, k, _ in GR.STEP_COLUMNS]),
        "<h3>Decode GEMMs</h3>",
        _table(GR.gemm_rows(g), gemm_cols, [k for _, _, k, _ in GR.GEMM_COLUMNS_OUT]),
    ]
    return "\n".join(out)
