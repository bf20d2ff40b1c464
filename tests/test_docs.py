"""The README documents what the code does: schema section, set-up commands, CI."""

from __future__ import annotations

import re
from pathlib import Path

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
