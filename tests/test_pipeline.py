"""One pipeline: parse -> classify -> summarise is chained in ``tracekit/analyse.py`` only.

An AST scan of tracekit/, collectors/ and reports/: every call is resolved through the
module's imports to the function it names; a module other than the pipeline that calls a
parse entry point and a later stage (``classify``, ``summarize``, ``trace_facts``), or
calls those stages at all, composes the analysis a second time. The commands
(``tracekit/commands/``) call the pipeline and hand its result to ``reports/``, which calls
no analysis at all."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PIPELINE = "tracekit/analyse.py"
FOLDERS = ("tracekit", "collectors", "reports")
PARSE = {
    "tracekit.load",
    "tracekit.parse.load",
    "tracekit.parse.parse_tables",
    "tracekit.parse.parse_to_dir",
}
LATER = {
    "tracekit.classify.classify",
    "tracekit.classify.roofline.classify",
    "tracekit.summary.summarize",
    "tracekit.summary.build.summarize",
    "tracekit.summary.trace_facts",
    "tracekit.summary.build.trace_facts",
}
# where a stage's own function is defined or re-exported (not a call of it)
OWNERS = {"tracekit/classify/roofline.py", "tracekit/summary/build.py"}


def _module(path: Path, root: Path) -> str:
    rel = path.relative_to(root).with_suffix("")
    parts = list(rel.parts)
    if parts[0] in ("collectors", "reports"):
        parts.insert(0, "tracekit")
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _names(tree: ast.Module, module: str) -> dict[str, str]:
    """Local name -> the qualified name it stands for, from every import in the module
    (function-level ones included)."""
    package = module.rsplit(".", 1)[0]
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                top = a.name.split(".")[0]  # ``import a.b`` binds ``a``
                names[a.asname or top] = a.name if a.asname else top
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            for a in node.names:
                names[a.asname or a.name] = f"{base}.{a.name}"
    return names


def _dotted(node: ast.expr, names: dict[str, str]) -> str | None:
    if isinstance(node, ast.Name):
        return names.get(node.id)
    if isinstance(node, ast.Attribute):
        head = _dotted(node.value, names)
        return f"{head}.{node.attr}" if head else None
    return None


def calls(path: Path, root: Path = ROOT) -> dict[str, set[str]]:
    """Per function of ``path`` (``""``: module level), the qualified names of the functions
    it calls, as far as the module's imports say."""
    tree = ast.parse(path.read_text())
    names = _names(tree, _module(path, root))
    found: dict[str, set[str]] = {}

    def visit(node: ast.AST, owner: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = owner
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) and not owner:
                inner = child.name
            if isinstance(child, ast.Call):
                q = _dotted(child.func, names)
                if q is not None:
                    found.setdefault(inner, set()).add(q)
            visit(child, inner)

    visit(tree, "")
    return found


def compositions(root: Path = ROOT) -> dict[str, list[str]]:
    """Module path -> the pipeline stages it calls, for every module but the pipeline that
    calls a later stage (itself or through a function of another scanned module that does,
    as a ``classify_trace`` helper) — with or without a parse entry point beside it."""
    seen: dict[str, tuple[str, dict[str, set[str]]]] = {}
    for folder in FOLDERS:
        for f in sorted((root / folder).rglob("*.py")):
            rel = f.relative_to(root).as_posix()
            if rel != PIPELINE and rel not in OWNERS:
                seen[rel] = (_module(f, root), calls(f, root))
    later = set(LATER)
    while True:  # a function that calls a later stage stands for one
        more = {
            f"{mod}.{fn}"
            for mod, per in seen.values()
            for fn, got in per.items()
            if fn and got & later
        }
        if more <= later:
            break
        later |= more
    out: dict[str, list[str]] = {}
    for rel, (_, per) in seen.items():
        got = set().union(*per.values()) if per else set()
        if got & later:
            out[rel] = sorted(got & (PARSE | later))
    return out


def test_only_the_pipeline_chains_the_stages() -> None:
    found = compositions()
    assert not found, "analysis composed outside tracekit/analyse.py (call the pipeline):\n" + (
        "\n".join(f"  {m}: {', '.join(s)}" for m, s in sorted(found.items()))
    )


def test_the_pipeline_chains_them() -> None:
    got = set().union(*calls(ROOT / PIPELINE).values())
    assert got & PARSE and {"tracekit.classify.classify", "tracekit.summary.summarize"} <= got


