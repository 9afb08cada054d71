"""HMM sizes tried on the same counts share their moment start and window ranks (fit cost)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from streamspec.core import backoff_windows, hmm_moments, window_rank
from streamspec.core.backoff_fit import SharedFit, _select_hmm, fit_hmm
from streamspec.core.held_out import held_out_items
from streamspec.core.hmm import HMM
from streamspec.core.hmm_estimator import HMMEstimator
from streamspec.core.hmm_moments import SharedMoments, moment_estimate
from streamspec.core.hmm_smoothing import smoothed_hmm
from streamspec.core.stream_starts import StreamStarts
from streamspec.core.triples import Triples
from streamspec.core.windows import WindowCounts
from tests.core.window_data import sticky_ring_counts


def noisy_triples(m: int = 8, n: int = 60, size: int = 60_000) -> Triples:
    x = HMM.random(m, n, random_state=3, concentration=0.3).sample(size, random_state=4)
    return Triples.from_arrays(n, x[:-2], x[1:-1], x[2:])


@pytest.mark.parametrize("aggregate", [True, False])
def test_shared_moments_equal_the_moments_of_each_size_alone(monkeypatch, aggregate):
    """Every size read from one top-16 SVD (and, aggregated, from the per-symbol sums A(x)) is the
    method of moments of that size alone, with the same seed: a wrong block of K, of A, or
    another η would move the estimates by far more than rounding (noisy counts)."""
    if not aggregate:  # the rows of the triples kept instead of A(x)
        monkeypatch.setattr(hmm_moments, "_AGGREGATE_MAX_FLOATS", 0)
    t = noisy_triples()
    shared = SharedMoments(t, 16)
    assert (shared.A is None) != aggregate
    for k in (2, 5, 8, 16):
        for got, alone in zip(shared.estimate(k, 11), moment_estimate(t, k, random_state=11), strict=True):
            assert got.shape == alone.shape
            np.testing.assert_allclose(got, alone, atol=1e-9)
    with pytest.raises(np.linalg.LinAlgError):
        shared.estimate(17, 0)


def test_the_sizes_of_select_hmm_share_one_svd_and_keep_their_starts(monkeypatch):
    """Fails if each size redoes the SVD of P31 (one per size before): four sizes, one SVD; and each
    size's start is the moment start that size gets alone (HMMEstimator(n_iter=0))."""
    t = noisy_triples()
    calls = []
    real = hmm_moments.top_singular

    def spy(P, k, random_state=0):
        calls.append(k)
        return real(P, k, random_state=random_state)

    monkeypatch.setattr(hmm_moments, "top_singular", spy)
    rng = np.random.default_rng(0)
    ctx, x, w, _ = held_out_items(t, StreamStarts.empty(t.n), 500, rng)
    hmm, p = _select_hmm(t, [2, 4, 8, 16], (ctx, x, w), 0)
    assert hmm is not None and p.shape == x.shape
    assert calls == [16]
    shared = SharedFit(t, 8, 0)
    for k in (4, 8):
        alone = HMMEstimator(n_states=k, n_iter=0, random_state=0).fit(t)
        start = shared.moment_start(k, 0)
        np.testing.assert_allclose(start.emissionprob_, alone.emissionprob_, atol=1e-9)
        np.testing.assert_allclose(start.transmat_, alone.transmat_, atol=1e-9)
    # the fit of one size with the shared part is the fit without it
    a = fit_hmm(t, 8, 1e7, random_state=0, shared=SharedFit(t, 16, 0))
    b = fit_hmm(t, 8, 1e7, random_state=0)
    np.testing.assert_allclose(a.emissionprob_, b.emissionprob_, atol=1e-8)


