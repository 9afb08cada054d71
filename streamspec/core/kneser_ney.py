"""The interpolated Kneser–Ney bigram of pair counts, the backoff's second model (docs/math.md section 7).

:class:`KneserNeyBigram` predicts the next symbol from the previous one with absolute
discounting, interpolated with a continuation unigram and a uniform floor, so that
every symbol keeps a positive probability. Memory O(P + n) for P distinct pairs; a
row costs O(n), the probability of one pair O(log P).
:mod:`streamspec.core.backoff` mixes it with the HMM.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import scipy.sparse as sp

from streamspec.core.triples import Triples

__all__ = ["KneserNeyBigram"]


def _discount(counts: np.ndarray) -> float:
    """``n1 / (n1 + 2 n2)`` from the count-of-counts (counts rounded), clipped to [0.1, 0.9]."""
    r = np.rint(counts)
    n1, n2 = int((r == 1).sum()), int((r == 2).sum())
    if n1 + 2 * n2 == 0:
        return 0.5
    return float(np.clip(n1 / (n1 + 2 * n2), 0.1, 0.9))


class KneserNeyBigram:
    """Interpolated Kneser–Ney bigram over ``n`` symbols, from sparse pair counts.

    With ``c(v, w)`` the count of ``v`` followed by ``w``, ``c(v) = Σ_w c(v, w)``,
    ``N1+(·w)`` the number of distinct predecessors of ``w`` and ``P`` the number
    of distinct pairs:

    * ``p(w | v) = max(c(v, w) − D, 0) / c(v) + γ(v) p_cont(w)``, with
      ``γ(v) = Σ_w min(c(v, w), D) / c(v)`` (``D · N1+(v·) / c(v)`` for integer
      counts), and ``p(w | v) = p_cont(w)`` for a context never seen (c(v) = 0) or
      an empty context (``last=None``, or -1 in arrays);
    * ``p_cont(w) = max(N1+(·w) − D', 0) / P + γ' / n``: the continuation unigram,
      itself interpolated with the uniform distribution, so every symbol has
      positive probability.

    The discounts are ``D = n1 / (n1 + 2 n2)`` from the count-of-counts of the pair
    counts and ``D'`` the same from the continuation counts ``N1+(·w)``, clipped to
    [0.1, 0.9].

    Parameters
    ----------
    n
        Alphabet size.
    pairs
        Sorted distinct codes ``v * n + w`` of the pairs seen.
    counts
        Their counts (positive; fractional weights allowed).
    discount, unigram_discount
        D and D'; estimated from the counts when ``None``.

    Memory O(P + n). Use :meth:`from_triples` (pairs ``(x2, x3)`` of the triples) or
    :meth:`from_pair_counts` (a sparse matrix ``c[v, w]``).

    Examples
    --------
    >>> kn = KneserNeyBigram.from_sequences(3, [[0, 1, 0, 1, 2, 0, 1]])
    >>> p = kn.predict(0)
    >>> bool(abs(p.sum() - 1) < 1e-12 and (p > 0).all()), int(p.argmax())
    (True, 1)
    >>> bool(np.allclose(kn.proba_of([0, -1], [1, 2]), [kn.predict(0)[1], kn.predict(None)[2]]))
    True
    """

    def __init__(self, n: int, pairs, counts, discount: float | None = None,
                 unigram_discount: float | None = None):
        self.n = int(n)
        self.pairs = np.asarray(pairs, dtype=np.int64)
        self.counts = np.asarray(counts, dtype=np.float64)
        if self.n < 1:
            raise ValueError(f"a bigram needs at least one symbol, got n={n}")
        if self.pairs.shape != self.counts.shape or self.pairs.ndim != 1:
            raise ValueError("pairs and counts must be 1-D arrays of one length")
        if self.pairs.size:
            if self.pairs[0] < 0 or self.pairs[-1] >= self.n * self.n or (np.diff(self.pairs) <= 0).any():
                raise ValueError("pairs must be sorted distinct codes v * n + w in 0..n²-1")
            if not np.isfinite(self.counts).all() or (self.counts <= 0).any():
                raise ValueError("pair counts must be finite and positive")
        self.discount = _discount(self.counts) if discount is None else float(discount)
        v, w = np.divmod(self.pairs, self.n)
        self._next = w
        self.indptr = np.searchsorted(v, np.arange(self.n + 1))
        self.context_counts = np.bincount(v, weights=self.counts, minlength=self.n)
        cont = np.bincount(w, minlength=self.n).astype(np.float64)  # N1+(·w)
        self.unigram_discount = (_discount(cont[cont > 0]) if unigram_discount is None
                                 else float(unigram_discount))
        for name in ("discount", "unigram_discount"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {getattr(self, name)!r}")
        P = float(self.pairs.size)
        if P > 0:
            D1 = self.unigram_discount
            self.p_cont = (np.maximum(cont - D1, 0.0) + np.minimum(cont, D1).sum() / self.n) / P
            if self.unigram_discount == 0.0:  # no floor asked for: at least never zero
                self.p_cont = 0.5 * self.p_cont + 0.5 / self.n
        else:
            self.p_cont = np.full(self.n, 1.0 / self.n)
        D = self.discount
        c = self.context_counts
        lost = np.bincount(v, weights=np.minimum(self.counts, D), minlength=self.n)
        seen = c > 0
        self.gamma = np.where(seen, lost / np.where(seen, c, 1.0), 1.0)
        # the discounted term of each pair: max(c(v, w) − D, 0) / c(v)
        self._direct = np.maximum(self.counts - D, 0.0) / np.where(seen, c, 1.0)[v] if v.size else np.empty(0)

    # ---------------------------------------------------------------- construction

    @classmethod
    def from_pair_counts(cls, c, **kwargs) -> KneserNeyBigram:
        """From a (sparse or dense) matrix ``c[v, w]`` of pair counts. O(P log P)."""
        c = sp.coo_matrix(c)
        n = c.shape[0]
        if c.shape != (n, n):
            raise ValueError(f"pair counts must be square, got shape {c.shape}")
        codes = c.row.astype(np.int64) * n + c.col
        order = np.argsort(codes, kind="stable")
        codes, w = codes[order], np.asarray(c.data, dtype=np.float64)[order]
        starts = np.flatnonzero(np.concatenate(([True], codes[1:] != codes[:-1]))) if codes.size else codes
        w = np.add.reduceat(w, starts) if codes.size else w
        codes = codes[starts] if codes.size else codes
        keep = w > 0
        return cls(n, codes[keep], w[keep], **kwargs)

    @classmethod
    def from_triples(cls, triples: Triples, **kwargs) -> KneserNeyBigram:
        """From the pairs (x2, x3) of triple counts (``triples.c32()``). O(nnz log nnz)."""
        return cls.from_pair_counts(triples.c32(), **kwargs)

    @classmethod
    def from_sequences(cls, n: int, sequences: Iterable, **kwargs) -> KneserNeyBigram:
        """From the consecutive pairs of symbol sequences. O(T log T)."""
        rows, cols = [], []
        for seq in sequences:
            x = np.asarray(seq, dtype=np.int64)
            rows.append(x[:-1])
            cols.append(x[1:])
        r = np.concatenate(rows) if rows else np.empty(0, np.int64)
        c = np.concatenate(cols) if cols else np.empty(0, np.int64)
        return cls.from_pair_counts(sp.coo_matrix((np.ones(r.size), (r, c)), shape=(n, n)), **kwargs)

    # ---------------------------------------------------------------- prediction

    def _lasts(self, lasts) -> np.ndarray:
        a = np.asarray([-1 if v is None else v for v in lasts] if isinstance(lasts, list) else lasts)
        a = np.atleast_1d(a)
        if a.size and a.dtype.kind not in "iu":
            raise ValueError(f"contexts must be integer indices (or -1 for none), got {a.dtype}")
        a = a.astype(np.int64, copy=False)
        if a.size and (a.min() < -1 or a.max() >= self.n):
            raise ValueError(f"unknown context symbol: the bigram has symbols 0..{self.n - 1}")
        return a

    def predict(self, last: int | None) -> np.ndarray:
        """``p(· | last)``, shape (n,), positive and summing to 1; ``None``: empty context. O(n).

        Examples
        --------
        >>> kn = KneserNeyBigram.from_sequences(2, [[0, 1, 1, 0, 1]])
        >>> kn.predict(0).round(3).tolist(), kn.predict(None).round(3).tolist()
        ([0.083, 0.917], [0.333, 0.667])
        """
        return self.predict_many([-1 if last is None else int(last)])[0]

    def predict_many(self, lasts) -> np.ndarray:
        """Rows ``p(· | lasts[i])``, shape (m, n); -1 (or None) is the empty context. O(m · n)."""
        v = self._lasts(lasts)
        g = np.where(v >= 0, self.gamma[np.maximum(v, 0)], 1.0)
        out = g[:, None] * self.p_cont[None, :]
        lo = np.where(v >= 0, self.indptr[np.maximum(v, 0)], 0)
        hi = np.where(v >= 0, self.indptr[np.maximum(v, 0) + 1], 0)
        lengths = hi - lo
        if lengths.sum():
            rows = np.repeat(np.arange(v.size), lengths)
            offsets = np.repeat(lo - (np.cumsum(lengths) - lengths), lengths)
            idx = np.arange(lengths.sum()) + offsets
            out[rows, self._next[idx]] += self._direct[idx]
        return out

    def proba_of(self, lasts, nexts) -> np.ndarray:
        """``p(nexts[i] | lasts[i])``, shape (m,), without forming rows. O(m log P).

        Examples
        --------
        >>> kn = KneserNeyBigram.from_sequences(2, [[0, 1, 1, 0, 1]])
        >>> kn.proba_of([0, 0], [1, 0]).round(3).tolist()
        [0.917, 0.083]
        """
        v = self._lasts(lasts)
        w = np.atleast_1d(np.asarray(nexts, dtype=np.int64))
        if w.shape != v.shape:
            raise ValueError("lasts and nexts must have one length")
        if w.size and (w.min() < 0 or w.max() >= self.n):
            raise ValueError(f"unknown symbol: the bigram has symbols 0..{self.n - 1}")
        vv = np.maximum(v, 0)
        p = np.where(v >= 0, self.gamma[vv], 1.0) * self.p_cont[w]
        if self.pairs.size:
            code = vv * self.n + w
            at = np.minimum(np.searchsorted(self.pairs, code), self.pairs.size - 1)
            hit = (self.pairs[at] == code) & (v >= 0)
            p = p + np.where(hit, self._direct[at], 0.0)
        return p

    def log_loss(self, sequences: Iterable) -> float:
        """Mean negative log-likelihood per symbol (nats); the first symbol of a sequence has
        the empty context. O(T log P) for T symbols."""
        total, count = 0.0, 0
        for seq in sequences:
            x = np.asarray(seq, dtype=np.int64)
            if x.size == 0:
                continue
            lasts = np.concatenate(([-1], x[:-1]))
            total -= float(np.log(self.proba_of(lasts, x)).sum())
            count += x.size
        if count == 0:
            raise ValueError("log_loss needs at least one symbol")
        return total / count

    def __repr__(self) -> str:
        return f"KneserNeyBigram(n={self.n}, pairs={self.pairs.size}, D={self.discount:.3f})"