@pytest.mark.parametrize(
    ("src", "bad"),
    [
        ("from tracekit.parse import load\nfrom tracekit.summary import summarize\n"
         "def f(p, c):\n    return summarize(load(p), c)\n", True),
        ("import tracekit.classify as C\ndef f(t):\n    return C.classify(t)\n", True),
        ("def f(t):\n    from tracekit.classify.roofline import classify as k\n    return k(t)\n",
         True),
        ("import json\nfrom tracekit.analyse import analyse\n"
         "def f(p):\n    return analyse(p), json.load(open(p))\n", False),
    ],
)  # fmt: skip
def test_the_scan_sees_a_composition(tmp_path: Path, src: str, bad: bool) -> None:
    """The scan is not blind: a stand-in module of each shape is caught (or not)."""
    (tmp_path / "reports").mkdir()
    (tmp_path / "reports" / "x.py").write_text(src)
    assert ("reports/x.py" in compositions(tmp_path)) is bad


# the analysis a command composes (tracekit/commands/): the pipeline, a job's discovery and
# ranks, a comparison, a sweep's analysis, advise's baseline and measurement
ANALYSIS = ("tracekit.analyse.", "tracekit.jobs.")
ANALYSIS_CALLS = {
    "tracekit.compare.compare",
    "tracekit.compare.build.compare",
    "tracekit.compare.build.analyse_run",
    "tracekit.ranks.mapreduce.analyse_ranks",
    "tracekit.sweep.analysis.analyse_sweep",
    "tracekit.sweep.finish",
    "tracekit.advise.baseline.analyse",
    "tracekit.advise.advice.advise",
    "tracekit.advise.measure.run",
}


def analysis_calls(root: Path = ROOT) -> dict[str, list[str]]:
    """Module path under reports/ -> the analysis it calls: reports/ renders what it is
    handed, the commands (``tracekit/commands/``) compose the analysis."""
    out: dict[str, list[str]] = {}
    for f in sorted((root / "reports").rglob("*.py")):
        per = calls(f, root)
        got = set().union(*per.values()) if per else set()
        bad = sorted(q for q in got if q.startswith(ANALYSIS) or q in ANALYSIS_CALLS)
        if bad:
            out[f.relative_to(root).as_posix()] = bad
    return out


def test_reports_only_render(tmp_path: Path) -> None:
    found = analysis_calls()
    assert not found, "analysis called from reports/ (move it to tracekit/commands/):\n" + (
        "\n".join(f"  {m}: {', '.join(s)}" for m, s in sorted(found.items()))
    )
    (tmp_path / "reports").mkdir()  # the scan is not blind
    (tmp_path / "reports" / "x.py").write_text(
        "from tracekit.compare.build import analyse_run\ndef f(p, c):\n"
        "    return analyse_run(p, c)\n"
    )
    assert analysis_calls(tmp_path) == {"reports/x.py": ["tracekit.compare.build.analyse_run"]}


def test_the_commands_call_the_pipeline_then_render() -> None:
    got = set().union(*calls(ROOT / "tracekit/commands/report.py").values())
    assert {"tracekit.analyse.analyse", "tracekit.reports.render.render"} <= got
    got = set().union(*calls(ROOT / "tracekit/commands/compare.py").values())
    assert {"tracekit.compare.build.analyse_run", "tracekit.reports.compare.write"} <= got
    got = set().union(*calls(ROOT / "tracekit/commands/sweep.py").values())
    assert {"tracekit.sweep.finish", "tracekit.reports.sweep.write_html"} <= got


CLASSIFY = {"tracekit.classify.classify", "tracekit.classify.roofline.classify"}


def traffic_handovers(root: Path = ROOT) -> list[str]:
    """``file:line`` of every call of ``classify`` that hands it ``traffic=``: classify
    computes the analytic traffic from the manifest itself (the override is for tests)."""
    out = []
    for folder in FOLDERS:
        for f in sorted((root / folder).rglob("*.py")):
            tree = ast.parse(f.read_text())
            names = _names(tree, _module(f, root))
            for node in ast.walk(tree):
                if (
                    isinstance(node, ast.Call)
                    and _dotted(node.func, names) in CLASSIFY
                    and any(k.arg == "traffic" for k in node.keywords)
                ):
                    out.append(f"{f.relative_to(root).as_posix()}:{node.lineno}")
    return out


def test_classify_computes_the_traffic_itself(tmp_path: Path) -> None:
    assert not traffic_handovers(), traffic_handovers()
    (tmp_path / "tracekit").mkdir()
    (tmp_path / "tracekit" / "x.py").write_text(
        "from tracekit.classify import classify\ndef f(t, e):\n    return classify(t, traffic=e)\n"
    )
    assert traffic_handovers(tmp_path) == ["tracekit/x.py:3"]  # the scan is not blind
