"""The levels of the Kneser–Ney trigram (:mod:`streamspec.core.trigram`): the modified
discounts of a level's counts, a level's sorted sparse entries (:class:`TrigramLevel`) and the
builders of the top and middle levels from the accumulator's triples and stream starts.

Arrays in, arrays out; the trigram itself mixes the levels. Costs are stated per routine.
"""

from __future__ import annotations

import numpy as np

from streamspec.core.stream_starts import StreamStarts
from streamspec.core.triples import BITS, MAX_SYMBOLS

__all__ = ["modified_discounts", "discounts_of", "discount_of", "count_classes", "class_discount",
           "TrigramLevel", "top_entries", "with_starts", "continuation_pairs", "floored_unigram",
           "SYMBOL_MASK", "runs"]

SYMBOL_MASK = MAX_SYMBOLS - 1  # one symbol of a triple's code


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
    return discounts_of(*(float((r == k).sum()) for k in (1, 2, 3, 4)))


def discounts_of(n1: float, n2: float, n3: float, n4: float) -> np.ndarray:
    """:func:`modified_discounts` from the counts-of-counts n1..n4. O(1)."""
    y = n1 / (n1 + 2 * n2) if n1 + 2 * n2 > 0 else 0.5
    d1 = 1 - 2 * y * n2 / n1 if n1 > 0 else 0.5
    d2 = 2 - 3 * y * n3 / n2 if n2 > 0 else d1
    d3 = 3 - 4 * y * n4 / n3 if n3 > 0 else d2
    return np.clip([d1, d2, d3], 0.05, [1.0, 2.0, 3.0])


def discount_of(counts: np.ndarray, D: np.ndarray) -> np.ndarray:
    """``d(c) = min(c, D_k)``, k the count rounded (1, 2 or 3+). O(m)."""
    k = np.clip(np.rint(counts).astype(np.int64), 1, 3) - 1
    return np.minimum(counts, D[k])


def count_classes(counts: np.ndarray) -> np.ndarray:
    """Each count rounded, clipped to 0..5 (5: five or more), as int8: the counts-of-counts
    are one ``bincount`` of it and the discount classes 1, 2, 3+ its values clipped to 1..3.
    Why: the same as :func:`modified_discounts` and :func:`discount_of`, in one byte a count
    instead of several float and int64 temporaries (9 · 10⁶ triples at n = 10⁵). O(m)."""
    r = np.rint(counts)
    np.clip(r, 0, 5, out=r)
    return r.astype(np.int8)


def class_discount(counts: np.ndarray, classes: np.ndarray, D: np.ndarray) -> np.ndarray:
    """:func:`discount_of` from the :func:`count_classes` of the counts. O(m)."""
    k = np.clip(classes, 1, 3)
    k -= 1
    d = D[k]
    np.minimum(d, counts, out=d)
    return d


def runs(keys: np.ndarray) -> np.ndarray:
    """Where each run of equal values of the sorted ``keys`` starts, and ``keys.size`` last. O(m)."""
    new = np.empty(keys.size, dtype=bool)
    new[:1] = True
    np.not_equal(keys[1:], keys[:-1], out=new[1:])
    return np.append(np.flatnonzero(new), keys.size)


