"""The dependency version sets that CI and .ci/versions test agree with pyproject.toml:
each floor is the version the lowest-versions run installs, the known-good set satisfies
every bound, and the docs list the lowest set."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

tomllib = pytest.importorskip("tomllib")  # Python >= 3.11

ROOT = Path(__file__).resolve().parents[1]


def _requirements() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return [Requirement(r) for r in project["dependencies"]]


def _pins(name: str) -> dict[str, Version]:
    pins = {}
    for line in (ROOT / ".ci" / name).read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            pkg, version = line.split("==")
            pins[canonicalize_name(pkg)] = Version(version)
    return pins


def test_every_floor_is_the_version_the_lowest_run_installs() -> None:
    lowest = _pins("constraints-lowest.txt")
    floors = {}
    for req in _requirements():
        for spec in req.specifier:
            assert spec.operator == ">=", f"{req}: only floors (a cap needs a comment and a test)"
            floors[canonicalize_name(req.name)] = Version(spec.version)
    assert {n: lowest.get(n) for n in floors} == floors


def test_known_good_set_satisfies_pyproject() -> None:
    good = _pins("constraints.txt")
    for req in _requirements():
        name = canonicalize_name(req.name)
        assert name in good, f"{name} missing from .ci/constraints.txt"
        assert req.specifier.contains(good[name]), f"{name}=={good[name]} outside {req}"


def test_docs_list_the_lowest_set_and_ci_runs_the_newest() -> None:
    usage = (ROOT / "docs" / "usage.md").read_text()
    for name, version in _pins("constraints-lowest.txt").items():
        assert re.search(rf"\b{re.escape(name)} {re.escape(str(version))}\b", usage), name
    assert "bash .ci/versions newest" in (ROOT / ".ci" / "run").read_text()
