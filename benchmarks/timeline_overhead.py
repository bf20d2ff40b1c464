"""What each profiled pass of ``tracekit collect`` costs the step, and the category memory.

``tracekit collect`` times the step without the profiler, then records it twice: a light
timeline pass (CUDA activity only) and the full pass (shapes, memory, FLOPs), then one
more step with stacks for the memory by category (``collectors/passes.py``). This script
runs ``collect`` (its defaults: schedule wait 1, warmup 1, active 2; 5 warm-up and 20
timed steps) for each configuration and prints, all measured in the same run:

* the unprofiled step (median of the timed steps, CUDA events);
* the light and the full pass's step (median of their recorded steps, CUDA events) and
  their ratio to the unprofiled step (the issue's target: the light pass within 10 %);
* the light and the full trace's step as ``tracekit report`` reads it (max of the host
  span between step markers or ``ProfilerStep``s and the GPU span) and the report's
  ``timeline`` verdict: which pass it used, its join, faithful or not;
* the memory by category at the category step's peak (PyTorch's categories), beside the
  measured peak allocated and the analytic memory model.

    python benchmarks/timeline_overhead.py                  # CUDA: fp32-naive, bf16-sdpa
    python benchmarks/timeline_overhead.py --rounds 5       # 5 collects each, alternating
    python benchmarks/timeline_overhead.py --device cpu --preset tiny --batch 2 --seq 32 \\
        --steps 3 --warmup 1                                # smoke (no light pass on CPU)

With ``--rounds N`` each configuration is collected N times (the configurations
alternating, so that drift in the host's speed reaches both alike) and a last block gives,
per configuration, the median and range over the rounds of each pass's ratio to its own
run's unprofiled step: one collect compares two windows a second apart, and a step whose
host and GPU time are close moves with the host's speed between them.

Device ceilings are not measured (``--no-ceilings``): they do not change the step and cost
time. ``--keep DIR`` keeps the run folders (for ``tracekit report``).
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

from tracekit.collectors.collect import collect
from tracekit.collectors.config import CollectConfig
from tracekit.collectors.profiler import ProfilerConfig
from tracekit.parse import load
from tracekit.summary import trace_facts

CONFIGS = {"fp32-naive": ("fp32", "naive"), "bf16-sdpa": ("bf16", "sdpa")}


def _ms(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.2f} ms"


def _ms_x(v: float | None, base: float | None) -> str:
    """A step and its ratio to the unprofiled one."""
    if v is None:
        return "n/a"
    return f"{v:.2f} ms (x{v / base:.3f})" if base else f"{v:.2f} ms"


def _gib(v: float | None) -> str:
    if v is None:
        return "n/a"
    return f"{v / 2**30:.3f} GiB" if v >= 2**30 else f"{v / 2**20:.1f} MiB"


def run_one(name: str, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """Collect one configuration; its manifest's metrics and the report's facts."""
    dtype, attention = CONFIGS[name]
    cfg = CollectConfig(
        preset=args.preset, device=args.device, dtype=dtype, attention=attention,
        batch=args.batch, seq=args.seq, steps=args.steps, warmup=args.warmup,
        ceilings=False, quiet=True, out=out / name,
        profiler=ProfilerConfig(active=args.active),
    )  # fmt: skip
    run_dir = collect(cfg)
    trace = load(run_dir)
    facts = trace_facts(trace)
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    assert trace.manifest is not None
    return {"name": name, "run": run_dir, "metrics": trace.manifest["metrics"], "facts": facts}


def report(r: dict[str, Any]) -> list[str]:
    met, f = r["metrics"], r["facts"]
    tf, mf = f.timeline_facts, f.memory_facts
    base = float(met["step_time_ms"]["median"])
    light, full = met.get("timeline_step_time_ms"), met.get("profiled_step_time_ms")
    lines = [
        f"{r['name']}: unprofiled {_ms(base)}; light pass {_ms_x(light, base)}; "
        f"full pass {_ms_x(full, base)}",
        f"  traces (as the report reads them): light {_ms_x(tf.light_step_time_ms, base)}, "
        f"full {_ms_x(tf.full_step_time_ms, base)}",
    ]
    if tf.source == "light":
        pct = tf.vs_unprofiled_pct
        lines.append(
            f"  report timeline: light pass, {pct:+.1f} % vs unprofiled "
            f"({'within' if tf.faithful else 'NOT within'} 10 %), "
            f"{tf.matched_pct:.1f} % of GPU activities joined"
        )
    else:
        lines.append(f"  report timeline: full pass ({tf.reason})")
    cats = mf.category_peak or {}
    if cats:
        top = sorted(cats.items(), key=lambda kv: -kv[1])
        lines.append(
            "  memory by category at the peak: "
            + ", ".join(f"{k} {_gib(v)}" for k, v in top if v > 0)
            + f"; total {_gib(sum(cats.values()))}"
        )
    else:
        lines.append("  memory by category: none recorded")
    peak = met.get("peak_allocated_bytes")
    model = mf.model.peak if mf.model is not None else None
    err = f" ({100 * (model - peak) / peak:+.1f} %)" if model and peak else ""
    lines.append(f"  peak allocated {_gib(peak)} (unprofiled); analytic model {_gib(model)}{err}")
    return lines


def _ratios(r: dict[str, Any]) -> dict[str, float | None]:
    """One run's passes against its own unprofiled step (None where a pass is missing)."""
    met, tf = r["metrics"], r["facts"].timeline_facts
    base = float(met["step_time_ms"]["median"])
    light, full = met.get("timeline_step_time_ms"), met.get("profiled_step_time_ms")
    return {
        "light": light / base if light else None,
        "full": full / base if full else None,
        "report": 1 + tf.vs_unprofiled_pct / 100 if tf.source == "light" else None,
    }


