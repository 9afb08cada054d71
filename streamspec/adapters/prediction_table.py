"""Next-symbol predictions of a windowed model, looked up by an integer context code.

:class:`PredictionTable` is what :class:`~streamspec.adapters.river_model.SpectralHMM`
predicts from: each stream keeps only the code of its last symbols, and a prediction is
a dictionary lookup in the table of the current model.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import Any

import numpy as np

__all__ = ["PredictionTable", "TablePreparer", "prepare_table", "CONTEXT_BITS", "MAX_SYMBOLS",
           "ROW_CACHE_FLOATS"]

CONTEXT_BITS = 20  # bits per symbol in a context code: alphabets up to 2**20 - 1 symbols
MAX_SYMBOLS = (1 << CONTEXT_BITS) - 1
_EAGER_MAX = 2_000_000  # probabilities precomputed per model swap at most (floats)
ROW_CACHE_FLOATS = 1 << 22  # lazily computed rows kept per prediction table (floats: 32 MiB)


class _LRU:
    """A cache of per-context entries bounded by the floats they hold (thread-safe).

    Each entry is stored with its cost in floats; once the total passes ``capacity``
    the least recently used entries are dropped. O(1) per operation.
    """

    def __init__(self, capacity: int):
        self.capacity = int(capacity)
        self.size = 0
        self._data: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable):
        with self._lock:
            item = self._data.get(key)
            if item is None:
                return None
            self._data.move_to_end(key)
            return item[0]

    def put(self, key: Hashable, value, cost: int) -> None:
        with self._lock:
            old = self._data.pop(key, None)
            if old is not None:
                self.size -= old[1]
            self._data[key] = (value, cost)
            self.size += cost
            while self.size > self.capacity and len(self._data) > 1:
                _, (_, c) = self._data.popitem(last=False)
                self.size -= c

    def __len__(self) -> int:
        return len(self._data)

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        del state["_lock"]
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()



class PredictionTable:
    """Next-symbol predictions of a windowed model, keyed by an integer context code.

    A context is the last ``window`` (or fewer) symbol indices of a stream, encoded as
    ``Σ (x + 1) << 20·age`` (the newest symbol in the low bits, 0 = no symbol), so the
    code of the last ℓ symbols is ``code & ((1 << 20ℓ) - 1)``. Predictions of all
    contexts of a length are computed at once, vectorised, when that takes at most
    ``_EAGER_MAX`` (2·10⁶) floats (:attr:`rows`; with 26 symbols and window 2, all of
    them). Longer contexts, and every context of a large alphabet, are computed on
    first use, O(window·k² + n·k) for rank k, and kept in a least-recently-used cache
    bounded by :data:`ROW_CACHE_FLOATS` (2²² floats, 32 MiB) in total: a row or a row
    of log probabilities costs n floats, a ``{label: probability}`` dict 8 per entry.
    So the table never holds n^(w+1) floats, whatever the alphabet. A context holding
    a symbol the model has not seen falls back to its longest suffix of known symbols
    (the empty context: the model's stationary prediction). When the model has a
    Kneser–Ney backoff (``model.backoff``), each prediction is given the context's last
    symbol (``predict_from_state(state, last)``).

    Parameters
    ----------
    model
        An :class:`~streamspec.ObservableOperatorModel` with symbol labels; it is
        used through its window filter with this ``window``.
    window
        Number of past symbols a prediction depends on.
    cache_floats
        Capacity of the cache of lazily computed rows (default :data:`ROW_CACHE_FLOATS`).

    Examples
    --------
    >>> from streamspec import MomentAccumulator, SpectralEstimator
    >>> acc = MomentAccumulator()
    >>> acc.learn_many("abcabcabc")
    >>> table = PredictionTable(SpectralEstimator(rank=3).fit(acc), window=2)
    >>> code = table.encode([acc.symbols.index("a"), acc.symbols.index("b")])
    >>> table.argmax_of(code)
    'c'

    """

    def __init__(self, model, window: int = 2, cache_floats: int | None = None):
        if model.filter != "window" or model.window != window:
            model = model.with_filter("window", window)
        self.model = model
        self.window = window
        self.n = model.n_symbols
        self.labels = list(model.symbols) if model.symbols is not None else list(range(self.n))
        self.backoff = getattr(model, "backoff", None) is not None
        self.rows: dict[int, np.ndarray] = {}  # the eagerly computed rows (bounded)
        self.argmax: dict[int, Hashable] = {}  # their argmax
        self.dicts: dict[int, dict] = {}  # kept empty: dicts live in the bounded cache
        self.logrows: dict[int, list[float]] = {}  # fill_logrows: eager contexts only
        self.log_floor = -math.log(max(model.min_proba, 1e-300))
        self.rank = model.rank if model.candidates else None  # the rank a selector chose
        self.candidates: list[tuple[int, PredictionTable]] = []  # filled by prepare_table
        self._mask = (1 << (CONTEXT_BITS * window)) - 1
        self._blocks: list[tuple[list[int], np.ndarray]] = []  # the eagerly computed rows
        capacity = ROW_CACHE_FLOATS if cache_floats is None else cache_floats
        self._cache = _LRU(max(int(capacity), 8 * self.n))  # room for one row at least
        self._eager()

    @property
    def cached_floats(self) -> int:
        """Floats held by the cache of lazily computed rows (at most its capacity)."""
        return self._cache.size

    def fill_logrows(self) -> None:
        """Compute :meth:`logrow` for every eagerly computed context at once."""
        for keys, P in self._blocks:
            L = -np.log(np.maximum(P, 1e-300))
            self.logrows.update(zip(keys, L.tolist(), strict=True))

    def encode(self, indices) -> int:
        """The code of a context given as symbol indices, oldest first."""
        code = 0
        for i in indices:
            code = ((code << CONTEXT_BITS) | (int(i) + 1)) & self._mask
        return code

    @staticmethod
    def decode(code: int) -> list[int]:
        """Symbol indices of a context code, oldest first."""
        out = []
        while code:
            out.append((code & MAX_SYMBOLS) - 1)
            code >>= CONTEXT_BITS
        return out[::-1]

    def _predict(self, states: np.ndarray, last: np.ndarray | None) -> np.ndarray:
        """Rows of predictions from ``states`` (c, d); ``last``: each one's last symbol (or None)."""
        m = self.model
        if not self.backoff:
            return m.predict_from_state(states)
        if last is None:
            return m.predict_from_state(states, None)
        try:
            return m.predict_from_state(states, last)
        except (TypeError, ValueError):  # a backoff taking one last symbol at a time
            return np.stack([m.predict_from_state(s, int(x)) for s, x in zip(states, last,
                                                                             strict=True)])

    def _eager(self) -> None:
        m = self.model
        n = self.n
        states = m.b1[None, :]
        codes = np.zeros(1, dtype=np.int64 if CONTEXT_BITS * self.window < 63 else object)
        size = n
        for length in range(self.window + 1):
            last = None
            if length > 0:
                if size * n * n > _EAGER_MAX:
                    break  # longer contexts: computed on first use
                states = m.extend_states(states)
                digits = np.arange(1, n + 1, dtype=codes.dtype)
                codes = ((codes[:, None] << CONTEXT_BITS) | digits[None, :]).reshape(-1)
                last = np.tile(np.arange(n), size // n)
                size *= n
            P = self._predict(states, last)
            keys = codes.tolist()
            self._blocks.append((keys, P))
            self.rows.update(zip(keys, P, strict=True))
            best = P.argmax(axis=1).tolist()
            labels = self.labels
            self.argmax.update(zip(keys, (labels[b] for b in best), strict=True))

    def _known_suffix(self, code: int) -> tuple[int, list[int]]:
        """The code of the longest suffix of known symbols, and those symbols (oldest first)."""
        digits = self.decode(code)
        known = 0
        for i in reversed(digits):
            if i >= self.n:
                break
            known += 1
        return code & ((1 << (CONTEXT_BITS * known)) - 1), digits[len(digits) - known :]

    def row_of(self, code: int) -> np.ndarray:
        """Predicted probabilities (indices of the model) after context ``code``.

        Eager rows are a lookup; others cost O(window·k² + n·k) on first use and are
        then cached (bounded, least recently used first out).
        """
        row = self.rows.get(code)
        if row is not None:
            return row
        entry = self._cache.get(("row", code))
        if entry is not None:
            return entry
        suffix, digits = self._known_suffix(code)
        row = self.rows.get(suffix)
        if row is None:
            row = self._cache.get(("row", suffix))
        if row is None:
            state = self.model.state_for(np.asarray(digits, dtype=np.int64))
            last = np.asarray(digits[-1:], dtype=np.int64) if digits else None
            row = self._predict(state[None, :], last)[0]
            self._cache.put(("row", suffix), row, self.n)
        if suffix != code:
            self._cache.put(("row", code), row, 1)  # the same array: only a reference
        return row

    def argmax_of(self, code: int) -> Hashable:
        """The most probable next label after context ``code``."""
        y = self.argmax.get(code)
        if y is None:
            y = self._cache.get(("argmax", code))
            if y is None:
                y = self.labels[int(self.row_of(code).argmax())]
                self._cache.put(("argmax", code), y, 1)
        return y

    def logrow(self, code: int):
        """``-log p`` of each symbol (model indices) after context ``code``, cached.

        A list for the eager contexts (:meth:`fill_logrows`), else an array of n floats.
        """
        lr = self.logrows.get(code)
        if lr is None:
            lr = self._cache.get(("log", code))
            if lr is None:
                lr = -np.log(np.maximum(self.row_of(code), 1e-300))
                self._cache.put(("log", code), lr, self.n)
        return lr

    def proba_of(self, code: int, labels: list, floor: float) -> dict:
        """``{label: probability}`` over ``labels`` (a superset of the model's, in order).

        Labels the model has not seen get probability ``floor`` before renormalising.
        Cached per code for one alphabet size (8 floats per entry of the cache). O(n).
        """
        d = self._cache.get(("dict", code))
        if d is not None and len(d) == len(labels):
            return d
        vals = self.row_of(code).tolist()
        extra = len(labels) - len(vals)
        if extra > 0:
            vals += [floor] * extra
            s = sum(vals)
            vals = [v / s for v in vals]
        d = dict(zip(labels, vals, strict=True))
        self._cache.put(("dict", code), d, 8 * len(d))
        return d



def prepare_table(model, window: int = 2) -> PredictionTable:
    """The :class:`PredictionTable` of a model, with one per candidate rank if it has some."""
    table = PredictionTable(model, window)
    cands = model.candidates
    if cands:
        table.candidates = [
            (r, table if m is model else PredictionTable(m, window)) for r, m in cands.items()
        ]
        for _, t in table.candidates:
            t.fill_logrows()
    return table


class TablePreparer:
    """Picklable ``prepare`` callback of the refitter: model -> prediction tables."""

    def __init__(self, window: int):
        self.window = window

    def __call__(self, model) -> PredictionTable:
        return prepare_table(model, self.window)
