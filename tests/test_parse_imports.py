"""`tracekit parse` stays lean: its import time counts in every run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyarrow
import pytest

from . import tracegen as tg

ROOT = Path(__file__).resolve().parents[1]


# pyarrow 14-17 import pandas on a string conversion even after the probe is skipped (one
# ~0.3 s import in `tracekit parse`, the same output); pyarrow >= 18 does not.
@pytest.mark.skipif(
    int(pyarrow.__version__.split(".")[0]) < 18, reason="pyarrow < 18 imports pandas anyway"
)
def test_parse_command_imports_no_pandas_matplotlib_torch(tmp_path: Path) -> None:
    p = tg.write(tg.small_trace(), tmp_path / "t.json")
    code = (
        "import sys; from tracekit.cli import main; "
        f"rc = main(['parse', {str(p)!r}, '-o', {str(tmp_path / 'out')!r}]); "
        "heavy = sorted(m for m in ('pandas', 'matplotlib', 'torch') if m in sys.modules); "
        "print(rc, heavy)"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.stdout.strip().splitlines()[-1] == "0 []", r.stdout + r.stderr


def test_pandas_still_available_after_the_probe_is_skipped() -> None:
    code = (
        "import sys; from tracekit.parse import skip_pandas_probe; skip_pandas_probe(); "
        "assert 'pandas' not in sys.modules; import pyarrow as pa; "
        "print(type(pa.table({'a': [1]}).to_pandas()).__name__)"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.stdout.strip() == "DataFrame", r.stdout + r.stderr
