"""Property-based robustness: mutated real traces parse consistently or fail cleanly,
and parsed counts equal an independent count of the raw events."""

from __future__ import annotations

import bz2
import functools
import gzip
import hashlib
import importlib.util
import json
import lzma
import os
import random
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tracekit.errors import TraceError, TracekitError
from tracekit.parse import default_out, find_trace, load, parse_tables, parse_to_dir

from . import tracegen as tg

EXTERNAL = Path(__file__).resolve().parents[2] / "shared" / "external-traces"
ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "fixtures"


def _real_traces() -> list[Path]:
    found = sorted(FIXTURES.glob("*/*.pt.trace.json.gz"))  # run folders, not copies
    if EXTERNAL.is_dir():
        found += sorted(EXTERNAL.glob("*.json.gz"))
    return found


class _RawEvent(msgspec.Struct):
    ph: str = ""
    cat: str = ""
    name: str = ""


class _RawTrace(msgspec.Struct):
    traceEvents: list[_RawEvent]


def raw_counts(events: list[_RawEvent]) -> Counter[str]:
    """Count events the way the parser's tables should, straight from the JSON."""
    names = {
        "kernel": "kernel",
        "gpu_memcpy": "memcpy",
        "gpu_memset": "memset",
        "cpu_op": "ops",
        "user_annotation": "ops",
        "cuda_runtime": "runtime",
        "cuda_driver": "runtime",
    }
    c: Counter[str] = Counter()
    for e in events:
        if e.ph == "X" and e.cat in names:
            c[names[e.cat]] += 1
        if e.ph == "i" and e.name == "[memory]":
            c["memory"] += 1
    return c


def _id(p: Path) -> str:
    return p.name if p.parent == EXTERNAL else p.parent.name


@pytest.mark.parametrize("path", _real_traces(), ids=_id)
def test_counts_equal_raw_event_counts(path: Path) -> None:
    # decoded independently of tracekit.parse: msgspec keeps the three fields counted
    raw = msgspec.json.decode(gzip.decompress(path.read_bytes()), type=_RawTrace)
    want = raw_counts(raw.traceEvents)
    t = load(path)
    got = {
        "kernel": int((t.kernels.kind == "kernel").sum()),
        "memcpy": int((t.kernels.kind == "memcpy").sum()),
        "memset": int((t.kernels.kind == "memset").sum()),
        "ops": len(t.ops),
        "runtime": len(t.runtime),
        "memory": len(t.memory),
    }
    assert got == {k: want.get(k, 0) for k in got}
    launched = t.kernels[t.kernels.runtime_id >= 0]
    if len(launched):
        assert (launched.op_id >= 0).mean() >= 0.99  # link rate


