"""The dense formulation of θ_M: B_x = R_x S_xᵀ by alternating minimisation (Algorithm 2).

:class:`DenseFit` is the formulation's fit, in the named steps that
:class:`~streamspec.core.mestimator.MEstimator` runs (:mod:`streamspec.core.fit_steps`).
:class:`DenseProblem` holds what one dense fit works on (the moments, the settings
and the progress lines): every array of a fit lives in its own problem, never on
the estimator, so that one estimator can fit in several threads at once.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from streamspec.core.defaults import filter_window
from streamspec.core.factors import MFactors, factor_operators, factors_of
from streamspec.core.fit_data import alphabet_size, counts_of
from streamspec.core.fit_steps import FitSteps
from streamspec.core.model import ObservableOperatorModel
from streamspec.core.moments import probabilities
from streamspec.core.progress import Progress
from streamspec.core.solvers import conjugate_gradient, fista, lasso_groups, solve_groups
from streamspec.core.spectral import (
    check_rank,
    select_rank_by_spectrum,
    spectral_operators,
    top_subspace,
)
from streamspec.core.triples import Triples
from streamspec.core.weighting import DENSE_MAX, Weighting, build_weighting

__all__ = ["DenseProblem", "DenseFit", "DENSE_MAX", "DENSE_MEMORY_LIMIT", "dense_bytes", "regauge"]

DENSE_MEMORY_LIMIT = 2 * 2**30  # bytes the dense formulation may need before it refuses to start

class DenseProblem:
    """One dense fit: the moments ``P21``, ``P3j[j, x, i] = P3x1[x, i, j]``, counts ``c3``.

    Parameters
    ----------
    est
        The estimator whose settings are read (never written): ``factorization``,
        ``weighting``, ``smoothing``, ``shrinkage``, ``ridge``, ``max_sweeps``, ``tol``.
    P21, P3j, c3
        The moments and counts (n × n, n × n × n, n × n × n).
    mu
        The L1 weight ``λ N^(-1/2)``.
    max_outer
        Outer iterations (re-estimations of W) at most.
    """

    def __init__(self, est: Any, P21: np.ndarray, P3j: np.ndarray, c3: np.ndarray, mu: float,
                 max_outer: int):
        self.est, self.P21, self.P3j, self.c3, self.mu = est, P21, P3j, c3, mu
        self.max_outer = max_outer
        self.progress: Progress | None = None

    @classmethod
    def of_counts(cls, est: Any, c3: np.ndarray, max_outer: int = 1) -> DenseProblem:
        """The problem of dense counts ``c3[x2, x3, x1]`` under ``est``'s settings. O(n³)."""
        _, P21, P3x1 = probabilities(c3)
        return cls(est, P21, P3x1.transpose(2, 0, 1).copy(), c3,
                   est.penalty / np.sqrt(float(c3.sum())), max_outer)

    # ------------------------------------------------------------------ starts

    def spectral_start(self, P1, P21, P3x1, U):
        """θ_spec in M-form: S = U, R_x = U Uᵀ P3x1[x] (Uᵀ P21)⁺ (docs/math.md section 6)."""
        k = U.shape[1]
        _, _, Bk = spectral_operators(P1, P21, P3x1, k)
        R = np.einsum("dk,xkl->xdl", U, Bk, optimize=True)
        S = U if self.est.factorization != "per_symbol" else np.broadcast_to(U, (len(P1),) + U.shape).copy()
        return R, S.copy()

    def random_start(self, rng, n, k):
        if self.est.factorization == "per_symbol":
            S = np.stack([np.linalg.qr(rng.normal(size=(n, k)))[0] for _ in range(n)])
        elif self.est.factorization == "fixed":
            S = top_subspace(self.P21, k)
        else:
            S = np.linalg.qr(rng.normal(size=(n, k)))[0]
        R = self.r_step(np.zeros((n, n, k)), S, build_weighting("identity", self.c3))
        return R, S

    # ------------------------------------------------------------------ Algorithm 1

    def weighting_at(self, B: np.ndarray) -> Weighting:
        return build_weighting(
            self.est.weighting, self.c3, B, smoothing=self.est.smoothing, shrinkage=self.est.shrinkage,
            ridge=self.est.ridge,
        )

    def run(self, R, S, W0):
        """Outer loop: alternate under W, re-estimate W at the new operators, repeat."""
        W = W0 if W0 is not None else build_weighting("identity", self.c3)
        history, rejected = [], []
        self.progress = Progress("dense", R.shape[0], R.shape[2])
        B_old = None
        outer_budget = self.max_outer if self.est.weighting != "identity" else 1
        for outer in range(outer_budget):
            if outer > 0:
                W = self.weighting_at(B_old)
            R, S, losses, refused = self.alternate(R, S, W)
            history.append(losses)
            if refused is not None:
                rejected.append((outer, len(losses), refused, losses[-1]))
            self.progress.line(f"outer={outer + 1}/{outer_budget}", losses[-1])
            B = factor_operators(R, S)
            converged = B_old is not None and (
                np.linalg.norm(B - B_old) < self.est.tol * max(np.linalg.norm(B_old), 1e-300)
            )
            B_old = B
            if converged:
                break
        return MFactors(R, S, self.est.factorization, history=history, rejected=rejected), W

    # ------------------------------------------------------------------ Algorithm 2

    def alternate(self, R, S, W):
        """Sweeps under a fixed W: ``(R, S, losses, refused)``, ``refused`` being the loss of
        the sweep that was rejected because it raised the loss (or was not finite), or None."""
        loss = self.loss(R, S, W)
        losses = [loss]
        for _ in range(self.est.max_sweeps):
            R_new, S_new = R, S
            if self.est.factorization != "fixed":
                S_new = self.s_step(R_new, S_new, W)
                R_new, S_new = regauge(R_new, S_new)
            R_new = self.r_step(R_new, S_new, W)
            new = self.loss(R_new, S_new, W)
            if not np.isfinite(new) or new > loss:
                # reject: an exact step cannot raise the loss under a fixed W, so this is
                # numerics; recorded (rejected_sweeps_) rather than silently dropped
                return R, S, losses, float(new)
            R, S = R_new, S_new
            improvement = loss - new
            loss = new
            losses.append(loss)
            progress = self.progress
            if progress is not None:
                progress.line(f"sweep={len(losses) - 1}", loss, every=5.0)
            if improvement <= self.est.tol * max(loss, 1e-300):
                break
        return R, S, losses, None

    def z(self, S):
        """Z[x, j, w] = (S_xᵀ P21)[w, j]."""
        n = self.P21.shape[0]
        if S.ndim == 2:
            return np.broadcast_to((S.T @ self.P21).T, (n, n, S.shape[1]))
        return np.einsum("xsw,sj->xjw", S, self.P21, optimize=True)

    def loss(self, R, S, W) -> float:
        Z = self.z(S)
        m = self.P3j - np.einsum("xiw,xjw->jxi", R, Z, optimize=True)
        return W.quad(m) + self.mu * float(np.abs(R).sum())

    def r_step(self, R, S, W) -> np.ndarray:
        """argmin over R of mᵀWm + μ‖R‖₁ (halved: ½θᵀHθ - cᵀθ + μ/2 ‖θ‖₁)."""
        n, _, k = R.shape
        Z = self.z(S)
        WP = W.apply(self.P3j)
        c = np.einsum("jxi,xjw->xiw", WP, Z, optimize=True)
        mu = self.mu / 2
        if not W.has_explicit_hessian(n, k):
            return self.r_step_iterative(R, Z, W, c)
        # why: W decides which groups of R it leaves uncoupled (rows, symbols or none)
        H = W.r_hessian(Z)
        cg, shape = c.reshape(H.shape[:2]), H.shape[:2]
        if mu > 0:
            theta = lasso_groups(H, cg, mu, theta0=R.reshape(shape))
        else:
            theta = solve_groups(H, cg)
        return theta.reshape(n, n, k)

    def r_step_iterative(self, R, Z, W, c):
        def matvec(theta):
            m = np.einsum("xiw,xjw->jxi", theta, Z, optimize=True)
            return np.einsum("jxi,xjw->xiw", W.apply(m), Z, optimize=True)

        if self.mu > 0:
            return fista(matvec, c, self.mu / 2, R)
        diag = np.einsum("jxi,xjw->xiw", W.diagonal(), Z**2, optimize=True)
        return conjugate_gradient(matvec, c, R, precond=np.maximum(diag, 1e-300))

    def s_step(self, R, S, W) -> np.ndarray:
        """argmin over S of mᵀWm (the penalty does not involve S)."""
        n, _, k = R.shape
        P21 = self.P21
        WP = W.apply(self.P3j)
        if S.ndim == 2:
            # m = P - R̃ (Sᵀ q_j): H[(s,w),(t,v)] = Σ_j q_j[s] q_j[t] (R̃ᵀ W_j R̃)[w, v]
            WR = np.stack([W.apply(np.broadcast_to(R[:, :, v], (n, n, n))) for v in range(k)])
            RWR = np.einsum("xiw,vjxi->jwv", R, WR, optimize=True)
            H = np.einsum("sj,tj,jwv->swtv", P21, P21, RWR, optimize=True).reshape(n * k, n * k)
            c = np.einsum("sj,xiw,jxi->sw", P21, R, WP, optimize=True).reshape(n * k)
            return solve_groups(H[None], c[None])[0].reshape(n, k)

        def matvec(theta):
            T = np.einsum("xsw,sj->xjw", theta, P21, optimize=True)
            m = np.einsum("xiw,xjw->jxi", R, T, optimize=True)
            Y = np.einsum("jxi,xiw->xjw", W.apply(m), R, optimize=True)
            return np.einsum("sj,xjw->xsw", P21, Y, optimize=True)

        Y = np.einsum("jxi,xiw->xjw", WP, R, optimize=True)
        c = np.einsum("sj,xjw->xsw", P21, Y, optimize=True)
        return conjugate_gradient(matvec, c, S, max_iter=200)


