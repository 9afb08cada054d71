"""OnlinePredictor.observe_many: the same figures as observe one symbol at a time.

The daemon and ``learn --follow`` score their records in batches (one vectorised trigram
lookup, the HMM filter advanced for all streams at once); these tests hold the batched
path to the one-at-a-time definition: the probabilities, the loss, the weights learned
and every stream's next-symbol row after the batch, with stream ends, symbols the model
does not know, a subset scored, one long stream (the sequential tail of the filter) and
many short ones (its vectorised levels).
"""

from __future__ import annotations

import numpy as np
import pytest

from streamspec import MEstimator, MomentAccumulator, SpectralEstimator
from streamspec.core.hmm import HMM
from streamspec.core.mixture import ExpertMixture
from streamspec.streaming.online_predictor import UNSEEN, OnlinePredictor


def _model(kind: str):
    x = HMM.random(3, 6, random_state=0, concentration=0.3).sample(30_000, random_state=1)
    acc = MomentAccumulator(n_symbols=6)
    for t in range(0, x.size, 60):
        acc.learn_many(x[t:t + 60].tolist(), key=t % 11)
    if kind == "model+trigram+hmm":
        return SpectralEstimator(rank=3).fit(acc)
    if kind == "trigram only":
        return MEstimator(rank=3, hmm_states=None).fit(acc)
    if kind == "model alone":
        return SpectralEstimator(rank=3, backoff=None).fit(acc)
    return MEstimator(rank=3).fit(acc)


def _events(n_streams: int, T: int, seed: int):
    rng = np.random.default_rng(seed)
    keys = rng.integers(0, n_streams, T).tolist()
    idx = rng.integers(0, 6, T).tolist()
    for j in rng.choice(T, T // 100, replace=False):
        idx[j] = UNSEEN  # a label the model does not know
    ends = (rng.random(T) < 0.02).tolist()
    for j in rng.choice(T, T // 200, replace=False):
        idx[j], ends[j] = -1, True  # an end alone
    scored = (rng.random(T) < 0.6).tolist()
    return keys, idx, ends, scored


def _one_at_a_time(online: OnlinePredictor, keys, idx, ends, scored) -> np.ndarray:
    """The definition: observe each scored symbol; an unscored one moves its stream only."""
    out = np.full(len(keys), np.nan)
    for t, (k, i) in enumerate(zip(keys, idx, strict=True)):
        if i >= 0:
            if scored[t]:
                p = online.observe(k, i)
                out[t] = np.nan if p is None else p
            else:
                loss, n = online.loss, online.n_scored
                online.observe(k, i, learn=False)
                online.loss, online.n_scored = loss, n
        if ends[t]:
            online.end(k)
    return out


@pytest.mark.parametrize("kind", ["trigram+hmm", "model+trigram+hmm", "trigram only",
                                  "model alone"])
@pytest.mark.parametrize("n_streams", [1, 3, 40])
@pytest.mark.parametrize("with_ends", [True, False])
def test_observe_many_equals_observe_one_at_a_time(kind, n_streams, with_ends):
    model = _model(kind)
    keys, idx, ends, scored = _events(n_streams, 2500, seed=n_streams)
    if not with_ends:  # batches without ends take a shorter first pass
        idx = [i if i >= 0 else 0 for i in idx]
        ends = [False] * len(ends)
    a, b = OnlinePredictor(window=model.window), OnlinePredictor(window=model.window)
    for p in (a, b):
        p.set_model(model)
        for t in range(120):  # streams with a history before the batch
            p.observe(t % n_streams, t % 6)
    ref = _one_at_a_time(a, keys, idx, ends, scored)
    cut = [0, 7, 700, 1900, 2500]  # batches of uneven sizes, one of 7 items
    got = np.concatenate([b.observe_many(keys[lo:hi], idx[lo:hi], scored[lo:hi],
                                         ends[lo:hi] if with_ends else None)
                          for lo, hi in zip(cut[:-1], cut[1:], strict=True)])
    assert np.array_equal(np.isnan(ref), np.isnan(got))
    assert np.nanmax(np.abs(ref - got)) < 1e-12
    assert (~np.isnan(got)).sum() > 1000
    assert a.n_scored == b.n_scored and a.loss == pytest.approx(b.loss, rel=1e-12)
    if a.mixture is not None:
        assert np.allclose(a.mixture.log_weights(), b.mixture.log_weights(), atol=1e-9)
        assert np.array_equal(a.mixture.n_observed, b.mixture.n_observed)
    for k in range(n_streams):  # every stream's context and hidden state moved alike
        assert np.allclose(a.row(k), b.row(k), atol=1e-12)


def test_observe_many_scores_every_symbol_by_default_and_learns_the_weights():
    model = _model("trigram+hmm")
    keys, idx, _, _ = _events(5, 1500, seed=3)
    idx = [i if i >= 0 else 0 for i in idx]
    online = OnlinePredictor(window=model.window)
    online.set_model(model)
    before = online.mixture.log_weights()
    p = online.observe_many(keys, idx)
    known = np.array([0 <= i < 6 for i in idx])
    assert np.isnan(p[~known]).all() and (p[known] > 0).all()
    assert online.n_scored == known.sum()
    assert online.loss == pytest.approx(-np.log(p[known]).sum())
    assert not np.allclose(online.mixture.log_weights(), before)


def test_observe_many_before_a_model_only_remembers_the_contexts():
    model = _model("trigram+hmm")
    a, b = OnlinePredictor(window=model.window), OnlinePredictor(window=model.window)
    assert np.isnan(a.observe_many(["s", "s", "s"], [1, 2, 3])).all()
    for i in (1, 2, 3):
        b.observe("s", i)
    a.set_model(model)
    b.set_model(model)
    assert np.allclose(a.row("s"), b.row("s"))


def test_weights_are_kept_across_models_only_for_the_same_components():
    with_hmm, without = _model("trigram+hmm"), _model("trigram only")
    assert with_hmm.backoff.components != without.backoff.components
    online = OnlinePredictor(window=with_hmm.window)
    k = len(with_hmm.backoff.components)
    learned = ExpertMixture(k)
    for _ in range(40):
        learned.observe(5, np.linspace(0.9, 0.1, k))
    online.set_weights(learned, with_hmm.backoff.components)
    online.set_model(with_hmm)
    assert online.mixture is learned  # the same parts: the learned weights go on
    online.set_model(without)  # other parts: the model's weights
    assert online.components == without.backoff.components
    assert np.allclose(online.mixture.blends(range(6)), without.backoff.mixture.blends(range(6)))
    with pytest.raises(ValueError, match="components"):
        online.set_weights(ExpertMixture(3), ("trigram", "hmm"))
