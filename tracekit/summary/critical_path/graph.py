"""A dependency graph of time points and its longest path (the critical path engine).

The graph knows nothing about traces (``tracekit.summary.critical_path`` builds it from
one): *points* are instants; they lie on *chains* (a CPU thread, a GPU stream), stored
chain after chain; consecutive points of a chain are joined by a *chain edge*, and *cross
edges* join any two points (a kernel launch, a synchronisation, a wait on another stream
or thread). The value of a point is the longest path to it::

    t[p] = max(release[p], t[p - 1] + w_chain[p], max over cross edges e into p of t[src e] + w[e])

Edge ids: ``p`` (``0 <= p < n_points``) is the chain edge *into* point ``p`` (none for the
first point of a chain); ``n_points + e`` is cross edge ``e``. Each edge's weight in ns is
a sum of *components* ``(edge, key, ns)``: a key names what the time is (a kernel class, CPU
operator time, launch latency, ...), so a what-if is a multiplier (or a cap) per key, or
per component, and the same graph is re-weighted and solved again.

Solving: a chain is a max-plus scan, ``t = W + cummax(ext - W)`` with ``W`` the chain's
cumulative weights and ``ext`` the best value arriving by cross edges, so one pass over all
chains is a handful of numpy operations per chain, linear in points and edges. Passes
repeat (Gauss-Seidel over the chains) until no value changes: the number of passes is one
more than the number of times the longest path switches to a chain that was solved
earlier in the pass (a GPU -> CPU synchronisation, a thread join), not the size of the
graph; a cycle (bad input) is detected by a pass limit.

*Periods*: a graph of one training step is solved ``copies`` times in a row, each copy's
*entries* released by the previous copy (the step's main thread starts where the previous
step's ended; each stream's first kernel queues behind the previous step's last kernel on
that stream), which models the steady state of a loop of identical steps: its period is
the difference of the last two copies' end times.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from tracekit.errors import TraceError

# "unreachable": far below any time, and safe to add weights to without overflow
NEG = np.int64(-(2**61))
_LOW = NEG // 2

ORIGIN, CARRY = 0, 1  # entry kinds


@dataclass
class Graph:
    """Points on chains, cross edges, weight components and period entries (see module)."""

    time: np.ndarray  # int64 observed time of each point, ns (chains stored one after another)
    chain_start: np.ndarray  # int64, n_chains + 1: points of chain c are [start[c], start[c+1])
    chain_name: list[str]
    src: np.ndarray  # int64 cross edges, sorted by dst
    dst: np.ndarray
    comp_edge: np.ndarray  # int64 edge id of each component
    comp_key: np.ndarray  # int64 key of each component
    comp_ns: np.ndarray  # int64 calibrated ns of each component
    keys: list[str]
    entry: np.ndarray  # int64 entry points (released from outside the graph)
    entry_kind: np.ndarray  # int8: ORIGIN (released in an isolated copy) or CARRY
    entry_from: np.ndarray  # int64 point whose value in the previous copy releases it (-1)
    entry_obs: np.ndarray  # int64 observed release of each entry (NEG: none in the trace)
    # solving order of the chains (CPU threads before GPU streams saves passes)
    order: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    # chains without chain edges: independent points (e.g. values from the previous copy)
    free: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))

    def __post_init__(self) -> None:
        nc = len(self.chain_start) - 1
        if not len(self.order):
            self.order = np.arange(nc, dtype=np.int64)
        if len(self.free) != nc:
            self.free = np.zeros(nc, bool)

    @property
    def n_points(self) -> int:
        return len(self.time)

    @property
    def n_edges(self) -> int:
        return len(self.src)

    def key_id(self, name: str) -> int:
        return self.keys.index(name)


def chain_first(g: Graph) -> np.ndarray:
    """True for the first point of each chain and every point of a free chain (no chain
    edge into it)."""
    first = np.zeros(g.n_points, bool)
    starts = g.chain_start[:-1][np.diff(g.chain_start) > 0]
    first[starts] = True
    for c in np.flatnonzero(g.free).tolist():
        first[g.chain_start[c] : g.chain_start[c + 1]] = True
    return first


def edge_ptr(g: Graph) -> np.ndarray:
    """Cross edges into points [a, b) are ``ptr[a]:ptr[b]`` (edges are sorted by dst)."""
    return np.searchsorted(g.dst, np.arange(g.n_points + 1), side="left").astype(np.int64)


@dataclass
class Weights:
    """A what-if: multipliers and caps per key, multipliers per component, edges removed.

    ``weight = min(ns * key_mult[key] * comp_mult, key_cap[key])`` per component, summed per
    edge; a removed cross edge no longer constrains its destination."""

    key_mult: dict[str, float] = field(default_factory=dict)
    key_cap: dict[str, float] = field(default_factory=dict)
    comp_mult: dict[int, float] = field(default_factory=dict)
    off: frozenset[int] = frozenset()  # cross edge indices (0-based among cross edges)

    def then(self, other: Weights) -> Weights:
        """Both what-ifs at once (multipliers multiply, the smaller cap wins)."""
        km = dict(self.key_mult)
        for k, v in other.key_mult.items():
            km[k] = km.get(k, 1.0) * v
        kc = dict(self.key_cap)
        for k, v in other.key_cap.items():
            kc[k] = min(kc.get(k, np.inf), v)
        cm = dict(self.comp_mult)
        for c, v in other.comp_mult.items():
            cm[c] = cm.get(c, 1.0) * v
        return Weights(km, kc, cm, self.off | other.off)


def weights(g: Graph, what: Weights | None = None) -> np.ndarray:
    """Edge weights (int64 ns, chain edges then cross edges) under a what-if."""
    n = g.n_points + g.n_edges
    w = np.rint(np.bincount(g.comp_edge, weights=_component_ns(g, what), minlength=n))
    w = w.astype(np.int64)
    if what is None:
        return w
    if what.off:
        off = np.fromiter(what.off, np.int64, len(what.off))
        w[g.n_points + off] = NEG
    return w


@dataclass
class _Chain:
    lo: int
    hi: int
    e0: int  # cross edges into the chain: [e0, e1)
    e1: int
    at: np.ndarray  # distinct destinations of those edges, relative to lo
    runs: np.ndarray  # start of each destination's run of edges (for reduceat)
    free: bool


def _plan(g: Graph) -> list[_Chain]:
    """Per chain (in solving order) its slices, computed once per graph."""
    cached = g.__dict__.get("_plan")
    if cached is not None:
        return cached  # type: ignore[no-any-return]
    ptr = edge_ptr(g)
    out = []
    for c in g.order.tolist():
        lo, hi = int(g.chain_start[c]), int(g.chain_start[c + 1])
        e0, e1 = int(ptr[lo]), int(ptr[hi])
        d = g.dst[e0:e1] - lo
        runs = np.flatnonzero(np.diff(d, prepend=-1)) if len(d) else np.zeros(0, np.int64)
        out.append(_Chain(lo, hi, e0, e1, d[runs], runs, bool(g.free[c])))
    g.__dict__["_plan"] = out
    g.__dict__["_first"] = chain_first(g)
    return out


def solve(g: Graph, w: np.ndarray, release: np.ndarray, max_passes: int = 0) -> np.ndarray:
    """Longest-path value of every point (``NEG``: unreachable). ``release``: the value of
    each entry point from outside (``NEG``: none)."""
    n = g.n_points
    plan = _plan(g)
    rel = np.full(n, NEG, np.int64)
    rel[g.entry] = release
    wc = w[:n].copy()
    wc[g.__dict__["_first"]] = 0
    wx = w[n:]
    vsrc = g.src
    t = np.full(n, NEG, np.int64)
    limit = max_passes or g.n_edges + 2
    cum = [np.cumsum(wc[ch.lo : ch.hi]) for ch in plan]
    for _ in range(limit):
        changed = False
        for ch, W in zip(plan, cum, strict=True):
            if ch.hi == ch.lo:
                continue
            ext = rel[ch.lo : ch.hi].copy()
            if ch.e1 > ch.e0:
                v = t[vsrc[ch.e0 : ch.e1]] + wx[ch.e0 : ch.e1]
                ext[ch.at] = np.maximum(ext[ch.at], np.maximum.reduceat(v, ch.runs))
            new = ext if ch.free else np.maximum.accumulate(ext - W) + W
            new[new < _LOW] = NEG
            if not np.array_equal(new, t[ch.lo : ch.hi]):
                t[ch.lo : ch.hi] = new
                changed = True
        if not changed:
            return t
    raise TraceError("critical path: the dependency graph has a cycle (inconsistent trace times)")


def binding(g: Graph, w: np.ndarray, t: np.ndarray) -> np.ndarray:
    """The edge id that sets each point's value: its chain edge when that attains it (ties
    go to the chain), else the first cross edge that does; -1 where only the release does
    (or the point is unreachable)."""
    n = g.n_points
    _plan(g)
    first = g.__dict__["_first"]
    prev = np.r_[NEG, t[:-1]]
    ok_chain = ~first & (prev > _LOW) & (prev + w[:n] == t) & (t > _LOW)
    out = np.full(n, -1, np.int64)
    ok = np.flatnonzero((t[g.src] > _LOW) & (t[g.src] + w[n:] == t[g.dst]))
    d, first_of = np.unique(g.dst[ok], return_index=True)  # edges are sorted by dst
    out[d] = n + ok[first_of]
    out[ok_chain] = np.flatnonzero(ok_chain)
    return out


@dataclass
class Periods:
    """``copies`` consecutive solutions of a step graph (see module)."""

    t: list[np.ndarray]
    bind: list[np.ndarray | None]  # binding edges of each copy (None: not computed yet)
    w: np.ndarray
    ends: list[int]  # latest value of each copy


def release_of(g: Graph, prev: np.ndarray | None, replay: bool) -> np.ndarray:
    """Entry values of one copy: from the previous copy, else the observed times (``replay``:
    every entry, e.g. to reproduce the trace; otherwise only ORIGIN entries: an idle start)."""
    obs = g.entry_obs
    out: np.ndarray
    if prev is not None:
        src = g.entry_from
        out = np.where(src >= 0, prev[np.maximum(src, 0)], NEG).astype(np.int64)
    elif replay:
        out = obs.astype(np.int64)
    else:
        out = np.where(g.entry_kind == ORIGIN, obs, NEG).astype(np.int64)
    return out


def periods(g: Graph, what: Weights | None = None, copies: int = 3) -> Periods:
    """Solve ``copies`` consecutive copies of the step (the first starts idle)."""
    w = weights(g, what)
    ts: list[np.ndarray] = []
    prev: np.ndarray | None = None
    for _ in range(max(1, copies)):
        t = solve(g, w, release_of(g, prev, replay=False))
        ts.append(t)
        prev = t
    return Periods(ts, [None] * len(ts), w, [int(t.max()) for t in ts])


def replay(g: Graph) -> np.ndarray:
    """The graph solved with every entry at its observed time: with calibrated weights
    this reproduces the observed time of every reachable point."""
    w = weights(g)
    return solve(g, w, release_of(g, None, replay=True))


def period(g: Graph, p: Periods) -> tuple[int, int, int]:
    """The steady-state period (ns), the entry it is measured at and its change since the
    copy before (ns, convergence). Every entry of a converged loop advances by the period
    from one copy to the next; before convergence the slowest resource sets the pace, so
    the period is the largest advance of any entry (the max-plus cycle time). With one
    copy: its span from the earliest release to the end, entry -1."""
    cands, per = _advances(g, p)
    if not len(cands):
        t = p.t[-1]
        return int(t.max() - t[t > _LOW].min()), -1, 0
    return per, int(g.entry[cands[0]]), _change(g, p, int(cands[0]), per)


def _advances(g: Graph, p: Periods) -> tuple[np.ndarray, int]:
    """Entries (indices into ``g.entry``) that advance by the period between the last two
    copies, origins first; and the period."""
    k = len(p.t) - 1
    if k == 0:
        return np.zeros(0, np.int64), 0
    a, b = p.t[k][g.entry], p.t[k - 1][g.entry]
    ok = (a > _LOW) & (b > _LOW)
    if not ok.any():
        return np.zeros(0, np.int64), 0
    d = np.where(ok, a - b, np.iinfo(np.int64).min)
    per = int(d.max())
    c = np.flatnonzero(d == per)
    return c[np.argsort(g.entry_kind[c], kind="stable")], per


def _change(g: Graph, p: Periods, j: int, per: int) -> int:
    k = len(p.t) - 1
    e = int(g.entry[j])
    if k < 2 or p.t[k - 2][e] <= _LOW:
        return 0
    return int(p.t[k - 1][e] - p.t[k - 2][e]) - per


@dataclass
class Cycle:
    """One period of the steady state along the critical path (see :func:`cycle`)."""

    edges: np.ndarray  # edge ids on the path (may repeat: a path can span two copies)
    frac: np.ndarray  # fraction of each edge inside the window
    period: int  # ns: the window's length
    change: int  # ns: the same measure one copy earlier minus ``period`` (convergence)
    entry: int  # the entry point the window is measured at (-1: one copy)


MAX_TRIES = 8  # entries tried for a critical cycle


def cycle(g: Graph, p: Periods) -> Cycle:
    """The critical path over one period of the steady state.

    The window runs from an entry's value in the next-to-last copy to its value in the
    last copy (one period), and the path is followed back from the latter to the former.
    The entry is one on a *critical cycle*: the path back from it one period reaches the
    same entry (the main thread's start when the host sets the pace, a stream's entry when
    the GPU does; entries that advance by the period but only follow the pace, such as the
    host blocked by a full launch queue, are passed over). The path's edges inside the
    window (clipped at its start) say what the period is made of. With one copy: from the
    end back to the earliest release."""
    n = g.n_points
    pos_entry = np.full(n, -1, np.int64)
    pos_entry[g.entry] = np.arange(len(g.entry))
    k = len(p.t) - 1
    cands, per = _advances(g, p)
    if not len(cands):
        t = p.t[k]
        span = int(t.max() - t[t > _LOW].min())
        edges, frac, _, _ = _walk(g, p, k, int(np.argmax(t)), int(t.max()) - span, pos_entry)
        return Cycle(edges, frac, span, 0, -1)
    first: tuple[np.ndarray, np.ndarray, int] | None = None
    for j in cands[:MAX_TRIES].tolist():
        e = int(g.entry[j])
        start = int(p.t[k - 1][e])
        edges, frac, end_k, end_node = _walk(g, p, k - 1, int(g.entry_from[j]), start, pos_entry)
        if end_k == k - 1 and end_node == e:
            return Cycle(edges, frac, per, _change(g, p, j, per), e)
        if first is None:
            first = (edges, frac, j)
    assert first is not None
    j = first[2]
    return Cycle(first[0], first[1], per, _change(g, p, j, per), int(g.entry[j]))


def _walk(
    g: Graph, p: Periods, k: int, node: int, start: int, pos_entry: np.ndarray
) -> tuple[np.ndarray, np.ndarray, int, int]:
    """Edges on the path back from (copy k, node) to time ``start`` (clipped there), and
    the copy and point where it stopped."""
    n = g.n_points
    t, bind = p.t[k].tolist(), _bind(g, p, k)
    src = g.src.tolist()
    w = p.w
    edges: list[int] = []
    frac: list[float] = []
    while t[node] > start:
        e = bind[node]
        if e < 0:  # released: continue in the previous copy, if any
            j = pos_entry[node]
            if k == 0 or j < 0 or g.entry_from[j] < 0:
                break
            k -= 1
            node = int(g.entry_from[j])
            t, bind = p.t[k].tolist(), _bind(g, p, k)
            continue
        u = node - 1 if e < n else src[e - n]
        we = int(w[e])
        edges.append(e)
        frac.append(1.0 if t[u] >= start or we <= 0 else (t[node] - start) / we)
        node = u
    return np.asarray(edges, np.int64), np.asarray(frac, float), k, node


def _bind(g: Graph, p: Periods, k: int) -> list[int]:
    """Copy k's binding edges (computed when first needed)."""
    b = p.bind[k]
    if b is None:
        b = p.bind[k] = binding(g, p.w, p.t[k])
    out: list[int] = b.tolist()
    return out


