"""The spectral and M-estimators: Proposition 1, second moments, consistency, L1, bad input."""

from __future__ import annotations

import numpy as np
import pytest

from streamspec import HMM, HMMEstimator, MEstimator, MomentAccumulator, SpectralEstimator
from streamspec.core.dense import DenseProblem
from streamspec.core.moments import moment_residuals, probabilities, second_moment_blocks
from streamspec.core.spectral import top_subspace
from streamspec.core.weighting import WEIGHTINGS, build_weighting


def accumulate(seq, n):
    acc = MomentAccumulator(n, window=1)  # these tests are of the triples
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
    acc = MomentAccumulator(3, window=1)
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
    import streamspec.core.dense as dense_module

    hmm = HMM.random(3, 6, random_state=8)
    acc = accumulate(hmm.sample(30000, random_state=9), 6)
    kwargs = dict(rank=3, penalty=penalty, weighting="exact", max_outer=2)
    dense = MEstimator(**kwargs)
    dense.fit(acc)
    monkeypatch.setattr(dense_module, "DENSE_MAX", 0)  # force CG (no L1) or FISTA (L1)
    iterative = MEstimator(**kwargs)
    iterative.fit(acc)
    assert abs(iterative.factors_.loss - dense.factors_.loss) <= 1e-4 * dense.factors_.loss
    np.testing.assert_allclose(iterative.factors_.operators(), dense.factors_.operators(),
                               atol=1e-3)


# ---------------------------------------------------------------------- the optimiser itself
# Each step of the alternating minimisation is checked against its own problem, solved
# by brute force at a tiny size: a step that does nothing (or the wrong thing) fails
# here even though θ_M, started at θ_spec, would still look reasonable.


def _dense_problem(weighting: str, factorization: str = "fixed", penalty: float = 0.0, n: int = 4):
    """A fitted dense estimator, its :class:`DenseProblem` and a non-identity W at its solution."""
    hmm = HMM.random(3, n, random_state=5)
    acc = accumulate(hmm.sample(4000, random_state=6), n)
    est = MEstimator(rank=2, weighting=weighting, factorization=factorization, penalty=penalty,
                     formulation="dense", backoff=None, max_outer=1)
    model = est.fit(acc)
    prob = DenseProblem.of_counts(est, acc.counts())  # the moments the fit worked on
    return est, prob, prob.weighting_at(model.B)


def _dense_matrix(W, n: int) -> np.ndarray:
    """W as an explicit (n³, n³) matrix: its action on each unit vector."""
    eye = np.eye(n**3)
    return np.stack([W.apply(e.reshape(n, n, n)).ravel() for e in eye], axis=1)


def _linear_map(m_of, shape) -> tuple[np.ndarray, np.ndarray]:
    """``(A, p)`` with ``m_of(θ) = p - A θ`` for the affine map ``m_of`` (by unit vectors)."""
    p = m_of(np.zeros(shape)).ravel()
    cols = [p - m_of(e.reshape(shape)).ravel() for e in np.eye(int(np.prod(shape)))]
    return np.stack(cols, axis=1), p


@pytest.mark.parametrize("weighting", ["identity", "diagonal", "per_symbol", "exact"])
def test_r_step_is_the_exact_minimiser_of_its_weighted_least_squares(weighting):
    est, prob, W = _dense_problem(weighting)
    n, k = prob.P21.shape[0], 2
    S = est.factors_.S
    Z = prob.z(S)
    A, p = _linear_map(lambda R: prob.P3j - np.einsum("xiw,xjw->jxi", R, Z), (n, n, k))
    Wd = _dense_matrix(W, n)
    H = A.T @ Wd @ A
    brute = np.linalg.lstsq(H, A.T @ Wd @ p, rcond=None)[0]
    R = prob.r_step(np.zeros((n, n, k)), S, W).ravel()
    gradient = A.T @ Wd @ (A @ R - p)  # stationarity of (p - AR)ᵀ W (p - AR)
    assert np.abs(gradient).max() <= 1e-8 * max(np.abs(A.T @ Wd @ p).max(), 1e-300)
    np.testing.assert_allclose(prob.loss(R.reshape(n, n, k), S, W),
                               float((p - A @ brute) @ Wd @ (p - A @ brute)), rtol=1e-9)


