"""``tracekit advise``'s outputs: the ranked table in the terminal (80 columns), one HTML
page, a Markdown table and scalars for TensorBoard (``tracekit.advise.advice.Advice`` in)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd
from rich import box
from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

import tracekit.reports.fmt as fmt
import tracekit.reports.html as H
from tracekit.advise.table import ratio_bounds
from tracekit.io import atomic_write_text

REPORT = "report"
HTML = "advise.html"
TENSORBOARD = "tensorboard"
MIB = 2**20


def _ok(v: Any) -> bool:
    try:
        return v is not None and math.isfinite(float(v))
    except (TypeError, ValueError):
        return False


def ratio(v: Any) -> str:
    return f"{float(v):.2f}" if _ok(v) else fmt.DASH


def signed(v: Any, digits: int = 1) -> str:
    return f"{float(v):+.{digits}f}" if _ok(v) else fmt.DASH


def mib(v: Any) -> str:
    return f"{float(v) / MIB:+,.0f}" if _ok(v) else fmt.DASH


def tps(v: Any) -> str:
    return f"{float(v):,.0f}" if _ok(v) else fmt.DASH


def short(verdict: Any) -> str:
    """'launch/host-bound' -> 'launch/host'."""
    return str(verdict).removesuffix("-bound") if verdict else "n/a"


def bottleneck(r: Mapping[str, Any]) -> str:
    """What the lever addresses against the baseline's verdict, and the verdict after."""
    before, after = r.get("verdict_before"), r.get("verdict_after")
    hit = "✓" if r.get("targets_verdict") else "·"
    text = f"{hit} {short(before)}"
    if after:
        text += f" → {short(after)}"
    return text


def _rank(v: Any) -> str:
    return "–" if v is None or pd.isna(v) else str(int(v))


def _ms(v: Any) -> str:
    return f"{float(v):.2f}" if _ok(v) else fmt.DASH


