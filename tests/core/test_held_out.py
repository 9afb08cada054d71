"""The HMM's held-out probabilities: the exact conditional of the symbol after each context."""

from __future__ import annotations

import itertools

import numpy as np

from streamspec.core.held_out import hmm_probas
from streamspec.core.hidden_markov_model import HiddenMarkovModel


def joint(prior: np.ndarray, T: np.ndarray, E: np.ndarray, symbols) -> float:
    """Pr(symbols) of an HMM whose first state is drawn from ``prior``, by summing over every
    path of hidden states (brute force, no filter)."""
    K = prior.size
    total = 0.0
    for path in itertools.product(range(K), repeat=len(symbols)):
        p = prior[path[0]] * E[path[0], symbols[0]]
        for a, b, s in zip(path[:-1], path[1:], symbols[1:], strict=True):
            p *= T[a, b] * E[b, s]
        total += p
    return total


def test_contexts_inside_a_stream_start_from_the_law_given_and_starts_from_startprob():
    """A 3-state chain whose streams all start in state 0 but which spends most of its time
    elsewhere: given its stationary distribution (a window HMM's case), a context inside a
    stream is scored as Pr(x | u, v) under the stationary chain, a stream start's under the
    start distribution; without it (an HMM fitted on triples, whose ``startprob_`` is the
    law of a triple's first state) every context starts from ``startprob_``. Fails if the
    law given is ignored or applied to stream starts (the two laws differ by far here)."""
    rng = np.random.default_rng(0)
    T = rng.dirichlet(np.ones(3), size=3) * 0.4 + np.array([[0, 0.6, 0], [0, 0, 0.6], [0, 0.6, 0]])
    E = rng.dirichlet(np.ones(4), size=3)
    hmm = HiddenMarkovModel([1.0, 0.0, 0.0], T, E)
    pi = hmm.stationary()
    assert np.abs(pi - hmm.startprob_).sum() > 1.0
    u = np.array([2, 0, 3, -1, -1])
    v = np.array([1, 0, 3, 2, -1])
    x = np.array([0, 3, 1, 1, 2])
    start = hmm.startprob_
    for inside in (pi, start):
        got = hmm_probas(hmm, u, v, x, pi) if inside is pi else hmm_probas(hmm, u, v, x)
        want = [joint(inside, T, E, [a, b, c]) / joint(inside, T, E, [a, b])
                for a, b, c in zip(u[:3], v[:3], x[:3], strict=True)]
        want += [joint(start, T, E, [2, 1]) / joint(start, T, E, [2]), joint(start, T, E, [2])]
        np.testing.assert_allclose(got, want, rtol=1e-12)
