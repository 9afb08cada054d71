"""Baseline sequence models that the HMM estimators are compared with.

Counts are kept sparse (the distinct n-grams seen), so that large alphabets fit:
memory O(G + n) for G distinct n-grams, never n^(order+1).

- :class:`NGramModel`: add-``alpha`` n-grams;
- :class:`KneserNeyNGram`: interpolated Kneser–Ney n-grams with one absolute discount
  (0.75), the reference a user compares a next-symbol predictor with.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

__all__ = ["NGramModel", "KneserNeyNGram"]

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


class KneserNeyNGram:
    """Interpolated Kneser–Ney n-grams with one absolute discount ``D`` (Chen & Goodman 1999).

    ``order`` is the context length, as in :class:`NGramModel`: 1 for the bigram, 2 for the
    trigram. Every sequence is padded on the left with ``order`` start symbols ``<s>``
    (index ``n``, a context only, never predicted), as n-gram toolkits do, so the first
    symbols of a sequence are predicted from the start context. With ``c`` the counts of
    the (order+1)-grams, ``N(· h w)`` the number of distinct symbols seen before ``h w``
    (continuation counts, ``<s>`` included) and ``k(h)`` the number of distinct ``w`` after
    ``h`` at each level:

    * top level: ``p(w | h) = max(c(h w) − D, 0) / c(h ·) + D k(h) / c(h ·) · p(w | h')``;
    * lower levels: the same with ``N(· h w)`` for ``c(h w)``;
    * the empty context: ``p(w) = max(N(· w) − D, 0) / N(· ·) + D k / N(· ·) · 1/n``;

    ``h'`` is ``h`` without its oldest symbol, and a context never seen passes all its
    mass to the level below. Every symbol keeps a positive probability.

    Fitting costs O(T log T) time for T symbols and O(G + n) memory for G distinct
    n-grams of every order; :meth:`proba_sequence` and :meth:`log_loss` O(T · order ·
    log G), :meth:`predict_proba_next` O(order · (n + log G)). An n-gram is packed into
    one integer, so ``(n + 1) ** (order + 1)`` must stay below 2⁶².

    Examples
    --------
    >>> kn = KneserNeyNGram(n_symbols=2, order=1).fit([[0, 1, 0, 1, 0, 1]])
    >>> kn.predict_proba_next([0]).round(4).tolist()
    [0.1667, 0.8333]
    >>> round(kn.log_loss([[0, 1, 0]]), 4)
    0.2012
    """

    def __init__(self, n_symbols: int, order: int = 2, discount: float = 0.75):
        if order < 0:
            raise ValueError(f"order must be >= 0, got {order}")
        if not 0 < discount < 1:
            raise ValueError(f"discount must be in (0, 1), got {discount}")
        if (int(n_symbols) + 1) ** (order + 1) >= _MAX_CODE:
            raise ValueError(f"{n_symbols} symbols at order {order}: (n+1)^(order+1) must stay below 2^62")
        self.n_symbols = int(n_symbols)
        self.order = order
        self.discount = discount

    def _grams(self, x: np.ndarray) -> np.ndarray:
        """Packed (order+1)-grams ending at each symbol of x, padded with ``<s>`` (base n+1). O(T)."""
        b = self.n_symbols + 1
        padded = np.concatenate([np.full(self.order, self.n_symbols, dtype=np.int64), x])
        code = np.zeros(x.size, dtype=np.int64)
        for k in range(self.order + 1):
            code = code * b + padded[k : k + x.size]
        return code

    def fit(self, sequences: Iterable) -> KneserNeyNGram:
        """Count the padded n-grams of ``sequences`` (index lists). O(T log T) time, O(G + n) memory."""
        n, b = self.n_symbols, self.n_symbols + 1
        chunks = []
        for seq in sequences:
            x = np.asarray(seq, dtype=np.int64)
            if x.size and (x.min() < 0 or x.max() >= n):
                raise ValueError(f"symbol index out of range 0..{n - 1}")
            chunks.append(self._grams(x))
        codes, counts = np.unique(np.concatenate(chunks) if chunks else np.empty(0, np.int64),
                                  return_counts=True)
        # levels[k]: k symbols of context; the top level counts, the lower ones continue
        self.levels_ = [None] * (self.order + 1)
        self.levels_[self.order] = self._level(codes, counts.astype(np.float64))
        for k in range(self.order - 1, -1, -1):
            suffix, cont = np.unique(codes % b ** (k + 1), return_counts=True)
            self.levels_[k] = self._level(suffix, cont.astype(np.float64))
            codes = suffix
        return self

    def _level(self, codes: np.ndarray, counts: np.ndarray) -> tuple:
        """``(codes, direct, contexts, gamma)``: direct = max(c − D, 0) / c(h ·) per gram and
        gamma = D k(h) / c(h ·) per sorted distinct context. O(G log G)."""
        b = self.n_symbols + 1
        contexts, at, distinct = np.unique(codes // b, return_inverse=True, return_counts=True)
        totals = np.bincount(at, weights=counts)
        direct = np.maximum(counts - self.discount, 0.0) / totals[at]
        return codes, direct, contexts, self.discount * distinct / totals

    @staticmethod
    def _lookup(table: np.ndarray, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Index of each key in the sorted ``table`` and whether it is there. O(m log G)."""
        if table.size == 0:
            return np.zeros(keys.shape, dtype=np.int64), np.zeros(keys.shape, dtype=bool)
        at = np.minimum(np.searchsorted(table, keys), table.size - 1)
        return at, table[at] == keys

    def _proba_of_grams(self, grams: np.ndarray) -> np.ndarray:
        """``p(w | h)`` for packed (order+1)-grams ``h w``, all levels vectorised. O(m · order · log G)."""
        b = self.n_symbols + 1
        p = np.full(grams.shape, 1.0 / self.n_symbols)
        for k in range(self.order + 1):  # from the empty context up
            codes, direct, contexts, gamma = self.levels_[k]
            gram = grams % b ** (k + 1)
            at, seen = self._lookup(codes, gram)
            cat, cseen = self._lookup(contexts, gram // b)
            if k == 0:  # one context (the empty one): the uniform distribution below it
                cseen = np.full(grams.shape, contexts.size > 0)
            p = np.where(cseen, np.where(seen, direct[at], 0.0) + gamma[cat] * p, p)
        return p

    def proba_sequence(self, seq) -> np.ndarray:
        """``p(x_t | x_<t)`` for each symbol of one sequence (from its own start), shape (T,).
        O(T · order · log G)."""
        x = np.asarray(seq, dtype=np.int64)
        return self._proba_of_grams(self._grams(x))

    def predict_proba_next(self, history) -> np.ndarray:
        """``p(· | history)``, shape (n,), the history read from its sequence's start.
        O(order · (n + log G))."""
        h = np.asarray(list(history), dtype=np.int64)
        ctx = self._grams(np.concatenate([h, [0]]))[-1] // (self.n_symbols + 1)
        return self._proba_of_grams(ctx * (self.n_symbols + 1) + np.arange(self.n_symbols))

    def log_loss(self, sequences: Iterable) -> float:
        """Mean negative log-likelihood per symbol (nats), each sequence from its start.
        O(T · order · log G)."""
        total, count = 0.0, 0
        for seq in sequences:
            x = np.asarray(seq, dtype=np.int64)
            total -= float(np.log(self.proba_sequence(x)).sum())
            count += x.size
        if count == 0:
            raise ValueError("log_loss needs at least one symbol")
        return total / count
