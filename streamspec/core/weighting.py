"""Weighting matrices W of the generalised method of moments, built from counts.

``W`` weights the n³ moment conditions ``m[j, x, i]`` (see :mod:`streamspec.core.moments`).
The paper's choice is the inverse of their second moments, ``(sum_n m mᵀ)⁻¹``,
evaluated at the current estimate of B. docs/math.md section 3 shows that matrix is
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
space, docs/math.md section 3) and cells never observed get zero variance and so
infinite weight. Instead of the paper's absolute 1e-8 on the diagonal we use
three documented knobs, all in units of τ = the mean diagonal entry:
``smoothing`` pseudo-counts added to every cell before forming the variances,
``shrinkage`` s in [0, 1] (or ``"auto"``: s = 10 / (10 + N/n³)) mixing the second
moments with τ·I, and a relative ``ridge`` ε·τ on the diagonal. Finally W is
multiplied by τ, so that W = I whenever the second moments are proportional to
the identity and the L1 penalty means the same thing under every weighting.

Each mode is a small class sharing the :class:`Weighting` interface (what the
solvers need: :meth:`~Weighting.apply`, :meth:`~Weighting.quad`,
:meth:`~Weighting.diagonal` and the R-step's normal equations
:meth:`~Weighting.r_hessian`), built by :func:`build_weighting` from the mode's name.
The projected formulation's weightings are in :mod:`streamspec.core.projected_weighting`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from streamspec.core import defaults
from streamspec.core.moments import moment_variance_factors

__all__ = [
    "Weighting",
    "IdentityWeighting",
    "DiagonalWeighting",
    "PerSymbolWeighting",
    "ExactWeighting",
    "SecondMoments",
    "WEIGHTINGS",
    "DENSE_MAX",
    "WEIGHTING_CLASSES",
    "build_weighting",
    "resolve_shrinkage",
]

WEIGHTINGS = defaults.WEIGHTINGS
DENSE_MAX = 2500  # largest coupled group (parameters) solved with an explicit Hessian


class Weighting(ABC):
    """A block-diagonal weighting W, applied to moment arrays ``M[j, x, i]`` (n³ entries).

    Subclasses differ in how far W couples the moments (not at all, within one
    symbol x, or across symbols) and so in what the R-step's normal equations
    decouple into; every one is applied blockwise, none builds an n³ × n³ matrix.
    """

    mode: ClassVar[str]

    @classmethod
    def build(cls, c3: np.ndarray, B: np.ndarray | None, *, smoothing: float,
              shrinkage: float | str, ridge: float) -> Weighting:
        """The weighting of this mode at operators ``B`` from counts ``c3`` (template method).

        The factored second moments are shared by every mode (:class:`SecondMoments`,
        O(n⁴)); :meth:`at` turns them into this mode's W. When the operators reproduce
        every sample exactly there is nothing to weight and W = I.
        """
        moments = SecondMoments.of(cls.mode, c3, B, smoothing=smoothing, shrinkage=shrinkage,
                                   ridge=ridge)
        if not moments.tau > 0:
            return IdentityWeighting.of_size(c3.shape[0])
        return cls.at(moments)

    @classmethod
    @abstractmethod
    def at(cls, m: SecondMoments) -> Weighting:
        """This mode's W from the factored second moments ``m``."""

    @abstractmethod
    def apply(self, M: np.ndarray) -> np.ndarray:
        """``W m`` for a moment array of shape (n, n, n) laid out ``[j, x, i]``."""

    def quad(self, M: np.ndarray) -> float:
        """``mᵀ W m``; the cost of one :meth:`apply`."""
        return float(np.vdot(M, self.apply(M)))

    @abstractmethod
    def diagonal(self) -> np.ndarray:
        """The diagonal of W, shape (n, n, n), used to precondition solvers."""

    @abstractmethod
    def dense_block(self, j: int) -> np.ndarray:
        """Block j of W as a dense n² × n² matrix (tests and plots only); O(n⁴)."""

    def has_explicit_hessian(self, n: int, k: int) -> bool:
        """Whether the R-step's Hessian groups (:meth:`r_hessian`) are small enough to form."""
        return True

    @abstractmethod
    def r_hessian(self, Z: np.ndarray) -> np.ndarray:
        """The R-step's normal equations: Hessians (G, p, p) of its independent groups.

        The R-step minimises ``mᵀ W m`` with ``m[j, x, i] = P[j, x, i] - Σ_w R[x, i, w]
        Z[x, j, w]``; its parameters R (n, n, k), reshaped to (G, p), split into G groups
        that W does not couple. ``Z`` is (n, n, k), ``Z[x, j, w]``.
        """


