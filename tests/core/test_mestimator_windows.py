"""θ_M over windows (docs/math.md section 11, "θ_M over windows"): the projected GMM fit of
``P_x = B_x H`` on window counts, its L = 1 case, population exactness, sampled loss, refits."""

from __future__ import annotations

import numpy as np
import pytest
from window_data import RING, assert_predicts_like_the_ring, sticky_ring_counts

from streamspec import MEstimator, SpectralEstimator
from streamspec.core.hmm_moments import exact_windows
from streamspec.core.model import ObservableOperatorModel
from streamspec.core.projected import ProjectedFit
from streamspec.core.projected_state import ProjectedSettings
from streamspec.core.projected_weighting import residual_pair_sums
from streamspec.core.projected_windows import WindowProjectedFit, WindowState, window_projected_rank
from streamspec.core.spectral_windows import window_spectral_operators
from streamspec.core.warm_fit import run_steps
from streamspec.core.window_triples import WindowTriples
from streamspec.core.windows import WindowCounts

WEIGHTINGS = ("identity", "diagonal", "per_symbol")


@pytest.fixture(scope="module")
def wide():
    return sticky_ring_counts(2)


@pytest.fixture(scope="module")
def held_out():
    return list(RING.sample_many(200, 40, random_state=9))


@pytest.mark.parametrize("weighting", WEIGHTINGS)
def test_at_window_1_the_fit_is_the_triples_fit(weighting):
    # exact counts: the first- and second-symbol marginals agree, so b1 does too
    g = exact_windows(RING, 1, scale=1e3)
    settings = ProjectedSettings(rank=2, weighting=weighting, n_conditions=2)
    ours = run_steps(WindowProjectedFit(settings, 3, WindowCounts(2, 1, g.codes, g.weights), None))
    ref = run_steps(ProjectedFit(settings, 3, g.triples(), None))
    for a, b in zip((ours.model.b1, ours.model.binf, ours.model.B),
                    (ref.model.b1, ref.model.binf, ref.model.B), strict=True):
        np.testing.assert_allclose(a, b, atol=1e-12)
    # sampled counts (k' = 2 of 2 windows, k = 1: the weighting has conditions to trade):
    # the operators, b∞ and the losses of every step are the triples' own
    acc = sticky_ring_counts(1, size=8_000)
    settings = ProjectedSettings(rank=1, weighting=weighting)
    ours = run_steps(WindowProjectedFit(settings, 3, acc.windows(), None))
    ref = run_steps(ProjectedFit(settings, 3, acc.triples(), None))
    np.testing.assert_allclose(ours.model.B, ref.model.B, atol=1e-12)
    np.testing.assert_allclose(ours.model.binf, ref.model.binf, atol=1e-12)
    np.testing.assert_allclose(np.concatenate(ours.fitted["loss_history_"]),
                               np.concatenate(ref.fitted["loss_history_"]), rtol=1e-10)


@pytest.mark.parametrize("L", [2, 3])
@pytest.mark.parametrize("weighting", WEIGHTINGS)
def test_population_windows_give_the_hmm_s_predictions(L, weighting):
    est = MEstimator(rank=4, weighting=weighting, backoff=None, filter="recursive",
                     count_window=L)
    model = est.fit(exact_windows(RING, L))
    assert est.window_ == L and est.rank_ == 4 > 2  # more dimensions than the 2 symbols
    assert est.loss_history_[0][0] < 1e-20  # exact counts: θ_spec over windows solves them
    assert_predicts_like_the_ring(model, seed=L)


def test_the_first_step_is_theta_spec_over_windows(wide):
    grams = wide.windows()
    est = MEstimator(rank=4, weighting="identity", backoff=None, count_window=2)
    model = est.fit(wide)
    b1, binf, B = window_spectral_operators(grams, 4)
    ref = ObservableOperatorModel(b1, binf, B)
    for h in ([0, 1, 1], [1, 1, 0, 0, 1], [0]):
        np.testing.assert_allclose(model.predict_proba_next(h), ref.predict_proba_next(h),
                                   atol=1e-10)


def test_the_weighting_reads_each_gram_s_current_window(wide):
    """The residual of gram (p, x, f) is u_f − B̃_x u_w, w = (x, f_1..f_{L-1}): against a loop."""
    grams = wide.windows()
    wt = WindowTriples.of(grams)
    fit = WindowProjectedFit(ProjectedSettings(rank=3, weighting="per_symbol"), 2, grams, None)
    fit.prepare()
    U, B = fit.U, np.random.default_rng(0).normal(size=(2, 3, 3))
    C, _ = residual_pair_sums(fit.triples, U, B, index=fit.index, current=fit.pair_current())
    t = wt.triples
    want = np.zeros((t.n, t.n))
    for p, x, f, w, c in zip(t.x1, t.x2, t.x3, wt.current, t.weights, strict=True):
        r = U[f] - B[x] @ U[w]
        want[x, p] += c * (r @ r) / t.total
    np.testing.assert_allclose(C.toarray(), want, rtol=1e-10, atol=1e-15)
    # x's own row of U (the triples' residual) is not the current window's: a different sum
    wrong, _ = residual_pair_sums(fit.triples, U, np.zeros((t.n, 3, 3)) + np.pad(B, ((0, t.n - 2),
                                                                                   (0, 0), (0, 0))),
                                  index=fit.index)
    assert np.abs(wrong.toarray() - want).max() > 1e-6


