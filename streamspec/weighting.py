"""Weighting matrices W of the generalised method of moments, built from counts.

``W`` weights the n³ moment conditions ``m[j, x, i]`` (see :mod:`streamspec.moments`).
The paper's choice is the inverse of their second moments, ``(sum_n m mᵀ)⁻¹``,
evaluated at the current estimate of B. math.md section 3 shows that matrix is
block diagonal over j = x1, with block ``L D_j Lᵀ``, ``D_j`` diagonal and
``L = I - B̃ Eᵀ`` the identity minus a rank-n matrix. Every mode below is stored
in factored form and applied blockwise; none builds an n³ × n³ matrix.

Modes and their costs (n symbols):

``"identity"``
    W = I; the unweighted criterion of the spectral M-estimator. Free.
``"diagonal"``
    The inverse of the diagonal of the second moments (the paper's
    "first-order" approximation). O(n⁴) to build, n³ memory.
``"per_symbol"``
    The paper's weighting: one n² × n² block per x2 = x, which ignores the
    coupling across x. Within it, block j and x is an n × n matrix, so it costs
    O(n⁵) to build and invert and n⁴ memory.
``"exact"``
    The j-blocks ``L D_j Lᵀ`` with their coupling across x, inverted with the
    Woodbury identity: each block is a diagonal plus a rank-2n term, so the
    inverse is ``Λ_j - V_j K_j V_jᵀ`` with Λ diagonal, V of shape n² × 2n and K
    of 2n × 2n. O(n⁵) to build, O(n⁴) memory, O(n⁴) per application.

Regularisation. The blocks are singular at the truth (an n-dimensional null
space, math.md section 3) and cells never observed get zero variance and so
infinite weight. Instead of the paper's absolute 1e-8 on the diagonal we use
three documented knobs, all in units of τ = the mean diagonal entry:
``smoothing`` pseudo-counts added to every cell before forming the variances,
``shrinkage`` s in [0, 1] (or ``"auto"``: s = 10 / (10 + N/n³)) mixing the second
moments with τ·I, and a relative ``ridge`` ε·τ on the diagonal. Finally W is
multiplied by τ, so that W = I whenever the second moments are proportional to
the identity and the L1 penalty means the same thing under every weighting.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from streamspec.moments import moment_variance_factors

__all__ = ["Weighting", "WEIGHTINGS", "build_weighting"]

WEIGHTINGS = ("identity", "diagonal", "per_symbol", "exact")


@dataclass(frozen=True)
class Weighting:
    """A block-diagonal weighting, applied to moment arrays ``M[j, x, i]``.

    Exactly one of the representations is used: ``lam`` alone (diagonal),
    ``blocks`` (per-x dense n × n blocks, ``W[j, x]``), or ``lam`` with the
    low-rank correction ``V, K`` (exact).
    """

    mode: str
    lam: np.ndarray | None = None
    blocks: np.ndarray | None = None
    V: np.ndarray | None = None
    K: np.ndarray | None = None

    def apply(self, M: np.ndarray) -> np.ndarray:
        """``W m`` for a moment array of shape (n, n, n) laid out ``[j, x, i]``."""
        if self.blocks is not None:
            return np.einsum("jxik,jxk->jxi", self.blocks, M, optimize=True)
        out = M * self.lam
        if self.V is not None:
            n = M.shape[0]
            flat = M.reshape(n, n * n)
            t = np.einsum("jar,ja->jr", self.V, flat)
            t = np.einsum("jrs,js->jr", self.K, t)
            out = out - np.einsum("jar,jr->ja", self.V, t).reshape(M.shape)
        return out

    def quad(self, M: np.ndarray) -> float:
        """``mᵀ W m``."""
        return float(np.vdot(M, self.apply(M)))

    def diagonal(self) -> np.ndarray:
        """The diagonal of W, shape (n, n, n), used to precondition solvers."""
        if self.blocks is not None:
            return np.einsum("jxii->jxi", self.blocks).copy()
        d = self.lam.copy()
        if self.V is not None:
            corr = np.einsum("jar,jrs,jas->ja", self.V, self.K, self.V, optimize=True)
            d = d - corr.reshape(d.shape)
        return np.maximum(d, 1e-12 * float(np.abs(d).max()))

    def dense_block(self, j: int) -> np.ndarray:
        """Block j of W as a dense n² × n² matrix (tests and plots only)."""
        n = (self.lam if self.lam is not None else self.blocks).shape[0]
        if self.blocks is not None:
            W = np.zeros((n * n, n * n))
            for x in range(n):
                W[x * n : (x + 1) * n, x * n : (x + 1) * n] = self.blocks[j, x]
            return W
        W = np.diag(self.lam[j].ravel())
        if self.V is not None:
            W = W - self.V[j] @ self.K[j] @ self.V[j].T
        return W


def resolve_shrinkage(shrinkage: float | str, n: int, n_triples: float) -> float:
    """The shrinkage intensity; ``"auto"`` is ``10 / (10 + N / n³)``.

    That is 1/2 when the average cell of c3 holds 10 counts: the weighting is
    estimated from the counts themselves, and with few counts per cell it puts
    huge weight on cells that happen to be rare (math.md section 6). Measured on a
    random 5-state, 26-symbol HMM: with N = 2·10⁵ (11 counts per cell) an
    unshrunk exact weighting raised the joint-probability error from 0.084
    (identity) to 0.126 and s = 0.3 brought it back to 0.088; with N = 10⁶
    s = 0.15 lowered it from 0.041 to 0.035.
    """
    if shrinkage == "auto":
        return float(10.0 / (10.0 + n_triples / n**3))
    if isinstance(shrinkage, str) or not 0.0 <= float(shrinkage) <= 1.0:
        raise ValueError(f"shrinkage must be in [0, 1] or 'auto', got {shrinkage!r}")
    return float(shrinkage)


def build_weighting(
    mode: str,
    c3: np.ndarray,
    B: np.ndarray | None = None,
    smoothing: float = 0.0,
    shrinkage: float | str = 0.0,
    ridge: float = 1e-6,
) -> Weighting:
    """The weighting ``mode`` at operators ``B[x]`` (n × n each), from counts ``c3``.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> c3 = rng.integers(1, 9, size=(3, 3, 3)).astype(float)
    >>> B = rng.normal(size=(3, 3, 3))
    >>> W = build_weighting("exact", c3, B)
    >>> from streamspec.moments import second_moment_blocks
    >>> S = second_moment_blocks(c3 / c3.sum(), B)
    >>> tau = np.einsum("jaa->ja", S).mean()
    >>> bool(np.allclose(W.dense_block(1) @ (S[1] + 1e-6 * tau * np.eye(9)) / tau, np.eye(9)))
    True
    """
    if mode not in WEIGHTINGS:
        raise ValueError(f"weighting must be one of {WEIGHTINGS}, got {mode!r}")
    c3 = np.asarray(c3, dtype=np.float64)
    n = c3.shape[0]
    if mode == "identity":
        return Weighting(mode, lam=np.ones((n, n, n)))
    if B is None:
        raise ValueError(f"the {mode!r} weighting needs the operators B")
    if not ridge >= 0:
        raise ValueError(f"ridge must be >= 0, got {ridge!r}")
    if not smoothing >= 0:
        raise ValueError(f"smoothing must be >= 0, got {smoothing!r}")
    N = c3.sum()
    s = resolve_shrinkage(shrinkage, n, N)
    D, g = moment_variance_factors(c3 / N, smoothing / N)
    # diagonal of L D_j Lᵀ: D - 2 B[x, i, x] D + sum_y B[x, i, y]² g[j, y]
    Bxx = np.einsum("xix->xi", B)
    diag = D * (1 - 2 * Bxx)[None] + np.einsum("xiy,jy->jxi", B**2, g, optimize=True)
    tau = float(diag.mean())
    if not tau > 0:  # the operators reproduce every sample exactly: nothing to weight
        return Weighting(mode, lam=np.ones((n, n, n)))
    D, g = (1 - s) * D, (1 - s) * g
    eps = (s + ridge) * tau
    if mode == "diagonal":
        return Weighting(mode, lam=tau / ((1 - s) * diag + eps))
    if mode == "per_symbol":
        # block (j, x): diag(D[j,x]) - B[x][:,x] D[j,x]ᵀ - D[j,x] B[x][:,x]ᵀ + B[x] diag(g[j]) B[x]ᵀ
        cross = Bxx[None, :, :, None] * D[:, :, None, :]
        blocks = np.einsum("xiy,jy,xky->jxik", B, g, B, optimize=True) - cross
        blocks -= cross.transpose(0, 1, 3, 2)
        idx = np.arange(n)
        blocks[:, :, idx, idx] += D + eps
        return Weighting(mode, blocks=tau * np.linalg.inv(blocks))
    # exact: Σ_j = Dε + U C Uᵀ, U = [B̃, F], F[(x,i), s] = 1[x = s] D[j, x, i],
    # C = [[G, -I], [-I, 0]], G = diag(g[j]); Woodbury with C⁻¹ = [[0, -I], [-I, -G]].
    lam = 1.0 / (D + eps)  # (j, x, i)
    Bt = B.reshape(n * n, n)
    eye = np.eye(n)
    F = D[:, :, :, None] * eye[None, :, None, :]  # (j, x, i, s)
    U = np.concatenate([np.broadcast_to(Bt, (n, n * n, n)), F.reshape(n, n * n, n)], axis=2)
    V = lam.reshape(n, n * n, 1) * U
    core = np.einsum("jar,jas->jrs", U, V, optimize=True)
    core[:, :n, n:] -= eye
    core[:, n:, :n] -= eye
    core[:, n:, n:] -= g[:, :, None] * eye
    K = np.linalg.inv(core)
    return Weighting(mode, lam=tau * lam, V=np.sqrt(tau) * V, K=K)
