"""``tracekit parse`` and ``tracekit classify`` on a folder of a job's rank traces: every
rank's tables (``<out>/rank<R>/``), one line per rank. Each returns None for a path that is
not a multi-rank folder (the command then does what it does for one trace)."""

from __future__ import annotations

from pathlib import Path

from tracekit.ranks.discover import RankSet, discover


def _ranks(path: Path) -> RankSet | None:
    return discover(Path(path)) if Path(path).is_dir() else None


def _head(ranks: RankSet) -> list[str]:
    head = [
        f"{len(ranks.traces)} of {ranks.world_size} ranks"
        + (f" ({ranks.backend})" if ranks.backend else "")
        + f" in {ranks.folder}"
    ]
    return head + [f"note: {n}" for n in ranks.notes]


def parse_ranks(path: Path, out: Path | None = None) -> str | None:
    """Parse every rank's trace into ``out/rank<R>/`` (default ``FOLDER/tables/``)."""
    from tracekit.parse import parse_to_dir

    ranks = _ranks(path)
    if ranks is None:
        return None
    dest = Path(out) if out is not None else Path(path) / "tables"
    lines = _head(ranks)
    for r, t in sorted(ranks.traces.items()):
        lines.append(f"rank {r}: " + parse_to_dir(t.path, dest / f"rank{r}").describe())
    return "\n".join(lines)


def classify_ranks(
    path: Path,
    out: Path | None = None,
    *,
    peak_tflops: float | None = None,
    bandwidth_gbs: float | None = None,
) -> str | None:
    """Classify every rank's trace into ``out/rank<R>/`` (default ``FOLDER/classify/``); a
    run folder's manifest (rank 0's device ceilings) applies to every rank."""
    from tracekit.analyse import Options, analyse, load_run
    from tracekit.classify.output import describe, write_classification

    ranks = _ranks(path)
    if ranks is None:
        return None
    dest = Path(out) if out is not None else Path(path) / "classify"
    lines = _head(ranks)
    for r, t in sorted(ranks.traces.items()):
        trace = load_run(t.path, cpu=False)
        trace.manifest = ranks.manifest
        opts = Options(peak_tflops=peak_tflops, bandwidth_gbs=bandwidth_gbs)
        result = analyse(trace, opts, summarise=False).classification  # with the traffic estimate
        text = describe(result, write_classification(result, dest / f"rank{r}"))
        lines.append(f"rank {r}:")
        lines.extend(f"  {x}" for x in text.splitlines())
    return "\n".join(lines)