def attribute(g: Graph, what: Weights | None, edges: np.ndarray, frac: np.ndarray) -> np.ndarray:
    """ns per key along ``edges`` (each weighted by its fraction), the what-if applied."""
    ne = g.n_points + g.n_edges
    per_edge = np.bincount(edges, weights=frac, minlength=ne)
    ns = _component_ns(g, what)
    return np.bincount(g.comp_key, weights=ns * per_edge[g.comp_edge], minlength=len(g.keys))


def _component_ns(g: Graph, what: Weights | None) -> np.ndarray:
    """Each component's ns under a what-if (float)."""
    ns = g.comp_ns.astype(float)
    if what is None:
        return ns
    mult = np.ones(len(g.keys))
    for k, v in what.key_mult.items():
        if k in g.keys:
            mult[g.keys.index(k)] = v
    ns = ns * mult[g.comp_key]
    if what.comp_mult:
        idx = np.fromiter(what.comp_mult.keys(), np.int64, len(what.comp_mult))
        ns[idx] *= np.fromiter(what.comp_mult.values(), float, len(what.comp_mult))
    if what.key_cap:
        cap = np.full(len(g.keys), np.inf)
        for k, v in what.key_cap.items():
            if k in g.keys:
                cap[g.keys.index(k)] = v
        ns = np.minimum(ns, cap[g.comp_key])
    out: np.ndarray = ns
    return out


