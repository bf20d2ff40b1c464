"""tracekit.ranks.groups: each reduction equals the pandas groupby it replaces."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.ranks.groups import Groups


def _frame(seed: int, n: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "key": rng.integers(-3, 40, n),
            "v": rng.integers(-(10**15), 10**15, n) + 1_700_000_000_000_000_000,
            "c": rng.integers(0, 4, n),
            "m": rng.random(n) > 0.3,
        }
    )


def test_reductions_equal_pandas() -> None:
    for seed, n in ((0, 1), (1, 7), (2, 500)):
        df = _frame(seed, n)
        g, pg = Groups.of(df["key"].to_numpy()), df.groupby("key", sort=True)
        v = df["v"].to_numpy()
        assert list(g.keys) == list(pg.size().index)
        assert list(g.sizes) == list(pg.size())
        assert list(g.max(v)) == list(pg["v"].max()) and list(g.min(v)) == list(pg["v"].min())
        assert list(g.sum(df["c"].to_numpy())) == list(pg["c"].sum())
        assert list(g.nunique(df["c"].to_numpy())) == list(pg["c"].nunique())
        assert list(g.median(v)) == list(pg["v"].median())
        f = df["v"].to_numpy(dtype=float) / 7.0 * df["c"].to_numpy()  # inexact float sums
        f[::5] = np.nan  # skipped, as pandas skips them
        assert list(g.fsum(f)) == list(df.assign(f=f).groupby("key")["f"].sum())
        med = df.assign(f=f).groupby("key")["f"].median()
        assert np.array_equal(g.median(f), med.to_numpy(), equal_nan=True)
        mean = df.assign(f=f).groupby("key")["f"].mean()
        assert np.array_equal(g.fmean(f), mean.to_numpy(), equal_nan=True)
        assert list(g.first_row()) == [pg.indices[k][0] for k in g.keys]
        assert list(g.first_where(v == g.max(v)[g.inverse])) == list(pg["v"].idxmax())
        want = df[df["m"]].groupby("key").head(1).set_index("key").index
        got = g.first_where(df["m"].to_numpy())
        assert [int(df["key"][r]) for r in got if r >= 0] == sorted(want)
        assert all((r < 0) == (k not in set(want)) for r, k in zip(got, g.keys, strict=True))


def test_empty() -> None:
    g = Groups.of(np.zeros(0, dtype=np.int64))
    e = np.zeros(0, dtype=np.int64)
    assert (
        len(g.max(e))
        == len(g.sum(e))
        == len(g.median(e))
        == len(g.nunique(e))
        == len(g.fsum(e))
        == 0
    )
    assert len(g.first_where(np.zeros(0, dtype=bool))) == 0


def test_pivot_mean_equals_pivot_table() -> None:
    from tracekit.ranks.story import pivot_mean

    rng = np.random.default_rng(3)
    df = pd.DataFrame(
        {"rank": rng.integers(0, 9, 300), "step": rng.integers(2, 7, 300), "v": rng.random(300)}
    )
    df.loc[df["rank"] == 4, "v"] = np.nan  # a rank with no value: left out
    df.loc[::7, "v"] = np.nan
    want = df.pivot_table(index="rank", columns="step", values="v", aggfunc="mean")
    got = pivot_mean(df["rank"], df["step"], df["v"].to_numpy())
    pd.testing.assert_frame_equal(got, want, check_exact=True)


def test_first_equals_groupby_first() -> None:
    from tracekit.ranks.collectives import _first

    inst = pd.DataFrame(
        {
            "key": [3, 1, 3, 1, 2, 2],
            "pg": pd.array([None, "0", "1", "0", None, None], dtype="str"),
            "step": [1, 1, 1, 1, 2, 2],
            "index": [0, 1, 2, 3, 4, 5],
            "seq": pd.array([None, 7, 9, None, None, 4], dtype="Int64"),
            "kind": ["a", "b", "a", "b", "c", "c"],
            "dtype": pd.array(["f", None, "g", "h", "i", "j"], dtype="str"),
            "group_size": pd.array([2, 2, 2, 2, None, None], dtype="Int64"),
        }
    )
    cols = ["pg", "step", "index", "seq", "kind", "dtype", "group_size"]
    want = inst.groupby("key", sort=True)[cols].first().reset_index(drop=True)
    got = pd.DataFrame(_first(inst, Groups.of(inst["key"].to_numpy())))
    pd.testing.assert_frame_equal(got, want, check_exact=True)


def test_series_helpers_equal_pandas() -> None:
    from tracekit.ranks.groups import series_median, series_mode, value_counts

    rng = np.random.default_rng(4)
    for n in (1, 2, 9, 40):
        ints = rng.integers(0, 5, n)
        floats = rng.random(n)
        floats[::3] = np.nan
        assert series_mode(ints) == int(pd.Series(ints).mode().iloc[0])
        assert dict(value_counts(ints)) == pd.Series(ints).value_counts().to_dict()
        want = pd.Series(floats).median()
        assert series_median(floats) == want or (np.isnan(want) and n == 1)


def test_fsum_fmean_of_several_columns_equal_pandas() -> None:
    rng = np.random.default_rng(5)
    for n, skew in ((1, 0), (7, 0), (300, 0), (300, 250)):
        key = rng.integers(0, 20, n)
        key[:skew] = 7  # one group far larger than the others: the other layout
        v = rng.random((3, n)) * 1e9 / 7.0  # inexact sums
        v[:, ::5] = np.nan
        v[1, ::3] = np.nan
        g = Groups.of(key)
        sums, means = g.fsum(v), g.fmean(v)
        for i in range(3):
            pg = pd.Series(v[i]).groupby(key)
            assert np.array_equal(sums[i], pg.sum().to_numpy())
            assert np.array_equal(means[i], pg.mean().to_numpy(), equal_nan=True)


def test_lookup_equals_series_map() -> None:
    from tracekit.ranks.groups import lookup

    rng = np.random.default_rng(6)
    keys = rng.integers(0, 12, 200)
    table = {r: int(rng.integers(-(10**12), 10**12)) for r in range(0, 12, 2)}
    want = pd.Series(keys).map(table).fillna(0).to_numpy(dtype=np.int64)
    assert np.array_equal(lookup(keys, table, 0).astype(np.int64), want)
    assert np.array_equal(lookup(keys, {}, 1), np.ones(200))
    assert len(lookup(np.zeros(0, dtype=np.int64), table, 0)) == 0


def test_series_sum_mean_and_descending_equal_pandas() -> None:
    from tracekit.ranks.groups import ascending, descending, series_mean, series_sum

    rng = np.random.default_rng(7)
    for n in (0, 1, 6, 40, 300):
        v = rng.random(n) * 1e6 / 3.0
        v[::4] = np.nan
        s = pd.Series(v)
        assert series_sum(v) == s.sum()
        assert series_mean(v) == s.mean() or (np.isnan(s.mean()) and np.isnan(series_mean(v)))
        ties = rng.integers(0, 5, n).astype(float)  # ties: the order pandas leaves them in
        ties[::7] = np.nan
        df = pd.DataFrame({"v": ties, "i": np.arange(n)})
        for kind in ("quicksort", "stable"):
            want = df.sort_values("v", ascending=False, kind=kind)["i"].tolist()
            assert descending(ties, kind).tolist() == want
        want = df.sort_values("v")["i"].tolist()
        assert ascending(ties).tolist() == want
        ints = rng.integers(0, 3, n)  # in their own dtype
        want = pd.DataFrame({"v": ints}).sort_values("v", ascending=False).index.tolist()
        assert descending(ints).tolist() == want


def test_sorted_codes_and_ngroup_equal_pandas() -> None:
    from tracekit.ranks.groups import ngroup, sorted_codes

    rng = np.random.default_rng(8)
    for n in (0, 1, 5, 300):
        df = pd.DataFrame(
            {
                "pg": pd.array(rng.choice(["b", "a", "10", None], n), dtype="str"),
                "step": rng.integers(0, 4, n),
                "seq": pd.array([None if x < 0 else x for x in rng.integers(-2, 5, n)], "Int64"),
                "f": np.where(rng.random(n) < 0.3, np.nan, rng.integers(0, 3, n)),
                "o": pd.Series(rng.choice(["x", "y", None], n), dtype=object),
            }
        )
        for c in df:
            codes, uniq = pd.factorize(df[c], sort=True, use_na_sentinel=False)
            got, count = sorted_codes(df[c])
            assert got.tolist() == codes.tolist() and count == len(uniq)
        for by in (["pg", "seq"], ["pg", "step"], ["f", "o"], ["seq"]):
            want = df.groupby(by, sort=True, dropna=False).ngroup().to_numpy()
            assert ngroup(df, by).tolist() == want.tolist()


def test_means_p99_equal_numpy_per_run() -> None:
    from tracekit.ranks.nodes import _means_p99

    rng = np.random.default_rng(9)
    values = rng.random(500) * 1e3 / 7.0
    at = np.array([0, 0, 24, 48, 72, 73, 200, 500])  # runs of 0, 24, 24, 24, 1, 127, 300
    mean, p99 = _means_p99(values, at)
    for k in range(len(at) - 1):
        run = values[at[k] : at[k + 1]]
        if not len(run):
            assert np.isnan(mean[k]) and np.isnan(p99[k])
            continue
        assert mean[k] == np.mean(run) and p99[k] == np.percentile(run, 99)


def test_numeric_equals_to_numeric() -> None:
    from tracekit.ranks.measured import _numeric

    for vals in ([1.5, None, 2.25], [None, None], [1, 2], [1, None], [1.0, 2], []):
        idx = pd.RangeIndex(len(vals))
        want = pd.to_numeric(pd.Series(vals, index=idx, dtype=object), errors="coerce")
        got = pd.Series(_numeric(vals, idx), index=idx)
        pd.testing.assert_series_equal(got, want, check_exact=True)


def _instances(seed: int) -> pd.DataFrame:
    """Every rank's collectives as the reduce reads them: 3 ranks, 2 steps, 5 each."""
    from tracekit.ranks.collectives import INSTANCE_COLUMNS

    rng = np.random.default_rng(seed)
    rows = []
    for rank in range(3):
        for step in (1, 2):
            t = 1_000_000 * step + rank * 10_000
            for i in range(5):
                ts = t + int(rng.integers(0, 50_000))
                dur = int(rng.integers(1_000, 90_000))
                rows.append({
                    "rank": rank, "pg": "0" if i < 4 else None, "step": step, "index": i,
                    "seq": None, "kind": "all_reduce" if i % 2 else "all_gather",
                    "name": "nccl", "on": "gpu", "stream": 7, "ts": ts, "end": ts + dur,
                    "dur": dur, "in_nelems": 1 << i, "out_nelems": None, "dtype": "bf16",
                    "itemsize": 2, "group_size": 3 if i else None, "pg_ranks": None,
                    "message_bytes": float(2 << i) if i != 3 else np.nan, "source": "kernel args",
                })  # fmt: skip
                t = ts + dur
    df = pd.DataFrame(rows)[["rank", *INSTANCE_COLUMNS]]
    for c in ("seq", "in_nelems", "out_nelems", "itemsize", "group_size"):
        df[c] = df[c].astype("Int64")
    for c in ("pg", "dtype", "pg_ranks"):
        df[c] = df[c].astype("str")
    return df


