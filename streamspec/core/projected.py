"""The projected formulation of θ_M: per-symbol GLS steps under ``Σ_x⁻¹`` (math.md section 6)."""

from __future__ import annotations

import numpy as np

from streamspec.core.solvers import gls_operators
from streamspec.core.weighting import ProjectedWeighting

__all__ = ["SigmaInverse", "sigma_groups", "woodbury", "projected_step", "projected_loss",
           "identity_loss", "SYMBOL_BLOCK"]

SYMBOL_BLOCK = 1 << 22  # floats of Σ_x (k'² each) built at once by the projected formulation


class SigmaInverse:
    """``Σ_x⁻¹`` of a group of symbols, applied to right-hand sides of shape (b, k', r).

    Four forms, whichever is cheapest for the group: ``None`` (W = I), a scale
    ``1 / c_x`` (Σ_x = c_x I: a symbol with no counted pair), a diagonal, the
    Woodbury form ``(R - Vᵀ (c I + V Vᵀ)⁻¹ V R) / c`` for ``Σ_x = c I + Vᵀ V`` with V of
    m ≪ k' rows (a symbol seen after few distinct x1), or dense inverses.
    """

    def __init__(self, kind: str, data=None, V=None, c=None):
        self.kind, self.data, self.V, self.c = kind, data, V, c

    def apply(self, R: np.ndarray) -> np.ndarray:
        if self.kind == "identity":
            return R
        if self.kind == "scale":
            return R * self.data[:, None, None]
        if self.kind == "diagonal":
            return R * self.data[:, :, None]
        if self.kind == "woodbury":
            VR = self.V @ R  # (b, m, r)
            return (R - self.V.transpose(0, 2, 1) @ (self.data @ VR)) / self.c[:, None, None]
        return self.data @ R


def sigma_groups(W: ProjectedWeighting, symbols: np.ndarray, kp: int):
    """``(symbols, Σ⁻¹)`` pairs covering every symbol, each group sharing one form of Σ_x⁻¹.

    "per_symbol": a symbol whose pair sums ``C[x, ·]`` have m entries has
    ``Σ_x = c_x I + (1 - s_x) Q_Jᵀ diag(C[x, J]) Q_J``, the identity plus rank m. Most
    symbols of a large alphabet are rare (m ≪ k'): they are solved by Woodbury,
    O(m k' r + m³) each, batched by m rounded up to a power of two (zero rows pad V);
    only the symbols with m > k'/2 get a dense k' × k' inverse, O(k'³). So a step
    costs O(pairs · k' · k + n_dense · k'³) rather than O(n · k'³).
    """
    if W.mode in ("identity", "diagonal"):
        step = max(1, SYMBOL_BLOCK // kp)
        for lo in range(0, symbols.size, step):
            idx = symbols[lo : lo + step]
            if W.mode == "identity":
                yield idx, SigmaInverse("identity")
            else:
                yield idx, SigmaInverse("diagonal", 1.0 / W.factor_of(idx))
        return
    C = W.C
    m = np.diff(C.indptr)[symbols]
    live = W.tau_x[symbols] > 0
    shrink = W.shrink[symbols]
    c = np.where(live, (shrink + W.ridge) * W.tau_x[symbols], 1.0)
    flat = ~live | (m == 0) | (shrink >= 1.0)
    idx = np.flatnonzero(flat)
    if idx.size:
        yield symbols[idx], SigmaInverse("scale", 1.0 / c[idx])
    low_rank = ~flat & (2 * m <= kp) & (c > 0)
    size = np.where(low_rank, 1 << np.ceil(np.log2(np.maximum(m, 1))).astype(np.int64), 0)
    for mm in np.unique(size[low_rank]):
        members = np.flatnonzero(size == mm)
        step = max(1, SYMBOL_BLOCK // (int(mm) * kp + int(mm) ** 2))
        for a in range(0, members.size, step):
            g = members[a : a + step]
            yield symbols[g], woodbury(W, symbols[g], int(mm), c[g])
    dense = np.flatnonzero(~flat & ~low_rank)
    step = max(1, SYMBOL_BLOCK // (kp * kp))
    for a in range(0, dense.size, step):
        g = symbols[dense[a : a + step]]
        F = W.factor_of(g)
        try:
            # why: one batched inverse per block, then only matrix products (the GLS step,
            # the loss before and after all reuse it); Σ_x is positive definite once shrunk
            yield g, SigmaInverse("dense", np.linalg.inv(F))
        except np.linalg.LinAlgError:  # Σ_x singular (shrinkage and ridge 0): pseudo-inverse
            yield g, SigmaInverse("dense", np.linalg.pinv(F, hermitian=True))


def woodbury(W: ProjectedWeighting, g: np.ndarray, mm: int, c: np.ndarray) -> SigmaInverse:
    """Woodbury form of ``Σ_x⁻¹`` for symbols ``g`` with at most ``mm`` pairs each."""
    C, kp = W.C, W.Q.shape[1]
    V = np.zeros((g.size, mm, kp))
    for r, x in enumerate(g.tolist()):
        lo, hi = C.indptr[x], C.indptr[x + 1]
        V[r, : hi - lo] = np.sqrt((1 - W.shrink[x]) * C.data[lo:hi])[:, None] * W.Q[C.indices[lo:hi]]
    inner = V @ V.transpose(0, 2, 1)
    inner[:, np.arange(mm), np.arange(mm)] += c[:, None]
    return SigmaInverse("woodbury", np.linalg.inv(inner), V=V, c=c)


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
