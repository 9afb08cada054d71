"""The pair structures of sparse triple counts, computed once per fit and shared by its steps.

Every step of a fit walks the distinct triples in one of two groupings: by the pair
``(x2, x3)`` (the projections of :mod:`streamspec.core.subspace`: the sorted codes are
already grouped so) or by the pair ``(x2, x1)`` (``c21``, hence P21, and the residual
pair sums of the weightings). :class:`PairIndex` holds both groupings as index arrays,
so that each step is a view or one ``np.bincount`` instead of a sparse-matrix
construction (a sort) of its own. Indices are int32 where they fit: the index takes
about 12 bytes per distinct triple besides the counts' own 16.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from streamspec.core.triples import BITS, Triples

__all__ = ["PairIndex"]

_MASK = (1 << BITS) - 1


def _index_dtype(size: int):
    """int32 when every index below ``size`` fits, else int64."""
    return np.int32 if size < (1 << 31) - 1 else np.int64


class PairIndex:
    """Both pair groupings of the distinct triples of a :class:`Triples` (sorted by code).

    Attributes
    ----------
    n, nnz
        Alphabet size and number of distinct triples.
    x1
        The first symbol of each triple (int32).
    pair_starts
        The triples of the p-th distinct pair ``(x2, x3)`` are ``pair_starts[p]:pair_starts[p+1]``
        (the codes are sorted by ``(x2, x3, x1)``); shape (P + 1,).
    px2, px3
        The symbols of each pair (int32), shape (P,).
    middle_pairs
        The pairs of middle symbol x are ``middle_pairs[x]:middle_pairs[x+1]``, shape (n + 1,).

    The ``(x2, x1)`` grouping (:meth:`c21`) is built on first use: one stable sort of
    the nnz keys ``x2·2²¹ + x1`` (nearly sorted already: O(nnz) in practice).

    Examples
    --------
    >>> t = Triples.from_arrays(3, x1=[0, 1, 0], x2=[1, 1, 2], x3=[2, 2, 0])
    >>> idx = PairIndex(t)
    >>> idx.pair_starts.tolist(), idx.px2.tolist(), idx.px3.tolist()
    ([0, 2, 3], [1, 2], [2, 0])
    >>> idx.c21().toarray().tolist()   # c21[x2, x1]
    [[0.0, 0.0, 0.0], [1.0, 1.0, 0.0], [1.0, 0.0, 0.0]]
    """

    def __init__(self, triples: Triples):
        codes = triples.codes
        self.n, self.nnz = triples.n, int(codes.size)
        self.weights = triples.weights
        self.total = triples.total
        small = _index_dtype(self.n)
        self.x1 = (codes & _MASK).astype(small)
        pair = codes >> BITS  # (x2, x3) packed; sorted, so equal pairs are consecutive
        new = np.empty(codes.size, dtype=bool)
        new[:1] = True
        np.not_equal(pair[1:], pair[:-1], out=new[1:])
        starts = np.flatnonzero(new)
        self.pair_starts = np.append(starts, codes.size).astype(np.int64)
        self.px2 = (pair[starts] >> BITS).astype(small)
        self.px3 = (pair[starts] & _MASK).astype(small)
        self.middle_pairs = np.searchsorted(self.px2, np.arange(self.n + 1)).astype(np.int64)
        self._c21: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    @property
    def n_pairs(self) -> int:
        """Number of distinct pairs ``(x2, x3)``."""
        return int(self.px2.size)

    def middle_counts(self, weights: np.ndarray | None = None) -> np.ndarray:
        """Weight of the triples of each middle symbol, shape (n,). O(nnz)."""
        w = self.weights if weights is None else weights
        per_pair = np.add.reduceat(w, self.pair_starts[:-1]) if w.size else np.zeros(0)
        return np.bincount(self.px2, weights=per_pair, minlength=self.n)

    def pair_matrix(self, p0: int, p1: int, weights: np.ndarray | None = None) -> sp.csr_matrix:
        """Rows p0..p1-1 of the (pairs × x1) matrix of the weights, a CSR view: O(p1 - p0).

        ``pair_matrix(p0, p1) @ right`` sums ``w · right[x1]`` per pair (x2, x3).
        """
        w = self.weights if weights is None else weights
        s0, s1 = int(self.pair_starts[p0]), int(self.pair_starts[p1])
        indptr = self.pair_starts[p0 : p1 + 1] - s0
        return sp.csr_matrix((w[s0:s1], self.x1[s0:s1], indptr), shape=(p1 - p0, self.n))

    def _c21_pattern(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(indptr, indices, entry)``: the CSR pattern of the pairs (x2, x1) and the entry of
        each triple in it. One stable sort of nearly sorted keys, O(nnz log) at worst."""
        if self._c21 is None:
            x2 = np.repeat(self.px2, np.diff(self.pair_starts)).astype(np.int64)
            key = (x2 << BITS) | self.x1
            del x2
            order = np.argsort(key, kind="stable")
            key = key[order]
            new = np.empty(key.size, dtype=bool)
            new[:1] = True
            np.not_equal(key[1:], key[:-1], out=new[1:])
            entry_sorted = np.cumsum(new, dtype=np.int64) - 1
            entry = np.empty(key.size, dtype=_index_dtype(key.size))
            entry[order] = entry_sorted
            firsts = key[new]
            indices = (firsts & _MASK).astype(_index_dtype(self.n))
            indptr = np.searchsorted(firsts >> BITS, np.arange(self.n + 1)).astype(np.int64)
            self._c21 = (indptr, indices, entry)
        return self._c21

    def c21(self, weights: np.ndarray | None = None) -> sp.csr_matrix:
        """``c21[x2, x1] = Σ_{x3} w(x1, x2, x3)``, sparse (n, n) in canonical CSR form.

        ``weights`` (one per triple, in code order) replaces the counts, e.g. residual-weighted
        counts. O(nnz) once the pattern exists.
        """
        indptr, indices, entry = self._c21_pattern()
        w = self.weights if weights is None else weights
        data = np.bincount(entry, weights=w, minlength=indices.size)
        out = sp.csr_matrix((data, indices, indptr), shape=(self.n, self.n))
        out.has_sorted_indices = True
        out.has_canonical_format = True
        return out

    def nbytes(self) -> int:
        """Bytes held by the index arrays (the triples' own arrays not counted)."""
        arrays = [self.x1, self.pair_starts, self.px2, self.px3, self.middle_pairs]
        arrays += list(self._c21) if self._c21 is not None else []
        return int(sum(a.nbytes for a in arrays))
