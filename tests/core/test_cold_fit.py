"""The cold fit's shortcuts on large alphabets (issue 21): the backoff's 90% fit starts from the
bases of all the counts, is θ_spec on large problems, and the bases cache is freed."""

from __future__ import annotations

import weakref

import numpy as np
import pytest

from streamspec import HMM, MEstimator, SpectralEstimator
from streamspec.core import projected
from streamspec.core.count_split import split_triples as _split_triples
from streamspec.core.pair_index import PairIndex
from streamspec.core.projected import ProjectedFit, _refined_basis
from streamspec.core.projected_state import ProjectedSettings
from streamspec.core.spectral_basis import projected_basis
from streamspec.core.subspace_iteration import principal_sines
from streamspec.core.triples import Triples
from streamspec.core.warm_fit import drop_cached

N_SYMBOLS = 1_500  # above DENSE_SVD_MAX: the truncated SVD path


@pytest.fixture(scope="module")
def counts() -> tuple[Triples, Triples]:
    """All the counts of a sparse 6-state HMM over 1,500 symbols, and their 90% (as the backoff)."""
    x = HMM.random(6, N_SYMBOLS, random_state=0, concentration=0.05).sample(300_000, random_state=1)
    t = Triples.from_arrays(N_SYMBOLS, x[:-2], x[1:-1], x[2:])
    kept, _ = _split_triples(t, 0.1, np.random.default_rng(0))
    return t, kept


def _p21(t: Triples):
    return PairIndex(t).c21() * (1.0 / t.total)


def test_refined_basis_is_the_truncated_svd_of_the_part(counts):
    t, kept = counts
    k, kp = 4, 8
    start = projected_basis(_p21(t), t.total, k, None, 2, 100)
    exact = projected_basis(_p21(kept), kept.total, k, None, 2, 100)
    k2, U, s, Q = _refined_basis(_p21(kept), start)
    assert k2 == k and U.shape == Q.shape == (N_SYMBOLS, kp) and s.shape == (kp,)
    assert np.allclose(U.T @ U, np.eye(kp), atol=1e-10) and np.allclose(Q.T @ Q, np.eye(kp), atol=1e-10)
    # the top k: the part's own singular values and subspaces, far closer than the start's
    assert np.allclose(s[:k], exact[2][:k], rtol=1e-3)
    refined_sine = principal_sines(exact[1][:, :k], U[:, :k])[0]
    start_sine = principal_sines(exact[1][:, :k], start[1][:, :k])[0]
    assert refined_sine < 1e-2 and refined_sine < start_sine / 3
    # the sign convention of top_singular: the largest entry of each left vector is positive
    assert (U[np.abs(U).argmax(axis=0), np.arange(kp)] > 0).all()


def _settings(**kw) -> ProjectedSettings:
    return ProjectedSettings(rank=4, **kw)


def test_the_part_starts_from_the_cached_bases_of_all_the_counts(counts):
    t, kept = counts
    cache: dict = {}
    part = ProjectedFit(_settings(), 2, kept, None, cache, scored_only=True, reference=t)
    part.prepare()
    whole_key = (id(t), 4, None, 2)
    assert whole_key in cache and ("index", id(t)) in cache  # computed first, kept for that fit
    k, U, s, Q = _refined_basis(_p21(kept), cache[whole_key])
    assert np.allclose(part.U, U[:, :k]) and np.allclose(part.Q, Q)
    whole = ProjectedFit(_settings(), 2, t, None, cache)
    whole.prepare()
    assert whole.Q is cache[whole_key][3]  # no second SVD of all the counts
    drop_cached(cache, kept, t)
    assert (id(kept), 4, None, 2) not in cache and ("index", id(kept)) not in cache
    assert whole_key in cache
    drop_cached(cache, t, t)
    assert cache == {}


