"""Next-symbol predictions per stream, from the latest model, as JSON messages.

Each record's symbol is first predicted (its prequential probability feeds the weights and
the running log loss), then the stream's next symbol is predicted:
:class:`~streamspec.streaming.online_predictor.OnlinePredictor` does both.

Examples
--------
>>> from streamspec import MomentAccumulator, SpectralEstimator
>>> acc = MomentAccumulator(window=1)
>>> acc.learn_many(list("hthhthhhth") * 30)
>>> p = StreamPredictor(SpectralEstimator(rank=2).fit(acc), version=1)
>>> out = p.observe("user-1", "h")
>>> out["top"], out["model_version"], sorted(out["next"])
('h', 1, ['h', 't'])
>>> p.observe("user-1", "never-seen")["history"]
['h', 'never-seen']
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable
from typing import Any

import numpy as np

from streamspec.core.model import ObservableOperatorModel
from streamspec.streaming.online_predictor import UNSEEN, OnlinePredictor

__all__ = ["StreamPredictor"]

_MAX_LISTED = 20  # larger alphabets: only the most probable symbols are listed


class StreamPredictor:
    """Keeps every stream's context and hidden state and predicts each stream's next symbol.

    Parameters
    ----------
    model
        The model (its ``symbols`` label the indices; without labels, indices are the
        labels).
    version
        Written into every prediction (the refit number).
    history
        Symbols listed in a prediction's ``history`` (default: the model's window, at least
        2).
    online
        The :class:`~streamspec.streaming.online_predictor.OnlinePredictor` to predict with
        (default: a new one): the daemon passes a partition's own, so that the predictions
        and the partition's prequential loss and weights are one piece of work.

    Attributes
    ----------
    online
        The :class:`~streamspec.streaming.online_predictor.OnlinePredictor`: the learned
        weights and the prequential log loss (``online.log_loss``) of the symbols seen.
    """

    def __init__(
        self, model: ObservableOperatorModel, version: int = 0, history: int | None = None,
        online: OnlinePredictor | None = None,
    ):
        self.version = version
        self._histories: dict[Hashable, deque] = {}
        self._length = history if history is not None else max(2, int(model.window))
        self.online = online if online is not None else OnlinePredictor(window=None)
        self.set_model(model, version)

    def set_model(self, model: ObservableOperatorModel, version: int) -> None:
        """Switch to a new model; streams keep their symbols, the weights what they learned."""
        self.model = model
        self.version = version
        labels = model.symbols if model.symbols is not None else list(range(model.n_symbols))
        self._labels = list(labels)
        self._index = {s: i for i, s in enumerate(self._labels)}
        if self.online.model is not model:
            self.online.set_model(model)

    def forget(self, key: Hashable) -> None:
        """The stream's sequence ended: its next symbol starts from no history."""
        self._histories.pop(key, None)
        self.online.end(key)

    def observe(self, key: Hashable, symbol: Hashable, index: int | None = None) -> dict[str, Any]:
        """Append ``symbol`` to stream ``key``; the distribution of its next symbol.

        ``index``: the symbol's index in the model, if the caller knows it (e.g. the index of
        ``"<other>"`` for a label a capped alphabet counts as it); else looked up by label.
        O(E · K + K²) to learn from the symbol, O(n · K) for the distribution (the 20 most
        probable are listed).
        """
        h = self._histories.get(key)
        if h is None:
            h = self._histories[key] = deque(maxlen=self._length)
        h.append(symbol)
        self.online.observe(key, self._index.get(symbol, UNSEEN) if index is None else index)
        p = self.online.row(key)
        order = _top(p, _MAX_LISTED)
        return {
            "key": key,
            "history": list(h),
            "next": {_jsonable(self._labels[i]): round(float(p[i]), 6) for i in order},
            "top": self._labels[int(order[0])],
            "model_version": self.version,
        }


def _top(p: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` largest entries of ``p``, largest first (ties: lower index). O(n + k log k)."""
    if p.size <= k:
        return np.argsort(-p, kind="stable")
    kth = -np.partition(-p, k - 1)[k - 1]  # the k-th largest value
    above = np.flatnonzero(p > kth)
    part = np.concatenate([above, np.flatnonzero(p == kth)[: k - above.size]])
    return part[np.lexsort((part, -p[part]))]


def _jsonable(label: Hashable) -> str | int | float | bool | None:
    return label if isinstance(label, str | int | float | bool) or label is None else str(label)
