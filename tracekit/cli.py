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
    from tracekit.parse import parse_to_dir, skip_pandas_probe

    skip_pandas_probe()  # the command never needs pandas
    result = parse_to_dir(trace, out)
    typer.echo(result.describe())


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
