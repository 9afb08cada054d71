"""Top singular subspaces of P21 and projections of the triple counts onto them.

Pure functions on :class:`~streamspec.triples.Triples` and (sparse) matrices. Both
estimators work in the k-dimensional subspaces found here, so that nothing of
size n² or n³ is ever formed: the cost is linear in n and in the number of
distinct triples, polynomial in k.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from streamspec.triples import Triples

__all__ = ["top_singular", "project_triples", "DENSE_SVD_MAX"]

DENSE_SVD_MAX = 1000  # alphabets up to this size use a dense SVD (exact, bit-stable)
_BLOCK = 1 << 16  # pairs (x2, x3) per block of project_triples: bounds its scratch memory


def top_singular(
    P21, k: int, random_state: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(U, s, V)``: the top-k singular triplets of P21 (dense or sparse, n × n).

    U and V have shape (n, k), s is decreasing. Signs are fixed so that the entry of
    largest magnitude of each column of U is positive (V follows), for reproducible
    results. Alphabets up to :data:`DENSE_SVD_MAX` symbols use a dense SVD, O(n³);
    larger ones a truncated sparse SVD (ARPACK, seeded start vector), O(nnz · k) per
    iteration and O(n · k) memory.

    Examples
    --------
    >>> P = np.diag([3.0, 2.0, 1.0])
    >>> U, s, V = top_singular(P, 2)
    >>> s.tolist(), U[:, 0].tolist()
    ([3.0, 2.0], [1.0, 0.0, 0.0])
    """
    n = P21.shape[0]
    if not 1 <= k <= n:
        raise ValueError(f"rank {k} must be between 1 and the number of symbols ({n})")
    if n <= DENSE_SVD_MAX:
        dense = P21.toarray() if sp.issparse(P21) else np.asarray(P21, dtype=np.float64)
        U, s, Vt = np.linalg.svd(dense)
        U, s, V = U[:, :k], s[:k], Vt[:k].T
    else:
        A = sp.csr_matrix(P21, dtype=np.float64)
        v0 = np.random.default_rng(random_state).random(n)
        if k >= n:
            raise ValueError(
                f"rank {k} on {n} symbols: above {DENSE_SVD_MAX} symbols the rank must be below "
                "the alphabet size (a full-rank model takes n³ memory)"
            )
        U, s, Vt = spla.svds(A, k=k, v0=v0, tol=0)
        order = np.argsort(s)[::-1]
        U, s, V = U[:, order], s[order], Vt[order].T
    signs = np.sign(U[np.abs(U).argmax(axis=0), np.arange(k)])
    signs = np.where(signs == 0, 1.0, signs)
    return U * signs, s, V * signs


def project_triples(triples: Triples, left: np.ndarray, right: np.ndarray,
                    weights: np.ndarray | None = None) -> np.ndarray:
    """``out[x] = leftᵀ P3x1[x] right`` for every symbol x, shape (n, a, b).

    ``P3x1[x][i, j] = Pr(x3 = i, x2 = x, x1 = j)``; ``left`` is (n, a), ``right`` is
    (n, b). Computed from the distinct triples only: the (x1) side is summed per
    pair (x2, x3) with one sparse product, O(nnz · b), then each pair adds
    ``left[x3] ⊗ (pair sum)`` to its x2, O(P · a · b) for P distinct pairs, in blocks
    so that scratch memory stays O(block · a · b). Memory of the result: O(n · a · b).
    ``weights`` replaces the triples' weights (same order), e.g. residual-weighted
    counts; the result is still divided by the triples' total.

    Examples
    --------
    >>> t = Triples.from_arrays(2, x1=[0, 1], x2=[1, 1], x3=[0, 0])
    >>> project_triples(t, np.eye(2), np.eye(2))[1].tolist()   # P3x1[1]
    [[0.5, 0.5], [0.0, 0.0]]
    """
    n = triples.n
    left = np.asarray(left, dtype=np.float64)
    right = np.asarray(right, dtype=np.float64)
    a, b = left.shape[1], right.shape[1]
    out = np.zeros((n, a, b))
    if triples.nnz == 0:
        return out
    w = triples.weights if weights is None else np.asarray(weights, dtype=np.float64)
    w = w / triples.total
    x1, x2, x3 = triples.x1, triples.x2, triples.x3
    pair = triples.codes >> 21  # (x2, x3) packed; codes are sorted, so pairs are grouped
    starts = np.flatnonzero(np.concatenate(([True], pair[1:] != pair[:-1])))
    pair_id = np.cumsum(np.concatenate(([False], pair[1:] != pair[:-1])))
    n_pairs = starts.size
    A = sp.csr_matrix((w, (pair_id, x1)), shape=(n_pairs, n))
    Z = A @ right  # (P, b): sum over x1 of w · right[x1], per pair
    px2, px3 = x2[starts], x3[starts]
    for lo in range(0, n_pairs, _BLOCK):
        hi = min(n_pairs, lo + _BLOCK)
        outer = left[px3[lo:hi], :, None] * Z[lo:hi, None, :]  # (block, a, b)
        # pairs are sorted by x2: sum the runs of equal x2 at once
        seg = np.flatnonzero(np.concatenate(([True], px2[lo + 1 : hi] != px2[lo : hi - 1])))
        out[px2[lo:hi][seg]] += np.add.reduceat(outer, seg, axis=0)
    return out
