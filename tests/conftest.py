"""Running the suite on several workers (pytest-xdist, ``-n auto --dist loadgroup`` in
pyproject.toml) without building an expensive module fixture once per worker.

A module-scoped fixture (a collect run, a sweep, a parsed fixture) is built once per
process that runs a test using it. Each test that uses one is put in an ``xdist_group``
named after the module and the fixture, so every test sharing that fixture runs on one
worker, one after another, and the fixture is built once; the other tests are spread
one by one. Tests that use two such fixtures join their groups into one.

Each worker, and every process the tests start, computes on one thread (below).
"""

from __future__ import annotations

import gc
import os
from collections.abc import Iterable

import pytest

# ---------------------------------------------------------------- threads
# One xdist worker per core already fills the machine. torch's default (one OpenMP
# thread per core in every worker, sweep row, paired worker and script the tests start)
# put 4-6 threads on 2 cores, whose spin-waits took CPU from the work: the in-process
# collect and run tests spent 26-31 % less CPU with one thread each (86-96 against
# 67-71 CPU-s). Processes a test starts inherit the setting through OMP_NUM_THREADS,
# unless the environment already names a count. The xdist controller runs no test and
# imports no torch (the workers start ~3 s sooner).
os.environ.setdefault("OMP_NUM_THREADS", "1")
# A worker maps ranks again and again (every multi-rank report): as a long-lived process
# it forks each rank's process from one fork server, which imported the analysis once
# (tracekit.ranks.engine.pool_context; "auto" would spawn the 2-3 ranks of each test).
os.environ.setdefault("TRACEKIT_RANK_POOL", "forkserver")
# Every manifest a test's collect, run, profile() or launcher writes is checked strictly:
# an entry the readers would drop fails the test (tracekit.manifest.write_manifest; a
# user's run is written with the entry named in manifest_problems instead).
os.environ.setdefault("TRACEKIT_STRICT_MANIFEST", "1")


def pytest_configure(config: pytest.Config) -> None:
    controller = getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput")
    if not controller:
        try:
            import torch
        except ImportError:  # .ci/versions runs the parse and report tests without torch
            return
        torch.set_num_threads(1)


_SHARED_SCOPES = ("module", "class", "package")


def _shared_fixtures(item: pytest.Item) -> list[str]:
    """The module-scoped fixtures defined in ``item``'s own module that it uses (directly
    or through another fixture). A cheap one that tests share without an expensive one
    (an environment) is better function-scoped: it would tie those tests together."""
    info = getattr(item, "_fixtureinfo", None)
    module = item.nodeid.split("::", 1)[0]
    if info is None:
        return []
    names = []
    for name in item.fixturenames:
        fds = info.name2fixturedefs.get(name)
        if fds and fds[-1].scope in _SHARED_SCOPES and fds[-1].baseid == module:
            # a parametrized fixture is one fixture per parameter
            index = getattr(getattr(item, "callspec", None), "indices", {}).get(name)
            names.append(name if index is None else f"{name}[{index}]")
    return sorted(names)


def _find(parent: dict[str, str], x: str) -> str:
    while parent[x] != x:
        parent[x] = parent[parent[x]]
        x = parent[x]
    return x


def _groups(keys: Iterable[list[str]]) -> dict[str, str]:
    """Union of the fixture keys used together: key -> group name."""
    parent: dict[str, str] = {}
    for ks in keys:
        for k in ks:
            parent.setdefault(k, k)
        for k in ks[1:]:
            a, b = _find(parent, ks[0]), _find(parent, k)
            if a != b:
                parent[max(a, b)] = min(a, b)
    members: dict[str, list[str]] = {}
    for k in parent:
        members.setdefault(_find(parent, k), []).append(k)
    return {k: "+".join(sorted(members[_find(parent, k)])) for k in parent}


@pytest.hookimpl(tryfirst=True)  # before xdist reads the marks (its own hook)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # on a worker xdist has set --dist to "no" and kept the choice as option.loadgroup
    if not getattr(config.option, "loadgroup", False):
        return
    keys: dict[int, list[str]] = {}
    for i, item in enumerate(items):
        if item.get_closest_marker("xdist_group") is not None:
            continue
        module = item.nodeid.split("::", 1)[0]
        names = _shared_fixtures(item)
        if names:
            keys[i] = [f"{module}::{n}" for n in names]
    group = _groups(keys.values())
    for i, ks in keys.items():
        items[i].add_marker(pytest.mark.xdist_group(group[ks[0]]))


# ---------------------------------------------------------------- garbage collection
# A worker holds every test module, torch, pandas, matplotlib, ...: hundreds of thousands
# of long-lived objects that each full collection walks again. The collectors (and the
# benchmarks the tests run) call gc.collect() before each profiled window, and a full
# collection then took 0.3-2 s. Moving what is alive after collection, and again at the
# start of each test module, into the permanent generation (gc.freeze) leaves a
# collection only the objects made since: the same garbage is found, in milliseconds.
_last_module: list[str] = []


def _freeze() -> None:
    gc.collect()  # garbage first, so that none of it is frozen for good
    gc.freeze()


def pytest_collection_finish(session: pytest.Session) -> None:
    _freeze()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    module = item.nodeid.split("::", 1)[0]
    if _last_module != [module]:
        _last_module[:] = [module]
        _freeze()
