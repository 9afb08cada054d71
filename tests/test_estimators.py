"""The spectral and M-estimators: Proposition 1, second moments, consistency, L1, bad input."""

from __future__ import annotations

import numpy as np
import pytest

from streamspec import HMM, MEstimator, MomentAccumulator, SpectralEstimator
from streamspec.moments import moment_residuals, probabilities, second_moment_blocks
from streamspec.weighting import WEIGHTINGS, build_weighting


def accumulate(seq, n):
    acc = MomentAccumulator(n)
    acc.learn_many(seq)
    return acc


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("factorization", ["fixed", "shared", "per_symbol"])
def test_proposition_1_full_rank_identity_equals_spectral(seed, factorization):
    hmm = HMM.random(4, 4, random_state=seed)
    acc = accumulate(hmm.sample(3000, random_state=seed), 4)
    spec = SpectralEstimator(rank=4).fit(acc)
    mest = MEstimator(rank=4, weighting="identity", factorization=factorization,
                      formulation="dense").fit(acc)
    seqs = np.random.default_rng(seed).integers(0, 4, size=(100, 5))
    a, b = spec.joint_proba_many(seqs), mest.joint_proba_many(seqs)
    assert np.abs(a - b).max() <= 1e-8 * np.abs(a).max()


def test_second_moments_equal_brute_force_outer_products():
    rng = np.random.default_rng(0)
    n, N = 4, 300
    X = rng.integers(0, n, size=(N, 3))  # (x1, x2, x3)
    B = rng.normal(size=(n, n, n))
    c3 = np.zeros((n, n, n))
    S = np.zeros((n, n * n, n * n))
    for x1, x2, x3 in X:
        c3[x2, x3, x1] += 1
        m = np.zeros((n, n, n))  # m[x, i, j]
        m[x2, x3, x1] += 1
        m[:, :, x1] -= B[:, :, x2]
        for j in range(n):
            v = m[:, :, j].ravel()
            S[j] += np.outer(v, v)
    np.testing.assert_allclose(second_moment_blocks(c3, B), S, atol=1e-10)
    # and the mean moment is the residual of the counts
    P1, P21, P3x1 = probabilities(c3)
    mean = np.zeros((n, n, n))
    for x1, x2, x3 in X:
        mean[x1, x2, x3] += 1
        mean[x1] -= B[:, :, x2]
    np.testing.assert_allclose(moment_residuals(P3x1, P21, B), mean / N, atol=1e-12)


@pytest.mark.parametrize("mode", WEIGHTINGS)
def test_weightings_apply_their_dense_definition(mode):
    rng = np.random.default_rng(1)
    n = 4
    c3 = rng.integers(0, 6, size=(n, n, n)).astype(float)
    B = 0.3 * rng.normal(size=(n, n, n))
    W = build_weighting(mode, c3, B, smoothing=0.5, shrinkage=0.1, ridge=1e-6)
    S = second_moment_blocks(c3 / c3.sum(), B, smoothing=0.5 / c3.sum())
    tau = np.einsum("jaa->ja", S).mean()
    M = rng.normal(size=(n, n, n))
    for j in range(n):
        Sj = 0.9 * S[j] + (0.1 + 1e-6) * tau * np.eye(n * n)
        if mode == "identity":
            ref = np.eye(n * n)
        elif mode == "diagonal":
            ref = tau * np.diag(1 / np.diag(Sj))
        elif mode == "per_symbol":
            ref = np.zeros_like(Sj)
            for x in range(n):
                block = slice(x * n, (x + 1) * n)
                ref[block, block] = tau * np.linalg.inv(Sj[block, block])
        else:
            ref = tau * np.linalg.inv(Sj)
        np.testing.assert_allclose(W.dense_block(j), ref, rtol=1e-7, atol=1e-9 * np.abs(ref).max())
        np.testing.assert_allclose(W.apply(M)[j].ravel(), ref @ M[j].ravel(), rtol=1e-7,
                                   atol=1e-9 * np.abs(ref).max())


def joint_error(model, hmm, seqs):
    true = hmm.operators().joint_proba_many(seqs)
    return np.linalg.norm(model.joint_proba_many(seqs) - true) / np.linalg.norm(true)


