"""``python -m tracekit.ranks.worker``: run one rank in this process and exit.

How a Dask task runs its rank (:func:`tracekit.ranks.cluster.dask_task`): the
:class:`~tracekit.ranks.tasks.Task` comes as JSON on stdin, the outcome goes out as the
last line of stdout, and the process is tuned and bounded as a local pool worker is (a
Dask worker is a long-lived, daemonic process: it can neither return a rank's memory to
the OS nor start ``multiprocessing`` children).
"""

from __future__ import annotations

import json
import sys

from tracekit.io import freeze_before_exit
from tracekit.ranks.engine import execute, tune_worker
from tracekit.ranks.tasks import Task


def main() -> None:
    task = Task(**json.loads(sys.stdin.read()))
    tune_worker(task.threads)
    outcome = execute(task)
    sys.stdout.write("\n" + json.dumps(outcome) + "\n")
    freeze_before_exit()


if __name__ == "__main__":
    main()
