"""The README and docs/ document what the code does: the README is a short front page
whose set-up commands CI runs and whose table names every command; the table schema in
docs/schema.md is generated from the code; every relative link resolves."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tracekit.schema import markdown

ROOT = Path(__file__).resolve().parents[1]


README_MAX_BYTES = 10_000
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def test_schema_doc_matches_code() -> None:
    text = (ROOT / "docs" / "schema.md").read_text()
    m = re.search(r"<!-- schema:begin -->\n(.*)<!-- schema:end -->", text, re.S)
    assert m, "docs/schema.md lacks the generated schema section"
    assert m.group(1) == markdown(), "regenerate: python -m tracekit.schema"


def test_readme_is_a_short_front_page() -> None:
    """Results, benchmarks, design and the schema live in docs/, not in the README."""
    size = len((ROOT / "README.md").read_bytes())
    assert size <= README_MAX_BYTES, f"README.md is {size} bytes: move detail to docs/"


def test_readme_names_every_command() -> None:
    import typer

    from tracekit.cli import app

    commands = set(typer.main.get_command(app).commands)  # type: ignore[attr-defined]
    readme = (ROOT / "README.md").read_text()
    assert commands >= {"collect", "run", "report", "parse", "advise"}
    missing = sorted(c for c in commands if f"`tracekit {c}" not in readme)
    assert not missing, f"README's command table lacks {missing}"
    assert "`tracekit.profile()`" in readme
    assert 'pip install -e ".[dev,cupti]"' in readme  # the GPU install line


def _slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    out: set[str] = set()
    fenced = False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        m = re.match(r"#{1,6} (.*)", line)
        if m and not fenced:
            out.add(_slug(m.group(1)))
        out.update(re.findall(r'<a id="([^"]+)"', line))
    return out


def _broken_links(doc: Path, root: Path = ROOT) -> list[str]:
    text = re.sub(r"```.*?```", "", doc.read_text(), flags=re.S)
    bad = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        path, _, fragment = target.partition("#")
        dest = (doc.parent / path).resolve() if path else doc
        if not dest.exists():
            bad.append(f"{doc.relative_to(root)}: {target} (no such file)")
        elif fragment and dest.suffix == ".md" and fragment not in _anchors(dest):
            bad.append(f"{doc.relative_to(root)}: {target} (no such heading)")
    return bad


def test_relative_links_resolve() -> None:
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    bad = [b for doc in docs for b in _broken_links(doc)]
    assert not bad, "\n".join(bad)


def test_link_check_sees_a_broken_link(tmp_path: Path) -> None:
    """The checker itself: a missing file and a missing heading are both caught."""
    doc = tmp_path / "a.md"
    doc.write_text("# A `b.c` d\n\n[x](b.md) [y](#a-bc-d) [z](#nope) [w](https://e) [v](a.md)\n")
    assert _broken_links(doc, tmp_path) == [
        "a.md: b.md (no such file)",
        "a.md: #nope (no such heading)",
    ]


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
