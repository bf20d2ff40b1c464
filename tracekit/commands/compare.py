"""``tracekit compare A B``: both runs through the pipeline, their comparison, then render.

Each side is analysed by :func:`tracekit.compare.build.analyse_run` (the pipeline; a
multi-rank folder through :mod:`tracekit.jobs`), compared by
:func:`tracekit.compare.compare`, and written by :func:`tracekit.reports.compare.write`.
"""

from __future__ import annotations

from pathlib import Path

from tracekit.commands.report import stem
from tracekit.compare import compare
from tracekit.compare.build import analyse_run
from tracekit.io import readable_input
from tracekit.reports.compare import CompareResult, write


def _name(path: Path) -> str:
    return path.name if path.is_dir() else stem(path)


def default_out(a: Path, b: Path) -> Path:
    """``compare-<A>-vs-<B>/`` beside A."""
    a, b = Path(a), Path(b)
    return a.absolute().parent / f"compare-{_name(a)}-vs-{_name(b)}"


def run_compare(a: Path | str, b: Path | str, out: Path | str | None = None) -> CompareResult:
    """Load, classify and compare two runs, then write every output atomically."""
    pa, pb = Path(a), Path(b)
    readable_input(pa, pb)
    dest = Path(out) if out is not None else default_out(pa, pb)
    c = compare(*(analyse_run(p, dest.with_name(f"{dest.name}.ranks-{side}"))
                  for p, side in ((pa, "a"), (pb, "b"))))  # fmt: skip
    return write(c, dest)
