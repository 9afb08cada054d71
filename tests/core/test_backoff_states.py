"""The size of the predictor's HMM: "auto" tries more than 16 states where the data support them."""

from __future__ import annotations

import numpy as np
import pytest

from streamspec import HMM, SpectralEstimator
from streamspec.core import backoff_fit
from streamspec.core.backoff_fit import _candidate_states, fit_with_backoff, hmm_states_for
from streamspec.core.backoff_windows import BASE_STATES, candidate_budget
from streamspec.core.triples import Triples


def sparse_hmm(m: int = 32, n: int = 40, seed: int = 5) -> HMM:
    """m states, each moving to 3 others and emitting its own symbol half the time: 16 states
    cannot tell apart what the 32 symbols' successors depend on."""
    rng = np.random.default_rng(seed)
    T = np.zeros((m, m))
    for h in range(m):
        T[rng.choice(m, 3, replace=False), h] = rng.dirichlet(np.ones(3))
    O = 0.5 * np.eye(n, m) + 0.5 * rng.dirichlet(np.full(n, 0.3), size=m).T
    return HMM(T, O)


def triples_of(x: np.ndarray, n: int) -> Triples:
    return Triples.from_arrays(n, x[:-2], x[1:-1], x[2:])


def test_auto_chooses_more_than_16_states_where_the_held_out_counts_need_them():
    """Fails with the old cap (16 states): a 32-state HMM over 40 symbols, 60,000 symbols. The
    32-state candidate predicts the held-out counts better than the 16-state one, and a refit
    keeps the size chosen."""
    t = triples_of(sparse_hmm().sample(60_000, random_state=1), 40)
    fit = SpectralEstimator(rank=2, backoff=None).fit
    auto = fit_with_backoff(fit, t, hmm_states="auto")
    assert auto.backoff.hmm.n_states > 16
    refit = fit_with_backoff(fit, t, hmm_states="auto", previous=auto)
    assert refit.backoff.hmm.n_states == auto.backoff.hmm.n_states


def test_larger_candidates_only_where_the_alphabet_and_the_budget_allow():
    """Over triples, no more states than symbols; above 16 states only with 20 counted triples
    per free parameter (32 states over 40 symbols: 44,800; 40 states: 62,400) and where the
    minimum EM iterations on the EM sample fit the candidate's scaled budget: few distinct
    triples yes, hundreds of thousands (a uniform 100-symbol stream) no."""
    x = sparse_hmm().sample(70_000, random_state=1)

    def larger(t):  # the fixed sizes above 16 tried, besides the spectrum's count
        return [k for k in _candidate_states("auto", t) if k > BASE_STATES and k != hmm_states_for(t)]

    assert larger(triples_of(x, 40)) == [32, 40]
    assert larger(triples_of(x[:50_000], 40)) == [32]
    assert larger(triples_of(x[:40_000], 40)) == []
    x = np.random.default_rng(0).integers(0, 12, 20_000)
    assert max(_candidate_states("auto", triples_of(x, 12))) == 12  # the alphabet
    busy = triples_of(np.random.default_rng(0).integers(0, 100, 600_000), 100)
    assert busy.nnz > 300_000
    assert max(_candidate_states("auto", busy)) == 16
    assert _candidate_states(7, busy) == [7]


def test_a_larger_candidate_gets_a_budget_scaled_by_its_states_squared():
    """Up to 16 states an even share; above, (K² + 30) / (16² + 30) times it, so a 64-state
    candidate runs as many EM iterations (each O(K² · distinct triples)) as a 16-state one."""
    share = 3e8 / 4
    assert candidate_budget(3e8, 4, 4) == candidate_budget(3e8, 4, 16) == share
    assert candidate_budget(3e8, 4, 64) == pytest.approx(share * (64**2 + 30) / (16**2 + 30))
    iters = [candidate_budget(3e8, 4, K) / (1000 * (K**2 + 30)) for K in (16, 32, 64)]
    assert iters == pytest.approx([iters[0]] * 3)