@pytest.mark.parametrize(
    "estimator",
    [SpectralEstimator(rank=3), MEstimator(rank=3), MEstimator(rank=3, weighting="exact"),
     MEstimator(rank=3, weighting="per_symbol", formulation="dense")],
    ids=["spectral", "mestimator-default", "mestimator-dense-exact", "mestimator-dense-per-symbol"],
)
def test_consistency_error_shrinks_with_data(estimator):
    hmm = HMM.random(3, 4, random_state=3)
    seq = hmm.sample(10**6, random_state=4)
    seqs = hmm.sample_many(200, 4, random_state=5)
    errors = [joint_error(estimator.fit(accumulate(seq[:N], 4)), hmm, seqs)
              for N in (10**3, 10**4, 10**5, 10**6)]
    assert errors[-1] < errors[1] < errors[0]
    assert errors[-1] < 0.05 and errors[-1] < errors[0] / 5


def test_l1_gives_exact_zeros_and_more_of_them_as_penalty_grows():
    hmm = HMM.random(3, 6, random_state=0)
    acc = accumulate(hmm.sample(20000, random_state=1), 6)
    zeros = []
    for penalty in (0.0, 0.01, 0.1, 1.0):
        model = MEstimator(rank=3, penalty=penalty, weighting="identity", formulation="dense").fit(acc)
        zeros.append(int((model.factors.R == 0).sum()))
    assert zeros[0] == 0
    assert zeros[-1] > 0 and zeros == sorted(zeros)
    huge = MEstimator(rank=3, penalty=1e6, weighting="exact").fit(acc)
    assert (huge.factors.R == 0).all()


@pytest.mark.parametrize("weighting", ["diagonal", "per_symbol", "exact"])
@pytest.mark.parametrize("factorization", ["shared", "per_symbol"])
def test_loss_never_increases_with_weighting_fixed(weighting, factorization):
    hmm = HMM.random(3, 5, random_state=2)
    acc = accumulate(hmm.sample(5000, random_state=3), 5)
    est = MEstimator(rank=2, penalty=0.05, weighting=weighting, factorization=factorization,
                     max_sweeps=15, n_restarts=1, random_state=0)
    est.fit(acc)
    assert len(est.loss_history_) >= 2
    for losses in est.loss_history_:
        assert all(b <= a for a, b in zip(losses, losses[1:], strict=False))
    assert np.isfinite(est.factors_.loss)


@pytest.mark.parametrize("formulation", ["auto", "dense"])
def test_warm_start_reaches_cold_loss_and_handles_new_symbols(formulation):
    hmm = HMM.random(3, 5, random_state=4)
    seq = hmm.sample(40000, random_state=5)
    first = MomentAccumulator()
    first.learn_many(seq[:20000][seq[:20000] < 4])  # symbol 4 not seen yet
    est = MEstimator(rank=3, formulation=formulation, backoff=None)
    previous = est.fit(first)
    assert previous.n_symbols == 4
    acc = MomentAccumulator()
    acc.learn_many(seq)
    cold = MEstimator(rank=3, formulation=formulation, backoff=None)
    cold.fit(acc)
    warm = MEstimator(rank=3, max_outer=1, formulation=formulation, backoff=None)
    model = warm.fit(acc, init=previous)
    assert model.n_symbols == 5
    assert warm.factors_.loss <= cold.factors_.loss * 1.05
    assert sum(map(len, warm.loss_history_)) < sum(map(len, cold.loss_history_))


def test_rank_auto_and_restarts_are_reproducible():
    hmm = HMM.random(2, 6, random_state=6)
    acc = accumulate(hmm.sample(50000, random_state=7), 6)
    est = MEstimator(rank="auto", factorization="shared", n_restarts=2, random_state=3)
    a = est.fit(acc)
    assert 1 <= est.rank_ <= 6
    b = MEstimator(rank="auto", factorization="shared", n_restarts=2, random_state=3).fit(acc)
    np.testing.assert_array_equal(a.B, b.B)


