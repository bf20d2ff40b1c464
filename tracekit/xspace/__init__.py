"""Export parsed traces as XSpace protos for TensorBoard's PROFILE tab (xprof).

``export_xspace(trace, logdir)`` writes ``LOGDIR/plugins/profile/<run>/<host>.xplane.pb``;
docs/xspace.md says which xprof tools show data for it and why.
"""

from __future__ import annotations

from tracekit.xspace.build import TraceTables, build_xspace
from tracekit.xspace.export import (
    default_host,
    default_run_name,
    event_table,
    export_xspace,
    line_summary,
    read_xspace,
    xplane_path,
)

__all__ = [
    "TraceTables",
    "build_xspace",
    "default_host",
    "default_run_name",
    "event_table",
    "export_xspace",
    "line_summary",
    "read_xspace",
    "xplane_path",
]
