"""Counts over windows: the (2L+1)-grams (past L symbols, symbol x, future L symbols) of a stream.

With more hidden states than symbols a single symbol cannot tell the states apart, a
window of them can (``docs/math.md`` section 11). :class:`WindowCounts` keeps, sparse,
the weights of the distinct *grams* ``(p_1..p_L, x, f_1..f_L)`` of the counted streams,
so that memory follows the distinct combinations seen, never n^(2L+1).

**Which grams.** Every position ``c`` of a sequence with a real neighbour on each side
(``2 ≤ c ≤ T − 1``, the centres of its triples) contributes one gram: the symbols
``c − L .. c + L``, with *pads* where they fall outside the sequence (at most ``L − 1``
on a side: the neighbours are real). So ``L = 1`` is exactly the triples, and the
(2l+1)-gram counts of any ``l ≤ L`` are marginals of the L-gram counts
(:meth:`WindowCounts.marginal`): every (2l+1)-gram of a sequence is the inner part of
the one gram centred where it is. Pads appear only near the start of a sequence and,
after it ends, near its end. In ``mode="sequences"`` the accumulator counts only the
first gram ``1 .. 2L+1`` of each sequence, without pads.

**Codes.** A gram packs into one int64, ``b`` bits a symbol (21 at ``L = 1``, else
``63 // (2L + 1)``), ordered ``(x, f_1..f_L, p_1..p_L)``, most significant first: at
``L = 1`` this is :func:`streamspec.core.triples.pack` bit for bit, and sorting the
codes groups grams by x, then by (x, future), as the estimators consume them. The pad
is the all-ones digit ``2^b − 1``, so for ``L ≥ 2`` a symbol index must stay below it
(:func:`max_symbols_for`). In :meth:`WindowCounts.digits` pads read as ``-1``.
"""

from __future__ import annotations

from collections.abc import Hashable

import numpy as np

from streamspec.core.triples import BITS, MAX_SYMBOLS, Triples

__all__ = [
    "WindowCounts",
    "MAX_WINDOW",
    "AUTO_RANK",
    "PAD",
    "auto_window",
    "window_bits",
    "max_symbols_for",
    "pack_grams",
    "unpack_grams",
    "sum_duplicates",
]

MAX_WINDOW = 10  # 21-grams: 3 bits a symbol, at most 7 symbols
PAD = -1  # a pad in digit arrays (outside the sequence)
AUTO_RANK = 128  # window "auto" counts windows with room for this rank (the estimators' largest)
_AUTO_MAX = 7  # the longest automatic window (2^7 = 128: two symbols)


def auto_window(n: int) -> int:
    """The window ``"auto"`` counts for an alphabet of n symbols: the smallest L with
    ``n^L ≥`` :data:`AUTO_RANK` (128), so that L-symbol windows have room for any rank the
    estimators use; 1 from 128 symbols on (plain triples), at most 7. O(1).

    The window the estimators then fit on is chosen from the data, at most this one
    (:func:`streamspec.core.window_rank.choose_window`).

    Examples
    --------
    >>> [auto_window(n) for n in (2, 4, 8, 20, 127, 128, 40_000)]
    [7, 4, 3, 2, 2, 1, 1]
    """
    if n >= AUTO_RANK:
        return 1
    L = 1
    while L < _AUTO_MAX and max(int(n), 2) ** L < AUTO_RANK:
        L += 1
    return L


def window_bits(window: int) -> int:
    """Bits a symbol takes in a gram code of ``window`` L: 21 at L = 1, else ``63 // (2L + 1)``.

    Examples
    --------
    >>> [window_bits(L) for L in (1, 2, 3, 4, 10)]
    [21, 12, 9, 7, 3]
    """
    window = int(window)
    if not 1 <= window <= MAX_WINDOW:
        raise ValueError(f"window must be an integer in 1..{MAX_WINDOW}, got {window!r}")
    return BITS if window == 1 else 63 // (2 * window + 1)


def max_symbols_for(window: int) -> int:
    """The largest alphabet grams of ``window`` L can hold: 2²¹ at L = 1, else ``2^b − 1`` (one
    digit is the pad). O(1).

    Examples
    --------
    >>> max_symbols_for(1), max_symbols_for(2), max_symbols_for(3)
    (2097152, 4095, 511)
    """
    return MAX_SYMBOLS if window == 1 else (1 << window_bits(window)) - 1


def _order(window: int) -> list[int]:
    """Gram positions (stream order: p_1..p_L, x, f_1..f_L) from the most significant digit."""
    return [window, *range(window + 1, 2 * window + 1), *range(window)]