def regauge(R, S):
    """Make S orthonormal (QR), moving its triangular factor into R: B is unchanged."""
    if S.ndim == 2:
        Q, T = np.linalg.qr(S)
        return R @ T.T, Q
    Q, T = np.linalg.qr(S)  # batched over x
    return np.einsum("xiw,xvw->xiv", R, T), Q


def dense_bytes(n: int, k: int, weighting: str, factorization: str) -> int:
    """Peak memory the dense formulation needs, roughly (its largest arrays together)."""
    cells = 6 * n**3  # c3, P3x1 (two layouts), moments, W·m, scratch
    if weighting == "per_symbol":
        cells += 2 * n**4 + n**3 * k**2  # blocks and their inverses; R-step Hessians (n, nk, nk)
    elif weighting == "exact":
        cells += 6 * n**3 + min(n * n * k, DENSE_MAX) ** 2  # Λ, D, K, CG vectors; explicit Hessian
    else:
        cells += n**2 * k**2  # R-step Hessians (n², k, k)
    if factorization == "shared":
        cells += k * n**3 + (n * k) ** 2
    elif factorization == "per_symbol":
        cells += 4 * n**2 * k
    return 8 * int(cells)


class DenseFit(FitSteps):
    """One dense fit: ``B_x = R_x S_xᵀ`` under the n³ conditions (the paper read literally).

    Costs are those of :class:`~streamspec.core.mestimator.MEstimator`'s table (dense
    rows), per outer iteration and per start; it refuses to start when
    :func:`dense_bytes` exceeds :data:`DENSE_MEMORY_LIMIT`.

    Parameters
    ----------
    est
        The estimator whose settings are read (never written): ``rank``, ``penalty``,
        ``weighting``, ``factorization``, ``n_restarts``, ``random_state`` and those
        :class:`DenseProblem` reads.
    max_outer
        Outer iterations (re-estimations of W) at most.
    data
        Triples, an accumulator or dense counts ``c3[x2, x3, x1]``.
    """

    def __init__(self, est: Any, max_outer: int, data: Any):
        super().__init__(est, max_outer)
        self.data = data

    def prepare(self) -> None:
        """Refuse a problem over the memory limit; the dense moments, the rank, the problem."""
        est, data = self.est, self.data
        n = alphabet_size(data)
        k_guess = n if isinstance(est.rank, str) else int(min(max(est.rank, 1), max(n, 1)))
        need = dense_bytes(n, k_guess, est.weighting, est.factorization)
        if need > DENSE_MEMORY_LIMIT:
            raise ValueError(
                f"the dense formulation (weighting={est.weighting!r}, factorization="
                f"{est.factorization!r}) on {n} symbols at rank {k_guess} would need about "
                f"{need / 2**30:.1f} GiB (it holds n³ counts and moments"
                + (", n⁴ weights and an n³k² R-step" if est.weighting == "per_symbol" else "")
                + f"); the limit is {DENSE_MEMORY_LIMIT / 2**30:.0f} GiB: use formulation='projected' "
                "(linear in n)"
            )
        if isinstance(data, Triples):
            data = data.to_dense(limit=max(DENSE_MEMORY_LIMIT // 8, 1))
        c3, self.labels = counts_of(data)
        self.n = n = c3.shape[0]
        self.P1, self.P21, self.P3x1 = P1, P21, P3x1 = probabilities(c3)
        N = float(c3.sum())
        self.k = (
            select_rank_by_spectrum(P21, N)
            if isinstance(est.rank, str) and est.rank == "auto"
            else check_rank(est.rank, n)
        )
        self.problem = DenseProblem(est, P21, P3x1.transpose(2, 0, 1).copy(), c3,
                                    est.penalty / np.sqrt(N), self.max_outer)

    def initial_estimate(self, init: Any) -> None:
        """Warm: the previous factors (S = U of the new counts under ``"fixed"``) and W at
        their operators. Cold: θ_spec in M-form under W = I (docs/math.md section 6)."""
        est, n, k = self.est, self.n, self.k
        warm = factors_of(init)
        if warm is not None:
            warm = warm.padded(n)
            if warm.R.shape[2] != k or warm.factorization != est.factorization:
                warm = None  # a different rank or factorization: start afresh
        self.warm = warm is not None
        if warm is not None:
            B_prev = warm.operators()
            R, S = warm.R.copy(), warm.S.copy()
            if est.factorization == "fixed":  # S follows the counts: re-express B in the new U
                S = top_subspace(self.P21, k)
                R = B_prev @ S
            self.start = (R, S, self.problem.weighting_at(B_prev))
        else:
            U = top_subspace(self.P21, k)
            R0, S0 = self.problem.spectral_start(self.P1, self.P21, self.P3x1, U)
            self.start = (R0, S0, None)

    def iterate(self) -> None:
        """The outer iterations from the start (:meth:`DenseProblem.run`); cold, also from
        ``n_restarts`` random starts, keeping the lowest loss under the first start's W."""
        problem = self.problem
        best, W = problem.run(*self.start)
        if not self.warm:
            rng = np.random.default_rng(self.est.random_state)
            for _ in range(self.est.n_restarts):
                candidate, _ = problem.run(*problem.random_start(rng, self.n, self.k), None)
                if problem.loss(candidate.R, candidate.S, W) < problem.loss(best.R, best.S, W):
                    best = candidate
        self.best = best

    def finish(self) -> tuple[ObservableOperatorModel, dict[str, Any]]:
        """The model (``b1 = P1``, ``b∞ = 1``) and the fitted attributes."""
        best, problem, est = self.best, self.problem, self.est
        # report the loss under W re-estimated at the solution itself, so that fits
        # reached by different paths (cold, warm, restarts) are comparable
        W = problem.weighting_at(best.operators())
        best.loss = problem.loss(best.R, best.S, W)
        model = ObservableOperatorModel(
            self.P1, np.ones(self.n), best.operators(), filter=est.filter, window=filter_window(est.window),
            min_proba=est.min_proba, symbols=self.labels, rank=self.k, factors=best,
        )
        return model, {
            "factors_": best, "weighting_": W, "loss_history_": best.history,
            "rejected_": sorted({outer for outer, *_ in best.rejected}),
            "rejected_sweeps_": list(best.rejected),
            "rank_": self.k, "n_conditions_": None, "basis_": None,
        }
