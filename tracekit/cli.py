"""The ``tracekit`` command line: parses arguments and calls the library, nothing more."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

try:  # typer >= 0.20 vendors click
    from typer._click import exceptions as click_exc
except ImportError:  # pragma: no cover
    from click import exceptions as click_exc  # type: ignore[no-redef]

from tracekit.errors import TracekitError

app = typer.Typer(
    name="tracekit",
    help="Where did my step time and my GPU memory go? Analyse PyTorch profiler traces.",
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


@app.callback()
def _root() -> None:
    """Where did my step time and my GPU memory go? Analyse PyTorch profiler traces."""


@app.command()
def parse(
    trace: Annotated[Path, typer.Argument(help="Trace file (.json or .json.gz) or a run folder.")],
    out: Annotated[
        Path | None, typer.Option("-o", "--out", help="Output folder (default: TRACE.tracekit/).")
    ] = None,
) -> None:
    """Parse a trace into Parquet tables (kernels, ops, memory, steps, runtime) + meta.json."""
    from tracekit.parse import parse_to_dir

    result = parse_to_dir(trace, out)
    typer.echo(result.describe())


@app.command()
def report(
    trace: Annotated[
        Path, typer.Argument(help="Trace file (.json/.json.gz), run folder or parsed folder.")
    ],
    out: Annotated[
        Path | None,
        typer.Option("-o", "--out", help="Output folder (default: TRACE.report/ or RUN/report/)."),
    ] = None,
    format: Annotated[
        str, typer.Option("--format", help="Terminal output: 'text' (tables) or 'json' (summary).")
    ] = "text",
    tensorboard: Annotated[
        Path | None,
        typer.Option("--tensorboard", help="TensorBoard logdir (default for a run folder: its "
                     "tensorboard/ folder; for a trace file: none)."),
    ] = None,
    no_tensorboard: Annotated[
        bool, typer.Option("--no-tensorboard", help="Write no TensorBoard output.")
    ] = False,
    peak_tflops: Annotated[
        float | None,
        typer.Option("--peak-tflops", help="Peak TFLOP/s, for a device tracekit does not know."),
    ] = None,
    bandwidth: Annotated[
        float | None,
        typer.Option("--bandwidth", help="Memory bandwidth in GB/s, for an unknown device."),
    ] = None,
) -> None:
    """Report time per class, roofline, memory and GPU idle time: terminal, HTML, JSON,
    plots, Parquet and TensorBoard."""
    from tracekit.errors import UsageError

    if format not in ("text", "json"):
        raise UsageError(f"--format must be 'text' or 'json', not {format!r}")
    from tracekit.reports import report as run_report
    from tracekit.reports import summary_text

    result = run_report(trace, out, tensorboard=tensorboard, no_tensorboard=no_tensorboard,
                        peak_tflops=peak_tflops, bandwidth_gbs=bandwidth)
    if format == "json":
        typer.echo(summary_text(result), nl=False)
        return
    from rich.console import Console

    from tracekit.reports import terminal

    terminal.render(result.summary, Console(), result.describe())


def main(argv: list[str] | None = None) -> int:
    """Console entry point: one-line errors and exit codes, never a traceback for bad input."""
    try:
        app(args=argv, prog_name="tracekit", standalone_mode=False)
    except click_exc.NoArgsIsHelpError as e:
        typer.echo(e.ctx.get_help() if e.ctx else "", err=True)
        return 2
    except typer.Exit as e:
        return int(getattr(e, "exit_code", 0) or 0)
    except click_exc.UsageError as e:
        typer.echo(f"tracekit: error: {e.format_message()}", err=True)
        return 2
    except (typer.Abort, KeyboardInterrupt):
        typer.echo("tracekit: interrupted", err=True)
        return 130
    except TracekitError as e:
        typer.echo(f"tracekit: error: {e}", err=True)
        return e.exit_code
    return 0


def run() -> None:
    sys.exit(main())


if __name__ == "__main__":
    run()
