"""Next-symbol predictions per stream, from the latest model, as JSON messages.

Examples
--------
>>> from streamspec import ObservableOperatorModel
>>> coin = ObservableOperatorModel([1.0], [1.0], [[[0.25]], [[0.75]]], symbols=["t", "h"])
>>> p = StreamPredictor(coin, version=1)
>>> out = p.observe("user-1", "h")
>>> out["next"], out["top"], out["model_version"]
({'h': 0.75, 't': 0.25}, 'h', 1)
>>> p.observe("user-1", "never-seen")["history"]
['h']
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable
from typing import Any

import numpy as np

from streamspec.core.model import ObservableOperatorModel

__all__ = ["StreamPredictor"]

_MAX_LISTED = 20  # larger alphabets: only the most probable symbols are listed


class StreamPredictor:
    """Keeps the last symbols of every stream and predicts each stream's next symbol.

    Parameters
    ----------
    model
        The model (its ``symbols`` label the indices; without labels, indices are
        the labels).
    version
        Written into every prediction (the refit number).
    history
        Symbols kept per stream (default: the model's window, at least 1).
    """

    def __init__(
        self, model: ObservableOperatorModel, version: int = 0, history: int | None = None
    ):
        self.version = version
        self._histories: dict[Hashable, deque] = {}
        self._length = history if history is not None else max(1, int(model.window))
        self.set_model(model, version)

    def set_model(self, model: ObservableOperatorModel, version: int) -> None:
        """Switch to a new model; stream histories are kept (they are labels)."""
        self.model = model
        self.version = version
        labels = model.symbols if model.symbols is not None else list(range(model.n_symbols))
        self._labels = list(labels)
        self._index = {s: i for i, s in enumerate(self._labels)}

    def forget(self, key: Hashable) -> None:
        """The stream's sequence ended: its next symbol starts from no history."""
        self._histories.pop(key, None)

    def observe(self, key: Hashable, symbol: Hashable) -> dict[str, Any]:
        """Append ``symbol`` to stream ``key``; the distribution of its next symbol.

        O(window · k² + n · k) for n symbols and rank k (the 20 most probable are listed).
        """
        h = self._histories.get(key)
        if h is None:
            h = self._histories[key] = deque(maxlen=self._length)
        h.append(symbol)
        idx = [self._index[s] for s in h if s in self._index]
        p = np.asarray(self.model.predict_proba_next(np.asarray(idx, dtype=np.int64)),
                       dtype=np.float64)
        order = _top(p, _MAX_LISTED)
        return {
            "key": key,
            "history": [self._labels[i] for i in idx],
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
