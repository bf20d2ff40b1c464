"""How tracekit gzips a trace against torch's own ``.gz`` export, on the same JSON.

    python benchmarks/trace_gzip.py                      # the fp32 fixture's trace
    python benchmarks/trace_gzip.py TRACE.json[.gz] --rounds 7

torch's ``profile.export_chrome_trace("x.json.gz")`` writes the JSON to a temporary file,
then copies it line by line into ``gzip.open(path, "wb")`` (level 9). tracekit has Kineto
write the plain JSON and gzips it in 1 MiB blocks at :data:`tracekit.io.GZIP_LEVEL`
(:func:`tracekit.io.gzip_file`). Both sides compress the same file, alternating within
each round; the ratio printed is the median of the per-round ratios (torch / tracekit).
"""

from __future__ import annotations

import argparse
import gzip
import statistics
import tempfile
import time
from pathlib import Path

from tracekit.io import GZIP_LEVEL, gzip_file

ROOT = Path(__file__).resolve().parents[1]


def torch_way(src: Path, dst: Path) -> None:
    """What torch.profiler.profile.export_chrome_trace does with a ``.gz`` path."""
    with open(src, "rb") as fin, gzip.open(dst, "wb") as fout:
        fout.writelines(fin)


def _timed(fn: object, src: Path, dst: Path) -> float:
    t = time.perf_counter()
    fn(src, dst)  # type: ignore[operator]
    return time.perf_counter() - t


def main() -> None:
    default = next((ROOT / "fixtures" / "h200-gpt2s-b8-s128-fp32-naive").glob("*.pt.trace.json.gz"))
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("trace", type=Path, nargs="?", default=default)
    p.add_argument("--rounds", type=int, default=5)
    a = p.parse_args()
    data = a.trace.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    with tempfile.TemporaryDirectory() as d:
        src, ours, theirs = Path(d) / "t.json", Path(d) / "a.gz", Path(d) / "b.gz"
        src.write_bytes(data)
        ratios, t_ours, t_theirs = [], [], []
        for i in range(a.rounds):  # alternating order: ABBA...
            pair = [(gzip_file, ours, t_ours), (torch_way, theirs, t_theirs)]
            for fn, dst, acc in pair if i % 2 == 0 else pair[::-1]:
                acc.append(_timed(fn, src, dst))
            ratios.append(t_theirs[-1] / t_ours[-1])
        assert gzip.decompress(ours.read_bytes()) == data == gzip.decompress(theirs.read_bytes())
        mb = len(data) / 1e6
        print(f"{a.trace.name}: {mb:.1f} MB of JSON, {a.rounds} rounds")
        print(
            f"  torch .gz export (level 9, per line): {statistics.median(t_theirs):.3f} s, "
            f"{theirs.stat().st_size / 1e6:.2f} MB"
        )
        print(
            f"  tracekit gzip_file (level {GZIP_LEVEL}, 1 MiB blocks): "
            f"{statistics.median(t_ours):.3f} s, {ours.stat().st_size / 1e6:.2f} MB"
        )
        print(
            f"  time ratio torch / tracekit: {statistics.median(ratios):.2f}x; size ratio "
            f"tracekit / torch: {ours.stat().st_size / theirs.stat().st_size:.3f}"
        )


if __name__ == "__main__":
    main()
