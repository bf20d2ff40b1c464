"""The README documents what the code does: schema section, set-up commands, CI."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tracekit.schema import markdown

ROOT = Path(__file__).resolve().parents[1]


def test_readme_schema_matches_code() -> None:
    text = (ROOT / "README.md").read_text()
    m = re.search(r"<!-- schema:begin -->\n(.*)<!-- schema:end -->", text, re.S)
    assert m, "README lacks the generated schema section"
    assert m.group(1) == markdown(), "regenerate: python -m tracekit.schema"


def test_ci_runs_readme_commands() -> None:
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    setup = re.search(r"```bash\n(.+?)\s+#", readme).group(1)  # type: ignore[union-attr]
    assert setup in ci
    assert "python3 -m pytest" in readme and "python3 -m pytest" in ci


def test_every_package_is_in_the_wheel() -> None:
    """pyproject lists packages explicitly (package-dir mapping): a new subpackage must be
    listed or a non-editable install misses it."""
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    listed = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    found = {
        "tracekit." + ".".join(p.parent.relative_to(ROOT / "tracekit").parts)
        for p in (ROOT / "tracekit").rglob("__init__.py")
    }
    found = {f.rstrip(".") for f in found} | {"tracekit.collectors", "tracekit.reports"}
    assert found == listed
