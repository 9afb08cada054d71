"""What the models accept as a sequence of symbols, converted to indices in one place.

Every model method that takes a sequence (:class:`~streamspec.core.model.ObservableOperatorModel`
and :class:`~streamspec.core.hidden_markov_model.HiddenMarkovModel`) converts it here,
so that they all accept the same inputs:

* **indices** ``0..n-1``, always: a 1-D integer array, a list of ints, or hmmlearn's
  ``(T, 1)`` integer array. Integers are always read as indices, also by a model
  whose labels are integers (convert such labels with :func:`encode_labels`);
* **labels**, for a model that has them (``model.symbols``): any other values, e.g.
  ``["the", "cat"]`` or ``list("alice")`` (a ``str`` is read as its characters);
* several sequences at once, hmmlearn's way: ``X`` concatenated and ``lengths=``
  (:func:`split_lengths`).

Unknown symbols
---------------
A label the model does not know is **unknown**; it never stops a call:

1. when the model has the symbol ``"<other>"`` (a capped alphabet,
   ``max_symbols``), an unknown label is read as ``"<other>"``, which is what the
   counts did with labels past the cap;
2. otherwise it is **skipped**: the observable-operator model drops it from the
   sequence (the history goes on without it); the hidden Markov model keeps its
   position but takes no evidence from it (the hidden chain still moves one step,
   so ``decode`` gives it a state).

Either way each call says so once, with a :class:`UnknownSymbolsWarning` naming how
many were unknown and the first few (``warnings.simplefilter("error",
UnknownSymbolsWarning)`` makes them errors); inside :func:`collect_unknown` they are
tallied instead, for a caller that reports once for many calls (the CLI). An index
out of range, or labels given to a model without labels, is a programming error:
``ValueError``.

Cost: O(T) per sequence of T symbols (one dictionary lookup per label; the label
index of a model is built once, O(n), and cached).
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import sys
import warnings
from collections.abc import Hashable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from streamspec.core.alphabet import OTHER

__all__ = ["OTHER", "UnknownSymbols", "UnknownSymbolsWarning", "collect_unknown", "encode_labels",
           "split_lengths", "to_indices"]

_SHOWN = 5  # unknown labels named in a warning
_CACHED = 8  # label indices kept (models in use at once)
_HERE = os.path.dirname(os.path.abspath(__file__))


class UnknownSymbolsWarning(UserWarning):
    """Symbols a model does not know were read as ``"<other>"`` or skipped (see the module)."""


@dataclass
class UnknownSymbols:
    """A tally of unknown symbols: how many, the first few distinct ones, and what was done.

    Examples
    --------
    >>> tally = UnknownSymbols()
    >>> tally.add(["x", "y", "x"], "skipped", 26)
    >>> tally.count, tally.message()
    (3, "3 unknown symbols (not among the model's 26) skipped: 'x', 'y'")
    """

    count: int = 0
    first: list = field(default_factory=list)
    action: str = "skipped"
    n_symbols: int = 0

    def add(self, labels: Sequence, action: str, n_symbols: int) -> None:
        """Count ``labels`` (unknown to a model of ``n_symbols``), read as ``action`` says. O(len)."""
        self.count += len(labels)
        self.action, self.n_symbols = action, n_symbols
        for s in labels:
            if len(self.first) >= _SHOWN:
                break
            if s not in self.first:
                self.first.append(s)

    def message(self) -> str:
        """One sentence: how many, what was done, which (the first few). O(1)."""
        shown = ", ".join(repr(s) for s in self.first)
        more = ", ..." if self.count > len(self.first) and len(self.first) == _SHOWN else ""
        noun = "symbol" if self.count == 1 else "symbols"
        return (f"{self.count} unknown {noun} (not among the model's {self.n_symbols}) "
                f"{self.action}: {shown}{more}")


_TALLY: contextvars.ContextVar[UnknownSymbols | None] = contextvars.ContextVar(
    "streamspec_unknown_symbols", default=None)


@contextlib.contextmanager
def collect_unknown() -> Iterator[UnknownSymbols]:
    """Tally the unknown symbols of every conversion in the block instead of warning each time.

    Examples
    --------
    >>> with collect_unknown() as tally:
    ...     x = to_indices(["a", "z", "b", "z"], 2, ["a", "b"])
    >>> x.tolist(), tally.count, tally.first
    ([0, 1], 2, ['z'])
    """
    tally = UnknownSymbols()
    token = _TALLY.set(tally)
    try:
        yield tally
    finally:
        _TALLY.reset(token)


def _report(unknown: list, action: str, n: int) -> None:
    tally = _TALLY.get()
    if tally is not None:
        tally.add(unknown, action, n)
        return
    one = UnknownSymbols()
    one.add(unknown, action, n)
    warnings.warn(one.message(), UnknownSymbolsWarning, stacklevel=_caller_level())


def _caller_level() -> int:
    """The ``stacklevel`` of the first frame outside streamspec.core: the user's call."""
    frame, level = sys._getframe(2), 2  # the caller of _report, seen from warnings.warn
    while frame is not None and os.path.dirname(frame.f_code.co_filename) == _HERE:
        frame, level = frame.f_back, level + 1
    return level


