"""The interpolated, modified Kneser–Ney trigram of the counts the accumulator keeps.

Every count it needs is already there: the triples ``(x1, x2, x3)`` are the trigram
counts, and :class:`~streamspec.core.stream_starts.StreamStarts` adds how streams begin.
A stream start is the boundary symbol ``<s>`` (index -1 in contexts), so that the
first pair of a stream is the trigram ``(<s>, x1, x2)`` and its first symbol the trigram
``(<s>, <s>, x1)``. With ``c`` the counts, ``N`` continuation counts (the number of
distinct predecessors, ``Σ min(c, 1)`` with fractional counts) and ``d(c)`` the discount
of a count (``D1``, ``D2`` or ``D3+``, by the count rounded; never more than ``c``):

* ``p3(w | u, v) = max(c(u v w) − d, 0) / c(u v ·) + γ(u v) · p_lower(w)``, with
  ``γ(u v) = Σ_w d(c(u v w)) / c(u v ·)``; ``p_lower = p2(· | v)``, except for the
  empty history ``(<s>, <s>)``, which backs off to the unigram of all symbols
  ``p_freq`` (a start says nothing about continuation counts);
* ``p2(w | v) = max(N(· v w) − d, 0) / N(· v ·) + γ(v) · p1(w)``;
* ``p1(w) = max(N(· w) − d, 0) / N(· ·) + γ · 1/n`` (``N(· w)``: distinct pairs ending in
  ``w``), and ``p_freq(w) = max(c(w) − d, 0) / c + γ · 1/n`` from the raw counts of every
  symbol of every stream. So every symbol keeps a positive probability.

The discounts are Chen & Goodman's modified ones from each level's count-of-counts
(``Y = n1 / (n1 + 2 n2)``, ``D_k = k − (k + 1) Y n_{k+1} / n_k``); the contexts that start
with ``<s>`` have their own (estimated from the start counts only), so that a single
long stream, whose one start is a singleton, gets ``D1 = 1`` there: its empty history
is then the unigram, not the first symbol of the book.

A context symbol may also be unknown (index -2: an unseen label, or a history cut
short): ``(unknown, v)`` uses ``p2(· | v)``, and an unknown ``v`` uses ``p_freq``.

Costs: building O(nnz log nnz) time (one sort of the triples by context: the counts' own
order, by (x2, x3, x1), already groups the middle level's pairs) and O(nnz + n) memory for
nnz distinct triples (plus the starts); the probability of one symbol O(log nnz); a whole
row O(n + entries).
"""

from __future__ import annotations

import numpy as np

from streamspec.core.stream_starts import StreamStarts
from streamspec.core.triples import BITS, MAX_SYMBOLS, Triples, unpack

__all__ = ["KneserNeyTrigram", "modified_discounts", "START", "UNKNOWN"]

START = -1  # the stream-start boundary <s> in a context
_NO_NEXT, _NO_DIRECT = np.empty(0, dtype=np.int64), np.empty(0)  # a context without entries
UNKNOWN = -2  # a context symbol the model cannot use (unseen, or a history cut short)
_MASK = MAX_SYMBOLS - 1  # one symbol of a triple's code


def modified_discounts(counts: np.ndarray) -> np.ndarray:
    """``[D1, D2, D3+]`` of modified Kneser–Ney from counts (rounded to count-of-counts). O(m).

    ``Y = n1 / (n1 + 2 n2)``, ``D_k = k − (k + 1) Y n_{k+1} / n_k`` (Chen & Goodman 1999),
    each clipped to ``[0.05, k]``. Where a count-of-counts a formula needs is missing, the
    discount is the previous one (``D1 = 0.5`` without singletons: counts that all recur).

    Examples
    --------
    >>> modified_discounts(np.array([1, 1, 1, 2, 3, 5])).round(3).tolist()
    [0.6, 0.2, 3.0]
    >>> modified_discounts(np.array([1.0])).tolist()   # one singleton: fully discounted
    [1.0, 1.0, 1.0]
    """
    r = np.rint(np.asarray(counts, dtype=np.float64))
    return _discounts_of(*(float((r == k).sum()) for k in (1, 2, 3, 4)))