def combine(graphs: list[Graph]) -> tuple[Graph, np.ndarray]:
    """Several graphs (e.g. one per rank) as one; returns it and each graph's point offset.
    Keys are merged by name. Tie them with :func:`add_edges` / :func:`tie_collective`."""
    keys: list[str] = []
    for gr in graphs:
        keys.extend(k for k in gr.keys if k not in keys)
    offs = np.cumsum([0] + [gr.n_points for gr in graphs])[:-1].astype(np.int64)
    eoffs = np.cumsum([0] + [gr.n_edges for gr in graphs])[:-1].astype(np.int64)
    n_total = int(sum(gr.n_points for gr in graphs))
    cs = [np.zeros(1, np.int64)]
    comp_edge, comp_key, comp_ns, src, dst, order = [], [], [], [], [], []
    nch = 0
    for gr, o, eo in zip(graphs, offs, eoffs, strict=True):
        cs.append(gr.chain_start[1:] + o)
        kmap = np.array([keys.index(k) for k in gr.keys], np.int64)
        ce = gr.comp_edge.copy()
        chain = ce < gr.n_points
        ce[chain] += o
        ce[~chain] = ce[~chain] - gr.n_points + n_total + eo
        comp_edge.append(ce)
        comp_key.append(kmap[gr.comp_key])
        comp_ns.append(gr.comp_ns)
        src.append(gr.src + o)
        dst.append(gr.dst + o)
        order.append(gr.order + nch)
        nch += len(gr.chain_start) - 1
    g = Graph(
        time=np.concatenate([gr.time for gr in graphs]),
        chain_start=np.concatenate(cs),
        chain_name=[f"{i}:{c}" for i, gr in enumerate(graphs) for c in gr.chain_name],
        src=np.concatenate(src),
        dst=np.concatenate(dst),
        comp_edge=np.concatenate(comp_edge),
        comp_key=np.concatenate(comp_key),
        comp_ns=np.concatenate(comp_ns),
        keys=keys,
        entry=np.concatenate([gr.entry + o for gr, o in zip(graphs, offs, strict=True)]),
        entry_kind=np.concatenate([gr.entry_kind for gr in graphs]),
        entry_from=np.concatenate(
            [
                np.where(gr.entry_from >= 0, gr.entry_from + o, -1)
                for gr, o in zip(graphs, offs, strict=True)
            ]
        ),
        entry_obs=np.concatenate([gr.entry_obs for gr in graphs]),
        order=np.concatenate(order),
        free=np.concatenate([gr.free for gr in graphs]),
    )
    return _sorted_edges(g), offs


