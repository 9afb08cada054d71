"""The projected formulation of θ_M: per-symbol GLS steps under ``Σ_x⁻¹`` (docs/math.md section 6).

:class:`ProjectedFit` is the formulation's fit, in the named steps that
:class:`~streamspec.core.mestimator.MEstimator` runs (:mod:`streamspec.core.fit_steps`);
the functions below are its pieces: one GLS step and the loss under a weighting.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from streamspec.core.factors import MFactors, factors_of
from streamspec.core.fit_data import EMPTY_COUNTS
from streamspec.core.fit_steps import FitSteps
from streamspec.core.model import ObservableOperatorModel
from streamspec.core.progress import Progress
from streamspec.core.projected_weighting import (
    SYMBOL_BLOCK,
    ProjectedWeighting,
    projected_weighting,
    resolve_projected_shrinkage,
)
from streamspec.core.sigma_inverse import SigmaInverse
from streamspec.core.solvers import gls_operators
from streamspec.core.spectral import check_rank, select_rank_by_spectrum
from streamspec.core.subspace import DENSE_SVD_MAX, project_triples, top_singular
from streamspec.core.triples import Triples

__all__ = ["SigmaInverse", "sigma_groups", "projected_step", "projected_loss", "identity_loss",
           "SYMBOL_BLOCK", "ProjectedFit", "projected_sizes"]

_FULL_CONDITIONS_MAX = 1 << 24  # floats of A (n·k·k') kept for every symbol on small problems
_AUTO_RANK_MAX = 100  # rank="auto" above DENSE_SVD_MAX symbols: among the top 100 (MEstimator)


def sigma_groups(W: ProjectedWeighting, symbols: np.ndarray, kp: int
                 ) -> Iterator[tuple[np.ndarray, SigmaInverse]]:
    """``(symbols, Σ⁻¹)`` pairs covering every symbol, each group sharing one form of Σ_x⁻¹.

    W chooses the forms (:meth:`~streamspec.core.projected_weighting.ProjectedWeighting.sigma_groups`):
    W = I, diagonals, or, per symbol, a scale, Woodbury for rare symbols and dense
    inverses for frequent ones. O(block · k'²) scratch at a time.
    """
    return W.sigma_groups(symbols, kp)


def projected_step(W: ProjectedWeighting, symbols: np.ndarray, A: np.ndarray, M: np.ndarray,
                    previous: np.ndarray | None):
    """GLS operators of ``symbols`` under W, and W's loss at ``previous`` (None if not given)
    and at them. ``A`` and ``previous`` hold one row per symbol of ``symbols`` (sorted).

    One group of symbols at a time (:func:`sigma_groups`), so ``Σ_x`` never exists for
    all symbols at once: O(block · k'²) scratch.
    """
    _, k, kp = A.shape
    out = np.empty((symbols.size, k, k))
    before, after = 0.0, 0.0
    for g, inverse in sigma_groups(W, symbols, kp):
        rows = np.searchsorted(symbols, g)
        Ag = A[rows]
        # one application for every right-hand side: Σ⁻¹Mᵀ, Σ⁻¹Aᵀ (and Σ⁻¹G_prevᵀ); then
        # Σ⁻¹G_newᵀ = Σ⁻¹Aᵀ - Σ⁻¹Mᵀ B̃ᵀ needs no further solve
        rhs = [np.broadcast_to(M.T, (g.size, kp, k)), Ag.transpose(0, 2, 1)]
        if previous is not None:
            G_prev = Ag - previous[rows] @ M
            rhs.append(G_prev.transpose(0, 2, 1))
        Z = inverse.apply(np.concatenate(rhs, axis=2))
        Y = Z[:, :, :k]
        Bb = gls_operators(Ag, M, Y)
        out[rows] = Bb
        G_new = Ag - Bb @ M
        after += W.tau * float(np.einsum("bak,bka->", G_new, Z[:, :, k : 2 * k] - Y @ Bb.transpose(0, 2, 1)))
        if previous is not None:
            before += W.tau * float(np.einsum("bak,bka->", G_prev, Z[:, :, 2 * k :]))
    return out, (before if previous is not None else None), after


def projected_loss(W: ProjectedWeighting, symbols: np.ndarray, A: np.ndarray, M: np.ndarray,
                    ops: np.ndarray) -> float:
    """``Σ_x τ tr(G_x Σ_x⁻¹ G_xᵀ)`` over ``symbols`` (rows of A and ops); the cost of one step."""
    total = 0.0
    for g, inverse in sigma_groups(W, symbols, A.shape[2]):
        rows = np.searchsorted(symbols, g)
        G = A[rows] - ops[rows] @ M
        total += W.tau * float(np.einsum("bak,bka->", G, inverse.apply(G.transpose(0, 2, 1))))
    return total


def identity_loss(A: np.ndarray, M: np.ndarray, ops: np.ndarray) -> float:
    """The loss under W = I, ``Σ_x ‖A_x - B̃_x M‖²`` over the rows of A."""
    return float(sum(np.square(A[a : a + 4096] - ops[a : a + 4096] @ M).sum()
                     for a in range(0, A.shape[0], 4096)))


# ---------------------------------------------------------------------- the fit, step by step


def projected_sizes(rank: int | str, n_conditions: int | None, P21, N: float, n: int
                    ) -> tuple[int, int]:
    """The rank k and the number k' of conditions per symbol for these counts.

    ``rank="auto"``: the singular values of P21 above ``N^(-1/2)`` (above
    :data:`~streamspec.core.subspace.DENSE_SVD_MAX` symbols, among the top 100 by
    ARPACK, O(nnz·100) per iteration; else a dense SVD, O(n³)).
    """
    if not (isinstance(rank, str) and rank == "auto"):
        k = check_rank(rank, n)
    else:
        k = select_rank_by_spectrum(P21, N, max_rank=_AUTO_RANK_MAX)
    kmax = n if n <= DENSE_SVD_MAX else n - 1  # ARPACK needs k' < n
    kp = max(k, min(kmax, n_conditions if n_conditions is not None else 2 * k))
    if k > kmax:
        raise ValueError(
            f"rank {k} on {n} symbols: above {DENSE_SVD_MAX} symbols the rank must be below "
            "the alphabet size"
        )
    return k, kp


class ProjectedFit(FitSteps):
    """One projected fit: the k × k' conditions ``G_x = A_x - B̃_x M`` solved per symbol.

    Costs are those of :class:`~streamspec.core.mestimator.MEstimator`'s table
    (projected rows): the SVD and ``A_x`` once, then one GLS step per outer iteration.

    Parameters
    ----------
    est
        The estimator whose settings are read (never written): ``rank``,
        ``n_conditions``, ``weighting``, ``shrinkage``, ``ridge``, ``tol``, ``filter``,
        ``window``, ``min_proba``.
    max_outer
        Outer iterations at most (1 under the identity weighting, whose solution does
        not depend on the operators W is estimated at).
    triples, labels
        The counts and the symbols' labels (or None).
    bases
        A cache of ``(U, Q)`` by ``(id(triples), k')``, shared by fits of the same counts
        (θ_M and θ_spec under the backoff), or None.
    scored_only
        The model's predictions alone are used (the backoff's 90%): the weighting is
        not re-estimated at the solution.
    """

    def __init__(self, est: Any, max_outer: int, triples: Triples, labels: list | None,
                 bases: dict | None = None, scored_only: bool = False):
        super().__init__(est, 1 if est.weighting == "identity" else max_outer)
        self.triples, self.labels, self.bases, self.scored_only = triples, labels, bases, scored_only
        self.history: list = []
        self.rejected: list = []
        self.rejected_sweeps: list = []

    # ------------------------------------------------------------------ prepare

    def prepare(self) -> None:
        """Basis (U, Q), ``M = Uᵀ P21 Q``, b1, b∞, the conditions A_x and θ_spec's operators."""
        triples = self.triples
        n, N = triples.n, triples.total
        if not N > 0:
            raise ValueError(EMPTY_COUNTS)
        P1, P21 = triples.P1(), triples.P21()
        k, kp = projected_sizes(self.est.rank, self.est.n_conditions, P21, N, n)
        U, Q = self._basis(P21, kp)
        U = np.ascontiguousarray(U[:, :k])
        M = U.T @ np.asarray(P21 @ Q)  # (k, k') = [Σ_k, 0] up to rounding
        self.b1 = U.T @ P1
        self.binf = np.linalg.pinv(np.asarray(P21.T @ U)) @ P1
        self.n, self.k, self.kp, self.U, self.Q, self.M = n, k, kp, U, Q, M
        self.active = self._weighted_symbols()
        # why: only symbols whose weighting differs from the identity need their k × k'
        # conditions A_x; the others keep θ_spec's operators (their own exact minimiser)
        self.A = project_triples(triples, U, Q, middle=self.active)
        self.base = self._identity_operators()

    def _basis(self, P21, kp: int) -> tuple[np.ndarray, np.ndarray]:
        """The top-k' left and right singular vectors of P21, from the cache if there."""
        key = (id(self.triples), kp)
        if self.bases is not None and key in self.bases:
            return self.bases[key]
        U, _, Q = top_singular(P21, kp)
        if self.bases is not None:
            self.bases[key] = (U, Q)
        return U, Q

    def _identity_operators(self) -> np.ndarray:
        """The W = I solution of every symbol, ``A_x Mᵀ(MMᵀ)⁻¹ = Uᵀ P3x1[x] (Q Mᵀ(MMᵀ)⁻¹)``.

        θ_spec's operators: from A where it exists, else one projection of the other
        symbols' triples, O(nnz·k + pairs·k²).
        """
        n, k, active, A = self.n, self.k, self.active, self.A
        M_pinv = np.linalg.pinv(self.M)
        base = np.empty((n, k, k))
        if active.size < n:
            rest = np.setdiff1d(np.arange(n), active, assume_unique=True)
            project_triples(self.triples, self.U, self.Q @ M_pinv, middle=rest, out=base)
        for a in range(0, active.size, 4096):
            base[active[a : a + 4096]] = A[a : a + 4096] @ M_pinv
        return base

    def _weighted_symbols(self) -> np.ndarray:
        """The symbols whose weighted solution can differ from θ_spec's (sorted indices).

        Small problems (n·k·k' ≤ 2²⁴ floats) keep every symbol, so the losses cover all
        the conditions. On larger ones: none under ``"identity"``; otherwise the symbols
        whose shrinkage is below 1 (under ``"auto"``, those with at least k'²/100 triples
        in the middle): the losses in ``loss_history_`` then cover those symbols only.
        """
        n, k, kp = self.n, self.k, self.kp
        if n * k * kp <= _FULL_CONDITIONS_MAX:
            return np.arange(n)
        if self.est.weighting == "identity":
            return np.empty(0, dtype=np.int64)
        n_middle = np.bincount(self.triples.x2, weights=self.triples.weights, minlength=n)
        shrink = resolve_projected_shrinkage(self.est.shrinkage, n_middle, kp)
        return np.flatnonzero((shrink < 1.0) & (n_middle > 0))

    # ------------------------------------------------------------------ initial estimate

    def initial_estimate(self, init: Any) -> None:
        """The previous operators in the new basis, ``U_newᵀ U_old B̃_old U_oldᵀ U_new``, or
        None (cold: the first iteration is then Algorithm 1's W = I, θ_spec). O(n·k³)."""
        self.ops = None
        warm = factors_of(init)
        if warm is None or warm.factorization != "projected" or warm.R.shape[2] != self.k:
            return
        warm = warm.padded(self.n)
        T = self.U.T @ warm.S  # (k, k_old)
        self.ops = np.einsum("ab,xbc,dc->xad", T, warm.R, T, optimize=True)

    # ------------------------------------------------------------------ outer iterations

    def weighting(self, ops: np.ndarray) -> ProjectedWeighting:
        """W re-estimated at the operators ``ops`` (Algorithm 1)."""
        est = self.est
        return projected_weighting(est.weighting, self.triples, self.U, self.Q, ops,
                                   shrinkage=est.shrinkage, ridge=est.ridge)

    def r_step(self) -> tuple[np.ndarray, float | None, float]:
        """``(new operators of the active symbols, loss before, loss after)`` of one step.

        Cold, the first step is W = I: θ_spec's operators, whatever the start.
        """
        active = self.active
        if self.ops is None:
            return self.base[active], None, identity_loss(self.A, self.M, self.base[active])
        W = self.weighting(self.ops)
        return projected_step(W, active, self.A, self.M, self.ops[active])

    def accept(self, it: int, new: np.ndarray, before: float | None, after: float) -> bool:
        """Whether the step is finite and did not raise W's loss; a rejection is recorded."""
        ok = np.isfinite(new).all() and np.isfinite(after) and (
            before is None or after <= before * (1 + 1e-9) + 1e-300
        )
        if not ok:  # why: an exact minimiser under W cannot raise W's loss; if it did, it is numerics
            self.rejected.append(it)
            self.rejected_sweeps.append((it, 1, float(after), float(before if before is not None
                                                                  else after)))
        return bool(ok)

    def converged(self, it: int, new: np.ndarray) -> bool:
        """Whether the operators moved by less than ``tol`` (relative) in this iteration."""
        ops, active, tol = self.ops, self.active, self.est.tol
        if it > 0:
            return bool(np.linalg.norm(new - ops[active]) <= tol * max(np.linalg.norm(ops[active]), 1e-300))
        if ops is None:
            return False
        # a warm start may already be the solution: compare every symbol once
        full = self.base.copy()
        full[active] = new
        return bool(np.linalg.norm(full - ops) <= tol * max(np.linalg.norm(ops), 1e-300))

    def iterate(self) -> None:
        """Outer iterations: W at the current operators, the GLS step, acceptance."""
        progress = Progress("projected", self.n, self.k)
        for it in range(self.max_outer):
            new, before, after = self.r_step()
            self.history.append([after] if before is None else [before, after])
            progress.line(f"outer={it + 1}/{self.max_outer}", after)
            if not self.accept(it, new, before, after):
                break
            converged = self.converged(it, new)
            # only the weighted symbols change after the first iteration: the others hold
            # θ_spec's operators (``base``, updated in place: no n·k² copies per iteration)
            if it == 0:
                self.ops = self.base
            self.ops[self.active] = new
            if converged:
                break
        if self.ops is None:  # pragma: no cover - the first cold iteration is W = I, never rejected
            raise ValueError("the projected M-estimator found no finite solution")

    # ------------------------------------------------------------------ finish

    def finish(self) -> tuple[ObservableOperatorModel, dict[str, Any]]:
        """The model (θ_spec's parametrisation) and the fitted attributes; W re-estimated
        at the solution unless ``scored_only``."""
        ops, history, est = self.ops, self.history, self.est
        if self.scored_only:  # a fit whose predictions alone are used (the backoff's 90%)
            W, loss = None, history[-1][-1]
        else:
            W = self.weighting(ops)
            loss = projected_loss(W, self.active, self.A, self.M, ops[self.active])
        factors = MFactors(ops, self.U, "projected", loss=loss, history=history,
                           rejected=self.rejected_sweeps)
        model = ObservableOperatorModel(
            self.b1, self.binf, ops, filter=est.filter, window=est.window, min_proba=est.min_proba,
            symbols=self.labels, rank=self.k, factors=factors,
        )
        return model, {
            "factors_": factors, "weighting_": W, "loss_history_": history,
            "rejected_": self.rejected, "rejected_sweeps_": self.rejected_sweeps,
            "rank_": self.k, "n_conditions_": self.kp, "basis_": (self.U, self.Q),
        }
