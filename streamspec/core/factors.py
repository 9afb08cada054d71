"""The factors of a fitted θ_M model, kept on the model for warm starts (docs/math.md section 6)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["MFactors", "factor_operators"]


@dataclass
class MFactors:
    """The fitted factors, kept on the model for warm starts (and saved in its checkpoint).

    Dense formulation: ``B_x = R_x S_xᵀ``, R (n, n, k), S (n, k) or (n, n, k).
    Projected formulation (``factorization == "projected"``): R holds the k × k
    operators ``B̃_x`` (n, k, k) and S the basis U (n, k) they are expressed in
    (``B_x = U B̃_x Uᵀ`` in symbol space), which is all a warm start needs; with ``right``
    (k, k) the operators are ``R[x] @ right`` (a warm refit's factored form).
    """

    R: np.ndarray  # (n, n, k): R[x, i, w]; projected: (n, k, k) operators B̃_x
    S: np.ndarray  # (n, k) shared/fixed/projected (U), or (n, n, k) per symbol
    factorization: str
    loss: float = float("nan")
    history: list = field(default_factory=list)
    rejected: list = field(default_factory=list)  # (outer, sweep, rejected loss, kept loss)
    right: np.ndarray | None = None

    def operators(self) -> np.ndarray:
        """The model's operators: (n, n, n) for the dense factors, (n, k, k) projected
        (``R @ right`` when factored: O(n · k³))."""
        if self.factorization == "projected":
            return self.R if self.right is None else self.R @ self.right
        return factor_operators(self.R, self.S)

    def padded(self, n: int) -> MFactors:
        """The same factors for a larger alphabet (new symbols: zero rows)."""
        m = self.R.shape[0]
        if n == m:
            return self
        if n < m:
            raise ValueError(f"cannot warm-start from a model with {m} symbols on {n} symbols")
        k = self.R.shape[2]
        if self.factorization == "projected":
            R = np.zeros((n, k, k))
            R[:m] = self.R
            S = np.zeros((n, self.S.shape[1]))
            S[:m] = self.S
            return MFactors(R, S, self.factorization, self.loss, list(self.history),
                            right=self.right)
        R = np.zeros((n, n, k))
        R[:m, :m] = self.R
        if self.S.ndim == 2:
            S = np.zeros((n, k))
            S[:m] = self.S
        else:
            S = np.zeros((n, n, k))
            S[:m, :m] = self.S
            S[m:, :, :] = np.eye(n, k)
        return MFactors(R, S, self.factorization, self.loss, list(self.history))


def factor_operators(R: np.ndarray, S: np.ndarray) -> np.ndarray:
    """``B_x = R_x S_xᵀ`` for a shared (n, k) or per-symbol (n, n, k) S."""
    if S.ndim == 2:
        return np.einsum("xiw,sw->xis", R, S, optimize=True)
    return np.einsum("xiw,xsw->xis", R, S, optimize=True)


def factors_of(init) -> MFactors | None:
    """The factors a warm start from ``init`` uses, or ``None``.

    ``init``: ``None``, an :class:`MFactors`, a fitted model (its ``factors``) or a
    fitted estimator (its ``factors_``). Read by attribute, so that this module needs
    neither the model nor the estimator (no import cycle).
    """
    if init is None or isinstance(init, MFactors):
        return init
    found = getattr(init, "factors", None)
    return found if found is not None else getattr(init, "factors_", None)
