"""The HMMs of the paper's section 5 and its deterministic training sequence.

Configurations only: each function returns a :class:`~streamspec.core.hmm.HMM`
(or, for the deterministic experiment, the sequence itself); the experiments
that use them live in :mod:`streamspec.experiments.paper_toy`.
"""

from __future__ import annotations

import numpy as np

from streamspec.core.hmm import HMM

__all__ = [
    "noisy_emissions",
    "ring_hmm",
    "grid_hmm",
    "grid_rank",
    "chain_hmm",
    "synthetic_hmm",
    "deterministic_sequence",
]


def noisy_emissions(m: int, p_correct: float) -> np.ndarray:
    """(m, m) emissions: the true state with ``p_correct``, any other uniformly."""
    emit = np.full((m, m), (1.0 - p_correct) / (m - 1))
    np.fill_diagonal(emit, p_correct)
    return emit


def ring_hmm(p_correct: float = 0.6) -> HMM:
    """The paper's ring (figure 2a), states h1..h5 as indices 0..4.

    h1 goes to h2 or h5 with probability 0.5 each; h2 (h5) returns to h1 with 0.9 and
    goes to h3 (h4) with 0.1; h3 goes to h2 and h4 to h3 with probability 1 (the
    arrows of the figure). The true state is observed with ``p_correct``.
    """
    T = np.zeros((5, 5))  # T[to, from]
    T[1, 0] = T[4, 0] = 0.5
    T[0, 1], T[2, 1] = 0.9, 0.1
    T[0, 4], T[3, 4] = 0.9, 0.1
    T[1, 2] = 1.0
    T[2, 3] = 1.0
    return HMM(T, noisy_emissions(5, p_correct))


def grid_hmm(side: int, p_correct: float = 0.9) -> HMM:
    """The paper's grid (figure 2b): a random walk to a uniformly chosen 4-neighbour."""
    m = side * side
    T = np.zeros((m, m))
    for r in range(side):
        for c in range(side):
            nbrs = [(r + dr, c + dc) for dr, dc in ((1, 0), (-1, 0), (0, 1), (0, -1))
                    if 0 <= r + dr < side and 0 <= c + dc < side]
            for rr, cc in nbrs:
                T[rr * side + cc, r * side + c] = 1.0 / len(nbrs)
    return HMM(T, noisy_emissions(m, p_correct))


def grid_rank(side: int) -> int:
    """The rank of the transition matrix of :func:`grid_hmm` (2, 6, 20 for sides 2, 3, 5).

    The grid experiment fits its models at this rank: at rank = number of symbols
    every weighting gives exactly θ_spec.
    """
    return int(np.linalg.matrix_rank(grid_hmm(side).T))


def chain_hmm(p_reset: float, n_states: int = 5, p_correct: float = 0.6) -> HMM:
    """The paper's chain (figure 2c): advance with ``1 - p``, reset to h1 with ``p``.

    The last state always resets. The observation model is our choice (the paper
    gives none): the ring's, the true state with ``p_correct``.
    """
    T = np.zeros((n_states, n_states))
    for h in range(n_states - 1):
        T[h + 1, h] = 1.0 - p_reset
        T[0, h] += p_reset
    T[0, n_states - 1] = 1.0
    return HMM(T, noisy_emissions(n_states, p_correct))


def synthetic_hmm(n_states: int, n_symbols: int, random_state: int = 0, draws: int = 20) -> HMM:
    """A random "well-behaving" HMM: the best conditioned of ``draws`` random draws.

    Each draw has sticky transitions ``T = 0.5 I + 0.5 D`` (columns of D from
    Dirichlet(1)) and peaked emissions (columns from Dirichlet(0.3)); the draw with
    the largest ``σ_m(P21) / σ_1(P21)`` is kept. (Plain Dirichlet(1) HMMs have a
    median ratio of 0.003 for m = 5, n = 10 and 0.0005 for m = 10, n = 20.)
    """
    rng = np.random.default_rng(random_state)
    best, best_ratio = None, -1.0
    for _ in range(draws):
        T = 0.5 * np.eye(n_states) + 0.5 * rng.dirichlet(np.ones(n_states), size=n_states).T
        emit = rng.dirichlet(np.full(n_symbols, 0.3), size=n_states).T
        hmm = HMM(T, emit)
        P21 = hmm.O @ hmm.T @ np.diag(hmm.pi) @ hmm.O.T
        sv = np.linalg.svd(P21, compute_uv=False)
        if sv[n_states - 1] / sv[0] > best_ratio:
            best, best_ratio = hmm, sv[n_states - 1] / sv[0]
    return best


def deterministic_sequence(length: int, n_zeros: int = 10) -> np.ndarray:
    """The sequence ``0`` × ``n_zeros`` then ``1`` up to ``length`` symbols.

    Examples
    --------
    >>> deterministic_sequence(12).tolist()
    [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1]
    """
    return (np.arange(length) >= n_zeros).astype(np.int64)
