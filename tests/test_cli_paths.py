"""A bad input path fails the same way in every command that reads one, and before the
heavy imports (tracekit.io.readable_input, called first in each command)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tracekit.errors import UsageError
from tracekit.io import readable_input

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("pandas", "pyarrow", "torch", "matplotlib")

# Each command that takes an input path, as argv with {p} for the bad path
# (compare: the bad path as B, after a good A).
COMMANDS = [
    ["parse", "{p}"],
    ["report", "{p}"],
    ["classify", "{p}"],
    ["export-xspace", "{p}"],
    ["advise", "{p}", "--dry-run"],
    ["compare", str(ROOT / "fixtures"), "{p}"],
    ["compare", "{p}", str(ROOT / "fixtures")],
]

# Runs every command in one process, one after another, and records each one's exit code,
# stderr and which heavy modules were imported by the time it failed.
_PROBE = """
import contextlib, io, json, sys
from tracekit.cli import main
out = []
for argv in json.loads(sys.argv[1]):
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        rc = main(argv)
    out.append([rc, err.getvalue(), [m for m in {heavy!r} if m in sys.modules]])
print(json.dumps(out))
"""


def _bad_paths(tmp: Path) -> dict[str, tuple[Path, str]]:
    loop_a, loop_b, dangling = tmp / "loop_a", tmp / "loop_b", tmp / "dangling.json"
    loop_a.symlink_to(loop_b)
    loop_b.symlink_to(loop_a)
    dangling.symlink_to(tmp / "gone.json")
    return {
        "missing": (tmp / "missing.json", "no such file or folder"),
        "dangling symlink": (dangling, "no such file or folder"),
        "under a file": (ROOT / "README.md" / "t.json", "no such file or folder"),
        "symlink loop": (loop_a, "cannot read (Too many levels of symbolic links)"),
    }


def test_every_command_refuses_a_bad_path_alike_before_heavy_imports(tmp_path: Path) -> None:
    cases = [
        (name, [a.format(p=path) for a in argv], f"tracekit: error: {path}: {reason}\n")
        for name, (path, reason) in _bad_paths(tmp_path).items()
        for argv in COMMANDS
    ]
    r = subprocess.run(
        [sys.executable, "-c", _PROBE.format(heavy=HEAVY), json.dumps([c[1] for c in cases])],
        capture_output=True, text=True, cwd=ROOT, timeout=60,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    for (name, argv, want), (rc, err, heavy) in zip(cases, json.loads(r.stdout), strict=True):
        assert (rc, err, heavy) == (2, want, []), f"{name}: tracekit {' '.join(argv)}"


def test_console_entry_point_fails_in_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "missing.json"
    r = subprocess.run(
        [sys.executable, "-m", "tracekit.cli", "report", str(missing)],
        capture_output=True, text=True, cwd=ROOT, timeout=60,
    )  # fmt: skip
    assert (r.returncode, r.stdout, r.stderr) == (
        2, "", f"tracekit: error: {missing}: no such file or folder\n"
    )  # fmt: skip


def test_readable_input_accepts_files_and_folders(tmp_path: Path) -> None:
    f = tmp_path / "t.json"
    f.write_text("{}")
    (tmp_path / "link.json").symlink_to(f)
    readable_input(f, tmp_path, tmp_path / "link.json")  # no error
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    readable_input(fifo)  # left to the reader, which says what it takes; never blocks
    with pytest.raises(UsageError, match=r"b\.json: no such file or folder"):
        readable_input(f, tmp_path / "b.json")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads every file")
def test_unreadable_file_says_why(tmp_path: Path) -> None:
    f = tmp_path / "t.json"
    f.write_text("{}")
    f.chmod(0)
    with pytest.raises(UsageError, match=r"t\.json: cannot read \(Permission denied\)"):
        readable_input(f)
