"""The symbol alphabet: a fixed range of integers, or labels that grow as they arrive."""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence

import numpy as np

__all__ = ["Alphabet"]


class Alphabet:
    """Maps symbols to indices 0..n-1.

    Parameters
    ----------
    n_symbols
        With an integer, the symbols are exactly the integers ``0 .. n_symbols-1``
        and anything else is rejected. With ``None`` the symbols are arbitrary
        hashable labels, and a label never seen before is given the next index.

    Examples
    --------
    >>> a = Alphabet()
    >>> a.index_of("b"), a.index_of("a"), a.index_of("b")
    (0, 1, 0)
    >>> a.labels
    ['b', 'a']
    >>> Alphabet(3).index_of(5)
    Traceback (most recent call last):
    ...
    ValueError: unknown symbol 5: this alphabet is fixed to the integers 0..2

    """

    def __init__(self, n_symbols: int | None = None):
        if n_symbols is not None:
            if isinstance(n_symbols, bool) or not isinstance(n_symbols, int | np.integer):
                raise ValueError(f"n_symbols must be a positive integer or None, got {n_symbols!r}")
            if n_symbols < 1:
                raise ValueError(f"n_symbols must be a positive integer, got {n_symbols}")
            n_symbols = int(n_symbols)
        self.n_symbols = n_symbols
        self._index: dict[Hashable, int] = {}
        self._labels: list[Hashable] = []

    @property
    def fixed(self) -> bool:
        return self.n_symbols is not None

    def __len__(self) -> int:
        return self.n_symbols if self.n_symbols is not None else len(self._labels)

    @property
    def labels(self) -> list:
        """The symbol of each index."""
        if self.n_symbols is not None:
            return list(range(self.n_symbols))
        return list(self._labels)

    def check_fixed(self, x) -> int:
        """Validate one symbol of a fixed alphabet and return its index."""
        if isinstance(x, bool | np.bool_) or not isinstance(x, int | np.integer):
            raise ValueError(
                f"symbol {x!r} is not an integer: a fixed alphabet takes the integers "
                f"0..{self.n_symbols - 1} (build the accumulator without n_symbols for labels)"
            )
        if not 0 <= x < self.n_symbols:
            raise ValueError(
                f"unknown symbol {x!r}: this alphabet is fixed to the integers 0..{self.n_symbols - 1}"
            )
        return int(x)

    def index_of(self, x: Hashable, grow: bool = True) -> int:
        """Index of one symbol; a new label is added when ``grow`` (growing alphabets only)."""
        if self.n_symbols is not None:
            return self.check_fixed(x)
        i = self._index.get(x)
        if i is None:
            if not grow:
                raise ValueError(f"unknown symbol {x!r}: not in the alphabet of {len(self)} symbols")
            try:
                hash(x)
            except TypeError:
                raise ValueError(f"symbol {x!r} is not hashable") from None
            i = len(self._labels)
            self._index[x] = i
            self._labels.append(x)
        return i

    def encode(self, symbols: Sequence | np.ndarray, grow: bool = True) -> np.ndarray:
        """Indices of many symbols as an int64 array; validates all before changing anything.

        For a fixed alphabet and for arrays of numbers or strings this is vectorised;
        only arrays of arbitrary Python objects fall back to a loop.
        """
        arr = symbols if isinstance(symbols, np.ndarray) else _as_array(symbols)
        if arr.ndim != 1:
            raise ValueError(f"expected a 1-D sequence of symbols, got shape {arr.shape}")
        if arr.size == 0:
            return np.empty(0, dtype=np.int64)
        if self.n_symbols is not None:
            if arr.dtype.kind not in "iu":
                bad = next((s for s in arr.tolist() if not isinstance(s, int) or isinstance(s, bool)),
                           arr[0])
                raise ValueError(
                    f"symbol {bad!r} is not an integer: a fixed alphabet takes the integers "
                    f"0..{self.n_symbols - 1}"
                )
            # one pass: negatives wrap around to huge unsigned values
            unsigned = arr.view(np.uint64) if arr.dtype == np.int64 else arr.astype(np.uint64)
            if int(unsigned.max()) >= self.n_symbols:
                bad = arr.min() if arr.min() < 0 else arr.max()
                pos = int(np.flatnonzero(arr == bad)[0])
                raise ValueError(
                    f"unknown symbol {int(bad)} at position {pos}: this alphabet is fixed to the "
                    f"integers 0..{self.n_symbols - 1}"
                )
            return arr.astype(np.int64, copy=False)
        if arr.dtype.kind == "O":
            for s in arr:  # objects: validate hashability before adding anything
                try:
                    hash(s)
                except TypeError:
                    raise ValueError(f"symbol {s!r} is not hashable") from None
            if not grow:
                missing = [s for s in arr if s not in self._index]
                if missing:
                    raise ValueError(f"unknown symbol {missing[0]!r}")
            return np.fromiter((self.index_of(s) for s in arr), dtype=np.int64, count=arr.size)
        uniques, inverse = np.unique(arr, return_inverse=True)
        keys = uniques.tolist()
        if not grow:
            missing = [s for s in keys if s not in self._index]
            if missing:
                raise ValueError(f"unknown symbol {missing[0]!r}")
        # new labels get indices in order of first appearance, as learn_one would give them
        first = np.full(len(keys), arr.size, dtype=np.int64)
        np.minimum.at(first, inverse.ravel(), np.arange(arr.size))
        for u in np.argsort(first, kind="stable"):
            self.index_of(keys[u])
        lookup = np.fromiter((self._index[s] for s in keys), dtype=np.int64, count=len(keys))
        return lookup[inverse.ravel()]

    def add_labels(self, labels: Iterable[Hashable]) -> None:
        for label in labels:
            self.index_of(label)

    def copy(self) -> Alphabet:
        other = Alphabet(self.n_symbols)
        other._index = dict(self._index)
        other._labels = list(self._labels)
        return other


def _as_array(symbols) -> np.ndarray:
    symbols = list(symbols)
    if symbols and any(isinstance(s, bool) for s in symbols):
        return np.array(symbols, dtype=object)
    try:
        arr = np.asarray(symbols)
    except (ValueError, TypeError):
        arr = np.empty(len(symbols), dtype=object)
        arr[:] = symbols
    if arr.dtype.kind not in "iuUSfO" or (arr.ndim != 1 and len(symbols) > 0):
        obj = np.empty(len(symbols), dtype=object)
        obj[:] = symbols
        return obj
    if arr.dtype.kind == "f":
        # floats in a label alphabet would be matched by value after a silent cast
        obj = np.empty(len(symbols), dtype=object)
        obj[:] = symbols
        return obj
    return arr
