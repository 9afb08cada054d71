"""The HMM's smoothing and held-out scoring weigh its states by the fit's occupancy, not by a
stationary distribution the fit cannot see (a near-absorbing state over short windows)."""

from __future__ import annotations

import numpy as np
from window_data import ended_split, real_set

import streamspec.core.backoff_fit as backoff_fit
from streamspec import MEstimator, MomentAccumulator
from streamspec.core.count_split import split_counts
from streamspec.core.held_out import held_out_items, hmm_probas
from streamspec.core.hidden_markov_model import HiddenMarkovModel
from streamspec.core.hmm import HMM
from streamspec.core.hmm_estimator import HMMEstimator
from streamspec.core.hmm_smoothing import smoothed_hmm
from streamspec.core.mestimator import long_windows_of, starts_of
from streamspec.core.windows import WindowCounts


def _leaky() -> tuple[np.ndarray, np.ndarray]:
    """Three states; state 2 absorbing, entered from state 0 with probability 5e-4 a step: its
    long run is all at state 2, though a stream of a few thousand symbols hardly reaches it."""
    T = np.array([[0.8995, 0.1, 0.0005], [0.3, 0.7, 0.0], [0.0, 0.0, 1.0]])
    O = np.array([[0.7, 0.2, 0.1, 0.0], [0.1, 0.1, 0.7, 0.1], [0.0, 0.0, 0.1, 0.9]])
    return T, O


def test_smoothing_uses_the_occupancy_given_not_the_absorbing_stationary_distribution():
    T, O = _leaky()
    hmm = HiddenMarkovModel([0.5, 0.5, 0.0], T, O)
    assert hmm.stationary()[2] > 0.999  # what the smoothing used to weigh the states by
    occupied = HiddenMarkovModel([0.5, 0.5, 0.0], T, O, occupancy=[0.6, 0.4, 0.0])
    good, bad = smoothed_hmm(occupied, 10_000.0), smoothed_hmm(hmm, 10_000.0)
    # 6,000 and 4,000 visits: the rows of states 0 and 1 hardly move
    assert np.abs(good.transmat_[:2] - T[:2]).max() < 1e-3
    assert np.abs(good.emissionprob_[:2] - O[:2]).max() < 1e-3
    # weighed by the stationary distribution, they had ~1 visit: half-way to state 2
    assert bad.transmat_[0, 2] > 0.4 and bad.transmat_[1, 2] > 0.4
    assert good.occupancy_.tolist() == [0.6, 0.4, 0.0]  # kept for the scoring after it


def test_a_window_fit_keeps_the_states_share_of_a_grams_positions_as_the_occupancy():
    truth = HMM.random(6, 3, random_state=2)
    acc = MomentAccumulator(n_symbols=3, window=3)
    for i in range(40):
        acc.learn_many(truth.sample(200, random_state=i), key=i)
        acc.end(i)
    est = HMMEstimator(n_states=6, random_state=0)
    model = est.fit(acc)
    L = est.window_
    assert L > 1
    # the mean state distribution over a gram's 2L + 1 positions, from its first state's
    p, seen = est.gram_startprob_, []
    for _ in range(2 * L + 1):
        seen.append(p)
        p = p @ model.transmat_
    assert np.allclose(model.occupancy_, np.mean(seen, axis=0))
    assert np.allclose(model.occupancy(), model.occupancy_)
    assert not np.allclose(model.occupancy_, est.gram_startprob_)  # not the first position alone
    assert not np.allclose(model.startprob_, model.occupancy())  # streams start elsewhere
    one = MomentAccumulator(n_symbols=3, window=1)
    one.learn_many(truth.sample(5000, random_state=0))
    assert HMMEstimator(n_states=2, random_state=0).fit(one).occupancy_ is None  # triples


def _dodgers() -> list[np.ndarray]:
    from streamspec.experiments.datasets_dodgers import load_dodgers

    return real_set("dodgers", lambda: [np.asarray(s, dtype=np.int64) for s in load_dodgers()])


def test_a_triples_fit_keeps_the_triples_share_where_its_stationary_distribution_collapses():
    T, O = _leaky()
    truth = HMM(T=T.T, O=O.T, pi=[0.5, 0.5, 0.0])
    fits = {}
    for length in (300, 1000):  # streams of 1,000 symbols reach the absorbing state more often
        acc = MomentAccumulator(n_symbols=4, window=1)
        for i in range(100):
            acc.learn_many(truth.sample(length, random_state=i), key=i)
            acc.end(i)
        fits[length] = HMMEstimator(n_states=3, random_state=0).fit(acc)
    # EM's T over 1,000-symbol streams sends its long run into one state (> 0.8) that holds
    # well under a fifth of the triples' positions: the occupancy is that share, not the run
    collapsed = fits[1000]
    assert collapsed.stationary().max() > 0.8
    assert collapsed.occupancy().max() < 0.7
    assert np.allclose(collapsed.occupancy(), collapsed.startprob_, atol=0.02)  # a triple's share
    assert fits[300].occupancy_ is None  # a stationary law that agrees: T's is kept


def test_a_window_hmm_of_a_given_size_is_scored_from_its_occupancy_like_a_chosen_one():
    # streams that all start in state 0: over windows startprob_ is that start, not the law of
    # a triple's first state, and a size given (not "auto") must be scored as "auto" scores
    T = np.array([[0.9, 0.1, 0.0], [0.0, 0.9, 0.1], [0.1, 0.0, 0.9]])
    O = np.array([[0.8, 0.1, 0.1], [0.1, 0.8, 0.1], [0.1, 0.1, 0.8]])
    truth = HMM(T=T.T, O=O.T, pi=[1.0, 0.0, 0.0])
    acc = MomentAccumulator(n_symbols=3, window=3)
    for i in range(300):
        acc.learn_many(truth.sample(60, random_state=i), key=i)
        acc.end(i)
    triples = acc.triples()
    rng = np.random.default_rng(0)
    split = split_counts(triples, starts_of(acc, 3), long_windows_of(acc), 0.1, rng)
    ctx, x, w, draws = held_out_items(split.held, split.held_starts, 2000, rng)
    hmm, p = backoff_fit._select_hmm(split.kept_hmm, [3], (ctx, x, w), 0, draws)
    assert isinstance(split.kept_hmm, WindowCounts) and hmm.occupancy_ is not None
    assert np.allclose(p, hmm_probas(hmm, ctx, x, hmm.occupancy()))
    from_start = hmm_probas(hmm, ctx, x)
    assert np.abs(p - from_start).max() > 0.05  # what the stream's start gave instead


def test_dodgers_with_its_runs_ended_keeps_a_useful_hmm():
    # measured (bench_predict's split): with the runs ended the window HMM kept a state of
    # self-loop 1 entered with probability 5e-4; weighed by its stationary distribution the
    # smoothing sent every row half-way to it, and the HMM alone scored 2.574 nats (the
    # default 1.564); by the occupancy 1.513 and 1.513; the KN trigram 1.5647
    acc, test = ended_split(_dodgers(), 10)
    model = MEstimator().fit(acc)
    hmm = model.backoff.hmm
    alone = HiddenMarkovModel(hmm.startprob_, hmm.transmat_, hmm.emissionprob_)
    n_test = sum(len(s) for s in test)
    assert sum(-alone.score(s) for s in test) / n_test < 1.6
    assert model.log_loss(test) < 1.55
