"""Baseline sequence models that the HMM estimators are compared with.

Counts are kept sparse (the distinct n-grams seen), so that large alphabets fit:
memory O(G + n) for G distinct n-grams, never n^(order+1).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

__all__ = ["NGramModel"]

_MAX_CODE = 1 << 62


class NGramModel:
    """An order-``order`` Markov chain over symbol indices with add-``alpha`` smoothing.

    ``order=1`` is the bigram model: ``Pr(x_t | x_{t-1})``. The first ``order``
    symbols of a sequence are predicted from shorter contexts (down to the unigram).
    ``Pr(w | ctx) = (c(ctx, w) + alpha) / (c(ctx) + alpha · n)``.

    Counts are sparse: fitting costs O(T log T) for T symbols and memory
    O(G + n) for G distinct n-grams (of every order up to ``order + 1``);
    :meth:`predict_proba_next` costs O(n + log G), :meth:`log_loss` O(T log G).
    An n-gram is packed into one integer, so ``n ** (order + 1)`` must stay below 2⁶².

    Examples
    --------
    >>> bigram = NGramModel(n_symbols=2, order=1, alpha=0.5).fit([[0, 1, 0, 1, 0, 1]])
    >>> bigram.predict_proba_next([0]).round(3).tolist()
    [0.125, 0.875]
    >>> round(bigram.log_loss([[0, 1, 0]]), 4)
    0.3363
    """

    def __init__(self, n_symbols: int, order: int = 1, alpha: float = 0.5):
        if order < 0:
            raise ValueError(f"order must be >= 0, got {order}")
        if not alpha > 0:
            raise ValueError(f"alpha must be > 0, got {alpha}")
        if int(n_symbols) ** (order + 1) >= _MAX_CODE:
            raise ValueError(f"{n_symbols} symbols at order {order}: n^(order+1) must stay below 2^62")
        self.n_symbols = n_symbols
        self.order = order
        self.alpha = alpha

    def _codes(self, x: np.ndarray, o: int) -> np.ndarray:
        """Packed codes of the (o+1)-grams of x (base n, oldest symbol most significant)."""
        m = x.size - o
        code = np.zeros(max(m, 0), dtype=np.int64)
        for k in range(o + 1):
            code = code * self.n_symbols + x[k : k + m]
        return code

    def fit(self, sequences: Iterable) -> NGramModel:
        """Count the n-grams of ``sequences`` (sparse). O(T log T) time, O(G + n) memory."""
        n = self.n_symbols
        chunks: list[list[np.ndarray]] = [[] for _ in range(self.order + 1)]
        for seq in sequences:
            x = np.asarray(seq, dtype=np.int64)
            if x.size and (x.min() < 0 or x.max() >= n):
                raise ValueError(f"symbol index out of range 0..{n - 1}")
            for o in range(self.order + 1):
                if x.size > o:
                    chunks[o].append(self._codes(x, o))
        self.codes_, self.counts_ = [], []
        for o in range(self.order + 1):
            all_codes = np.concatenate(chunks[o]) if chunks[o] else np.empty(0, dtype=np.int64)
            codes, counts = np.unique(all_codes, return_counts=True)
            self.codes_.append(codes)
            self.counts_.append(counts.astype(np.float64))
        return self

    def _count(self, o: int, codes: np.ndarray) -> np.ndarray:
        """Counts of packed (o+1)-grams (0 when unseen)."""
        table, counts = self.codes_[o], self.counts_[o]
        if table.size == 0:
            return np.zeros(codes.shape)
        at = np.minimum(np.searchsorted(table, codes), table.size - 1)
        return np.where(table[at] == codes, counts[at], 0.0)

    def _context_total(self, o: int, ctx: np.ndarray) -> np.ndarray:
        """c(ctx) = Σ_w c(ctx, w) for packed contexts of o symbols (the total for o = 0)."""
        n = self.n_symbols
        if o == 0:
            return np.full(ctx.shape, self.counts_[0].sum())
        table, counts = self.codes_[o], self.counts_[o]
        lo = np.searchsorted(table, ctx * n)
        hi = np.searchsorted(table, ctx * n + n)
        cum = np.concatenate(([0.0], np.cumsum(counts)))
        return cum[hi] - cum[lo]

    def predict_proba_next(self, history) -> np.ndarray:
        """``Pr(· | last order symbols)``, shape (n,). O(n + log G)."""
        n = self.n_symbols
        h = np.asarray(list(history)[-self.order :] if self.order else [], dtype=np.int64)
        o = h.size
        ctx = np.zeros(1, dtype=np.int64)
        for s in h:
            ctx = ctx * n + s
        total = self._context_total(o, ctx)[0]
        row = self._count(o, ctx[0] * n + np.arange(n))
        return (row + self.alpha) / (total + self.alpha * n)

    def log_loss(self, sequences: Iterable) -> float:
        """Mean negative log-likelihood per symbol (nats). O(T log G)."""
        n = self.n_symbols
        total, count = 0.0, 0
        for seq in sequences:
            x = np.asarray(seq, dtype=np.int64)
            for t in range(min(self.order, x.size)):  # the first symbols: shorter contexts
                ctx = np.array([self._codes(x[:t], t - 1)[0] if t else 0], dtype=np.int64)
                c = self._count(t, ctx * n + x[t])[0]
                total -= np.log((c + self.alpha) / (self._context_total(t, ctx)[0] + self.alpha * n))
            o = self.order
            if x.size > o:
                grams = self._codes(x, o)
                ctx = grams // n
                c = self._count(o, grams)
                total -= np.log((c + self.alpha) / (self._context_total(o, ctx) + self.alpha * n)).sum()
            count += x.size
        return float(total / count)