def test_sampled_windows_beat_the_triples_and_match_theta_spec(wide, held_out):
    spec = SpectralEstimator(backoff=None, window=6, count_window=2)
    spectral = spec.fit(wide).log_loss(held_out)
    triples = MEstimator(backoff=None, window=6, count_window=1).fit(wide).log_loss(held_out)
    for weighting in WEIGHTINGS:
        est = MEstimator(backoff=None, window=6, weighting=weighting, count_window=2)
        loss = est.fit(wide).log_loss(held_out)
        assert est.window_ == 2 and est.rank_ == spec.rank_ > 2
        assert loss <= spectral + 0.002  # within 0.002 nats of θ_spec over windows
        assert loss < triples - 0.01
    # per_symbol takes a real GLS step: not θ_spec's operators
    est = MEstimator(backoff=None, window=6, weighting="per_symbol", count_window=2)
    est.fit(wide)
    assert len(est.loss_history_) == 2 and est.rejected_ == []
    assert est.loss_history_[1][1] < est.loss_history_[1][0]


def test_window_counts_are_not_ignored(wide):
    est = MEstimator(backoff=None)  # count_window "auto"
    model = est.fit(wide)
    assert est.window_ == 2 and model.B.shape[1] == est.rank_ > 2
    assert est.basis_[0].shape[0] == WindowTriples.of(wide.windows()).size  # U over windows
    on_triples = MEstimator(backoff=None, count_window=1)
    on_triples.fit(wide)
    assert on_triples.rank_ <= 2
    wt = WindowTriples.of(wide.windows())
    cap = min(np.unique(wt.triples.x1).size, np.unique(wt.current).size)
    assert window_projected_rank(wt, 100) == cap >= est.rank_
    big = MEstimator(backoff=None, rank=100, count_window=2)  # up to the windows, not n = 2
    model = big.fit(wide)
    assert big.rank_ == cap > 2 and model.B.shape == (2, cap, cap)
    assert big.n_conditions_ == min(2 * cap, wt.size)
    assert np.isfinite(model.predict_proba_next([0, 1, 1])).all()


def test_with_the_backoff_the_hmm_runs_over_windows(wide, held_out):
    est = MEstimator(window=6, count_window=2)
    model = est.fit(wide)
    plain = MEstimator(window=6, count_window=2, backoff=None).fit(wide)
    assert est.window_ == 2 and model.backoff.hmm.n_states >= 4
    assert model.log_loss(held_out) <= plain.log_loss(held_out) + 0.01


def test_refits_over_windows_from_a_model_are_cold(wide):
    est = MEstimator(backoff=None, count_window=2)
    cold = est.fit(wide)
    assert est.refit_.path == "cold"
    again = est.fit(wide, init=cold)  # a warm start is not taken: cold, said so
    assert est.refit_.path == "fallback" and "windows" in est.refit_.reason
    np.testing.assert_allclose(again.B, cold.B, atol=1e-12)
    model, state = est.fit_with_state(wide)
    assert isinstance(state, WindowState) and model.factors is None  # the warm refit's state
    # a state of a fit over the triples, given to a fit over windows: cold too
    _, triple_state = MEstimator(backoff=None, count_window=1).fit_with_state(wide)
    assert triple_state is not None
    refit = est.fit(wide, init=triple_state)
    assert est.refit_.path == "fallback"
    np.testing.assert_allclose(refit.B, cold.B, atol=1e-12)
    with_backoff = MEstimator(count_window=2)
    first = with_backoff.fit(wide)
    second = with_backoff.fit(wide, init=first)  # keeps the backoff's weights
    assert with_backoff.refit_.path == "fallback"
    np.testing.assert_array_equal(second.backoff.mixture.log_weights(),
                                  first.backoff.mixture.log_weights())


def test_dense_formulation_and_bad_windows():
    acc = sticky_ring_counts(2, size=4_000)
    est = MEstimator(weighting="exact", backoff=None, rank=2)  # dense: over the triples
    model = est.fit(acc)
    assert est.formulation_ == "dense" and model.B.shape == (2, 2, 2)
    with pytest.raises(ValueError, match="count_window"):
        MEstimator(count_window=0)
    with pytest.raises(ValueError, match="count_window=3 needs counts of windows of 3"):
        MEstimator(count_window=3).fit(acc)
