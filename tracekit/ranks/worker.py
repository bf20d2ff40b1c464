"""``python -m tracekit.ranks.worker``: run one rank in this process and exit; with
``--serve``, import once and run every rank it is sent in a process forked for it.

How a Dask task runs its rank (:func:`tracekit.ranks.cluster.dask_task`): a Dask worker is
a long-lived, daemonic process: it can neither return a rank's memory to the OS nor start
``multiprocessing`` children. So each Dask worker process keeps one server
(``--serve``, started with ``subprocess``): it imports what the local pool's fork server
imports (:mod:`tracekit.preload`) once, then, for every :class:`~tracekit.ranks.tasks.Task`
line on its stdin, forks a process that runs that rank alone, tuned and bounded as a local
pool worker (its own peak RSS, its memory back to the OS when it exits), and writes the
outcome as one JSON line on stdout when that process ends: the worker's threads share it,
each with a rank running at a time. It ends at the end of its stdin (its Dask worker has
gone) or with its parent (``PR_SET_PDEATHSIG``). Without ``--serve``: the Task as JSON on
stdin, the outcome as the last line of stdout.
"""

from __future__ import annotations

import ctypes
import importlib
import json
import os
import selectors
import signal
import sys

from tracekit.io import freeze_before_exit
from tracekit.ranks.tasks import Task, died, remove_leftovers


def main() -> None:
    from tracekit.ranks.engine import execute, tune_worker

    task = Task(**json.loads(sys.stdin.read()))
    tune_worker(task.threads)
    outcome = execute(task)
    sys.stdout.write("\n" + json.dumps(outcome) + "\n")
    freeze_before_exit()


def _fork(task: Task) -> tuple[int, int]:
    """Fork a process that runs ``task`` and writes its outcome on a pipe; (pid, read end)."""
    from tracekit.ranks.engine import execute, tune_worker

    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the rank's process: nothing of it goes to the server's stdout
        os.close(r)
        os.dup2(2, 1)
        code = 0
        try:
            tune_worker(task.threads)
            with os.fdopen(w, "w") as out:
                out.write(json.dumps(execute(task)))
        except BaseException:  # a forked child never unwinds into the server's code
            code = 1
        os._exit(code)
    os.close(w)
    return pid, r


def _outcome(task: Task, pid: int, text: str) -> dict[str, object]:
    """The rank's outcome, once its process has closed its pipe (``died`` if it ended
    without one)."""
    _, status = os.waitpid(pid, 0)
    if text:
        return dict(json.loads(text))
    remove_leftovers(task)
    return died(-os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status))


def serve() -> None:
    """See the module: ``{"id", "task"}`` lines in, ``{"id", "outcome"}`` lines out as the
    ranks end (several run at once: one per Dask worker thread), until stdin ends."""
    if sys.platform == "linux":  # end with the Dask worker that started this server
        ctypes.CDLL(None).prctl(1, signal.SIGTERM)
    from tracekit.ranks.engine import PRELOAD

    importlib.import_module(PRELOAD)  # what every rank's process starts with, as the pool's

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sel = selectors.DefaultSelector()
    stdin = os.fdopen(sys.stdin.fileno(), "rb", buffering=0, closefd=False)
    sel.register(stdin, selectors.EVENT_READ)
    running: dict[int, tuple[str, Task, int, list[bytes]]] = {}  # pipe -> id, task, pid, text
    pending, open_ = b"", True
    while open_ or running:
        for key, _ in sel.select():
            if key.fileobj is stdin:
                chunk = os.read(stdin.fileno(), 65536)
                if not chunk:
                    open_ = False
                    sel.unregister(stdin)
                    continue
                *lines, pending = (pending + chunk).split(b"\n")
                for line in filter(bytes.strip, lines):
                    msg = json.loads(line)
                    task = Task(**msg["task"])
                    pid, fd = _fork(task)
                    running[fd] = (str(msg["id"]), task, pid, [])
                    sel.register(fd, selectors.EVENT_READ)
                continue
            fd = int(key.fd)
            got = os.read(fd, 65536)
            if got:
                running[fd][3].append(got)
                continue
            sel.unregister(fd)
            os.close(fd)
            ident, task, pid, text = running.pop(fd)
            outcome = _outcome(task, pid, b"".join(text).decode())
            sys.stdout.write(json.dumps({"id": ident, "outcome": outcome}) + "\n")
            sys.stdout.flush()


if __name__ == "__main__":
    serve() if sys.argv[1:] == ["--serve"] else main()
