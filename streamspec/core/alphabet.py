"""The symbol alphabet: a fixed range of integers, or labels that grow as they arrive."""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence

import numpy as np

__all__ = ["Alphabet", "OTHER", "MAX_LABELS"]

OTHER = "<other>"  # the label every new symbol is counted as once a capped alphabet is full
MAX_LABELS = 1 << 21  # indices must fit the 21 bits a symbol of streamspec.core.triples.pack


class Alphabet:
    """Maps symbols to indices 0..n-1.

    Parameters
    ----------
    n_symbols
        With an integer, the symbols are exactly the integers ``0 .. n_symbols-1``
        and anything else is rejected. With ``None`` the symbols are arbitrary
        hashable labels, and a label never seen before is given the next index.
    max_symbols
        Growing alphabets only: at most this many indices. New labels take indices
        ``0 .. max_symbols-2``; once those are used, every further new label is the
        reserved label :data:`OTHER`, which takes the last index the first time it is
        needed (if ``OTHER`` already has an index, the new labels fill all
        ``max_symbols`` indices first). A growing alphabet never holds more than
        :data:`MAX_LABELS` labels (a ``ValueError`` past that).

    Every method that adds labels is all-or-nothing: when it raises (a bad symbol,
    ``MemoryError``) the labels it added are removed again.

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
    >>> capped = Alphabet(max_symbols=3)
    >>> capped.encode(["a", "b", "c", "a", "d"]).tolist(), capped.labels
    ([0, 1, 2, 0, 2], ['a', 'b', '<other>'])

    """

    def __init__(self, n_symbols: int | None = None, max_symbols: int | None = None):
        if n_symbols is not None:
            if isinstance(n_symbols, bool) or not isinstance(n_symbols, int | np.integer):
                raise ValueError(f"n_symbols must be a positive integer or None, got {n_symbols!r}")
            if n_symbols < 1:
                raise ValueError(f"n_symbols must be a positive integer, got {n_symbols}")
            n_symbols = int(n_symbols)
        if max_symbols is not None:
            if n_symbols is not None:
                raise ValueError("max_symbols applies to growing alphabets only (n_symbols=None)")
            if isinstance(max_symbols, bool) or not isinstance(max_symbols, int | np.integer) or not (
                1 <= max_symbols <= MAX_LABELS
            ):
                raise ValueError(f"max_symbols must be an integer in 1..{MAX_LABELS}, got {max_symbols!r}")
            max_symbols = int(max_symbols)
        self.n_symbols = n_symbols
        self.max_symbols = max_symbols
        self._index: dict[Hashable, int] = {}
        self._labels: list[Hashable] = []

    @property
    def fixed(self) -> bool:
        return self.n_symbols is not None

    def __len__(self) -> int:
        return self.n_symbols if self.n_symbols is not None else len(self._labels)

    @property
    def labels(self) -> list:
        """The symbol of each index (a new list: O(n) time and memory)."""
        if self.n_symbols is not None:
            return list(range(self.n_symbols))
        return list(self._labels)

    def check_fixed(self, x) -> int:
        """Validate one symbol of a fixed alphabet and return its index. O(1)."""
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
        """Index of one symbol; a new label is added when ``grow`` (growing alphabets only). O(1)."""
        if self.n_symbols is not None:
            return self.check_fixed(x)
        try:
            i = self._index.get(x)
        except TypeError:
            raise ValueError(f"symbol {x!r} is not hashable") from None
        if i is None:
            if not grow:
                raise ValueError(f"unknown symbol {x!r}: not in the alphabet of {len(self)} symbols")
            cap = self.max_symbols
            if cap is not None:
                other = self._index.get(OTHER)
                if len(self._labels) >= (cap if other is not None else cap - 1):
                    return other if other is not None else self._add(OTHER)
            elif len(self._labels) >= MAX_LABELS:
                raise ValueError(
                    f"symbol {x!r}: the alphabet is full ({MAX_LABELS:,} labels); "
                    "cap it with max_symbols to count rare symbols as one"
                )
            i = self._add(x)
        return i

    def _add(self, x: Hashable) -> int:
        """Give a new label the next index (the one step that grows the alphabet)."""
        i = len(self._labels)
        self._labels.append(x)
        try:
            self._index[x] = i
        except BaseException:
            self._labels.pop()
            raise
        return i

    def truncate(self, n: int) -> None:
        """Forget the labels of index ``n`` and above (undoes growth). O(removed labels)."""
        if self.n_symbols is not None:
            return
        for label in self._labels[n:]:
            self._index.pop(label, None)
        del self._labels[n:]

    def encode(self, symbols: Sequence | np.ndarray, grow: bool = True) -> np.ndarray:
        """Indices of many symbols as an int64 array; validates all before changing anything.

        For a fixed alphabet and for arrays of numbers or strings this is vectorised
        (a sort of the m symbols, then one dictionary look-up per distinct symbol);
        only arrays of arbitrary Python objects fall back to a loop. Integers in a
        range not much wider than their number use look-up tables instead of a sort,
        O(m + range). Memory O(m). If it raises, the labels it added are removed.
        """
        n0 = len(self._labels)
        try:
            return self._encode(symbols, grow)
        except BaseException:
            self.truncate(n0)
            raise

    def _encode(self, symbols: Sequence | np.ndarray, grow: bool) -> np.ndarray:
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
        if arr.dtype.kind in "iu" and arr.size >= 64:
            lo, hi = int(arr.min()), int(arr.max())
            if hi - lo < 4 * arr.size + 65536:  # dense range of integers: tables, no sort
                return self._encode_int_range(arr, lo, hi - lo + 1)
        uniques, inverse = np.unique(arr, return_inverse=True)
        keys = uniques.tolist()
        if not grow:
            missing = [s for s in keys if s not in self._index]
            if missing:
                raise ValueError(f"unknown symbol {missing[0]!r}")
        # new labels get indices in order of first appearance, as learn_one would give them
        first = np.full(len(keys), arr.size, dtype=np.int64)
        np.minimum.at(first, inverse.ravel(), np.arange(arr.size))
        order = np.argsort(first, kind="stable")
        lookup = np.empty(len(keys), dtype=np.int64)
        lookup[order] = self._indices([keys[u] for u in order.tolist()])
        return lookup[inverse.ravel()]

    def _encode_int_range(self, arr: np.ndarray, lo: int, span: int) -> np.ndarray:
        """encode() of integers in ``lo .. lo+span-1`` by look-up tables: O(size + span)."""
        v = arr.astype(np.int64) - lo
        first = np.full(span, arr.size, dtype=np.int64)
        # fancy assignment keeps the last write of a repeated index: reversed, the first occurrence
        first[v[::-1]] = np.arange(arr.size - 1, -1, -1, dtype=np.int64)
        present = np.flatnonzero(first < arr.size)
        table = np.zeros(span, dtype=np.int64)
        ordered = present[np.argsort(first[present], kind="stable")]
        table[ordered] = self._indices((ordered + lo).tolist())
        return table[v]

    def _indices(self, keys: list) -> list[int]:
        """Indices of distinct hashable keys given in order of first appearance (adds new ones)."""
        if self.max_symbols is not None:
            return [self.index_of(k) for k in keys]
        index = self._index
        new = [k for k in keys if k not in index]
        if new:
            if len(self._labels) + len(new) > MAX_LABELS:
                raise ValueError(
                    f"symbol {new[0]!r}: the alphabet would hold more than {MAX_LABELS:,} labels; "
                    "cap it with max_symbols to count rare symbols as one"
                )
            self._add_many(new)
        return [index[k] for k in keys]

    def _add_many(self, labels: list) -> None:
        """Give new distinct labels the next indices (the bulk growth step; undone by truncate)."""
        n0 = len(self._labels)
        self._labels.extend(labels)
        self._index.update(zip(labels, range(n0, n0 + len(labels)), strict=True))

    def add_labels(self, labels: Iterable[Hashable]) -> None:
        """Add labels in order (known ones are skipped); all-or-nothing. O(k) for k labels."""
        n0 = len(self._labels)
        try:
            for label in labels:
                self.index_of(label)
        except BaseException:
            self.truncate(n0)
            raise

    def copy(self) -> Alphabet:
        """An independent copy. O(n)."""
        other = Alphabet(self.n_symbols, self.max_symbols)
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