@dataclass(frozen=True)
class DiagonalWeighting(Weighting):
    """Diagonal W, ``W[j, x, i] = lam[j, x, i]``: the paper's "first-order" weighting.

    O(n⁴) to build, n³ memory; the R-step decouples into the n² rows (x, i) of R,
    Hessians k × k.
    """

    lam: np.ndarray
    mode: ClassVar[str] = "diagonal"

    @classmethod
    def at(cls, m: SecondMoments) -> DiagonalWeighting:
        return cls(lam=m.tau / ((1 - m.s) * m.diag + m.eps))

    def apply(self, M: np.ndarray) -> np.ndarray:
        """``W m``, O(n³)."""
        return M * self.lam

    def diagonal(self) -> np.ndarray:
        """The diagonal, O(n³)."""
        return self.lam.copy()

    def dense_block(self, j: int) -> np.ndarray:
        return np.diag(self.lam[j].ravel())

    def r_hessian(self, Z: np.ndarray) -> np.ndarray:
        """Rows (x, i) decouple: n² Hessians k × k, O(n³ k²)."""
        n, _, k = Z.shape
        return np.einsum("jxi,xjw,xjv->xiwv", self.lam, Z, Z, optimize=True).reshape(n * n, k, k)


class IdentityWeighting(DiagonalWeighting):
    """W = I: the unweighted criterion of the spectral M-estimator. Free to build."""

    mode: ClassVar[str] = "identity"

    @classmethod
    def of_size(cls, n: int) -> IdentityWeighting:
        """W = I on n symbols (stored as unit diagonal weights: n³ floats)."""
        return cls(lam=np.ones((n, n, n)))

    @classmethod
    def build(cls, c3: np.ndarray, B: np.ndarray | None, *, smoothing: float,
              shrinkage: float | str, ridge: float) -> IdentityWeighting:
        # why: W = I depends on neither the counts nor the operators, so nothing is checked
        return cls.of_size(c3.shape[0])

    @classmethod
    def at(cls, m: SecondMoments) -> IdentityWeighting:
        return cls.of_size(m.D.shape[0])


@dataclass(frozen=True)
class PerSymbolWeighting(Weighting):
    """The paper's weighting: one n² × n² block per x2 = x, ignoring the coupling across x.

    Kept as dense n × n blocks ``blocks[j, x]``: O(n⁵) to build and invert, n⁴
    memory; the R-step decouples into the n symbols, Hessians nk × nk.
    """

    blocks: np.ndarray
    mode: ClassVar[str] = "per_symbol"

    @classmethod
    def at(cls, m: SecondMoments) -> PerSymbolWeighting:
        n, B, D, eps = m.D.shape[0], m.B, m.D, m.eps
        # block (j, x): diag(D[j,x]) - B[x][:,x] D[j,x]ᵀ - D[j,x] B[x][:,x]ᵀ + B[x] diag(g[j]) B[x]ᵀ
        cross = m.Bxx[None, :, :, None] * D[:, :, None, :]
        blocks = np.einsum("xiy,jy,xky->jxik", B, m.g, B, optimize=True) - cross
        blocks -= cross.transpose(0, 1, 3, 2)
        idx = np.arange(n)
        blocks[:, :, idx, idx] += D + eps
        return cls(blocks=m.tau * np.linalg.inv(blocks))

    def apply(self, M: np.ndarray) -> np.ndarray:
        """``W m``, O(n⁴)."""
        return np.einsum("jxik,jxk->jxi", self.blocks, M, optimize=True)

    def diagonal(self) -> np.ndarray:
        """The diagonal, O(n³)."""
        return np.einsum("jxii->jxi", self.blocks).copy()

    def dense_block(self, j: int) -> np.ndarray:
        n = self.blocks.shape[0]
        W = np.zeros((n * n, n * n))
        for x in range(n):
            W[x * n : (x + 1) * n, x * n : (x + 1) * n] = self.blocks[j, x]
        return W

    def r_hessian(self, Z: np.ndarray) -> np.ndarray:
        """Symbols x decouple: n Hessians nk × nk, O(n⁵ k²)."""
        n, _, k = Z.shape
        H = np.einsum("jxab,xjw,xjv->xawbv", self.blocks, Z, Z, optimize=True)
        return H.reshape(n, n * k, n * k)


