"""The native chunk scanner (tracekit.parse._scan) gives exactly the msgspec path's columns,
or declines the chunk (then msgspec decodes it, as before)."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tracekit.parse import events as C
from tracekit.parse import parse_tables, scan
from tracekit.parse.columns import Accumulator
from tracekit.parse.events import EVENT_LIST as _EVENTS

from .test_parse_golden import CASES, V100, _check, case_params, digest

needs_scan = pytest.mark.skipif(not scan.available(), reason="native scanner not compiled")


def test_extension_is_built_on_ci() -> None:
    """CI installs with `pip install -e .`, which compiles the scanner: prove it did."""
    if os.environ.get("CI", "").lower() != "true":
        pytest.skip("only checked where CI=true")
    assert scan.available(), "tracekit.parse._scan is not importable: the C build failed"


@needs_scan
def test_kind_codes_match_columns() -> None:
    assert scan._scan is not None
    names = set(scan._scan.KINDS)
    assert {k: getattr(C, k) for k in names} == scan._scan.KINDS


# -- exactness on crafted chunks ---------------------------------------------------------------


def _same(a: Accumulator, b: Accumulator) -> None:
    assert a.raw_counts == b.raw_counts
    assert a.dropped == b.dropped
    assert a.python_events == b.python_events
    assert a.metadata == b.metadata
    assert a.tables.keys() == b.tables.keys()
    for kind, cols in a.tables.items():
        assert list(cols) == list(b.tables[kind]), kind
        for name, parts in cols.items():
            other = b.tables[kind][name]
            assert len(parts) == len(other)
            for x, y in zip(parts, other, strict=True):
                if isinstance(x, np.ndarray):
                    assert isinstance(y, np.ndarray) and x.dtype == y.dtype, (kind, name)
                    assert np.array_equal(x, y), (kind, name)
                else:
                    assert x.type == y.type and x.equals(y), (kind, name, x, y)


def _msgspec_acc(body: bytes) -> Accumulator:
    acc = Accumulator()
    acc.add(_EVENTS.decode(b"[" + body + b"]"))
    return acc


def _outcome(body: bytes) -> str:
    """'scanned' (and the columns equal msgspec's), 'bail' or 'invalid' (msgspec raises)."""
    assert scan._scan is not None
    res = scan._scan.scan(body, scan._CATEGORIES)
    if isinstance(res, tuple):
        acc = Accumulator()
        acc.add(scan.Scanned(body, res))
        _same(acc, _msgspec_acc(body))
        return "scanned"
    if res == scan._scan.ERROR:
        with pytest.raises(msgspec.DecodeError):
            _EVENTS.decode(b"[" + body + b"]")
        return "invalid"
    return "bail"


def _ev(**fields: Any) -> str:
    return json.dumps(fields)


K = '"ph": "X", "cat": "kernel", "pid": 0, "tid": 7, "ts": 5.5, "dur": 2'
HANDLED = {
    "escapes in names": (
        '{"ph": "X", "cat": "cpu_op", "name": "a\\"b\\\\c\\/\\u00e9\\ud83d\\ude00\\n\\t", '
        '"pid": 1, "tid": 2, "ts": 1, "dur": 1}, '
        '{"ph": "X", "cat": "cpu_op", "name": "é ü — 漢", "pid": 1, "tid": 2, "ts": 2, "dur": 1}'
    ),
    "pretty-printed": (
        '\n  {\n    "ph" : "X",\n\t"cat": "cuda_runtime", "name": "cudaLaunchKernel",\r\n'
        '    "pid": 1, "tid": 2,\n    "ts": 1712195495519689.047, "dur": 63.813,\n'
        '    "args": {\n      "External id": 2049, "cbid": 211, "correlation": 7\n    }\n  }\n  ,'
        '\n  {"ph": "X", "cat": "cpu_op", "name": "x", "pid": 1, "tid": 2, "ts": 3, "dur": 0}\n'
    ),
    "nested args": (
        '{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 2, "ts": 10.25, '
        '"dur": 3.5, "args": {"External id": 4, "bait": [{"ph": "}, {"}, {"a": [1, [2, {}]]}], '
        '"Input Dims": [[1024, 50304], []], "Input type": ["float", ""], '
        '"Input Strides": [ [50304, 1] , [] ], "Concrete Inputs": ["", "a\\"b"], '
        '"Sequence number": 3, "Fwd thread id": 1, "flops": 123456, "x": {"y": null}}}, '
        '{"ph": "X", "cat": "cpu_op", "name": "b", "pid": 1, "tid": 2, "ts": 11, "dur": 1, '
        '"args": {"Input Dims": null, "Input type": "s", "Concrete Inputs": 5}}'
    ),
    "ns timestamps": ",".join(
        f'{{"ph": "X", "cat": "gpu_memcpy", "name": "m", "pid": 0, "tid": 1, "ts": {ts}, '
        f'"dur": {dur}, "args": {{"device": 0, "stream": 7, "bytes": 64}}}}'
        for ts, dur in [
            ("1712195495519689.047", "1.5"),
            ("1712195495519689", "0"),
            ("-5.5", "-3"),
            ("0.001", "0.010"),
            ("9000000000000000", "1.23"),
        ]
    ),
    "negative and absent values": (
        f'{{{K}, "name": "k", "args": {{"grid": [1, 2, -3], "block": [128, 1, 1], '
        '"registers per thread": -2147483648, "shared memory": null, "correlation": -1}}, '
        '{"ph": "X", "cat": "kernel", "name": "k2", "pid": 3, "tid": 9, "ts": 1, '
        '"args": {"External id": 1}}, '
        '{"ph": "X", "cat": "kernel", "name": "k3", "pid": 3, "tid": 9, "dur": 4}, '
        '{"ph": "X", "cat": "kernel", "name": null, "pid": 3, "tid": 9, "ts": null, "dur": null}, '
        '{"ph": "X", "cat": "Kernel", "pid": 3, "tid": 9, "ts": 2, "dur": 1, "args": {}}'
    ),
    "every kind": ",".join(
        [
            '{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#3", "pid": 1, '
            '"tid": 2, "ts": 1, "dur": 100}',
            '{"ph": "X", "cat": "gpu_memset", "name": "Memset", "pid": 0, "tid": 7, "ts": 2, '
            '"dur": 1, "args": {"device": 0, "stream": 7, "bytes": 1536}}',
            '{"ph": "X", "cat": "cuda_driver", "name": "cuLaunchKernel", "pid": 1, "tid": 2, '
            '"ts": 3, "dur": 1, "args": {"cbid": 307, "correlation": 9}}',
            '{"ph": "X", "cat": "python_function", "name": "nn.Module: Linear_0", "pid": 1, '
            '"tid": 2, "ts": 4, "dur": 10}',
            '{"ph": "X", "cat": "python_function", "name": "torch/nn/x.py(12): f", "pid": 1, '
            '"tid": 2, "ts": 4, "dur": 10}',
            '{"ph": "X", "cat": "python_function", "name": 5, "pid": 1, "tid": 2, "ts": 4}',
            '{"ph": "X", "cat": "python_function", "name": "nn.Module: NoTs", "pid": 1}',
            '{"ph": "X", "cat": "gpu_user_annotation", "name": "g", "pid": 0, "tid": 7, '
            '"ts": 5, "dur": 3}',
            '{"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 2, '
            '"ts": 6, "s": "t", "args": {"Device Type": 1, "Device Id": 0, '
            '"Addr": 140234234234, "Bytes": -512, "Total Allocated": 1024, '
            '"Total Reserved": 2097152}}',
            '{"ph": "i", "name": "[memory]", "pid": 1, "tid": 2, "ts": 7, "args": {}}',
            '{"ph": "f", "id": 1, "pid": 1, "tid": 2, "ts": 8, "cat": "fwdbwd", '
            '"name": "fwdbwd", "bp": "e"}',
            '{"ph": "s", "id": 1, "pid": 1, "tid": 2, "ts": 8, "cat": "ac2g", "name": "ac2g"}',
            '{"ph": "C", "name": "counter", "pid": 1, "ts": 8.5, "args": {"v": 1.5}}',
            '{"name": "process_name", "ph": "M", "pid": 1, "tid": 0, "args": {"name": "python"}}',
            '{"name": "thread_name", "ph": "M", "pid": "Spans", "tid": [1], '
            '"args": {"name": null}}',
            '{"ph": 5, "cat": null, "name": "odd"}',
            "{}",
        ]
    ),
    "unknown kinds ignore odd fields": (
        '{"ph": "X", "cat": "Trace", "name": 1.5, "pid": "a", "ts": "x", "dur": 1e99}, '
        '{"ph": "s", "cat": "cpu_op", "name": [], "ts": 1.23456}'
    ),
}


@needs_scan
@pytest.mark.parametrize("case", sorted(HANDLED))
def test_scanner_handles_and_matches(case: str) -> None:
    assert _outcome(HANDLED[case].encode()) == "scanned"


BAILS = {
    "float where an int is read": f'{{{K}, "name": "k", "args": {{"stream": 7.0}}}}',
    "ts with 4 decimals": '{"ph": "X", "cat": "cpu_op", "name": "a", "ts": 1.2345}',
    "ts with an exponent": '{"ph": "X", "cat": "cpu_op", "name": "a", "ts": 1e3}',
    "ts as text": '{"ph": "X", "cat": "cpu_op", "name": "a", "ts": "12"}',
    "ts beyond int64 ns": '{"ph": "X", "cat": "cpu_op", "name": "a", "ts": 9300000000000000}',
    "non-string name": '{"ph": "X", "cat": "cpu_op", "name": 12, "ts": 1}',
    "grid of 2": f'{{{K}, "name": "k", "args": {{"grid": [1, 2]}}}}',
    "grid beyond int32": f'{{{K}, "name": "k", "args": {{"grid": [2147483648, 1, 1]}}}}',
    "bool int": '{"ph": "X", "cat": "cpu_op", "name": "a", "ts": 1, "pid": true}',
    "huge int": '{"ph": "X", "cat": "cpu_op", "name": "a", "ts": 1, "tid": 99999999999999999999}',
    "duplicate key": '{"ph": "X", "cat": "cpu_op", "name": "a", "name": "b", "ts": 1}',
    "duplicate args key": (
        '{"ph": "i", "name": "[memory]", "ts": 1, "args": {"Bytes": 1, "Bytes": 2}}'
    ),
    "escaped key": '{"ph": "X", "cat": "cpu_op", "n\\u0061me": "a", "ts": 1}',
    "non-ASCII category": '{"ph": "X", "cat": "\\u212aernel", "name": "a", "ts": 1}',
    "args not an object": '{"ph": "X", "cat": "cpu_op", "name": "a", "ts": 1, "args": null}',
    "event not an object": '{"ph": "X"}, [1]',
    "invalid UTF-8": b'{"ph": "X", "cat": "cpu_op", "name": "a", "x": "\xff"}'.decode("latin-1"),
    "flops beyond 2**53": (
        '{"ph": "X", "cat": "cpu_op", "name": "a", "ts": 1, "args": {"flops": 9007199254740993}}'
    ),
    "deep nesting": '{"ph": "X", "x": ' + "[" * 80 + "]" * 80 + "}",
}


@needs_scan
@pytest.mark.parametrize("case", sorted(BAILS))
def test_scanner_declines_what_it_does_not_reproduce(case: str) -> None:
    assert _outcome(BAILS[case].encode("latin-1")) == "bail"


INVALID = {
    "cut inside a string": '{"ph": "X", "name": "a}, {',
    "cut inside nested args": '{"ph": "X", "args": {"a": [{"b": 1}',
    "unbalanced close": '{"ph": "X"}]',
    "trailing comma": '{"ph": "X"},',
    "trailing comma in object": '{"ph": "X",}',
    "missing colon": '{"ph" "X"}',
    "control character": '{"name": "a\tb"}',
    "lone surrogate": '{"name": "\\ud800"}',
    "bad escape": '{"name": "\\x41"}',
    "leading zero": '{"ts": 01}',
    "bare minus": '{"ts": -}',
    "NaN": '{"ts": NaN}',
    "bad literal": '{"x": nul}',
    "two events without comma": '{"ph": "X"} {"ph": "X"}',
}


@needs_scan
@pytest.mark.parametrize("case", sorted(INVALID))
def test_scanner_reports_malformed_json(case: str) -> None:
    assert _outcome(INVALID[case].encode()) == "invalid"


# -- property: random events ----------------------------------------------------------------------

_JUNK = st.sampled_from(
    [
        "0",
        "-0",
        "-7",
        "12.5",
        "1712195495519689.047",
        "3.14159",
        "1e3",
        "-2.5E-2",
        "2147483648",
        "123456789012345678901",
        "0.000",
        "9007199254740993",
        "null",
        "true",
        "false",
        "[]",
        "{}",
        "[1, 2, 3]",
        "[1,2]",
        '[1, "a", 3]',
        '{"a": [1, {"b": "}, {"}]}',
        '"x"',
        '"[memory]"',
        '"a\\"b\\u00e9"',
        '"\\u0058"',
        '"KERNEL"',
    ]
)
_INTS = st.sampled_from(["0", "-1", "7", "1712195495519689", "-2147483648", "null"])
_TIMES = st.sampled_from(["0", "1", "-3", "12.5", "1712195495519689.047", "0.010", "null"])
_TRIPLES = st.sampled_from(["[1, 2, 3]", "[ 128 ,1,1 ]", "[-1, 0, 2147483647]", "null"])
_RAWS = st.sampled_from(["[[1, 2], []]", '["float", "a\\"b"]', "null", '""', "{}", "[ ]"])
_EVENT_KEYS = {
    "pid": _INTS,
    "tid": _INTS,
    "ts": _TIMES,
    "dur": _TIMES,
    "id": _INTS,
    "bp": _JUNK,
    "s": _JUNK,
    "zzz": _JUNK,
}
_ARG_KEYS = {
    **{
        k: _INTS
        for k in [
            "External id",
            "correlation",
            "device",
            "stream",
            "bytes",
            "registers per thread",
            "shared memory",
            "Sequence number",
            "Fwd thread id",
            "flops",
            "cbid",
            "Device Type",
            "Device Id",
            "Addr",
            "Bytes",
            "Total Allocated",
            "Total Reserved",
            "Python id",
        ]
    },
    **{k: _RAWS for k in ["Input Dims", "Input type", "Input Strides", "Concrete Inputs"]},
    "grid": _TRIPLES,
    "block": _TRIPLES,
    "name": _JUNK,
    "other": _JUNK,
}


def _value(draw: st.DrawFn, good: st.SearchStrategy[str]) -> str:
    return draw(_JUNK) if draw(st.integers(0, 19)) == 0 else draw(good)


@st.composite
def _event(draw: st.DrawFn) -> str:
    """One event: mostly well-typed values (so that chunks are scanned), some junk (so that
    the scanner's declines are exercised), keys in any order, sometimes repeated."""
    ph = draw(st.sampled_from(['"X"', '"X"', '"X"', '"i"', '"f"', '"M"', '"s"', "1"]))
    cat = draw(
        st.sampled_from(
            [
                '"cpu_op"',
                '"kernel"',
                '"gpu_memcpy"',
                '"cuda_runtime"',
                '"python_function"',
                '"gpu_user_annotation"',
                '"fwdbwd"',
                '"Kernel"',
                '"user_annotation"',
                '"cuda_driver"',
                "null",
            ]
        )
    )
    name = draw(
        st.sampled_from(['"[memory]"', '"nn.Module: M"', '"aten::mm"', '"n\\u00e9"', "null", "5"])
    )
    members = [f'"ph": {ph}', f'"cat": {cat}', f'"name": {name}']
    for key in draw(st.lists(st.sampled_from(sorted(_EVENT_KEYS)), max_size=6)):
        members.append(f'"{key}": {_value(draw, _EVENT_KEYS[key])}')
    if draw(st.booleans()):
        keys = draw(st.lists(st.sampled_from(sorted(_ARG_KEYS)), max_size=8))
        args = [f'"{k}": {_value(draw, _ARG_KEYS[k])}' for k in keys]
        members.append('"args": {' + ", ".join(args) + "}")
    order = draw(st.permutations(members))
    sep = draw(st.sampled_from([", ", ",\n    ", ","]))
    return "{" + sep.join(order) + "}"


@needs_scan
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=st.lists(_event(), max_size=6), cut=st.integers(0, 400))
def test_random_chunks_scan_exactly_or_decline(events: list[str], cut: int) -> None:
    body = ",\n  ".join(events).encode()
    _outcome(body)
    _outcome(body[: len(body) - cut])  # cut anywhere: never accepted unless msgspec accepts


