"""The exact forward filter of a hidden Markov model, as a next-symbol predictor.

A proper HMM (non-negative, stochastic rows) cannot blow up the way an estimated
observable-operator model can (docs/math.md section 4): its forward filter carries the
whole history in a probability vector over the hidden states, at O(K²) per symbol. This
is the long-memory part of streamspec's predictions (:mod:`streamspec.core.backoff`).

Orientation as hmmlearn: ``transmat[i, j] = Pr(h' = j | h = i)``,
``emission[i, x] = Pr(x | h = i)``. The *predictive state* ``a_t`` is the distribution of
the hidden state of symbol t given the symbols before it: ``a_0 = startprob``,
``a_{t+1} ∝ (a_t ∘ emission[:, x_t]) · transmat``, and ``Pr(x_t | x_<t) = a_t ·
emission[:, x_t]``. A symbol the HMM gives probability 0 (or does not know: an index
at or beyond its alphabet) moves the state by the transition only.
"""

from __future__ import annotations

import numpy as np

__all__ = ["HMMFilter", "predictive_states", "advance", "filtered", "symbol_probas"]


class HMMFilter:
    """The arrays of an HMM that its forward filter needs (hmmlearn's names), validated.

    What the predictor keeps of a :class:`~streamspec.core.hidden_markov_model.HiddenMarkovModel`
    (``HMMFilter.of(hmm)``): plain arrays, no labels. Memory O(K · (K + n)).

    Examples
    --------
    >>> f = HMMFilter([1.0, 0.0], [[0.5, 0.5], [0.5, 0.5]], [[0.9, 0.1], [0.2, 0.8]])
    >>> f.n_states, f.n_symbols
    (2, 2)
    """

    def __init__(self, startprob, transmat, emissionprob):
        self.startprob_ = np.asarray(startprob, dtype=np.float64)
        self.transmat_ = np.asarray(transmat, dtype=np.float64)
        self.emissionprob_ = np.asarray(emissionprob, dtype=np.float64)
        k = self.startprob_.size
        for name, a, shape in (("startprob", self.startprob_, (k,)), ("transmat", self.transmat_, (k, k)),
                               ("emissionprob", self.emissionprob_, (k, self.emissionprob_.shape[-1]))):
            if a.shape != shape or not np.isfinite(a).all() or (a < 0).any():
                raise ValueError(f"{name} must be a finite non-negative array of shape {shape}")
            if not np.allclose(a.sum(axis=-1), 1.0, atol=1e-6):
                raise ValueError(f"{name} rows must sum to 1")

    @classmethod
    def of(cls, hmm) -> HMMFilter:
        """The filter of any object with ``startprob_``, ``transmat_`` and ``emissionprob_``. O(K · n)."""
        return cls(hmm.startprob_, hmm.transmat_, hmm.emissionprob_)

    @property
    def n_states(self) -> int:
        return self.startprob_.size

    @property
    def n_symbols(self) -> int:
        return self.emissionprob_.shape[1]

    def __repr__(self) -> str:
        return f"HMMFilter(n_states={self.n_states}, n_symbols={self.n_symbols})"


def filtered(state: np.ndarray, emission: np.ndarray, x: int) -> np.ndarray:
    """The filtered state after symbol ``x`` from predictive state ``state``: ``state ∘ emission[:, x]``
    normalised; ``state`` itself when the HMM gives ``x`` no mass or does not know it. O(K).

    Examples
    --------
    >>> filtered(np.array([0.5, 0.5]), np.array([[0.9, 0.1], [0.3, 0.7]]), 0).tolist()
    [0.75, 0.25]
    """
    post = state * emission[:, x] if 0 <= x < emission.shape[1] else state
    z = post.sum()
    return post / z if z > 0 else state / state.sum()


def advance(state: np.ndarray, transmat: np.ndarray, emission: np.ndarray, x: int) -> np.ndarray:
    """The predictive state after symbol ``x`` from predictive state ``state``. O(K²).

    Examples
    --------
    >>> T = np.array([[0.9, 0.1], [0.2, 0.8]]); E = np.array([[1.0, 0.0], [0.0, 1.0]])
    >>> advance(np.array([0.5, 0.5]), T, E, 1).tolist()
    [0.2, 0.8]
    """
    return filtered(state, emission, x) @ transmat


def predictive_states(startprob: np.ndarray, transmat: np.ndarray, emission: np.ndarray,
                      x) -> np.ndarray:
    """The predictive states before each symbol and after the last, shape (T + 1, K). O(T · K²).

    Examples
    --------
    >>> T = np.array([[0.0, 1.0], [1.0, 0.0]]); E = np.array([[1.0, 0.0], [0.0, 1.0]])
    >>> predictive_states(np.array([1.0, 0.0]), T, E, [0, 1]).tolist()
    [[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]]
    """
    x = np.asarray(x, dtype=np.int64)
    out = np.empty((x.size + 1, startprob.size))
    a = out[0] = np.asarray(startprob, dtype=np.float64)
    for t in range(x.size):
        a = out[t + 1] = advance(a, transmat, emission, int(x[t]))
    return out


def symbol_probas(states: np.ndarray, emission: np.ndarray, x) -> np.ndarray:
    """``Pr(x_t | state_t)`` for paired states (T, K) and symbols (T,); 0 for unknown symbols. O(T · K).

    Examples
    --------
    >>> E = np.array([[0.5, 0.5], [0.1, 0.9]])
    >>> symbol_probas(np.array([[1.0, 0.0], [0.5, 0.5]]), E, [0, 1]).tolist()
    [0.5, 0.7]
    """
    x = np.asarray(x, dtype=np.int64)
    known = (x >= 0) & (x < emission.shape[1])
    cols = emission[:, np.where(known, x, 0)].T  # (T, K)
    return np.where(known, np.einsum("tk,tk->t", np.atleast_2d(states), cols), 0.0)
