"""Which traces of a folder are the ranks of one job.

A folder (a ``tracekit collect --gpus N`` run, ``tensorboard_trace_handler`` output, HTA's
test data, any tool's rank traces) is read as one job's ranks when at least two of its
traces name a rank. A trace's rank comes from its header's ``distributedInfo.rank``
(Kineto writes it for every process of a ``torch.distributed`` job), else from its file
name (``rank3``, ``rank-3``, ``rank_3``, ``_rank_3``, ``sampled_rank-3``). Only the header is
read (the keys before ``traceEvents``), so discovery costs a few kB per trace.

What is refused, with one line naming the files (never a silent pick):

* traces of different jobs: different world sizes (``distributedInfo.world_size``), or the
  same ranks twice under different file-name patterns — each group is named;
* a rank that appears twice (two jobs, or two profiling cycles, in one folder);
* a trace that names no rank beside traces that do.

A missing rank (world size 8, ranks 0-3 present; HTA's sampled traces) is analysed as
given and said in :attr:`RankSet.notes`; a trace without ``distributedInfo`` gets its rank
from its name, and that is said too. A run folder's manifest lists its ranks' traces
(``distributed.ranks[R].artifacts``): they are taken from there (the first of each rank's
traces with ``--profile-repeat``).
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tracekit.errors import TraceError, TracekitError
from tracekit.manifest import manifest_or_empty
from tracekit.parse import TRACE_SUFFIXES
from tracekit.parse.reader import TraceStream

RANK_IN_NAME = re.compile(r"(?i)(?:^|[^a-z0-9])rank[-_]?(\d+)(?![0-9])")
# files of a tracekit run folder that end like traces but are not (collectors/profiler.py)
SIDE_FILES = (".profiler_flops.json", ".memory_timeline.json")
NOT_TRACES = frozenset({"manifest.json", "meta.json", "summary.json", "compare.json"})


@dataclass(frozen=True)
class RankTrace:
    """One rank's trace. ``rank_from``: 'distributedInfo', 'file name' or 'manifest'."""

    rank: int
    path: Path
    rank_from: str
    world_size: int | None
    backend: str | None
    host: str | None
    pg_count: int | None = None


@dataclass
class RankSet:
    """The ranks of one job found in ``folder`` (rank -> trace, in rank order)."""

    folder: Path
    traces: dict[int, RankTrace]
    world_size: int
    backend: str | None
    manifest: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)
    damaged: dict[int, str] = field(default_factory=dict)  # rank -> why its trace is unread

    @property
    def ranks(self) -> list[int]:
        return sorted(self.traces)

    @property
    def missing(self) -> list[int]:
        return [r for r in range(self.world_size) if r not in self.traces | self.damaged]

    def inputs(self) -> dict[int, Path]:
        """rank -> trace path (what the per-rank work runs over)."""
        return {r: self.traces[r].path for r in self.ranks}


def rank_from_name(name: str) -> int | None:
    """The rank a file name spells (``rank3.host_1.2.pt.trace.json``, ``rank-3.json.gz``)."""
    m = RANK_IN_NAME.search(name)
    return int(m.group(1)) if m else None


def _is_candidate(p: Path) -> bool:
    name = p.name
    if not p.is_file() or name in NOT_TRACES or name.startswith("."):
        return False
    if any(s in name for s in SIDE_FILES):
        return False
    return name.endswith(TRACE_SUFFIXES)


def candidates(folder: Path) -> list[Path]:
    """The files of ``folder`` that may be traces (``*.json`` and compressed variants)."""
    return sorted(p for p in folder.iterdir() if _is_candidate(p))


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


class NotATrace(Exception):
    """A candidate file that is not a trace (a stray JSON file beside the traces)."""