def rounds_summary(runs: list[dict[str, Any]]) -> list[str]:
    """Per configuration: each ratio's median and range over the rounds."""
    lines = [f"over {len(runs) // len({r['name'] for r in runs})} rounds (median [min-max]):"]
    for name in dict.fromkeys(r["name"] for r in runs):
        per = [_ratios(r) for r in runs if r["name"] == name]
        parts = []
        for key, label in (("light", "light pass"), ("report", "light trace"), ("full", "full")):
            vals = sorted(v for p in per if (v := p[key]) is not None)
            if vals:
                med = statistics.median(vals)
                parts.append(f"{label} x{med:.3f} [{vals[0]:.3f}-{vals[-1]:.3f}]")
        if any(p["report"] is not None for p in per):
            within = sum(1 for p in per if p["report"] is not None and p["report"] <= 1.10)
            parts.append(f"light trace within 10 % in {within} of {len(per)}")
        else:
            parts.append("no light pass")
        lines.append(f"  {name}: " + "; ".join(parts))
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--preset", default="gpt2-small")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--steps", type=int, default=20, help="timed unprofiled steps")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--active", type=int, default=2, help="recorded steps per pass")
    p.add_argument("--configs", default=",".join(CONFIGS), help="of " + ", ".join(CONFIGS))
    p.add_argument("--rounds", type=int, default=1, help="collects per configuration")
    p.add_argument("--keep", type=Path, default=None, help="keep the run folders here")
    args = p.parse_args(argv)
    names = [c for c in args.configs.split(",") if c]
    if unknown := [c for c in names if c not in CONFIGS]:
        p.error(f"unknown configuration(s): {', '.join(unknown)}")
    dev = torch.cuda.get_device_name() if args.device == "cuda" else args.device
    print(
        f"timeline overhead: {dev}, torch {torch.__version__}, {args.preset} b{args.batch} "
        f"s{args.seq}; collect defaults (wait 1, warmup 1, active {args.active}; "
        f"{args.warmup} warm-up, {args.steps} timed steps), ceilings off"
    )
    if args.rounds < 1:
        p.error("--rounds must be >= 1")
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        out = args.keep or Path(tmp)
        for k in range(args.rounds):
            for name in names:
                where = out / f"round{k}" if args.rounds > 1 else out
                runs.append(run_one(name, args, where))
                for line in report(runs[-1]):
                    print(line, flush=True)
    if args.rounds > 1:
        print("\n".join(rounds_summary(runs)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