@pytest.mark.parametrize(
    "settings, message",
    [
        (dict(rank=0), "rank must be a positive integer or 'auto'; got 0"),
        (dict(rank=2.5), "rank must be"),
        (dict(rank=2, weighting="optimal"), "weighting must be one of 'identity'"),
        (dict(rank=2, factorization="free"), "factorization must be one of"),
        (dict(rank=2, penalty=-1), "penalty must be a finite number >= 0"),
        (dict(rank=2, penalty=float("nan")), "penalty"),
        (dict(rank=2, n_restarts=-1), "n_restarts"),
        (dict(rank=2, max_sweeps=0), "max_sweeps must be a positive integer"),
        (dict(rank=2, max_outer=0), "max_outer"),
        (dict(rank=2, tol=0), "tol"),
        (dict(rank=2, shrinkage=1.5), "shrinkage"),
        (dict(rank=2, formulation="sparse"), "formulation must be one of"),
        (dict(rank=2, formulation="projected", weighting="exact"), "formulation='dense'"),
        (dict(rank=2, n_conditions=0), "n_conditions"),
        (dict(rank=2, backoff="kn"), "backoff must be one of"),
        (dict(rank=2, window=-1), "window"),
    ],
)
def test_bad_estimator_parameters_are_refused_at_construction(settings, message):
    with pytest.raises(ValueError, match=message):
        MEstimator(**settings)


@pytest.mark.parametrize(
    "settings, message",
    [(dict(rank=0), "rank must be"), (dict(rank="full"), "rank must be"),
     (dict(rank=2, backoff="kn"), "backoff"), (dict(rank=2, filter="kalman"), "filter")],
)
def test_bad_spectral_parameters_are_refused_at_construction(settings, message):
    with pytest.raises(ValueError, match=message):
        SpectralEstimator(**settings)


@pytest.mark.parametrize("estimator", [SpectralEstimator(rank=5), MEstimator(rank=5)])
def test_a_rank_above_the_alphabet_is_refused_at_fit_without_touching_the_counts(estimator):
    acc = accumulate([0, 1, 2, 3, 0, 1, 2], 4)
    before = acc.counts()
    with pytest.raises(ValueError, match="between 1 and the number of symbols"):
        estimator.fit(acc)
    np.testing.assert_array_equal(acc.counts(), before)


def test_get_params_keep_the_settings_verbatim():
    est = MEstimator(rank="auto", shrinkage=0.5, max_outer=None)
    assert (est.rank, est.shrinkage, est.max_outer) == ("auto", 0.5, None)


@pytest.mark.parametrize("estimator", [SpectralEstimator(rank=2), MEstimator(rank=2)])
def test_fitting_an_empty_accumulator_is_a_clear_error(estimator):
    acc = MomentAccumulator(3)
    acc.learn_many([0, 1])  # two symbols: no triple yet
    with pytest.raises(ValueError, match="empty accumulator"):
        estimator.fit(acc)
    acc.learn_one(2)
    assert estimator.fit(acc).n_symbols == 3


def test_accumulator_second_moments_match_brute_force():
    rng = np.random.default_rng(2)
    n = 3
    seq = rng.integers(0, n, size=200)
    acc = accumulate(seq, n)
    B = rng.normal(size=(n, n, n))
    brute = np.zeros((n, n * n, n * n))
    for t in range(len(seq) - 2):
        x1, x2, x3 = seq[t : t + 3]
        m = np.zeros((n, n, n))
        m[x2, x3, x1] += 1
        m[:, :, x1] -= B[:, :, x2]
        v = m[:, :, x1].ravel()
        brute[x1] += np.outer(v, v)
    np.testing.assert_allclose(acc.second_moments(B), brute, atol=1e-10)
    with pytest.raises(ValueError, match="shape"):
        acc.second_moments(np.zeros((2, 2, 2)))


@pytest.mark.parametrize("penalty", [0.0, 0.02])
def test_iterative_and_explicit_exact_solvers_agree(monkeypatch, penalty):
    import streamspec.mestimator as mest

    hmm = HMM.random(3, 6, random_state=8)
    acc = accumulate(hmm.sample(30000, random_state=9), 6)
    kwargs = dict(rank=3, penalty=penalty, weighting="exact", max_outer=2)
    dense = MEstimator(**kwargs)
    dense.fit(acc)
    monkeypatch.setattr(mest, "_DENSE_MAX", 0)  # force CG (no L1) or FISTA (L1)
    iterative = MEstimator(**kwargs)
    iterative.fit(acc)
    assert abs(iterative.factors_.loss - dense.factors_.loss) <= 1e-4 * dense.factors_.loss
    np.testing.assert_allclose(iterative.factors_.operators(), dense.factors_.operators(),
                               atol=1e-3)