def add_edges(g: Graph, src: np.ndarray, dst: np.ndarray, ns: np.ndarray, key: str) -> Graph:
    """``g`` with extra cross edges (e.g. between ranks), each of weight ``ns`` under
    ``key``. The hook for dependencies the builder cannot see in one trace."""
    keys = list(g.keys) + ([key] if key not in g.keys else [])
    m = g.n_edges
    new = np.arange(m, m + len(src), dtype=np.int64) + g.n_points
    out = Graph(
        time=g.time,
        chain_start=g.chain_start,
        chain_name=g.chain_name,
        src=np.r_[g.src, np.asarray(src, np.int64)],
        dst=np.r_[g.dst, np.asarray(dst, np.int64)],
        comp_edge=np.r_[g.comp_edge, new],
        comp_key=np.r_[g.comp_key, np.full(len(src), keys.index(key), np.int64)],
        comp_ns=np.r_[g.comp_ns, np.asarray(ns, np.int64)],
        keys=keys,
        entry=g.entry,
        entry_kind=g.entry_kind,
        entry_from=g.entry_from,
        entry_obs=g.entry_obs,
        order=g.order,
        free=g.free,
    )
    return _sorted_edges(out)


def _sorted_edges(g: Graph) -> Graph:
    """Cross edges sorted by destination (stable), component edge ids renumbered."""
    o = np.argsort(g.dst, kind="stable")
    if np.array_equal(o, np.arange(len(o))):
        return g
    inv = np.empty_like(o)
    inv[o] = np.arange(len(o))
    ce = g.comp_edge.copy()
    cross = ce >= g.n_points
    ce[cross] = inv[ce[cross] - g.n_points] + g.n_points
    g.src, g.dst, g.comp_edge = g.src[o], g.dst[o], ce
    g.__dict__.pop("_plan", None)
    return g


