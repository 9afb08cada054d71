"""The online mixing weights: a switching Bayesian mixture of blends, per context bucket."""

from __future__ import annotations

import numpy as np
import pytest

from streamspec.core.mixture import N_BUCKETS, ExpertMixture, bucket_of_counts, simplex_grid


def _stream(seed: int, T: int = 4000, K: int = 3):
    """Component probabilities of observed symbols: noisy, each component best somewhere."""
    rng = np.random.default_rng(seed)
    P = rng.uniform(0.01, 1.0, size=(T, K))
    P[: T // 2, 0] *= 1.5  # component 0 better in the first half, 2 in the second
    P[T // 2 :, 2] *= 1.5
    return np.minimum(P, 1.0), rng.integers(0, N_BUCKETS, size=T)


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("switching", [0.0, 1e-3, 1e-2])
def test_the_mixture_is_never_worse_than_any_blend_by_more_than_its_regret_bound(seed, switching):
    P, buckets = _stream(seed)
    mix = ExpertMixture(3, resolution=10, switching=switching)
    loss = -np.log(mix.observe_many(buckets, P)).sum()
    E, T = mix.n_experts, P.shape[0]
    bound = N_BUCKETS * np.log(E) + T * -np.log1p(-switching)
    for lam in simplex_grid(3, 10):  # every expert: in particular each component alone
        assert loss <= -np.log(P @ lam).sum() + bound + 1e-9
    # and the bound is not vacuous here: the mixture beats the average component
    assert loss < np.mean([-np.log(P[:, k]).sum() for k in range(3)])


def test_the_weights_follow_a_drifting_stream_with_switching_and_not_without():
    T = 6000
    P = np.where(np.arange(T)[:, None] < T // 2, [[0.6, 0.1]], [[0.1, 0.6]])
    buckets = np.zeros(T // 2, dtype=int)
    sticky, switching = ExpertMixture(2, switching=0.0), ExpertMixture(2, switching=1e-2)
    sticky.observe_many(buckets, P[: T // 2]), switching.observe_many(buckets, P[: T // 2])
    assert sticky.blend(0)[0] > 0.99 and switching.blend(0)[0] > 0.9
    sticky.observe_many(buckets[:300], P[T // 2 : T // 2 + 300])
    switching.observe_many(buckets[:300], P[T // 2 : T // 2 + 300])
    assert switching.blend(0)[1] > 0.9  # 300 symbols after the change it trusts the other one
    assert sticky.blend(0)[1] < 0.5  # without switching, 3000 symbols of evidence hold it back


def test_buckets_learn_separately():
    mix = ExpertMixture(2, resolution=4)
    for _ in range(200):
        mix.observe(1, np.array([0.9, 0.1]))
        mix.observe(4, np.array([0.1, 0.9]))
    assert mix.blend(1)[0] > 0.9 and mix.blend(4)[1] > 0.9
    np.testing.assert_allclose(mix.blend(0), [0.5, 0.5])


def test_held_out_data_give_the_starting_weights_tempered_to_a_strength():
    rng = np.random.default_rng(0)
    P = np.column_stack([rng.uniform(0.4, 0.6, 5000), rng.uniform(0.1, 0.3, 5000)])
    b = np.full(5000, 2)
    strong = ExpertMixture.from_held_out(2, b, P, strength=1e9)
    weak = ExpertMixture.from_held_out(2, b, P, strength=10)
    assert strong.blend(2)[0] > 0.99 and 0.6 < weak.blend(2)[0] < strong.blend(2)[0]
    np.testing.assert_allclose(strong.blend(0), [0.5, 0.5])  # no held-out data there
    # weights count: one item of weight 3 is three items of weight 1
    a = ExpertMixture.from_held_out(2, [1], P[:1], [3.0])
    c = ExpertMixture.from_held_out(2, [1, 1, 1], np.repeat(P[:1], 3, axis=0))
    np.testing.assert_allclose(a.log_weights(), c.log_weights())


def test_log_weights_round_trip_and_bad_settings_are_refused():
    mix = ExpertMixture(3)
    mix.observe(3, np.array([0.2, 0.5, 0.1]))
    back = ExpertMixture(3, log_weights=mix.log_weights())
    np.testing.assert_allclose(back.blends(range(N_BUCKETS)), mix.blends(range(N_BUCKETS)))
    with pytest.raises(ValueError, match="switching"):
        ExpertMixture(2, switching=1.0)
    with pytest.raises(ValueError, match="log_weights"):
        ExpertMixture(2, log_weights=np.zeros((2, 2)))
    with pytest.raises(ValueError, match="one bucket per row"):
        mix.observe_many([0, 1], np.ones((3, 3)))
    assert bucket_of_counts([0, 3, 15, 63, 255, 256]).tolist() == [0, 1, 2, 3, 4, 5]


def test_the_switching_rate_falls_with_each_buckets_own_symbols():
    """α_t = α / (1 + t / h): on a stationary stream the mass shared back to the hopeless
    blends falls with the bucket's symbols (after 50,000 at h = 5,000, ~1/11 of a constant
    rate's), so the mixture pays less for it; another bucket keeps its own clock; observe and
    observe_many apply the same rates. Fails if the rate is constant, shared by the buckets or
    the two paths disagree."""
    P = np.tile([0.9, 0.1], (50_000, 1))
    zeros = np.zeros(50_000, dtype=int)
    constant = ExpertMixture(2, switching=1e-3, switching_half_life=None)
    falling = ExpertMixture(2, switching=1e-3, switching_half_life=5000)
    loss_constant = -np.log(constant.observe_many(zeros, P)).sum()
    loss_falling = -np.log(falling.observe_many(zeros, P)).sum()
    assert falling.blend(0)[1] < constant.blend(0)[1] / 5  # the floor on the other blends
    assert loss_falling < loss_constant - 20  # ~α·T against ~α·h·log(T / h) nats
    fresh = ExpertMixture(2, switching=1e-3, switching_half_life=5000)
    fresh.observe_many(np.ones(50_000, dtype=int), P)
    fresh.observe(0, np.array([0.9, 0.1]))  # bucket 0's first symbol: the full rate
    one = ExpertMixture(2, switching=1e-3, switching_half_life=None)
    one.observe(0, np.array([0.9, 0.1]))
    np.testing.assert_allclose(fresh.blend(0), one.blend(0), rtol=1e-12)
    stepwise = ExpertMixture(3, switching=1e-2, switching_half_life=50)
    batch = stepwise.copy()
    Q, buckets = _stream(7, T=600)
    p_step = [stepwise.observe(b, q) for b, q in zip(buckets, Q, strict=True)]
    np.testing.assert_allclose(batch.observe_many(buckets, Q), p_step, rtol=1e-12)
    np.testing.assert_allclose(batch.blends(range(N_BUCKETS)), stepwise.blends(range(N_BUCKETS)),
                               rtol=1e-10)
    for bad in (0, -1.0, float("inf"), True, "5000"):
        with pytest.raises(ValueError, match="switching_half_life"):
            ExpertMixture(2, switching_half_life=bad)


def test_a_backoffs_rate_and_its_clock_are_saved_and_older_files_keep_a_constant_rate():
    """The half-life and each bucket's symbols learned (the rate's clock) go into a checkpoint
    and come back; a header without a half-life (written when the rate was constant) loads
    with a constant rate. Fails if either is dropped or an older file changes behaviour."""
    from streamspec.core.backoff import Backoff
    from streamspec.core.trigram import KneserNeyTrigram
    from streamspec.core.triples import Triples

    t = Triples.from_arrays(3, [0, 1, 2, 0], [1, 2, 0, 1], [2, 0, 1, 2])
    mix = ExpertMixture(2, switching_half_life=123.0)
    for _ in range(40):
        mix.observe(2, np.array([0.5, 0.2]))
    header, arrays = Backoff(KneserNeyTrigram(t), mix).to_parts()
    back = Backoff.from_parts(header, arrays, 3).mixture
    assert back.switching_half_life == 123.0 and back.n_observed.tolist() == mix.n_observed.tolist()
    old_header = {k: v for k, v in header.items() if k != "switching_half_life"}
    old_arrays = {k: v for k, v in arrays.items() if k != "weights_observed"}
    older = Backoff.from_parts(old_header, old_arrays, 3).mixture
    assert older.switching_half_life is None and older.n_observed.tolist() == [0.0] * N_BUCKETS
    with pytest.raises(ValueError, match="weights_observed"):
        Backoff.from_parts(header, dict(arrays, weights_observed=np.array([-1.0])), 3)
