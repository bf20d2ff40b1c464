"""The commands that compose the stages: what ``tracekit report`` and ``tracekit compare``
do between reading their arguments and rendering their result.

A command finds its input (a trace, a run folder, a job's rank traces), runs the one
pipeline (:mod:`tracekit.analyse`) and the analysis stages after it, and hands what they
return to a renderer in :mod:`tracekit.reports`, which only renders. Only the CLI
(:mod:`tracekit.cli`) and the tests import this package; it sits above every stage
(``tests/test_layering.py``).
"""