def pack_grams(digits: np.ndarray, window: int) -> np.ndarray:
    """One int64 code per row of ``digits`` ((k, 2L+1), stream order, pads ``-1``). O(k · L).

    Examples
    --------
    >>> from streamspec.core.triples import pack
    >>> d = np.array([[1, 2, 3]])                     # x1, x2, x3
    >>> bool(pack_grams(d, 1)[0] == pack([1], [2], [3])[0])
    True
    >>> unpack_grams(pack_grams(np.array([[-1, 0, 1, 2, -1]]), 2), 2).tolist()
    [[-1, 0, 1, 2, -1]]
    """
    digits = np.asarray(digits, dtype=np.int64)
    b = window_bits(window)
    if digits.ndim != 2 or digits.shape[1] != 2 * window + 1:
        raise ValueError(f"grams of window {window} need {2 * window + 1} digits, got shape {digits.shape}")
    pad = (1 << b) - 1
    codes = np.zeros(digits.shape[0], dtype=np.int64)
    for pos in _order(window):
        d = digits[:, pos]
        codes = (codes << b) | (np.where(d < 0, pad, d) if window > 1 else d)
    return codes


def unpack_grams(codes: np.ndarray, window: int) -> np.ndarray:
    """The digits ((k, 2L+1), stream order, pads ``-1``) of gram codes. O(k · L)."""
    codes = np.asarray(codes, dtype=np.int64)
    b = window_bits(window)
    mask = (1 << b) - 1
    out = np.empty((codes.size, 2 * window + 1), dtype=np.int64)
    for j, pos in enumerate(reversed(_order(window))):
        out[:, pos] = (codes >> (b * j)) & mask
    if window > 1:
        out[out == mask] = PAD
    return out


