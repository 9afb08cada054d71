"""Weightings of the projected formulation: per-symbol j-side factors ``Σ_x`` (k' × k').

The conditions of symbol x are a k × k' matrix; their covariance is taken
Kronecker-factored, ``Σ^(i) ⊗ Σ_x``, and only the k' × k' factor ``Σ_x`` matters
to the GLS solution. Each mode is a small class sharing the
:class:`ProjectedWeighting` interface (the factor ``Σ_x`` of given symbols, its
inverse applied to right-hand sides group by group, and the scale τ), built by
:func:`projected_weighting` from the mode's name. Costs with nnz distinct triples
and P distinct (x2, x1) pairs: ``"identity"`` free; ``"diagonal"`` O(nnz · k + P · k');
``"per_symbol"`` O(nnz · k + P · k'² + n · k'³) per re-estimation, memory
O(nnz + n · k') plus one block of ``Σ_x`` at a time. ``"exact"`` couples the symbols
and has no projected counterpart.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from scipy.linalg import lapack

from streamspec.core.pair_index import PairIndex
from streamspec.core.sigma_inverse import (
    DenseSigmaInverse,
    DiagonalSigmaInverse,
    IdentitySigmaInverse,
    ScaleSigmaInverse,
    SigmaInverse,
    WoodburySigmaInverse,
)
from streamspec.core.weighting import resolve_shrinkage

__all__ = [
    "PROJECTED_WEIGHTINGS",
    "PROJECTED_WEIGHTING_CLASSES",
    "ProjectedWeighting",
    "ProjectedIdentityWeighting",
    "ProjectedDiagonalWeighting",
    "ProjectedPerSymbolWeighting",
    "projected_weighting",
    "residual_pair_sums",
    "resolve_projected_shrinkage",
    "SHRINK_TO_ONE",
    "SYMBOL_BLOCK",
]

PROJECTED_WEIGHTINGS = ("identity", "diagonal", "per_symbol")
SYMBOL_BLOCK = 1 << 22  # floats of Σ_x (k'² each) built at once by the projected formulation
GEMM_PAIRS = 32  # Σ_x of a symbol with this many (x2, x1) pairs or more: one matrix product
SCRATCH = 1 << 22  # floats of scratch (32 MiB) a block of Σ_x may take
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




class ProjectedWeighting(ABC):
    """Kronecker-factored weighting ``W_x = τ (Σ^(i) ⊗ Σ_x)⁻¹`` of the projected conditions.

    The projected moment conditions of symbol x are the k × k' matrix
    ``G_x = A_x - B̃_x M`` (see :class:`streamspec.core.mestimator.MEstimator`). With a
    Kronecker covariance ``Σ^(i) ⊗ Σ_x`` the GLS solution only depends on the j-side
    factor ``Σ_x``; what a solver needs is ``Σ_x⁻¹`` applied to right-hand sides,
    group by group (:meth:`sigma_groups`), and the scale ``tau`` that gives the loss
    the units of the identity weighting's.
    """

    mode: ClassVar[str]
    tau: float

    @abstractmethod
    def sigma_groups(self, symbols: np.ndarray, kp: int) -> Iterator[tuple[np.ndarray, SigmaInverse]]:
        """``(symbols, Σ⁻¹)`` pairs covering every symbol of ``symbols``, one form of Σ_x⁻¹ each.

        Groups are bounded (:data:`SYMBOL_BLOCK` floats of Σ_x), so Σ_x never exists for
        all symbols at once.
        """

    @abstractmethod
    def solve(self, lo: int, hi: int, R: np.ndarray, factor: np.ndarray | None = None) -> np.ndarray:
        """``Σ_x⁻¹ R[x]`` for symbols lo..hi-1, R of shape (b, k', m) (unscaled by τ)."""


@dataclass(frozen=True)
class ProjectedIdentityWeighting(ProjectedWeighting):
    """W = I: θ_spec's criterion. Free."""

    tau: float = 1.0
    mode: ClassVar[str] = "identity"

    @classmethod
    def build(cls, triples: Any, U: np.ndarray, Q: np.ndarray, B: np.ndarray | None, *,
              shrinkage: float | str, ridge: float, index: Any = None, symbols: Any = None,
              total: float | None = None, current: Any = None) -> ProjectedIdentityWeighting:
        # why: W = I depends on neither the counts nor the operators, so nothing is checked
        return cls()

    def sigma_groups(self, symbols: np.ndarray, kp: int) -> Iterator[tuple[np.ndarray, SigmaInverse]]:
        step = max(1, SYMBOL_BLOCK // kp)
        for lo in range(0, symbols.size, step):
            yield symbols[lo : lo + step], IdentitySigmaInverse()

    def solve(self, lo: int, hi: int, R: np.ndarray, factor: np.ndarray | None = None) -> np.ndarray:
        return R


@dataclass(frozen=True)
class FactoredProjectedWeighting(ProjectedWeighting):
    """A weighting built from the residual-weighted pair counts (the diagonal and per-symbol ones).

    The per-sample moment of symbol x is ``a_t q_{x1}ᵀ`` with ``a_t = u_{x3} - B̃_x u_x``
    for the triples whose middle symbol is x (the cross-symbol samples, x2 ≠ x, have
    ``a_t = -B̃_x u_{x2}``: relative size O(Pr(x)), dropped), so

        Σ_x = (1/N) Σ_{t: x2 = x} w_t ‖u_{x3} - B̃_x u_x‖² q_{x1} q_{x1}ᵀ,

    stored lazily as the sparse pair sums ``C[x, x1] = (1/N) Σ_{x3} c(x1, x, x3)
    ‖u_{x3} - B̃_x u_x‖²`` plus Q: O(pairs) memory. Blocks of ``Σ_x`` are built on
    demand (:meth:`factor_of`) and shrunk to ``(1 - s_x) Σ_x + (s_x + ridge) τ_x I`` with
    ``τ_x = tr(Σ_x) / k'``; ``tau`` is the mean of ``τ_x`` over the observed symbols.
    """

    Q: np.ndarray
    C: Any  # scipy.sparse csr (n, n): C[x2, x1]
    shrink: np.ndarray  # s_x, (n,)
    tau_x: np.ndarray  # (n,)
    tau: float
    ridge: float

    @classmethod
    def build(cls, triples: Any, U: np.ndarray, Q: np.ndarray, B: np.ndarray | None, *,
              shrinkage: float | str, ridge: float, index: PairIndex | None = None,
              symbols: np.ndarray | None = None, total: float | None = None,
              current: np.ndarray | None = None) -> FactoredProjectedWeighting:
        """This mode at operators B (k × k each), for the middle symbols ``symbols`` (None: all);
        O(n · k² + P · k + nnz), memory O(nnz + n · k') (:func:`residual_pair_sums`; with
        ``current``, the windows' rows, O(P · k²))."""
        if B is None:
            raise ValueError(f"the {cls.mode!r} weighting needs the operators B")
        if not ridge >= 0:
            raise ValueError(f"ridge must be >= 0, got {ridge!r}")
        kp = Q.shape[1]
        C, n_middle = residual_pair_sums(triples, U, B, index=index, symbols=symbols, total=total,
                                         current=current)
        shrink = resolve_projected_shrinkage(shrinkage, n_middle, kp)
        tau_x = np.asarray(C @ np.einsum("ij,ij->i", Q, Q)).ravel() / kp
        live = tau_x > 0
        tau = float(tau_x[live].mean()) if live.any() else 1.0
        return cls(Q=Q, C=C, shrink=shrink, tau_x=tau_x, tau=tau, ridge=float(ridge))

    def factor(self, lo: int, hi: int) -> np.ndarray:
        """Shrunk ``Σ_x`` for symbols ``lo..hi-1`` (see :meth:`factor_of`)."""
        return self.factor_of(np.arange(lo, hi))

    @abstractmethod
    def factor_of(self, symbols: np.ndarray) -> np.ndarray:
        """Shrunk ``Σ_x`` of the given symbols: (b, k', k') or, diagonal, (b, k')."""

    def solve(self, lo: int, hi: int, R: np.ndarray, factor: np.ndarray | None = None) -> np.ndarray:
        F = self.factor(lo, hi) if factor is None else factor
        return self.solve_with(F, R)

    @abstractmethod
    def solve_with(self, F: np.ndarray, R: np.ndarray) -> np.ndarray:
        """``F⁻¹ R`` for factors F as :meth:`factor_of` returns them."""


@dataclass(frozen=True)
class ProjectedDiagonalWeighting(FactoredProjectedWeighting):
    """Diagonal ``Σ_x``: O(pairs · k') for all symbols.

    It equals θ_spec exactly in the basis of the estimator (``M = [Σ_k, 0]``: a diagonal
    ``Σ_x`` cannot couple the extra conditions to the first k); kept for completeness.
    """

    mode: ClassVar[str] = "diagonal"

    def factor_of(self, symbols: np.ndarray) -> np.ndarray:
        """The diagonals of the shrunk ``Σ_x``, (b, k'); O(pairs of those symbols · k')."""
        symbols = np.asarray(symbols, dtype=np.int64)
        tau_x, s = self.tau_x[symbols], self.shrink[symbols]
        d = np.asarray(self.C[symbols] @ (self.Q**2))
        out = (1 - s)[:, None] * d + ((s + self.ridge) * tau_x)[:, None]
        out[~(tau_x > 0)] = 1.0
        return out

    def solve_with(self, F: np.ndarray, R: np.ndarray) -> np.ndarray:
        return R / F[:, :, None]

    def sigma_groups(self, symbols: np.ndarray, kp: int) -> Iterator[tuple[np.ndarray, SigmaInverse]]:
        step = max(1, SYMBOL_BLOCK // kp)
        for lo in range(0, symbols.size, step):
            idx = symbols[lo : lo + step]
            yield idx, DiagonalSigmaInverse(1.0 / self.factor_of(idx))


@dataclass(frozen=True)
class ProjectedPerSymbolWeighting(FactoredProjectedWeighting):
    """Full ``Σ_x`` per symbol: O(pairs · k'²) to build for all symbols, applied in the
    cheapest form per symbol (scale, Woodbury or dense inverse, :meth:`sigma_groups`)."""

    mode: ClassVar[str] = "per_symbol"

    def factor_of(self, symbols: np.ndarray) -> np.ndarray:
        """The shrunk ``Σ_x``, (b, k', k'); O(pairs of those symbols · k'²)."""
        symbols = np.asarray(symbols, dtype=np.int64)
        kp = self.Q.shape[1]
        b = symbols.size
        tau_x, s = self.tau_x[symbols], self.shrink[symbols]
        C = self.C[symbols]
        out = np.zeros((b, kp, kp))
        indptr, indices, data = C.indptr, C.indices, C.data
        counts = np.diff(indptr)
        # why: a symbol with many pairs gets one BLAS product Q_Jᵀ diag(C) Q_J (the same
        # flops as summing outer products, ~20x faster); the others are summed in blocks
        many = counts >= GEMM_PAIRS
        for r in np.flatnonzero(many).tolist():
            lo, hi = indptr[r], indptr[r + 1]
            q = self.Q[indices[lo:hi]] * np.sqrt(data[lo:hi])[:, None]
            out[r] = q.T @ q  # one symmetric rank-k update (BLAS syrk: half the flops)
        keep = np.repeat(~many, counts)
        rows = np.repeat(np.arange(b), counts)[keep]
        cols, vals = indices[keep], data[keep]
        p1 = rows.size
        step = max(1, SCRATCH // (kp * kp))
        for a in range(0, p1, step):  # blocks of (x2, x1) pairs: scratch O(step · k'²)
            z = min(p1, a + step)
            q = self.Q[cols[a:z]]
            outer = (q * vals[a:z, None])[:, :, None] * q[:, None, :]
            r = rows[a:z]
            seg = np.flatnonzero(np.concatenate(([True], r[1:] != r[:-1])))
            out[r[seg]] += np.add.reduceat(outer, seg, axis=0)
        # rare symbols (few distinct x1) never come here in the estimator: it applies
        # their Σ_x⁻¹ by Woodbury (:meth:`sigma_groups`)
        out *= (1 - s)[:, None, None]
        idx = np.arange(kp)
        out[:, idx, idx] += ((s + self.ridge) * tau_x)[:, None]
        out[~(tau_x > 0)] = np.eye(kp)
        return out

    def solve_with(self, F: np.ndarray, R: np.ndarray) -> np.ndarray:
        return np.linalg.solve(F, R)

    def sigma_groups(self, symbols: np.ndarray, kp: int) -> Iterator[tuple[np.ndarray, SigmaInverse]]:
        """A symbol whose pair sums ``C[x, ·]`` have m entries has
        ``Σ_x = c_x I + (1 - s_x) Q_Jᵀ diag(C[x, J]) Q_J``, the identity plus rank m.

        Most symbols of a large alphabet are rare (m ≪ k'): they are solved by Woodbury,
        O(m k' r + m³) each, batched by m rounded up to a power of two (zero rows pad V);
        only the symbols with m > k'/2 get a dense k' × k' inverse, O(k'³). So a step
        costs O(pairs · k' · k + n_dense · k'³) rather than O(n · k'³).
        """
        m = np.diff(self.C.indptr)[symbols]
        live = self.tau_x[symbols] > 0
        shrink = self.shrink[symbols]
        c = np.where(live, (shrink + self.ridge) * self.tau_x[symbols], 1.0)
        flat = ~live | (m == 0) | (shrink >= 1.0)
        idx = np.flatnonzero(flat)
        if idx.size:
            yield symbols[idx], ScaleSigmaInverse(1.0 / c[idx])
        low_rank = ~flat & (2 * m <= kp) & (c > 0)
        size = np.where(low_rank, 1 << np.ceil(np.log2(np.maximum(m, 1))).astype(np.int64), 0)
        for mm in np.unique(size[low_rank]):
            members = np.flatnonzero(size == mm)
            step = max(1, SYMBOL_BLOCK // (int(mm) * kp + int(mm) ** 2))
            for a in range(0, members.size, step):
                g = members[a : a + step]
                yield symbols[g], self.woodbury(symbols[g], int(mm), c[g])
        dense = np.flatnonzero(~flat & ~low_rank)
        step = max(1, SYMBOL_BLOCK // (kp * kp))
        for a in range(0, dense.size, step):
            g = symbols[dense[a : a + step]]
            yield g, self.dense_inverse(g)

    def woodbury(self, g: np.ndarray, mm: int, c: np.ndarray) -> WoodburySigmaInverse:
        """Woodbury form of ``Σ_x⁻¹`` for symbols ``g`` with at most ``mm`` pairs each; O(b mm² k')."""
        C, kp = self.C, self.Q.shape[1]
        V = np.zeros((g.size, mm, kp))
        for r, x in enumerate(g.tolist()):
            lo, hi = C.indptr[x], C.indptr[x + 1]
            scale = np.sqrt((1 - self.shrink[x]) * C.data[lo:hi])
            V[r, : hi - lo] = scale[:, None] * self.Q[C.indices[lo:hi]]
        inner = V @ V.transpose(0, 2, 1)
        inner[:, np.arange(mm), np.arange(mm)] += c[:, None]
        return WoodburySigmaInverse(np.linalg.inv(inner), V=V, c=c)

    def dense_inverse(self, g: np.ndarray) -> DenseSigmaInverse:
        """Explicit ``Σ_x⁻¹`` of symbols ``g``; O(b k'³).

        Through Cholesky (LAPACK ``potrf`` and ``potri``, half the flops of a general
        inverse; 0.47 against 0.73 s for 1,000 matrices of 100 × 100), a symbol whose
        ``Σ_x`` is not positive definite (shrinkage and ridge 0) by a pseudo-inverse.
        """
        F = self.factor_of(g)
        # why: explicit inverses, then only matrix products (the GLS step, the loss before
        # and after all reuse them); Σ_x is positive definite once shrunk
        out = np.empty_like(F)
        failed = []
        for i in range(F.shape[0]):
            c, info = lapack.dpotrf(F[i], lower=0, clean=0)
            if info == 0:
                c, info = lapack.dpotri(c, lower=0)
            if info != 0:
                failed.append(i)
            out[i] = c  # its upper triangle holds Σ_x⁻¹
        iu, ju = np.triu_indices(F.shape[1], 1)
        out[:, ju, iu] = out[:, iu, ju]  # mirrored below the diagonal, all symbols at once
        for i in failed:
            out[i] = np.linalg.pinv(F[i], hermitian=True)
        return DenseSigmaInverse(out)


PROJECTED_WEIGHTING_CLASSES: dict[str, type[ProjectedWeighting]] = {
    cls.mode: cls
    for cls in (ProjectedIdentityWeighting, ProjectedDiagonalWeighting, ProjectedPerSymbolWeighting)
}


def residual_pair_sums(triples: Any, U: np.ndarray, B: np.ndarray, index: PairIndex | None = None,
                       symbols: np.ndarray | None = None, total: float | None = None,
                       current: np.ndarray | None = None) -> tuple[Any, np.ndarray]:
    """``(C, n_middle)``: the residual-weighted pair sums ``C[x2, x1]`` (csr, n × n) and the
    weight of the triples whose middle symbol is x.

    ``C[x, x1] = (1/N) Σ_{x3} c(x1, x, x3) ‖u_{x3} - B̃_x u_x‖²``, for the middle symbols
    ``symbols`` only (sorted; None: all), the other rows empty. ``index`` is the triples'
    :class:`~streamspec.core.pair_index.PairIndex` (built if not given), ``total`` the N
    divided by (None: the triples' total; a warm refit passes the total of all the counts).
    Costs: O(n_sym · k² + P_sym · k) for the residual norms (one per distinct pair
    (x2, x3) of those symbols), O(nnz) for the sums; nothing of size n² is formed.

    ``current``: over windows (docs/math.md section 11), the row of U of each distinct pair's
    samples in the second moment, the id of the current window ``(x, f_1..f_{L-1})`` (the
    pair (x, future) determines it): the residual is then ``u_f - B̃_x u_current``, one
    product per pair, O(P_sym · k²). None: ``u_{x2}`` (triples; at L = 1 the ids are x2).
    """
    idx = index if index is not None else PairIndex(triples)
    N = triples.total if total is None else float(total)
    mp = idx.middle_pairs
    if symbols is None:
        symbols = np.arange(idx.n)
        pairs = np.arange(idx.n_pairs)
    else:
        symbols = np.asarray(symbols, dtype=np.int64)
        sizes = mp[symbols + 1] - mp[symbols]
        pairs = np.repeat(mp[symbols] - np.concatenate(([0], np.cumsum(sizes)[:-1])), sizes)
        pairs += np.arange(int(sizes.sum()))
    res = np.zeros(idx.n_pairs)
    k = U.shape[1]
    if current is not None:  # windows: B̃_x u_w with w the pair's current window
        step = max(1, SCRATCH // max(1, k * k))
        for a in range(0, pairs.size, step):
            p = pairs[a : a + step]
            r = U[idx.px3[p]] - np.einsum("pab,pb->pa", B[idx.px2[p]], U[current[p]])
            res[p] = np.einsum("ij,ij->i", r, r)
    else:
        # why: B̃_{x2} u_{x2} depends on x2 alone: one product per symbol, not one per pair
        Bu = np.zeros((idx.n, k))
        for a in range(0, symbols.size, 4096):  # blocks: no copy of B's rows at once
            g = symbols[a : a + 4096]
            Bu[g] = np.einsum("xab,xb->xa", B[g], U[g])
        step = max(1, SCRATCH // max(1, k))
        for a in range(0, pairs.size, step):
            p = pairs[a : a + step]
            r = U[idx.px3[p]] - Bu[idx.px2[p]]
            res[p] = np.einsum("ij,ij->i", r, r)
    w = idx.weights * np.repeat(res, np.diff(idx.pair_starts)) / N
    return idx.c21(w), idx.middle_counts()


def projected_weighting(
    mode: str,
    triples: Any,
    U: np.ndarray,
    Q: np.ndarray,
    B: np.ndarray | None,
    shrinkage: float | str = "auto",
    ridge: float = 1e-6,
    index: PairIndex | None = None,
    symbols: np.ndarray | None = None,
    total: float | None = None,
    current: np.ndarray | None = None,
) -> ProjectedWeighting:
    """The weighting ``mode`` of the projected conditions at operators ``B[x]`` (k × k each).

    ``triples`` is a :class:`~streamspec.core.triples.Triples`, U (n, k) and Q (n, k') the
    bases of the conditions; ``index`` its :class:`~streamspec.core.pair_index.PairIndex` when
    the caller has one, ``symbols`` the middle symbols it is needed for (None: all; the
    others get no data, so their ``Σ_x`` is the identity) and ``total`` the N the sums are
    divided by (None: the triples' total), ``current`` the windows' rows of each pair
    (:func:`residual_pair_sums`; None for triples). Costs: O(n · k² + P · k) for the residual norms (one per
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
    if mode not in PROJECTED_WEIGHTING_CLASSES:
        raise ValueError(
            f"weighting must be one of {PROJECTED_WEIGHTINGS} in the projected formulation, got {mode!r} "
            "('exact' couples all symbols: use formulation='dense')"
        )
    return PROJECTED_WEIGHTING_CLASSES[mode].build(triples, U, Q, B, shrinkage=shrinkage, ridge=ridge,
                                                   index=index, symbols=symbols, total=total,
                                                   current=current)
