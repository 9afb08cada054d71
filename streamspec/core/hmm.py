"""Hidden Markov models with known parameters: sampling and exact probabilities.

Used as ground truth in tests, demos and the paper's experiments.
"""

from __future__ import annotations

import numpy as np

from streamspec.core.model import ObservableOperatorModel

__all__ = ["HMM"]


class HMM:
    """A discrete HMM with ``m`` hidden states and ``n`` symbols.

    Parameters
    ----------
    T
        Transitions, (m, m), column-stochastic: ``T[h2, h1] = Pr(h_{t+1} = h2 | h_t = h1)``.
    O
        Emissions, (n, m), column-stochastic: ``O[x, h] = Pr(x_t = x | h_t = h)``.
    pi
        Initial distribution, (m,); the stationary distribution of T when ``None``.

    Examples
    --------
    >>> hmm = HMM(T=[[0.9, 0.2], [0.1, 0.8]], O=[[1.0, 0.0], [0.0, 1.0]])
    >>> hmm.pi.round(3).tolist()
    [0.667, 0.333]
    >>> round(hmm.joint_proba([0, 0]), 4)
    0.6
    """

    def __init__(self, T, O, pi=None):
        self.T = np.asarray(T, dtype=np.float64)
        self.O = np.asarray(O, dtype=np.float64)
        m = self.T.shape[0]
        if self.T.shape != (m, m) or self.O.ndim != 2 or self.O.shape[1] != m:
            raise ValueError(f"T must be (m, m) and O (n, m), got {self.T.shape} and {self.O.shape}")
        for name, a in (("T", self.T), ("O", self.O)):
            if (a < 0).any() or not np.allclose(a.sum(axis=0), 1.0):
                raise ValueError(f"the columns of {name} must be probability distributions")
        self.pi = self.stationary() if pi is None else np.asarray(pi, dtype=np.float64)

    @property
    def n_symbols(self) -> int:
        return self.O.shape[0]

    @property
    def n_states(self) -> int:
        return self.T.shape[0]

    @classmethod
    def random(cls, n_states: int, n_symbols: int, random_state=None, concentration: float = 1.0):
        """Columns of T and O drawn from symmetric Dirichlet distributions."""
        rng = np.random.default_rng(random_state)
        T = rng.dirichlet(np.full(n_states, concentration), size=n_states).T
        O = rng.dirichlet(np.full(n_symbols, concentration), size=n_states).T
        return cls(T, O)

    def stationary(self) -> np.ndarray:
        w, v = np.linalg.eig(self.T)
        p = np.real(v[:, np.argmin(np.abs(w - 1))])
        return p / p.sum()

    def operators(self) -> ObservableOperatorModel:
        """The exact model: ``b1 = π``, ``B_x = T diag(O[x])``, ``b∞ = 1``."""
        B = np.einsum("ab,xb->xab", self.T, self.O)
        return ObservableOperatorModel(self.pi, np.ones(self.n_states), B)

    def joint_proba(self, seq) -> float:
        return self.operators().joint_proba(seq)

    def sample(self, length: int, random_state=None) -> np.ndarray:
        """One sequence of ``length`` symbols, the first state drawn from ``pi``.

        The hidden chain is walked in plain Python (a numpy call per step would
        cost more than the step); the emissions are then drawn state by state,
        vectorised.
        """
        from bisect import bisect_right

        rng = np.random.default_rng(random_state)
        length = int(length)
        m = self.n_states
        cum = [np.cumsum(self.T[:, h]).tolist() for h in range(m)]
        u = rng.random(length).tolist()
        states = np.empty(length, dtype=np.int64)
        h = min(int(np.searchsorted(np.cumsum(self.pi), rng.random())), m - 1)
        for t in range(length):
            states[t] = h
            h = min(bisect_right(cum[h], u[t]), m - 1)
        out = np.empty(length, dtype=np.int64)
        cumO = np.cumsum(self.O, axis=0)
        v = rng.random(length)
        for h in range(m):
            at = states == h
            out[at] = np.minimum(np.searchsorted(cumO[:, h], v[at], side="right"), self.n_symbols - 1)
        return out

    def sample_many(self, count: int, length: int, random_state=None) -> np.ndarray:
        """``count`` independent sequences, shape (count, length), vectorised over sequences."""
        rng = np.random.default_rng(random_state)
        Tc = np.cumsum(self.T, axis=0)
        Oc = np.cumsum(self.O, axis=0)
        h = np.minimum(np.searchsorted(np.cumsum(self.pi), rng.random(count)), self.n_states - 1)
        out = np.empty((count, int(length)), dtype=np.int64)
        for t in range(int(length)):
            u = rng.random(count)
            out[:, t] = np.minimum((Oc[:, h] < u).sum(axis=0), self.n_symbols - 1)
            u = rng.random(count)
            h = np.minimum((Tc[:, h] < u).sum(axis=0), self.n_states - 1)
        return out