def _discounts_of(n1: float, n2: float, n3: float, n4: float) -> np.ndarray:
    """:func:`modified_discounts` from the counts-of-counts n1..n4. O(1)."""
    y = n1 / (n1 + 2 * n2) if n1 + 2 * n2 > 0 else 0.5
    d1 = 1 - 2 * y * n2 / n1 if n1 > 0 else 0.5
    d2 = 2 - 3 * y * n3 / n2 if n2 > 0 else d1
    d3 = 3 - 4 * y * n4 / n3 if n3 > 0 else d2
    return np.clip([d1, d2, d3], 0.05, [1.0, 2.0, 3.0])


def _discount(counts: np.ndarray, D: np.ndarray) -> np.ndarray:
    """``d(c) = min(c, D_k)``, k the count rounded (1, 2 or 3+). O(m)."""
    k = np.clip(np.rint(counts).astype(np.int64), 1, 3) - 1
    return np.minimum(counts, D[k])


def _classes(counts: np.ndarray) -> np.ndarray:
    """Each count rounded, clipped to 0..5 (5: five or more), as int8: the counts-of-counts
    are one ``bincount`` of it and the discount classes 1, 2, 3+ its values clipped to 1..3.
    Why: the same as :func:`modified_discounts` and :func:`_discount`, in one byte a count
    instead of several float and int64 temporaries (9 · 10⁶ triples at n = 10⁵). O(m)."""
    r = np.rint(counts)
    np.clip(r, 0, 5, out=r)
    return r.astype(np.int8)


def _class_discount(counts: np.ndarray, classes: np.ndarray, D: np.ndarray) -> np.ndarray:
    """:func:`_discount` from the :func:`_classes` of the counts. O(m)."""
    k = np.clip(classes, 1, 3)
    k -= 1
    d = D[k]
    np.minimum(d, counts, out=d)
    return d


def _runs(keys: np.ndarray) -> np.ndarray:
    """Where each run of equal values of the sorted ``keys`` starts, and ``keys.size`` last. O(m)."""
    new = np.empty(keys.size, dtype=bool)
    new[:1] = True
    np.not_equal(keys[1:], keys[:-1], out=new[1:])
    return np.append(np.flatnonzero(new), keys.size)


