"""θ_spec over windows: exact on population counts with more states than symbols; chosen by default."""

from __future__ import annotations

import numpy as np
import pytest
from window_data import RING, assert_predicts_like_the_ring, sticky_ring_counts

from streamspec import SpectralEstimator
from streamspec.core.hidden_markov_model import HiddenMarkovModel
from streamspec.core.hmm_moments import exact_windows
from streamspec.core.model import ObservableOperatorModel
from streamspec.core.spectral import sparse_spectral_operators
from streamspec.core.spectral_windows import window_spectral_operators
from streamspec.core.windows import WindowCounts


@pytest.mark.parametrize("L", [2, 3])
def test_population_windows_give_the_hmm_s_predictions_with_more_states_than_symbols(L):
    b1, binf, B = window_spectral_operators(exact_windows(RING, L), 4)
    model = ObservableOperatorModel(b1, binf, B, filter="recursive")
    assert_predicts_like_the_ring(model, seed=L)
    truth = HiddenMarkovModel.from_hmm(RING)
    # over triples the rank is capped by the 2 symbols: the same filter cannot follow the ring
    t = exact_windows(RING, 1)
    b1, binf, B = sparse_spectral_operators(t.triples(), 2)
    short = ObservableOperatorModel(b1, binf, B, filter="recursive")
    assert max(np.abs(short.predict_proba_next(h) - truth.predict_proba_next(h)).max()
               for h in ([0, 1, 1], [1, 1, 0, 0], [0, 0, 0])) > 1e-3


def test_at_window_1_the_operators_are_those_of_the_triples():
    g = exact_windows(RING, 1, scale=1e3)
    ours = window_spectral_operators(WindowCounts(2, 1, g.codes, g.weights), 2)
    ref = sparse_spectral_operators(g.triples(), 2)
    for a, b in zip(ours, ref, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-12)


def test_the_estimator_fits_over_windows_when_the_counts_are_windows():
    wide, plain = sticky_ring_counts("auto"), sticky_ring_counts(1)
    test = list(RING.sample_many(200, 40, random_state=9))
    est = SpectralEstimator(backoff=None, window=6)  # the filter reads 6 symbols of context
    over_windows = est.fit(wide)
    assert est.window_ >= 2 and est.rank_ > 2  # more dimensions than the 2 symbols
    over_triples = SpectralEstimator(backoff=None, window=6).fit(plain)
    assert over_windows.log_loss(test) < over_triples.log_loss(test) - 0.01
    # count_window=1 on window counts: the triples' fit (they are the same triples here)
    same = SpectralEstimator(backoff=None, window=6, count_window=1).fit(wide)
    np.testing.assert_allclose(same.predict_proba_next([0, 1, 1]),
                               over_triples.predict_proba_next([0, 1, 1]), atol=1e-12)
    with_backoff = SpectralEstimator(window=6).fit(wide)  # the HMM over windows as well
    assert with_backoff.backoff.hmm.n_states >= 4
    assert with_backoff.log_loss(test) <= over_windows.log_loss(test) + 0.01


def test_bad_count_windows_are_refused():
    with pytest.raises(ValueError, match="count_window"):
        SpectralEstimator(count_window=0)
    with pytest.raises(ValueError, match="count_window=3 needs counts of windows of 3"):
        SpectralEstimator(count_window=3).fit(sticky_ring_counts(2, size=4_000))
