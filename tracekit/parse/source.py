"""The bytes of a trace file, as UTF-8 JSON: what the file is, read in blocks.

The format is recognised by its first bytes, not its name: gzip, xz (and legacy
.lzma), bzip2 and zstd are decompressed as a stream (zstd needs the ``zstandard``
package, or Python 3.14's ``compression.zstd``); a UTF-8 byte order mark is skipped;
UTF-16 and UTF-32 text (with a byte order mark, or recognised by the zero bytes of its
first characters, as RFC 4627 describes) is decoded to UTF-8. Anything that is not a
regular file (a FIFO, a device, a socket) is refused before it is read, since reading
one could block forever. Every problem is a one-line :class:`~tracekit.errors.TraceError`.
"""

from __future__ import annotations

import bz2
import codecs
import lzma
import os
import stat
import zlib
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from tracekit.errors import TraceError

BLOCK = 8 << 20  # bytes read from disk at a time
_RAW_BLOCK = 1 << 20  # compressed bytes fed at a time for xz/bz2/zstd (high ratios)

# (magic, codec); gzip is fed 8 MB at a time, the others 1 MB (their ratio can be 20x+).
_MAGIC = (
    (b"\x1f\x8b", "gzip"),
    (b"\xfd7zXZ\x00", "xz"),
    (b"\x5d\x00\x00", "lzma"),
    (b"BZh", "bzip2"),
    (b"\x28\xb5\x2f\xfd", "zstd"),
)
# Formats recognised only to name them in the error.
_UNSUPPORTED = (
    (b"PK\x03\x04", "a zip archive: unzip it first"),
    (b"\x04\x22\x4d\x18", "lz4-compressed: decompress it first (lz4 -d)"),
    (b"\x89HDF", "an HDF5 file, not a JSON trace"),
    (b"SQLite format 3\x00", "an SQLite database (an Nsight Systems export?), not a JSON trace"),
)
# Byte order marks, longest first (UTF-32-LE's starts with UTF-16-LE's); these codecs
# read the BOM themselves.
_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)
# Zero bytes around the first two ASCII characters of JSON text (RFC 4627, section 3).
_ZEROS = {"000x": "utf-32-be", "x000": "utf-32-le", "0x0x": "utf-16-be", "x0x0": "utf-16-le"}
_WIDTH = {"utf-16": 2, "utf-16-le": 2, "utf-16-be": 2, "utf-32": 4, "utf-32-le": 4, "utf-32-be": 4}


@dataclass(frozen=True)
class Source:
    """What a trace file holds: ``codec`` (``plain``, ``gzip``, ``xz``, ``lzma``,
    ``bzip2``, ``zstd``) and, for plain files, ``encoding`` (``utf-8``, or the
    ``utf-8-sig``/UTF-16/UTF-32 text it is decoded from)."""

    path: Path
    size: int
    codec: str
    encoding: str = "utf-8"

    @property
    def direct(self) -> bool:
        """Plain UTF-8 without a BOM: byte offsets in the file are offsets in the JSON,
        so workers can read their byte ranges themselves."""
        return self.codec == "plain" and self.encoding == "utf-8"

    def json_bytes(self) -> int:
        """About how many bytes of JSON the file holds (compressed: 8x, a typical ratio)."""
        if self.codec != "plain":
            return self.size * 8
        return self.size // _WIDTH.get(self.encoding, 1)


