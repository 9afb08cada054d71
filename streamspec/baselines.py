"""Baseline sequence models that the HMM estimators are compared with."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

__all__ = ["NGramModel"]


class NGramModel:
    """An order-``order`` Markov chain over symbol indices with add-``alpha`` smoothing.

    ``order=1`` is the bigram model: ``Pr(x_t | x_{t-1})``. The first ``order``
    symbols of a sequence are predicted from shorter contexts (down to the unigram).

    Examples
    --------
    >>> bigram = NGramModel(n_symbols=2, order=1, alpha=0.5).fit([[0, 1, 0, 1, 0, 1]])
    >>> bigram.predict_proba_next([0]).round(3).tolist()
    [0.125, 0.875]
    """

    def __init__(self, n_symbols: int, order: int = 1, alpha: float = 0.5):
        if order < 0:
            raise ValueError(f"order must be >= 0, got {order}")
        if not alpha > 0:
            raise ValueError(f"alpha must be > 0, got {alpha}")
        self.n_symbols = n_symbols
        self.order = order
        self.alpha = alpha

    def fit(self, sequences: Iterable) -> NGramModel:
        n = self.n_symbols
        self.counts_ = [np.zeros((n,) * (o + 1)) for o in range(self.order + 1)]
        for seq in sequences:
            x = np.asarray(seq, dtype=np.int64)
            for o, c in enumerate(self.counts_):
                if x.size > o:
                    idx = tuple(x[k : x.size - o + k] for k in range(o + 1))
                    np.add.at(c, idx, 1)
        return self

    def _table(self, o: int) -> np.ndarray:
        c = self.counts_[o] + self.alpha
        return c / c.sum(axis=-1, keepdims=True)

    def predict_proba_next(self, history) -> np.ndarray:
        h = list(history)[-self.order :] if self.order else []
        return self._table(len(h))[tuple(h)]

    def log_loss(self, sequences: Iterable) -> float:
        """Mean negative log-likelihood per symbol (nats)."""
        tables = [self._table(o) for o in range(self.order + 1)]
        total, count = 0.0, 0
        for seq in sequences:
            x = np.asarray(seq, dtype=np.int64)
            for t in range(min(self.order, x.size)):
                total -= np.log(tables[t][tuple(x[: t + 1])])
            o = self.order
            if x.size > o:
                idx = tuple(x[k : x.size - o + k] for k in range(o + 1))
                total -= np.log(tables[o][idx]).sum()
            count += x.size
        return float(total / count)
