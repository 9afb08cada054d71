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

from streamspec.core.pair_index import PairIndex
from streamspec.core.triples import Triples

__all__ = ["top_singular", "leading_singular", "project_triples", "DENSE_SVD_MAX"]

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
    larger ones a truncated sparse SVD: PROPACK's Lanczos bidiagonalisation (seeded
    start vector; ARPACK, restarted, when it does not converge), O(nnz + n · k) per step
    and O(n · k) memory. It took half the time of
    ARPACK (``svds(tol=0)``, which works on P21ᵀP21) at n = 10⁵, k = 100 (7.9 s against
    15.4 s) and a third at n = 2·10⁴, k = 32, with singular values equal to 2·10⁻¹⁴
    (relative) and singular subspaces to a sine of 10⁻⁵ (docs/benchmarks.md, "Cold fits").

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
        if k >= n:
            raise ValueError(
                f"rank {k} on {n} symbols: above {DENSE_SVD_MAX} symbols the rank must be below "
                "the alphabet size (a full-rank model takes n³ memory)"
            )
        A = sp.csr_matrix(P21, dtype=np.float64)
        try:
            U, s, Vt = spla.svds(A, k=k, solver="propack", random_state=random_state,
                                 maxiter=min(n, max(20 * k, 200)))
        except np.linalg.LinAlgError:  # tiny gaps: Lanczos did not converge; ARPACK restarts
            v0 = np.random.default_rng(random_state).random(n)
            U, s, Vt = spla.svds(A, k=k, v0=v0, tol=0)
        order = np.argsort(s)[::-1]
        U, s, V = U[:, order], s[order], Vt[order].T
    signs = np.sign(U[np.abs(U).argmax(axis=0), np.arange(k)])
    signs = np.where(signs == 0, 1.0, signs)
    return U * signs, s, V * signs


def leading_singular(P21, threshold: float, cap: int, first: int = 32, random_state: int = 0
                     ) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
    """``(count, U, s, V)``: how many singular values of P21 exceed ``threshold`` (at most
    ``cap``), with the top singular triplets computed on the way (at least ``count + 1``
    of them when ``count < cap``).

    Above :data:`DENSE_SVD_MAX` symbols the truncated SVD asks for ``first`` triplets,
    then twice as many while all of them are above the threshold, up to ``cap``: a
    spectrum that falls below the threshold early costs one small SVD instead of ``cap``
    singular values (``rank="auto"`` on words: 32 instead of 256). The count is the
    same as from all singular values. Dense SVD (all of them) up to 1,000 symbols.

    Examples
    --------
    >>> count, U, s, V = leading_singular(np.diag([0.5, 0.3, 0.001]), 0.01, cap=3)
    >>> count, s.round(3).tolist()
    (2, [0.5, 0.3, 0.001])
    """
    n = P21.shape[0]
    top = n if n <= DENSE_SVD_MAX else n - 1
    cap = max(1, min(int(cap), top))
    b = top if n <= DENSE_SVD_MAX else min(cap, max(1, int(first)))
    while True:
        U, s, V = top_singular(P21, b, random_state=random_state)
        count = int((s > threshold).sum())
        if count < s.size or b >= cap:
            return max(1, min(count, cap)), U, s, V
        b = min(cap, 2 * b)