def test_window_sizes_share_one_rank_svd_per_window(monkeypatch):
    """Fails if each size redoes the window ranks (em_window's and HMMEstimator's: two SVDs per size
    and window before): three sizes, at most one supported-rank SVD per window of the sample; the
    HMMs are those fitted one size at a time."""
    grams: WindowCounts = sticky_ring_counts(3, size=20_000).windows()
    kept, held = grams, grams
    calls = []
    real = backoff_windows.supported_rank

    def spy(counts, max_rank=128):
        calls.append(counts.window)
        return real(counts, max_rank)

    monkeypatch.setattr(backoff_windows, "supported_rank", spy)
    monkeypatch.setattr(window_rank, "supported_rank", spy)  # HMMEstimator's, alone

    class Spectrum(window_rank._Spectrum):  # an unsampled window's SVD, kept on the grams (level_rank)
        def __init__(self, counts, level):
            calls.append(level)
            super().__init__(counts, level)

    monkeypatch.setattr(window_rank, "_Spectrum", Spectrum)
    best = backoff_windows.choose_window_hmm(kept, held, [2, 4, 8], 3e6, 200_000, 5, 50, 0)
    assert best is not None
    assert len(calls) == len(set(calls)) and len(calls) >= 1
    monkeypatch.setattr(window_rank, "supported_rank", real)
    # the same HMM as HMMEstimator finds its moments' window alone (window_rank.window_for_states)
    K = best.n_states
    share = backoff_windows.candidate_budget(3e6, 2, K)
    L = backoff_windows.em_window(kept, K, share, 50)
    counts = backoff_windows.sample_grams(kept.marginal(L), 200_000, np.random.default_rng(0))
    iters = int(np.clip(share / backoff_windows._cost(counts, K), 5, 50))
    alone = HMMEstimator(n_states=K, n_iter=iters, random_state=0, window=L).fit(counts)
    alone = smoothed_hmm(alone, kept.total)  # the candidates are scored, and kept, smoothed
    np.testing.assert_allclose(best.emissionprob_, alone.emissionprob_, atol=1e-8)
    np.testing.assert_allclose(best.transmat_, alone.transmat_, atol=1e-8)


def test_the_spectrum_sees_the_states_of_a_large_alphabet_above_the_spectral_noise():
    """Fails with the Frobenius noise level N^(-1/2) (one state counted here): a sticky 6-state HMM
    over 300 symbols, 200,000 symbols; the spectral norm of the noise, (√max row + √max column) /
    √N of P21, lets the six singular values through and no noise one."""
    from streamspec.core.backoff_fit import hmm_states_for, noise_level

    rng = np.random.default_rng(3)
    m, n = 6, 300
    T = np.full((m, m), 0.1 / (m - 1)) + np.eye(m) * (0.9 - 0.1 / (m - 1))
    x = HMM(T, rng.dirichlet(np.full(n, 0.5), size=m).T).sample(200_000, random_state=1)
    t = Triples.from_arrays(n, x[:-2], x[1:-1], x[2:])
    assert hmm_states_for(t) == m
    assert noise_level(t.P21(), t.total) < 1 / np.sqrt(t.total) / 4


def test_the_window_spectrum_sees_the_states_above_the_spectral_noise():
    """Fails with window_rank.supported_rank's Frobenius level N^(-1/2) (4 of 10 states over
    single symbols, none over pairs): a sticky 10-state HMM over 100 symbols, 100,000 symbols
    counted in windows of 2; the "auto" size over windows counts all ten."""
    from streamspec import MomentAccumulator
    from streamspec.core.backoff_windows import hmm_states_for_windows
    from streamspec.core.window_rank import count_above_noise, supported_rank
    from streamspec.core.window_triples import WindowTriples

    rng = np.random.default_rng(3)
    m, n = 10, 100
    T = np.full((m, m), 0.1 / (m - 1)) + np.eye(m) * (0.9 - 0.1 / (m - 1))
    x = HMM(T, rng.dirichlet(np.full(n, 0.3), size=m).T).sample(100_000, random_state=1)
    acc = MomentAccumulator(n_symbols=n, window=2)
    acc.learn_many(x)
    g = acc.windows()
    # the Frobenius level N^(-1/2), supported_rank's before it took the spectral one, misses states
    frobenius = []
    for level in (1, 2):
        full = g.marginal(level).full()
        H = sp.csr_matrix(WindowTriples.of(full).hankel())
        frobenius.append(count_above_noise(H, 1.0 / np.sqrt(full.total), 64))
    assert max(frobenius) < m
    assert max(supported_rank(g.marginal(level), 64) for level in (1, 2)) == m  # one rule now
    assert hmm_states_for_windows(g, 64) == m


@pytest.mark.parametrize("above", [3, 16, 40])
def test_the_supported_rank_counts_past_the_first_sixteen_singular_values(above):
    """Fails if count_above_noise stops at its first 16 Lanczos values (40 above the level), or
    asks for more than it was allowed (max_rank + 1): a sparse 1,500 x 1,500 diagonal."""
    from streamspec.core.subspace import DENSE_SVD_MAX
    from streamspec.core.window_rank import count_above_noise

    size = 1_500
    assert size > DENSE_SVD_MAX
    d = np.full(size, 1e-6)
    d[:above] = np.linspace(2.0, 1.0, above)
    H = sp.diags(d).tocsr()
    assert count_above_noise(H, 0.5, 64) == above
    assert count_above_noise(H, 0.5, 20) == min(above, 21)
