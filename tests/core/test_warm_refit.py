"""Warm refits (docs/math.md section 10): exact incremental moments, the paths, and their accuracy."""

from __future__ import annotations

import numpy as np
import pytest

from streamspec import HMM, MEstimator, MomentAccumulator, SpectralEstimator
from streamspec.core.pair_index import PairIndex
from streamspec.core.projected_state import ProjectedState
from streamspec.core.subspace import leading_singular, project_triples, top_singular
from streamspec.core.subspace_iteration import principal_sines, refine_subspace
from streamspec.core.triples import Triples
from streamspec.core.triples_change import triples_change


@pytest.fixture(scope="module")
def stream() -> np.ndarray:
    """A 4-state, 30-symbol HMM: a spectrum with a clear gap after the true rank."""
    return HMM.random(4, 30, random_state=3).sample(230_000, random_state=4)


def _accumulate(x, n, forgetting=1.0):
    acc = MomentAccumulator(n, forgetting=forgetting)
    acc.learn_many(x)
    return acc


def _extend(acc, x):
    acc.learn_many(x)
    return acc


# ---------------------------------------------------------------------- the pieces


def test_pair_index_gives_the_pair_counts_of_the_triples():
    rng = np.random.default_rng(0)
    t = Triples.from_arrays(40, *rng.integers(0, 40, size=(3, 3000)), weights=rng.random(3000))
    idx = PairIndex(t)
    np.testing.assert_allclose(idx.c21().toarray(), t.c21().toarray(), rtol=1e-13)
    w = rng.normal(size=t.nnz)
    np.testing.assert_allclose(idx.c21(w).toarray(), Triples(40, t.codes, w).c21().toarray(),
                               rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(idx.middle_counts(), np.bincount(t.x2, t.weights, minlength=40))
    assert idx.px2.dtype == np.int32 and idx.n_pairs == np.unique(t.codes >> 21).size


@pytest.mark.parametrize("forgetting", [1.0, 0.9995])
def test_triples_change_is_exact_and_sparse(forgetting):
    rng = np.random.default_rng(1)
    acc = _accumulate(rng.integers(0, 20, 20_000), 25, forgetting)
    old = acc.triples()
    acc.learn_many(rng.integers(0, 25, 300))  # a few new triples, five new symbols possible
    new = acc.triples()
    change = triples_change(old, new)
    assert change.delta.nnz <= 300 and change.delta.nnz < new.nnz / 5
    expected = 1.0 if forgetting == 1.0 else forgetting**300
    assert change.scale == pytest.approx(expected, rel=1e-9)
    rebuilt = old.scaled(change.scale) + change.delta
    np.testing.assert_array_equal(rebuilt.codes, new.codes)
    np.testing.assert_allclose(rebuilt.weights, new.weights, rtol=1e-10)
    assert set(change.changed_middle.tolist()) == set((change.delta.codes >> 42).tolist())


def test_triples_change_takes_away_triples_of_the_old_counts_only():
    old = Triples.from_arrays(3, x1=[0, 1], x2=[1, 2], x3=[2, 0], weights=[4.0, 2.0])
    new = Triples.from_arrays(3, x1=[1], x2=[2], x3=[0], weights=[5.0])
    change = triples_change(old, new)
    assert change.scale == 2.5
    assert change.delta.weights.tolist() == [-10.0]  # the vanished triple, scaled
    back = old.scaled(change.scale).weights
    np.testing.assert_allclose(back[1] + 0.0, new.weights[0])


def test_leading_singular_counts_like_a_full_svd(monkeypatch):
    import streamspec.core.subspace as subspace

    rng = np.random.default_rng(2)
    x = np.minimum(rng.zipf(1.4, 40_000) - 1, 299)
    t = Triples.from_arrays(300, x[:-2], x[1:-1], x[2:])
    full = np.linalg.svd(t.P21().toarray(), compute_uv=False)
    for threshold in (full[3] * 1.0001, full[40] * 1.0001, full[70] * 1.0001):
        monkeypatch.setattr(subspace, "DENSE_SVD_MAX", 100)  # the truncated, doubling path
        count, U, s, V = leading_singular(t.P21(), threshold, cap=200, first=8)
        assert count == int((full > threshold).sum())
        assert s.size > count  # it saw the first value below the threshold
        np.testing.assert_allclose(s, full[: s.size], rtol=1e-9)


def test_block_krylov_from_a_previous_basis_reaches_the_new_singular_subspaces():
    rng = np.random.default_rng(3)
    x = np.minimum(rng.zipf(1.3, 60_000) - 1, 399)
    t0 = Triples.from_arrays(400, x[:50_000 - 2], x[1:50_000 - 1], x[2:50_000])
    t1 = Triples.from_arrays(400, x[:-2], x[1:-1], x[2:])
    U0, _, V0 = top_singular(t0.P21(), 12)
    U1, s1, V1 = top_singular(t1.P21(), 12)
    assert principal_sines(U0[:, :6], U1[:, :6])[0] > 1e-4  # the counts moved the bases
    P = t1.P21().tocsr()
    r = refine_subspace(P, P.T.tocsr(), U0, V0, 6, tol=1e-8, max_rounds=8)
    assert r.converged and r.sines[0] > 1e-4 > r.sines[-1]
    assert principal_sines(U1[:, :6], r.U[:, :6])[0] < 1e-7
    np.testing.assert_allclose(r.s[:6], s1[:6], rtol=1e-10)


# ---------------------------------------------------------------------- exact moments


@pytest.mark.parametrize("forgetting", [1.0, 0.99995])
@pytest.mark.parametrize("make", [
    lambda: MEstimator(rank=3, backoff=None, basis_tol=1e9),
    lambda: SpectralEstimator(rank=3, backoff=None, basis_tol=1e9),
], ids=["m", "spectral"])
def test_incremental_moments_equal_the_recomputed_ones(make, forgetting):
    """Kept bases: every moment the state holds, updated from the changed triples alone, equals
    the same moment computed from all the new counts in those bases (counts are additive,
    forgetting a scale); and θ_spec's operators are those of the new counts in those bases."""
    x = HMM.random(3, 12, random_state=5).sample(40_000, random_state=6)
    acc = _accumulate(x[:30_000][x[:30_000] < 11], 12, forgetting)  # symbol 11 arrives later
    _, state = make().fit_with_state(acc)
    _extend(acc, x[30_000:])
    est = make()
    model, new = est.fit_with_state(acc, init=state)
    assert est.refit_.path == "warm" and isinstance(new, ProjectedState)
    t = acc.triples()
    U, Q, k = new.U, new.Q, new.k
    np.testing.assert_array_equal(U, state.U) and np.testing.assert_array_equal(Q, state.Q)
    c21 = t.c21()
    scale = np.abs(new.Y).max()
    np.testing.assert_allclose(new.Y, c21 @ Q, rtol=0, atol=1e-10 * scale)
    np.testing.assert_allclose(new.X, c21.T @ U, rtol=0, atol=1e-10 * scale)
    np.testing.assert_allclose(new.c1, t.c1(), rtol=1e-10)
    A = project_triples(t, U[:, :k], Q, middle=new.active, total=1.0)
    assert new.A.shape == A.shape and (A.size > 0) == isinstance(est, MEstimator)
    np.testing.assert_allclose(new.A, A, rtol=0, atol=1e-10 * max(np.abs(A).max(initial=0), 1e-300))
    V = Q[:, :k]
    M1 = U[:, :k].T @ (c21 @ V)
    spec = project_triples(t, U[:, :k], V @ np.linalg.inv(M1), total=1.0)
    rest = np.setdiff1d(np.arange(12), new.active)
    np.testing.assert_allclose(model.B[rest], spec[rest], rtol=0, atol=1e-10 * np.abs(spec).max())
    np.testing.assert_allclose(model.b1, U[:, :k].T @ t.P1(), rtol=1e-10)
    assert np.abs(model.B[11]).max() > 0  # the new symbol got its operator


# ---------------------------------------------------------------------- the paths


def _held_out_gap(make, stream, **warm_kw):
    train, test = stream[:200_000], stream[200_000:]
    acc = _accumulate(train[:198_000], 30)
    before, state = make().fit_with_state(acc)
    _extend(acc, train[198_000:])  # 1% more
    warm = make(**warm_kw)
    model = warm.fit(acc, init=state)
    # the cold fit at the rank the refit kept (rank="auto" chooses it again on the new counts)
    cold = make().clone(rank=warm.rank_).fit(acc)
    return warm, model, cold, before, test


@pytest.mark.parametrize("make", [
    lambda **kw: MEstimator(rank=4, backoff=None, **kw),
    lambda **kw: MEstimator(backoff=None, **kw),  # rank="auto"
    lambda **kw: SpectralEstimator(rank=4, backoff=None, **kw),
], ids=["m", "m-auto", "spectral"])
def test_a_warm_refit_matches_a_cold_fit_in_held_out_log_loss(make, stream):
    warm, model, cold, before, test = _held_out_gap(make, stream)
    assert warm.refit_.path == "warm"  # the kept bases, the incremental moments
    gap = model.log_loss([test]) - cold.log_loss([test])
    assert abs(gap) <= 1e-4
    # the refit moved the predictions towards the cold fit's, not nowhere
    contexts = np.stack([test[:-2], test[1:-1]], axis=1)[:5000]

    def predictions(m):
        return m.predict_from_state(m.window_states(contexts))

    target = predictions(cold)
    # (measured: a half to two thirds of the way, in the kept bases)
    assert np.abs(predictions(model) - target).mean() < 0.8 * np.abs(predictions(before) - target).mean()


def test_with_no_tolerance_for_stale_bases_the_refit_is_the_cold_fit(stream):
    warm, model, cold, _, test = _held_out_gap(lambda **kw: MEstimator(rank=4, backoff=None, **kw),
                                               stream, basis_tol=0.0)
    assert warm.refit_.path == "rebased"
    np.testing.assert_allclose(model.log_loss([test]), cold.log_loss([test]), rtol=1e-10)


def test_krylov_iterations_rebase_large_alphabets(monkeypatch):
    """Above DENSE_SVD_MAX symbols (lowered here) moved bases are refined by block Krylov
    iterations from the previous ones, to the cold fit's bases."""
    import streamspec.core.projected_warm as warm_module
    import streamspec.core.spectral_basis as spectral_basis
    import streamspec.core.subspace as subspace

    for module in (warm_module, spectral_basis, subspace):
        monkeypatch.setattr(module, "DENSE_SVD_MAX", 100)  # truncated SVDs at n = 300
    # singular values of P21 here: 0.0199, 0.0164, then the noise from 0.0007 on
    x = HMM.random(4, 300, random_state=7, concentration=0.1).sample(160_000, random_state=8)
    train, test = x[:150_000], x[150_000:]
    acc = _accumulate(train[:147_000], 300)
    _, state = SpectralEstimator(rank=2, backoff=None).fit_with_state(acc)
    _extend(acc, train[147_000:])
    est = SpectralEstimator(rank=2, backoff=None, basis_tol=0.0)
    model = est.fit(acc, init=state)
    cold = SpectralEstimator(rank=2, backoff=None).fit(acc)
    assert est.refit_.path == "rebased" and 1 <= len(est.refit_.sines) <= 4
    assert est.refit_.sines[-1] <= 1e-5 < est.refit_.sines[0]
    assert abs(model.log_loss([test]) - cold.log_loss([test])) <= 1e-8


def test_the_fallback_is_taken_when_the_spectrum_moved(monkeypatch):
    """The stream switches to another source: the counts' top singular subspaces are no longer
    near the previous ones (backward error above the noise) and the Krylov iterations from
    them do not converge in their rounds (the new rank-3 cut falls among near-equal singular
    values), so the refit is the cold fit, and says why."""
    import streamspec.core.projected_warm as warm_module
    import streamspec.core.spectral_basis as spectral_basis
    import streamspec.core.subspace as subspace

    for module in (warm_module, spectral_basis, subspace):
        monkeypatch.setattr(module, "DENSE_SVD_MAX", 100)  # the truncated path at n = 300
    a = HMM.random(3, 300, random_state=1, concentration=0.1).sample(50_000, random_state=2)
    b = HMM.random(3, 300, random_state=3, concentration=0.1).sample(50_000, random_state=3)
    acc = _accumulate(a, 300)
    _, state = MEstimator(rank=3, backoff=None).fit_with_state(acc)
    _extend(acc, b)
    est = MEstimator(rank=3, backoff=None)
    model = est.fit(acc, init=state)
    info = est.refit_
    assert info.path == "fallback" and "did not converge" in info.reason and info.residual > 1
    assert len(info.sines) == warm_module.REBASE_ROUNDS and info.sines[-1] > warm_module.REBASE_TOL
    cold = MEstimator(rank=3, backoff=None).fit(acc)
    np.testing.assert_allclose(model.B, cold.B, rtol=0, atol=1e-12)


def test_a_refit_on_unchanged_counts_gives_the_same_model(stream):
    acc = _accumulate(stream[:50_000], 30)
    est = SpectralEstimator(rank=4, backoff=None)
    first, state = est.fit_with_state(acc)
    again = SpectralEstimator(rank=4, backoff=None)
    model = again.fit(acc, init=state)
    assert again.refit_.path == "warm" and again.refit_.changed == 0.0
    np.testing.assert_allclose(model.B, first.B, rtol=0, atol=1e-12 * np.abs(first.B).max())


def test_spectral_init_reflects_the_new_data(stream):
    """θ_spec's warm refit moves with the counts: it differs from the model it started from,
    and on a shifted stream predicts the new symbols as a cold fit does."""
    acc = _accumulate(stream[:20_000], 30)
    old, state = SpectralEstimator(rank=4, backoff=None, basis_tol=1e9).fit_with_state(acc)
    shifted = (stream[20_000:60_000] + 7) % 30  # the same chain, the symbols renamed
    _extend(acc, shifted)
    est = SpectralEstimator(rank=4, backoff=None, basis_tol=1e9)
    model = est.fit(acc, init=state)
    assert est.refit_.path == "warm"
    cold = SpectralEstimator(rank=4, backoff=None).fit(acc)
    test = (stream[60_000:80_000] + 7) % 30
    losses = [m.log_loss([test]) for m in (old, model, cold)]
    assert losses[0] - 0.1 > losses[1] > losses[2]  # measured: 3.573, 3.379, 3.290
    assert np.abs(model.B - old.B).max() > 1e-3
    # with the default tolerance the moved bases are not kept: the refit is the cold fit
    default = SpectralEstimator(rank=4, backoff=None)
    again = default.fit(acc, init=state)
    assert default.refit_.path in ("rebased", "fallback") and default.refit_.residual > 0.1
    assert abs(again.log_loss([test]) - losses[2]) <= 1e-9


def test_weighting_blocks_are_reused_for_symbols_whose_counts_barely_changed(stream):
    acc = _accumulate(stream[:198_000], 30)
    _, state = MEstimator(rank=4, backoff=None).fit_with_state(acc)
    _extend(acc, stream[198_000:200_000])
    counts = {}
    for rtol in (0.0, 0.05, 1e9):
        est = MEstimator(rank=4, backoff=None, weighting_rtol=rtol)
        est.fit(acc, init=state)
        counts[rtol] = (est.refit_.reused, est.refit_.rebuilt)
        assert sum(counts[rtol]) == 30 and est.refit_.path == "warm"
    assert counts[0.0][0] == 0  # every symbol's count changed: every block rebuilt
    assert counts[1e9] == (30, 0)
    assert 0 < counts[0.05][0]  # 1% more data: most blocks kept


def test_a_warm_refit_with_the_backoff_keeps_the_learned_weights(stream):
    """With the backoff, a refit from the state fits the model once, warm, on all the counts,
    and keeps the previous mixture's weights (issue 18's refit path)."""
    acc = _accumulate(stream[:100_000], 30)
    first, state = MEstimator(rank=4).fit_with_state(acc)
    assert state.model is first and first.backoff is not None
    _extend(acc, stream[100_000:101_000])
    est = MEstimator(rank=4)
    model, new = est.fit_with_state(acc, init=state)
    assert est.refit_.path == "warm" and new.model is model
    np.testing.assert_array_equal(model.backoff.mixture.log_weights(),
                                  first.backoff.mixture.log_weights())
    assert model.backoff.trigram is not first.backoff.trigram  # rebuilt on the new counts
    plain = MEstimator(rank=4, backoff=None).fit(acc, init=state)
    np.testing.assert_allclose(model.B, plain.B, rtol=0, atol=1e-12)  # the same warm model


def test_a_refit_keeps_the_hmm_until_enough_triples_changed_since_its_em(stream):
    """The backoff's HMM is kept while the shares of changed triples, summed over the refits
    since its EM, stay within HMM_REFIT_SHARE; past that EM runs again, warm-started."""
    from streamspec.core.backoff_fit import HMM_REFIT_SHARE

    acc = _accumulate(stream[:100_000], 30)
    first, state = MEstimator(rank=4).fit_with_state(acc)
    assert first.backoff.hmm_changed == 0.0
    _extend(acc, stream[100_000:100_050])
    est = MEstimator(rank=4)
    kept, state = est.fit_with_state(acc, init=state)
    share = est.refit_.changed
    assert 0 < share <= HMM_REFIT_SHARE and kept.backoff.hmm_changed == pytest.approx(share)
    np.testing.assert_array_equal(kept.backoff.hmm.emissionprob_, first.backoff.hmm.emissionprob_)
    assert kept.backoff.trigram.n == 30 and kept.backoff.trigram is not first.backoff.trigram
    _extend(acc, stream[100_050:130_000])
    est = MEstimator(rank=4)
    refitted, _ = est.fit_with_state(acc, init=state)
    assert est.refit_.changed + share > HMM_REFIT_SHARE
    assert refitted.backoff.hmm_changed == 0.0
    assert refitted.backoff.hmm.n_states == first.backoff.hmm.n_states
    assert np.abs(refitted.backoff.hmm.emissionprob_ - first.backoff.hmm.emissionprob_).max() > 0
