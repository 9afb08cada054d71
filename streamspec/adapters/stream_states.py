"""The filtered hidden state of every stream under the current HMM (``SpectralHMM(n_states=m)``)."""

from __future__ import annotations

from collections.abc import Hashable

import numpy as np

__all__ = ["HMMForward", "StreamStates"]


class HMMForward:
    """Arrays of an HMM for the per-symbol forward step: ``T`` (m, m) and ``E`` = Oᵀ (n, m)."""

    def __init__(self, hmm):
        self.hmm = hmm
        self.T = np.ascontiguousarray(hmm.transmat_)
        self.E = np.ascontiguousarray(hmm.emissionprob_.T)
        self.start = hmm.startprob_.copy()
        self.n = hmm.n_symbols
        self.m = hmm.n_states

    def step(self, alpha: np.ndarray | None, i: int) -> np.ndarray:
        """Forward recursion ``α ← (α T) ∘ O[:, i]`` normalised (O(m²)); symbol ``i`` unknown
        to the HMM (index ≥ n): no emission factor. ``alpha=None``: a stream's first symbol."""
        a = self.start if alpha is None else alpha @ self.T
        if i < self.n:
            b = a * self.E[i]
            s = b.sum()
            if s > 0:
                return b / s
        return a / a.sum()


class StreamStates:
    """Each stream's filtered state vector ``α`` (m floats), following the current HMM.

    The forward arrays (:class:`HMMForward`) are rebuilt when a refit swaps the HMM;
    the state vectors are kept across refits (warm starts keep the order of the states).
    """

    def __init__(self):
        self.alpha: dict[Hashable, np.ndarray] = {}
        self.forward: HMMForward | None = None  # the arrays of the HMM the states follow

    def forward_of(self, hmm) -> HMMForward | None:
        """The forward-step arrays of ``hmm`` (``None`` without an HMM); O(n·m) when it changed."""
        if hmm is None:
            return None
        hs = self.forward
        if hs is None or hs.hmm is not hmm:
            hs = self.forward = HMMForward(hmm)
        return hs

    def advance(self, hmm, key: Hashable, i: int) -> None:
        """One forward step of stream ``key``'s state with symbol index ``i``. O(m²)."""
        hs = self.forward_of(hmm)
        if hs is not None:
            self.alpha[key] = hs.step(self.alpha.get(key), i)

    def posterior(self, hmm, key: Hashable) -> dict[int, float]:
        """``{state: probability}`` of stream ``key`` (``startprob_`` before its first
        symbol; ``{}`` without an HMM). O(m)."""
        hs = self.forward_of(hmm)
        if hs is None:
            return {}
        alpha = self.alpha.get(key)
        if alpha is None:
            alpha = hs.start
        return dict(enumerate(alpha.tolist()))

    def predict(self, hmm, key: Hashable, labels: list, min_proba: float) -> dict[Hashable, float] | None:
        """The next-symbol distribution ``(α T) O`` over ``labels``; ``None`` without an HMM.

        Every probability is floored at ``min(min_proba, 0.5 / n)`` (labels that appeared
        after the HMM's fit: that floor), then renormalised. O(m² + n·m).
        """
        hs = self.forward_of(hmm)
        if hs is None:
            return None
        alpha = self.alpha.get(key)
        state = hs.start if alpha is None else alpha @ hs.T
        floor = min(min_proba, 0.5 / max(len(labels), 1))
        p = np.full(len(labels), floor)
        p[: hs.n] = np.maximum(hs.E @ state, floor)
        p /= p.sum()
        return dict(zip(labels, p.tolist(), strict=True))

    def end(self, key: Hashable) -> None:
        """Forget stream ``key``'s state."""
        self.alpha.pop(key, None)
