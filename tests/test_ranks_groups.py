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
    got = _first(inst, Groups.of(inst["key"].to_numpy()))
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