def sum_duplicates(codes: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted distinct codes and their summed weights (zero sums dropped). O(k log k).

    Examples
    --------
    >>> c, w = sum_duplicates(np.array([5, 3, 5]), np.array([1.0, 2.0, 0.5]))
    >>> c.tolist(), w.tolist()
    ([3, 5], [2.0, 1.5])
    """
    codes = np.asarray(codes, dtype=np.int64)
    if codes.size == 0:
        return np.empty(0, dtype=np.int64), np.empty(0)
    order = np.argsort(codes, kind="stable")
    c = codes[order]
    starts = np.flatnonzero(np.concatenate(([True], c[1:] != c[:-1])))
    w = np.add.reduceat(np.asarray(weights, dtype=np.float64)[order], starts)
    keep = w != 0
    return c[starts][keep], w[keep]


class WindowCounts:
    """Distinct grams of window L (sorted codes) and their weights, over ``n`` symbols.

    Parameters
    ----------
    n
        Alphabet size: every symbol index is in ``0..n-1``.
    window
        L: the past and the future are L symbols each.
    codes, weights
        Sorted distinct gram codes (:func:`pack_grams`) and their positive weights.

    Memory: 16 bytes a distinct gram. Every method is O(nnz · L) or O(nnz log nnz)
    for nnz distinct grams; nothing depends on n^(2L+1).

    Examples
    --------
    >>> w = WindowCounts.from_digits(3, 2, [[-1, 0, 1, 2, 0], [0, 1, 2, 0, 1]])
    >>> w.nnz, w.total, w.full().nnz
    (2, 2.0, 1)
    >>> w.marginal(1).digits().tolist()        # the triples: (0, 1, 2) and (1, 2, 0)
    [[0, 1, 2], [1, 2, 0]]
    >>> w.triples() == w.marginal(1).triples()
    True
    """

    # _ranks: the window Hankels' singular values, per marginal window, computed once for this
    # object (:func:`streamspec.core.window_rank.level_rank`). Why on the object: a fit reads its
    # counts once and passes them down, so the object is the fit's; the counts are never
    # changed in place (an accumulator's windows() even hands out read-only arrays)
    # _parts: the _ranks and _parts of the counts made from these (:meth:`derived`), by rule
    __slots__ = ("n", "window", "codes", "weights", "_ranks", "_parts")

    def __init__(self, n: int, window: int, codes: np.ndarray, weights: np.ndarray):
        self.n = int(n)
        self.window = int(window)
        if not 0 <= self.n <= max_symbols_for(self.window):
            raise ValueError(f"window {self.window} holds at most {max_symbols_for(self.window):,} "
                             f"symbols, got an alphabet of {self.n}")
        self.codes = np.asarray(codes, dtype=np.int64)
        self.weights = np.asarray(weights, dtype=np.float64)
        self._ranks: dict | None = None
        self._parts: dict | None = None
        if self.codes.shape != self.weights.shape or self.codes.ndim != 1:
            raise ValueError("codes and weights must be 1-D of one length")

    @classmethod
    def from_digits(cls, n: int, window: int, digits, weights=None) -> WindowCounts:
        """Counts from rows of digits ((k, 2L+1), stream order, pads -1; repeats summed). O(k log k)."""
        digits = np.asarray(digits, dtype=np.int64).reshape(-1, 2 * int(window) + 1)
        real = digits[digits >= 0]
        if real.size and real.max() >= n:
            raise ValueError(f"symbol index out of range 0..{n - 1}")
        if (digits < (PAD if window > 1 else 0)).any():
            raise ValueError("digits must be symbol indices, or -1 (a pad) for windows above 1")
        w = np.ones(digits.shape[0]) if weights is None else np.asarray(weights, dtype=np.float64)
        if w.shape != (digits.shape[0],) or not np.isfinite(w).all() or (w < 0).any():
            raise ValueError("weights must be finite, non-negative, one per gram")
        return cls(n, window, *sum_duplicates(pack_grams(digits, window), w))

    @classmethod
    def from_triples(cls, triples: Triples) -> WindowCounts:
        """The triples themselves as counts of window 1 (the same codes, no copy). O(1)."""
        return cls(triples.n, 1, triples.codes, triples.weights)

    @property
    def nnz(self) -> int:
        """Number of distinct grams."""
        return int(self.codes.size)

    @property
    def total(self) -> float:
        """Total weight of the grams (their number without forgetting)."""
        return float(self.weights.sum())

    def digits(self) -> np.ndarray:
        """The grams as digits (nnz, 2L+1), stream order, pads -1. O(nnz · L)."""
        return unpack_grams(self.codes, self.window)

    def middle(self) -> np.ndarray:
        """x, the middle symbol of each gram (nnz,). O(nnz)."""
        return self.codes >> (2 * self.window * window_bits(self.window))

    def marginal(self, window: int) -> WindowCounts:
        """The counts of the (2l+1)-grams, ``l = window ≤ L``: each gram's inner part, summed.

        Equal to the counts a window-l accumulator keeps of the same streams, except the
        grams centred on the last ``L − l`` positions of streams still open (they are
        counted at L once the stream goes on or ends). O(nnz · L + nnz log nnz).
        """
        window = int(window)
        if not 1 <= window <= self.window:
            raise ValueError(f"a marginal window must be in 1..{self.window}, got {window!r}")
        if window == self.window:
            return self
        d = self.digits()[:, self.window - window : self.window + window + 1]
        return self.derived(window, *sum_duplicates(pack_grams(d, window), self.weights),
                            ("marginal", window))

    def full(self) -> WindowCounts:
        """Only the grams without pads (complete windows on both sides). O(nnz · L)."""
        if self.window == 1:
            return self
        keep = (self.digits() >= 0).all(axis=1)
        return WindowCounts(self.n, self.window, self.codes[keep], self.weights[keep])

    def triples(self) -> Triples:
        """The triple counts (window 1): the codes themselves at L = 1, else :meth:`marginal` (1)."""
        one = self.marginal(1)
        return Triples(self.n, one.codes, one.weights)

    def derived(self, window: int, codes: np.ndarray, weights: np.ndarray, rule: Hashable
                ) -> WindowCounts:
        """Counts of window ``window`` made from these by ``rule`` (a marginal, a held-out part
        drawn from a generator's state): the same rule always makes the same counts. Why: their
        window spectra are kept on these counts by rule (a few singular values per window), so
        a later fit on the same counts object (another estimator on an unchanged accumulator)
        that makes them again reads them instead of recomputing them. O(1) besides the arrays.

        >>> g = WindowCounts.from_digits(2, 2, [[0, 1, 0, 1, 1], [1, 0, 1, 1, 0]], [3.0, 2.0])
        >>> a, b = g.marginal(1), g.marginal(1)
        >>> a is b, a == b, a._ranks is b._ranks is not None
        (False, True, True)
        """
        out = WindowCounts(self.n, window, codes, weights)
        if self._parts is None:
            self._parts = {}
        # why its _parts too: what is made from it (a marginal's sample) is kept here as well
        out._ranks, out._parts = self._parts.setdefault(rule, ({}, {}))
        return out

    def scaled(self, factor: float) -> WindowCounts:
        return WindowCounts(self.n, self.window, self.codes, self.weights * float(factor))

    def thin(self, fraction: float, random_state=0) -> tuple[WindowCounts, WindowCounts]:
        """Split into ``(kept, held_out)`` at random like :meth:`Triples.thin` (binomial thinning
        of integer counts, whole grams otherwise), seeded. O(nnz)."""
        kept, held = Triples(MAX_SYMBOLS, self.codes, self.weights).thin(fraction, random_state)
        return (WindowCounts(self.n, self.window, kept.codes, kept.weights),
                WindowCounts(self.n, self.window, held.codes, held.weights))

    def __add__(self, other: WindowCounts) -> WindowCounts:
        if other.window != self.window:
            raise ValueError(f"cannot add counts of windows {self.window} and {other.window}")
        codes, w = sum_duplicates(np.concatenate([self.codes, other.codes]),
                                  np.concatenate([self.weights, other.weights]))
        return WindowCounts(max(self.n, other.n), self.window, codes, w)

    def __eq__(self, other) -> bool:
        return (isinstance(other, WindowCounts) and self.n == other.n and self.window == other.window
                and np.array_equal(self.codes, other.codes)
                and np.array_equal(self.weights, other.weights))

    __hash__ = None  # mutable arrays inside

    def __repr__(self) -> str:
        return f"WindowCounts(n={self.n}, window={self.window}, nnz={self.nnz}, total={self.total:g})"
