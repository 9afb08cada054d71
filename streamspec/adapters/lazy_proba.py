"""River's dict of next-symbol probabilities, its entries made only when a caller reads them all.

``SpectralHMM.predict_proba_one`` must return a ``dict`` over every label seen (river's
contract, ``check_predict_proba_one``). On a 2,000-symbol alphabet making that dict —
2,000 Python floats and 2,000 insertions — costs more than computing the mixed row itself
(docs/benchmarks.md, "River model throughput"), while most callers read one entry (a log
loss: ``p.get(y)``) or none (a comparison with the true label). :class:`LazyProba` is
that dict: it holds the normalised row and the labels, answers ``p[y]``, ``p.get(y)``,
``y in p`` and ``len(p)`` from the row in O(1), and fills its own dict storage, once, on
the first access that needs every entry (iteration, ``keys``/``values``/``items``,
comparison with another dict, ``repr``, copies, pickling, any mutation). After that it
is a plain dict. The values are the row's floats, so every read gives exactly what the
eagerly built ``dict(zip(labels, row.tolist()))`` holds.
"""

from __future__ import annotations

from collections.abc import Hashable

import numpy as np

__all__ = ["LazyProba"]


class LazyProba(dict):
    """A ``dict`` ``{label: probability}`` made from a row, filled on first bulk access.

    Parameters
    ----------
    p
        The probabilities, one per label (float64, not modified afterwards).
    labels
        The labels, in the order of ``p``; may be longer than ``p`` (labels learned
        after the row: not keys), only appended to meanwhile.
    index
        ``{label: position in labels}`` (may grow meanwhile, like ``labels``).

    Notes
    -----
    Creation O(1); ``get``/``[]``/``in``/``len`` O(1) before the fill; the fill O(n)
    once. Every Python-level access, ``dict(p)``, ``{**p}``, ``json.dumps``, ``pickle`` and
    ``copy`` go through the methods below and see every entry. C code that walks a dict
    subclass's storage itself, without its methods (``dict.keys(p)`` called unbound; C
    extensions such as orjson), sees only the first label until the fill: call
    ``dict(p)`` first, or build the model with ``lazy_proba=False``.

    Examples
    --------
    >>> p = LazyProba(np.array([0.25, 0.75]), ["a", "b", "c"], {"a": 0, "b": 1, "c": 2})
    >>> p["b"], p.get("c"), "a" in p, len(p)
    (0.75, None, True, 2)
    >>> p == {"a": 0.25, "b": 0.75}, sorted(p.items())
    (True, [('a', 0.25), ('b', 0.75)])
    """

    __slots__ = ("_p", "_labels", "_index")

    def __init__(self, p: np.ndarray, labels: list, index: dict[Hashable, int]):
        # why the first entry at once: C code that takes an empty storage for an empty dict
        # without asking its methods (json's encoder: "{}") then goes through items() and fills
        super().__init__(((labels[0], float(p[0])),) if p.size else ())
        self._p, self._labels, self._index = p, labels, index

    def _fill(self) -> LazyProba:
        """Make the dict's own entries (once; then a plain dict). O(n)."""
        p = self._p
        if p is not None:
            # labels learned after the row are after it: zip stops at the row
            dict.update(self, zip(self._labels, p.tolist(), strict=False))
            self._p = self._labels = self._index = None
        return self

    def _position(self, key: Hashable) -> int | None:
        i = self._index.get(key)  # an unhashable key raises TypeError, as dict lookups do
        return i if i is not None and i < self._p.size else None

    # ------------------------------------------------------------ O(1) reads before the fill

    def __getitem__(self, key: Hashable) -> float:
        if self._p is None:
            return dict.__getitem__(self, key)
        i = self._position(key)
        if i is None:
            raise KeyError(key)
        return float(self._p[i])

    def get(self, key: Hashable, default=None):
        if self._p is None:
            return dict.get(self, key, default)
        i = self._position(key)
        return default if i is None else float(self._p[i])

    def __contains__(self, key: object) -> bool:
        if self._p is None:
            return dict.__contains__(self, key)
        return self._position(key) is not None

    def __len__(self) -> int:
        return dict.__len__(self) if self._p is None else int(self._p.size)

    def __eq__(self, other: object):
        if not isinstance(other, dict):
            return NotImplemented  # as dict: never equal to a non-dict, and nothing to fill
        if len(other) != len(self):  # e.g. river's `y_pred != {}` in progressive_val_score
            return False
        if isinstance(other, LazyProba):
            other._fill()
        return dict.__eq__(self._fill(), other)

    def __ne__(self, other: object):
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    __hash__ = None  # type: ignore[assignment]  # unhashable, as a dict

    # ------------------------------------------------------------ everything else: filled first

    def __iter__(self):
        return dict.__iter__(self._fill())

    def __reversed__(self):
        return dict.__reversed__(self._fill())

    def keys(self):
        return dict.keys(self._fill())

    def values(self):
        return dict.values(self._fill())

    def items(self):
        return dict.items(self._fill())

    def __repr__(self) -> str:
        return dict.__repr__(self._fill())

    def copy(self) -> dict:
        return dict.copy(self._fill())

    def __copy__(self) -> dict:
        return dict.copy(self._fill())

    def __deepcopy__(self, memo: dict) -> dict:
        return dict.copy(self._fill())  # keys are labels and values floats: nothing deeper

    def __reduce__(self):
        return dict, (dict.copy(self._fill()),)  # unpickled as a plain dict

    def __reduce_ex__(self, protocol):
        return self.__reduce__()

    def __sizeof__(self) -> int:
        return dict.__sizeof__(self._fill())

    def __or__(self, other):
        return dict.__or__(self._fill(), other)

    def __ror__(self, other):
        return dict.__ror__(self._fill(), other)

    def __ior__(self, other):
        dict.__ior__(self._fill(), other)
        return self

    def __setitem__(self, key, value) -> None:
        dict.__setitem__(self._fill(), key, value)

    def __delitem__(self, key) -> None:
        dict.__delitem__(self._fill(), key)

    def pop(self, *args):
        return dict.pop(self._fill(), *args)

    def popitem(self):
        return dict.popitem(self._fill())

    def setdefault(self, key, default=None):
        return dict.setdefault(self._fill(), key, default)

    def update(self, *args, **kwargs) -> None:
        dict.update(self._fill(), *args, **kwargs)

    def clear(self) -> None:
        self._fill()
        dict.clear(self)
