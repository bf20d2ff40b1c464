"""The light pass's GPU activities joined to the full pass's: per stream, by order and key.

The two passes ran the same steps of the same program one after the other, so on each
stream the GPU ran the same activities in the same order (a stream runs in order). Their
correlation ids are those of two different profiler sessions and say nothing about each
other; their keys do: the kernel's name, with its grid and block where both passes have
them (memcpy and memset: their name, e.g. ``Memcpy HtoD (Pageable -> Device)``).

:func:`align` pairs two sequences of keys: the common prefix and suffix position by
position, and what lies between by :class:`difflib.SequenceMatcher`'s matching blocks (a
missing, extra or renamed activity loses itself, not the rest of the stream; a reordered
stretch loses the part that moved). Streams pair by their id; the streams only one pass
has pair in the order of their first activity. The **join rate** is the share of the two
passes' GPU time (activity durations, markers left out) whose activity found a partner.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

import numpy as np
import pandas as pd

MAX_MIDDLE = 4_000_000  # len(a) * len(b) of a middle stretch difflib still aligns
KEY_COLUMNS = ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z")


def align(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Index pairs ``(i, j)``, increasing in both, with ``a[i] == b[j]``."""
    na, nb = len(a), len(b)
    n = min(na, nb)
    same = a[:n] == b[:n]
    p = int(np.argmin(same)) if n and not same.all() else n
    tail = a[na - n + p :][::-1] == b[nb - n + p :][::-1]
    s = int(np.argmin(tail)) if len(tail) and not tail.all() else len(tail)
    ia = [np.arange(p), np.arange(na - s, na)]
    ib = [np.arange(p), np.arange(nb - s, nb)]
    mid_a, mid_b = a[p : na - s], b[p : nb - s]
    if len(mid_a) and len(mid_b) and len(mid_a) * len(mid_b) <= MAX_MIDDLE:
        sm = difflib.SequenceMatcher(None, mid_a.tolist(), mid_b.tolist(), autojunk=False)
        for blk in sm.get_matching_blocks():
            if blk.size:
                ia.insert(-1, p + blk.a + np.arange(blk.size))
                ib.insert(-1, p + blk.b + np.arange(blk.size))
    return np.concatenate(ia).astype(np.int64), np.concatenate(ib).astype(np.int64)


def keys(light: pd.DataFrame, full: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, str]:
    """One integer key per activity of each frame (name, and grid and block where both
    frames have them), and what the key holds in words."""
    cols = ["name"] + [
        c for c in KEY_COLUMNS
        if c in light and c in full and light[c].notna().any() and full[c].notna().any()
    ]  # fmt: skip
    both = pd.concat([light[cols], full[cols]], ignore_index=True)
    for c in cols[1:]:
        both[c] = both[c].astype("Int64").fillna(-1)
    both["name"] = both["name"].astype(object)
    codes = both.groupby(cols, sort=False, dropna=False).ngroup().to_numpy(dtype=np.int64)
    words = "name, grid and block" if len(cols) > 1 else "name"
    return codes[: len(light)], codes[len(light) :], words


def _streams(frame: pd.DataFrame, idx: np.ndarray) -> dict[tuple[int, int], np.ndarray]:
    """The activities ``idx`` of ``frame`` per (device, stream), each in start order."""
    if not len(idx):
        return {}
    dev = frame["device"].to_numpy(dtype=np.int64)[idx] if "device" in frame else 0 * idx
    st = frame["stream"].to_numpy(dtype=np.int64)[idx]
    ts = frame["ts"].to_numpy(dtype=np.int64)[idx]
    order = np.lexsort((ts, st, dev))
    idx, dev, st = idx[order], dev[order], st[order]
    cut = np.flatnonzero((np.diff(dev) != 0) | (np.diff(st) != 0)) + 1
    return {(int(dev[g[0]]), int(st[g[0]])): idx[g] for g in np.split(np.arange(len(idx)), cut)}


def pair_streams(
    light: dict[tuple[int, int], np.ndarray],
    full: dict[tuple[int, int], np.ndarray],
    l_ts: np.ndarray,
    f_ts: np.ndarray,
) -> list[tuple[np.ndarray, np.ndarray]]:
    """The streams of the two passes paired: by id, then the rest by first activity."""
    pairs = [(light[k], full[k]) for k in light if k in full]
    only_l = sorted((v for k, v in light.items() if k not in full), key=lambda v: l_ts[v[0]])
    only_f = sorted((v for k, v in full.items() if k not in light), key=lambda v: f_ts[v[0]])
    pairs += list(zip(only_l, only_f, strict=False))
    return pairs


@dataclass(frozen=True)
class Joined:
    """Per light activity its full partner's row (-1: none); per full row whether it was
    joined; the joined share of GPU time (%); what the key held; the stream that lost the
    most time (None when all joined)."""

    partner: np.ndarray
    full_joined: np.ndarray
    joined_pct: float | None
    key: str
    worst: str | None


def join_streams(
    light: pd.DataFrame, l_idx: np.ndarray, full: pd.DataFrame, f_idx: np.ndarray
) -> Joined:
    """Join the activities ``l_idx`` of ``light`` to ``f_idx`` of ``full`` (see the module
    doc). ``partner`` holds row positions of ``full``."""
    l_key, f_key, words = keys(light, full)
    l_ts, f_ts = light["ts"].to_numpy(dtype=np.int64), full["ts"].to_numpy(dtype=np.int64)
    l_dur, f_dur = light["dur"].to_numpy(dtype=np.int64), full["dur"].to_numpy(dtype=np.int64)
    partner = np.full(len(light), -1, dtype=np.int64)
    full_joined = np.zeros(len(full), dtype=bool)
    ls, fs = _streams(light, l_idx), _streams(full, f_idx)
    lost: dict[str, int] = {}
    for li, fi in pair_streams(ls, fs, l_ts, f_ts):
        ia, ib = align(l_key[li], f_key[fi])
        partner[li[ia]] = fi[ib]
        full_joined[fi[ib]] = True
    for side, dur, ok in ((ls, l_dur, partner >= 0), (fs, f_dur, full_joined)):
        for (dev, st), rows in side.items():
            miss = int(dur[rows][~ok[rows]].sum())
            if miss:
                key = f"stream {st}" + (f" of GPU {dev}" if dev else "")
                lost[key] = lost.get(key, 0) + miss
    total = int(l_dur[l_idx].sum()) + int(f_dur[f_idx].sum())
    got = int(l_dur[l_idx][partner[l_idx] >= 0].sum()) + int(f_dur[f_idx][full_joined[f_idx]].sum())
    worst = max(lost, key=lambda k: lost[k]) if lost else None
    return Joined(
        partner=partner,
        full_joined=full_joined,
        joined_pct=100.0 * got / total if total else None,
        key=words,
        worst=worst,
    )