def test_em_starts_from_the_moments_of_all_the_triples_not_of_its_sample(monkeypatch):
    """EM runs on a sample of the distinct triples; its start (the method of moments) sees them
    all (up to MOMENT_MAX_TRIPLES): the moments of a third of the triples of a 20-state,
    1,000-symbol HMM started EM 0.09 nats worse, so "auto" chose 4 states there."""
    t = triples_of(sparse_hmm().sample(40_000, random_state=1), 40)
    seen = []
    real = backoff_fit.SharedMoments

    def spy(triples, max_states):
        seen.append(triples.nnz)
        return real(triples, max_states)

    monkeypatch.setattr(backoff_fit, "EM_MAX_TRIPLES", 2_000)
    monkeypatch.setattr(backoff_fit, "SharedMoments", spy)
    hmm = backoff_fit.fit_hmm(t, 8, 1e7, random_state=0)
    assert hmm is not None and hmm.n_states == 8
    assert seen == [t.nnz] and t.nnz > 4 * 2_000
    monkeypatch.setattr(backoff_fit, "MOMENT_MAX_TRIPLES", 5_000)
    backoff_fit.fit_hmm(t, 8, 1e7, random_state=0)
    assert 2_000 < seen[-1] < 0.6 * t.nnz  # threshold-sampled to about the cap
    seen.clear()
    backoff_fit.fit_hmm(t, 8, 1e7, init=hmm, random_state=0)  # a warm start needs no moments
    assert seen == []


def test_over_windows_auto_tries_four_times_the_supported_rank_up_to_64():
    """Fails with the old candidates (r and 2r, up to 16): over windows the states are not capped
    by the alphabet, and 4r is tried with a share of its own (r and 2r keep half the budget each)."""
    from streamspec.core.backoff_windows import state_candidates

    assert state_candidates(12, backoff_fit.MAX_HMM_STATES) == [12, 24, 48]
    assert state_candidates(40, backoff_fit.MAX_HMM_STATES) == [40, 64]
    assert state_candidates(1, backoff_fit.MAX_HMM_STATES) == [2, 4]


def test_a_refit_chooses_the_hmm_size_again_once_the_counts_have_doubled():
    """A sticky 8-state HMM over 40 symbols: 2,000 symbols support 4 states; a refit on 1.5
    times the counts keeps them (and the counts they were chosen at), one on 20 times the
    counts chooses again, exactly as a first fit of those counts does (8 states, the same
    HMM). Fails if refits keep the first size forever, or choose at every refit."""
    rng = np.random.default_rng(3)
    m, n = 8, 40
    T = np.full((m, m), 0.1 / (m - 1)) + np.eye(m) * (0.9 - 0.1 / (m - 1))
    x = HMM(T, rng.dirichlet(np.full(n, 0.5), size=m).T).sample(40_000, random_state=1)
    fit = SpectralEstimator(rank=2, backoff=None).fit
    first = fit_with_backoff(fit, triples_of(x[:2_000], n), hmm_states="auto")
    assert first.backoff.hmm.n_states == 4 and first.backoff.states_chosen_at == 1_998
    kept = fit_with_backoff(fit, triples_of(x[:3_000], n), hmm_states="auto", previous=first)
    assert kept.backoff.hmm.n_states == 4 and kept.backoff.states_chosen_at == 1_998
    regrown = fit_with_backoff(fit, triples_of(x, n), hmm_states="auto", previous=kept)
    cold = fit_with_backoff(fit, triples_of(x, n), hmm_states="auto")
    assert regrown.backoff.hmm.n_states == cold.backoff.hmm.n_states == 8
    np.testing.assert_array_equal(regrown.backoff.hmm.emissionprob_, cold.backoff.hmm.emissionprob_)
    assert regrown.backoff.states_chosen_at == 39_998
    assert regrown.backoff.mixture.n_components == kept.backoff.mixture.n_components
    fixed = fit_with_backoff(fit, triples_of(x, n), hmm_states=4, previous=kept)  # not "auto"
    assert fixed.backoff.hmm.n_states == 4



def test_the_noise_count_by_a_doubling_truncated_svd_is_that_of_the_top_65(monkeypatch):
    """Above DENSE_SVD_MAX symbols (lowered here) the count starts from the top 16 singular
    values and doubles: on 18 values above the noise it must not stop at 16."""
    from streamspec.core import subspace
    from streamspec.core.window_rank import noise_level

    monkeypatch.setattr(subspace, "DENSE_SVD_MAX", 100)
    x = HMM.random(30, 300, random_state=0, concentration=0.01).sample(10**6, random_state=1)
    t = triples_of(x, 300)
    P21 = t.P21()
    s = subspace.top_singular(P21, 65)[1]
    count = int((s > noise_level(P21, t.total)).sum())
    assert count > 16
    assert hmm_states_for(t) == count
