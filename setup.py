"""Build hook for the optional native scanner; all metadata lives in pyproject.toml.

``tracekit.parse._scan`` (plain CPython C API) speeds up ``tracekit parse`` several
times; if it cannot be compiled, installation still succeeds and the parser uses its
msgspec path (same output). Build in place with ``python setup.py build_ext --inplace``.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "tracekit.parse._scan",
            ["tracekit/parse/_scan.c"],
            optional=True,
        )
    ]
)
