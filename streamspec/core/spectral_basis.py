"""The rank and the singular bases of a fit: ``rank="auto"`` by the spectrum of P21.

Both estimators start from the top singular vectors of P21 (docs/math.md sections 2
and 7): θ_spec uses the top k, θ_M the top k' right ones as well. This module decides
k (given, or the number of singular values above the sampling noise ``N^(-1/2)``) and
k', and computes the bases once for both, reusing the vectors that ``rank="auto"``
computed on the way.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from streamspec.core.subspace import DENSE_SVD_MAX, leading_singular, top_singular

__all__ = ["check_rank", "select_rank_by_spectrum", "projected_sizes", "projected_basis",
           "MAX_AUTO_RANK"]

MAX_AUTO_RANK = 256  # rank="auto" (SpectralEstimator) looks at this many singular values at most


def check_rank(rank, n: int) -> int:
    """``rank`` as an int, after checking it is an integer in ``1..n``. O(1).

    Examples
    --------
    >>> check_rank(3, 5)
    3
    """
    if isinstance(rank, bool) or not isinstance(rank, int | np.integer):
        raise ValueError(f"rank must be a positive integer or 'auto', got {rank!r}")
    if not 1 <= rank <= n:
        raise ValueError(f"rank {rank} must be between 1 and the number of symbols ({n})")
    return int(rank)


def select_rank_by_spectrum(P21, n_triples: float, max_rank: int | None = None) -> int:
    """Number of singular values of P21 above the sampling noise level ``N^(-1/2)``.

    The Frobenius norm of the noise in P21 is about ``N^(-1/2)`` (it bounds the
    spectral norm), so smaller singular values cannot be told from noise. ``P21``
    may be dense or sparse. Up to 1,000 symbols all singular values are computed
    (dense SVD, O(n³)); above, the top 32, then twice as many while all are above the
    noise (:func:`~streamspec.core.subspace.leading_singular`: truncated sparse SVDs,
    O(nnz + n · b) per Lanczos step), so the result is at most ``max_rank`` (None: 256;
    the projected M-estimator looks at 100).

    Examples
    --------
    >>> select_rank_by_spectrum(np.diag([0.5, 0.3, 0.001]), 10_000)
    2
    """
    if P21.shape[0] > DENSE_SVD_MAX:
        P21 = sp.csr_matrix(P21)
    cap = MAX_AUTO_RANK if max_rank is None else max_rank
    return leading_singular(P21, 1.0 / np.sqrt(n_triples), cap)[0]


def _conditions(k: int, n: int, n_conditions: int | None, per_rank: int) -> int:
    kmax = n if n <= DENSE_SVD_MAX else n - 1  # a truncated SVD needs k' < n
    if k > kmax:
        raise ValueError(
            f"rank {k} on {n} symbols: above {DENSE_SVD_MAX} symbols the rank must be below "
            "the alphabet size"
        )
    return max(k, min(kmax, n_conditions if n_conditions is not None else per_rank * k))


def projected_sizes(rank: int | str, n_conditions: int | None, P21, N: float, n: int
                    ) -> tuple[int, int]:
    """The rank k and the number k' of conditions per symbol for these counts (θ_M's rule).

    ``rank="auto"``: the singular values of P21 above ``N^(-1/2)`` (above
    :data:`~streamspec.core.subspace.DENSE_SVD_MAX` symbols, among the top 100; else a
    dense SVD, O(n³)); k' = ``n_conditions`` or 2k, at most n (n - 1 above 1,000 symbols).
    """
    if isinstance(rank, str) and rank == "auto":
        k = select_rank_by_spectrum(P21, N, max_rank=100)
    else:
        k = check_rank(rank, n)
    return k, _conditions(k, n, n_conditions, 2)


def projected_basis(P21, N: float, rank: int | str, n_conditions: int | None, per_rank: int,
                    auto_cap: int, random_state: int = 0
                    ) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
    """``(k, U, s, Q)``: the rank and the top-k' singular triplets of P21 (U, Q: n × k').

    k is ``rank``, or under ``"auto"`` the number of singular values above ``N^(-1/2)``
    (at most ``auto_cap``); k' is ``n_conditions`` or ``per_rank · k`` (clamped to the
    alphabet). Under ``"auto"`` the vectors computed to count the singular values are
    reused when there are enough (words: one SVD of 32 instead of one of 100 and one of
    2k); θ_spec (``per_rank`` 1) then keeps up to 2k of them, which lets a warm refit see
    whether the rank should change. Cost: one or a few truncated SVDs
    (:func:`~streamspec.core.subspace.top_singular`).

    Examples
    --------
    >>> k, U, s, Q = projected_basis(np.diag([0.5, 0.3, 0.2, 0.001]), 100.0, "auto", None, 2, 100)
    >>> k, U.shape, s.round(3).tolist()
    (3, (4, 4), [0.5, 0.3, 0.2, 0.001])
    """
    n = P21.shape[0]
    auto = isinstance(rank, str) and rank == "auto"
    if auto:
        k, U, s, V = leading_singular(P21, 1.0 / np.sqrt(N), auto_cap, random_state=random_state)
        kp = _conditions(k, n, n_conditions, per_rank)
        if per_rank == 1 and n_conditions is None:
            kp = max(k, min(U.shape[1], 2 * k))  # what was computed anyway, for warm refits
        if U.shape[1] >= kp:
            return k, np.ascontiguousarray(U[:, :kp]), s[:kp], np.ascontiguousarray(V[:, :kp])
    else:
        k = check_rank(rank, n)
        kp = _conditions(k, n, n_conditions, per_rank)
    U, s, V = top_singular(P21, kp, random_state=random_state)
    return k, np.ascontiguousarray(U), s, np.ascontiguousarray(V)
