"""Solvers for the weighted least-squares and lasso steps of the M-estimator.

Each step of alternating minimisation is a convex problem
``min_θ ½ θᵀ H θ - cᵀ θ + μ ‖θ‖₁`` over independent groups of parameters (rows of
R, or the R of one symbol, or all of R, depending on how far the weighting
couples them). With an explicit Hessian per group the lasso is solved by cyclic
coordinate descent, vectorised across groups, to a tight tolerance: it returns
exact zeros, and docs/math.md section 6 records that plain ADMM did not converge on
these ill-conditioned problems while coordinate descent did. Where a group is
too large for an explicit Hessian, :func:`conjugate_gradient` (μ = 0) and
:func:`fista` (μ > 0) work from matrix-vector products alone.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

__all__ = ["solve_groups", "lasso_groups", "conjugate_gradient", "fista", "gls_operators",
           "identity_loss"]


def solve_groups(H: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Solve ``H[g] θ[g] = c[g]`` for every group g; shapes (G, p, p) and (G, p).

    Singular groups (parameters that no data constrain) get the minimum-norm solution.
    """
    try:
        scale = np.maximum(np.abs(np.diagonal(H, axis1=1, axis2=2)).max(axis=1), 1e-300)
        jitter = 1e-12 * scale[:, None, None] * np.eye(H.shape[1])
        return np.linalg.solve(H + jitter, c[..., None])[..., 0]
    except np.linalg.LinAlgError:
        return np.stack([np.linalg.lstsq(h, b, rcond=None)[0] for h, b in zip(H, c, strict=True)])


def lasso_groups(
    H: np.ndarray,
    c: np.ndarray,
    mu: float,
    theta0: np.ndarray | None = None,
    tol: float = 1e-10,
    max_passes: int = 500,
) -> np.ndarray:
    """Cyclic coordinate descent for ``min ½ θᵀHθ - cᵀθ + μ‖θ‖₁`` in every group at once.

    Stops when a full pass changes no coordinate by more than ``tol`` times the
    largest coordinate. Coordinates whose curvature is zero are set to 0.

    Examples
    --------
    >>> H = np.array([[[2.0, 0.0], [0.0, 1.0]]]); c = np.array([[3.0, 0.5]])
    >>> lasso_groups(H, c, mu=1.0).tolist()   # (3-1)/2 = 1 and |0.5| < 1 -> exact zero
    [[1.0, 0.0]]
    """
    G, p = c.shape
    theta = np.zeros((G, p)) if theta0 is None else np.array(theta0, dtype=np.float64)
    diag = np.diagonal(H, axis1=1, axis2=2).copy()
    live = diag > 0
    safe = np.where(live, diag, 1.0)
    grad = c - np.einsum("gab,gb->ga", H, theta)  # c - Hθ, kept up to date
    for _ in range(max_passes):
        biggest_step = 0.0
        for a in range(p):
            old = theta[:, a]
            r = grad[:, a] + diag[:, a] * old
            new = np.where(live[:, a], np.sign(r) * np.maximum(np.abs(r) - mu, 0.0) / safe[:, a], 0.0)
            step = new - old
            if np.any(step):
                grad -= H[:, :, a] * step[:, None]
                theta[:, a] = new
                biggest_step = max(biggest_step, float(np.abs(step).max()))
        if biggest_step <= tol * max(float(np.abs(theta).max()), 1e-300):
            break
    return theta


def conjugate_gradient(
    matvec: Callable[[np.ndarray], np.ndarray],
    c: np.ndarray,
    x0: np.ndarray,
    precond: np.ndarray | None = None,
    tol: float = 1e-10,
    max_iter: int = 500,
) -> np.ndarray:
    """Preconditioned conjugate gradient for ``H x = c`` (H symmetric positive semi-definite)."""
    x = x0.copy()
    r = c - matvec(x)
    inv = 1.0 / precond if precond is not None else None
    z = r * inv if inv is not None else r
    p = z.copy()
    rz = float(np.vdot(r, z))
    stop = tol * max(float(np.linalg.norm(c)), 1e-300)
    for _ in range(max_iter):
        if np.linalg.norm(r) <= stop:
            break
        Hp = matvec(p)
        pHp = float(np.vdot(p, Hp))
        if pHp <= 0:
            break
        alpha = rz / pHp
        x += alpha * p
        r -= alpha * Hp
        z = r * inv if inv is not None else r
        rz_new = float(np.vdot(r, z))
        p = z + (rz_new / rz) * p
        rz = rz_new
    return x


