"""What the rank pool's fork server imports once (:func:`tracekit.ranks.engine.run_local`).

Outside ``tracekit.ranks``, whose package imports numpy and pyarrow: the policy below
must come first.

Each rank still runs in a process of its own, forked from the server, so it starts with
numpy, pyarrow, pandas and tracekit's stages already imported (1.2-1.5 CPU-s less per
rank) instead of importing them afresh as a ``spawn``ed process would. Before those
imports, the server takes the memory and thread policy of a worker
(:func:`tracekit.ranks.engine.tune_worker`), which its forks inherit: one OpenBLAS
thread, freed memory kept for reuse; so it has no thread but its main one when it forks.
It freezes what it imported, so that neither a rank's garbage collections nor its exit
walk those objects again.
"""

from __future__ import annotations

import gc
import os

from tracekit.io import keep_freed_memory

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
# No background thread in pyarrow's bundled jemalloc (the workers allocate through the
# system pool, tracekit.parse.dedicate_process): the server then forks with one thread.
os.environ.setdefault("JE_ARROW_MALLOC_CONF", "background_thread:false")
keep_freed_memory()  # before pyarrow is imported

# the report's per-rank work (parse, classify, summary: numpy, pyarrow, pandas), and with
# its package the engine whose _child each rank's process runs
import tracekit.ranks.perrank  # noqa: E402,F401

gc.freeze()
