"""The HMM's held-out probabilities: the exact conditional of the symbol after each context."""

from __future__ import annotations

import itertools
import warnings
from collections import Counter

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from streamspec import MEstimator, MomentAccumulator
from streamspec.core.held_out import held_out_stretches, hmm_probas
from streamspec.core.hidden_markov_model import HiddenMarkovModel
from streamspec.core.hmm import HMM
from streamspec.core.mestimator import long_windows_of, starts_of
from streamspec.core.mixture import N_BUCKETS


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
        ctx = np.stack([u, v], axis=1)
        got = hmm_probas(hmm, ctx, x, pi) if inside is pi else hmm_probas(hmm, ctx, x)
        want = [joint(inside, T, E, [a, b, c]) / joint(inside, T, E, [a, b])
                for a, b, c in zip(u[:3], v[:3], x[:3], strict=True)]
        want += [joint(start, T, E, [2, 1]) / joint(start, T, E, [2]), joint(start, T, E, [2])]
        np.testing.assert_allclose(got, want, rtol=1e-12)


@settings(max_examples=40, deadline=None)
@given(window=st.integers(2, 3),
       streams=st.lists(st.lists(st.integers(0, 2), min_size=1, max_size=12), min_size=1, max_size=6))
def test_held_out_stretches_score_every_position_once_after_up_to_L_plus_1_symbols(window, streams):
    """From the grams and starts of ended streams, each position p of each stream is one item:
    the symbol at p after the ≤ L + 1 symbols before it (pads on the left where the stream
    began inside). Fails if a position is scored twice or missed (the first two are only in
    the starts), or given the wrong context (the symbol after a gram's centre is the only
    one whose triple the split held out with the gram)."""
    acc = MomentAccumulator(n_symbols=3, window=window)
    for key, s in enumerate(streams):
        acc.learn_many(s, key=key)
        acc.end(key)
    ctx, x, w, draws = held_out_stretches(long_windows_of(acc), starts_of(acc, 3), 10**6,
                                         np.random.default_rng(0))
    got = Counter()
    for c, s, weight in zip(ctx.tolist(), x.tolist(), w.tolist(), strict=True):
        got[(*c, s)] += weight
    want = Counter()
    for s in streams:
        for p in range(len(s)):
            before = s[max(0, p - window - 1) : p]
            want[(*([-1] * (window + 1 - len(before))), *before, s[p])] += 1.0
    assert got == want and draws == np.inf


def test_stretches_score_a_long_memory_hmm_as_its_filter_does_where_two_symbols_cannot():
    """A sticky 3-state HMM over 3 symbols: the state is read from many symbols, so scored
    after two symbols it loses much of what its filter over the whole stream knows. The
    held-out stretches of window 5 (six symbols of context, from the occupancy) must score it
    within a third of that loss of the filter's own per-symbol loss on the same streams.
    Fails if the stretches give the HMM two symbols (or none) of context."""
    T = np.full((3, 3), 0.025) + np.eye(3) * 0.925
    E = np.array([[0.6, 0.3, 0.1], [0.1, 0.6, 0.3], [0.3, 0.1, 0.6]])
    truth = HMM(T=T.T, O=E.T, pi=[1 / 3, 1 / 3, 1 / 3])
    hmm = HiddenMarkovModel([1 / 3, 1 / 3, 1 / 3], T, E)
    acc = MomentAccumulator(n_symbols=3, window=5)
    streams = [truth.sample(200, random_state=i) for i in range(100)]
    for key, s in enumerate(streams):
        acc.learn_many(s, key=key)
        acc.end(key)
    filtered = -sum(hmm.score(s) for s in streams) / sum(s.size for s in streams)
    ctx, x, w, _ = held_out_stretches(long_windows_of(acc), starts_of(acc, 3), 10**6,
                                     np.random.default_rng(0))
    inside = hmm.stationary()

    def loss(c: np.ndarray) -> float:
        return float(-(w * np.log(hmm_probas(hmm, c, x, inside))).sum() / w.sum())

    six, two = loss(ctx), loss(ctx[:, -2:])
    assert two - filtered > 0.03  # what two symbols of context lose here
    assert abs(six - filtered) < (two - filtered) / 3


def test_a_window_fit_starts_the_weights_from_stretches_and_trusts_a_long_memory_hmm():
    """Over windows the mixture's first weights come from held-out stretches (L + 1 = 4
    symbols of context here), where the sticky HMM's memory shows: in the busiest bucket
    of contexts the HMM gets > 0.85 of the weight (from held-out triples, two symbols of
    context, it got 0.573: measured at 58c815a). Fails if the weights come from the
    triples again."""
    T = np.full((3, 3), 0.025) + np.eye(3) * 0.925
    E = np.array([[0.6, 0.3, 0.1], [0.1, 0.6, 0.3], [0.3, 0.1, 0.6]])
    truth = HMM(T=T.T, O=E.T, pi=[1 / 3, 1 / 3, 1 / 3])
    acc = MomentAccumulator(n_symbols=3, window=3)
    for i in range(300):
        acc.learn_many(truth.sample(100, random_state=i), key=i)
        acc.end(i)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the fit's notes on the small alphabet
        backoff = MEstimator().fit(acc).backoff
    assert backoff.components[-1] == "hmm"
    assert backoff.mixture.blend(N_BUCKETS - 1)[-1] > 0.85