def _table(title: str, cols: list[tuple[str, str]]) -> Table:
    t = Table(title=title, title_justify="left", title_style="bold", box=box.SIMPLE_HEAD,
              pad_edge=False, show_edge=False, padding=(0, 1, 0, 0))  # fmt: skip
    for name, justify in cols:
        t.add_column(name, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    return t


def config_text(b: Mapping[str, Any]) -> str:
    """The baseline's config without defaults (no grad-accum, one GPU), then its optimizer."""
    defaults = {"grad_accum": 1, "gpus": 1}
    cfg = [
        f"{k}={v}"
        for k, v in b["config"].items()
        if k != "optimizer" and v not in (None, False) and defaults.get(k) != v
    ]
    return " ".join([*cfg, f"optimizer={b['optimizer']}"])


def _path(b: Mapping[str, Any]) -> str:
    """The critical path's bound, of which pass, and the host calibration (the host's
    alone where the run has no critical path: a CPU run)."""
    host = f"host x{b['host_speedup']:.2f} without the profiler ({b['host_basis']})"
    if not b.get("critical_path_bound"):
        return host
    of = b.get("critical_path_of") or "profiled window"
    return f"{b['critical_path_bound']}-bound critical path of the {of}; {host}"


def verdict_text(b: Mapping[str, Any]) -> str:
    """The verdict and the step it splits, as ``tracekit report`` words them."""
    if not b.get("verdict"):
        return "n/a (no verdict)"
    if b.get("verdict_step_ms") is None:
        return str(b["verdict"])
    how = "measured without the profiler" if b.get("verdict_basis") == "unprofiled" else "profiled"
    return f"{b['verdict']} ({fmt.ms(b['verdict_step_ms'])} step, {how})"


def header(doc: Mapping[str, Any]) -> RenderableType:
    b = doc["baseline"]
    g = Table.grid(padding=(0, 1))
    g.add_column(style="bold", no_wrap=True)
    g.add_column(overflow="fold")
    g.add_row("config", Text(config_text(b)))
    g.add_row("step", Text(f"{_ms(b['step_ms'])} ms, {tps(b['tokens_per_s'])} tokens/s, peak "
                           f"{fmt.nbytes(b['peak_bytes'])} ({b['peak_source']})"))  # fmt: skip
    g.add_row("verdict", Text(verdict_text(b)))
    g.add_row("path" if b.get("critical_path_bound") else "host", Text(_path(b)))
    if b.get("verdict_note"):
        g.add_row("", Text(b["verdict_note"]))
    if b.get("remeasured_step_ms") is not None:
        g.add_row("re-run", Text(f"{_ms(b['remeasured_step_ms'])} ms, peak "
                                 f"{fmt.nbytes(b.get('remeasured_peak_bytes'))}"))  # fmt: skip
    title = f"tracekit advise: {doc['run']} (objective: {doc['objective']})"
    return Group(Text(title, style="bold"), g)


def _cells(r: Mapping[str, Any], pred: bool) -> list[str]:
    if r["status"] not in ("ok", "not run"):
        n = 4 if pred else 8
        return [str(r["status"])] + [fmt.DASH] * (n - 1)
    if pred:
        return [_ms(r["pred_step_ms"]), ratio(r["pred_step_ratio"]), tps(r["pred_tokens_per_s"]),
                mib(r["pred_peak_delta_bytes"])]  # fmt: skip
    return [_ms(r["step_ms"]), ratio(r["step_ratio"]), interval(r),
            tps(r["tokens_per_s"]),
            mib(r["peak_delta_bytes"]), ratio(r["pred_step_ratio"]), signed(r["step_error_pct"]),
            signed(r["peak_error_pct"])]  # fmt: skip


LEGEND = (
    "ms: step time; x: against the re-measured baseline, from paired rounds; 90 %: its "
    "interval and (n) the rounds it rests on (=: no measurable difference; 1 collect: no "
    "paired rounds); tok/s: tokens/s; Δ MiB: peak memory change; pred: predicted x; err %, "
    "mem %: (predicted - measured) / measured step time, peak"
)

PRED_LEGEND = "pred ms, x: predicted step time and ratio; Δ MiB: predicted peak memory change"


def interval(r: Mapping[str, Any], long: bool = False) -> str:
    """The step ratio's 90 % interval over paired rounds and how many rounds it rests on
    ('=' marks one holding 1.0): ``0.66-0.72 (12)`` (``long``: ``(12 rounds)``). One round
    has no interval and says so; identical rounds show no spread rather than a zero-width
    interval; a row without paired rounds is one collect."""
    lo, hi, n = r.get("ratio_lo"), r.get("ratio_hi"), r.get("rounds")
    rounds = int(n) if _ok(n) else 0
    if r.get("status") != "ok":
        return fmt.DASH
    if rounds == 0:
        return "1 collect, no interval"
    if rounds == 1 or not (_ok(lo) and _ok(hi)):
        return "1 round, no interval"
    if float(lo) == float(hi):
        return f"{rounds} rounds, no spread"
    mark = "=" if float(lo) <= 1.0 <= float(hi) else ""
    tail = f" ({rounds} rounds)" if long else f" ({rounds})"
    return f"{mark}{ratio_bounds(float(lo), float(hi))}{tail}"


def ranked(doc: Mapping[str, Any], table: pd.DataFrame) -> RenderableType:
    """Rank, lever, measured step time and x, tokens/s, peak change, predicted x and the
    predictions' errors (predicted-only: the predictions); then why rows have none."""
    pred = bool(doc["predicted_only"])
    cols = [("#", "right"), ("lever", "left")]
    if pred:
        cols += [("pred ms", "right"), ("x", "right"), ("tokens/s", "right"), ("Δ MiB", "right")]
    else:
        cols += [("ms", "right"), ("x", "right"), ("90 %", "right"), ("tok/s", "right"),
                 ("Δ MiB", "right"),
                 ("pred", "right"), ("err %", "right"), ("mem %", "right")]  # fmt: skip
    t = _table(f"levers ranked by {doc['objective']}", cols)
    why: list[Text] = []
    for r in table.to_dict(orient="records"):
        name = "combination" if r["kind"] == "combination" else str(r["lever"])
        t.add_row(_rank(r["rank"]), Text(name, no_wrap=True, overflow="ellipsis"), *_cells(r, pred))
        if isinstance(r.get("slower_why"), str):
            why.append(Text(f"  {r['slower_why']}", style="yellow"))
        if r["status"] not in ("ok", "not run"):
            why.append(Text(f"  {name}: {r['status']}: {r.get('error') or ''}", style="yellow"))
        elif not _ok(r["pred_step_ratio"]):
            why.append(Text(f"  {name}: no time prediction: {r['time_evidence']}", style="dim"))
        elif isinstance(r.get("prediction_note"), str):
            why.append(Text(f"  {name}: {r['prediction_note']}", style="dim"))
    text = PRED_LEGEND if pred else LEGEND
    legend = Text(text, style="dim")
    return Group(t, *why, legend)


def why(table: pd.DataFrame) -> RenderableType:
    """What each lever addresses, the baseline's verdict (✓: among them) and the lever
    run's verdict; where that is unknown, a line on why."""
    t = _table("bottlenecks (✓: the lever addresses the baseline's verdict)",
               [("lever", "left"), ("verdict", "left")])  # fmt: skip
    t.add_column("addresses", overflow="fold")
    notes: list[Text] = []
    for r in table.to_dict(orient="records"):
        if r["status"] == "skipped":
            continue
        t.add_row(Text(str(r["lever"]), no_wrap=True, overflow="ellipsis"), bottleneck(r),
                  Text(str(r["addresses"])))  # fmt: skip
        if isinstance(r.get("verdict_after_why"), str):
            notes.append(Text(f"  {r['lever']}: its run's verdict is unknown: "
                              f"{r['verdict_after_why']}", style="dim"))  # fmt: skip
    return Group(t, *notes) if notes else t


def _iv_text(iv: Mapping[str, Any] | None) -> str:
    """An interval block of ``advise.json`` (``ratio``, ``lo``, ``hi``, ``rounds``)."""
    if not iv:
        return fmt.DASH
    r = {"status": "ok", "ratio_lo": iv.get("lo"), "ratio_hi": iv.get("hi"),
         "rounds": iv.get("rounds")}  # fmt: skip
    return f"{ratio(iv.get('ratio'))} [{interval(r)}]"


def search_table(search: Mapping[str, Any]) -> RenderableType:
    """Each step of the measured search: the combination tried, its ratio against the best
    so far (paired rounds between the two), chained to the baseline, kept or why not."""
    t = _table("search steps (x vs best: paired rounds against the best so far)",
               [("tried", "left"), ("x vs best [90 % (rounds)]", "right"),
                ("x vs baseline", "right")])  # fmt: skip
    t.add_column("", overflow="fold")
    for st in search.get("steps") or []:
        mark = "kept" if st["kept"] else st["why"]
        t.add_row(Text("+".join(st["levers"]), no_wrap=True, overflow="ellipsis"),
                  _iv_text(st.get("vs_best")), ratio((st.get("vs_baseline") or {}).get("ratio")),
                  Text(mark))  # fmt: skip
    return t


def combination(doc: Mapping[str, Any], table: pd.DataFrame) -> RenderableType:
    c = doc.get("combination")
    if not c:
        return Text("")
    search = c.get("search")
    title = "recommended: the best configuration measured" if search else \
        "best combination (greedy on measured gains)"  # fmt: skip
    lines: list[RenderableType] = [Text(title, style="bold")]
    if search:
        order = ", ".join(search["order"]) or "none"
        best = "+".join(search["best"]) or "the baseline"
        lines.append(Text(f"  {best}: x{_iv_text(search.get('best_vs_baseline'))} against the "
                          f"baseline; levers that gained alone, tried in this order: {order}; "
                          f"stopped: {search['stopped']}"))  # fmt: skip
        if search.get("steps"):
            lines.append(search_table(search))
        lines += [Text(f"  interaction: {x}", style="yellow") for x in search["interactions"]]
    r = table[table["kind"] == "combination"]
    if len(r):
        x = r.iloc[0]
        lines.append(Text(
            f"  {x['lever']}: {_ms(x['step_ms'])} ms (x{ratio(x['step_ratio'])}), "
            f"{tps(x['tokens_per_s'])} tokens/s, peak Δ {mib(x['peak_delta_bytes'])} MiB; "
            f"predicted x{ratio(x['pred_step_ratio'])} ({signed(x['step_error_pct'])} %)"
        ))  # fmt: skip
        if x["status"] != "ok":
            lines.append(Text(f"  {x['status']}: {x.get('error') or ''}", style="yellow"))
    elif not search:
        lines.append(Text(f"  {c['result']}"))
    return Group(*lines)


def evidence(table: pd.DataFrame) -> RenderableType:
    lines = [Text("how each prediction was made", style="bold")]
    for r in table.to_dict(orient="records"):
        if r["status"] == "skipped":
            continue
        lines.append(Text(f"  {r['lever']}: time: {r['time_evidence']}"))
        if isinstance(r.get("time_basis"), str) and r["time_basis"]:
            lines.append(Text(f"    rests on: {r['time_basis']}"))
        lines.append(Text(f"    memory: {r['memory_evidence']}"))
    return Group(*lines)


def render(doc: Mapping[str, Any], table: pd.DataFrame, console: Console,
           outputs: list[str] | None = None) -> None:  # fmt: skip
    """Everything ``tracekit advise`` prints."""
    parts: list[RenderableType] = [header(doc), ranked(doc, table), why(table)]
    if not doc["predicted_only"]:
        parts.append(combination(doc, table))
    parts.append(evidence(table))
    parts += [Text(f"note: {n}", style="yellow") for n in doc.get("notes") or []]
    for p in parts:
        console.print(p)
        console.print()
    for o in outputs or []:
        console.print(Text(o, style="green"))


# ---------------------------------------------------------------------------- HTML

_COLS: list[tuple[str, str, str, Callable[[Any], str]]] = [
    ("#", "", "rank", _rank), ("lever", "l", "lever", str), ("status", "l", "status", str),
    ("step ms", "", "step_ms", _ms), ("Δ ms", "", "delta_ms", lambda v: signed(v, 2)),
    ("x", "", "step_ratio", ratio), ("90 % interval of x", "", "interval", str),
    ("effect", "l", "effect", lambda v: str(v) if isinstance(v, str) else fmt.DASH),
    ("rounds", "", "rounds", lambda v: str(int(v)) if _ok(v) else fmt.DASH),
    ("tokens/s", "", "tokens_per_s", tps), ("peak Δ MiB", "", "peak_delta_bytes", mib),
    ("predicted ms", "", "pred_step_ms", _ms), ("predicted x", "", "pred_step_ratio", ratio),
    ("time error %", "", "step_error_pct", signed),
    ("predicted peak Δ MiB", "", "pred_peak_delta_bytes", mib),
    ("peak error %", "", "peak_error_pct", signed),
    ("why it slows the step", "l", "slower_why",
     lambda v: v if isinstance(v, str) else fmt.DASH),
    ("why the time prediction misses", "l", "prediction_note",
     lambda v: v if isinstance(v, str) else fmt.DASH),
    ("addresses", "l", "addresses", str),
    ("verdict before", "l", "verdict_before", short),
    ("verdict after", "l", "verdict_after", short),
    ("why no verdict", "l", "verdict_after_why", lambda v: v if isinstance(v, str) else fmt.DASH),
    ("prediction rests on", "l", "time_basis", lambda v: v if isinstance(v, str) else fmt.DASH),
]  # fmt: skip


def render_html(doc: Mapping[str, Any], table: pd.DataFrame) -> str:
    """One self-contained page."""
    e = H.esc
    b = doc["baseline"]
    kv = {
        "run": doc["run"],
        "objective": doc["objective"],
        "config": config_text(b),
        "step": f"{_ms(b['step_ms'])} ms, {tps(b['tokens_per_s'])} tokens/s, peak "
        f"{fmt.nbytes(b['peak_bytes'])} ({b['peak_source']})",
        "verdict": f"{verdict_text(b)}; next lever: {b['next_lever'] or 'n/a'}",
    }
    kv["critical path" if b.get("critical_path_bound") else "host"] = _path(b) + (
        f"; {b['verdict_note']}" if b.get("verdict_note") else ""
    )
    rows = "".join(
        "<tr>" + "".join(f'<td class="{c}">{e(f(r.get(k)))}</td>' for _, c, k, f in _COLS) + "</tr>"
        for r in _with_interval(table)
    )
    head = "".join(f'<th class="{c}">{e(h)}</th>' for h, c, _, _ in _COLS)
    ev = "".join(
        f"<li><b>{e(r['lever'])}</b>: {e(r['error'] if r['status'] == 'skipped' else '')}"
        f"{'' if r['status'] == 'skipped' else 'time: ' + e(r['time_evidence'])}"
        f"{'' if r['status'] == 'skipped' else '<br>memory: ' + e(r['memory_evidence'])}</li>"
        for r in table.to_dict(orient="records")
    )
    combo = doc.get("combination") or {}
    search = combo.get("search") or {}
    steps = "".join(
        f"<li>{e('+'.join(st['levers']))}: x vs best {e(_iv_text(st.get('vs_best')))}; "
        f"{e('kept' if st['kept'] else st['why'])}</li>"
        for st in search.get("steps") or []
    )
    found = (
        f"<p>recommended: {e('+'.join(search['best']) or 'the baseline')}, "
        f"x{e(_iv_text(search.get('best_vs_baseline')))} against the baseline; stopped: "
        f"{e(search['stopped'])}</p><ul>{steps}</ul>"
        + "".join(f'<div class="warn">interaction: {e(x)}</div>' for x in search["interactions"])
        if search
        else ""
    )
    notes = "".join(f'<div class="warn">{e(n)}</div>' for n in doc.get("notes") or [])
    return (
        f"<!doctype html><html><head><meta charset='utf-8'>"
        f"<meta http-equiv='Content-Security-Policy' content=\"{H.CSP}\">"
        f"<title>tracekit advise: {e(doc['run'])}</title><style>{H.CSS}</style></head><body>"
        f"<h1>tracekit advise</h1>{H._kv(kv)}"
        f"<h2>Levers ranked by {e(doc['objective'])}</h2>"
        f"<div class='scroll'><table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody>"
        f"</table></div>"
        f"<h2>Best combination</h2><p>{e(combo.get('result', 'not measured (predictions only)'))}"
        f"</p>{found}<p class='note'>{e(combo.get('method', ''))}</p>"
        f"<h2>How each prediction was made</h2><ul>{ev}</ul>{notes}</body></html>"
    )


def _with_interval(table: pd.DataFrame) -> list[dict[str, Any]]:
    return [{**r, "interval": interval(r, long=True)} for r in table.to_dict(orient="records")]


def markdown(table: pd.DataFrame) -> str:
    """The ranked table as Markdown (TensorBoard's TEXT tab)."""
    head = "| " + " | ".join(h for h, _, _, _ in _COLS) + " |"
    sep = "| " + " | ".join("---" for _ in _COLS) + " |"
    body = [
        "| " + " | ".join(f(r.get(k)).replace("|", "/") for _, _, k, f in _COLS) + " |"
        for r in _with_interval(table)
    ]
    return "\n".join([head, sep, *body])


SCALARS = ("step_ms", "step_ratio", "tokens_per_s", "peak_bytes", "pred_step_ms",
           "pred_step_ratio", "pred_tokens_per_s", "pred_peak_bytes", "step_error_pct",
           "peak_error_pct")  # fmt: skip


def write_tensorboard(table: pd.DataFrame, logdir: Path) -> list[Path]:
    """A run per lever (``advise/<lever>``: its measured and predicted scalars, step 0) and
    the ranked table as text (run ``advise``)."""
    from tracekit.reports.tensorboard import write_event_file

    wall = time.time()
    out: list[Path] = []
    for r in table.to_dict(orient="records"):
        name = str(r["lever"]).replace("+", "_")

        def fill(w: Any, r: dict[str, Any] = r) -> None:
            for k in SCALARS:
                if _ok(r.get(k)):
                    w.scalar(f"advise/{k}", float(r[k]), 0, wall)

        out.append(write_event_file(Path(logdir) / name, fill))
    text = markdown(table)
    out.append(
        write_event_file(Path(logdir) / "advise", lambda w: w.text("advise/ranked", text, 0, wall))
    )
    return out


def write_outputs(doc: Mapping[str, Any], table: pd.DataFrame, out: Path) -> list[Path]:
    """``report/advise.html`` and the TensorBoard logdir in ``out``."""
    html_path = Path(out) / REPORT / HTML
    html_path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(html_path, render_html(doc, table))
    write_tensorboard(table, Path(out) / TENSORBOARD)
    return [html_path, Path(out) / TENSORBOARD]
