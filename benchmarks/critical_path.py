"""The critical path on traces: validation figures and the analysis time.

    python benchmarks/critical_path.py fixtures/h200-*            # the docs' validation table
    python benchmarks/critical_path.py /tmp/big.pt.trace.json --report   # timing, report's steps

For each trace (file, run folder or parsed folder): parse it, classify it, then run the
critical-path analysis, and print per analysed step the path's length against the traced
step time, the share of the path per class or kind of host time, each class's GPU time
off the path, the what-ifs and (run folders) the host speed-up that matches the unprofiled
step. Timing: wall and CPU seconds of the analysis (``--report``: as the report runs it, at
most 8 steps; otherwise every step) against the classify stage's on the same trace in the
same run (a stage the report already pays for), as a ratio.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("traces", nargs="+", type=Path)
    p.add_argument("--report", action="store_true", help="analyse as the report does")
    a = p.parse_args()
    sys.path.insert(0, str(ROOT))
    import pandas as pd

    import tracekit
    from tracekit.classify import classify
    from tracekit.summary import critical_path as CP

    assert Path(tracekit.__file__).resolve().parent == ROOT / "tracekit"
    pd.set_option("display.width", 200)
    for path in a.traces:
        t = tracekit.load(path)
        w, c = time.perf_counter(), time.process_time()
        cls = classify(t, manifest=t.manifest)
        base_w, base_c = time.perf_counter() - w, time.process_time() - c
        steps = sorted(int(s) for s in t.steps["step"] if int(s) >= 0)
        w, c = time.perf_counter(), time.process_time()
        cp = CP.for_report(t, cls, steps) if a.report else CP.analyse(t, cls)
        cp_w, cp_c = time.perf_counter() - w, time.process_time() - c
        if cp is None:
            print(f"== {path}: no GPU activity")
            continue
        s = cp.summary
        print(f"== {path.name}: {len(cp.steps)} step(s), {s.bound}-bound")
        cols = ["step", "path_ms", "traced_ms", "path_vs_traced_pct", "replay_exact_pct"]
        print(cp.per_step[cols].round(4).to_string(index=False))
        top = cp.on_path[cp.on_path["on_path_pct"] >= 0.05]
        print(top.round(3).to_string(index=False))
        print(cp.what_if[["scenario", "path_ms", "delta_pct"]].round(3).to_string(index=False))
        if cp.measured_ms is not None:
            k = "none" if cp.host_speedup is None else f"{cp.host_speedup:.3f}"
            print(f"unprofiled step {cp.measured_ms:.3f} ms: host speed-up {k}")
        print(
            f"time: critical path {cp_w:.3f} s wall, {cp_c:.3f} s CPU; classify {base_w:.3f} s "
            f"wall, {base_c:.3f} s CPU; ratio (CPU) {cp_c / max(base_c, 1e-9):.2f}"
        )


if __name__ == "__main__":
    main()
