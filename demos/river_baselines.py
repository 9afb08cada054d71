"""Baselines a river user would try for next-symbol prediction, written with river.

Used by ``river_pipeline.py`` and ``bench_river.py`` (run them from the repository root;
this folder is on ``sys.path`` when a script in it is run).
"""

from __future__ import annotations

import collections
from collections.abc import Hashable, Iterable, Iterator

from river import base, proba, stats


class BigramFrequency(base.Classifier):
    """Next symbol of a stream from the counts of what followed its last symbol.

    ``P(y | previous symbol of the same stream)`` with additive smoothing ``alpha`` over the
    labels seen so far; the counts per previous symbol are river ``proba.Multinomial``
    distributions, shared by all streams.

    Parameters
    ----------
    key
        Feature holding the stream identifier (``None``: one stream).
    alpha
        Additive smoothing of the conditional counts.

    Examples
    --------
    >>> model = BigramFrequency()
    >>> for y in "abab":
    ...     model.learn_one({}, y)
    >>> model.predict_one({})
    'b'

    """

    def __init__(self, key: str | None = None, alpha: float = 0.1):
        self.key = key
        self.alpha = alpha
        self._last: dict[Hashable, Hashable] = {}
        self._next: dict[Hashable, proba.Multinomial] = {}
        self._prior = proba.Multinomial()

    @property
    def _multiclass(self) -> bool:
        return True

    def learn_one(self, x: dict, y: Hashable) -> None:
        k = x.get(self.key) if self.key is not None else None
        prev = self._last.get(k)
        if prev is not None:
            dist = self._next.get(prev)
            if dist is None:
                dist = self._next[prev] = proba.Multinomial()
            dist.update(y)
        self._prior.update(y)
        self._last[k] = y

    def _dist(self, x: dict) -> proba.Multinomial | None:
        k = x.get(self.key) if self.key is not None else None
        prev = self._last.get(k)
        return self._next.get(prev) if prev is not None else None

    def predict_proba_one(self, x: dict, **kwargs) -> dict[Hashable, float]:
        labels = list(self._prior.counts)
        if not labels:
            return {}
        dist = self._dist(x)
        if dist is None:
            return {y: self._prior(y) for y in labels}
        a, n = self.alpha, dist.n_samples
        total = n + a * len(labels)
        return {y: (dist.counts[y] + a) / total for y in labels}

    def predict_one(self, x: dict, **kwargs) -> Hashable | None:
        dist = self._dist(x)
        if dist is not None and dist.n_samples:
            return dist.mode
        return self._prior.mode if self._prior.n_samples else None


class MeanSized(base.Classifier):
    """The cheapest river model: one ``stats.Mean`` update per symbol (a throughput floor).

    It predicts the last label and keeps the running mean of a hash of the labels, so its
    state is as small as ``stats.Mean``'s.
    """

    def __init__(self):
        self._mean = stats.Mean()
        self._last: Hashable | None = None

    @property
    def _multiclass(self) -> bool:
        return True

    def learn_one(self, x: dict, y: Hashable) -> None:
        self._mean.update(hash(y) & 0xFF)
        self._last = y

    def predict_proba_one(self, x: dict, **kwargs) -> dict[Hashable, float]:
        return {} if self._last is None else {self._last: 1.0}

    def predict_one(self, x: dict, **kwargs) -> Hashable | None:
        return self._last


def with_last_symbols(
    data: Iterable[tuple[dict, Hashable]], key: str | None = None, n: int = 2
) -> Iterator[tuple[dict, Hashable]]:
    """Add the stream's last ``n`` symbols to ``x`` as ``prev1`` (newest) .. ``prevn``.

    Absent ones (at the start of a stream) are ``"^"``.

    They are known when ``x`` arrives (progressive validation reveals ``y`` right after
    predicting it), so a feature-based classifier such as ``naive_bayes.MultinomialNB``
    can use them.
    """
    hist: dict[Hashable, collections.deque] = {}
    for x, y in data:
        k = x.get(key) if key is not None else None
        h = hist.get(k)
        if h is None:
            h = hist[k] = collections.deque(maxlen=n)
        xx = dict(x)
        past = list(reversed(h))
        for i in range(1, n + 1):
            xx[f"prev{i}"] = str(past[i - 1]) if i <= len(past) else "^"  # "^": stream start
        yield xx, y
        h.append(y)
