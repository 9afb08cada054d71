"""The predictor over windows: its HMM has more states than symbols when the counts are windows."""

from __future__ import annotations

import numpy as np
import pytest
from window_data import RING, keyed_counts

from streamspec import HMMEstimator, MEstimator, SpectralEstimator
from streamspec.core.backoff_windows import (
    candidate_budget,
    choose_window_hmm,
    fit_window_hmm,
    sample_grams,
    window_budget,
)
from streamspec.core.hidden_markov_model import HiddenMarkovModel
from streamspec.core.hmm import HMM
from streamspec.core.hmm_moments import exact_windows
from streamspec.core.windows import WindowCounts


def automaton(K: int = 8, n: int = 4, seed: int = 3) -> HMM:
    """A sparse HMM like PAutomaC's: each state 3 successors (one on a cycle), 2 symbols each."""
    rng = np.random.default_rng(seed)
    T, O = np.zeros((K, K)), np.zeros((n, K))
    for h in range(K):
        others = rng.choice(np.setdiff1d(np.arange(K), [(h + 1) % K]), size=2, replace=False)
        succ = np.concatenate([[(h + 1) % K], others])
        T[succ, h] = rng.dirichlet(np.ones(3))
        O[rng.choice(n, size=2, replace=False), h] = rng.dirichlet(np.ones(2))
    return HMM(T, O)


@pytest.fixture(scope="module")
def split():
    truth = automaton()
    test = list(truth.sample_many(300, 20, random_state=99))
    counts = [keyed_counts(truth, w, 60_000, 1, length=20, keys=8) for w in (1, "auto")]
    return truth, test, *counts


@pytest.mark.parametrize("estimator", [SpectralEstimator, MEstimator])
def test_the_predictor_uses_the_windows_and_predicts_better(split, estimator):
    truth, test, triples, windows = split
    assert windows.current_window == 4  # auto: 4^4 >= 128
    plain = estimator().fit(triples)
    wide = estimator().fit(windows)
    assert plain.backoff.hmm.n_states <= 4  # over triples the alphabet caps the states
    assert wide.backoff.hmm.n_states > 4  # over windows: more states than symbols
    gain = plain.log_loss(test) - wide.log_loss(test)
    assert gain > 0.005, (plain.log_loss(test), wide.log_loss(test))


def test_a_refit_over_windows_keeps_its_states_and_warm_starts(split):
    truth, test, _, windows = split
    est = MEstimator()
    first = est.fit(windows)
    more = windows.copy()
    for s in truth.sample_many(200, 20, random_state=7):
        more.learn_many(s, key="new")
        more.end("new")
    again = MEstimator().fit(more, init=first)
    assert again.backoff.hmm.n_states == first.backoff.hmm.n_states > 4


def test_states_chosen_on_held_out_grams_and_fits_that_cannot_be_done():
    exact = exact_windows(RING, 2, scale=1e6)
    grams = WindowCounts(2, 2, exact.codes, np.round(exact.weights))  # counts: thinned binomially
    kept, held = grams.thin(0.2, random_state=0)
    model = choose_window_hmm(kept, held, [2, 4], 1e8, 10**5, 5, 200)
    assert model.n_states == 4  # the 4-state truth explains held-out grams better than 2 states
    assert fit_window_hmm(grams, 40, 1e8, 10**5, 5, 200) is None  # more states than windows
    sample = sample_grams(grams, 8, np.random.default_rng(0))
    assert sample.nnz < grams.nnz and sample.total == pytest.approx(grams.total, rel=0.5)


def test_em_over_windows_gets_the_iterations_its_budget_pays_for():
    # 24 states over 8 symbols: EM over 7-grams (L = 3). Costed as distinct grams × L × K² an
    # E-step, 1.5e8 units paid for fewer than 5 iterations, so EM stopped at its minimum of 5;
    # the message E-step's real cost (estep_units) pays for many more, and they matter here
    truth = automaton(24, 8, seed=5)
    grams = keyed_counts(truth, "auto", 100_000, 1, length=20, keys=8).windows()
    test = list(truth.sample_many(500, 20, random_state=99))

    def loss(model: HiddenMarkovModel) -> float:
        return -sum(model.score(s) for s in test) / 10_000

    capped = fit_window_hmm(grams, 24, 1.5e8, 200_000, 5, max_iter=5)
    budgeted = fit_window_hmm(grams, 24, 1.5e8, 200_000, 5, max_iter=200)
    assert loss(budgeted) < loss(capped) - 0.05, (loss(budgeted), loss(capped))
    assert loss(budgeted) < 1.10 * loss(HiddenMarkovModel.from_hmm(truth))


def test_window_budget_scales_larger_candidates_by_their_estep_cost():
    grams = keyed_counts(automaton(), "auto", 20_000, 1, length=20, keys=4).windows()
    share = 1e8
    assert window_budget(share, grams, 8) == window_budget(share, grams, 16) == share
    b32, b64 = window_budget(share, grams, 32), window_budget(share, grams, 64)
    assert share < b32 < b64
    # windows repeat on 4 symbols: the E-step grows about as K, so far less than the triples' K²
    assert b64 < 0.5 * candidate_budget(share, 1, 64)


def test_hmm_estimator_runs_em_over_the_moments_window_first():
    # 24 states over 8 symbols, counts of 7-grams: the moments need pairs (L = 2), EM "auto"
    # ends over 7-grams. Run directly over 7-grams from the moments, 300 cycles reached 1.3846
    # nats here (23 CPU s), worse than over 5-grams alone (1.3813); over 5-grams first and then
    # 30 cycles over 7-grams, 1.3654 (6 s; the truth 1.3301)
    truth = automaton(24, 8, seed=5)
    acc = keyed_counts(truth, "auto", 100_000, 1, length=20, keys=8)
    test = list(truth.sample_many(500, 20, random_state=99))

    def loss(model: HiddenMarkovModel) -> float:
        return -sum(model.score(s) for s in test) / 10_000

    auto = HMMEstimator(n_states=24, random_state=0)
    short = HMMEstimator(n_states=24, random_state=0, window=2)
    fitted, pairs = auto.fit(acc), short.fit(acc)
    assert (auto.coarse_window_, auto.window_, short.window_) == (2, 3, 2)
    assert auto.n_iter_ <= 30 < short.n_iter_
    assert loss(fitted) < loss(pairs) - 0.01, (loss(fitted), loss(pairs))
    assert loss(fitted) < 1.04 * loss(HiddenMarkovModel.from_hmm(truth))
