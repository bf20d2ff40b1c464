"""Atomic output: a failure never leaves half-written files or folders behind; the gzip
level of what tracekit writes; the memory and exit policy of short-lived processes that
only produce output (:func:`keep_freed_memory`, :func:`freeze_before_exit`); and the one
check of an input path that every command makes first (:func:`readable_input`).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import gc
import gzip
import json
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tracekit.errors import UsageError


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def file_mode() -> int:
    """The mode a new file gets under the current umask (mkstemp's 0600 is too strict)."""
    return 0o666 & ~_umask()


@contextlib.contextmanager
def atomic_dir(final: Path, *, replace: bool = True) -> Iterator[Path]:
    """Yield a temporary folder beside ``final``; rename it into place on success.

    On any exception the temporary folder is removed and ``final`` is left as it
    was. With ``replace``, an existing ``final`` is swapped out only after the new
    content is complete.
    """
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent))
    os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp makes 0700; outputs get the usual mode
    try:
        yield tmp
        if final.exists():
            if not replace:
                raise FileExistsError(final)
            old = final.with_name(f".{final.name}.old.{os.getpid()}")
            final.rename(old)
            tmp.rename(final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            tmp.rename(final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


@contextlib.contextmanager
def atomic_file(final: Path, suffix: str = ".tmp") -> Iterator[Path]:
    """Yield a new, empty temporary file beside ``final`` (its name ends in ``suffix``, for
    writers that pick a format by extension); rename it to ``final`` on success, delete it
    on any exception (Ctrl-C included)."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{final.name}.", suffix=suffix, dir=final.parent)
    os.fchmod(fd, file_mode())  # mkstemp makes 0600
    os.close(fd)
    try:
        yield Path(tmp)
        os.replace(tmp, final)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


# gzip level of every trace and table tracekit writes. Level 6 (gzip's own default) on a
# Kineto trace: 7x faster than level 9 for 11 % more bytes (benchmarks/trace_gzip.py).
GZIP_LEVEL = 6
_CHUNK = 1 << 20


def gzip_bytes(data: bytes) -> bytes:
    """``data`` gzipped at :data:`GZIP_LEVEL`, with no timestamp (same bytes, same file)."""
    return gzip.compress(data, compresslevel=GZIP_LEVEL, mtime=0)


def gzip_file(src: Path, dst: Path) -> None:
    """Gzip the file ``src`` into ``dst`` in 1 MiB blocks (a trace of any size streams
    through; torch's own ``.gz`` export feeds zlib one JSON line at a time, at level 9)."""
    with (
        open(src, "rb") as fin,
        open(dst, "wb") as raw,
        gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=GZIP_LEVEL, mtime=0) as fout,
    ):
        shutil.copyfileobj(fin, fout, _CHUNK)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file and an atomic rename."""
    with atomic_file(path) as tmp, open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n")


def keep_freed_memory() -> None:
    """Keep freed memory in this process's heap instead of returning it to the kernel.

    A parse allocates and frees a few hundred MB per chunk; with glibc's defaults the
    large blocks are unmapped and every page of the next chunk faults in again, which
    costs ~25% of the parse on VMs where page faults are expensive. Threads (the parse's
    workers) share the main heap: a thread's own arena is at most 64 MB, so a chunk's
    blocks would be mapped afresh outside it. Call it before pyarrow is imported: its
    allocator starts a thread, and glibc hands later threads that thread's arena.
    Only for processes that are ours and short-lived (parse worker processes,
    ``tracekit parse``): the memory is reused, not returned, until the process exits.
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(_M_MMAP_THRESHOLD, 1 << 30)
        libc.mallopt(_M_TRIM_THRESHOLD, 1 << 30)
        libc.mallopt(_M_ARENA_MAX, 1)
    except (OSError, AttributeError):  # not glibc: defaults are fine
        pass


def freeze_before_exit() -> None:
    """Let this process exit without the garbage collector walking every object it holds.

    Call it when the process's work is done, just before it exits. At exit CPython
    collects garbage over all live objects, and again while it clears the modules; after
    torch (and torch._dynamo, which the optimizer and the profiler import) that is millions
    of objects: 1.5 CPU-s of a CPU ``tracekit collect``'s exit, 0.3 s with them moved into
    the permanent generation first (``python benchmarks/exit_cost.py``). Only the collector
    skips them: atexit handlers still run, files are closed and streams flushed as usual,
    and cyclic garbage among them is left to the OS."""
    gc.freeze()


def return_freed_memory() -> None:
    """Undo :func:`keep_freed_memory` from here on: large blocks are mapped (and unmapped
    when freed) and the free pages kept so far go back to the kernel (``malloc_trim``).

    For traces of several GB: the chunk-by-chunk decode leaves a heap of small holes that
    the build's large arrays cannot reuse, so kept memory would add up to gigabytes."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(_M_MMAP_THRESHOLD, 1 << 20)
        libc.mallopt(_M_TRIM_THRESHOLD, 1 << 20)
        libc.malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass


_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD, _M_ARENA_MAX = -1, -3, -8  # glibc <malloc.h>


def readable_input(*paths: Path) -> None:
    """Refuse an input path that cannot be read, in one wording for every command: ``PATH:
    no such file or folder`` (also a dangling symbolic link) or ``PATH: cannot read
    (REASON)`` (a symbolic-link loop, no permission, ...). The CLI calls it before the
    heavy imports (pandas, pyarrow, torch), so a bad path fails at once. A regular file or
    a folder is opened and closed; other kinds (a FIFO) are left to the reader, which says
    what it takes."""
    for path in paths:
        _readable(path)


def _readable(path: Path) -> None:
    try:
        mode = os.stat(path).st_mode
        if stat.S_ISDIR(mode):
            os.scandir(path).close()
        elif stat.S_ISREG(mode):
            os.close(os.open(path, os.O_RDONLY | os.O_NONBLOCK))
    except OSError as e:
        if e.errno in (errno.ENOENT, errno.ENOTDIR):
            raise UsageError(f"{path}: no such file or folder") from None
        raise UsageError(f"{path}: cannot read ({e.strerror or e})") from None
