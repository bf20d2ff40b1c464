"""Recompute a finished sweep's table, fits, findings and plots from its run folders.

For a sweep collected on a GPU machine with an older tracekit (say, before a stage
was added): the run folders hold everything, so the analysis runs again here, on CPU.

    python benchmarks/sweep_reanalyse.py SWEEP_DIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tracekit.sweep import describe, finish
from tracekit.sweep.plan import Point
from tracekit.sweep.rows import run_row
from tracekit.sweep.runner import PLAN, _ceilings_for, read_table, write_table

KEEP = ("wall_s", "exit_code", "run_dir", "key", "status", "error", "oom_requested_bytes")


def main(out: Path) -> None:
    table = read_table(out)
    ceilings = json.loads((out / PLAN).read_text()).get("ceilings") or {}
    rows = []
    for r in table.to_dict("records"):
        p = Point(int(r["batch"]), int(r["seq"]), str(r["dtype"]), str(r["attention"]))
        d = out / str(r["run_dir"])
        if r["status"] == "ok" and (d / "manifest.json").is_file():
            new = run_row(
                p,
                d,
                json.loads((d / "manifest.json").read_text()),
                ceilings=_ceilings_for(ceilings, p),
            )
            new.update({k: r[k] for k in KEEP})
            rows.append(new)
        else:
            rows.append(r)
    t = write_table(out, rows)
    print(describe(t, finish(t, out)))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
