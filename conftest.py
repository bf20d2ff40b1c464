"""Make tests import *this* checkout's tracekit, even when another checkout is pip-installed.

``collectors/`` and ``reports/`` install as ``tracekit.collectors`` / ``tracekit.reports``
through ``package-dir``; an editable install made from a different checkout (a git
worktree, say) maps those names to *its* folders, whatever the current directory. Tests
must exercise the code beside them, so the two subpackages are bound here explicitly.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent


def _bind_subpackages() -> None:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    import tracekit

    if Path(tracekit.__file__).resolve().parent != ROOT / "tracekit":
        return  # an installed tracekit that is not this checkout: leave it alone
    for name, folder in (("collectors", ROOT / "collectors"), ("reports", ROOT / "reports")):
        full = f"tracekit.{name}"
        mod = sys.modules.get(full)
        if mod is not None and Path(mod.__file__ or "").resolve().parent == folder:
            continue
        spec = importlib.util.spec_from_file_location(
            full, folder / "__init__.py", submodule_search_locations=[str(folder)]
        )
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        sys.modules[full] = mod
        spec.loader.exec_module(mod)
        setattr(tracekit, name, mod)


_bind_subpackages()