def tie_collective(g: Graph, starts: np.ndarray, ends: np.ndarray, key: str) -> Graph:
    """Tie the instances of one collective on several ranks (in a :func:`combine`-d graph):
    no rank's instance can end before every rank has arrived. ``starts[r]``/``ends[r]``:
    rank r's kernel start and end points (each end's chain edge is its kernel). The
    kernel's time after the last arrival (its observed end minus the latest observed
    start) is the transfer; on each rank the wait before it is no longer a fixed weight
    but follows from the other ranks' arrivals: edges from every rank's start to every
    rank's end carry the transfer time, and each end's own chain edge is cut to it.
    A multi-rank builder calls this once per matched collective."""
    starts = np.asarray(starts, np.int64)
    ends = np.asarray(ends, np.int64)
    last = int(g.time[starts].max())
    xfer = np.maximum(g.time[ends] - last, 0)
    # each end's own chain edge: scale its components down to the transfer time
    comp_mult = {}
    for e, x in zip(ends.tolist(), xfer.tolist(), strict=True):
        idx = np.flatnonzero(g.comp_edge == e)
        tot = float(g.comp_ns[idx].sum())
        for c in idx.tolist():
            comp_mult[c] = x / tot if tot > 0 else 0.0
    ns = g.comp_ns.astype(float)
    for c, m in comp_mult.items():
        ns[c] *= m
    g = replace(g, comp_ns=np.rint(ns).astype(np.int64))
    s = np.repeat(starts, len(ends))
    d = np.tile(ends, len(starts))
    x = np.tile(xfer, len(starts))
    return add_edges(g, s, d, x, key)