_INDEXES: list[tuple[list, dict]] = []  # (labels, label -> index), most recent last


def _index_of(symbols: list) -> dict:
    """The label -> index map of ``symbols``, cached by identity (a model's list). O(n) once."""
    for labels, index in _INDEXES:
        if labels is symbols and len(index) == len(symbols):
            return index
    index = {s: i for i, s in enumerate(symbols)}
    _INDEXES.append((symbols, index))
    del _INDEXES[:-_CACHED]
    return index


def _is_int(v) -> bool:
    return isinstance(v, int | np.integer) and not isinstance(v, bool | np.bool_)


def _items(seq) -> tuple[np.ndarray | None, list | None]:
    """``(indices, None)`` for an integer sequence, else ``(None, labels)``. O(T)."""
    if isinstance(seq, np.ndarray):
        a = seq
        if a.ndim == 2 and a.shape[1] == 1:  # hmmlearn's (T, 1) layout
            a = a[:, 0]
        if a.size == 0:
            return np.empty(0, dtype=np.int64), None
        if a.ndim != 1:
            raise ValueError(f"a sequence must be 1-D (or hmmlearn's (T, 1)), got shape {seq.shape}")
        if a.dtype.kind in "iu":
            return a, None
        if a.dtype.kind in "bfc":
            raise ValueError(f"symbols must be integer indices or labels, got a {a.dtype} array")
        return None, a.tolist()
    items = list(seq)
    if items and all(isinstance(v, list | np.ndarray) and len(v) == 1 for v in items):
        items = [v[0] for v in items]  # [[0], [1], ...]: hmmlearn's layout as lists
    if all(_is_int(v) for v in items):
        return np.asarray(items, dtype=np.int64), None
    return None, items


def _check_range(a: np.ndarray, n: int, lowest: int = 0) -> np.ndarray:
    lo, hi = int(a.min()), int(a.max())
    if lo < lowest or hi >= n:
        bad = lo if lo < 0 else hi
        raise ValueError(f"unknown symbol {bad}: the model has symbols 0..{n - 1} "
                         "(integers are read as indices)")
    return a.astype(np.int64, copy=False)