def project_triples(triples: Triples, left: np.ndarray, right: np.ndarray,
                    weights: np.ndarray | None = None, middle: np.ndarray | None = None,
                    out: np.ndarray | None = None, index: PairIndex | None = None,
                    total: float | None = None, out_rows: np.ndarray | None = None,
                    add: bool = False) -> np.ndarray:
    """``out[x] = leftᵀ P3x1[x] right`` for every symbol x, shape (n, a, b).

    ``P3x1[x][i, j] = Pr(x3 = i, x2 = x, x1 = j)``; ``left`` is (n, a), ``right`` is
    (n, b). Computed from the distinct triples only, in two sparse products:

    1. the (x1) side is summed per distinct pair (x2, x3):
       ``Z[p] = Σ_{x1} w(x1, p) right[x1]``, O(nnz · b);
    2. each pair p adds ``left[x3_p] ⊗ Z[p]`` to ``out[x2_p]``, O(P · a · b) for P
       distinct pairs: for a symbol with many pairs, one BLAS product
       ``left[x3 of its pairs]ᵀ Z[its pairs]``; the others the same products, stacked by
       their number of pairs (padded to a power of two), in blocks of symbols so that the
       scratch stays under ~2²² floats.

    Time O(nnz · b + P · a · b), memory O(n · a · b) for the result plus ~2²² floats (or
    one symbol's pairs × b) of scratch; nothing of size n² is formed. Exact (the same sums
    as the dense ``einsum``, in another order). ``weights`` replaces the triples'
    weights (same order, any sign: e.g. residual-weighted counts or a change of counts);
    the result is still divided by the triples' total. ``middle`` (sorted symbol indices)
    restricts the result to those middle symbols: shape (len(middle), a, b), in that
    order, and the cost to their triples. ``out`` (n, a, b), with ``middle``: the rows
    ``middle`` of ``out`` are written instead (the others untouched) and ``out`` is
    returned, which spares a copy of the result. ``index``: the triples'
    :class:`~streamspec.core.pair_index.PairIndex`, when the caller has it (else built, O(nnz)).
    ``total``: what the sums are divided by instead of the triples' total (1: unnormalised
    sums, as a warm refit adds them to earlier ones). ``out_rows``: the rows of ``out`` the
    symbols of ``middle`` go to (default: ``middle`` itself; ``out`` may then have any
    number of rows), and ``add``: add to those rows instead of overwriting them (a warm
    refit adds the projection of the change of the counts to the previous moments).

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
    idx = index if index is not None else PairIndex(triples)
    w = idx.weights if weights is None else np.asarray(weights, dtype=np.float64)
    divisor = triples.total if total is None else float(total)
    if triples.nnz and divisor != 1.0:
        w = w / divisor
    symbols = np.arange(triples.n) if middle is None else np.asarray(middle, dtype=np.int64)
    out, rows_of = _destination(out, middle, (triples.n, a, b), symbols.size, out_rows, add)
    if triples.nnz == 0:
        if not add:
            out[slice(None) if rows_of is None else rows_of] = 0.0
        return out
    # why runs: Z (the x1 side summed per pair, P × b floats) is formed for a run of
    # consecutive symbols of ``symbols`` at a time, ≤ ~2²² floats (or one symbol's pairs),
    # and so is the block of ``out`` the run's light symbols fill
    sizes = idx.middle_pairs[symbols + 1] - idx.middle_pairs[symbols]
    if not add:  # why only these: every other row is written whole below (no second pass)
        empty = np.flatnonzero(sizes == 0)
        out[empty if rows_of is None else rows_of[empty]] = 0.0
    bounds = np.concatenate(([0], np.cumsum(sizes)))
    cap_pairs = max(1, _BLOCK_ENTRIES // max(b, 1))
    max_syms = max(1, _BLOCK_ENTRIES // max(a * b, a * _GEMM_MIN_PAIRS, 1))
    x = 0
    while x < symbols.size:
        y = int(np.searchsorted(bounds, bounds[x] + cap_pairs, side="right")) - 1
        y = min(max(y, x + 1), x + max_syms, symbols.size)
        if bounds[y] > bounds[x]:
            _project_run(idx, w, symbols[x:y], sizes[x:y], left, right, out,
                         np.arange(x, y) if rows_of is None else rows_of[x:y], add)
        x = y
    return out


def _destination(out: np.ndarray | None, middle: np.ndarray | None, shape: tuple, n: int,
                 out_rows: np.ndarray | None = None, add: bool = False
                 ) -> tuple[np.ndarray, np.ndarray | None]:
    """``(out, rows_of)``: the array written and the map from local row to row of ``out``
    (None: the same; a new, uninitialised array of n rows when ``out`` is None: every row is
    written, the rows of symbols without triples with zeros)."""
    if out is None:
        return np.empty((n,) + shape[1:]), None
    if middle is None or out.shape[1:] != shape[1:] or (out_rows is None and out.shape != shape):
        raise ValueError(f"out must come with middle and have shape {shape}")
    rows_of = np.asarray(middle if out_rows is None else out_rows, dtype=np.int64)
    if rows_of.size != n:
        raise ValueError(f"out_rows must give one row per symbol of middle ({n}), got {rows_of.size}")
    return out, rows_of


def _run_pairs(idx: PairIndex, syms: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """The pair indices of the symbols ``syms`` (in order), concatenated. O(their pairs)."""
    first = idx.middle_pairs[syms]
    if syms.size == 1 or np.array_equal(np.diff(syms), np.ones(syms.size - 1, dtype=syms.dtype)):
        return np.arange(first[0], first[0] + sizes.sum())  # consecutive symbols: one range
    offsets = np.repeat(first - np.concatenate(([0], np.cumsum(sizes)[:-1])), sizes)
    return offsets + np.arange(int(sizes.sum()))


def _pair_sums(idx: PairIndex, w: np.ndarray, pairs: np.ndarray, right: np.ndarray) -> np.ndarray:
    """``Z[i] = Σ_{x1} w(x1, pairs[i]) right[x1]``, (len(pairs), b). O(their triples · b)."""
    p0, p1 = int(pairs[0]), int(pairs[-1]) + 1
    if p1 - p0 == pairs.size:  # a range of pairs: a view of the index
        return idx.pair_matrix(p0, p1, w) @ right
    starts, ends = idx.pair_starts[pairs], idx.pair_starts[pairs + 1]
    lens = ends - starts
    take = np.repeat(starts - np.concatenate(([0], np.cumsum(lens)[:-1])), lens)
    take += np.arange(int(lens.sum()))
    indptr = np.concatenate(([0], np.cumsum(lens)))
    A = sp.csr_matrix((w[take], idx.x1[take], indptr), shape=(pairs.size, idx.n))
    return A @ right


def _project_run(idx: PairIndex, w: np.ndarray, syms: np.ndarray, sizes: np.ndarray,
                 left: np.ndarray, right: np.ndarray, out: np.ndarray, dest: np.ndarray,
                 add: bool = False) -> None:
    """Step 2 of :func:`project_triples` for the symbols ``syms``: write their rows ``dest`` of
    ``out``. O(pairs of the run · (b + a · b)), scratch ≤ ~2²² floats."""
    pairs = _run_pairs(idx, syms, sizes)
    Z = _pair_sums(idx, w, pairs, right)  # (pairs of the run, b)
    px3 = idx.px3[pairs]
    bounds = np.concatenate(([0], np.cumsum(sizes)))
    # symbols with many pairs: one BLAS product each, out[s] = left[x3 of its pairs]ᵀ Z
    heavy = sizes >= _GEMM_MIN_PAIRS
    for r in np.flatnonzero(heavy).tolist():
        lo, hi = int(bounds[r]), int(bounds[r + 1])
        if add:
            out[int(dest[r])] += left[px3[lo:hi]].T @ Z[lo:hi]
        else:
            np.matmul(left[px3[lo:hi]].T, Z[lo:hi], out=out[int(dest[r])])
    # the others: out[s] = Lᵀ Z over its few pairs too, batched: symbols grouped by their
    # number of pairs rounded up to a power of two, padded with zero rows, one stacked
    # product per group (scipy's sparse-times-dense product was 5-10x slower here)
    light = np.flatnonzero(~heavy & (sizes > 0))
    if light.size:
        size_class = 1 << np.ceil(np.log2(sizes[light])).astype(np.int64)
        for m in np.unique(size_class).tolist():
            g = light[size_class == m]
            offsets = np.arange(m)
            at = bounds[g][:, None] + offsets
            valid = offsets < sizes[g][:, None]
            at = np.where(valid, at, bounds[g][:, None])  # padding: any pair of the symbol ...
            L = left[px3[at]]
            L[~valid] = 0.0  # ... with a zero left factor
            part = L.transpose(0, 2, 1) @ Z[at]
            if add:
                out[dest[g]] += part  # dest has no repeats: one row per symbol
            else:
                out[dest[g]] = part


def _project_reference(triples: Triples, left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """The dense definition of :func:`project_triples` (tests only; O(n³) memory)."""
    c3 = triples.to_dense() / triples.total
    return np.einsum("ia,xij,jb->xab", left, c3.transpose(0, 1, 2), right, optimize=True)
