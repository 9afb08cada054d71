"""Warm refits of the projected fit: the previous bases, moments updated from what changed.

:func:`plan_refit` decides, from a previous fit's
:class:`~streamspec.core.projected_state.ProjectedState` and the new counts, how the
refit goes (docs/math.md section 10):

1. the change of the counts, ``new = f · old + Δ``
   (:func:`~streamspec.core.triples_change.triples_change`);
2. ``Y = c21 Q`` and ``X = c21ᵀ U`` updated from Δ alone, and from them the previous
   bases' backward error on the new counts, in units of the sampling noise
   ``N^(-1/2)``: at most ``basis_tol``, the bases are kept (``"warm"``);
3. otherwise block Krylov iterations started from them
   (:func:`~streamspec.core.subspace_iteration.refine_subspace`) until the principal
   angles between two rounds fall below :data:`REBASE_TOL`: the moments are then
   projected again in the new bases (``"rebased"``, a cold fit without its SVD);
4. a change of the rank under ``rank="auto"``, or an iteration that does not converge:
   a cold fit (``"fallback"``).

The update is exact however many triples changed (on a small alphabet every triple
changes at every refit); it costs what they cost.

:class:`WarmProjectedFit` is the kept-bases fit: the unnormalised moments ``A_x`` and
θ_spec's operators of the other symbols are the previous ones, scaled by f, plus the
projections of Δ (exact: counts are additive and the projections linear), and the
weighting blocks of symbols whose counts changed little are reused
(:class:`~streamspec.core.weighting_reuse.ReusedWeighting`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from streamspec.core.fresh_memory import fresh_array
from streamspec.core.pair_index import PairIndex
from streamspec.core.projected import ProjectedFit
from streamspec.core.projected_state import ProjectedSettings, ProjectedState, RefitInfo
from streamspec.core.projected_weighting import ProjectedWeighting, projected_weighting
from streamspec.core.subspace import DENSE_SVD_MAX, project_triples, top_singular
from streamspec.core.subspace_iteration import Refined, refine_subspace, spectral_norm
from streamspec.core.triples import BITS, Triples
from streamspec.core.triples_change import TriplesChange, triples_change
from streamspec.core.weighting_reuse import ReusedWeighting

__all__ = ["WarmPlan", "plan_refit", "WarmProjectedFit", "REBASE_TOL", "middle_subset"]

REBASE_TOL = 1e-5  # principal sines between two rounds (PROPACK's own vectors: ~1e-5)
REBASE_ROUNDS = 4  # Krylov blocks before falling back to a cold SVD (2-3 sufficed on words)
# the largest condition number of a factored model's right factor before a refit writes the
# operators out again (the rows are corrected by its inverse: ~1e-16 · cond of rounding)
FACTORED_COND_MAX = 1e6


@dataclass
class WarmPlan:
    """How a refit goes: ``info.path`` is ``"warm"``, ``"rebased"`` or ``"fallback"``.

    ``change``, ``Y``, ``X``, ``s``: the change of the counts and the updated products and
    Ritz values (kept bases); ``refined``: the new bases (rebased).
    """

    info: RefitInfo
    change: TriplesChange | None = None
    Y: np.ndarray | None = None
    X: np.ndarray | None = None
    s: np.ndarray | None = None
    refined: Refined | None = None


def _padded(a: np.ndarray, n: int) -> np.ndarray:
    """``a`` with zero rows appended up to n rows (new symbols), or ``a`` itself."""
    if a.shape[0] == n:
        return a
    out = np.zeros((n,) + a.shape[1:])
    out[: a.shape[0]] = a
    return out


def _key(s: ProjectedSettings) -> tuple:
    """The settings a state's moments depend on (the others only shape the model)."""
    return (s.rank, s.n_conditions, s.weighting, s.shrinkage, s.ridge, s.per_rank, s.auto_cap)


