"""How streams begin: counts of the first symbol and of the first pair of every stream.

Triple counts say nothing about the first two symbols of a stream (they are never the
third symbol of a triple), so a predictor built from triples alone has no distribution
for an empty or one-symbol history. :class:`StreamStarts` keeps what is missing: for
every stream (every key, and every sequence after an ``end``), the count of its first
symbol ``x1`` and of its first pair ``(x1, x2)``. Both are sparse: memory follows the
distinct first symbols and pairs, never n².

Examples
--------
>>> s = StreamStarts.from_sequences(3, [[0, 1, 2], [0, 2], [1]])
>>> s.first_counts().tolist(), s.n_streams
([2.0, 1.0, 0.0], 3.0)
>>> [(int(a), int(b), float(w)) for a, b, w in zip(*s.pair_arrays())]
[(0, 1, 1.0), (0, 2, 1.0)]
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from streamspec.core.triples import BITS, MAX_SYMBOLS

__all__ = ["StreamStarts"]

_MASK = MAX_SYMBOLS - 1


def _reduce(codes: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted distinct codes with summed weights; zero weights dropped. O(m log m)."""
    codes = np.asarray(codes, dtype=np.int64)
    weights = np.asarray(weights, dtype=np.float64)
    if codes.size == 0:
        return np.empty(0, np.int64), np.empty(0)
    uniq, inv = np.unique(codes, return_inverse=True)
    w = np.bincount(inv, weights=weights, minlength=uniq.size)
    if (w < -1e-9 * max(1.0, float(np.abs(w).max()))).any():
        raise ValueError("start counts must be finite and non-negative")
    keep = w > 1e-12 * max(1.0, float(np.abs(w).max()))  # why: a count removed by concat is 0, not -1e-17
    return uniq[keep], w[keep]


class StreamStarts:
    """Sparse counts of the first symbol and the first pair of every stream.

    Parameters
    ----------
    n
        Alphabet size.
    first_codes, first_weights
        Sorted distinct first symbols and their counts (positive; fractional with
        forgetting).
    pair_codes, pair_weights
        Sorted distinct first pairs, packed ``x1 << 21 | x2``, and their counts.

    Memory O(distinct first symbols + distinct first pairs). Every method is linear in
    those (plus n where it returns a dense vector).
    """

    __slots__ = ("n", "first_codes", "first_weights", "pair_codes", "pair_weights")

    def __init__(self, n: int, first_codes=(), first_weights=(), pair_codes=(), pair_weights=()):
        self.n = int(n)
        for what, codes, w in (("first symbol", first_codes, first_weights),
                               ("first pair", pair_codes, pair_weights)):
            codes, w = np.asarray(codes, dtype=np.int64), np.asarray(w, dtype=np.float64)
            if codes.shape != w.shape or codes.ndim != 1:
                raise ValueError(f"{what} codes and weights must be 1-D arrays of one length")
            if not np.isfinite(w).all():
                raise ValueError(f"{what} counts must be finite and non-negative")
            syms = (codes,) if what == "first symbol" else (codes >> BITS, codes & _MASK)
            if codes.size and any(int(a.min()) < 0 or int(a.max()) >= self.n for a in syms):
                raise ValueError(f"a {what} is out of range for {self.n} symbols")
        self.first_codes, self.first_weights = _reduce(first_codes, first_weights)
        self.pair_codes, self.pair_weights = _reduce(pair_codes, pair_weights)

    @classmethod
    def empty(cls, n: int) -> StreamStarts:
        """No stream start counted (e.g. counts from a source that does not keep them). O(1)."""
        return cls(n)

    @classmethod
    def from_sequences(cls, n: int, sequences: Iterable) -> StreamStarts:
        """The starts of symbol-index sequences (each one stream). O(number of sequences)."""
        firsts, pairs = [], []
        for seq in sequences:
            x = np.asarray(seq, dtype=np.int64)
            if x.size:
                firsts.append(int(x[0]))
            if x.size > 1:
                pairs.append(int(x[0]) << BITS | int(x[1]))
        return cls(n, firsts, np.ones(len(firsts)), pairs, np.ones(len(pairs)))

    # ---------------------------------------------------------------- views

    @property
    def n_streams(self) -> float:
        """Total weight of the first symbols (the number of streams, without forgetting)."""
        return float(self.first_weights.sum())

    def first_counts(self) -> np.ndarray:
        """Dense (n,) counts of the first symbol. O(n)."""
        return np.bincount(self.first_codes, weights=self.first_weights, minlength=self.n)[: self.n]

    def pair_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(x1, x2, weight)`` of the distinct first pairs. O(pairs)."""
        return self.pair_codes >> BITS, self.pair_codes & _MASK, self.pair_weights

    # ---------------------------------------------------------------- arithmetic

    def __add__(self, other: StreamStarts) -> StreamStarts:
        """Both sets of counts over the larger alphabet. O(m log m)."""
        return StreamStarts(
            max(self.n, other.n),
            np.concatenate([self.first_codes, other.first_codes]),
            np.concatenate([self.first_weights, other.first_weights]),
            np.concatenate([self.pair_codes, other.pair_codes]),
            np.concatenate([self.pair_weights, other.pair_weights]),
        )

    def scaled(self, factor: float) -> StreamStarts:
        """Every count times ``factor`` (forgetting is a scalar). O(m)."""
        f = float(factor)
        return StreamStarts(self.n, self.first_codes, self.first_weights * f,
                            self.pair_codes, self.pair_weights * f)

    def remapped(self, mapping, n: int) -> StreamStarts:
        """Symbol i renamed ``mapping[i]``, over an alphabet of ``n``. O(m log m)."""
        m = np.asarray(mapping, dtype=np.int64)
        a, b, w = self.pair_arrays()
        return StreamStarts(n, m[self.first_codes], self.first_weights,
                            m[a] << BITS | m[b], w)

    def with_alphabet(self, n: int) -> StreamStarts:
        """The same counts over a grown alphabet of ``n >= self.n`` symbols. O(m)."""
        if n < self.n:
            raise ValueError(f"cannot shrink an alphabet of {self.n} symbols to {n}")
        out = StreamStarts.empty(n)
        out.first_codes, out.first_weights = self.first_codes, self.first_weights
        out.pair_codes, out.pair_weights = self.pair_codes, self.pair_weights
        return out

    # ---------------------------------------------------------------- persistence

    def to_arrays(self) -> dict[str, np.ndarray]:
        """The four arrays of a checkpoint. O(m)."""
        return {"start_first": self.first_codes, "start_first_w": self.first_weights,
                "start_pair": self.pair_codes, "start_pair_w": self.pair_weights}

    @classmethod
    def from_arrays(cls, n: int, arrays: dict) -> StreamStarts:
        """Read :meth:`to_arrays` back (validated: ``ValueError`` naming the problem); missing
        arrays (a checkpoint from before starts were counted) give no starts. O(m log m)."""
        if "start_first" not in arrays:
            return cls.empty(n)
        return cls(n, arrays["start_first"], arrays["start_first_w"],
                   arrays["start_pair"], arrays["start_pair_w"])

    def __eq__(self, other) -> bool:
        return (isinstance(other, StreamStarts) and self.n == other.n
                and all(np.array_equal(getattr(self, a), getattr(other, a)) for a in self.__slots__[1:]))

    __hash__ = None

    def __repr__(self) -> str:
        return (f"StreamStarts(n={self.n}, streams={self.n_streams:g}, "
                f"first={self.first_codes.size}, pairs={self.pair_codes.size})")
