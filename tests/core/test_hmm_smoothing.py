"""The predictor's HMM is smoothed: EM's zeros never leave a held-out symbol at probability 0."""

from __future__ import annotations

import numpy as np
import pytest
from window_data import keyed_counts

from streamspec import MEstimator
from streamspec.core import backoff_fit, backoff_windows
from streamspec.core.hidden_markov_model import HiddenMarkovModel
from streamspec.core.hmm import HMM
from streamspec.core.hmm_smoothing import PRIOR_MASS, smoothed_hmm


def test_smoothing_makes_every_probability_positive_and_vanishes_with_the_counts():
    T = np.array([[0.9, 0.1, 0.0], [0.0, 0.8, 0.2], [0.3, 0.0, 0.7]])
    O = np.array([[0.5, 0.5, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.2, 0.8]])
    hmm = HiddenMarkovModel([1.0, 0.0, 0.0], T, O)
    s = hmm.stationary()
    few = smoothed_hmm(hmm, 50.0)
    for a in (few.startprob_, few.transmat_, few.emissionprob_):
        assert (a > 0).all()
        assert np.allclose(a.sum(axis=-1), 1.0)
    # each row moves by at most the prior's share a / (visits + a) of total variation
    share = PRIOR_MASS / (50.0 * s + PRIOR_MASS)
    assert (np.abs(few.emissionprob_ - O).sum(axis=1) <= 2 * share + 1e-9).all()
    assert (np.abs(few.emissionprob_ - O).sum(axis=1) > 0.1 * share).all()  # not a no-op
    many = smoothed_hmm(hmm, 1e9)
    assert np.abs(many.emissionprob_ - O).max() < 1e-7
    assert np.abs(many.transmat_ - T).max() < 1e-7
    assert smoothed_hmm(None, 10.0) is None
    with pytest.raises(ValueError):
        smoothed_hmm(hmm, 0.0)


def _sparse_truth() -> HMM:
    """Six states over ten symbols, each state emitting three of them: few counts per parameter."""
    rng = np.random.default_rng(7)
    K, n = 6, 10
    O = np.zeros((n, K))
    for h in range(K):
        O[rng.choice(n, size=3, replace=False), h] = rng.dirichlet(np.ones(3))
    T = 0.6 * np.eye(K) + 0.4 * rng.dirichlet(np.ones(K), size=K).T
    return HMM(T / T.sum(axis=0), O)


def _hmm_alone_loss(hmm, test) -> float:
    total = sum(-hmm.score(x) for x in test)
    return total / sum(len(x) for x in test)


def test_the_backoffs_hmm_on_few_counts_gives_every_held_out_symbol_a_probability(monkeypatch):
    truth = _sparse_truth()
    acc = keyed_counts(truth, "auto", 4_000, 1, length=40, keys=10)
    test = list(truth.sample_many(40, 40, random_state=5))
    model = MEstimator().fit(acc)
    hmm = model.backoff.hmm
    assert (hmm.emissionprob_ > 0).all() and (hmm.transmat_ > 0).all()
    plain = HiddenMarkovModel(hmm.startprob_, hmm.transmat_, hmm.emissionprob_)
    with np.errstate(all="ignore"):
        smoothed_loss = _hmm_alone_loss(plain, test)
    assert np.isfinite(smoothed_loss)
    # without the smoothing EM's zeros stay, the case the smoothing is for (the test is not vacuous)
    identity = lambda hmm, total, mass=PRIOR_MASS: hmm  # noqa: E731
    monkeypatch.setattr(backoff_fit, "smoothed_hmm", identity)
    monkeypatch.setattr(backoff_windows, "smoothed_hmm", identity)
    raw = MEstimator().fit(acc).backoff.hmm
    assert (raw.emissionprob_ == 0).any()
