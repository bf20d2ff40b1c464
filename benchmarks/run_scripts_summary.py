"""Summarise ``tracekit run`` folders for benchmarks/gpu_run_scripts.sh: per run, the step
time measured by tracekit against the script's own (``--time``) step time from its log
(another process: one pair, which the host's drift from process to process can move by
tens of percent; ``benchmarks/run_overhead.py`` measures tracekit's cost in paired,
alternating rounds and on the same steps), the profiler's overhead, the
inputs tracekit inferred, the counters passes' wall time and the report's class table.

    python benchmarks/run_scripts_summary.py OUTDIR [RUNS_DIR]
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any


def _f(v: Any, fmt: str = ".3f") -> str:
    return "n/a" if v is None else format(v, fmt)


def plain_ms(log: Path) -> float | None:
    m = re.search(r"plain step ms: median ([0-9.]+)", log.read_text()) if log.exists() else None
    return float(m.group(1)) if m else None


def describe(run: Path, plain: float | None) -> list[str]:
    m = json.loads((run / "manifest.json").read_text())
    met = m.get("metrics") or {}
    opt = m.get("optimizer") or {}
    st = (met.get("step_time_ms") or {}).get("median")
    diff = (st / plain - 1) * 100 if st and plain else None
    lines = [
        f"== {run.name}: status {m['status']}, {m['model'].get('class')}, "
        f"{_f(m['model'].get('n_params'), ',')} parameters, optimizer {opt.get('classes')}, "
        f"state {_f((opt.get('state_bytes') or 0) / 2**20, '.1f')} MiB",
        f"   step {_f(st)} ms unprofiled (the script's own loop, another process: "
        f"{_f(plain)} ms, {_f(diff, '+.2f')} %); profiled {_f(met.get('profiled_step_time_ms'))} "
        f"ms (profiler {_f(met.get('profiler_overhead_pct'), '+.1f')} %)",
        f"   samples/s {_f(met.get('samples_per_s'), ',.1f')}, tokens/s "
        f"{_f(met.get('tokens_per_s'), ',.0f')}, peak allocated "
        f"{_f((met.get('peak_allocated_bytes') or 0) / 2**30, '.2f')} GiB; inputs "
        f"{json.dumps(m.get('inputs'))}",
    ]
    arts = m.get("artifacts") or {}
    lines.append(
        f"   light timeline pass {_f(met.get('timeline_step_time_ms'))} ms "
        f"({_f(met.get('timeline_overhead_pct'), '+.1f')} % vs unprofiled; "
        f"{arts.get('timeline_trace') or arts.get('timeline_trace_absent')}); memory by "
        f"category: {arts.get('memory_timeline_pass') or arts.get('memory_timeline_absent')}"
    )
    c = m.get("counters")
    if c:
        g = c.get("gemm") or {}
        lines.append(
            f"   counters: {c['profiled_launches']} launch configurations in "
            f"{c['replay_seconds']} s, {g.get('profiled_launches')} GEMM launches in "
            f"{g.get('replay_seconds')} s; ncu passes {c.get('replay_seconds_total')} s"
        )
    s = run / "report" / "summary.json"
    if s.exists():
        doc = json.loads(s.read_text())
        shares = sorted((doc.get("time_share_pct") or {}).items(), key=lambda kv: -(kv[1] or 0))
        lines.append("   time share %: " + ", ".join(f"{k} {v:.1f}" for k, v in shares if v))
        bound = doc.get("bound_time_share_pct") or {}
        lines.append("   bound %: " + ", ".join(f"{k} {_f(v, '.1f')}" for k, v in bound.items()))
        tl = doc.get("timeline") or {}
        lines.append(
            f"   report timeline: {tl.get('source')} pass, step {_f(tl.get('step_time_ms'))} ms, "
            f"{_f(tl.get('vs_unprofiled_pct'), '+.1f')} % vs unprofiled (faithful "
            f"{tl.get('faithful')}), matched {_f(tl.get('matched_pct'), '.1f')} %"
            + (f"; {tl['reason']}" if tl.get("reason") else "")
        )
    return lines


def main() -> None:
    out = Path(sys.argv[1])
    runs = Path(sys.argv[2]) if len(sys.argv) > 2 else Path("runs")
    for run in sorted(runs.glob("run-*")):
        if not (run / "manifest.json").exists():
            continue
        key = "resnet50" if "resnet" in run.name else "llama" if "llama" in run.name else "gpt2"
        print("\n".join(describe(run, plain_ms(out / f"plain-{key}.log"))))


if __name__ == "__main__":
    main()
