"""Does a script run as fast under ``tracekit run`` as alone, once tracekit's passes are done?

For each script, pairs of fresh processes in alternating order (alone, under; under, alone;
…), so that the host's drift hits both sides alike:

* **alone**: ``python SCRIPT --iters N --time --warmup F``: the script times its own steps
  ``F``-``N`` (CUDA events at each optimizer step's end, ``plain step ms: median X``);
* **under**: ``tracekit run --run-on -- python SCRIPT …`` with tracekit's defaults: the
  script runs to its end and times the same steps itself, which come after tracekit's whole
  schedule (warm-up, timed steps, light, full and category passes, snapshot, residual check,
  the light pass's cost rounds: 86 steps on CUDA), where nothing of tracekit's runs.

Prints each pair, then per script the paired ratio under/alone (median of the pairs with
their min-max), tracekit's own statement of the residual in each run (its ``observer``
block: the steps timed after the passes against those before them) and its unprofiled step
against the script's own alone::

    python benchmarks/observer_effect.py --pairs 5                      # on a GPU
    python benchmarks/observer_effect.py --scripts vit --pairs 5 --iters 130 --from 95
    python benchmarks/observer_effect.py --device cpu --scripts mlp --pairs 2   # CPU check
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = {
    "vit": ["benchmarks/user_scripts/vit_train.py"],
    "resnet50": ["benchmarks/user_scripts/resnet50_train.py"],
    "gpt2": ["benchmarks/user_scripts/hf_causal_lm_train.py"],
    "llama": ["benchmarks/user_scripts/hf_causal_lm_train.py", "--model", "llama"],
    "mlp": ["tests/scripts/mlp.py"],  # CPU check only (times itself with --time)
}
OWN = re.compile(r"plain step ms: median ([0-9.]+)")


def _own_ms(text: str) -> float | None:
    m = OWN.search(text)
    return float(m.group(1)) if m else None


def _alone(script: list[str], tail: list[str]) -> float | None:
    p = subprocess.run([sys.executable, *script, *tail], cwd=ROOT, capture_output=True,
                       text=True, timeout=600)  # fmt: skip
    return _own_ms(p.stdout)


def _under(script: list[str], tail: list[str], out: Path, extra: list[str]) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "tracekit.cli", "run", "--run-on", "-q", *extra, "-o", str(out),
           "--", "python", *script, *tail]  # fmt: skip
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    got: dict[str, Any] = {"own_ms": _own_ms(p.stdout), "rc": p.returncode}
    try:
        m = json.loads((out / "manifest.json").read_text())
    except (OSError, ValueError):
        got["error"] = (p.stderr.strip().splitlines() or ["no manifest"])[-1]
        return got
    obs = m.get("observer") or {}
    res = obs.get("residual") or {}
    met = m.get("metrics") or {}
    got.update(
        tracekit_ms=(met.get("step_time_ms") or {}).get("median"),
        residual_pct=res.get("pct"),
        residual_ci=[(res["lo"] - 1) * 100, (res["hi"] - 1) * 100] if res else None,
        drift_pct=res.get("drift_pct"),  # the drift between windows the interval holds
        left_behind=obs.get("left_behind"),
        cupti=(obs.get("cupti_teardown") or {}).get("why"),
        light_pct=met.get("timeline_overhead_pct"),
        light_basis=met.get("timeline_overhead_basis"),
    )
    return got


def _pairs(name: str, args: argparse.Namespace, tmp: Path) -> list[dict[str, Any]]:
    script = SCRIPTS[name]
    tail = ["--iters", str(args.iters), "--time", "--warmup", str(args.start)]
    if args.device == "cpu" and name != "mlp":  # tests/scripts/mlp.py runs on the CPU
        tail += ["--device", "cpu"]
    extra = args.tracekit_args.split() if args.tracekit_args else []
    rows = []
    for i in range(args.pairs):
        if args.deadline and time.monotonic() > args.deadline:
            print(f"{name}: stopped after {i} pairs (--max-seconds)", flush=True)
            break
        row: dict[str, Any] = {"script": name, "pair": i}
        for side in ("alone", "under") if i % 2 == 0 else ("under", "alone"):
            t0 = time.perf_counter()
            if side == "alone":
                row["alone_ms"] = _alone(script, tail)
            else:
                row.update(_under(script, tail, tmp / f"{name}-{i}", extra))
            row[f"{side}_wall_s"] = round(time.perf_counter() - t0, 1)
        if row.get("alone_ms") and row.get("own_ms"):
            row["ratio"] = row["own_ms"] / row["alone_ms"]
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def _median_ci(xs: list[float], seed: int = 0) -> tuple[float, float]:
    """A 90 % bootstrap interval of the median of ``xs`` (the pairs' ratios)."""
    import random

    rng = random.Random(seed)
    boots = sorted(statistics.median(rng.choices(xs, k=len(xs))) for _ in range(4000))
    return boots[200], boots[3799]


def _span(xs: list[float], fmt: str) -> str:
    return f"{format(statistics.median(xs), fmt)} [{format(min(xs), fmt)}-{format(max(xs), fmt)}]"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scripts", default="vit,gpt2,resnet50")
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--iters", type=int, default=120, help="the script's steps")
    ap.add_argument(
        "--from",
        dest="start",
        type=int,
        default=90,
        help="the script times its steps from this one (after tracekit's schedule)",
    )
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tracekit-args", default="", help="more options for tracekit run")
    ap.add_argument("--max-seconds", type=float, default=0,
                    help="start no pair after this many seconds (0: no limit)")  # fmt: skip
    args = ap.parse_args()
    args.deadline = time.monotonic() + args.max_seconds if args.max_seconds else 0.0
    with tempfile.TemporaryDirectory() as d:
        got = {n: _pairs(n, args, Path(d)) for n in args.scripts.split(",")}
    print("\nscript    pairs  under/alone median [min-max]  tracekit's residual % per run"
          "                 tracekit unprofiled / alone")  # fmt: skip
    pooled: list[float] = []
    for name, rows in got.items():
        ratios = [r["ratio"] for r in rows if "ratio" in r]
        pooled += ratios
        res = [r.get("residual_pct") for r in rows]
        mine = [r["tracekit_ms"] / r["alone_ms"] for r in rows
                if r.get("tracekit_ms") and r.get("alone_ms")]  # fmt: skip
        print(f"{name:<9} {len(ratios):>5}  x{_span(ratios, '.3f') if ratios else 'n/a':<26}  "
              f"{', '.join('n/a' if x is None else f'{x:+.1f}' for x in res):<38}  "
              f"x{_span(mine, '.3f') if mine else 'n/a'}")  # fmt: skip
        if len(ratios) >= 2:
            lo, hi = _median_ci(ratios)
            print(f"{'':<9} 90 % bootstrap interval of the median pair: x{lo:.3f}-x{hi:.3f}")
    if len(got) > 1 and len(pooled) >= 2:
        lo, hi = _median_ci(pooled)
        print(f"all scripts, {len(pooled)} pairs: median x{statistics.median(pooled):.3f} "
              f"[90 % bootstrap x{lo:.3f}-x{hi:.3f}]")  # fmt: skip


if __name__ == "__main__":
    main()
