"""``tracekit export-xspace``'s work, also run by ``collect --xspace`` and ``run --xspace``:
its own module so that ``tracekit/cli.py`` and ``tracekit/cli_run.py`` (which registers
``run`` on cli's app) need not import each other."""

from __future__ import annotations

from pathlib import Path

import typer


def export_xspace_of(trace: Path, logdir: Path | None, run: str | None, host: str | None) -> None:
    """Write ``trace`` (a file, run folder or parsed folder) as XSpace under ``logdir``
    (default: tensorboard/ beside it) and say what was written and how to view it."""
    from tracekit.parse import load
    from tracekit.xspace import export_xspace, line_summary, read_xspace

    if logdir is None:
        logdir = (trace if trace.is_dir() else trace.parent) / "tensorboard"
    parsed = load(trace)
    path = export_xspace(parsed, logdir, run=run, host=host)
    lines = line_summary(read_xspace(path))
    devices = lines[lines["plane"].str.startswith("/device:")]
    typer.echo(f"wrote {path}")
    typer.echo(
        f"  {len(devices)} GPU stream line(s) with {int(devices['events'].sum())} GPU events, "
        f"{len(lines) - len(devices)} host line(s) with "
        f"{int(lines['events'].sum() - devices['events'].sum())} events"
    )
    typer.echo(f"view: tensorboard --logdir {logdir}   (then open the PROFILE tab)")
