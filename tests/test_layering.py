"""Data flows one way: each stage imports only earlier stages; only collectors import torch."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = {
    "tracekit",
    "tracekit.errors",
    "tracekit.io",
    "tracekit.manifest",  # the run manifest, typed (read by every stage)
    "tracekit.schema",
    "tracekit.version",
}
# stage folder -> (module prefix, tracekit modules it may import besides SHARED)
STAGES: dict[str, tuple[str, set[str]]] = {
    "collectors": ("tracekit.collectors", set()),
    "tracekit/parse": ("tracekit.parse", set()),
    "tracekit/classify": ("tracekit.classify", {"tracekit.parse"}),
    "tracekit/xspace": ("tracekit.xspace", {"tracekit.parse"}),
    "tracekit/summary": ("tracekit.summary", {"tracekit.parse", "tracekit.classify"}),
    # the one pipeline (parse -> classify -> summary as one Analysis): every command's way in
    "tracekit/analyse.py": (
        "tracekit.analyse",
        {"tracekit.parse", "tracekit.classify", "tracekit.summary"},
    ),
    # the multi-rank engine and analysis: per-rank work is parse -> classify -> summary
    "tracekit/ranks": (
        "tracekit.ranks",
        {"tracekit.parse", "tracekit.classify", "tracekit.summary", "tracekit.analyse"},
    ),
    # a folder of one job's rank traces: the pipeline on one rank, the ranks stage on all
    "tracekit/jobs.py": (
        "tracekit.jobs",
        {
            "tracekit.parse",
            "tracekit.classify",
            "tracekit.summary",
            "tracekit.analyse",
            "tracekit.ranks",
        },
    ),
    # sweep reads the analytic models (tracekit.classify.models) and the summary stage
    "tracekit/sweep": (
        "tracekit.sweep",
        {"tracekit.parse", "tracekit.classify", "tracekit.summary", "tracekit.analyse"},
    ),
    # advise predicts from the summary stage and measures through sweep
    "tracekit/advise": (
        "tracekit.advise",
        {
            "tracekit.parse",
            "tracekit.classify",
            "tracekit.summary",
            "tracekit.analyse",
            "tracekit.sweep",
        },
    ),
    "tracekit/compare": (
        "tracekit.compare",
        {
            "tracekit.parse",
            "tracekit.classify",
            "tracekit.summary",
            "tracekit.analyse",
            "tracekit.ranks",
            "tracekit.jobs",
        },
    ),
    # renders what it is handed: the stages' records and types, pure formatting helpers and
    # writers of a result (the merged rank trace); never the pipeline (tracekit.analyse) nor
    # a job's discovery (tracekit.jobs): the commands below compose those
    "reports": (
        "tracekit.reports",
        {
            "tracekit.parse",
            "tracekit.classify",
            "tracekit.summary",
            "tracekit.ranks",
            "tracekit.sweep",
            "tracekit.compare",
            "tracekit.advise",
        },
    ),
    # the commands: find the input, run the pipeline and the stages after it, hand the
    # result to reports/ (only the CLI imports them: test_only_the_cli_imports_the_commands)
    "tracekit/commands": (
        "tracekit.commands",
        {
            "tracekit.parse",
            "tracekit.classify",
            "tracekit.summary",
            "tracekit.analyse",
            "tracekit.ranks",
            "tracekit.jobs",
            "tracekit.sweep",
            "tracekit.compare",
            "tracekit.advise",
            "tracekit.reports",
        },
    ),
}
# the modules outside tracekit/commands that may import it: the command line
COMMAND_LINE = {"tracekit/cli.py", "tracekit/cli_run.py", "tracekit/cli_xspace.py"}


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


@pytest.mark.parametrize("folder", sorted(STAGES))
def test_stage_imports_only_earlier_stages(folder: str) -> None:
    base = ROOT / folder
    if not base.exists():
        pytest.skip(f"{folder} not present")
    own, allowed = STAGES[folder]
    for f in [base] if base.is_file() else base.rglob("*.py"):
        for mod in _imports(f):
            root = mod.split(".")[0]
            if root == "torch":
                assert folder == "collectors", f"{f} imports torch"
            if root != "tracekit" or mod in SHARED or mod.startswith(own):
                continue
            assert any(mod == a or mod.startswith(a + ".") for a in allowed), (
                f"{f.relative_to(ROOT)} imports {mod}: stage {own} may only use {allowed or 'none'}"
            )


def test_analysis_stages_never_load_torch() -> None:
    # Bind tracekit.reports to this checkout (an editable install of another checkout would
    # map it elsewhere); conftest is not imported, it also loads collectors (torch).
    code = (
        "import sys, importlib, importlib.util\n"
        f"sys.path.insert(0, {str(ROOT)!r})\n"
        "import tracekit\n"
        f"spec = importlib.util.spec_from_file_location('tracekit.reports', "
        f"{str(ROOT / 'reports' / '__init__.py')!r}, "
        f"submodule_search_locations=[{str(ROOT / 'reports')!r}])\n"
        "mod = importlib.util.module_from_spec(spec)\n"
        "sys.modules['tracekit.reports'] = mod\n"
        "spec.loader.exec_module(mod)\n"
        "assert mod.__file__.startswith(sys.path[0])\n"
        "for m in ['tracekit.parse', 'tracekit.classify', 'tracekit.xspace', 'tracekit.summary',"
        " 'tracekit.ranks', 'tracekit.ranks.cluster', 'tracekit.ranks.mapreduce',"
        " 'tracekit.reports', 'tracekit.reports.plots', 'tracekit.reports.tensorboard',"
        " 'tracekit.sweep', 'tracekit.reports.sweep', 'tracekit.compare', 'tracekit.cli',"
        " 'tracekit.advise.advice', 'tracekit.reports.advise', 'tracekit.reports.render',"
        " 'tracekit.commands.report', 'tracekit.commands.compare', 'tracekit.commands.sweep']:\n"
        "    try:\n"
        "        importlib.import_module(m)\n"
        "    except ModuleNotFoundError:\n"
        "        pass\n"
        "print('torch' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert out.stdout.strip() == "False"


def test_only_the_cli_imports_the_commands() -> None:
    """The commands sit above every stage: a stage (reports/ included) that imported one
    would compose the analysis it should be handed."""
    found = [
        f"{f.relative_to(ROOT)} imports {mod}"
        for folder in ("tracekit", "collectors", "reports")
        for f in sorted((ROOT / folder).rglob("*.py"))
        if f.relative_to(ROOT).as_posix() not in COMMAND_LINE
        and not f.relative_to(ROOT).as_posix().startswith("tracekit/commands/")
        for mod in _imports(f)
        if mod == "tracekit.commands" or mod.startswith("tracekit.commands.")
    ]
    assert not found, "\n".join(found)


def test_no_relative_import() -> None:
    """A module imports another by its absolute name (docs/architecture.md): the stage check
    above reads absolute names only, and ``from . import x`` goes through the package's
    ``__init__``."""
    found = [
        f"{f.relative_to(ROOT)}:{node.lineno}"
        for folder in ("tracekit", "collectors", "reports")
        for f in sorted((ROOT / folder).rglob("*.py"))
        for node in ast.walk(ast.parse(f.read_text()))
        if isinstance(node, ast.ImportFrom) and node.level > 0
    ]
    assert not found, "relative imports (import the module by its tracekit.* name):\n" + (
        "\n".join(f"  {x}" for x in found)
    )
