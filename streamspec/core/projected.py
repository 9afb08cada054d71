"""The projected formulation of θ_M: per-symbol GLS steps under ``Σ_x⁻¹`` (math.md section 6)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from streamspec.core.projected_weighting import SYMBOL_BLOCK, ProjectedWeighting
from streamspec.core.sigma_inverse import SigmaInverse
from streamspec.core.solvers import gls_operators

__all__ = ["SigmaInverse", "sigma_groups", "projected_step", "projected_loss", "identity_loss",
           "SYMBOL_BLOCK"]


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