@pytest.mark.parametrize("weighting", ["identity", "per_symbol"])
def test_r_step_with_l1_meets_the_kkt_conditions(weighting):
    est, prob, W = _dense_problem(weighting, penalty=0.3)
    n, k = prob.P21.shape[0], 2
    S = est.factors_.S
    Z = prob.z(S)
    A, p = _linear_map(lambda R: prob.P3j - np.einsum("xiw,xjw->jxi", R, Z), (n, n, k))
    Wd = _dense_matrix(W, n)
    R = prob.r_step(np.zeros((n, n, k)), S, W).ravel()
    g = 2 * A.T @ Wd @ (A @ R - p)  # gradient of the smooth part; the L1 weight is μ
    mu = prob.mu
    active = R != 0
    assert active.any() and (~active).any()  # both kinds of coordinate are checked
    np.testing.assert_allclose(g[active], -mu * np.sign(R[active]), atol=1e-6 * mu)
    assert (np.abs(g[~active]) <= mu * (1 + 1e-6)).all()


@pytest.mark.parametrize("weighting", ["identity", "diagonal", "per_symbol"])
def test_s_step_is_the_exact_minimiser_of_its_weighted_least_squares(weighting):
    est, prob, W = _dense_problem(weighting, factorization="shared")
    n, k = prob.P21.shape[0], 2
    R = est.factors_.R
    A, p = _linear_map(lambda S: prob.P3j - np.einsum("xiw,xjw->jxi", R, prob.z(S)), (n, k))
    Wd = _dense_matrix(W, n)
    S = prob.s_step(R, np.linalg.qr(np.ones((n, k)) + np.eye(n, k))[0], W).ravel()
    gradient = A.T @ Wd @ (A @ S - p)
    assert np.abs(gradient).max() <= 1e-7 * max(np.abs(A.T @ Wd @ p).max(), 1e-300)
    brute = np.linalg.lstsq(A.T @ Wd @ A, A.T @ Wd @ p, rcond=None)[0]
    loss = float((p - A @ S) @ Wd @ (p - A @ S))
    np.testing.assert_allclose(loss, float((p - A @ brute) @ Wd @ (p - A @ brute)), rtol=1e-8)


def test_projected_step_is_the_gls_minimiser_of_each_symbol():
    from streamspec.core.projected import projected_step as _projected_step
    from streamspec.core.subspace import project_triples

    hmm = HMM.random(4, 8, random_state=7)
    acc = accumulate(hmm.sample(20_000, random_state=8), 8)
    est = MEstimator(rank=2, backoff=None)  # projected, per-symbol weighting, k' = 4
    est.fit(acc)
    U, Q = est.basis_
    triples = acc.triples()
    M = U.T @ np.asarray(triples.P21() @ Q)
    A = project_triples(triples, U, Q)
    W = est.weighting_
    symbols = np.arange(8)
    previous = est.factors_.R
    new, before, after = _projected_step(W, symbols, A, M, previous)
    sigma = W.factor_of(symbols)  # Σ_x, (8, k', k')
    assert sigma.ndim == 3 and not np.allclose(sigma[0], sigma[0][0, 0] * np.eye(4))
    for x in symbols:
        Sinv = np.linalg.inv(sigma[x])
        # stationarity of tr((A_x - B M) Σ⁻¹ (A_x - B M)ᵀ) in B, and the dense solve of vec(B)
        gradient = (A[x] - new[x] @ M) @ Sinv @ M.T
        assert np.abs(gradient).max() <= 1e-9 * max(np.abs(A[x] @ Sinv @ M.T).max(), 1e-300)
        H = np.kron(np.eye(2), M @ Sinv @ M.T)  # row-major vec(B): rows of B are independent
        brute = np.linalg.solve(H, (A[x] @ Sinv @ M.T).ravel()).reshape(2, 2)
        np.testing.assert_allclose(new[x], brute, rtol=1e-8, atol=1e-12)
    # ``previous`` is the solution under W itself (W is the step's, estimated at θ_spec)
    assert after <= before * (1 + 1e-12)


def test_the_m_loss_strictly_decreases_from_the_spectral_start_under_a_weighting():
    # dense: the sweeps under W (estimated at θ_spec) must move away from θ_spec's R
    est, prob, _ = _dense_problem("per_symbol")
    P1, P21, P3x1 = probabilities(prob.c3)
    R0, S0 = prob.spectral_start(P1, P21, P3x1, top_subspace(P21, 2))
    W = prob.weighting_at(np.einsum("xiw,sw->xis", R0, S0))
    start = prob.loss(R0, S0, W)
    R, S, losses, refused = prob.alternate(R0, S0, W)
    assert refused is None and losses[0] == pytest.approx(start)
    assert losses[-1] < start * (1 - 1e-3)
    # projected, through the public attributes: the GLS step lowers its own W's loss
    hmm = HMM.random(4, 8, random_state=7)
    acc = accumulate(hmm.sample(20_000, random_state=8), 8)
    proj = MEstimator(rank=2, backoff=None)
    proj.fit(acc)
    before, after = proj.loss_history_[1]
    assert after < before * (1 - 1e-4) and proj.rejected_sweeps_ == []