@dataclass(frozen=True)
class ExactWeighting(Weighting):
    """The j-blocks ``L D_j Lᵀ`` with their coupling across x, inverted by Woodbury.

    ``W_j = scale · (Λ_j - Λ_j U_j K_j U_jᵀ Λ_j)`` with ``Λ_j = diag(lam[j])``,
    ``U_j = [B̃, F_j]`` (``B̃[(x, i), s] = B[x, i, s]``,
    ``F_j[(x, i), s] = 1[x = s] D[j, x, i]``) kept as ``B`` and ``D``, never
    expanded: O(n⁵) to build, O(n⁴) memory and O(n⁴) per application for all j
    together. The R-step couples every parameter: an explicit Hessian up to
    :data:`DENSE_MAX` parameters, matrix-vector products beyond.
    """

    lam: np.ndarray
    B: np.ndarray
    D: np.ndarray
    K: np.ndarray
    scale: float
    mode: ClassVar[str] = "exact"

    @classmethod
    def at(cls, m: SecondMoments) -> ExactWeighting:
        # Σ_j = Dε + U C Uᵀ, U = [B̃, F], F[(x,i), s] = 1[x = s] D[j, x, i],
        # C = [[G, -I], [-I, 0]], G = diag(g[j]); Woodbury with C⁻¹ = [[0, -I], [-I, -G]]:
        # K = (C⁻¹ + Uᵀ Λ U)⁻¹, whose blocks need only B and D (F is never built).
        B, D = m.B, m.D
        n = D.shape[0]
        lam = 1.0 / (D + m.eps)  # (j, x, i)
        eye = np.eye(n)
        core = np.empty((n, 2 * n, 2 * n))
        Bt = B.reshape(n * n, n)
        for j in range(n):  # B̃ᵀ Λ_j B̃, one matrix product per block
            core[j, :n, :n] = (Bt.T * lam[j].ravel()) @ Bt
        BtLF = np.einsum("tis,jti->jst", B, lam * D)
        core[:, :n, n:] = BtLF - eye
        core[:, n:, :n] = BtLF.transpose(0, 2, 1) - eye
        core[:, n:, n:] = ((lam * D * D).sum(axis=2) - m.g)[:, :, None] * eye
        K = np.linalg.inv(core)
        return cls(lam=lam, B=np.ascontiguousarray(B), D=D, K=K, scale=m.tau)

    def _correction(self, w: np.ndarray) -> np.ndarray:
        """``U K Uᵀ w`` for each block j (w shaped [j, x, i]); matrix products, O(n⁴)."""
        n = w.shape[0]
        Bt = self.B.reshape(n * n, n)
        u = np.concatenate([w.reshape(n, n * n) @ Bt, (self.D * w).sum(axis=2)], axis=1)
        y = np.matmul(self.K, u[:, :, None])[:, :, 0]
        return (y[:, :n] @ Bt.T).reshape(w.shape) + self.D * y[:, n:, None]

    def apply(self, M: np.ndarray) -> np.ndarray:
        """``W m``, O(n⁴)."""
        w = M * self.lam
        return self.scale * (w - self.lam * self._correction(w))

    def diagonal(self) -> np.ndarray:
        """The diagonal, O(n⁵) time, n³ memory (one block at a time)."""
        n = self.lam.shape[0]
        Bt = self.B.reshape(n * n, n)
        K11, K12, K22 = self.K[:, :n, :n], self.K[:, :n, n:], self.K[:, n:, n:]
        quad = np.empty_like(self.lam)
        for j in range(n):  # one block at a time: O(n⁴) each, n³ memory
            quad[j] = ((Bt @ K11[j]) * Bt).sum(axis=1).reshape(n, n)
        quad += 2 * self.D * np.einsum("xis,jsx->jxi", self.B, K12)
        quad += self.D**2 * np.einsum("jxx->jx", K22)[:, :, None]
        d = self.scale * (self.lam - self.lam**2 * quad)
        return np.maximum(d, 1e-12 * float(np.abs(d).max()))

    def dense_block(self, j: int) -> np.ndarray:
        n = self.lam.shape[0]
        F = (self.D[j][:, :, None] * np.eye(n)[:, None, :]).reshape(n * n, n)
        U = np.concatenate([self.B.reshape(n * n, n), F], axis=1)
        lam = self.lam[j].ravel()
        return self.scale * (np.diag(lam) - (lam[:, None] * U) @ self.K[j] @ (lam[:, None] * U).T)

    def has_explicit_hessian(self, n: int, k: int) -> bool:
        """Up to :data:`DENSE_MAX` coupled parameters (n² k of them)."""
        return n * n * k <= DENSE_MAX

    def r_hessian(self, Z: np.ndarray) -> np.ndarray:
        """Nothing decouples: one Hessian n²k × n²k, O(n⁶ k²) (only up to DENSE_MAX)."""
        n, _, k = Z.shape
        Wd = np.stack([self.dense_block(j) for j in range(n)]).reshape(n, n, n, n, n)
        H = np.einsum("jxiyl,xjw,yjv->xiwylv", Wd, Z, Z, optimize=True)
        p = n * n * k
        return H.reshape(1, p, p)


