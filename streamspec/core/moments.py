"""Observable statistics and the moment conditions of ``docs/math.md`` (sections 1 to 3), from counts.

Pure functions, arrays in and arrays out. Counts are ``c3[x2, x3, x1]`` as kept by
:class:`~streamspec.MomentAccumulator`; ``c21`` and ``c1`` are its marginals.

Moment vectors are laid out ``m[j, x, i]`` (j = x1, x = x2, i = x3): the
second-moment matrix of the moment conditions is block diagonal over j, so the
leading axis is the block.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "probabilities",
    "moment_residuals",
    "moment_variance_factors",
    "second_moment_blocks",
]


def probabilities(c3: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(P1, P21, P3x1)`` from triple counts ``c3[x2, x3, x1]``.

    Examples
    --------
    >>> c3 = np.zeros((2, 2, 2)); c3[0, 1, 1] = 3; c3[1, 0, 0] = 1
    >>> P1, P21, P3x1 = probabilities(c3)
    >>> P1.tolist(), P21.tolist()
    ([0.25, 0.75], [[0.0, 0.75], [0.25, 0.0]])
    """
    c3 = np.asarray(c3, dtype=np.float64)
    if c3.ndim != 3 or len(set(c3.shape)) != 1:
        raise ValueError(f"counts must have shape (n, n, n), got {c3.shape}")
    total = c3.sum()
    if not total > 0:
        raise ValueError("no triples counted: cannot form probabilities from empty counts")
    P3x1 = c3 / total
    P21 = P3x1.sum(axis=1)
    return P21.sum(axis=0), P21, P3x1


def moment_residuals(P3x1: np.ndarray, P21: np.ndarray, B: np.ndarray) -> np.ndarray:
    """Mean moment conditions ``m[j, x, i] = P3x1[x][i, j] - (B[x] @ P21)[i, j]``."""
    return P3x1.transpose(2, 0, 1) - np.einsum("xis,sj->jxi", B, P21, optimize=True)


def moment_variance_factors(c3: np.ndarray, smoothing: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """Diagonal cores of the second moments: ``D[j, x, i] = c3[x, i, j] (+ smoothing)``
    and their marginals ``g[j, s] = sum_i D[j, s, i]``.

    ``sum_n m mᵀ`` has block j equal to ``L diag(D[j]) Lᵀ`` with
    ``L = I - B̃ Eᵀ`` (docs/math.md section 3), so these two arrays and B are all that
    any weighting needs.
    """
    D = np.asarray(c3, dtype=np.float64).transpose(2, 0, 1) + smoothing
    return D, D.sum(axis=2)


def second_moment_blocks(c3: np.ndarray, B: np.ndarray, smoothing: float = 0.0) -> np.ndarray:
    """The n dense blocks ``L D_j Lᵀ`` (shape (n, n², n²)) of ``sum_n m(X_n) m(X_n)ᵀ``.

    Block j is indexed by ``(x, i)`` pairs flattened as ``x * n + i``. This is the
    explicit form, for tests and small n; weightings use the structured factors of
    :func:`moment_variance_factors` instead. No n³ × n³ matrix is ever built.

    Examples
    --------
    One triple (x1, x2, x3) = (0, 1, 1) and B = 0: the only non-zero entry is its own.

    >>> c3 = np.zeros((2, 2, 2)); c3[1, 1, 0] = 1
    >>> blocks = second_moment_blocks(c3, np.zeros((2, 2, 2)))
    >>> blocks.shape, float(blocks[0, 3, 3]), float(blocks.sum())
    ((2, 4, 4), 1.0, 1.0)
    """
    n = c3.shape[0]
    D, _ = moment_variance_factors(c3, smoothing)
    Bt = B.reshape(n * n, n)  # Bt[(x, i), s] = B[x][i, s]
    E = np.kron(np.eye(n), np.ones((n, 1)))
    L = np.eye(n * n) - Bt @ E.T
    return np.einsum("ab,jb,cb->jac", L, D.reshape(n, n * n), L, optimize=True)
