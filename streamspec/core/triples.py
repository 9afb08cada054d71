"""Sparse triple counts: the distinct triples (x1, x2, x3) of a stream and their weights.

The counts of observation triples are the sufficient statistics of every
estimator here, and they are sparse: a stream of T symbols has at most T distinct
triples, however large the alphabet. :class:`Triples` keeps only those, as one
sorted array of packed codes and one array of weights, so its memory is 16 bytes
per distinct triple, never n³.

A code packs a triple into one int64, 21 bits a symbol, ordered ``(x2, x3, x1)``
(most significant first) like the dense layout ``c3[x2, x3, x1]``: sorting the
codes groups the triples by their middle symbol and, within it, by the pair
``(x2, x3)``, which is the order the estimators consume them in.

Dense views (:meth:`Triples.to_dense`) are available for small alphabets only: any
array above :data:`DENSE_LIMIT` cells raises :class:`DenseTooLarge`, which names
the size it would take.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

__all__ = [
    "Triples",
    "DenseTooLarge",
    "DENSE_LIMIT",
    "MAX_SYMBOLS",
    "pack",
    "unpack",
    "check_dense",
]

BITS = 21
MAX_SYMBOLS = 1 << BITS  # 2,097,152 symbols: three indices fit one int64 code
_MASK = MAX_SYMBOLS - 1
DENSE_LIMIT = 1 << 25  # cells (float64) a dense view may take: 256 MiB


class DenseTooLarge(ValueError):
    """A dense view of counts was asked for an alphabet too large to hold it."""


def check_dense(shape: tuple[int, ...], what: str, limit: int = DENSE_LIMIT) -> None:
    """Raise :class:`DenseTooLarge` if a float64 array of ``shape`` has more than ``limit`` cells.

    Examples
    --------
    >>> check_dense((10, 10, 10), "counts")
    >>> check_dense((5000,) * 3, "counts")
    Traceback (most recent call last):
    ...
    streamspec.core.triples.DenseTooLarge: dense counts of shape (5000, 5000, 5000) would take 1000.0 GB; ...
    """
    cells = 1
    for s in shape:
        cells *= int(s)
    if cells > limit:
        raise DenseTooLarge(
            f"dense {what} of shape {tuple(int(s) for s in shape)} would take "
            f"{cells * 8 / 1e9:.1f} GB; dense views are limited to {limit:,} cells "
            f"({limit * 8 / 2**20:.0f} MiB): use the sparse counts (MomentAccumulator.triples())"
        )


def pack(x1: np.ndarray, x2: np.ndarray, x3: np.ndarray) -> np.ndarray:
    """One int64 code per triple, ordered (x2, x3, x1); indices must be below :data:`MAX_SYMBOLS`.

    Examples
    --------
    >>> codes = pack(np.array([1]), np.array([2]), np.array([3]))
    >>> [a.tolist() for a in unpack(codes)]
    [[1], [2], [3]]
    """
    x1, x2, x3 = (np.asarray(a, dtype=np.int64) for a in (x1, x2, x3))
    return (x2 << (2 * BITS)) | (x3 << BITS) | x1


def unpack(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(x1, x2, x3)`` of packed codes."""
    codes = np.asarray(codes, dtype=np.int64)
    return codes & _MASK, codes >> (2 * BITS), (codes >> BITS) & _MASK