def plan_refit(state: ProjectedState, triples: Triples, settings: ProjectedSettings) -> WarmPlan:
    """Decide the refit's path (module docstring). O(nnz) for the change, O(Δ · k') and
    O(n · k'²) for the basis test; a Krylov round costs O(nnz · k')."""
    if _key(state.settings) != _key(settings):
        return WarmPlan(RefitInfo("fallback", "the estimator's settings changed"))
    if triples.n < state.n:
        return WarmPlan(RefitInfo("fallback", "the alphabet is smaller than the state's"))
    change = triples_change(state.triples, triples)
    n, N, f = triples.n, triples.total, change.scale
    U, Q = _padded(state.U, n), _padded(state.Q, n)
    dc21 = PairIndex(change.delta).c21() if change.delta.nnz else sp.csr_matrix((n, n))
    Y = f * _padded(state.Y, n) + np.asarray(dc21 @ Q)
    X = f * _padded(state.X, n) + np.asarray(dc21.T @ U)
    noise = 1.0 / np.sqrt(N)
    residual = max(spectral_norm(Y - U @ (U.T @ Y)), spectral_norm(X - Q @ (Q.T @ X))) / N / noise
    s = np.linalg.svd(U.T @ Y / N, compute_uv=False)
    moved = _rank_moved(settings, state.k, s, noise)
    info = RefitInfo("warm", "", change.fraction, residual)
    if moved:
        return WarmPlan(RefitInfo("fallback", moved, change.fraction, residual))
    if residual <= settings.basis_tol:
        return WarmPlan(info, change, Y, X, s)
    return _rebase(state, triples, settings, info)


def _rank_moved(settings: ProjectedSettings, k: int, s: np.ndarray, noise: float) -> str:
    """Why ``rank="auto"`` would choose another rank now ('' if it would not)."""
    if not (isinstance(settings.rank, str) and settings.rank == "auto"):
        return ""
    count = int((s > noise).sum())
    if count != k and not (k == 1 and count == 0):
        return f"the spectrum moved: {count} singular values above the noise, the rank is {k}"
    if count == s.size and s.size < settings.auto_cap:
        return "the spectrum moved: every singular value kept is above the noise"
    return ""


def _rebase(state: ProjectedState, triples: Triples, settings: ProjectedSettings,
            info: RefitInfo) -> WarmPlan:
    """Block Krylov iterations from the previous bases, on the new counts' P21 (up to
    :data:`~streamspec.core.subspace.DENSE_SVD_MAX` symbols, the dense SVD: exact and cheaper)."""
    n, N = triples.n, triples.total
    c21 = PairIndex(triples).c21()
    P = c21 * (1.0 / N)
    why = f"the bases moved (backward error {info.residual:.3g} noise)"
    if n <= DENSE_SVD_MAX:
        U, s, V = top_singular(P, state.kp, random_state=settings.random_state)
        refined = Refined(U, s, V, True, 0, ())
    else:
        refined = refine_subspace(P, sp.csr_matrix(P.T), _padded(state.U, n), _padded(state.Q, n),
                                  state.k, tol=REBASE_TOL, max_rounds=REBASE_ROUNDS,
                                  random_state=settings.random_state)
    if not refined.converged:
        return WarmPlan(RefitInfo("fallback", f"{why} and the Krylov iterations did not converge "
                                  f"in {REBASE_ROUNDS} rounds", info.changed, info.residual,
                                  refined.sines))
    moved = _rank_moved(settings, state.k, refined.s, 1.0 / np.sqrt(N))
    if moved:
        return WarmPlan(RefitInfo("fallback", moved, info.changed, info.residual, refined.sines))
    return WarmPlan(RefitInfo("rebased", why, info.changed, info.residual, refined.sines),
                    refined=refined)


def middle_subset(triples: Triples, symbols: np.ndarray) -> Triples:
    """The triples whose middle symbol is in ``symbols`` (sorted): contiguous runs of the
    sorted codes, gathered in O(their count + len(symbols) · log nnz)."""
    symbols = np.asarray(symbols, dtype=np.int64)
    lo = np.searchsorted(triples.codes, symbols << (2 * BITS))
    hi = np.searchsorted(triples.codes, (symbols + 1) << (2 * BITS))
    sizes = hi - lo
    take = np.repeat(lo - np.concatenate(([0], np.cumsum(sizes)[:-1])), sizes)
    take += np.arange(int(sizes.sum()))
    return Triples(triples.n, triples.codes[take], triples.weights[take])


