"""``python -m tracekit.classify [DOC]``: print, or refresh in DOC, the generated tables of
docs/classify.md (class rules, FLOP counts, device specs, table schema)."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path

from tracekit.classify.classes import rules_markdown
from tracekit.classify.costs import per_element_markdown
from tracekit.classify.devices import specs_markdown
from tracekit.classify.schema import markdown as schema_markdown

BLOCKS = {
    "rules": rules_markdown,
    "flops": per_element_markdown,
    "specs": specs_markdown,
    "schema": schema_markdown,
}


def _replacer(body: str) -> Callable[[re.Match[str]], str]:
    def repl(m: re.Match[str]) -> str:
        return m.group(1) + body + "\n" + m.group(2)

    return repl


def render(doc: str) -> str:
    """``doc`` with every ``<!-- BEGIN x -->…<!-- END x -->`` region regenerated."""
    for name, fn in BLOCKS.items():
        pat = re.compile(rf"(<!-- BEGIN {name} -->\n).*?(<!-- END {name} -->)", re.S)
        doc = pat.sub(_replacer(fn().rstrip("\n")), doc)
    return doc


def main(argv: list[str]) -> int:
    if argv:
        path = Path(argv[0])
        path.write_text(render(path.read_text()))
    else:
        for name, fn in BLOCKS.items():
            print(f"<!-- BEGIN {name} -->\n{fn()}\n<!-- END {name} -->\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