def _reduce(codes: np.ndarray, weights: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Sorted distinct codes and the summed weights of each."""
    if codes.size == 0:
        return np.empty(0, dtype=np.int64), np.empty(0)
    order = np.argsort(codes, kind="stable")
    c = codes[order]
    starts = np.flatnonzero(np.concatenate(([True], c[1:] != c[:-1])))
    if weights is None:
        w = np.diff(np.append(starts, c.size)).astype(np.float64)
    else:
        w = np.add.reduceat(np.asarray(weights, dtype=np.float64)[order], starts)
    return c[starts], w


class Triples:
    """Distinct triples and their (possibly fractional) counts, over ``n`` symbols.

    Parameters
    ----------
    n
        Alphabet size: every index is in ``0..n-1``.
    codes
        Packed codes (:func:`pack`), sorted and distinct.
    weights
        Count (or forgetting weight) of each code, positive.

    Use :meth:`from_arrays` or :meth:`from_dense` to build one from unsorted data.
    All methods cost time linear in the number of distinct triples ``nnz`` (plus n),
    and memory O(nnz + n), except the dense view.

    Examples
    --------
    >>> t = Triples.from_arrays(3, x1=[0, 0, 1], x2=[1, 1, 2], x3=[2, 2, 0])
    >>> t.nnz, t.total
    (2, 3.0)
    >>> t.P1().tolist()
    [0.6666666666666666, 0.3333333333333333, 0.0]
    >>> t.c21().toarray().tolist()   # c21[x2, x1]
    [[0.0, 0.0, 0.0], [2.0, 0.0, 0.0], [0.0, 1.0, 0.0]]
    >>> float(t.to_dense()[1, 2, 0])   # c3[x2, x3, x1]
    2.0
    """

    __slots__ = ("n", "codes", "weights", "_unpacked")

    def __init__(self, n: int, codes: np.ndarray, weights: np.ndarray):
        n = int(n)
        if not 0 <= n <= MAX_SYMBOLS:
            raise ValueError(f"an alphabet of {n} symbols: at most {MAX_SYMBOLS:,} are supported")
        self.n = n
        self.codes = np.asarray(codes, dtype=np.int64)
        self.weights = np.asarray(weights, dtype=np.float64)
        if self.codes.shape != self.weights.shape or self.codes.ndim != 1:
            raise ValueError(
                f"codes and weights must be 1-D of one length, got {self.codes.shape} and "
                f"{self.weights.shape}"
            )
        self._unpacked: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    # ------------------------------------------------------------------ construction

    @classmethod
    def from_arrays(cls, n: int, x1, x2, x3, weights=None) -> Triples:
        """Triples from index arrays (any order, repeats summed). O(m log m) for m entries."""
        x1, x2, x3 = (np.asarray(a, dtype=np.int64).ravel() for a in (x1, x2, x3))
        if not x1.size == x2.size == x3.size:
            raise ValueError("x1, x2 and x3 must have one length")
        for a in (x1, x2, x3):
            if a.size and (a.min() < 0 or a.max() >= n):
                raise ValueError(f"symbol index out of range 0..{n - 1}")
        w = None if weights is None else np.asarray(weights, dtype=np.float64).ravel()
        if w is not None:
            if w.size != x1.size:
                raise ValueError("weights must have the length of the index arrays")
            if not np.isfinite(w).all() or (w < 0).any():
                raise ValueError("weights must be finite and non-negative")
        codes, w = _reduce(pack(x1, x2, x3), w)
        keep = w > 0
        return cls(n, codes[keep], w[keep])

    @classmethod
    def from_dense(cls, c3: np.ndarray) -> Triples:
        """Triples from dense counts ``c3[x2, x3, x1]``."""
        c3 = np.asarray(c3, dtype=np.float64)
        if c3.ndim != 3 or len(set(c3.shape)) != 1:
            raise ValueError(f"counts must have shape (n, n, n), got {c3.shape}")
        if not np.isfinite(c3).all():
            raise ValueError("counts hold NaN or infinite values")
        if (c3 < 0).any():
            raise ValueError("counts must be non-negative")
        x2, x3, x1 = np.nonzero(c3)  # C order of (x2, x3, x1): already sorted by code
        return cls(c3.shape[0], pack(x1, x2, x3), c3[x2, x3, x1])

    @classmethod
    def empty(cls, n: int) -> Triples:
        return cls(n, np.empty(0, dtype=np.int64), np.empty(0))

    # ------------------------------------------------------------------ views

    @property
    def nnz(self) -> int:
        """Number of distinct triples."""
        return int(self.codes.size)

    @property
    def total(self) -> float:
        """Total weight (the number of triples, without forgetting)."""
        return float(self.weights.sum())

    def _xs(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if self._unpacked is None:
            self._unpacked = unpack(self.codes)
        return self._unpacked

    @property
    def x1(self) -> np.ndarray:
        return self._xs()[0]

    @property
    def x2(self) -> np.ndarray:
        return self._xs()[1]

    @property
    def x3(self) -> np.ndarray:
        return self._xs()[2]

    @property
    def nbytes(self) -> int:
        """Memory held by the arrays (codes and weights; unpacked indices when cached)."""
        extra = sum(a.nbytes for a in self._unpacked) if self._unpacked is not None else 0
        return int(self.codes.nbytes + self.weights.nbytes + extra)

    def c1(self) -> np.ndarray:
        """``c1[x1]``: weight of the triples by first symbol, dense (n,)."""
        return np.bincount(self.x1, weights=self.weights, minlength=self.n)

    def P1(self) -> np.ndarray:
        """``P1[j] = Pr(x1 = j)``, dense (n,)."""
        return self.c1() / self._checked_total()

    def c21(self) -> sp.csr_matrix:
        """``c21[x2, x1]``: pair counts of the first two symbols, sparse (n, n)."""
        return sp.csr_matrix((self.weights, (self.x2, self.x1)), shape=(self.n, self.n))

    def P21(self) -> sp.csr_matrix:
        """``P21[i, j] = Pr(x2 = i, x1 = j)``, sparse (n, n)."""
        return self.c21() / self._checked_total()

    def c32(self) -> sp.csr_matrix:
        """``c32[x2, x3]``: pair counts of the last two symbols (row: the earlier), sparse (n, n)."""
        return sp.csr_matrix((self.weights, (self.x2, self.x3)), shape=(self.n, self.n))

    def to_dense(self, limit: int = DENSE_LIMIT) -> np.ndarray:
        """Dense counts ``c3[x2, x3, x1]``; raises :class:`DenseTooLarge` above ``limit`` cells."""
        check_dense((self.n,) * 3, "counts", limit)
        c3 = np.zeros((self.n,) * 3)
        x1, x2, x3 = self._xs()
        c3[x2, x3, x1] = self.weights
        return c3

    def _checked_total(self) -> float:
        total = self.total
        if not total > 0:
            raise ValueError("no triples counted: cannot form probabilities from empty counts")
        return total

    # ------------------------------------------------------------------ transforms

    def middle_starts(self) -> np.ndarray:
        """``starts[x]..starts[x+1]``: the slice of the triples whose middle symbol is x, shape (n+1,)."""
        return np.searchsorted(self.x2, np.arange(self.n + 1))

    def scaled(self, factor: float) -> Triples:
        return Triples(self.n, self.codes, self.weights * float(factor))

    def remapped(self, mapping: np.ndarray, n: int) -> Triples:
        """The same triples with symbol i renamed ``mapping[i]``, over an alphabet of ``n``."""
        mapping = np.asarray(mapping, dtype=np.int64)
        x1, x2, x3 = self._xs()
        return Triples.from_arrays(n, mapping[x1], mapping[x2], mapping[x3], self.weights)

    def __add__(self, other: Triples) -> Triples:
        """The sum of two sets of counts over one alphabet (the larger of the two)."""
        n = max(self.n, other.n)
        codes, w = _reduce(
            np.concatenate([self.codes, other.codes]), np.concatenate([self.weights, other.weights])
        )
        return Triples(n, codes, w)

    def thin(self, fraction: float, random_state: int | np.random.Generator | None = 0
             ) -> tuple[Triples, Triples]:
        """Split the counts at random into ``(kept, held_out)``, ``fraction`` of them held out.

        Integer counts are split by binomial thinning (each counted triple goes to the
        held-out part independently), so both parts are counts of the same kind;
        fractional weights (forgetting) send each distinct triple whole to one side.
        Seeded: the same ``random_state`` gives the same split. O(nnz).
        """
        if not 0.0 < fraction < 1.0:
            raise ValueError(f"fraction must be in (0, 1), got {fraction!r}")
        rng = np.random.default_rng(random_state)
        w = self.weights
        if np.array_equal(w, np.round(w)):
            held = rng.binomial(w.astype(np.int64), fraction).astype(np.float64)
        else:
            held = np.where(rng.random(w.size) < fraction, w, 0.0)
        kept = w - held
        a, b = kept > 0, held > 0
        return (Triples(self.n, self.codes[a], kept[a]), Triples(self.n, self.codes[b], held[b]))

    def __eq__(self, other) -> bool:
        return (
            isinstance(other, Triples)
            and self.n == other.n
            and np.array_equal(self.codes, other.codes)
            and np.array_equal(self.weights, other.weights)
        )

    __hash__ = None  # mutable arrays inside

    def __repr__(self) -> str:
        return f"Triples(n={self.n}, nnz={self.nnz}, total={self.total:g})"