class WarmProjectedFit(ProjectedFit):
    """The projected fit in the previous bases, its moments updated from the change of the counts.

    Parameters are :class:`~streamspec.core.projected.ProjectedFit`'s, plus the previous
    ``state`` and the ``plan`` of :func:`plan_refit` (path ``"warm"``). Costs: O(Δ · k'
    + ΔP · k · k') for the moments of the changed triples (Δ distinct, ΔP pairs),
    O(n · k³) for θ_spec's operators of the others (one product), the weighting blocks of
    the symbols whose counts changed by more than ``weighting_rtol``, and the GLS step.
    """

    def __init__(self, est: ProjectedSettings, max_outer: int, triples: Triples, labels,
                 state: ProjectedState, plan: WarmPlan, keep_state: bool = False):
        super().__init__(est, max_outer, triples, labels, keep_state=keep_state)
        self.previous, self.plan, self.info = state, plan, plan.info
        self.first_weighted, self.reuse = True, None

    def prepare(self) -> None:
        """Moments, b1, b∞ and θ_spec's operators from the previous ones and the change."""
        state, plan, triples = self.previous, self.plan, self.triples
        n, k, N = triples.n, state.k, triples.total
        f, delta = plan.change.scale, plan.change.delta
        self.index = None  # built only where the whole counts are needed (not here)
        self.dindex = PairIndex(delta)
        c1 = f * _padded(state.c1, n) + np.bincount(self.dindex.x1, weights=delta.weights,
                                                     minlength=n)
        n_middle = f * _padded(state.n_middle, n) + self.dindex.middle_counts()
        self.set_basis(k, _padded(state.U, n), plan.s, _padded(state.Q, n), plan.Y, plan.X, c1,
                       n_middle)
        old_active = state.active
        self.active = np.union1d(old_active, self.active)  # a symbol once weighted stays so
        self.A = self._conditions(f, N)
        self.base = self._spectral(f, N)

    def _conditions(self, f: float, N: float) -> np.ndarray:
        """``A_x`` of the active symbols: ``f · A_old + A(Δ)``, and for the symbols that just
        became active their whole projection; normalised by N (unnormalised in the state)."""
        state, active, delta = self.previous, self.active, self.plan.change.delta
        old = np.isin(active, state.active, assume_unique=True)
        if old.all():  # state.active is a subset of active, in the same order
            # (a spare mapping where one is free: 343 MB at n = 10⁵, k = 50; core/fresh_memory.py)
            A = np.multiply(state.A, f / N, out=fresh_array(state.A.shape))
        else:
            A = np.empty((active.size, self.k, self.kp))
            A[old] = state.A * (f / N)
            fresh = active[~old]
            project_triples(middle_subset(self.triples, fresh), self.U, self.Q, middle=fresh,
                            total=N, out=A, out_rows=np.flatnonzero(~old))
        changed = np.intersect1d(active[old], self.plan.change.changed_middle, assume_unique=True)
        if changed.size:
            project_triples(delta, self.U, self.Q, middle=changed, index=self.dindex, total=N,
                            out=A, out_rows=np.searchsorted(active, changed), add=True)
        return A

    def _spectral(self, f: float, N: float) -> np.ndarray:
        """θ_spec's operators ``(Uᵀ c3[x] V)(Uᵀ c21 V)⁻¹``: from A for the active symbols, else
        the previous ones times ``T = f · M1_old M1_new⁻¹`` plus the projection of Δ.

        Kept factored, ``B_x = base_x · right`` (docs/math.md section 10): ``right ← right · T``,
        the other symbols' rows copied and the changed ones corrected by ``right⁻¹``,
        O(n · k² + Δ-work), instead of the n · k³ product ``B_x T``. The active symbols' rows
        hold their operators themselves while the GLS steps read and write them, and are
        corrected by ``right⁻¹`` in :meth:`finish`."""
        state, n, k, active = self.previous, self.n, self.k, self.active
        M1_old = state.U[:, :k].T @ state.Y[:, :k]  # unnormalised Uᵀ c21 V of the last fit
        inv_new = self.M1inv / N  # (Uᵀ c21 V)⁻¹, unnormalised
        T = f * M1_old @ inv_new
        T = T if state.right is None else state.right @ T  # the old operators are ops @ right
        base = fresh_array((n, k, k))  # why not np.empty: core/fresh_memory.py (page faults)
        m = state.n
        fix = np.eye(k)  # what the new rows are multiplied by: right⁻¹ (factored), else I
        if np.linalg.cond(T) < FACTORED_COND_MAX:
            self.right, fix = T, np.linalg.inv(T)
            base[:m] = state.ops  # a copy: the previous model may still be predicting
        else:
            for a in range(0, m, 8192):  # one matrix product per block of rows (not one per symbol)
                z = min(m, a + 8192)
                np.matmul(state.ops[a:z].reshape(-1, k), T, out=base[a:z].reshape(-1, k))
        base[m:] = 0.0
        rest = np.setdiff1d(self.plan.change.changed_middle, active, assume_unique=True)
        if rest.size:
            project_triples(self.plan.change.delta, self.U, self.Q[:, :k] @ inv_new @ fix,
                            middle=rest, index=self.dindex, total=1.0, out=base, add=True)
        for a in range(0, active.size, 4096):  # their operators themselves (see finish)
            base[active[a : a + 4096]] = self.A[a : a + 4096, :, :k] @ self.M1inv
        return base

    def finish(self):
        """The model and the fitted attributes; a factored fit's active rows (operators until
        now, for the GLS steps) are first corrected by ``right⁻¹``. O(len(active) · k³)."""
        if self.right is not None and self.active.size:
            fix = np.linalg.inv(self.right)
            for a in range(0, self.active.size, 4096):
                rows = self.active[a : a + 4096]
                self.ops[rows] = self.ops[rows] @ fix
        return super().finish()

    def weighting(self, ops: np.ndarray) -> ProjectedWeighting:
        """The first weighted step reuses the blocks of the symbols whose counts changed by at
        most ``weighting_rtol`` (relative) since their block was built; later steps, and
        symbols without a block, get W estimated at ``ops`` (on their own triples only)."""
        state, est = self.previous, self.est
        active = self.active
        if not self.first_weighted or state.blocks is None:
            self.reuse = None  # the blocks this step records are all new
            return self._fresh(ops, active)
        self.first_weighted = False
        counts = _padded(state.block_counts, self.n)
        has_block = np.zeros(self.n, dtype=bool)
        for g, _ in state.blocks:
            has_block[g] = True
        change = np.abs(self.n_middle - counts)
        reuse = has_block & (change <= est.weighting_rtol * counts)
        others = active[~reuse[active]]
        fresh = self._fresh(ops, others)
        tau_x = np.where(reuse, _padded(state.tau_x, self.n), getattr(fresh, "tau_x", 0.0))
        live = tau_x[active] > 0
        tau = float(tau_x[active][live].mean()) if live.any() else 1.0
        self.info = RefitInfo(self.info.path, self.info.reason, self.info.changed,
                              self.info.residual, self.info.sines,
                              reused=int(reuse[active].sum()), rebuilt=int(others.size))
        self.reuse, self.counts_used, self.tau_used = reuse, counts, tau_x
        return ReusedWeighting(blocks=state.blocks, reuse=reuse, fresh=fresh, tau=tau)

    def _fresh(self, ops: np.ndarray, symbols: np.ndarray) -> ProjectedWeighting:
        """W at ``ops`` for ``symbols``, from their own triples (divided by the whole total)."""
        est = self.est
        return projected_weighting(est.weighting, middle_subset(self.triples, symbols), self.U,
                                   self.Q, ops, shrinkage=est.shrinkage, ridge=est.ridge,
                                   symbols=symbols, total=self.triples.total)

    def state(self, ops: np.ndarray) -> ProjectedState:
        """The new state; reused blocks keep the counts and scales they were built with."""
        out = super().state(ops)
        if out.blocks is not None and self.reuse is not None:
            out.block_counts = np.where(self.reuse, self.counts_used, self.n_middle)
            out.tau_x = self.tau_used
        return out