def _mutate(doc: dict[str, Any], rnd: random.Random, how: str) -> bytes:
    ev = [dict(e) for e in doc["traceEvents"]]
    if how == "drop":
        for e in rnd.sample(ev, k=max(1, len(ev) // 5)):
            keys = list(e)
            if keys:
                e.pop(rnd.choice(keys))
    elif how == "types":
        junk: list[Any] = [None, "x", 1.5, [], {}, -7, True]
        for e in rnd.sample(ev, k=max(1, len(ev) // 5)):
            keys = list(e)
            if keys:
                e[rnd.choice(keys)] = rnd.choice(junk)
    elif how == "shuffle":
        rnd.shuffle(ev)
    text = json.dumps({**doc, "traceEvents": ev}, indent=1).encode()
    if how == "truncate":
        text = text[: rnd.randrange(1, len(text))]
    return text


def _consistent(t: Any) -> None:
    n_ops = len(t.ops)
    assert ((t.kernels.op_id >= -1) & (t.kernels.op_id < n_ops)).all()
    assert ((t.ops.parent >= -1) & (t.ops.parent < n_ops)).all()
    assert (t.ops.parent < t.ops.op_id).all()  # parents start first
    assert (t.kernels.dur >= 0).all() and (t.ops.dur >= 0).all()
    assert list(t.kernels.kernel_id) == list(range(len(t.kernels)))
    c = t.meta["counts"]
    assert c["kernels"] + c["memcpy"] + c["memset"] == len(t.kernels)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    seed=st.integers(0, 2**32 - 1), how=st.sampled_from(["drop", "types", "shuffle", "truncate"])
)
def test_mutated_traces_parse_or_fail_cleanly(seed: int, how: str, tmp_path: Path) -> None:
    rnd = random.Random(seed)
    sources = [tg.small_trace()]
    ext = EXTERNAL / "a100_alexnet_train.pt.trace.json.gz"
    if ext.is_file():
        sources.append(json.loads(gzip.decompress(ext.read_bytes())))
    doc = rnd.choice(sources)
    p = tmp_path / f"m{seed}.json"
    p.write_bytes(_mutate(doc, rnd, how))
    try:
        tables = parse_tables(p)
    except TraceError as e:
        assert "\n" not in str(e)
        return
    t = load(p)
    _consistent(t)
    if how == "shuffle":  # order of events must not matter
        ref = parse_tables(tg.write(doc, tmp_path / "ref.json"))
        for (name, a), (_, b) in zip(ref.items(), tables.items(), strict=True):
            assert a.num_rows == b.num_rows, name


# -- damaged values and bytes ------------------------------------------------------------------

BIG = ["9223372036854775808", "-9223372036854775809", "18446744073709551616", "1" + "0" * 30]
BIG += ["9.223372036854776e+18", "1e19", '"9223372036854775808"', "[1, 2]", '"x"', "1e400"]


@pytest.mark.parametrize("value", BIG)
@pytest.mark.parametrize("scanner", ["1", "0"], ids=["msgspec", "native"])
def test_out_of_range_ints_read_as_missing(
    value: str, scanner: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A correlation id (or any int field) beyond int64, or not a number at all: the value
    is read as missing (-1 / null) and counted in meta's bad_values, never a crash."""
    monkeypatch.setenv("TRACEKIT_NO_SCAN", scanner)
    doc = tg.small_trace()
    kernel = next(e for e in doc["traceEvents"] if e.get("cat") == "kernel")
    kernel["args"]["correlation"] = "@BIG@"
    kernel["args"]["registers per thread"] = "@BIG@"
    kernel["args"]["grid"] = ["@BIG@", 1, 1]
    op = next(e for e in doc["traceEvents"] if e.get("cat") == "cpu_op")
    op["args"]["Sequence number"] = "@BIG@"
    op["args"]["flops"] = "@BIG@"
    text = json.dumps(doc).replace('"@BIG@"', value)
    p = tmp_path / "big.json"
    p.write_text(text)
    t = load(p)
    k = t.kernels.set_index("name").loc[kernel["name"]]
    assert k.correlation == -1 and k.runtime_id == -1
    assert k.registers_per_thread is None or k.registers_per_thread != k.registers_per_thread
    assert t.meta["bad_values"]["kernel.correlation"] == 1
    assert t.meta["bad_values"]["kernel.registers per thread"] == 1
    assert t.meta["bad_values"]["kernel.grid"] == 1
    assert t.meta["bad_values"]["cpu_op.Sequence number"] == 1
    assert t.ops.set_index("name").loc[op["name"]].sequence_number == -1
    not_a_float = value in ("[1, 2]", '"x"', "1e400")  # 2**63 and 1e30 are fine as flops
    assert t.meta["bad_values"].get("cpu_op.flops", 0) == not_a_float


def _tables_equal(a: Any, b: Any) -> bool:
    return all(x.equals(y) for (_, x), (_, y) in zip(a.items(), b.items(), strict=True))


def _small_text() -> bytes:
    return json.dumps(tg.small_trace(), indent=1).encode()


KERNEL_NAME = b"ampere_sgemm_32x32_sliced1x4_tn"
BAD_UTF8 = {
    "lone byte ff": b"\xff",
    "lone continuation": b"\x80",
    "overlong nul": b"\xc0\x80",
    "utf-8 surrogate": b"\xed\xa0\x80",
    "beyond U+10FFFF": b"\xf4\x90\x80\x80",
    "truncated sequence": b"\xe2\x82",
    "lone surrogate escape": rb"\ud800",
    "reversed surrogate escapes": rb"\udc00\ud800",
}


@pytest.mark.parametrize("damage", sorted(BAD_UTF8))
@pytest.mark.parametrize("scanner", ["0", "1"], ids=["native", "msgspec"])
def test_invalid_utf8_in_strings_reads_as_replacement_character(
    damage: str, scanner: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bytes that are not UTF-8 (or escapes of lone surrogates) in a kernel name, an
    op's argument, a key and a header string read as U+FFFD, as json.loads(errors=
    'replace') would; the rest of the trace is unchanged."""
    monkeypatch.setenv("TRACEKIT_NO_SCAN", scanner)
    bad = BAD_UTF8[damage]
    text = _small_text().replace(KERNEL_NAME, KERNEL_NAME[:6] + bad + KERNEL_NAME[6:], 1)
    text = text.replace(b'"aten::addmm"', b'"aten::add' + bad + b'mm"', 1)
    text = text.replace(b'"correlation"', b'"corr' + bad + b'elation"', 1)
    text = text.replace(b'"Scalar"', b'"Sca' + bad + b'lar"', 1)  # raw JSON text (shapes)
    text = text.replace(b"{", b'{"distributedInfo": {"backend": "nc' + bad + b'cl"}, ', 1)
    p = tmp_path / "bad.json"
    p.write_bytes(text)
    t = load(p)
    names = list(t.kernels.name)
    hit = [n for n in names if n.startswith(KERNEL_NAME[:6].decode()) and "\ufffd" in n]
    assert len(hit) == 1 and hit[0].replace("\ufffd", "") == KERNEL_NAME.decode()
    assert any("\ufffd" in n for n in t.ops.name)
    assert t.ops.input_types.str.contains("Sca\ufffd").sum() == 1 or "surrogate" in damage
    assert "\ufffd" in t.meta["distributed_info"]["backend"]
    ref = load(tg.write(tg.small_trace(), tmp_path / "ref.json"))
    assert len(t.kernels) == len(ref.kernels) and len(t.ops) == len(ref.ops)


class _OldPolicy:
    """A decoder that reports invalid UTF-8 as msgspec <= 0.22 did (UnicodeDecodeError),
    and one that reports it as 0.23 does (DecodeError): ``loads`` must repair either."""

    def __init__(self, error: type[Exception]) -> None:
        self.error = error

    def decode(self, data: bytes) -> Any:
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as e:
            if self.error is UnicodeDecodeError:
                raise
            raise msgspec.DecodeError("Invalid UTF-8 encoded string") from e
        return msgspec.json.decode(data)


@pytest.mark.parametrize("error", [UnicodeDecodeError, msgspec.DecodeError])
@pytest.mark.parametrize("damage", sorted(k for k in BAD_UTF8 if "escape" not in k))
def test_utf8_repair_whatever_the_decoders_error(damage: str, error: type[Exception]) -> None:
    """The repair is decided by the bytes, not by which exception a msgspec release
    raises; JSON that is malformed for another reason still raises DecodeError."""
    from tracekit.parse.events import loads

    bad = BAD_UTF8[damage]
    got = loads(_OldPolicy(error), b'[{"name": "ab' + bad + b'c"}]')  # type: ignore[arg-type]
    assert got[0]["name"].startswith("ab\ufffd") and got[0]["name"].endswith("c")
    with pytest.raises(msgspec.DecodeError):
        loads(_OldPolicy(error), b'[{"name": "ab' + bad + b'c",,}]')  # type: ignore[arg-type]
    with pytest.raises(msgspec.DecodeError):
        loads(_OldPolicy(error), b'[{"name": "abc",,}]')  # type: ignore[arg-type]


def test_real_trace_with_damaged_name_parses_like_the_undamaged(tmp_path: Path) -> None:
    """Two bytes that are not UTF-8 in one kernel's name of a real trace, deep in the file:
    every table as the undamaged trace's but for that name, which carries U+FFFD."""
    src = FIXTURES / "h200-gpt2s-b8-s128-bf16-sdpa"
    text = gzip.decompress(next(src.glob("*.pt.trace.json.gz")).read_bytes())
    at = text.find(b'"cat": "kernel"', len(text) // 2)
    at = text.find(b'"name": "', at) + len(b'"name": "') + 3
    assert at > len(text) // 2
    bad = tmp_path / "bad.json"
    bad.write_bytes(text[:at] + b"\xff\xfe" + text[at:])
    good = tmp_path / "good.json"
    good.write_bytes(text)
    a, b = parse_tables(good), parse_tables(bad)
    for key in ("ops", "kernels", "runtime", "memory", "steps"):
        ta, tb = getattr(a, key), getattr(b, key)
        assert ta.num_rows == tb.num_rows, key
    names_a = a.kernels.column("name").to_pylist()
    names_b = b.kernels.column("name").to_pylist()
    diff = [(x, y) for x, y in zip(names_a, names_b, strict=True) if x != y]
    assert len(diff) == 1 and diff[0][1].count("\ufffd") == 2
    assert diff[0][1].replace("\ufffd", "") == diff[0][0]


def test_malformed_json_names_the_damaged_byte(tmp_path: Path) -> None:
    """A message about malformed JSON points at the byte where it is malformed, in a chunk
    far into the file (not at the chunk's start)."""
    doc = tg.small_trace()
    for i in range(400):
        doc["traceEvents"].append(tg.op(f"aten::pad{i}", 20_000 + i, 0.5, 9000 + i))
    text = json.dumps(doc, indent=1).encode()
    at = text.find(b'"aten::pad333"')
    text = text[:at] + b"," + text[at:]  # "name": ,"aten::pad333"
    p = tmp_path / "bad.json"
    p.write_bytes(text)
    for chunk in (4 << 10, 32 << 20):
        with pytest.raises(TraceError, match=r"malformed JSON near byte (\d+)") as e:
            parse_tables(p, chunk=chunk, workers=1)
        got = int(str(e.value).split("near byte ")[1].split(":")[0])
        assert got == at, (chunk, str(e.value))


def test_utf8_damage_in_parallel_chunks_matches_serial(tmp_path: Path) -> None:
    """The worker path (threads with the scanner) repairs a chunk the same way."""
    doc = tg.small_trace()
    for i in range(200):  # enough events for many 4 KB chunks
        doc["traceEvents"].append(tg.op(f"aten::pad{i}", 20_000 + i, 0.5, 9000 + i))
    text = json.dumps(doc, indent=1).encode().replace(b"aten::pad17", b"aten::pad\xff17")
    p = tmp_path / "bad.json"
    p.write_bytes(text)
    serial = parse_tables(p, workers=1)
    assert _tables_equal(serial, parse_tables(p, chunk=4 << 10, workers=2))
    assert "aten::pad\ufffd17" in serial.ops.column("name").to_pylist()


def _compress(codec: str, data: bytes) -> bytes:
    if codec == "gzip":
        return gzip.compress(data)
    if codec == "xz":
        return lzma.compress(data)
    if codec == "bzip2":
        return bz2.compress(data)
    zstd = pytest.importorskip("zstandard")
    return bytes(zstd.ZstdCompressor().compress(data))


@pytest.mark.parametrize("codec", ["gzip", "xz", "bzip2", "zstd"])
@pytest.mark.parametrize("suffix", [".json", ".pt.trace.json.{ext}"])
def test_compressed_traces_read_by_magic_bytes(codec: str, suffix: str, tmp_path: Path) -> None:
    """Any of the formats reads the same, by content whatever the name; two concatenated
    streams (pigz, pbzip2, xz -T) read as one."""
    text = _small_text()
    ext = {"gzip": "gz", "xz": "xz", "bzip2": "bz2", "zstd": "zst"}[codec]
    p = tmp_path / ("trace" + suffix.format(ext=ext))
    p.write_bytes(_compress(codec, text[:700]) + _compress(codec, text[700:]))
    ref = parse_tables(tg.write(tg.small_trace(), tmp_path / "ref.json"))
    got = parse_tables(p)
    assert _tables_equal(ref, got)
    assert got.meta["source"]["bytes_json"] == len(text)
    cut = tmp_path / ("cut" + suffix.format(ext=ext))
    cut.write_bytes(_compress(codec, text)[:-12])
    with pytest.raises(TraceError, match=f"truncated {codec}|corrupt {codec}") as e:
        parse_tables(cut)
    assert "\n" not in str(e.value)


def test_zstd_without_a_decoder_names_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "zstandard", None)  # import zstandard fails
    monkeypatch.setitem(sys.modules, "compression", None)
    p = tmp_path / "t.json.zst"
    p.write_bytes(b"\x28\xb5\x2f\xfd" + b"\0" * 20)
    with pytest.raises(TraceError, match=r"zstd-compressed: install the 'zstandard' package"):
        parse_tables(p)


@pytest.mark.parametrize(
    "encoding", ["utf-8-sig", "utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-32-le"]
)
def test_text_encodings_are_decoded(encoding: str, tmp_path: Path) -> None:
    """A BOM is skipped; UTF-16/32 (with a BOM or recognised by its zero bytes) is decoded,
    also inside a compressed file and through the worker path."""
    text = _small_text().decode()
    ref = parse_tables(tg.write(tg.small_trace(), tmp_path / "ref.json"))
    p = tmp_path / "enc.json"
    p.write_bytes(text.encode(encoding))
    assert _tables_equal(ref, parse_tables(p))
    assert _tables_equal(ref, parse_tables(p, chunk=1 << 10, workers=2))
    z = tmp_path / "enc.json.gz"
    z.write_bytes(gzip.compress(text.encode(encoding)))
    assert _tables_equal(ref, parse_tables(z))


@pytest.mark.parametrize(
    ("magic", "needle"),
    [
        (b"PK\x03\x04", "a zip archive: unzip it first"),
        (b"\x04\x22\x4d\x18", "lz4-compressed"),
        (b"SQLite format 3\x00", "an SQLite database"),
    ],
)
def test_other_formats_are_named(magic: bytes, needle: str, tmp_path: Path) -> None:
    p = tmp_path / "trace.json"
    p.write_bytes(magic + b"\0" * 64)
    with pytest.raises(TraceError, match=needle):
        parse_tables(p)


def test_non_regular_files_are_refused_at_once(tmp_path: Path) -> None:
    """A FIFO would block the reader forever (nobody writes to it): refused with one line,
    before anything is opened for writing. Run in a subprocess with a timeout: a
    regression would hang, not fail."""
    fifo = tmp_path / "trace.json"
    os.mkfifo(fifo)
    out = tmp_path / "out"
    for target in (fifo, Path("/dev/zero")):
        r = subprocess.run(
            [sys.executable, "-m", "tracekit.cli", "parse", str(target), "-o", str(out)],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=ROOT,
        )
        assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
        assert "not a regular file" in r.stderr and not out.exists()


def test_run_folders_find_compressed_traces(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "w.123.pt.trace.json.xz").write_bytes(lzma.compress(_small_text()))
    trace, _ = find_trace(run)
    assert trace.name == "w.123.pt.trace.json.xz"
    assert len(load(run).kernels) == 6
    assert default_out(trace).name == "w.123.tracekit"


def test_damaged_trailer_fails_in_linear_time(tmp_path: Path) -> None:
    """Damage after the events array used to cost one decode of the rest of the file per
    ']' in the events (minutes on a 5 MB trace): now a one-line error at once."""
    doc = tg.small_trace()
    doc["traceEvents"] *= 400
    text = json.dumps(doc, indent=1).encode()
    p = tmp_path / "t.json"
    p.write_bytes(text[:-1] + b'"oops": [1]}')  # no comma before the key
    t0 = time.perf_counter()
    with pytest.raises(TraceError, match="malformed JSON"):
        parse_tables(p, workers=1)
    assert time.perf_counter() - t0 < 30  # a hang guard, not a timing claim


def _mutator() -> Any:
    """benchmarks/mutate_traces.py (its damage() is what the mutation run uses)."""
    spec = importlib.util.spec_from_file_location(
        "mutate_traces", ROOT / "benchmarks" / "mutate_traces.py"
    )
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


MUTATE = _mutator()


@functools.cache
def _damage_sources() -> list[bytes]:
    real = sorted((FIXTURES / "cpu-tiny-fp32-naive").glob("*.pt.trace.json.gz"))
    return [_small_text(), *(gzip.decompress(p.read_bytes()) for p in real)]


def _outcome(p: Path, out: Path) -> str:
    """'error' (one line, nothing written) or the digest of everything written."""
    try:
        parse_to_dir(p, out)
    except TracekitError as e:
        assert "\n" not in str(e)
        assert not out.exists(), "partial output left behind"
        return "error"
    h = hashlib.sha256()
    for f in sorted(out.iterdir()):
        h.update(f.name.encode() + f.read_bytes())
    shutil.rmtree(out)
    return h.hexdigest()


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 4), which=st.integers(0, 1))
def test_byte_damage_in_strings_and_numbers_parses_or_fails_cleanly(
    seed: int, n: int, which: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bytes flipped, inserted or deleted inside strings and numbers (invalid UTF-8, lone
    surrogates, numbers beyond int64 ...): every damaged trace ends in clean output or a
    one-line TracekitError, with nothing half-written, and the native scanner and the
    msgspec path give the same result."""
    sources = _damage_sources()
    data = MUTATE.damage(sources[which % len(sources)], random.Random(seed), n)
    p = tmp_path / f"d{seed}.json"
    p.write_bytes(data)
    got = {}
    for scanner in ("0", "1"):
        monkeypatch.setenv("TRACEKIT_NO_SCAN", scanner)
        got[scanner] = _outcome(p, tmp_path / f"out{seed}-{scanner}")
    assert got["0"] == got["1"]
    p.unlink()


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 4), which=st.integers(0, 1))
def test_structural_damage_parses_or_fails_cleanly(
    seed: int, n: int, which: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whole events deleted or given another phase, step markers renumbered (any size, not
    numbers), correlation / External ids rewritten (the mutation run's ``--events``): clean
    output or a one-line TracekitError, the same on both paths (tests/test_parse_damaged.py
    checks the links and steps such traces give)."""
    sources = _damage_sources()
    data = MUTATE.damage_events(sources[which % len(sources)], random.Random(seed), n)
    p = tmp_path / f"e{seed}.json"
    p.write_bytes(data)
    got = {}
    for scanner in ("0", "1"):
        monkeypatch.setenv("TRACEKIT_NO_SCAN", scanner)
        got[scanner] = _outcome(p, tmp_path / f"out{seed}-{scanner}")
    assert got["0"] == got["1"]
    p.unlink()
