# Type stub for the native scanner (tracekit/parse/_scan.c).

ROW_FIELDS: list[tuple[str, str, int]]  # (name, numpy format, offset) of one row's fields
ROW_SIZE: int
BITS: dict[str, int]  # field name -> bit of the row's "present" mask
KINDS: dict[str, int]  # kind codes written to the rows
BAIL: int
ERROR: int

class Block:
    """Memory written by the scanner (buffer protocol, read-only)."""

    def __buffer__(self, flags: int, /) -> memoryview: ...

def scan(
    data: bytes, categories: tuple[tuple[bytes, int], ...], /
) -> int | tuple[int, Block, int, bytes, bytes, bytes]: ...
