"""Warm-started singular subspaces: block subspace iteration from a previous basis.

A refit on slightly changed counts needs the top singular subspaces of a slightly
changed P21. :func:`refine_subspace` starts a block subspace iteration (two-sided, with
a Rayleigh–Ritz step each round) from the previous bases instead of a random start,
and stops when the principal angles between the subspaces of two successive rounds
are below a tolerance (:func:`principal_sines`); :func:`basis_residuals` measures how
far a basis is from being a singular basis of new counts at all, which decides whether
it can be kept (docs/math.md section 9). Pure functions on (sparse) matrices and arrays.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.linalg as sla

__all__ = ["orthonormal", "principal_sines", "spectral_norm", "refine_subspace", "Refined"]


def orthonormal(Y: np.ndarray) -> np.ndarray:
    """An orthonormal basis of the columns of Y (n × b, full column rank), O(n · b²).

    Cholesky QR twice (each a Gram matrix and a product with the inverse of its b × b
    Cholesky factor: BLAS 3, several times faster than Householder QR on tall matrices;
    the second pass restores orthogonality to rounding), falling back to Householder QR
    when the Gram matrix is too ill-conditioned for Cholesky.

    Examples
    --------
    >>> Q = orthonormal(np.array([[1.0, 1.0], [0.0, 1.0], [0.0, 0.0]]))
    >>> np.allclose(Q.T @ Q, np.eye(2)), np.allclose(Q[:, 0], [1.0, 0.0, 0.0])
    (True, True)
    """
    Q = np.asarray(Y, dtype=np.float64)
    try:
        for _ in range(2):
            R = sla.cholesky(Q.T @ Q, lower=False)
            Q = Q @ sla.solve_triangular(R, np.eye(R.shape[0]), lower=False)
        return np.ascontiguousarray(Q)
    except (np.linalg.LinAlgError, sla.LinAlgError, ValueError):
        return np.linalg.qr(np.asarray(Y, dtype=np.float64))[0]


def spectral_norm(R: np.ndarray) -> float:
    """``‖R‖₂`` of a tall n × b matrix from its b × b Gram matrix, O(n · b²).

    Examples
    --------
    >>> spectral_norm(np.array([[3.0, 0.0], [0.0, 4.0], [0.0, 0.0]]))
    4.0
    """
    if R.size == 0:
        return 0.0
    return float(np.sqrt(max(np.linalg.eigvalsh(R.T @ R)[-1], 0.0)))


def principal_sines(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """Sines of the principal angles between the column spans of A and B (orthonormal, n × b),
    largest first. O(n · b²).

    Computed from ``R = B - A (Aᵀ B)``, whose singular values they are (from the b × b
    Gram matrix of R), accurate for small angles (the cosines' ``sqrt(1 - c²)`` is not
    below about 10⁻⁸).

    Examples
    --------
    >>> A = np.eye(3)[:, :1]
    >>> B = np.array([[np.cos(1e-9)], [np.sin(1e-9)], [0.0]])
    >>> float(principal_sines(A, B)[0])
    1e-09
    """
    R = B - A @ (A.T @ B)
    return np.sqrt(np.maximum(np.linalg.eigvalsh(R.T @ R)[::-1], 0.0))


@dataclass(frozen=True)
class Refined:
    """The result of :func:`refine_subspace`.

    Attributes
    ----------
    U, s, V
        Ritz vectors and values: the top ``kp`` left and right vectors (n × kp each) and
        the singular values, decreasing.
    converged
        Whether the largest principal sine between two successive rounds fell below the
        tolerance.
    rounds
        Rounds of the iteration run.
    sines
        The largest principal sine of each round against the one before (the first round
        against the starting basis).
    """

    U: np.ndarray
    s: np.ndarray
    V: np.ndarray
    converged: bool
    rounds: int
    sines: tuple[float, ...]


def refine_subspace(P, PT, U0: np.ndarray, Q0: np.ndarray, k: int, tol: float = 1e-6,
                    max_rounds: int = 8, oversample: int = 8, random_state: int = 0) -> Refined:
    """The top singular subspaces of P (n × n, sparse), iterated from previous bases.

    ``U0`` (n × k') and ``Q0`` (n × k') are the previous left and right bases, ``PT`` is
    Pᵀ (in CSR form, so that both products are row-major). Each round multiplies a
    block of ``b = k' + oversample`` right vectors by P and Pᵀ, orthonormalises both
    blocks and rotates them onto the singular vectors of the small projected matrix
    (Rayleigh–Ritz). The block starts from Q0 and ``oversample`` seeded random vectors
    (Q0 alone when no room is left). The test is on principal angles: it converges when
    the largest sine between the top-k left subspaces, and between the top-k' right
    subspaces, of two successive rounds is at most ``tol``. The k' directions converge
    at a rate of about ``(σ_{b+1}/σ_{k'})²`` a round.

    Costs per round: two sparse products, O(nnz · b), and O(n · b²) for the
    orthonormalisations and rotations; memory O(n · b).

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> P = np.diag([5.0, 4.0, 3.0, 0.1, 0.05, 0.01])
    >>> U0 = np.linalg.qr(np.eye(6)[:, :2] + 0.01 * rng.normal(size=(6, 2)))[0]
    >>> r = refine_subspace(P, P.T, U0, U0, 2, tol=1e-10, oversample=1)
    >>> r.converged, r.s.round(6).tolist()
    (True, [5.0, 4.0])
    """
    n, kp = Q0.shape
    b = min(n, kp + max(0, int(oversample)))
    rng = np.random.default_rng(random_state)
    block = np.hstack([Q0, rng.standard_normal((n, b - kp))]) if b > kp else Q0
    V = orthonormal(block)
    left, right = U0[:, :k], Q0
    sines: list[float] = []
    U, s, converged = U0, np.zeros(kp), False
    for _ in range(max(1, int(max_rounds))):
        Uq = orthonormal(np.asarray(P @ V))
        Z = np.asarray(PT @ Uq)  # Pᵀ Uq, so that Uqᵀ P = Zᵀ
        Vz = orthonormal(Z)
        a, s, bt = np.linalg.svd((Vz.T @ Z).T)  # Uqᵀ P Vz = a diag(s) bt
        U, V = Uq @ a, Vz @ bt.T
        moved = max(float(principal_sines(left, U[:, :k])[0]),
                    float(principal_sines(right, V[:, :kp])[0]))
        sines.append(moved)
        left, right = U[:, :k], V[:, :kp]
        if moved <= tol:
            converged = True
            break
    return Refined(np.ascontiguousarray(U[:, :kp]), s[:kp], np.ascontiguousarray(V[:, :kp]),
                   converged, len(sines), tuple(sines))