def fista(
    matvec: Callable[[np.ndarray], np.ndarray],
    c: np.ndarray,
    mu: float,
    x0: np.ndarray,
    tol: float = 1e-9,
    max_iter: int = 2000,
) -> np.ndarray:
    """Accelerated proximal gradient (with restarts) for ``½xᵀHx - cᵀx + μ‖x‖₁``."""
    rng = np.random.default_rng(0)
    v = rng.normal(size=c.shape)
    for _ in range(30):  # power iteration for the step size
        v = matvec(v)
        nv = np.linalg.norm(v)
        if nv == 0:
            return np.zeros_like(c)
        v /= nv
    lip = 1.05 * float(np.vdot(v, matvec(v)))
    x = x0.copy()
    y, t = x.copy(), 1.0

    def objective(z):
        return 0.5 * float(np.vdot(z, matvec(z))) - float(np.vdot(c, z)) + mu * np.abs(z).sum()

    f_old = objective(x)
    for it in range(max_iter):
        g = matvec(y) - c
        z = y - g / lip
        x_new = np.sign(z) * np.maximum(np.abs(z) - mu / lip, 0.0)
        t_new = 0.5 * (1 + np.sqrt(1 + 4 * t * t))
        y = x_new + ((t - 1) / t_new) * (x_new - x)
        change = np.abs(x_new - x).max()
        x, t = x_new, t_new
        if it % 20 == 19:
            f_new = objective(x)
            if f_new > f_old:  # restart the momentum
                y, t = x.copy(), 1.0
            f_old = f_new
        if change <= tol * max(float(np.abs(x).max()), 1e-300):
            break
    return x


def gls_operators(A: np.ndarray, M: np.ndarray, Y: np.ndarray) -> np.ndarray:
    """GLS solutions ``B̃_x = A_x Y_x (M Y_x)⁻¹`` of ``min_B tr((A_x - B M) W_x (A_x - B M)ᵀ)``.

    ``A`` is (b, k, k'), ``M`` (k, k'), ``Y[x] = W_x Mᵀ`` (b, k', k), so that the
    normal equations ``(A_x - B M) W_x Mᵀ = 0`` read ``B (M Y_x) = A_x Y_x``. One
    k × k solve per symbol: O(b · k² k'). ``M Y_x`` is symmetric positive definite
    whenever M has full row rank and W_x is positive definite; otherwise (P21 of
    rank below k) the pseudo-inverse of ``M Y_x`` is used.

    Examples
    --------
    >>> M = np.array([[2.0, 0.0, 0.0]]); A = np.array([[[4.0, 1.0, 1.0]]])
    >>> gls_operators(A, M, np.broadcast_to(M.T, (1, 3, 1))).tolist()   # W = I: A Mᵀ (M Mᵀ)⁻¹
    [[[2.0]]]
    """
    P = A @ Y  # (b, k, k)
    H = M @ Y  # (b, k, k)
    try:
        return np.linalg.solve(H, P.transpose(0, 2, 1)).transpose(0, 2, 1)
    except np.linalg.LinAlgError:
        # why: M is rank deficient when P21 has rank < k (tiny samples); the
        # pseudo-inverse then gives θ_spec's choice, A_x M⁺ under W = I
        return P @ np.linalg.pinv(H, hermitian=True)


def identity_loss(A: np.ndarray, M: np.ndarray, ops: np.ndarray, block: int = 1024) -> float:
    """The loss under W = I, ``Σ_x ‖A_x - B̃_x M‖²`` over the rows of A. O(n · k² · k') time,
    O(block · k · k') scratch (41 MB at k = 50, k' = 100; two of 4,096 rows sat on the peak).

    >>> A, M = np.ones((3, 2, 4)), np.ones((2, 4))
    >>> identity_loss(A, M, np.zeros((3, 2, 2))), identity_loss(A, M, np.full((3, 2, 2), 0.5), block=2)
    (24.0, 0.0)
    """
    _, k, kp = A.shape
    total = 0.0
    for a in range(0, A.shape[0], block):
        b = min(A.shape[0], a + block) - a
        G = (ops[a : a + b].reshape(b * k, k) @ M).reshape(b, k, kp)
        np.subtract(A[a : a + b], G, out=G)  # in place: one block-sized array, not two
        total += float(np.einsum("xij,xij->", G, G))
    return total
