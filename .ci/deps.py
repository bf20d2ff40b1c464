"""tracekit's dependency lists for CI, read from pyproject.toml.

    python3 .ci/deps.py freeze > .ci/constraints.txt   # after the suite passed: known-good
    python3 .ci/deps.py tests                          # what .ci/versions installs

``freeze``: the installed version of every package that ``pip install -e ".[dev,xprof]"``
brings in (tracekit's requirements and theirs, walked through the installed metadata), one
``name==version`` a line; .ci/run installs with ``-c .ci/constraints.txt``.

``tests``: tracekit's requirements with pyproject's bounds, less torch, plus the test tools
(pytest, pytest-xdist, hypothesis, with the dev extra's bounds): what the parse and report
tests need. Only collectors/ imports torch (tests/test_layering.py), and its CPU wheel alone
takes ~30 s to install, so .ci/versions leaves it out.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
EXTRAS = ("dev", "xprof")
TEST_TOOLS = ("pytest", "pytest-xdist", "hypothesis")


def _project() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]  # type: ignore[no-any-return]


def _name(requirement: str) -> str:
    return re.match(r"[A-Za-z0-9_.-]+", requirement).group(0).lower()  # type: ignore[union-attr]


def test_requirements() -> list[str]:
    project = _project()
    runtime = [r for r in project["dependencies"] if _name(r) != "torch"]
    tools = [r for r in project["optional-dependencies"]["dev"] if _name(r) in TEST_TOOLS]
    return runtime + tools


def frozen() -> dict[str, str]:
    """Installed name -> version of every package that tracekit[dev,xprof] needs."""
    from importlib import metadata

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    project = _project()
    top = list(project["dependencies"])
    for extra in EXTRAS:
        top += project["optional-dependencies"][extra]
    todo = [(Requirement(r), frozenset(Requirement(r).extras)) for r in top]
    pinned: dict[str, str] = {}
    seen: set[tuple[str, frozenset[str]]] = set()
    while todo:
        req, extras = todo.pop()
        name = canonicalize_name(req.name)
        if (name, extras) in seen:
            continue
        seen.add((name, extras))
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            sys.exit(f"{name} is not installed: install tracekit[dev,xprof] first")
        pinned[name] = dist.version.split("+")[0]  # torch 2.13.0+cpu -> 2.13.0
        for line in dist.requires or []:
            sub = Requirement(line)
            if sub.marker is None or any(sub.marker.evaluate({"extra": e}) for e in extras | {""}):
                todo.append((sub, frozenset(sub.extras)))
    return pinned


def main(argv: list[str]) -> None:
    if argv == ["freeze"]:
        print("# Known-good: the suite passed with these (python3 .ci/deps.py freeze).")
        print("\n".join(f"{n}=={v}" for n, v in sorted(frozen().items())))
    elif argv == ["tests"]:
        print("\n".join(test_requirements()))
    else:
        sys.exit("usage: python3 .ci/deps.py freeze|tests")


if __name__ == "__main__":
    main(sys.argv[1:])