# -- whole traces: fixtures, the worker path, the scanner off ---------------------------------


@needs_scan
@pytest.mark.parametrize("name", case_params())
def test_golden_with_scanner_off(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The msgspec path (no extension, or TRACEKIT_NO_SCAN=1) still gives the golden tables
    (test_parse_golden runs them with the scanner on where it is compiled)."""
    src, make = CASES[name]
    if not src.is_file():
        pytest.skip(f"{src} not available")
    monkeypatch.setenv("TRACEKIT_NO_SCAN", "1")
    scan.STATS.clear()
    _check(name, digest(parse_tables(make(tmp_path))))
    assert not scan.STATS


@needs_scan
@pytest.mark.parametrize("name", case_params())
def test_fixtures_take_the_fast_path(name: str, tmp_path: Path) -> None:
    src, make = CASES[name]
    if not src.is_file():
        pytest.skip(f"{src} not available")
    scan.STATS.clear()
    parse_tables(make(tmp_path), workers=1)
    assert scan.STATS["scanned"] >= 1
    assert scan.STATS["bail"] == 0, dict(scan.STATS)


@needs_scan
@pytest.mark.parametrize("use_scan", [True, False], ids=["scan", "msgspec"])
@pytest.mark.parametrize("chunk", [64 << 10, 512 << 10])
def test_worker_path_small_chunks(
    chunk: int, use_scan: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Dozens of chunks through the worker path (not its serial fallback): the golden
    tables, with the scanner and without."""
    import tracekit.parse as P

    if not V100.is_file():
        pytest.skip(f"{V100} not available")
    if not use_scan:
        monkeypatch.setenv("TRACEKIT_NO_SCAN", "1")
    src = tmp_path / "v100.json"
    src.write_bytes(gzip.decompress(V100.read_bytes()))
    results: list[Any] = []
    real = P.parse_parallel
    monkeypatch.setattr(P, "parse_parallel", lambda *a: results.append(real(*a)) or results[-1])
    tables = parse_tables(src, chunk=chunk, workers=2)
    assert results and results[0] is not None, "the worker path fell back to the serial reader"
    tables.meta["source"]["bytes_on_disk"] = V100.stat().st_size  # the golden parsed the .gz
    _check("v100", digest(tables))