def to_indices(seq, n: int, symbols: Sequence[Hashable] | None = None, *,
               unknown: str = "skip") -> np.ndarray:
    """``seq`` as int64 indices of a model of ``n`` symbols with labels ``symbols`` (or none).

    Parameters
    ----------
    seq
        Indices (integers), or labels when ``symbols`` is given; a 1-D sequence or
        hmmlearn's ``(T, 1)`` array.
    n
        The model's alphabet size.
    symbols
        The model's labels (its list, so that its index is cached), or ``None``.
    unknown
        What becomes of an unknown label when the model has no ``"<other>"``:
        ``"skip"`` drops it, ``"mark"`` keeps it as index ``-1`` (an unobserved
        position; ``-1`` is then also accepted among indices). Reported as the
        module says.

    Raises
    ------
    ValueError
        An index out of ``0..n-1``; labels for a model without labels; a sequence
        that is not 1-D.

    Examples
    --------
    >>> to_indices([2, 0], 3).tolist(), to_indices(np.array([[1], [2]]), 3).tolist()
    ([2, 0], [1, 2])
    >>> to_indices("abc", 3, ["c", "b", "a"]).tolist()
    [2, 1, 0]
    >>> with collect_unknown() as tally:
    ...     to_indices(["a", "zz"], 3, ["a", "b", "<other>"]).tolist()
    [0, 2]
    >>> tally.message()
    "1 unknown symbol (not among the model's 3) read as '<other>': 'zz'"
    >>> to_indices([5], 3)
    Traceback (most recent call last):
    ...
    ValueError: unknown symbol 5: the model has symbols 0..2 (integers are read as indices)
    """
    idx, labels = _items(seq)
    if idx is not None:  # "mark": -1 is an unobserved position, as this function gives them
        lowest = -1 if unknown == "mark" else 0
        return idx.astype(np.int64, copy=False) if idx.size == 0 else _check_range(idx, n, lowest)
    if symbols is None:
        first = next((repr(v) for v in labels if not _is_int(v)), "?")
        raise ValueError(f"this model has no symbol labels: a sequence must be integer indices "
                         f"0..{n - 1}, got {first}")
    index = _index_of(symbols if isinstance(symbols, list) else list(symbols))
    out = np.empty(len(labels), dtype=np.int64)
    missing: list = []
    for t, s in enumerate(labels):
        try:
            i = index.get(s)
        except TypeError:  # an unhashable value is no label of any model
            i = None
        if i is None:
            missing.append(s)
            i = -1
        out[t] = i
    if not missing:
        return out
    other = index.get(OTHER)
    if other is not None:
        out[out < 0] = other
        _report(missing, f"read as {OTHER!r}", n)
        return out
    if unknown == "mark":
        _report(missing, "taken as unobserved (no evidence there, the hidden chain moves on)", n)
        return out
    _report(missing, "skipped", n)
    return out[out >= 0]


def encode_labels(seq, symbols: Sequence[Hashable]) -> np.ndarray:
    """Indices of a sequence of labels, every value read as a label (also integers). O(T).

    For models whose labels are integers (``--int-symbols``), where integers given to
    a model are indices. Unknown labels raise ``ValueError`` naming the first.

    Examples
    --------
    >>> encode_labels([17, 4], [4, 17]).tolist()
    [1, 0]
    >>> encode_labels(["z"], ["x", "y"])
    Traceback (most recent call last):
    ...
    ValueError: unknown symbol 'z' (at position 0): the model knows 2 symbols
    """
    index = _index_of(symbols if isinstance(symbols, list) else list(symbols))
    items = seq.tolist() if isinstance(seq, np.ndarray) else list(seq)
    out = np.empty(len(items), dtype=np.int64)
    for t, s in enumerate(items):
        i = index.get(s)
        if i is None:
            raise ValueError(f"unknown symbol {s!r} (at position {t}): the model knows "
                             f"{len(symbols)} symbols")
        out[t] = i
    return out


def split_lengths(X, lengths: Sequence[int] | None) -> list:
    """hmmlearn's ``(X, lengths)``: the sequences of ``X`` (``lengths=None``: one). O(T).

    Examples
    --------
    >>> [x.ravel().tolist() for x in split_lengths(np.array([[0], [1], [1]]), [1, 2])]
    [[0], [1, 1]]
    >>> split_lengths(["a", "b"], None)
    [['a', 'b']]
    >>> split_lengths([0, 1], [3])
    Traceback (most recent call last):
    ...
    ValueError: lengths add up to 3, but X holds 2 symbols
    """
    if lengths is None:
        return [X]
    lens = [int(v) for v in np.asarray(lengths).ravel()]
    if any(v < 0 for v in lens):
        raise ValueError(f"lengths must be non-negative, got {lens}")
    total = len(X)
    if sum(lens) != total:
        raise ValueError(f"lengths add up to {sum(lens)}, but X holds {total} symbols")
    bounds = np.cumsum([0, *lens])
    return [X[lo:hi] for lo, hi in zip(bounds[:-1], bounds[1:], strict=True)]
