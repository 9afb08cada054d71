"""Top singular subspaces of P21 and projections of the triple counts onto them.

Pure functions on :class:`~streamspec.core.triples.Triples` and (sparse) matrices. Both
estimators work in the k-dimensional subspaces found here, so that nothing of
size n² or n³ is ever formed: the cost is linear in n and in the number of
distinct triples, polynomial in k.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from streamspec.core.triples import Triples

__all__ = ["top_singular", "project_triples", "DENSE_SVD_MAX"]

DENSE_SVD_MAX = 1000  # alphabets up to this size use a dense SVD (exact, bit-stable)
_BLOCK_ENTRIES = 1 << 22  # floats of scratch per block of project_triples
_GEMM_MIN_PAIRS = 32  # symbols with at least this many pairs (x2, x3) use one BLAS product each


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
                    weights: np.ndarray | None = None, middle: np.ndarray | None = None,
                    out: np.ndarray | None = None) -> np.ndarray:
    """``out[x] = leftᵀ P3x1[x] right`` for every symbol x, shape (n, a, b).

    ``P3x1[x][i, j] = Pr(x3 = i, x2 = x, x1 = j)``; ``left`` is (n, a), ``right`` is
    (n, b). Computed from the distinct triples only, in two sparse products:

    1. the (x1) side is summed per distinct pair (x2, x3):
       ``Z[p] = Σ_{x1} w(x1, p) right[x1]``, O(nnz · b);
    2. each pair p adds ``left[x3_p] ⊗ Z[p]`` to ``out[x2_p]``, O(P · a · b) for P
       distinct pairs: for a symbol with many pairs, one BLAS product
       ``left[x3 of its pairs]ᵀ Z[its pairs]``; for the others, a sparse matrix with
       rows ``(x2, i)`` and one entry ``left[x3_p, i]`` per pair and row, times Z, in
       blocks of symbols so that the scratch stays under ~2²² floats.

    Time O(nnz · b + P · a · b), memory O(n · a · b) for the result plus O(nnz) and
    ~2²² floats (or one symbol's pairs × b) of scratch; nothing of size n² is formed. Exact (the same sums
    as the dense ``einsum``, in another order). ``weights`` replaces the triples'
    weights (same order), e.g. residual-weighted counts; the result is still
    divided by the triples' total. ``middle`` (sorted symbol indices) restricts the
    result to those middle symbols: shape (len(middle), a, b), in that order, and the
    cost to their triples. ``out`` (n, a, b), with ``middle``: the rows ``middle`` of
    ``out`` are written instead (the others untouched) and ``out`` is returned, which
    spares a copy of the result.

    Examples
    --------
    >>> t = Triples.from_arrays(2, x1=[0, 1], x2=[1, 1], x3=[0, 0])
    >>> project_triples(t, np.eye(2), np.eye(2))[1].tolist()   # P3x1[1]
    [[0.5, 0.5], [0.0, 0.0]]
    >>> project_triples(t, np.eye(2), np.eye(2), middle=np.array([1])).shape
    (1, 2, 2)
    """
    left = np.asarray(left, dtype=np.float64)
    right = np.asarray(right, dtype=np.float64)
    a, b = left.shape[1], right.shape[1]
    x1, x2, x3, w, n = _of_middle(triples, weights, middle)
    out, rows_of = _destination(out, middle, (triples.n, a, b), n)
    if x1.size == 0:
        return out
    A, px2, px3, bounds = _pairs(x1, x2, x3, w, n, triples.n)
    # why runs: Z (the x1 side summed per pair, P × b floats) is formed for a run of
    # consecutive symbols at a time, ≤ ~2²² floats (or one symbol's pairs), and so is the
    # block of ``out`` the run's light symbols fill
    cap_pairs = max(1, _BLOCK_ENTRIES // max(b, 1))
    max_syms = max(1, _BLOCK_ENTRIES // max(a * b, a * _GEMM_MIN_PAIRS, 1))
    x = 0
    while x < n:
        y = int(np.searchsorted(bounds, bounds[x] + cap_pairs, side="right")) - 1
        y = min(max(y, x + 1), x + max_syms, n)
        if bounds[y] > bounds[x]:
            _project_run(x, y, A, bounds, px2, px3, left, right, out, rows_of)
        x = y
    return out


def _of_middle(triples: Triples, weights: np.ndarray | None, middle: np.ndarray | None):
    """``(x1, x2, x3, w, n)``: the triples (weights divided by the total) whose middle symbol is
    in ``middle``, x2 renumbered to its rank in ``middle``, and the number of rows. O(nnz)."""
    w = triples.weights if weights is None else np.asarray(weights, dtype=np.float64)
    w = w / triples.total if triples.nnz else w
    x1, x2, x3 = triples.x1, triples.x2, triples.x3
    if middle is None:
        return x1, x2, x3, w, triples.n
    middle = np.asarray(middle, dtype=np.int64)
    keep = np.isin(x2, middle)
    # local row of each kept triple; the map is increasing, so the order stays sorted
    return x1[keep], np.searchsorted(middle, x2[keep]), x3[keep], w[keep], middle.size


def _destination(out: np.ndarray | None, middle: np.ndarray | None, shape: tuple, n: int
                 ) -> tuple[np.ndarray, np.ndarray | None]:
    """``(out, rows_of)``: the array written, its ``middle`` rows zeroed, and the map from local
    row to row of ``out`` (None: the same; a new (n, a, b) array when ``out`` is None)."""
    if out is None:
        return np.zeros((n,) + shape[1:]), None
    if middle is None or out.shape != shape:
        raise ValueError(f"out must come with middle and have shape {shape}")
    rows_of = np.asarray(middle, dtype=np.int64)
    out[rows_of] = 0.0
    return out, rows_of


def _pairs(x1, x2, x3, w, n: int, n_cols: int):
    """``(A, px2, px3, bounds)``: step 1's sparse matrix, one row per distinct pair (x2, x3) and
    one column per x1 (``Z = A @ right`` sums the x1 side), each pair's symbols, and the
    pairs of local symbol x at ``bounds[x]:bounds[x+1]``. O(nnz)."""
    pair = (x2 << 21) | x3  # (x2, x3) packed; triples are sorted, so pairs are grouped
    new_pair = np.concatenate(([True], pair[1:] != pair[:-1]))
    starts = np.flatnonzero(new_pair)
    pair_id = np.cumsum(new_pair) - 1
    A = sp.csr_matrix((w, (pair_id, x1)), shape=(starts.size, n_cols))
    px2, px3 = x2[starts], x3[starts]
    return A, px2, px3, np.searchsorted(px2, np.arange(n + 1))


def _project_run(x: int, y: int, A, bounds: np.ndarray, px2: np.ndarray, px3: np.ndarray,
                 left: np.ndarray, right: np.ndarray, out: np.ndarray,
                 rows_of: np.ndarray | None) -> None:
    """Step 2 of :func:`project_triples` for the symbols x..y-1 (local rows): write their rows
    of ``out``. O(pairs of the run · (b + a · b)), scratch ≤ ~2²² floats."""
    a = left.shape[1]
    b = right.shape[1]
    p0, p1 = int(bounds[x]), int(bounds[y])
    sizes = np.diff(bounds[x : y + 1])
    Z = A[p0:p1] @ right  # (pairs of the run, b)
    # symbols with many pairs: one BLAS product each, out[s] = left[x3 of its pairs]ᵀ Z
    for sym in (x + np.flatnonzero(sizes >= _GEMM_MIN_PAIRS)).tolist():
        lo, hi = int(bounds[sym]) - p0, int(bounds[sym + 1]) - p0
        dest = sym if rows_of is None else int(rows_of[sym])
        np.matmul(left[px3[p0 + lo : p0 + hi]].T, Z[lo:hi], out=out[dest])
    # the others: each pair p adds left[x3_p] ⊗ Z[p] to out[x2_p], as one sparse
    # product (a column per pair, its a entries in the rows (local x2, i): CSC, no sort)
    lp = np.flatnonzero(np.repeat(sizes < _GEMM_MIN_PAIRS, sizes))
    if lp.size:
        syms = np.unique(px2[p0 + lp])
        local = np.searchsorted(syms, px2[p0 + lp])
        rows = (local[:, None] * a + np.arange(a)).ravel()
        indptr = np.arange(0, lp.size * a + 1, a)
        S = sp.csc_matrix((left[px3[p0 + lp]].ravel(), rows, indptr),
                          shape=(syms.size * a, lp.size))
        out[syms if rows_of is None else rows_of[syms]] = (S @ Z[lp]).reshape(syms.size, a, b)


def _project_reference(triples: Triples, left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """The dense definition of :func:`project_triples` (tests only; O(n³) memory)."""
    c3 = triples.to_dense() / triples.total
    return np.einsum("ia,xij,jb->xab", left, c3.transpose(0, 1, 2), right, optimize=True)
