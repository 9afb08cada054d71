"""The projected formulation of θ_M: per-symbol GLS steps under ``Σ_x⁻¹`` (docs/math.md section 6).

:class:`ProjectedFit` is the formulation's fit, in the named steps that
:class:`~streamspec.core.mestimator.MEstimator` runs (:mod:`streamspec.core.fit_steps`);
the functions below are its pieces: one GLS step and the loss under a weighting.
θ_spec (:class:`~streamspec.core.spectral.SpectralEstimator`) is its first step, the
identity weighting. A warm refit (:mod:`streamspec.core.projected_warm`) replaces
``prepare`` only.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import numpy as np

from streamspec.core.factors import MFactors, factors_of
from streamspec.core.fit_data import EMPTY_COUNTS
from streamspec.core.fit_steps import FitSteps
from streamspec.core.fresh_memory import fresh_array
from streamspec.core.model import ObservableOperatorModel
from streamspec.core.pair_index import PairIndex
from streamspec.core.progress import Progress
from streamspec.core.projected_state import ProjectedSettings, ProjectedState, RefitInfo
from streamspec.core.projected_weighting import (
    SYMBOL_BLOCK,
    ProjectedIdentityWeighting,
    ProjectedWeighting,
    projected_weighting,
    resolve_projected_shrinkage,
)
from streamspec.core.sigma_inverse import SigmaInverse
from streamspec.core.solvers import gls_operators, identity_loss
from streamspec.core.spectral_basis import projected_basis, projected_sizes
from streamspec.core.subspace import DENSE_SVD_MAX, project_triples
from streamspec.core.subspace_iteration import orthonormal
from streamspec.core.triples import Triples

__all__ = ["SigmaInverse", "sigma_groups", "projected_step", "projected_loss", "identity_loss",
           "SYMBOL_BLOCK", "ProjectedFit", "projected_sizes"]

_FULL_CONDITIONS_MAX = 1 << 24  # floats of A (n·k·k') kept for every symbol on small problems
ROW_BLOCK = 1024  # symbols whose operators the convergence test compares at a time (20 MB at k = 50)


def sigma_groups(W: ProjectedWeighting, symbols: np.ndarray, kp: int
                 ) -> Iterator[tuple[np.ndarray, SigmaInverse]]:
    """``(symbols, Σ⁻¹)`` pairs covering every symbol, each group sharing one form of Σ_x⁻¹.

    W chooses the forms (:meth:`~streamspec.core.projected_weighting.ProjectedWeighting.sigma_groups`):
    W = I, diagonals, or, per symbol, a scale, Woodbury for rare symbols and dense
    inverses for frequent ones. O(block · k'²) scratch at a time.
    """
    return W.sigma_groups(symbols, kp)


def projected_step(W: ProjectedWeighting, symbols: np.ndarray, A: np.ndarray, M: np.ndarray,
                   previous: np.ndarray | None, record: list | None = None):
    """GLS operators of ``symbols`` under W, and W's loss at ``previous`` (None if not given)
    and at them. ``A`` holds one row per symbol of ``symbols`` (sorted); ``previous`` the
    operators of every symbol of the alphabet, read a group at a time (so that no copy of the
    rows of ``symbols`` sits on the fit's memory peak).

    One group of symbols at a time (:func:`sigma_groups`), so ``Σ_x`` never exists for
    all symbols at once: O(block · k'²) scratch. ``record``: a list the groups
    ``(symbols, Σ⁻¹)`` are appended to, for a warm refit to reuse (then they are kept).
    """
    _, k, kp = A.shape
    out = np.empty((symbols.size, k, k))
    before, after = 0.0, 0.0
    M_pinv = None
    for g, inverse in sigma_groups(W, symbols, kp):
        if record is not None:
            record.append((g, inverse))
        rows = np.searchsorted(symbols, g)
        Ag = A[rows]
        prev = previous[g] if previous is not None else None
        if inverse.kind in ("scale", "identity"):  # Σ_x ∝ I: the solution is A_x M⁺, no solve
            M_pinv = np.linalg.pinv(M) if M_pinv is None else M_pinv
            Bb, b, a = _scaled_step(inverse, Ag, M, M_pinv, prev)
        else:
            Bb, b, a = _weighted_step(inverse, Ag, M, prev)
        out[rows] = Bb
        after += W.tau * a
        before += W.tau * b
    return out, (before if previous is not None else None), after


def _scaled_step(inverse: SigmaInverse, A: np.ndarray, M: np.ndarray, M_pinv: np.ndarray,
                 previous: np.ndarray | None) -> tuple[np.ndarray, float, float]:
    """The GLS step of a group whose ``Σ_x⁻¹`` is a scale: ``B̃_x = A_x M⁺``. O(b · k · k'²),
    as single matrix products over the b · k rows (not b small ones)."""
    b, k, kp = A.shape
    B = (A.reshape(b * k, kp) @ M_pinv).reshape(b, k, k)
    scale = inverse.inv if inverse.kind == "scale" else np.ones(b)

    def loss(ops: np.ndarray) -> float:
        G = A - (ops.reshape(b * k, k) @ M).reshape(b, k, kp)
        return float(scale @ np.einsum("xij,xij->x", G, G))

    return B, (0.0 if previous is None else loss(previous)), loss(B)


def _weighted_step(inverse: SigmaInverse, A: np.ndarray, M: np.ndarray,
                   previous: np.ndarray | None) -> tuple[np.ndarray, float, float]:
    """The GLS step of a group under its ``Σ_x⁻¹`` (:func:`~streamspec.core.solvers.gls_operators`):
    the operators and the losses before (at ``previous``) and after, without the scale τ."""
    b, k, kp = A.shape
    # one application for both right-hand sides: Σ⁻¹Mᵀ and Σ⁻¹Aᵀ; then
    # Σ⁻¹G_newᵀ = Σ⁻¹Aᵀ - Σ⁻¹Mᵀ B̃ᵀ needs no further solve
    Z = inverse.apply(np.concatenate([np.broadcast_to(M.T, (b, kp, k)), A.transpose(0, 2, 1)],
                                     axis=2))
    Y = Z[:, :, :k]
    B = gls_operators(A, M, Y)
    G_new = A - B @ M
    after = float(np.einsum("bak,bka->", G_new, Z[:, :, k:] - Y @ B.transpose(0, 2, 1)))
    before = 0.0
    if previous is not None:
        # the loss is quadratic with its minimum at B̃: L(B) = L(B̃) + tr(D H Dᵀ), D = B - B̃,
        # H = M Σ⁻¹ Mᵀ (exact, and without applying Σ⁻¹ to k more columns)
        D = previous - B  # (a GEMM stack: einsum over three operands loops naively, 5× slower)
        before = after + float(np.einsum("bik,bik->", D @ (M @ Y), D))
    return B, before, after


def projected_loss(W: ProjectedWeighting, symbols: np.ndarray, A: np.ndarray, M: np.ndarray,
                   ops: np.ndarray) -> float:
    """``Σ_x τ tr(G_x Σ_x⁻¹ G_xᵀ)`` over ``symbols`` (rows of A and ops); the cost of one step."""
    total = 0.0
    for g, inverse in sigma_groups(W, symbols, A.shape[2]):
        rows = np.searchsorted(symbols, g)
        G = A[rows] - ops[rows] @ M
        total += W.tau * float(np.einsum("bak,bka->", G, inverse.apply(G.transpose(0, 2, 1))))
    return total


def _refined_basis(P21, start: tuple) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
    """``(k, U, s, Q)`` of P21 from the bases ``start = (k, U, s, Q)`` of counts it is most of
    (the backoff's 90% of all the counts): one step of subspace iteration from the right
    basis, ``V = orth(P21ᵀ P21 Q)``, then Rayleigh–Ritz (the top k' singular triplets of
    P21 restricted to span V), the same rank and k'. O(nnz · k' + n · k'²), where a
    truncated SVD from a random start costs a Lanczos run of several k' steps (a block
    Krylov space of 2k' columns cost more than that SVD at n = 10⁵, k' = 100: its
    orthonormalisations are O(n · (2k')²))."""
    k, _, _, Q0 = start
    V = orthonormal(np.asarray(P21.T @ np.asarray(P21 @ Q0)))
    PV = np.asarray(P21 @ V)
    W = orthonormal(PV)
    a, s, bt = np.linalg.svd(W.T @ PV)  # P21 V = W (Wᵀ P21 V) = (W a) diag(s) bt
    U, V = W @ a, V @ bt.T
    signs = np.sign(U[np.abs(U).argmax(axis=0), np.arange(U.shape[1])])
    signs = np.where(signs == 0, 1.0, signs)  # the sign convention of top_singular
    return k, np.ascontiguousarray(U * signs), s, np.ascontiguousarray(V * signs)


def weighted_symbols(settings: ProjectedSettings, n_middle: np.ndarray, n: int, k: int, kp: int
                     ) -> np.ndarray:
    """The symbols whose weighted solution can differ from θ_spec's (sorted indices), O(n).

    Small problems (n·k·k' ≤ 2²⁴ floats) keep every symbol, so the losses cover all
    the conditions. On larger ones: none under ``"identity"``; otherwise the symbols
    whose shrinkage is below 1 (under ``"auto"``, those with at least k'²/100 triples
    in the middle): the losses in ``loss_history_`` then cover those symbols only.
    θ_spec (``per_rank == 1``: SpectralEstimator) keeps none.
    """
    if settings.weighting == "identity" and settings.per_rank == 1:
        return np.empty(0, dtype=np.int64)
    if n * k * kp <= _FULL_CONDITIONS_MAX:
        return np.arange(n)
    if settings.weighting == "identity":
        return np.empty(0, dtype=np.int64)
    shrink = resolve_projected_shrinkage(settings.shrinkage, n_middle, kp)
    return np.flatnonzero((shrink < 1.0) & (n_middle > 0))


class ProjectedFit(FitSteps):
    """One projected fit: the k × k' conditions ``G_x = A_x - B̃_x M`` solved per symbol.

    Costs are those of :class:`~streamspec.core.mestimator.MEstimator`'s table
    (projected rows): the SVD and ``A_x`` once, then one GLS step per outer iteration.

    Parameters
    ----------
    est
        The fit's :class:`~streamspec.core.projected_state.ProjectedSettings` (read, never
        written).
    max_outer
        Outer iterations at most (1 under the identity weighting, whose solution does
        not depend on the operators W is estimated at).
    triples, labels
        The counts and the symbols' labels (or None).
    bases
        A cache of the rank and bases ``(k, U, s, Q)`` by ``(id(triples), rank, k', per_rank)``
        and of the :class:`~streamspec.core.pair_index.PairIndex` by ``("index", id(triples))``,
        shared by fits of the same counts (θ_M and θ_spec under the backoff), or None.
    scored_only
        The model's predictions alone are used (the backoff's 90%): on large problems
        (n · k · k' > 2²⁴) it is then θ_spec, the first step, with no weighted symbols.
    keep_state
        Keep what a warm refit reuses (:class:`~streamspec.core.projected_state.ProjectedState`,
        the ``state_`` attribute): the weighting blocks are then kept too.
    reference
        Counts of which ``triples`` are a part (the backoff's 90% is a part of all the
        counts), fitted next with the same ``bases`` cache: their bases are computed (and
        cached for that fit) and this fit's are found from them by one step of subspace
        iteration on this P21 (:func:`_refined_basis`), instead of a second truncated SVD
        from a random start.
    """

    def __init__(self, est: ProjectedSettings, max_outer: int, triples: Triples,
                 labels: list | None, bases: dict | None = None, scored_only: bool = False,
                 keep_state: bool = False, reference: Triples | None = None):
        super().__init__(est, 1 if est.weighting == "identity" else max_outer)
        self.triples, self.labels, self.bases, self.scored_only = triples, labels, bases, scored_only
        self.reference = reference if bases is not None and reference is not triples else None
        self.keep_state = keep_state
        self.history: list = []
        self.rejected: list = []
        self.rejected_sweeps: list = []
        self.last_weighting: ProjectedWeighting = ProjectedIdentityWeighting()
        self.blocks: list | None = None
        self.right: np.ndarray | None = None  # the operators are base @ right (a warm θ_spec refit)
        self.info = RefitInfo()

    # ------------------------------------------------------------------ prepare

    def prepare(self) -> None:
        """Basis (U, Q), ``M = Uᵀ P21 Q``, b1, b∞, the conditions A_x and θ_spec's operators."""
        triples = self.triples
        N = triples.total
        if not N > 0:
            raise ValueError(EMPTY_COUNTS)
        self.index = self._pair_index()
        c21 = self.second_moment_counts()
        P21 = c21 * (1.0 / N)
        k, U, s, Q = self._basis(P21, N)
        Y = np.asarray(c21 @ Q)
        X = np.asarray(c21.T @ U) if self.keep_state else None
        c1 = np.bincount(self.index.x1, weights=triples.weights, minlength=triples.n)
        self.set_basis(k, U, s, Q, Y, X, c1, self.index.middle_counts())
        self.A = project_triples(triples, self.U, self.Q, middle=self.active, index=self.index)
        self.base = self.spectral_operators()

    def second_moment_counts(self):
        """The unnormalised second moment the conditions project on: ``c21[x2, x1]`` (P21 · N),
        sparse. Over windows (:class:`~streamspec.core.projected_windows.WindowProjectedFit`) the
        Hankel counts of (current window, past). O(nnz)."""
        return self.index.c21()

    def n_operators(self) -> int:
        """The number of operators (symbols) fitted: the triples' alphabet. O(1)."""
        return self.triples.n

    def start_counts(self, c1: np.ndarray) -> np.ndarray:
        """The unnormalised distribution b1 projects: the first symbol's marginal ``c1``
        (stationarity; over windows, the current windows' marginal). O(n)."""
        return c1

    def pair_current(self) -> np.ndarray | None:
        """Per distinct pair (x2, x3), the index of the row of the second moment the pair's
        samples fall in, or None when it is x2 itself (triples). O(1) here."""
        return None

    def _pair_index(self, triples: Triples | None = None) -> PairIndex:
        """The counts' :class:`PairIndex`, shared through the bases cache by fits of the same counts."""
        triples = self.triples if triples is None else triples
        key = ("index", id(triples))
        if self.bases is not None and key in self.bases:
            return self.bases[key]
        index = PairIndex(triples)
        if self.bases is not None:
            self.bases[key] = index
        return index

    def _basis(self, P21, N: float, triples: Triples | None = None
               ) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
        """``(k, U, s, Q)``: the rank and the top-k' singular triplets, from the cache if there
        (of ``triples``, default the fit's). With a ``reference`` above
        :data:`~streamspec.core.subspace.DENSE_SVD_MAX` symbols: from the reference's bases,
        by :func:`_refined_basis`."""
        est = self.est
        triples = self.triples if triples is None else triples
        key = (id(triples), est.rank, est.n_conditions, est.per_rank)
        if self.bases is not None and key in self.bases:
            return self.bases[key]
        ref = self.reference if triples is self.triples else None
        if ref is not None and P21.shape[0] > DENSE_SVD_MAX:
            ref_index = self._pair_index(ref)
            start = self._basis(ref_index.c21() * (1.0 / ref.total), ref.total, ref)
            found = _refined_basis(P21, start)
        else:
            found = projected_basis(P21, N, est.rank, est.n_conditions, est.per_rank, est.auto_cap,
                                    random_state=est.random_state)
        if self.bases is not None:
            self.bases[key] = found
        return found

    def set_basis(self, k: int, U: np.ndarray, s: np.ndarray, Q: np.ndarray, Y: np.ndarray,
                  X: np.ndarray | None, c1: np.ndarray, n_middle: np.ndarray) -> None:
        """Everything that follows from the bases and the unnormalised ``Y = c21 Q``, ``c1``.

        ``M = Uᵀ P21 Q``, its square part ``M1 = Uᵀ P21 V`` (V: the first k columns of Q),
        ``b1 = Uᵀ P1``, ``b∞ = M1⁻ᵀ Vᵀ P1`` (θ_spec's, (7.1) in any bases) and the
        symbols whose conditions are kept. O(n · k · k').
        """
        N = self.triples.total
        n, kp = self.n_operators(), Q.shape[1]
        self.n, self.k, self.kp = n, k, kp
        self.U_full, self.s, self.Q, self.Y, self.X = U, s, Q, Y, X
        self.U = np.ascontiguousarray(U[:, :k])
        self.c1, self.n_middle = c1, n_middle[:n]
        M_raw = self.U.T @ Y  # (k, k') = N [Σ_k, 0] up to rounding in exact singular bases
        self.M = M_raw / N
        # why pinv: M1 is singular when P21 has rank below k (a handful of triples)
        self.M1inv = np.linalg.pinv(self.M[:, :k])
        self.b1 = self.U.T @ self.start_counts(c1) / N
        self.binf = self.M1inv.T @ (Q[:, :k].T @ c1) / N
        self.active = weighted_symbols(self.est, self.n_middle, n, k, kp)
        if self.scored_only and n * k * kp > _FULL_CONDITIONS_MAX:
            # why θ_spec for the backoff's 90% on large problems: it only scores ≤ 2,000
            # held-out contexts, where θ_M's GLS step changed the final held-out log loss by
            # < 10⁻⁵ nats (Zipf stream, n = 10⁵) and cost a third of the default fit
            self.active = np.empty(0, dtype=np.int64)
            self.max_outer = 1

    def spectral_operators(self, out: np.ndarray | None = None) -> np.ndarray:
        """θ_spec's operators of every symbol, ``B_x = (Uᵀ P3x1[x] V) M1⁻¹`` (7.1).

        From A where it exists (its first k columns), else one projection of the other
        symbols' triples with ``right = V M1⁻¹``, O(nnz·k + pairs·k²).
        """
        n, k, active, A = self.n, self.k, self.active, self.A
        base = out if out is not None else self._spare_operators()
        base = fresh_array((n, k, k)) if base is None else base  # (core/fresh_memory.py: why)
        if active.size < n:
            rest = np.setdiff1d(np.arange(n), active, assume_unique=True)
            project_triples(self.triples, self.U, self.Q[:, :k] @ self.M1inv, middle=rest,
                            out=base, index=self.index)
        for a in range(0, active.size, 4096):
            base[active[a : a + 4096]] = A[a : a + 4096, :, :k] @ self.M1inv
        return base

    def _spare_operators(self) -> np.ndarray | None:
        """The operators of the backoff's 90% fit, left in the bases cache under ``"spare"``
        (:func:`~streamspec.core.warm_fit.drop_cached`), to be overwritten by this fit's when
        they have the shape and nothing else holds them (the 90% model was scored and
        dropped); else None. Why: a fresh n·k² array is paid for in page faults on its
        first write, 6-9 s for 2 GB on the shared machine (n = 10⁵, k = 50), the
        projection itself 2-3 s. O(1)."""
        bases = self.bases if self.bases is not None else {}
        spare, owner = bases.pop("spare", None), bases.pop("spare_of", None)
        # the model it came from must be gone (its weak reference dead), and nothing else may
        # hold the array: 2 references on CPython, ``spare`` and getrefcount's argument
        if (spare is None or owner is None or owner() is not None
                or spare.shape != (self.n, self.k, self.k) or spare.dtype != np.float64
                or not spare.flags.writeable or not spare.flags.c_contiguous
                or sys.getrefcount(spare) > 2):
            return None
        return spare

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
        self.ops = np.einsum("ab,xbc,dc->xad", T, warm.operators(), T, optimize=True)

    # ------------------------------------------------------------------ outer iterations

    def weighting(self, ops: np.ndarray) -> ProjectedWeighting:
        """W re-estimated at the operators ``ops`` for the kept symbols (Algorithm 1)."""
        est = self.est
        return projected_weighting(est.weighting, self.triples, self.U, self.Q, ops,
                                   shrinkage=est.shrinkage, ridge=est.ridge, index=self.index,
                                   symbols=self.active, current=self.pair_current())

    def r_step(self) -> tuple[np.ndarray, float | None, float]:
        """``(new operators of the active symbols, loss before, loss after)`` of one step.

        Cold, the first step is W = I: θ_spec's operators, whatever the start.
        """
        active = self.active
        if self.ops is None:
            ops = self.base[active]  # why once: a copy of the active symbols' operators each time
            return ops, None, identity_loss(self.A, self.M, ops)
        W = self.weighting(self.ops)
        self.last_weighting = W
        self.blocks = [] if self.keep_state else None
        return projected_step(W, active, self.A, self.M, self.ops, record=self.blocks)  # not a copy

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
        """Whether the operators moved by less than ``tol`` (relative) in this iteration: those of
        the weighted symbols, and at a warm start's first iteration every symbol's (it may already
        be the solution). A block of symbols at a time: copies of the weighted rows or of all n·k²
        operators (4 GB at n = 10⁵, rank 50) sat on the fit's memory peak. O(n · k²)."""
        ops, active = self.ops, self.active
        if ops is None:  # cold: the first step is W = I
            return False
        # later iterations: the weighted symbols (new's rows, in order); the first: every symbol
        rows, at = (active, None) if it > 0 else (np.arange(self.n), np.full(self.n, -1))
        if at is not None:  # the weighted symbols' rows of new; base's operators elsewhere
            at[active] = np.arange(active.size)
        moved = scale = 0.0
        for a in range(0, rows.size, ROW_BLOCK):
            g, old = rows[a : a + ROW_BLOCK], ops[rows[a : a + ROW_BLOCK]]
            if at is None:
                d = new[a : a + ROW_BLOCK] - old
            else:
                d, mine = self.base[g], at[g]
                d[mine >= 0] = new[mine[mine >= 0]]
                d -= old
            moved += float(np.einsum("xij,xij->", d, d))
            scale += float(np.einsum("xij,xij->", old, old))
        return bool(np.sqrt(moved) <= self.est.tol * max(np.sqrt(scale), 1e-300))

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
            del new  # why: not held through the next step's GLS, the fit's memory peak (171 MB at n = 10⁵)
            if converged:
                break
        if self.ops is None:  # pragma: no cover - the first cold iteration is W = I, never rejected
            raise ValueError("the projected M-estimator found no finite solution")

    # ------------------------------------------------------------------ finish

    def finish(self) -> tuple[ObservableOperatorModel, dict[str, Any]]:
        """The model (θ_spec's parametrisation) and the fitted attributes.

        The loss is the last step's, under the weighting of that step (W estimated at the
        operators it started from); re-estimating W at the solution would cost as much as
        another step (11 of 63 s at n = 10⁵), and at convergence the two agree.
        """
        ops, history, est = self.ops, self.history, self.est
        loss = history[-1][-1]
        factors = MFactors(ops, self.U, "projected", loss=loss, history=history,
                           rejected=self.rejected_sweeps, right=self.right)
        # θ_spec's models (SpectralEstimator) carry no factors: saved, they would double a
        # checkpoint, and its warm refits start from the state instead
        model_factors = None if est.per_rank == 1 else factors
        model = ObservableOperatorModel(
            self.b1, self.binf, ops, filter=est.filter, window=est.model_window, min_proba=est.min_proba,
            symbols=self.labels, rank=self.k, factors=model_factors, right=self.right)
        self.model = model
        fitted = {
            "factors_": factors, "weighting_": self.last_weighting, "loss_history_": history,
            "rejected_": self.rejected, "rejected_sweeps_": self.rejected_sweeps,
            "rank_": self.k, "n_conditions_": self.kp, "basis_": (self.U, self.Q),
            "refit_": self.info,
        }
        if self.keep_state:
            fitted["state_"] = self.state(ops)
        return model, fitted

    def state(self, ops: np.ndarray) -> ProjectedState:
        """What a warm refit reuses (:class:`ProjectedState`): O(nnz + n·k') memory, no copies."""
        t = self.triples
        X = self.X if self.X is not None else np.asarray(self.index.c21().T @ self.U_full)
        blocks, counts, tau_x = self.blocks, None, None
        if blocks is not None:
            counts = self.n_middle.copy()
            tau_x = getattr(self.last_weighting, "tau_x", None)
        A_raw = self.A
        A_raw *= t.total  # unnormalised (in place: the fit is done with A): counts are added to it
        return ProjectedState(settings=self.est, triples=Triples(t.n, t.codes, t.weights),
                              c1=self.c1, U=self.U_full, Q=self.Q, s=self.s, k=self.k, Y=self.Y,
                              X=X, active=self.active, A=A_raw, ops=ops, n_middle=self.n_middle,
                              blocks=blocks, block_counts=counts, tau_x=tau_x, info=self.info,
                              model=self.model, right=self.right)
