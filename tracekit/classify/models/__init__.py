"""The analytic models of a ``tracekit collect`` run, from the model config in its
manifest (no torch, no trace): the model's shape and parameter counts (``shape``), the
memory of a training step (``memory``), a decode step's bytes and FLOPs (``decode``) and
the per-step traffic estimate (``traffic``) that ``classify`` puts in its step table and the
summary, the sweep and advise read. They sit in the classify stage so that ``classify``
computes the estimate itself from the manifest it already reads. This ``__init__`` imports
nothing: import the module that defines a name.
"""