def _sums(values: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """The sum of ``values`` over each run ``bounds[i]:bounds[i + 1]`` (:func:`runs`). O(m)."""
    if values.size == 0:
        return np.zeros(0)
    return np.add.reduceat(values, bounds[:-1])


class TrigramLevel:
    """One interpolated level: entries (context, w) with counts, discounted, per context.

    ``direct[e] = max(c_e − d_e, 0) / c(ctx)`` and ``gamma[ctx] = Σ d / c(ctx)``; entries
    are looked up by the key ``ctx_rank · n + w``. The entries are given sorted by
    (context, w), distinct, so that grouping them is one pass (no sort). O(m).
    """

    def __init__(self, n: int, ctx: np.ndarray, w: np.ndarray, c: np.ndarray, d: np.ndarray):
        """``d``: the discount of each entry, overwritten (it becomes ``direct``)."""
        bounds = runs(ctx)
        self._fill(n, ctx[bounds[:-1]], bounds, w, c, d)

    @classmethod
    def from_runs(cls, n: int, contexts: np.ndarray, indptr: np.ndarray, w: np.ndarray,
                  c: np.ndarray, d: np.ndarray) -> TrigramLevel:
        """The level of the entries of context ``contexts[i]`` at ``indptr[i]:indptr[i + 1]``
        (each context once, sorted; ``d`` overwritten): no per-entry context array. O(m)."""
        level = cls.__new__(cls)
        level._fill(n, contexts, indptr, w, c, d)
        return level

    def _fill(self, n: int, contexts: np.ndarray, bounds: np.ndarray, w: np.ndarray, c: np.ndarray,
              d: np.ndarray) -> None:
        self.n = n
        self.indptr = bounds
        self.contexts = contexts
        m = contexts.size
        rank = np.repeat(np.arange(m), np.diff(bounds))
        # why bincount, not add.reduceat over the runs: the same sums in the same order, and
        # at 9 · 10⁶ entries in millions of short runs reduceat cost several times more
        totals = np.bincount(rank, weights=c, minlength=m)
        lost = np.bincount(rank, weights=d, minlength=m)
        self.totals = totals
        self.gamma = lost / np.where(totals > 0, totals, 1.0)
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


def top_entries(codes: np.ndarray, weights: np.ndarray, n: int
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The top level's entries ``(context, w, count)`` sorted by context, contexts (u, v) coded
    ``v * (n + 1) + u``. O(nnz log nnz), one sort.

    Why one sort, not three: the codes are sorted by (x2, x3, x1), so the pairs (v, w) of the
    middle level are runs already, and the contexts (u, v) of the top level, coded v-major,
    need one sort of the (distinct) keys (x2, x1, x3); the temporaries are built in place (at
    9 · 10⁶ triples each costs its page faults)."""
    key = codes & SYMBOL_MASK
    key <<= BITS
    part = codes >> BITS
    part &= SYMBOL_MASK
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
    ctx += g & SYMBOL_MASK
    w = g >> BITS
    w &= SYMBOL_MASK
    return ctx, w, c


def with_starts(ctx: np.ndarray, w: np.ndarray, c: np.ndarray, starts: StreamStarts, n: int
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The top level's entries with the stream starts inserted where they sort, and the
    starts' positions: the context (<s>, a) of a first pair (a, b), (<s>, <s>) of a first
    symbol (no triple has u = <s>, so they are contexts of their own). O(nnz + starts log
    starts)."""
    s = n  # <s> as a context index
    pa, pb, pw = starts.pair_arrays()
    fa, fw = starts.first_codes, starts.first_weights
    sctx = np.concatenate([pa * (n + 1) + s, np.full(fa.size, s * (n + 1) + s)])
    started = np.empty(0, dtype=np.int64)
    if sctx.size:
        sw, sc = np.concatenate([pb, fa]), np.concatenate([pw, fw])
        so = np.lexsort((sw, sctx))
        sctx, sw, sc = sctx[so], sw[so], sc[so]
        at = np.searchsorted(ctx, sctx)
        ctx, w, c = np.insert(ctx, at, sctx), np.insert(w, at, sw), np.insert(c, at, sc)
        started = at + np.arange(at.size)
    return ctx, w, c, started


def continuation_pairs(codes: np.ndarray, weights: np.ndarray, pa: np.ndarray, pb: np.ndarray,
                        pw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The middle level's pairs (v, w) coded ``v << BITS | w``, sorted, and their continuation
    counts N(· v w) = Σ_u min(c(u v w), 1) over symbols v (not <s>): the triples' runs of
    equal (x2, x3), plus the first pairs (v = a, w = b) of the starts. O(nnz + starts log
    starts)."""
    keys = codes >> BITS
    bounds = runs(keys)
    if weights.size and weights.min() >= 1.0:  # why: whole counts (no forgetting) are the usual
        # case, and then Σ min(c, 1) is the run's length: no n-sized temporary nor reduceat
        pairs, N2 = keys[bounds[:-1]], np.diff(bounds).astype(np.float64)
    else:
        pairs, N2 = keys[bounds[:-1]], _sums(np.minimum(weights, 1.0), bounds)
    del keys
    if pa.size:
        so = np.argsort((pa << BITS) | pb)
        sk, sN = ((pa << BITS) | pb)[so], np.minimum(pw[so], 1.0)
        loc = np.searchsorted(pairs, sk)
        hit = loc < pairs.size
        hit[hit] = pairs[loc[hit]] == sk[hit]
        np.add.at(N2, loc[hit], sN[hit])
        pairs, N2 = np.insert(pairs, loc[~hit], sk[~hit]), np.insert(N2, loc[~hit], sN[~hit])
    return pairs, N2


def floored_unigram(n: int, counts: np.ndarray, D: np.ndarray | None = None) -> np.ndarray:
    """Absolute discounting of unigram counts (``D``: the discounts of counts 1, 2, 3+; by
    default the modified ones of these counts), interpolated with the uniform distribution. O(n)."""
    total = counts.sum()
    if not total > 0:
        return np.full(n, 1.0 / n)
    D = modified_discounts(counts[counts > 0]) if D is None else D
    d = discount_of(counts[counts > 0], D)
    p = np.maximum(counts, 0.0)
    p[counts > 0] -= d
    return (p + d.sum() / n) / total