@dataclass(frozen=True)
class SecondMoments:
    """The second moments of the moment conditions at operators B, factored (docs/math.md section 3).

    Block j is ``L D_j Lᵀ`` with ``D[j, x, i]`` and ``g[j, y]`` from the counts
    (:func:`~streamspec.core.moments.moment_variance_factors`), already multiplied by
    ``1 - s``; ``diag`` is the unshrunk diagonal of the blocks, ``tau`` its mean,
    ``s`` the shrinkage and ``eps = (s + ridge) τ`` what the diagonal gains.
    """

    B: np.ndarray
    D: np.ndarray
    g: np.ndarray
    Bxx: np.ndarray
    diag: np.ndarray
    tau: float
    s: float
    eps: float

    @classmethod
    def of(cls, mode: str, c3: np.ndarray, B: np.ndarray | None, *, smoothing: float,
           shrinkage: float | str, ridge: float) -> SecondMoments:
        """The factored second moments of counts ``c3`` at ``B``; O(n⁴) time, n³ memory."""
        if B is None:
            raise ValueError(f"the {mode!r} weighting needs the operators B")
        if not ridge >= 0:
            raise ValueError(f"ridge must be >= 0, got {ridge!r}")
        if not smoothing >= 0:
            raise ValueError(f"smoothing must be >= 0, got {smoothing!r}")
        n = c3.shape[0]
        N = c3.sum()
        s = resolve_shrinkage(shrinkage, n, N)
        D, g = moment_variance_factors(c3 / N, smoothing / N)
        # diagonal of L D_j Lᵀ: D - 2 B[x, i, x] D + sum_y B[x, i, y]² g[j, y]
        Bxx = np.einsum("xix->xi", B)
        diag = D * (1 - 2 * Bxx)[None] + np.einsum("xiy,jy->jxi", B**2, g, optimize=True)
        tau = float(diag.mean())
        return cls(B=B, D=(1 - s) * D, g=(1 - s) * g, Bxx=Bxx, diag=diag, tau=tau, s=s,
                   eps=(s + ridge) * tau)


WEIGHTING_CLASSES: dict[str, type[Weighting]] = {
    cls.mode: cls for cls in (IdentityWeighting, DiagonalWeighting, PerSymbolWeighting, ExactWeighting)
}


def resolve_shrinkage(shrinkage: float | str, n: int, n_triples: float) -> float:
    """The shrinkage intensity; ``"auto"`` is ``10 / (10 + N / n³)``.

    That is 1/2 when the average cell of c3 holds 10 counts: the weighting is
    estimated from the counts themselves, and with few counts per cell it puts
    huge weight on cells that happen to be rare (docs/math.md section 6). Measured on a
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
    >>> from streamspec.core.moments import second_moment_blocks
    >>> S = second_moment_blocks(c3 / c3.sum(), B)
    >>> tau = np.einsum("jaa->ja", S).mean()
    >>> bool(np.allclose(W.dense_block(1) @ (S[1] + 1e-6 * tau * np.eye(9)) / tau, np.eye(9)))
    True
    """
    if mode not in WEIGHTING_CLASSES:
        raise ValueError(f"weighting must be one of {WEIGHTINGS}, got {mode!r}")
    c3 = np.asarray(c3, dtype=np.float64)
    return WEIGHTING_CLASSES[mode].build(c3, B, smoothing=smoothing, shrinkage=shrinkage, ridge=ridge)
