"""The model's window filter chosen on held-out stretches (``window="auto"``, core/filter_window.py)."""

from __future__ import annotations

import numpy as np
import pytest

from streamspec import MEstimator, MomentAccumulator, ObservableOperatorModel, SpectralEstimator
from streamspec.core.filter_window import choose_window, stretch_probas
from streamspec.experiments.markov_chains import markov_chain
from streamspec.streaming.online_predictor import OnlinePredictor


@pytest.fixture(scope="module")
def fourth_order():
    """Counts of 100 sequences of a fourth-order chain over 4 symbols (256 states, more than
    the backoff's HMM may have), 25 held out."""
    x = markov_chain(4, 4, 125_000, seed=7)
    seqs = list(x.reshape(125, 1000))
    acc = MomentAccumulator(n_symbols=4)
    for i, s in enumerate(seqs[:100]):
        acc.learn_many(s, key=i)
        acc.end(i)
    return acc, seqs[100:]


def test_stretch_probas_are_the_window_filters_prediction_after_the_last_symbols():
    rng = np.random.default_rng(0)
    B = rng.random((3, 2, 2)) * 0.5
    model = ObservableOperatorModel(rng.random(2), rng.random(2), B, min_proba=0.0)
    ctx = rng.integers(0, 3, size=(40, 4))
    for i in range(40):  # pads on the left: streams that began inside the context
        ctx[i, : rng.integers(0, 5)] = -1
    x = rng.integers(0, 3, size=40)
    for window in (1, 2, 3, 4):
        got = stretch_probas(model, ctx, x, window)
        w_model = model.with_filter("window", window)
        for i in range(40):
            history = [int(s) for s in ctx[i] if s >= 0]
            want = w_model.predict_from_state(w_model.state_for(history))[x[i]]
            assert got[i] == pytest.approx(want, rel=1e-12, abs=1e-15)


def test_choose_window_keeps_two_unless_another_is_clearly_better():
    # an i.i.d. coin: every window predicts the same, so 2 stays
    model = ObservableOperatorModel([1.0], [1.0], [[[0.25]], [[0.75]]])
    rng = np.random.default_rng(1)
    ctx, x = rng.integers(0, 2, size=(200, 4)), rng.integers(0, 2, size=200)
    window, losses = choose_window(model, ctx, x, np.ones(200))
    assert window == 2 and sorted(losses) == [1, 2, 3, 4]


def test_auto_window_carries_the_memory_of_a_fourth_order_chain(fourth_order):
    acc, test = fourth_order
    auto = MEstimator().fit(acc)
    two = MEstimator(window=2).fit(acc)
    assert two.window == 2  # an integer is kept
    assert auto.window >= 3
    # the model alone, and the whole predictor, gain what w = 2 cannot see
    assert auto.without_backoff().log_loss(test) < two.without_backoff().log_loss(test) - 0.1
    assert auto.backoff.use_model and not two.backoff.use_model  # w = 2 added nothing
    assert auto.log_loss(test) < two.log_loss(test) - 0.05
    spectral = SpectralEstimator().fit(acc)
    assert spectral.window == auto.window


def test_a_refit_keeps_the_chosen_window(fourth_order):
    acc, _ = fourth_order
    first = MEstimator().fit(acc)
    more = MomentAccumulator(n_symbols=4)
    more.merge(acc)
    more.learn_many(markov_chain(4, 4, 2_000, seed=5), key="new")
    refit = MEstimator().fit(more, init=first)
    assert refit.window == first.window >= 3


def test_the_online_predictor_follows_the_models_window(fourth_order):
    acc, test = fourth_order
    model = MEstimator().fit(acc)
    assert model.backoff.use_model  # the model is a component: its window matters

    def probas(online: OnlinePredictor) -> list[float]:
        online.set_model(model)
        return [online.observe("s", int(s)) for s in test[0][:300]]

    following = OnlinePredictor(window=None)
    got = probas(following)
    assert following.window == model.window
    assert got == probas(OnlinePredictor(window=model.window))
    assert got != probas(OnlinePredictor(window=2))


def test_a_bad_window_is_refused_by_name():
    with pytest.raises(ValueError, match="window"):
        MEstimator(window="long").fit(MomentAccumulator(n_symbols=2))
