"""Whether two checkouts of tracekit reduce the same map results to the same summary: every
field of the ``RanksSummary`` (frames: values bit for bit, dtypes, indexes, column order;
the job view's and the clock's fields, recursively) and the ``summary.json`` ``ranks``
block, compared exactly.

WORK holds ``job<N>/`` and ``out<N>/`` as ``ranks_scale.py --keep WORK`` leaves them; each
reduce runs in a process of its own with that checkout first on the path (``--first K``:
the reduce of the first K ranks of the smallest job, as ``reduce_ab.py --fixed-ranks``).

    python benchmarks/reduce_same.py WORK --ranks 64 256 1024 --first 8 --tree OTHER_CHECKOUT
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import pickle
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]


def plain(v: Any) -> Any:
    """Dataclasses as dicts of their fields (and properties), paths as text; frames kept."""
    if isinstance(v, (pd.DataFrame, pd.Series, np.ndarray)):
        return v
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        d = {f.name: plain(getattr(v, f.name)) for f in dataclasses.fields(v)}
        for p in ("named_ranks", "timeline_source", "timeline_words"):
            if hasattr(type(v), p):
                d["@" + p] = plain(getattr(v, p))
        return d
    if isinstance(v, dict):
        return {k: plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return type(v)(plain(x) for x in v)
    return str(v) if isinstance(v, Path) else v


def child(work: Path, n: int, first: int, out: Path) -> None:
    """Reduce WORK/out<n> (its first ``first`` ranks if not 0) with the tracekit on the path."""
    from tracekit.ranks.discover import discover
    from tracekit.ranks.document import ranks_json
    from tracekit.ranks.reduce import reduce

    ranks = discover(work / f"job{n}")
    assert ranks is not None
    keep = [r for r in ranks.ranks if not first or r < first]
    res = work / f"out{n}"
    dirs = {r: res / f"rank{r}" for r in keep if (res / f"rank{r}" / "rank.json").is_file()}
    s = reduce(
        dirs, world_size=len(keep) if first else ranks.world_size, backend=ranks.backend,
        hosts={r: ranks.traces[r].host for r in dirs},
        damaged={r: f"rank {r}: not analysed" for r in keep if r not in dirs},
    )  # fmt: skip
    got = plain(s)
    got.pop("dirs")
    doc = json.dumps(ranks_json(s), sort_keys=True)
    out.write_bytes(pickle.dumps({"summary": got, "json": doc}))


def _frames(a: Any, b: Any, where: str) -> list[str]:
    try:
        if isinstance(a, pd.DataFrame):
            pd.testing.assert_frame_equal(a, b, check_exact=True, check_index_type=True,
                                          check_column_type=True)  # fmt: skip
            cols = [c for c in a.columns if a[c].dtype.kind == "f"]
            return [f"{where}[{c}]: float bits differ" for c in cols
                    if not np.array_equal(a[c].to_numpy().view(np.int64),
                                          b[c].to_numpy().view(np.int64))]  # fmt: skip
        pd.testing.assert_series_equal(a, b, check_exact=True, check_index_type=True)
    except AssertionError as e:
        return [f"{where}: {str(e)[:300]}"]
    return []


def differences(a: Any, b: Any, where: str = "summary") -> list[str]:
    """Every field where ``a`` and ``b`` differ (floats bit for bit, NaN equal to NaN)."""
    if type(a) is not type(b):
        return [f"{where}: {type(a).__name__} vs {type(b).__name__}"]
    if isinstance(a, (pd.DataFrame, pd.Series)):
        return _frames(a, b, where)
    if isinstance(a, np.ndarray):
        same = a.dtype == b.dtype and np.array_equal(a, b, equal_nan=a.dtype.kind == "f")
        return [] if same else [f"{where}: arrays differ"]
    if isinstance(a, dict):
        out = [] if list(a) == list(b) else [f"{where}: keys {list(a)} vs {list(b)}"]
        return out + [d for k in a if k in b for d in differences(a[k], b[k], f"{where}.{k}")]
    if isinstance(a, (list, tuple)):
        if len(a) != len(b):
            return [f"{where}: {len(a)} vs {len(b)} items"]
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True))
                for d in differences(x, y, f"{where}[{i}]")]  # fmt: skip
    if isinstance(a, float) and math.isnan(a) and math.isnan(b):
        return []
    if isinstance(a, float) and (a != b or math.copysign(1, a) != math.copysign(1, b)):
        return [f"{where}: {a!r} vs {b!r}"]
    return [] if a == b else [f"{where}: {a!r:.100} vs {b!r:.100}"]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        child(Path(argv[1]), int(argv[2]), int(argv[3]), Path(argv[4]))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("work", type=Path)
    ap.add_argument("--ranks", type=int, nargs="+", default=[64, 256, 1024])
    ap.add_argument("--first", type=int, default=8)
    ap.add_argument("--tree", type=Path, required=True, help="the other checkout")
    a = ap.parse_args(argv)
    cases = [(min(a.ranks), a.first)] if a.first else []
    cases += [(n, 0) for n in sorted(a.ranks)]
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        for n, first in cases:
            got = []
            for i, tree in enumerate((ROOT, a.tree.resolve())):
                out = Path(tmp) / f"{n}_{first}_{i}.pickle"
                env = dict(os.environ, PYTHONPATH=str(tree))
                subprocess.run([sys.executable, __file__, "--child", str(a.work), str(n),
                                str(first), str(out)], env=env, check=True)  # fmt: skip
                got.append(pickle.loads(out.read_bytes()))
            diff = differences(got[0]["summary"], got[1]["summary"])
            if got[0]["json"] != got[1]["json"]:
                diff.append("summary.json ranks block differs")
            name = f"first {first} of {n}" if first else f"{n} ranks"
            print(f"{name}: {'identical' if not diff else f'{len(diff)} differences'}")
            for d in diff[:20]:
                print(f"  {d}")
            bad += bool(diff)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
