"""θ_spec from sparse triple counts: equal to the dense reference, consistent on large alphabets."""

from __future__ import annotations

import numpy as np
import pytest

from streamspec import HMM, MomentAccumulator, SpectralEstimator
from streamspec.core.fit_data import counts_of, triples_of
from streamspec.core.moments import probabilities
from streamspec.core.spectral import (
    select_rank_by_spectrum,
    sparse_spectral_operators,
    spectral_operators,
)
from streamspec.core.subspace import _project_reference, project_triples
from streamspec.core.triples import Triples


def random_counts(n, seed, density=0.4):
    rng = np.random.default_rng(seed)
    c3 = rng.integers(1, 20, size=(n, n, n)).astype(float)
    c3[rng.random((n, n, n)) > density] = 0.0
    return c3


@pytest.mark.parametrize("n, k, seed", [(4, 2, 0), (6, 3, 1), (9, 9, 2), (15, 5, 3), (30, 7, 4)])
def test_sparse_operators_equal_the_dense_reference(n, k, seed):
    c3 = random_counts(n, seed)
    dense = spectral_operators(*probabilities(c3), k)
    sparse = sparse_spectral_operators(Triples.from_dense(c3), k)
    for name, a, b in zip(("b1", "binf", "B"), sparse, dense, strict=True):
        assert a.shape == b.shape, name
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-10 * max(1.0, np.abs(b).max()), err_msg=name)


def test_estimator_without_backoff_equals_the_dense_operators():
    hmm = HMM.random(3, 7, random_state=5)
    acc = MomentAccumulator(7)
    acc.learn_many(hmm.sample(20_000, random_state=6))
    model = SpectralEstimator(rank=3, backoff=None).fit(acc)
    b1, binf, B = spectral_operators(*probabilities(acc.counts()), 3)
    np.testing.assert_allclose(model.B, B, rtol=0, atol=1e-10 * np.abs(B).max())
    np.testing.assert_allclose(model.b1, b1, rtol=0, atol=1e-12)
    np.testing.assert_allclose(model.binf, binf, rtol=0, atol=1e-10 * np.abs(binf).max())
    # the three inputs give one model
    for data in (acc.counts(), Triples.from_dense(acc.counts())):
        np.testing.assert_array_equal(SpectralEstimator(rank=3, backoff=None).fit(data).B, model.B)


@pytest.mark.parametrize("a, b", [(3, 4), (1, 1), (6, 2)])
def test_project_triples_equals_the_dense_definition(a, b):
    rng = np.random.default_rng(a * 10 + b)
    n = 25
    t = Triples.from_arrays(n, *rng.integers(0, n, size=(3, 3000)), weights=rng.random(3000))
    left, right = rng.normal(size=(n, a)), rng.normal(size=(n, b))
    ref = _project_reference(t, left, right)
    np.testing.assert_allclose(project_triples(t, left, right), ref, rtol=0, atol=1e-14 * np.abs(ref).max())
    w = rng.normal(size=t.nnz)
    out = project_triples(t, left, right, weights=w)
    ref_w = _project_reference(Triples(n, t.codes, w), left, right) * Triples(n, t.codes, w).total / t.total
    np.testing.assert_allclose(out, ref_w, rtol=0, atol=1e-13 * np.abs(ref_w).max())


def test_project_triples_in_many_blocks(monkeypatch):
    import streamspec.core.subspace as sub

    rng = np.random.default_rng(0)
    n = 40
    t = Triples.from_arrays(n, *rng.integers(0, n, size=(3, 5000)))
    left, right = rng.normal(size=(n, 3)), rng.normal(size=(n, 2))
    whole = project_triples(t, left, right)
    monkeypatch.setattr(sub, "_BLOCK_ENTRIES", 7)  # one symbol a block
    monkeypatch.setattr(sub, "_GEMM_MIN_PAIRS", 10**9)  # no BLAS path: all pairs in sparse blocks
    np.testing.assert_allclose(project_triples(t, left, right), whole, rtol=0, atol=1e-15)
    monkeypatch.setattr(sub, "_GEMM_MIN_PAIRS", 1)  # every symbol through BLAS
    np.testing.assert_allclose(project_triples(t, left, right), whole, rtol=0, atol=1e-15)
    monkeypatch.setattr(sub, "_GEMM_MIN_PAIRS", 38)  # a mix of both
    assert 0 < (np.diff(np.searchsorted(t.x2[np.unique(t.codes >> 21, return_index=True)[1]],
                                        np.arange(n + 1))) >= 38).sum() < n
    np.testing.assert_allclose(project_triples(t, left, right), whole, rtol=0, atol=1e-15)
    monkeypatch.setattr(sub, "_BLOCK_ENTRIES", 200)  # runs of several symbols, of both kinds
    np.testing.assert_allclose(project_triples(t, left, right), whole, rtol=0, atol=1e-15)
    np.testing.assert_allclose(whole, _project_reference(t, left, right), rtol=0, atol=1e-14)