def open_trace(path: Path) -> tuple[BinaryIO, Source]:
    """Open ``path`` for reading and tell its format; only regular files are opened
    (a FIFO is opened without blocking and refused)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise TraceError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise TraceError(f"{path}: is a folder, not a trace file") from None
    except OSError as e:
        raise TraceError(f"{path}: cannot read ({e.strerror})") from None
    f = os.fdopen(fd, "rb")
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise TraceError(f"{path}: is a folder, not a trace file")
        if not stat.S_ISREG(st.st_mode):
            raise TraceError(
                f"{path}: not a regular file ({_file_kind(st.st_mode)}): "
                "tracekit reads trace files only; save the trace to a file first"
            )
        try:
            head = f.read(16)
            f.seek(0)
        except OSError as e:
            raise TraceError(f"{path}: cannot read ({e.strerror})") from None
        return f, _sniff(path, st.st_size, head)
    except BaseException:
        f.close()
        raise


def sniff(path: Path) -> Source:
    """The format of ``path`` (see :func:`open_trace`)."""
    f, src = open_trace(path)
    f.close()
    return src


def _file_kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO / named pipe"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a file"


def _sniff(path: Path, size: int, head: bytes) -> Source:
    for magic, codec in _MAGIC:
        if head.startswith(magic):
            return Source(path, size, codec)
    for magic, what in _UNSUPPORTED:
        if head.startswith(magic):
            raise TraceError(f"{path}: {what}")
    return Source(path, size, "plain", text_encoding(head))


def text_encoding(head: bytes) -> str:
    """The encoding of JSON text from its first bytes: a byte order mark, else the
    pattern of zero bytes around the first (ASCII) characters; default UTF-8."""
    for bom, name in _BOMS:
        if head.startswith(bom):
            return name
    if len(head) >= 4:
        zeros = "".join("0" if b == 0 else "x" for b in head[:4])
        return _ZEROS.get(zeros, "utf-8")
    return "utf-8"


def _decompressor(codec: str, path: Path) -> Callable[[], Any]:
    """A factory of decompress objects (``decompress``, ``eof``, ``unused_data``)."""
    if codec == "gzip":
        return lambda: zlib.decompressobj(zlib.MAX_WBITS | 16)
    if codec in ("xz", "lzma"):
        return lzma.LZMADecompressor
    if codec == "bzip2":
        return bz2.BZ2Decompressor
    try:  # Python 3.14
        from compression import zstd  # type: ignore[import-not-found,unused-ignore]

        return zstd.ZstdDecompressor  # type: ignore[no-any-return,unused-ignore]
    except ImportError:
        pass
    try:
        import zstandard  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        raise TraceError(
            f"{path}: zstd-compressed: install the 'zstandard' package "
            "(pip install zstandard) or decompress it first (zstd -d)"
        ) from None
    return lambda: zstandard.ZstdDecompressor().decompressobj()


def _decompress(f: BinaryIO, src: Source, block: int) -> Iterator[bytes]:
    """The decompressed bytes; concatenated members/streams are read one after another."""
    new = _decompressor(src.codec, src.path)
    raw_block = block if src.codec == "gzip" else min(block, _RAW_BLOCK)
    d = new()
    while raw := f.read(raw_block):
        try:
            if d.eof:  # a new member starts exactly at this block
                d = new()
            out = d.decompress(raw)
            while d.eof and d.unused_data:  # concatenated members
                rest = d.unused_data
                d = new()
                out += d.decompress(rest)
        except MemoryError:
            raise
        except Exception as e:  # zlib.error, LZMAError, OSError (bz2), ZstdError ...
            raise TraceError(f"{src.path}: corrupt {src.codec} data ({e})") from None
        if out:
            yield out
    if not d.eof:
        raise TraceError(
            f"{src.path}: truncated {src.codec} file (the compressed stream ends early)"
        )


def _decode(blocks: Iterator[bytes], encoding: str) -> Iterator[bytes]:
    """UTF-16/32 text as UTF-8; invalid sequences become U+FFFD."""
    dec = codecs.getincrementaldecoder(encoding)(errors="replace")
    for data in blocks:
        if out := dec.decode(data):
            yield out.encode("utf-8", "surrogatepass")
    if out := dec.decode(b"", final=True):
        yield out.encode("utf-8", "surrogatepass")


def _text(blocks: Iterator[bytes], encoding: str) -> Iterator[bytes]:
    """The text as UTF-8: UTF-8 as it is (a BOM skipped), UTF-16/32 decoded."""
    if encoding == "utf-8":
        return blocks
    if encoding == "utf-8-sig":
        return _skip(blocks, len(codecs.BOM_UTF8))
    return _decode(blocks, encoding)


def _skip(blocks: Iterator[bytes], n: int) -> Iterator[bytes]:
    for data in blocks:
        if n:
            data, n = data[n:], max(0, n - len(data))
        if data:
            yield data


def _sniff_text(blocks: Iterator[bytes]) -> Iterator[bytes]:
    """Decompressed text: its encoding from its first bytes, then as UTF-8."""
    head = b""
    for data in blocks:
        head += data
        if len(head) >= 4:
            break
    return _text(_chain(head, blocks), text_encoding(head))


def _chain(first: bytes, blocks: Iterator[bytes]) -> Iterator[bytes]:
    if first:
        yield first
    yield from blocks


def iter_bytes(path: Path, block: int = BLOCK) -> Generator[bytes, None, None]:
    """Yield the file's JSON bytes (decompressed, as UTF-8) in blocks."""
    f, src = open_trace(path)
    with f:
        if src.codec == "plain":
            yield from _text(iter(lambda: f.read(block), b""), src.encoding)
        else:
            yield from _sniff_text(_decompress(f, src, block))
