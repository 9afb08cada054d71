"""The data an estimator fits on: an accumulator, sparse :class:`Triples`, window counts or dense counts.

One place turns any of them into what the estimators use (sparse triples or, for small
alphabets, dense counts, with the labels of a growing alphabet), and refuses empty,
NaN or misshapen counts with one message.
"""

from __future__ import annotations

import numpy as np

from streamspec.core.stream_starts import StreamStarts
from streamspec.core.triples import Triples
from streamspec.core.windows import WindowCounts

__all__ = ["EMPTY_COUNTS", "alphabet_size", "counts_of", "triples_of", "starts_of", "windows_of",
           "long_windows_of"]

EMPTY_COUNTS = ("cannot fit on an empty accumulator (empty counts): no triple counted yet "
                "(each stream needs 3 symbols)")


def _labels_of(data) -> list | None:
    return data.symbols if getattr(data, "n_symbols", None) is None else None


def alphabet_size(data) -> int:
    """n of an accumulator, of :class:`Triples` or of dense counts, without densifying. O(1).

    Examples
    --------
    >>> alphabet_size(np.zeros((4, 4, 4)))
    4
    """
    if isinstance(data, Triples | WindowCounts):
        return data.n
    if hasattr(data, "n") and hasattr(data, "symbols"):
        return int(data.n)
    c3 = np.asarray(data)
    if c3.ndim != 3 or len(set(c3.shape)) != 1:
        raise ValueError(f"counts must have shape (n, n, n), got {c3.shape}")
    return int(c3.shape[0])


def counts_of(data) -> tuple[np.ndarray, list | None]:
    """``(c3, labels)`` from a MomentAccumulator or a raw ``c3`` array (dense, O(n³) memory).

    For small alphabets only; large ones use :func:`triples_of`.

    Examples
    --------
    >>> c3 = np.zeros((2, 2, 2)); c3[0, 1, 1] = 3
    >>> counts_of(c3)[0].sum(), counts_of(c3)[1]
    (np.float64(3.0), None)
    """
    if hasattr(data, "counts") and hasattr(data, "symbols"):
        c3 = data.counts()
        labels = _labels_of(data)
    elif isinstance(data, Triples):
        c3, labels = data.to_dense(), None
    elif isinstance(data, WindowCounts):
        c3, labels = data.triples().to_dense(), None
    else:
        c3, labels = np.asarray(data, dtype=np.float64), None
    if c3.ndim != 3 or len(set(c3.shape)) != 1:
        raise ValueError(f"counts must have shape (n, n, n), got {c3.shape}")
    if not np.isfinite(c3).all():
        raise ValueError("counts hold NaN or infinite values")
    if not c3.sum() > 0:
        raise ValueError(EMPTY_COUNTS)
    return c3, labels


def triples_of(data) -> tuple[Triples, list | None]:
    """``(triples, labels)`` from a MomentAccumulator, a :class:`Triples`, window counts (their
    marginal) or dense ``c3[x2, x3, x1]``.

    An accumulator gives its sparse counts (``data.triples()`` when it has it, else
    its dense counts converted) and its labels (for growing alphabets; ``None`` for
    fixed ones). Raises ``ValueError`` on empty counts (no triple counted yet), on NaN
    or infinite counts and on a wrong shape. Time and memory O(nnz + n) from sparse
    inputs; O(n³) from dense ones.

    Examples
    --------
    >>> c3 = np.zeros((2, 2, 2)); c3[0, 1, 1] = 3
    >>> t, labels = triples_of(c3)
    >>> t.nnz, t.total, labels
    (1, 3.0, None)
    >>> triples_of(np.zeros((2, 2, 2)))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: cannot fit on an empty accumulator (empty counts): no triple counted yet ...
    """
    labels = None
    if isinstance(data, Triples):
        triples = data
    elif isinstance(data, WindowCounts):  # the triples are the marginal of the grams
        triples = data.triples()
    elif hasattr(data, "symbols") and (hasattr(data, "triples") or hasattr(data, "counts")):
        labels = _labels_of(data)
        triples = data.triples() if hasattr(data, "triples") else Triples.from_dense(data.counts())
    else:
        c3 = np.asarray(data, dtype=np.float64)
        if c3.ndim != 3 or len(set(c3.shape)) != 1:
            raise ValueError(f"counts must have shape (n, n, n), got {c3.shape}")
        triples = Triples.from_dense(c3)  # checks NaN, infinity, negative counts
    if not np.isfinite(triples.weights).all():
        raise ValueError("counts hold NaN or infinite values")
    if not triples.total > 0:
        raise ValueError(EMPTY_COUNTS)
    return triples, labels


def windows_of(data) -> tuple[WindowCounts, list | None]:
    """``(grams, labels)``: the window counts of an accumulator (``data.windows()``) or a
    :class:`~streamspec.core.windows.WindowCounts`, else the triples of :func:`triples_of` as
    counts of window 1 (the same codes). Raises like :func:`triples_of` on empty counts.
    O(nnz) from sparse inputs.

    Examples
    --------
    >>> c3 = np.zeros((2, 2, 2)); c3[0, 1, 1] = 3
    >>> g, labels = windows_of(c3)
    >>> g.window, g.total, labels
    (1, 3.0, None)
    """
    if isinstance(data, WindowCounts):
        grams, labels = data, None
    elif hasattr(data, "windows") and hasattr(data, "symbols"):
        grams, labels = data.windows(), _labels_of(data)
    else:
        triples, labels = triples_of(data)
        return WindowCounts.from_triples(triples), labels
    if not np.isfinite(grams.weights).all():
        raise ValueError("counts hold NaN or infinite values")
    if not grams.total > 0:
        raise ValueError(EMPTY_COUNTS)
    return grams, labels


def long_windows_of(data) -> WindowCounts | None:
    """The window counts of ``data`` when they are of windows of L ≥ 2 symbols (an accumulator
    with ``window`` L ≥ 2, or such :class:`~streamspec.core.windows.WindowCounts`), else
    ``None`` (triples: the estimators' predictor fits its HMM over them). O(nnz · L).

    Examples
    --------
    >>> from streamspec.streaming.accumulator import MomentAccumulator
    >>> acc = MomentAccumulator(n_symbols=2, window=2)
    >>> acc.learn_many([0, 1, 1, 0, 1])
    >>> long_windows_of(acc).window, long_windows_of(MomentAccumulator(n_symbols=2, window=1))
    (2, None)
    """
    if isinstance(data, WindowCounts):
        return data if data.window > 1 else None
    if getattr(data, "current_window", 1) > 1 and hasattr(data, "windows"):
        return data.windows()
    return None


def starts_of(data, n: int) -> StreamStarts:
    """The stream starts of ``data`` over ``n`` symbols: an accumulator's (``data.starts()``), or
    none for counts that do not keep them (:class:`Triples`, dense ``c3``). O(starts).

    Examples
    --------
    >>> starts_of(np.zeros((2, 2, 2)), 2)
    StreamStarts(n=2, streams=0, first=0, pairs=0)
    """
    starts = data.starts() if hasattr(data, "starts") and hasattr(data, "symbols") else None
    return StreamStarts.empty(n) if starts is None else starts.with_alphabet(n)