def _sums(values: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """The sum of ``values`` over each run ``bounds[i]:bounds[i + 1]`` (:func:`_runs`). O(m)."""
    if values.size == 0:
        return np.zeros(0)
    return np.add.reduceat(values, bounds[:-1])


class _Level:
    """One interpolated level: entries (context, w) with counts, discounted, per context.

    ``direct[e] = max(c_e − d_e, 0) / c(ctx)`` and ``gamma[ctx] = Σ d / c(ctx)``; entries
    are looked up by the key ``ctx_rank · n + w``. The entries are given sorted by
    (context, w), distinct, so that grouping them is one pass (no sort). O(m).
    """

    def __init__(self, n: int, ctx: np.ndarray, w: np.ndarray, c: np.ndarray, d: np.ndarray):
        """``d``: the discount of each entry, overwritten (it becomes ``direct``)."""
        self.n = n
        bounds = _runs(ctx)
        self.indptr = bounds
        self.contexts = ctx[bounds[:-1]]
        totals = _sums(c, bounds)
        lost = _sums(d, bounds)
        self.totals = totals
        self.gamma = lost / np.where(totals > 0, totals, 1.0)
        rank = np.repeat(np.arange(self.contexts.size), np.diff(bounds))
        # in place (d is the level's own): every n-sized temporary is paid in page faults
        direct = np.subtract(c, d, out=d)
        np.maximum(direct, 0.0, out=direct)
        direct /= totals[rank]
        self.direct = direct
        rank *= n
        rank += w
        self.keys = rank
        self.next = w

    def find(self, ctx: np.ndarray) -> np.ndarray:
        """Rank of each context, -1 where it was never seen. O(m log contexts)."""
        if self.contexts.size == 0:
            return np.full(ctx.shape, -1, dtype=np.int64)
        at = np.minimum(np.searchsorted(self.contexts, ctx), self.contexts.size - 1)
        return np.where(self.contexts[at] == ctx, at, -1)

    def gamma_of(self, rank: np.ndarray) -> np.ndarray:
        """γ of each context rank, 1 where the context is unseen (all mass to the lower level). O(m)."""
        if self.gamma.size == 0:
            return np.ones(rank.shape)
        return np.where(rank >= 0, self.gamma[np.maximum(rank, 0)], 1.0)

    def find1(self, ctx: int) -> int:
        """:meth:`find` of one context, without arrays. O(log contexts)."""
        at = int(self.contexts.searchsorted(ctx))  # the method: no dispatch wrapper per call
        return at if at < self.contexts.size and self.contexts[at] == ctx else -1

    def entry1(self, rank: int, w: int) -> float:
        """:meth:`entry` of one (context rank, w). O(log nnz)."""
        if rank < 0:
            return 0.0
        key = rank * self.n + w
        at = int(self.keys.searchsorted(key))  # the method: no dispatch wrapper per call
        return float(self.direct[at]) if at < self.keys.size and self.keys[at] == key else 0.0

    def entry(self, rank: np.ndarray, w: np.ndarray) -> np.ndarray:
        """``direct`` of (context rank, w), 0 where absent (or the context unseen). O(m log nnz)."""
        if self.keys.size == 0:
            return np.zeros(rank.shape)
        key = np.maximum(rank, 0) * self.n + w
        at = np.minimum(np.searchsorted(self.keys, key), self.keys.size - 1)
        return np.where((rank >= 0) & (self.keys[at] == key), self.direct[at], 0.0)

    def add_rows(self, out: np.ndarray, rank: np.ndarray, scale: np.ndarray) -> None:
        """Add ``scale[i] · direct`` of row i's context to ``out[i]`` (the caller applies γ). O(entries)."""
        if self.keys.size == 0:
            return
        lo = np.where(rank >= 0, self.indptr[np.maximum(rank, 0)], 0)
        hi = np.where(rank >= 0, self.indptr[np.maximum(rank, 0) + 1], 0)
        lengths = hi - lo
        if lengths.sum():
            rows = np.repeat(np.arange(rank.size), lengths)
            idx = np.arange(lengths.sum()) + np.repeat(lo - (np.cumsum(lengths) - lengths), lengths)
            np.add.at(out, (rows, self.next[idx]), self.direct[idx] * scale[rows])

    @property
    def nbytes(self) -> int:
        return int(sum(a.nbytes for a in (self.contexts, self.totals, self.gamma, self.keys,
                                            self.direct, self.next, self.indptr)))


def _floored_unigram(n: int, counts: np.ndarray) -> np.ndarray:
    """Absolute discounting of unigram counts, interpolated with the uniform distribution. O(n)."""
    total = counts.sum()
    if not total > 0:
        return np.full(n, 1.0 / n)
    d = _discount(counts[counts > 0], modified_discounts(counts[counts > 0]))
    p = np.maximum(counts, 0.0)
    p[counts > 0] -= d
    return (p + d.sum() / n) / total


class KneserNeyTrigram:
    """Interpolated modified Kneser–Ney trigram over ``n`` symbols (module docstring).

    Parameters
    ----------
    triples
        The triple counts (any weights: forgetting gives fractional ones).
    starts
        The stream starts (:class:`StreamStarts`); ``None``: none counted, so the empty
        and one-symbol histories use the unigram and the bigram level.

    Contexts are pairs ``(u, v)`` of the two symbols before the predicted one, ``v`` the
    last: an index, :data:`START` (-1, the stream began there) or :data:`UNKNOWN` (-2).

    Memory: O(nnz + starts + n) floats.

    Examples
    --------
    >>> t = Triples.from_arrays(3, x1=[0, 1, 2, 0], x2=[1, 2, 0, 1], x3=[2, 0, 1, 2])
    >>> kn = KneserNeyTrigram(t, StreamStarts.from_sequences(3, [[0, 1, 2, 0, 1, 2]]))
    >>> p = kn.predict(0, 1)
    >>> round(float(p.sum()), 12), int(p.argmax())
    (1.0, 2)
    >>> bool(np.allclose(kn.proba_of([0, -1, -2], [1, -1, 0], [2, 0, 1]),
    ...                  [p[2], kn.predict(-1, -1)[0], kn.predict(-2, 0)[1]]))
    True
    """

    def __init__(self, triples: Triples, starts: StreamStarts | None = None):
        n = self.n = int(triples.n)
        if n < 1:
            raise ValueError("a trigram needs at least one symbol")
        starts = StreamStarts.empty(n) if starts is None else starts
        if starts.n > n:
            raise ValueError(f"starts over {starts.n} symbols for counts over {n}")
        s = n  # <s> as a context index; contexts are coded v * (n + 1) + u (last symbol first)
        codes, weights = triples.codes, triples.weights
        # why one sort, not three: the codes are sorted by (x2, x3, x1), so the pairs (v, w) of
        # the middle level are runs already, and the contexts (u, v) of the top level, coded
        # v-major, need one sort of the (distinct) keys (x2, x1, x3); the temporaries are
        # built in place (at 9 · 10⁶ triples each costs its page faults)
        key = codes & _MASK
        key <<= BITS
        part = codes >> BITS
        part &= _MASK
        key |= part
        np.right_shift(codes, 2 * BITS, out=part)
        part <<= 2 * BITS
        key |= part
        del part
        order = np.argsort(key)
        del key
        g = codes[order]
        c = weights[order]
        del order
        ctx = g >> (2 * BITS)
        ctx *= n + 1
        ctx += g & _MASK
        w = g >> BITS
        w &= _MASK
        del g
        # the starts: the context (<s>, a) of a first pair (a, b), (<s>, <s>) of a first symbol;
        # no triple has u = <s>, so they are contexts of their own, inserted where they sort
        pa, pb, pw = starts.pair_arrays()
        fa, fw = starts.first_codes, starts.first_weights
        sctx = np.concatenate([pa * (n + 1) + s, np.full(fa.size, s * (n + 1) + s)])
        started = np.empty(0, dtype=np.int64)  # the start entries' positions
        if sctx.size:
            sw, sc = np.concatenate([pb, fa]), np.concatenate([pw, fw])
            so = np.lexsort((sw, sctx))
            sctx, sw, sc = sctx[so], sw[so], sc[so]
            at = np.searchsorted(ctx, sctx)
            ctx, w, c = np.insert(ctx, at, sctx), np.insert(w, at, sw), np.insert(c, at, sc)
            started = at + np.arange(at.size)
        classes = _classes(c)
        own = np.bincount(classes[started], minlength=6).astype(np.float64)
        rest = np.bincount(classes, minlength=6).astype(np.float64) - own
        self.discounts = _discounts_of(*rest[1:5])
        self.start_discounts = _discounts_of(*own[1:5])
        d = _class_discount(c, classes, self.discounts)
        d[started] = _class_discount(c[started], classes[started], self.start_discounts)
        del classes
        self._top = _Level(n, ctx, w, c, d)
        del ctx, d
        # p2: continuation counts N(· v w) = Σ_u min(c(u v w), 1) over symbols v (not <s>): the
        # triples' runs of equal (x2, x3), plus the first pairs (v = a, w = b) of the starts
        keys = codes >> BITS
        bounds = _runs(keys)
        pairs, N2 = keys[bounds[:-1]], _sums(np.minimum(weights, 1.0), bounds)
        if pa.size:
            so = np.argsort((pa << BITS) | pb)
            sk, sN = ((pa << BITS) | pb)[so], np.minimum(pw[so], 1.0)
            loc = np.searchsorted(pairs, sk)
            hit = loc < pairs.size
            hit[hit] = pairs[loc[hit]] == sk[hit]
            np.add.at(N2, loc[hit], sN[hit])
            pairs, N2 = np.insert(pairs, loc[~hit], sk[~hit]), np.insert(N2, loc[~hit], sN[~hit])
        D2 = modified_discounts(N2)
        self._mid = _Level(n, pairs >> BITS, pairs & _MASK, N2, _discount(N2, D2))
        pairs = pairs & _MASK
        # p1: N(· w) = Σ_v min(N(· v w), 1); p_freq: raw counts of every symbol
        self._p1 = _floored_unigram(n, np.bincount(pairs, weights=np.minimum(N2, 1.0), minlength=n))
        self._freq = _floored_unigram(n, np.bincount(w, weights=c, minlength=n))
        self.n_streams = starts.n_streams
        self.triples, self.starts = triples, starts  # what it was built from: its checkpoint

    # ---------------------------------------------------------------- contexts

    def _contexts(self, u, v) -> tuple[np.ndarray, np.ndarray]:
        u = np.atleast_1d(np.asarray(u, dtype=np.int64))
        v = np.atleast_1d(np.asarray(v, dtype=np.int64))
        u, v = np.broadcast_arrays(u, v)
        if u.size and (min(u.min(), v.min()) < UNKNOWN or max(u.max(), v.max()) >= self.n):
            raise ValueError(f"context symbols must be in -2..{self.n - 1} (-1: start, -2: unknown)")
        # a start cannot follow a symbol: (x, <s>) is read as the start (<s>, <s>)
        u = np.where(v == START, START, u)
        return u, v

    def _lower(self, u: np.ndarray, v: np.ndarray):
        """How each context backs off: its top-level rank, middle rank, and whether its lower
        distribution is p_freq (empty history or unknown last symbol)."""
        n, s = self.n, self.n
        top_ok = (u >= START) & (v >= START)
        code = np.where(v == START, s, v) * (n + 1) + np.where(u == START, s, u)
        top = np.where(top_ok, self._top.find(np.where(top_ok, code, 0)), -1)
        mid = np.where(v >= 0, self._mid.find(np.maximum(v, 0)), -1)
        freq = v < 0
        return top, mid, freq

    # ---------------------------------------------------------------- prediction

    def proba_of(self, u, v, w) -> np.ndarray:
        """``p(w[i] | u[i], v[i])``, shape (m,), without forming rows. O(m log nnz)."""
        u, v = self._contexts(u, v)
        w = np.atleast_1d(np.asarray(w, dtype=np.int64))
        if w.shape != u.shape:
            raise ValueError("contexts and predicted symbols must have one length")
        if w.size and (w.min() < 0 or w.max() >= self.n):
            raise ValueError(f"predicted symbols must be in 0..{self.n - 1}")
        top, mid, freq = self._lower(u, v)
        g2 = self._mid.gamma_of(mid)
        p2 = self._mid.entry(mid, w) + g2 * self._p1[w]
        lower = np.where(freq, self._freq[w], p2)
        g3 = self._top.gamma_of(top)
        return self._top.entry(top, w) + g3 * lower

    def predict_many(self, u, v) -> np.ndarray:
        """Rows ``p(· | u[i], v[i])``, shape (m, n), each summing to 1. O(m · n + entries)."""
        u, v = self._contexts(u, v)
        top, mid, freq = self._lower(u, v)
        g2 = self._mid.gamma_of(mid)
        out = g2[:, None] * self._p1[None, :]
        self._mid.add_rows(out, mid, np.ones(u.size))
        out[freq] = self._freq
        g3 = self._top.gamma_of(top)
        out *= g3[:, None]
        self._top.add_rows(out, top, np.ones(u.size))
        return out

    def predict(self, u: int, v: int) -> np.ndarray:
        """``p(· | u, v)``, shape (n,). O(n + entries)."""
        return self.predict_many([u], [v])[0]

    def context1(self, u: int, v: int) -> tuple[int, int, float]:
        """One context at a time, for online predictors: ``(top rank, middle rank, count)``
        (ranks -1 where unseen; a middle rank of -2: the lower distribution is the unigram).
        Plain integers, no arrays: O(log nnz) in a few microseconds."""
        if v == START:
            u = START
        if not (UNKNOWN <= u < self.n and UNKNOWN <= v < self.n):
            raise ValueError(f"context symbols must be in -2..{self.n - 1} (-1: start, -2: unknown)")
        s = self.n
        top = -1
        if u >= START and v >= START:
            top = self._top.find1((s if v == START else v) * (s + 1) + (s if u == START else u))
        mid = self._mid.find1(v) if v >= 0 else -2
        return top, mid, float(self._top.totals[top]) if top >= 0 else 0.0

    def proba1(self, context: tuple[int, int, float], w: int) -> float:
        """``p(w | context)`` for a context of :meth:`context1`. O(log nnz), no arrays."""
        top, mid, _ = context
        if mid == -2:
            lower = float(self._freq[w])
        else:
            g2 = float(self._mid.gamma[mid]) if mid >= 0 else 1.0
            lower = self._mid.entry1(mid, w) + g2 * float(self._p1[w])
        g3 = float(self._top.gamma[top]) if top >= 0 else 1.0
        return self._top.entry1(top, w) + g3 * lower

    def row1(self, context: tuple[int, int, float]) -> np.ndarray:
        """``p(· | context)`` for a context of :meth:`context1`, shape (n,): a few vector
        operations, without the batch machinery of :meth:`predict_many`. O(n + entries)."""
        top, mid, _ = context
        g3 = float(self._top.gamma[top]) if top >= 0 else 1.0
        if mid == -2:
            out = self._freq * g3
        else:
            g2 = float(self._mid.gamma[mid]) if mid >= 0 else 1.0
            out = self._p1 * (g3 * g2)
            if mid >= 0:
                lo, hi = self._mid.indptr[mid], self._mid.indptr[mid + 1]
                out[self._mid.next[lo:hi]] += g3 * self._mid.direct[lo:hi]
        if top >= 0:
            lo, hi = self._top.indptr[top], self._top.indptr[top + 1]
            out[self._top.next[lo:hi]] += self._top.direct[lo:hi]
        return out

    def tables(self, top: int, mid: int) -> tuple:
        """The parts of a context of :meth:`context1` that :meth:`row1` adds up: ``(γ3, γ2, next
        symbols and direct terms of the context, of its last symbol, whether the lower
        distribution is the unigram)``. Views, no copies. O(1)."""
        g3 = float(self._top.gamma[top]) if top >= 0 else 1.0
        g2 = float(self._mid.gamma[mid]) if mid >= 0 else 1.0
        tn, td, mn, md = _NO_NEXT, _NO_DIRECT, _NO_NEXT, _NO_DIRECT
        if top >= 0:
            lo, hi = self._top.indptr[top], self._top.indptr[top + 1]
            tn, td = self._top.next[lo:hi], self._top.direct[lo:hi]
        if mid >= 0:
            lo, hi = self._mid.indptr[mid], self._mid.indptr[mid + 1]
            mn, md = self._mid.next[lo:hi], self._mid.direct[lo:hi]
        return g3, g2, tn, td, mn, md, mid == -2

    def continuation(self) -> np.ndarray:
        """``p1``: the continuation unigram the bigram level backs off to, shape (n,). O(n)."""
        return self._p1.copy()

    def continuation_of(self) -> np.ndarray:
        """``p1`` itself (not a copy: read only). O(1)."""
        return self._p1

    def unigram_of(self) -> np.ndarray:
        """``p_freq`` itself (not a copy: read only). O(1)."""
        return self._freq

    def context_counts(self, u, v) -> np.ndarray:
        """``c(u v ·)``, the weight of each context at the top level (0 if unseen). O(m log nnz)."""
        u, v = self._contexts(u, v)
        top = self._lower(u, v)[0]
        if self._top.totals.size == 0:
            return np.zeros(top.shape)
        return np.where(top >= 0, self._top.totals[np.maximum(top, 0)], 0.0)

    def unigram(self) -> np.ndarray:
        """``p_freq``: the smoothed frequency of every symbol, shape (n,). O(n)."""
        return self._freq.copy()

    @property
    def nbytes(self) -> int:
        """Memory of the tables and of the counts they were built from (bytes)."""
        return (self._top.nbytes + self._mid.nbytes + self._p1.nbytes + self._freq.nbytes
                + self.triples.nbytes + sum(a.nbytes for a in self.starts.to_arrays().values()))

    # ---------------------------------------------------------------- persistence

    def to_arrays(self) -> dict[str, np.ndarray]:
        """The counts it is built from (triples and starts): a checkpoint rebuilds it exactly. O(nnz)."""
        return {"codes": self.triples.codes, "weights": self.triples.weights, **self.starts.to_arrays()}

    @classmethod
    def from_arrays(cls, n: int, arrays: dict) -> KneserNeyTrigram:
        """The trigram of :meth:`to_arrays` over ``n`` symbols; ``ValueError`` naming what is wrong.
        O(nnz log nnz)."""
        codes = np.asarray(arrays["codes"])
        w = np.asarray(arrays["weights"], dtype=np.float64)
        if codes.ndim != 1 or codes.shape != w.shape or (codes.size and codes.dtype.kind not in "iu"):
            raise ValueError("trigram counts: codes and weights must be 1-D arrays of one length")
        codes = codes.astype(np.int64)
        if codes.size and ((np.diff(codes) <= 0).any() or codes[0] < 0
                           or max(int(a.max()) for a in unpack(codes)) >= n):
            raise ValueError(f"trigram counts: codes must be sorted, distinct, over {n} symbols")
        if not np.isfinite(w).all() or (w <= 0).any():
            raise ValueError("trigram counts must be finite and positive")
        return cls(Triples(n, codes, w), StreamStarts.from_arrays(n, arrays))

    def __repr__(self) -> str:
        return (f"KneserNeyTrigram(n={self.n}, contexts={self._top.contexts.size}, "
                f"entries={self._top.keys.size}, D={np.round(self.discounts, 3).tolist()})")
