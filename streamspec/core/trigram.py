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
is then the unigram, not the first symbol of the book. ``discount=D`` builds the trigram
with the one discount D at every level instead; :func:`chosen_trigram` picks between them
on held-out counts (docs/math.md section 9).

A context symbol may also be unknown (index -2: an unseen label, or a history cut
short): ``(unknown, v)`` uses ``p2(· | v)``, and an unknown ``v`` uses ``p_freq``.

Costs: building O(nnz log nnz) time (one sort of the triples by context: the counts' own
order, by (x2, x3, x1), already groups the middle level's pairs) and O(nnz + n) memory for
nnz distinct triples (plus the starts); from a previous trigram of the same stream
(:meth:`KneserNeyTrigram.updated`, a refit) O(nnz + n) passes and O(|Δ| log nnz) searches,
no sort; the probability of one symbol O(log nnz); a whole row O(n + entries).
"""

from __future__ import annotations

import numpy as np

from streamspec.core.stream_starts import StreamStarts
from streamspec.core.trigram_levels import (
    SYMBOL_MASK,
    TrigramLevel,
    class_discount,
    continuation_pairs,
    count_classes,
    discount_of,
    discounts_of,
    floored_unigram,
    modified_discounts,
    runs,
    top_entries,
    with_starts,
)
from streamspec.core.trigram_merge import merged_top_level
from streamspec.core.triples import BITS, Triples, unpack
from streamspec.core.triples_change import TriplesChange, triples_change

__all__ = ["KneserNeyTrigram", "chosen_trigram", "modified_discounts", "START", "UNKNOWN",
           "FIXED_DISCOUNTS", "CHOICE_MAX_NNZ"]

FIXED_DISCOUNTS = (0.5, 0.75)  # the one-discount trigrams chosen_trigram weighs against the modified one
CHOICE_MAX_NNZ = 2_000_000  # above this many distinct triples, the modified trigram without a choice

START = -1  # the stream-start boundary <s> in a context
_NO_NEXT, _NO_DIRECT = np.empty(0, dtype=np.int64), np.empty(0)  # a context without entries
UNKNOWN = -2  # a context symbol the model cannot use (unseen, or a history cut short)


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

    def __init__(self, triples: Triples, starts: StreamStarts | None = None,
                 discount: float | None = None):
        n = self.n = int(triples.n)
        if n < 1:
            raise ValueError("a trigram needs at least one symbol")
        if discount is not None and not 0.0 < discount < 1.0:
            raise ValueError(f"discount must be in (0, 1) or None, got {discount!r}")
        self.discount = None if discount is None else float(discount)
        starts = StreamStarts.empty(n) if starts is None else starts
        if starts.n > n:
            raise ValueError(f"starts over {starts.n} symbols for counts over {n}")
        # contexts (u, v) are coded v * (n + 1) + u (last symbol first), <s> as the index n
        ctx, w, c, started = with_starts(*top_entries(triples.codes, triples.weights, n), starts, n)
        bounds = runs(ctx)
        contexts = ctx[bounds[:-1]]
        del ctx
        self._finish(triples, starts, contexts, bounds, w, c, started)

    @classmethod
    def updated(cls, previous: KneserNeyTrigram, triples: Triples, starts: StreamStarts | None = None,
                change: TriplesChange | None = None) -> KneserNeyTrigram:
        """The trigram of ``triples`` and ``starts`` from ``previous``, the trigram of earlier
        counts of the same stream (``triples = f · previous.triples + Δ``): its sorted top level
        merged with Δ (:mod:`~streamspec.core.trigram_merge`), no sort of the triples. The same
        trigram as ``KneserNeyTrigram(triples, starts)`` to rounding (the counts Δ does not name
        are ``f · c``, within 10⁻¹² of theirs). ``change``: :func:`triples_change` of
        ``previous.triples`` and ``triples`` if known (else computed, O(nnz log nnz) in
        searches). Built cold when the alphabet shrank.

        Cost: O(nnz + n) memory traffic and O(|Δ| log nnz) for the merge, against the cold
        build's sort of nnz keys; memory O(nnz + n), the previous trigram untouched (it may keep
        predicting while this one is built)."""
        starts = StreamStarts.empty(triples.n) if starts is None else starts
        if (previous.n > triples.n or starts.n > triples.n
                or getattr(previous, "_top_counts", None) is None):  # (a trigram pickled before it)
            return cls(triples, starts, getattr(previous, "discount", None))
        change = triples_change(previous.triples, triples) if change is None else change
        merged = merged_top_level(previous._top, previous._top_counts, previous.n, triples, change,
                                  starts)
        self = cls.__new__(cls)
        self.n, self.discount = int(triples.n), getattr(previous, "discount", None)
        self._finish(triples, starts, *merged)
        return self

    def _finish(self, triples: Triples, starts: StreamStarts, contexts: np.ndarray,
                indptr: np.ndarray, w: np.ndarray, c: np.ndarray, started: np.ndarray) -> None:
        """The levels from the top level's entries ``(w, count)`` sorted by context, those of
        ``contexts[i]`` at ``indptr[i]:indptr[i + 1]``, starts included at ``started``: discounts,
        the top and middle levels, the unigrams. O(nnz + n)."""
        n = self.n
        classes = count_classes(c)
        own = np.bincount(classes[started], minlength=6).astype(np.float64)
        rest = np.bincount(classes, minlength=6).astype(np.float64) - own
        fixed = None if self.discount is None else np.full(3, self.discount)  # one D everywhere
        self.discounts = discounts_of(*rest[1:5]) if fixed is None else fixed
        self.start_discounts = discounts_of(*own[1:5]) if fixed is None else fixed
        d = class_discount(c, classes, self.discounts)
        d[started] = class_discount(c[started], classes[started], self.start_discounts)
        del classes
        self._top = TrigramLevel.from_runs(n, contexts, indptr, w, c, d)
        self._top_counts = c  # why: the next refit's merge starts from them (:meth:`updated`)
        del d
        # p2: continuation counts N(· v w) = Σ_u min(c(u v w), 1) over symbols v (not <s>): the
        # triples' runs of equal (x2, x3), plus the first pairs (v = a, w = b) of the starts
        pa, pb, pw = starts.pair_arrays()
        pairs, N2 = continuation_pairs(triples.codes, triples.weights, pa, pb, pw)
        D2 = modified_discounts(N2) if fixed is None else fixed
        self._mid = TrigramLevel(n, pairs >> BITS, pairs & SYMBOL_MASK, N2, discount_of(N2, D2))
        pairs = pairs & SYMBOL_MASK
        # p1: N(· w) = Σ_v min(N(· v w), 1); p_freq: raw counts of every symbol
        N1 = np.bincount(pairs, weights=np.minimum(N2, 1.0), minlength=n)
        self._p1 = floored_unigram(n, N1, fixed)
        self._freq = floored_unigram(n, np.bincount(w, weights=c, minlength=n), fixed)
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
        return (self._top.nbytes + self._top_counts.nbytes + self._mid.nbytes + self._p1.nbytes
                + self._freq.nbytes
                + self.triples.nbytes + sum(a.nbytes for a in self.starts.to_arrays().values()))

    # ---------------------------------------------------------------- persistence

    def to_arrays(self) -> dict[str, np.ndarray]:
        """The counts it is built from (triples and starts) and a fixed discount if it has one: a
        checkpoint rebuilds it exactly. O(nnz)."""
        fixed = {} if getattr(self, "discount", None) is None else {"discount": np.array([self.discount])}
        return {"codes": self.triples.codes, "weights": self.triples.weights, **self.starts.to_arrays(),
                **fixed}

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
        discount = None
        if "discount" in arrays:  # (files from before fixed discounts have none: modified)
            d = np.asarray(arrays["discount"], dtype=np.float64).ravel()
            if d.size != 1 or not 0.0 < d[0] < 1.0:
                raise ValueError("trigram discount: one number in (0, 1)")
            discount = float(d[0])
        return cls(Triples(n, codes, w), StreamStarts.from_arrays(n, arrays), discount)

    def __repr__(self) -> str:
        return (f"KneserNeyTrigram(n={self.n}, contexts={self._top.contexts.size}, "
                f"entries={self._top.keys.size}, D={np.round(self.discounts, 3).tolist()})")


def chosen_trigram(triples: Triples, starts: StreamStarts, u: np.ndarray, v: np.ndarray,
                   x: np.ndarray, w: np.ndarray) -> KneserNeyTrigram:
    """The modified Kneser–Ney trigram of the counts, or the one with a single discount of
    :data:`FIXED_DISCOUNTS` at every level where that predicts the held-out items ``(u, v) → x``
    (weights ``w``, symbols) better by more than 10⁻³ nats per symbol and two standard errors
    of the gain (the items' differences); the modified one alone above :data:`CHOICE_MAX_NNZ`
    distinct triples. Why: the modified discounts come from the count-of-counts of each level;
    on sparse continuation counts (many short sessions over a large alphabet) the middle
    level's ``D2``, ``D3+`` reach 1.4–2.0 and send most of a bigram's mass to the unigram:
    3.497 nats where one discount of 0.75 gives 3.385 and the textbook trigram 3.380
    (``demos/bench_unseen.py``, short sessions). Why the standard errors: on the 365 held-out
    symbols of the chorales a single discount looked 0.015 nats better (z ≈ 1) and was 0.026
    worse on the test sequences. O(|FIXED_DISCOUNTS| + 1) builds, O(nnz log nnz) each, and
    O(m log nnz) to score m items.

    >>> from streamspec.core.triples import Triples
    >>> t = Triples.from_arrays(3, [0, 1, 2, 0], [1, 2, 0, 1], [2, 0, 1, 2])
    >>> s = StreamStarts.empty(3)
    >>> u, v = np.array([0]), np.array([1])
    >>> chosen_trigram(t, s, u, v, np.array([2]), np.ones(1)).discount  # 2 after (0, 1): seen
    0.5
    >>> chosen_trigram(t, s, u, v, np.array([0]), np.ones(1)).discount is None  # 0: never seen there
    True
    """
    best = KneserNeyTrigram(triples, starts)
    w = np.asarray(w, dtype=np.float64)
    total = float(w.sum())
    if triples.nnz > CHOICE_MAX_NNZ or x.size == 0 or not total > 0:
        return best
    modified = -np.log(best.proba_of(u, v, x))
    best_gain = 0.0
    for d in FIXED_DISCOUNTS:
        trigram = KneserNeyTrigram(triples, starts, d)
        delta = modified + np.log(trigram.proba_of(u, v, x))  # per item: what D gains
        gain = float(w @ delta) / total
        se = float(np.sqrt(w @ (delta - gain) ** 2) / total)
        if gain > max(1e-3, 2.0 * se, best_gain):
            best, best_gain = trigram, gain
    return best