def test_timed_with_offsets_equals_match_of_moved_clocks() -> None:
    from tracekit.ranks.collectives import keyed, match, timed

    for seed in (0, 1):
        inst = _instances(seed)
        offsets = {0: 0, 1: -7_000, 2: 12_345}
        moved = inst.copy()
        off = moved["rank"].map(offsets).to_numpy()
        moved["ts"], moved["end"] = moved["ts"] + off, moved["end"] + off
        k = keyed(inst)
        for got, want in zip(timed(k, offsets), match(moved), strict=True):
            pd.testing.assert_frame_equal(got, want, check_exact=True)
        for got, want in zip(timed(k), match(inst), strict=True):
            pd.testing.assert_frame_equal(got, want, check_exact=True)


def test_by_signature_equals_groupby_indices() -> None:
    from tracekit.ranks.bandwidth import _by_signature
    from tracekit.ranks.collectives import match

    matched, _ = match(_instances(2))
    m = matched.assign(
        message_bytes=matched["message_bytes"].fillna(-1.0), dtype=matched["dtype"].fillna("?")
    )
    keys = ["pg", "kind", "dtype", "message_bytes", "group_size"]
    want = [list(g.index) for _, g in m.groupby(keys, sort=False, dropna=False)]
    assert [list(rows) for rows in _by_signature(matched)] == want