def test_triples_of_validates_like_counts_of():
    acc = MomentAccumulator(3)
    acc.learn_many([0, 1])
    for f in (triples_of, counts_of):
        with pytest.raises(ValueError, match="empty accumulator"):
            f(acc)
        with pytest.raises(ValueError, match="empty accumulator"):
            f(np.zeros((3, 3, 3)))
        bad = np.ones((2, 2, 2))
        bad[0, 0, 0] = np.nan
        with pytest.raises(ValueError, match="NaN"):
            f(bad)
        with pytest.raises(ValueError, match="shape"):
            f(np.ones((2, 3, 2)))
    with pytest.raises(ValueError, match="empty accumulator"):
        triples_of(Triples.empty(4))
    grow = MomentAccumulator(window=1)
    grow.learn_many(list("abcab"))
    t, labels = triples_of(grow)
    assert labels == ["a", "b", "c"] and t.total == 3
    assert np.array_equal(t.to_dense(), counts_of(grow)[0])


def test_rank_by_spectrum_from_sparse_and_dense_agree():
    hmm = HMM.random(3, 12, random_state=1)
    x = hmm.sample(50_000, random_state=2)
    t = Triples.from_arrays(12, x[:-2], x[1:-1], x[2:])
    dense = t.P21().toarray()
    assert select_rank_by_spectrum(t.P21(), t.total) == select_rank_by_spectrum(dense, t.total)
    model = SpectralEstimator(rank="auto", backoff=None)
    model.fit(t)
    assert model.rank_ == select_rank_by_spectrum(dense, t.total)


def test_rank_by_spectrum_on_a_large_alphabet_is_capped(monkeypatch):
    import streamspec.core.spectral_basis as spectral_basis
    import streamspec.core.subspace as subspace

    monkeypatch.setattr(spectral_basis, "DENSE_SVD_MAX", 100)  # the sparse path, on a small problem
    monkeypatch.setattr(subspace, "DENSE_SVD_MAX", 100)
    monkeypatch.setattr(spectral_basis, "MAX_AUTO_RANK", 20)
    rng = np.random.default_rng(0)
    n = 400
    x = rng.integers(0, n, size=30_000)
    t = Triples.from_arrays(n, x[:-2], x[1:-1], x[2:])
    k = select_rank_by_spectrum(t.P21(), 1e12)  # every singular value counts as signal
    assert k == 20
    assert select_rank_by_spectrum(t.P21(), 10.0) < 20  # and noise is cut


def zipf_hmm(n_states, n_symbols, seed, exponent=1.1):
    """An HMM whose states emit Zipf-distributed symbols, each state with its own ranking."""
    rng = np.random.default_rng(seed)
    zipf = 1.0 / np.arange(1, n_symbols + 1) ** exponent
    O = np.stack([zipf[rng.permutation(n_symbols)] for _ in range(n_states)], axis=1)
    O /= O.sum(axis=0)
    T = rng.dirichlet(np.full(n_states, 0.5), size=n_states).T
    T = 0.5 * T + 0.5 * np.eye(n_states)  # sticky: well-conditioned
    return HMM(T, O)


def test_recovery_of_an_hmm_over_2000_symbols():
    n = 2000
    hmm = zipf_hmm(4, n, seed=0)
    x = hmm.sample(10**6, random_state=1)
    seqs = hmm.sample_many(3000, 3, random_state=2)
    true = hmm.operators().joint_proba_many(seqs)
    states = hmm.operators().window_states(seqs[:200, :2])
    exact_next = hmm.operators().predict_from_state(states)

    def errors(N):
        t = Triples.from_arrays(n, x[: N - 2], x[1 : N - 1], x[2:N])
        model = SpectralEstimator(rank=4, backoff=None, min_proba=0.0).fit(t)
        joint = np.linalg.norm(model.joint_proba_many(seqs) - true) / np.linalg.norm(true)
        pred = model.predict_from_state(model.window_states(seqs[:200, :2]))
        tv = 0.5 * np.abs(pred - exact_next).sum(axis=1).mean()
        return joint, tv

    (j5, tv5), (j6, tv6) = errors(10**5), errors(10**6)
    # measured: joint error 0.073 -> 0.015, total variation 0.29 -> 0.10
    assert j6 < 0.4 * j5 and tv6 < 0.6 * tv5
    assert j6 < 0.05 and tv6 < 0.2


def test_project_triples_writes_the_middle_rows_of_out():
    rng = np.random.default_rng(3)
    n = 30
    t = Triples.from_arrays(n, *rng.integers(0, n, size=(3, 4000)))
    left, right = rng.normal(size=(n, 3)), rng.normal(size=(n, 2))
    middle = np.array([0, 4, 5, 17, 29])
    buf = np.full((n, 3, 2), 7.0)
    got = project_triples(t, left, right, middle=middle, out=buf)
    assert got is buf
    np.testing.assert_array_equal(buf[middle], project_triples(t, left, right, middle=middle))
    others = np.setdiff1d(np.arange(n), middle)
    assert (buf[others] == 7.0).all()  # untouched
    with pytest.raises(ValueError, match="out must come with middle"):
        project_triples(t, left, right, out=buf)