def test_a_rejected_sweep_is_recorded_in_the_history(monkeypatch):
    est, prob, _ = _dense_problem("per_symbol")
    acc_c3 = prob.c3
    real = DenseProblem.r_step

    def worse(self, R, S, W):  # a wrong step: the minimiser, pushed away from it
        return real(self, R, S, W) + 0.5

    monkeypatch.setattr(DenseProblem, "r_step", worse)
    bad = MEstimator(rank=2, weighting="per_symbol", formulation="dense", backoff=None)
    bad.fit(acc_c3)
    assert bad.rejected_sweeps_, "the sweep that raised the loss must be recorded"
    for outer, sweep, refused, kept in bad.rejected_sweeps_:
        assert refused > kept and sweep >= 1 and outer in bad.rejected_


# ---------------------------------------------------------------------- the estimator contract


@pytest.mark.parametrize("make", [
    lambda: MEstimator(rank=3, weighting="identity", max_sweeps=7),
    lambda: SpectralEstimator(rank=2, window=4),
    lambda: HMMEstimator(n_states=2, n_iter=3),
])
def test_get_params_and_clone_round_trip_every_estimator(make):
    est = make()
    params = est.get_params()
    twin = est.clone()
    assert type(twin) is type(est) and twin is not est and twin.get_params() == params
    changed = est.clone(tol=0.5) if "tol" in params else est.clone(window=1)
    assert est.get_params() == params  # the original is never edited
    assert changed.get_params() == params | ({"tol": 0.5} if "tol" in params else {"window": 1})
    with pytest.raises(TypeError, match="no parameter bogus"):
        est.clone(bogus=1)
    with pytest.raises(TypeError):
        type(est)(3)  # parameters are keyword-only


def test_a_clone_carries_no_fitted_state():
    acc = MomentAccumulator(n_symbols=3)
    acc.learn_many(HMM.random(n_states=2, n_symbols=3, random_state=0).sample(5_000, random_state=1))
    est = MEstimator(rank=2, backoff=None)
    est.fit(acc)
    assert hasattr(est, "factors_") and not hasattr(est.clone(), "factors_")
    assert repr(est.clone(rank=3)) == "MEstimator(rank=3, backoff=None)"


def test_the_refitter_warm_starts_through_the_estimator_not_by_editing_it():
    from streamspec.streaming.refitter import refit_estimator

    acc = MomentAccumulator(n_symbols=3)
    acc.learn_many(HMM.random(n_states=2, n_symbols=3, random_state=0).sample(5_000, random_state=1))
    template = MEstimator(rank=2, max_sweeps=40, weighting="identity", factorization="shared")
    before = template.get_params()
    prev = template.clone().fit(acc)
    est, warm = refit_estimator(template, 3, prev, sweeps=2)
    assert warm and (est.max_sweeps, est.max_outer) == (2, 1)
    assert template.get_params() == before
    est, warm = refit_estimator(SpectralEstimator(rank=2), 3, prev, sweeps=2)
    assert not warm  # no warm start offered: refitted cold


@pytest.mark.parametrize("kwargs", [
    dict(rank=2, backoff=None),  # projected
    dict(rank=2, formulation="dense", weighting="diagonal", factorization="shared", backoff=None),
    dict(rank=2),  # with the backoff's two candidate fits
])
def test_one_estimator_fits_in_two_threads_as_it_does_in_sequence(kwargs):
    """No fit keeps its arrays on the estimator: concurrent fits cannot see each other's."""
    import threading

    data = [accumulate(HMM.random(3, 5, random_state=s).sample(20_000, random_state=s + 1), 5)
            for s in (11, 12)]
    est = MEstimator(**kwargs)
    sequential = [est.fit(acc) for acc in data]
    barrier, out = threading.Barrier(2), [None, None]

    def run(i: int) -> None:
        barrier.wait()
        for _ in range(3):  # several rounds, so the two fits overlap
            out[i] = est.fit(data[i])

    threads = [threading.Thread(target=run, args=(i,)) for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert np.abs(sequential[0].B - sequential[1].B).max() > 1e-3  # the two data sets differ
    for got, want in zip(out, sequential, strict=True):
        np.testing.assert_array_equal(got.B, want.B)
        np.testing.assert_array_equal(got.factors.R, want.factors.R)