def test_with_added_equals_column_assignments() -> None:
    from tracekit.ranks.groups import with_added

    df = _instances(3).iloc[::2]  # an index that is not a range
    new = {"a": np.arange(len(df)), "b": pd.Series(["x"] * len(df), index=df.index)}
    for cols in (new, {**new, "ts": np.zeros(len(df), dtype=np.int64)}, {}):
        want = df.copy()
        for c, v in cols.items():
            want[c] = v
        pd.testing.assert_frame_equal(with_added(df, cols), want, check_exact=True)


def test_nullable_ints_equal_the_frame_column_converted() -> None:
    from tracekit.ranks.reduce import _nullable_ints

    for vals in ([None, 2**40 + 1, 3], [None, None], [1, 2], ["x", 5], [2**60 + 1, None]):
        want = pd.DataFrame({"v": vals})
        want["v"] = pd.to_numeric(want["v"], errors="coerce").astype("Int64")
        got = pd.DataFrame({"v": _nullable_ints(vals)})
        pd.testing.assert_frame_equal(got, want, check_exact=True)


def test_distributions_equal_each_part_alone() -> None:
    from tracekit.ranks.robust import PARTS, distributions

    rng = np.random.default_rng(10)
    for n in (8, 63, 1024):
        fig = pd.DataFrame({"rank": np.arange(n), **{c: rng.random(n) * 100 for c, _ in PARTS}})
        for frame in (fig, fig.assign(idle_ms=np.where(np.arange(n) % 5, fig["idle_ms"], np.nan))):
            for d in distributions(frame):
                v = frame[d.part].to_numpy(dtype=float)
                v = v[np.isfinite(v)]
                assert (d.median, d.p90, d.p99) == (
                    float(np.median(v)),
                    float(np.percentile(v, 90)),
                    float(np.percentile(v, 99)),
                )
