"""Weighting matrices W of the generalised method of moments, built from counts.

``W`` weights the n³ moment conditions ``m[j, x, i]`` (see :mod:`streamspec.core.moments`).
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

Projected formulation (:class:`ProjectedWeighting`, :func:`projected_weighting`).
The conditions of symbol x are a k × k' matrix; their covariance is taken
Kronecker-factored, ``Σ^(i) ⊗ Σ_x``, and only the k' × k' factor ``Σ_x`` matters
to the GLS solution. Costs with nnz distinct triples and P distinct (x2, x1)
pairs: ``"identity"`` free; ``"diagonal"`` O(nnz · k + P · k'); ``"per_symbol"``
O(nnz · k + P · k'² + n · k'³) per re-estimation, memory O(nnz + n · k') plus
one block of ``Σ_x`` at a time. ``"exact"`` couples the symbols and has no
projected counterpart.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from streamspec.core import defaults
from streamspec.core.moments import moment_variance_factors

__all__ = [
    "Weighting",
    "WEIGHTINGS",
    "build_weighting",
    "PROJECTED_WEIGHTINGS",
    "ProjectedWeighting",
    "projected_weighting",
    "resolve_projected_shrinkage",
]

WEIGHTINGS = defaults.WEIGHTINGS


@dataclass(frozen=True)
class Weighting:
    """A block-diagonal weighting, applied to moment arrays ``M[j, x, i]``.

    One of three representations is used: ``lam`` alone (diagonal W), ``blocks``
    (per-x dense n × n blocks ``W[j, x]``), or the exact form
    ``W_j = scale · (Λ_j - Λ_j U_j K_j U_jᵀ Λ_j)`` with ``Λ_j = diag(lam[j])``,
    ``U_j = [B̃, F_j]`` (``B̃[(x, i), s] = B[x, i, s]``,
    ``F_j[(x, i), s] = 1[x = s] D[j, x, i]``) kept as ``B`` and ``D``, never
    expanded: applying it costs O(n⁴) for all j together.
    """

    mode: str
    lam: np.ndarray | None = None
    blocks: np.ndarray | None = None
    B: np.ndarray | None = None
    D: np.ndarray | None = None
    K: np.ndarray | None = None
    scale: float = 1.0

    def _correction(self, w: np.ndarray) -> np.ndarray:
        """``U K Uᵀ w`` for each block j (w shaped [j, x, i]); matrix products, O(n⁴)."""
        n = w.shape[0]
        Bt = self.B.reshape(n * n, n)
        u = np.concatenate([w.reshape(n, n * n) @ Bt, (self.D * w).sum(axis=2)], axis=1)
        y = np.matmul(self.K, u[:, :, None])[:, :, 0]
        return (y[:, :n] @ Bt.T).reshape(w.shape) + self.D * y[:, n:, None]

    def apply(self, M: np.ndarray) -> np.ndarray:
        """``W m`` for a moment array of shape (n, n, n) laid out ``[j, x, i]``."""
        if self.blocks is not None:
            return np.einsum("jxik,jxk->jxi", self.blocks, M, optimize=True)
        w = M * self.lam
        if self.K is None:
            return w
        return self.scale * (w - self.lam * self._correction(w))

    def quad(self, M: np.ndarray) -> float:
        """``mᵀ W m``."""
        return float(np.vdot(M, self.apply(M)))

    def diagonal(self) -> np.ndarray:
        """The diagonal of W, shape (n, n, n), used to precondition solvers."""
        if self.blocks is not None:
            return np.einsum("jxii->jxi", self.blocks).copy()
        if self.K is None:
            return self.lam.copy()
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
        """Block j of W as a dense n² × n² matrix (tests and plots only)."""
        n = (self.lam if self.lam is not None else self.blocks).shape[0]
        if self.blocks is not None:
            W = np.zeros((n * n, n * n))
            for x in range(n):
                W[x * n : (x + 1) * n, x * n : (x + 1) * n] = self.blocks[j, x]
            return W
        if self.K is None:
            return np.diag(self.lam[j].ravel())
        F = (self.D[j][:, :, None] * np.eye(n)[:, None, :]).reshape(n * n, n)
        U = np.concatenate([self.B.reshape(n * n, n), F], axis=1)
        lam = self.lam[j].ravel()
        return self.scale * (np.diag(lam) - (lam[:, None] * U) @ self.K[j] @ (lam[:, None] * U).T)


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
    >>> from streamspec.core.moments import second_moment_blocks
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
    # C = [[G, -I], [-I, 0]], G = diag(g[j]); Woodbury with C⁻¹ = [[0, -I], [-I, -G]]:
    # K = (C⁻¹ + Uᵀ Λ U)⁻¹, whose blocks need only B and D (F is never built).
    lam = 1.0 / (D + eps)  # (j, x, i)
    eye = np.eye(n)
    core = np.empty((n, 2 * n, 2 * n))
    Bt = B.reshape(n * n, n)
    for j in range(n):  # B̃ᵀ Λ_j B̃, one matrix product per block
        core[j, :n, :n] = (Bt.T * lam[j].ravel()) @ Bt
    BtLF = np.einsum("tis,jti->jst", B, lam * D)
    core[:, :n, n:] = BtLF - eye
    core[:, n:, :n] = BtLF.transpose(0, 2, 1) - eye
    core[:, n:, n:] = ((lam * D * D).sum(axis=2) - g)[:, :, None] * eye
    K = np.linalg.inv(core)
    return Weighting(mode, lam=lam, B=np.ascontiguousarray(B), D=D, K=K, scale=tau)


# ---------------------------------------------------------------------------
# The projected formulation: per-symbol j-side factors Σ_x (k' × k')
# ---------------------------------------------------------------------------

PROJECTED_WEIGHTINGS = ("identity", "diagonal", "per_symbol")
_GEMM_PAIRS = 32  # Σ_x of a symbol with this many (x2, x1) pairs or more: one matrix product
_SCRATCH = 1 << 22  # floats of scratch (32 MiB) a block of Σ_x may take


SHRINK_TO_ONE = 1e-3  # "auto": a symbol whose shrinkage is within this of 1 gets exactly 1


def resolve_projected_shrinkage(
    shrinkage: float | str, n_middle: np.ndarray, n_conditions: int
) -> np.ndarray:
    """Per-symbol shrinkage ``s_x`` of the projected weighting; ``"auto"`` is ``10 / (10 + N_x / k'²)``.

    The analogue of :func:`resolve_shrinkage` (one half when the matrix being
    estimated has 10 counts per cell): ``Σ_x`` is k' × k' and is estimated from the
    ``N_x`` triples whose middle symbol is x, so a rare symbol's factor (low rank,
    or built from a handful of samples) is shrunk almost entirely to ``τ_x I``,
    i.e. to θ_spec's W = I, and a frequent one is used nearly as estimated. Under
    ``"auto"`` a shrinkage above ``1 - 10⁻³`` (fewer than k'²/100 samples for k'²
    cells) is rounded to exactly 1: such a symbol's operator is θ_spec's, which the
    estimator then gets in closed form, so on a large alphabet only the frequent
    symbols cost a weighted solve.

    Examples
    --------
    >>> resolve_projected_shrinkage("auto", np.array([0.0, 3.0, 4000.0]), 20).round(3).tolist()
    [1.0, 1.0, 0.5]
    """
    n_middle = np.asarray(n_middle, dtype=np.float64)
    if isinstance(shrinkage, str) and shrinkage == "auto":
        s = 10.0 / (10.0 + n_middle / n_conditions**2)
        return np.where(s > 1.0 - SHRINK_TO_ONE, 1.0, s)
    s = resolve_shrinkage(shrinkage, 1, 1.0)
    return np.full(n_middle.shape, s)


@dataclass(frozen=True)
class ProjectedWeighting:
    """Kronecker-factored weighting ``W_x = τ (Σ^(i) ⊗ Σ_x)⁻¹`` of the projected conditions.

    The projected moment conditions of symbol x are the k × k' matrix
    ``G_x = A_x - B̃_x M`` (see :class:`streamspec.core.mestimator.MEstimator`); the
    per-sample moment is ``a_t q_{x1}ᵀ`` with ``a_t = u_{x3} - B̃_x u_x`` for the
    triples whose middle symbol is x (the cross-symbol samples, x2 ≠ x, have
    ``a_t = -B̃_x u_{x2}``: relative size O(Pr(x)), dropped). With a Kronecker
    covariance ``Σ^(i) ⊗ Σ_x`` the GLS solution only depends on the j-side factor

        Σ_x = (1/N) Σ_{t: x2 = x} w_t ‖u_{x3} - B̃_x u_x‖² q_{x1} q_{x1}ᵀ,

    which is stored lazily as the sparse residual-weighted pair counts
    ``C[x, x1] = (1/N) Σ_{x3} c(x1, x, x3) ‖u_{x3} - B̃_x u_x‖²`` plus Q: O(pairs)
    memory. Blocks of ``Σ_x`` are built on demand (:meth:`factor`) from those pair
    sums, O(pairs · k'²) time for all symbols ("per_symbol"), O(pairs · k') for
    the diagonal, and shrunk to ``(1 - s_x) Σ_x + (s_x + ridge) τ_x I`` with
    ``τ_x = tr(Σ_x) / k'``. ``τ`` (the mean of ``τ_x`` over the observed symbols)
    scales W so that the loss has the units of the identity weighting's.
    """

    mode: str
    Q: np.ndarray | None = None
    C: object | None = None  # scipy.sparse csr (n, n): C[x2, x1]
    shrink: np.ndarray | None = None  # s_x, (n,)
    tau_x: np.ndarray | None = None  # (n,)
    tau: float = 1.0
    ridge: float = 0.0

    def factor(self, lo: int, hi: int) -> np.ndarray:
        """Shrunk ``Σ_x`` for symbols ``lo..hi-1``: (b, k', k') ("per_symbol") or (b, k') diagonals."""
        return self.factor_of(np.arange(lo, hi))

    def factor_of(self, symbols: np.ndarray) -> np.ndarray:
        """Shrunk ``Σ_x`` for the given symbols: (b, k', k') ("per_symbol") or (b, k') diagonals.

        O(pairs of those symbols · k'²) ("per_symbol") or O(pairs · k') (diagonal).
        """
        symbols = np.asarray(symbols, dtype=np.int64)
        kp = self.Q.shape[1]
        b = symbols.size
        tau_x = self.tau_x[symbols]
        s = self.shrink[symbols]
        live = tau_x > 0
        C = self.C[symbols]
        if self.mode == "diagonal":
            d = np.asarray(C @ (self.Q**2))
            out = (1 - s)[:, None] * d + ((s + self.ridge) * tau_x)[:, None]
            out[~live] = 1.0
            return out
        out = np.zeros((b, kp, kp))
        indptr, indices, data = C.indptr, C.indices, C.data
        counts = np.diff(indptr)
        # why: a symbol with many pairs gets one BLAS product Q_Jᵀ diag(C) Q_J (the same
        # flops as summing outer products, ~20x faster); the others are summed in blocks
        many = counts >= _GEMM_PAIRS
        for r in np.flatnonzero(many).tolist():
            lo, hi = indptr[r], indptr[r + 1]
            q = self.Q[indices[lo:hi]]
            out[r] = (q * data[lo:hi, None]).T @ q
        keep = np.repeat(~many, counts)
        rows = np.repeat(np.arange(b), counts)[keep]
        cols, vals = indices[keep], data[keep]
        p1 = rows.size
        step = max(1, _SCRATCH // (kp * kp))
        for a in range(0, p1, step):  # blocks of (x2, x1) pairs: scratch O(step · k'²)
            z = min(p1, a + step)
            q = self.Q[cols[a:z]]
            outer = (q * vals[a:z, None])[:, :, None] * q[:, None, :]
            r = rows[a:z]
            seg = np.flatnonzero(np.concatenate(([True], r[1:] != r[:-1])))
            out[r[seg]] += np.add.reduceat(outer, seg, axis=0)
        # rare symbols (few distinct x1) never come here in the estimator: it applies
        # their Σ_x⁻¹ by Woodbury (streamspec.core.mestimator._sigma_groups)
        out *= (1 - s)[:, None, None]
        idx = np.arange(kp)
        out[:, idx, idx] += ((s + self.ridge) * tau_x)[:, None]
        out[~live] = np.eye(kp)
        return out

    def solve(self, lo: int, hi: int, R: np.ndarray, factor: np.ndarray | None = None) -> np.ndarray:
        """``Σ_x⁻¹ R[x]`` for symbols lo..hi-1, R of shape (b, k', m) (unscaled by τ)."""
        if self.mode == "identity":
            return R
        F = self.factor(lo, hi) if factor is None else factor
        if self.mode == "diagonal":
            return R / F[:, :, None]
        return np.linalg.solve(F, R)


def projected_weighting(
    mode: str,
    triples,
    U: np.ndarray,
    Q: np.ndarray,
    B: np.ndarray | None,
    shrinkage: float | str = "auto",
    ridge: float = 1e-6,
) -> ProjectedWeighting:
    """The weighting ``mode`` of the projected conditions at operators ``B[x]`` (k × k each).

    ``triples`` is a :class:`~streamspec.core.triples.Triples`, U (n, k) and Q (n, k') the
    bases of the conditions. Costs: O(n · k² + P · k) for the residual norms (one per
    distinct pair (x2, x3), P pairs), O(nnz) for the pair sums ``C[x2, x1]``, O(n) for the
    per-symbol scales; memory O(nnz + n · k'). Nothing of size n² is formed.

    Examples
    --------
    A symbol whose samples all have the same residual gets ``Σ_x ∝ Σ_j Pr(x, j) q_j q_jᵀ``:

    >>> from streamspec.core.triples import Triples
    >>> t = Triples.from_arrays(2, x1=[0, 1, 1], x2=[0, 0, 0], x3=[1, 1, 1])
    >>> W = projected_weighting("per_symbol", t, np.eye(2), np.eye(2), np.zeros((2, 2, 2)), shrinkage=0.0,
    ...                         ridge=0.0)
    >>> (W.factor(0, 1)[0] * 3).round(6).tolist()
    [[1.0, 0.0], [0.0, 2.0]]
    """
    import scipy.sparse as sp

    if mode not in PROJECTED_WEIGHTINGS:
        raise ValueError(
            f"weighting must be one of {PROJECTED_WEIGHTINGS} in the projected formulation, got {mode!r} "
            "('exact' couples all symbols: use formulation='dense')"
        )
    if mode == "identity":
        return ProjectedWeighting(mode)
    if B is None:
        raise ValueError(f"the {mode!r} weighting needs the operators B")
    if not ridge >= 0:
        raise ValueError(f"ridge must be >= 0, got {ridge!r}")
    n, kp = triples.n, Q.shape[1]
    N = triples.total
    x1, x2, x3 = triples.x1, triples.x2, triples.x3
    # residual norm per distinct (x2, x3) pair: ‖u_{x3} - B̃_{x2} u_{x2}‖²
    pair = triples.codes >> 21
    new = np.concatenate(([True], pair[1:] != pair[:-1]))
    starts = np.flatnonzero(new)
    pid = np.cumsum(new) - 1
    px2, px3 = x2[starts], x3[starts]
    # why: B̃_{x2} u_{x2} depends on x2 alone: n products, not one per pair
    Bu = np.einsum("xab,xb->xa", B, U)
    res = np.empty(starts.size)
    step = max(1, _SCRATCH // max(1, U.shape[1]))
    for a in range(0, starts.size, step):
        z = min(starts.size, a + step)
        r = U[px3[a:z]] - Bu[px2[a:z]]
        res[a:z] = (r * r).sum(axis=1)
    w = triples.weights * res[pid] / N
    C = sp.csr_matrix((w, (x2, x1)), shape=(n, n))
    C.sum_duplicates()
    C.sort_indices()
    n_middle = np.bincount(x2, weights=triples.weights, minlength=n)
    shrink = resolve_projected_shrinkage(shrinkage, n_middle, kp)
    tau_x = np.asarray(C @ (Q**2).sum(axis=1)).ravel() / kp
    live = tau_x > 0
    tau = float(tau_x[live].mean()) if live.any() else 1.0
    return ProjectedWeighting(mode, Q=Q, C=C, shrink=shrink, tau_x=tau_x, tau=tau, ridge=float(ridge))