def read_rank(path: Path, *, strict: bool = True) -> RankTrace | None:
    """The rank of one trace from its header, else its name; None when it names none.
    A file that is not a trace raises its one-line TraceError, or, unless ``strict`` and
    when nothing says it is a rank trace, :class:`NotATrace`."""
    try:
        head = TraceStream(path).read_header()
    except TraceError:
        if strict or rank_from_name(path.name) is not None or ".pt.trace." in path.name:
            raise
        raise NotATrace(str(path)) from None
    info = head.get("distributedInfo")
    info = info if isinstance(info, dict) else {}
    rank, how = _int(info.get("rank")), "distributedInfo"
    if rank is None:
        rank, how = rank_from_name(path.name), "file name"
    if rank is None:
        return None
    host = head.get("host_name")
    return RankTrace(
        rank=rank,
        path=path,
        rank_from=how,
        world_size=_int(info.get("world_size")),
        backend=str(info["backend"]) if isinstance(info.get("backend"), str) else None,
        host=str(host) if isinstance(host, str) else None,
        pg_count=_int(info.get("pg_count")),
    )


def _scan(files: list[Path]) -> tuple[list[RankTrace], list[Path], dict[int, str]]:
    """(rank traces, traces that name no rank, damaged: rank -> one line) among ``files``;
    non-traces are skipped. A trace whose header cannot be read but whose name spells a
    rank is that rank, damaged."""
    found: list[RankTrace] = []
    unranked: list[Path] = []
    damaged: dict[int, str] = {}
    for p in files:
        try:
            t = read_rank(p, strict=False)
        except NotATrace:
            continue
        except TraceError as e:
            rank = rank_from_name(p.name)
            if rank is None:
                raise
            damaged[rank] = f"rank {rank} ({p}): {e}" if str(p) not in str(e) else str(e)
            continue
        if t is None:
            unranked.append(p)
        else:
            found.append(t)
    return found, unranked, damaged


def _manifest(folder: Path) -> dict[str, Any] | None:
    p = folder / "manifest.json"
    if not p.is_file():
        return None
    try:
        m = json.loads(p.read_text())
    except (OSError, ValueError) as e:
        raise TraceError(f"{p}: unreadable manifest ({e})") from None
    return m if isinstance(m, dict) else None


def _from_manifest(folder: Path, manifest: dict[str, Any]) -> list[RankTrace] | None:
    """The ranks' first traces as the manifest of a multi-GPU run lists them."""
    dist = manifest_or_empty(manifest).distributed
    ranks = dist.ranks if dist is not None else []
    if len(ranks) < 2:
        return None
    out: list[RankTrace] = []
    for entry in ranks:
        arts = entry.get("artifacts") if isinstance(entry, dict) else None
        rel = arts.get("trace") if isinstance(arts, dict) else None
        rank = _int(entry.get("rank")) if isinstance(entry, dict) else None
        if rank is None or not isinstance(rel, str) or not (folder / rel).is_file():
            continue  # a rank that failed before writing its trace
        got = read_rank(folder / rel, strict=True)
        if got is not None and got.rank != rank:
            raise TraceError(
                f"{folder / rel}: the manifest lists it as rank {rank}, its "
                f"{got.rank_from} says rank {got.rank}"
            )
        out.append(got or RankTrace(rank, folder / rel, "manifest", None, None, None))
    return out


def _label(group: list[RankTrace]) -> str:
    names = ", ".join(t.path.name for t in sorted(group, key=lambda t: t.rank)[:4])
    more = f" and {len(group) - 4} more" if len(group) > 4 else ""
    return names + more


def _template(t: RankTrace) -> str:
    """The file name with its digits hidden: one job's ranks share it."""
    return re.sub(r"\d+", "#", t.path.name)


