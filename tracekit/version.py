"""tracekit's version, in a module of its own: ``collectors/`` records it in every manifest
without importing the ``tracekit`` package, whose ``profile`` imports ``collectors/`` back."""

from __future__ import annotations

__version__ = "0.1.0"
