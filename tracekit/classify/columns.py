"""Columns of the input tables read as arrays, and output columns built without copying
their text: the plumbing the classify stages share."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from tracekit.errors import TraceError


def col(df: pd.DataFrame, name: str, default: Any, dtype: Any = None) -> np.ndarray:
    if name in df.columns:
        s = df[name]
        if dtype is not None:
            s = s.fillna(default) if default is not None else s
            return s.to_numpy(dtype=dtype)
        return s.astype(object).to_numpy()
    return np.full(len(df), default, dtype=dtype if dtype is not None else object)


_STR = pd.Series(["x"]).dtype  # what pandas makes of Python strings (Arrow-backed str)


def text_codes(df: pd.DataFrame, name: str, default: str) -> tuple[np.ndarray, np.ndarray]:
    """Codes and distinct values of a text column, the values as ``ndarray.astype(str)``
    gives them (missing: 'nan'). Each distinct string is hashed once (in Arrow) and never
    copied per row: kernel names run to a thousand characters."""
    if name not in df.columns:
        return np.zeros(len(df), dtype=np.int64), np.array([default], dtype=object)
    codes, uniq = pd.factorize(df[name], use_na_sentinel=False)
    return codes.astype(np.int64), np.array([str(u) for u in uniq], dtype=object)


def out_column(col: pd.Series | None, n: int, values: np.ndarray | None = None) -> Any:
    """An output column made from ``col`` (absent: None): ``values`` (:func:`text_codes`'s
    strings, which differ from the column where it has missing values), or the column's
    own objects. Where pandas would build exactly the column's own (Arrow) array from
    them, that array itself, so millions of characters are not encoded again."""
    if (
        col is not None
        and col.dtype == _STR
        # (pandas makes objects that are all missing an ``object`` column, not str)
        and (bool(col.notna().any()) if values is None else not col.hasnans)
    ):
        return col.array
    if values is not None:
        return values if len(values) else values.astype(str)  # empty: str, like a U array
    return col.astype(object).to_numpy() if col is not None else np.full(n, None, dtype=object)


def require(df: pd.DataFrame, table: str, cols: tuple[str, ...]) -> None:
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise TraceError(f"the {table} table lacks column(s) {', '.join(missing)}")


def take(values: np.ndarray | pd.Series | None, pos: np.ndarray, default: Any) -> np.ndarray:
    """``values`` at row positions ``pos`` (``default`` where ``pos`` < 0), as objects."""
    out = np.full(len(pos), default, dtype=object)
    has = pos >= 0
    if values is not None and len(values) and has.any():
        if isinstance(values, pd.Series):  # convert only the rows taken
            out[has] = values.iloc[pos[has]].to_numpy(dtype=object)
        else:
            out[has] = values[pos[has]]
    return out


@dataclass(frozen=True)
class KernelColumns:
    """The columns of the kernels table every stage reads, as arrays (text as codes of its
    distinct values, decoded once)."""

    frame: pd.DataFrame
    dur: np.ndarray
    kind: np.ndarray
    name_codes: np.ndarray
    name_uniq: np.ndarray
    names: np.ndarray
    step: np.ndarray
    device: np.ndarray

    @property
    def n(self) -> int:
        return len(self.frame)

    @classmethod
    def of(cls, kernels: pd.DataFrame) -> KernelColumns:
        kind_codes, kind_uniq = text_codes(kernels, "kind", "kernel")
        name_codes, name_uniq = text_codes(kernels, "name", "")
        return cls(
            frame=kernels,
            dur=col(kernels, "dur", 0, np.int64),
            kind=kind_uniq[kind_codes],
            name_codes=name_codes,
            name_uniq=name_uniq,
            names=name_uniq[name_codes],
            step=col(kernels, "step", -1, np.int64),
            device=col(kernels, "device", 0, np.int64),
        )