def _one_job(folder: Path, found: list[RankTrace]) -> list[RankTrace]:
    """The traces of one job, or a one-line error naming the groups."""
    sizes = {t.world_size for t in found if t.world_size is not None}
    if len(sizes) > 1:
        by: dict[int | None, list[RankTrace]] = defaultdict(list)
        for t in found:
            by[t.world_size].append(t)
        groups = "; ".join(
            f"world size {w if w is not None else 'unknown'}: {_label(g)}"
            for w, g in sorted(by.items(), key=lambda kv: (kv[0] is None, kv[0] or 0))
        )
        raise TracekitError(
            f"{folder}: traces of different jobs ({groups}): point tracekit at one job's traces"
        )
    seen: dict[int, list[RankTrace]] = defaultdict(list)
    for t in found:
        seen[t.rank].append(t)
    dups = {r: g for r, g in seen.items() if len(g) > 1}
    if not dups:
        return found
    templates: dict[str, list[RankTrace]] = defaultdict(list)
    for t in found:
        templates[_template(t)].append(t)
    if len(templates) > 1 and all(len({t.rank for t in g}) == len(g) for g in templates.values()):
        groups = "; ".join(f"{_label(g)}" for _, g in sorted(templates.items()))
        raise TracekitError(
            f"{folder}: traces of different jobs ({groups}): point tracekit at one job's traces"
        )
    r, g = min(dups.items())
    raise TracekitError(
        f"{folder}: rank {r} appears in {len(g)} traces ({_label(g)}): traces of two jobs or "
        "two profiling cycles in one folder; keep one trace per rank"
    )


def discover(path: Path) -> RankSet | None:
    """The ranks of ``path`` (a folder), or None when it holds fewer than two rank traces
    (then it is a single-trace folder, read as before). Raises a one-line
    :class:`TracekitError` for the bad inputs of the module's docstring."""
    folder = Path(path)
    if not folder.is_dir() or (folder / "meta.json").is_file():
        return None
    manifest = _manifest(folder)
    notes: list[str] = []
    listed = _from_manifest(folder, manifest) if manifest else None
    damaged: dict[int, str] = {}
    if listed is not None:
        found = listed
        repeat = manifest_or_empty(manifest).config.profiler
        if isinstance(repeat, dict) and (_int(repeat.get("repeat")) or 1) > 1:
            notes.append("the run has several profiling cycles per rank: the first is analysed")
    else:
        found, unranked, damaged = _scan(candidates(folder))
        if len(found) >= 2 and unranked:
            raise TracekitError(
                f"{folder}: {unranked[0].name} names no rank (no distributedInfo, no rank in "
                f"its name) beside {len(found)} rank traces: move it out of the folder"
            )
    if len(found) < 2:
        return None
    found = _one_job(folder, found)
    return _rank_set(folder, found, manifest, notes, damaged)


def _rank_set(
    folder: Path,
    found: list[RankTrace],
    manifest: dict[str, Any] | None,
    notes: list[str],
    damaged: dict[int, str],
) -> RankSet:
    traces = {t.rank: t for t in sorted(found, key=lambda t: t.rank)}
    sizes = [t.world_size for t in found if t.world_size is not None]
    world = sizes[0] if sizes else max(traces) + 1
    if not sizes:
        notes.append(
            f"no trace has distributedInfo: ranks come from the file names, world size "
            f"taken as {world}"
        )
    named = [r for r, t in traces.items() if t.rank_from == "file name"]
    if sizes and named:
        notes.append(
            f"rank {', '.join(map(str, named))}: no distributedInfo in the trace, rank taken "
            "from the file name"
        )
    beyond = [r for r in traces if r >= world]
    if beyond:
        raise TracekitError(
            f"{folder}: rank {beyond[0]} ({traces[beyond[0]].path.name}) is beyond the world "
            f"size {world}: traces of different jobs"
        )
    rs = RankSet(
        folder=folder,
        traces=traces,
        world_size=world,
        backend=next((t.backend for t in found if t.backend), None),
        manifest=manifest,
        notes=notes,
        damaged={r: d for r, d in damaged.items() if r not in traces and r < world},
    )
    if rs.missing:
        notes.append(
            f"{len(rs.missing)} of {world} ranks have no trace here "
            f"({_ranges(rs.missing)}): the analysis covers ranks {_ranges(rs.ranks)}, and "
            "collectives are matched between them only"
        )
    return rs


def _ranges(ranks: list[int]) -> str:
    """``0-3, 7``."""
    out: list[str] = []
    start = prev = None
    for r in sorted(ranks):
        if start is None:
            start = prev = r
        elif prev is not None and r == prev + 1:
            prev = r
        else:
            out.append(str(start) if start == prev else f"{start}-{prev}")
            start = prev = r
    if start is not None:
        out.append(str(start) if start == prev else f"{start}-{prev}")
    return ", ".join(out)
