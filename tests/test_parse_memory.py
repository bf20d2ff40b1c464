"""`tracekit parse`'s memory-saving paths give exactly the tables of the plain build.

Lazy string columns (dictionary-encoded until written, cast slice by slice), tables
released to the writer, and the huge-trace policy (large arrays mapped, each table
written before the next is built) change how memory is used, never the output.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import tracekit.parse as P
from tracekit.parse import parse_tables, parse_to_dir
from tracekit.parse.arrays import materialize
from tracekit.schema import ARROW, TABLES

ROOT = Path(__file__).resolve().parents[1]
TRACE = next((ROOT / "fixtures" / "h200-gpt2s-b8-s128-fp32-naive-stack").glob("*.pt.trace.json.gz"))


@pytest.fixture(scope="module")
def plain() -> dict[str, pa.Table]:
    t = parse_tables(TRACE)
    return {name: getattr(t, name) for name in TABLES}


def test_lazy_released_build_hands_every_table_to_the_writer(plain: dict[str, pa.Table]) -> None:
    got: dict[str, pa.Table] = {}
    t = parse_tables(TRACE, on_table=got.__setitem__, lazy=True, release=True)
    assert set(got) == set(TABLES)
    lazy_cols = [f.name for f in got["ops"].schema if pa.types.is_dictionary(f.type)]
    assert {"name", "input_dims", "module"} <= set(lazy_cols)  # strings not materialised
    for name in TABLES:
        assert getattr(t, name).num_rows == 0  # released: only the writer holds the data
        assert materialize(name, got[name]).equals(plain[name])


@pytest.mark.parametrize("huge", [False, True])
def test_written_tables_equal_the_plain_build(
    plain: dict[str, pa.Table], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, huge: bool
) -> None:
    monkeypatch.setattr(P, "WRITE_ROWS", 1000)  # many slices per lazy table
    if huge:  # the policy for traces over 2 GiB of JSON, on a small one
        monkeypatch.setattr(P, "HUGE_TRACE", 0)
    out = tmp_path / "tables"
    res = parse_to_dir(TRACE, out)
    assert res.meta["counts"]["ops"] == plain["ops"].num_rows > 1000
    for name in TABLES:
        written = pq.read_table(out / f"{name}.parquet")
        assert written.schema.equals(ARROW[name])  # plain strings, as documented
        assert written.equals(plain[name])
