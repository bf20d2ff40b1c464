"""Make tests import *this* checkout's tracekit, even when another checkout is pip-installed.

``collectors/`` and ``reports/`` install as ``tracekit.collectors`` / ``tracekit.reports``
through ``package-dir``; an editable install made from a different checkout (a git
worktree, say) maps those names to *its* folders, whatever the current directory. Tests
must exercise the code beside them, so the two subpackages are bound here explicitly.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent


class _ThisCheckout:
    """A meta-path finder that maps ``tracekit.collectors`` / ``tracekit.reports`` to this
    checkout's folders when they are first imported (so that loading this file imports
    neither torch nor pandas: the xdist controller, which runs no test, never does)."""

    @staticmethod
    def find_spec(name: str, path: object = None, target: object = None) -> Any:
        if name not in ("tracekit.collectors", "tracekit.reports"):
            return None
        folder = ROOT / name.split(".")[1]
        return importlib.util.spec_from_file_location(
            name, folder / "__init__.py", submodule_search_locations=[str(folder)]
        )


def _bind_subpackages() -> None:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    import tracekit

    if Path(tracekit.__file__).resolve().parent != ROOT / "tracekit":
        return  # an installed tracekit that is not this checkout: leave it alone
    for name in ("collectors", "reports"):
        mod = sys.modules.get(f"tracekit.{name}")
        if mod is not None and Path(mod.__file__ or "").resolve().parent != ROOT / name:
            raise RuntimeError(f"tracekit.{name} was imported from {mod.__file__} before conftest")
    sys.meta_path.insert(0, _ThisCheckout)


# Maps the two subpackages to this checkout when first imported (no import at start-up:
# subprocesses that check which modules they load see nothing extra).
_SITECUSTOMIZE = """\
import importlib.util
import sys

_ROOT = {root!r}
sys.path.insert(0, _ROOT)


class _ThisCheckout:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name not in ("tracekit.collectors", "tracekit.reports"):
            return None
        folder = _ROOT + "/" + name.split(".")[1]
        return importlib.util.spec_from_file_location(
            name, folder + "/__init__.py", submodule_search_locations=[folder]
        )


sys.meta_path.insert(0, _ThisCheckout)
"""


def child_sitecustomize(*lines: str) -> str:
    """A ``sitecustomize`` for the processes a test starts with a PYTHONPATH of its own
    (gloo ranks): this checkout bound as above, lazily (a rank imports no more than it
    uses), then ``lines``."""
    return _SITECUSTOMIZE.format(root=str(ROOT)) + "".join(f"{line}\n" for line in lines)


def _bind_subprocesses() -> None:
    """Subprocesses the tests start (``tracekit sweep`` runs ``collect`` in one) bind the
    same way: a ``sitecustomize`` on PYTHONPATH maps the subpackages to this checkout."""
    import os
    import tempfile

    if os.environ.get("TRACEKIT_TEST_BIND") == str(ROOT):
        return  # set up already (this process may be such a subprocess)
    if not _mapped_elsewhere():
        return
    import hashlib

    tag = hashlib.sha1(str(ROOT).encode()).hexdigest()[:12]
    site = Path(tempfile.gettempdir()) / f"tracekit-bind-{tag}"  # one per checkout, reused
    site.mkdir(exist_ok=True)
    text = _SITECUSTOMIZE.format(root=str(ROOT))
    hook = site / "sitecustomize.py"
    if not hook.is_file() or hook.read_text() != text:
        tmp = site / f".sitecustomize.{os.getpid()}"
        tmp.write_text(text)
        tmp.replace(hook)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(site), str(ROOT), os.environ.get("PYTHONPATH")) if p
    )
    os.environ["TRACEKIT_TEST_BIND"] = str(ROOT)


def _mapped_elsewhere() -> bool:
    """Whether a fresh interpreter would import tracekit.collectors from another checkout
    (an editable install's finder maps the name to *its* folder)."""
    import subprocess

    code = (
        f"import sys; sys.path.insert(0, {str(ROOT)!r}); import importlib.util as u; "
        "print(u.find_spec('tracekit.collectors').origin)"
    )
    # -I: no PYTHONPATH, so no sitecustomize that would import this file (and recurse)
    out = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True)
    return Path(out.stdout.strip()).resolve().parent != ROOT / "collectors"


def _compile_once() -> None:
    """Byte-compile this checkout's modules once, here, where bytecode writing is off
    (PYTHONDONTWRITEBYTECODE): otherwise each of the ~60 processes the suite starts (gloo
    ranks, sweep rows, advise workers, scripts) compiles the ~46,000 lines it imports
    afresh, ~0.3 s of CPU each. compileall writes __pycache__ as an import would."""
    if not sys.dont_write_bytecode or os.environ.get("PYTEST_XDIST_WORKER"):
        return  # bytecode is cached as usual, or the controller has done it
    import compileall

    for name in ("tracekit", "collectors", "reports"):
        compileall.compile_dir(ROOT / name, quiet=1)


_bind_subpackages()
_bind_subprocesses()
_compile_once()