def test_the_scored_part_is_theta_spec_on_large_problems(counts, monkeypatch):
    t, kept = counts

    def fit(scored_only: bool):
        steps = ProjectedFit(_settings(), 2, kept, None, {}, scored_only=scored_only, reference=t)
        steps.prepare()
        steps.initial_estimate(None)
        steps.iterate()
        return steps

    monkeypatch.setattr(projected, "_FULL_CONDITIONS_MAX", 0)  # every problem counts as large
    scored, full = fit(True), fit(False)
    assert len(scored.history) == 1 and scored.active.size == 0
    assert np.array_equal(scored.ops, scored.base)  # θ_spec's operators, every symbol
    assert len(full.history) == 2 and full.active.size > 0  # θ_M: the GLS step on weighted symbols
    # the same bases (the cache), other operators where θ_M weighs, the same elsewhere
    assert np.array_equal(scored.Q, full.Q)
    assert not np.allclose(full.ops[full.active], scored.ops[full.active], rtol=1e-6, atol=0)
    rest = np.setdiff1d(np.arange(N_SYMBOLS), full.active)
    assert np.allclose(full.ops[rest], scored.ops[rest], rtol=1e-10, atol=1e-14)
    monkeypatch.setattr(projected, "_FULL_CONDITIONS_MAX", 1 << 24)  # small: θ_M as before
    assert len(fit(True).history) == 2


def test_default_fit_on_a_large_alphabet_keeps_its_backoff_and_predicts(counts):
    t, _ = counts
    est = MEstimator(rank=4)
    model = est.fit(t)
    assert model.backoff is not None and model.rank == 4 and est.n_conditions_ == 8
    p = model.predict_proba_next([0, 1])
    assert p.shape == (N_SYMBOLS,) and abs(p.sum() - 1) < 1e-9 and (p >= 0).all()


def test_the_final_fit_writes_into_the_parts_operators_only_when_nothing_holds_them(counts):
    t, kept = counts
    whole = ProjectedFit(_settings(), 2, t, None, {})
    whole.prepare()
    n, k = whole.n, whole.k
    expected = whole.spectral_operators()  # a fresh array

    class Gone:
        pass

    dead = weakref.ref(Gone())  # the model the array came from, collected
    whole.bases.update(spare=np.full((n, k, k), np.nan), spare_of=dead)  # only the cache holds it
    ops = whole.spectral_operators()
    assert "spare" not in whole.bases and np.allclose(ops, expected, rtol=1e-12, atol=0)
    held = np.full((n, k, k), np.nan)  # another holder of the array: never overwritten
    whole.bases.update(spare=held, spare_of=dead)
    ops = whole.spectral_operators()
    assert ops is not held and np.isnan(held).all() and np.allclose(ops, expected, rtol=1e-12, atol=0)
    alive = Gone()  # the model still alive: not used either
    whole.bases.update(spare=np.full((n, k, k), np.nan), spare_of=weakref.ref(alive))
    assert np.allclose(whole.spectral_operators(), expected, rtol=1e-12, atol=0)
    whole.bases.update(spare=np.zeros((n, k + 1, k + 1)), spare_of=dead)  # another shape
    assert whole.spectral_operators().shape == (n, k, k)


@pytest.mark.parametrize("estimator", [MEstimator, SpectralEstimator])
def test_the_scored_part_leaves_its_operators_for_the_final_fit(counts, monkeypatch, estimator):
    t, _ = counts
    seen = []
    original = ProjectedFit._spare_operators

    def spy(self):
        there = self.bases is not None and "spare" in self.bases  # no reference kept here
        out = original(self)
        seen.append((there, out is not None))
        return out

    monkeypatch.setattr(ProjectedFit, "_spare_operators", spy)
    model = estimator(rank=4).fit(t)
    # the 90% fit finds none; the final fit finds the 90% model's operators and reuses them
    assert seen == [(False, False), (True, True)]
    assert np.isfinite(model.B).all() and model.backoff is not None
