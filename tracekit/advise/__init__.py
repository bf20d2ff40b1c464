"""``tracekit advise``: which optimisation lever to pull first, predicted from the baseline's
critical path and memory model, then measured (docs/advise.md).

Modules: ``levers`` (what each lever changes), ``regions`` and ``effects`` (where in the
step it acts, as a critical-path what-if), ``models`` (each lever's time model),
``baseline`` (the analysed run), ``predict``, ``measure`` (the sweep), ``paired`` (paired
rounds in worker processes), ``search`` (the measured search for the best configuration,
pure), ``combine`` (the search run on the measured levers), ``why`` (why a lever slowed the
step), ``table`` (the ranked table and ``advise.json``), ``advice`` (the command). Nothing is
imported here: import the module you need (``from tracekit.advise.advice import advise``).
"""
