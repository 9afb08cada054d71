"""The projected formulation of θ_M: θ_spec at W = I, Proposition 1, GLS, warm starts, memory.

Run as a script (``python tests/core/test_mestimator_projected.py --bench``) to repeat the
measurements behind MEstimator's defaults (held-out log loss and fit time at
n = 26, ~1,000 and ~20,000 symbols).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from streamspec import HMM, MEstimator, MomentAccumulator, SpectralEstimator
from streamspec.core.triples import Triples


def zipf_hmm(n_states: int, n_symbols: int, random_state: int = 0, exponent: float = 1.1) -> HMM:
    """A sticky HMM whose states emit Zipf-like distributions over a shared large alphabet.

    Every state reweights one Zipf law (rank r has mass ∝ (r + 1)^-exponent) by
    independent Gamma(1) factors, so the states differ on every symbol while the
    alphabet keeps a heavy tail, as words do.
    """
    rng = np.random.default_rng(random_state)
    base = 1.0 / np.arange(1, n_symbols + 1) ** exponent
    O = base[:, None] * rng.gamma(1.0, size=(n_symbols, n_states))
    O /= O.sum(axis=0)
    T = rng.dirichlet(np.full(n_states, 0.5), size=n_states).T + 2.0 * np.eye(n_states)
    T /= T.sum(axis=0)
    return HMM(T, O)


def triples_of_sequence(seq: np.ndarray, n: int) -> Triples:
    seq = np.asarray(seq, dtype=np.int64)
    return Triples.from_arrays(n, seq[:-2], seq[1:-1], seq[2:])


def accumulate(seq, n):
    acc = MomentAccumulator(n, window=1)  # these tests are of the triples
    acc.learn_many(seq)
    return acc


def joint_error(model, hmm, seqs):
    true = hmm.operators().joint_proba_many(seqs)
    return np.linalg.norm(model.joint_proba_many(seqs) - true) / np.linalg.norm(true)


@pytest.mark.parametrize("seed", range(4))
def test_projected_identity_is_theta_spec(seed):
    hmm = HMM.random(4, 7, random_state=seed)
    acc = accumulate(hmm.sample(5000, random_state=seed), 7)
    spec = SpectralEstimator(rank=3).fit(acc)
    est = MEstimator(rank=3, weighting="identity", formulation="projected")
    model = est.fit(acc)
    assert est.formulation_ == "projected" and est.n_conditions_ == 6
    scale = np.abs(spec.B).max()
    np.testing.assert_allclose(model.B, spec.B, rtol=0, atol=1e-10 * scale)
    np.testing.assert_allclose(model.b1, spec.b1, rtol=0, atol=1e-10 * np.abs(spec.b1).max())
    np.testing.assert_allclose(model.binf, spec.binf, rtol=0, atol=1e-10 * np.abs(spec.binf).max())
    # the same from sparse counts
    sparse = MEstimator(rank=3, weighting="identity").fit(Triples.from_dense(acc.counts()))
    np.testing.assert_allclose(sparse.B, spec.B, rtol=0, atol=1e-10 * scale)


def test_diagonal_weighting_in_the_svd_basis_is_theta_spec():
    """A diagonal Σ_x cannot couple the k' - k extra conditions to the first k (M = [Σ_k, 0])."""
    hmm = HMM.random(3, 6, random_state=1)
    acc = accumulate(hmm.sample(20000, random_state=2), 6)
    spec = SpectralEstimator(rank=2).fit(acc)
    est = MEstimator(rank=2, weighting="diagonal", max_outer=3)
    model = est.fit(acc)
    assert len(est.loss_history_) >= 2  # the weighting was re-estimated...
    np.testing.assert_allclose(model.B, spec.B, rtol=0, atol=1e-10 * np.abs(spec.B).max())  # ...to no effect


@pytest.mark.parametrize("weighting", ["identity", "diagonal", "per_symbol"])
@pytest.mark.parametrize("seed", range(3))
def test_proposition_1_at_full_rank_for_every_weighting(weighting, seed):
    hmm = HMM.random(4, 5, random_state=seed)
    acc = accumulate(hmm.sample(3000, random_state=seed), 5)
    spec = SpectralEstimator(rank=5).fit(acc)
    model = MEstimator(rank=5, weighting=weighting, shrinkage=0.0, max_outer=4).fit(acc)
    seqs = np.random.default_rng(seed).integers(0, 5, size=(100, 5))
    a, b = spec.joint_proba_many(seqs), model.joint_proba_many(seqs)
    assert np.abs(a - b).max() <= 1e-8 * np.abs(a).max()


def test_default_is_consistent():
    hmm = HMM.random(3, 4, random_state=3)
    seq = hmm.sample(10**6, random_state=4)
    seqs = hmm.sample_many(200, 4, random_state=5)
    errors = []
    for N in (10**4, 10**5, 10**6):
        est = MEstimator(rank=3)
        errors.append(joint_error(est.fit(accumulate(seq[:N], 4)), hmm, seqs))
        assert est.formulation_ == "projected" and est.weighting == "per_symbol"
    assert errors[2] < errors[1] < errors[0]
    assert errors[2] < 0.05 and errors[2] < errors[0] / 3


def _brute_force_weighting(seq, n, U, Q, B0, shrink):
    """Σ_x from its definition, one sample at a time, shrunk; with A_x and M (no ridge)."""
    k, kp = U.shape[1], Q.shape[1]
    N = len(seq) - 2
    A = np.zeros((n, k, kp))
    M = np.zeros((k, kp))
    Sig = np.zeros((n, kp, kp))
    for t in range(N):
        x1, x2, x3 = seq[t], seq[t + 1], seq[t + 2]
        q = Q[x1]
        A[x2] += np.outer(U[x3], q) / N
        M += np.outer(U[x2], q) / N
        r = U[x3] - B0[x2] @ U[x2]
        Sig[x2] += (r @ r) * np.outer(q, q) / N
    W = np.empty_like(Sig)
    for x in range(n):
        tau_x = np.trace(Sig[x]) / kp
        W[x] = np.linalg.inv((1 - shrink) * Sig[x] + shrink * tau_x * np.eye(kp))
    return A, M, W


def test_gls_solution_satisfies_its_normal_equations_and_beats_theta_spec():
    n = 5
    hmm = HMM.random(3, n, random_state=11)
    seq = hmm.sample(4000, random_state=12)
    acc = accumulate(seq, n)
    spec = SpectralEstimator(rank=2).fit(acc)
    est = MEstimator(rank=2, weighting="per_symbol", n_conditions=4, shrinkage=0.3, ridge=0.0,
                     max_outer=2)
    model = est.fit(acc)
    assert [len(h) for h in est.loss_history_] == [1, 2]  # W = I, then one GLS step
    U, Q = est.basis_
    A, M, W = _brute_force_weighting(seq, n, U, Q, spec.B, 0.3)  # W at θ_spec's operators

    def gradient(B):
        return np.stack([(A[x] - B[x] @ M) @ W[x] @ M.T for x in range(n)])

    def objective(B):
        return sum(np.trace((A[x] - B[x] @ M) @ W[x] @ (A[x] - B[x] @ M).T) for x in range(n))

    g_spec = np.abs(gradient(spec.B)).max()
    assert g_spec > 1e-3 * np.abs(A).max()  # θ_spec is not the weighted solution
    assert np.abs(gradient(model.B)).max() <= 1e-9 * g_spec
    assert np.abs(model.B - spec.B).max() > 1e-3 * np.abs(spec.B).max()
    assert objective(model.B) < objective(spec.B)


def test_warm_start_reaches_the_same_solution_in_fewer_outer_iterations():
    hmm = HMM.random(4, 8, random_state=21)
    seq = hmm.sample(60000, random_state=22)
    kw = dict(rank=3, max_outer=50, tol=1e-9, backoff=None)  # the M-step mechanics alone
    cold = MEstimator(**kw)
    cold_model = cold.fit(accumulate(seq, 8))
    assert len(cold.loss_history_) < 50 and cold.rejected_ == []
    half = MEstimator(**kw).fit(accumulate(seq[:30000], 8))
    warm = MEstimator(**kw)
    model = warm.fit(accumulate(seq, 8), init=half)
    assert len(warm.loss_history_) < len(cold.loss_history_)
    np.testing.assert_allclose(model.B, cold_model.B, atol=1e-6 * np.abs(cold_model.B).max())
    assert abs(warm.factors_.loss - cold.factors_.loss) <= 1e-6 * cold.factors_.loss
    # from the solution itself: one step, and a fixed point
    again = MEstimator(**kw)
    again.fit(accumulate(seq, 8), init=cold_model)
    assert len(again.loss_history_) == 1


def test_a_warm_starts_first_convergence_test_over_blocks_of_symbols(monkeypatch):
    """The first test of a warm start compares every symbol's operators a block of rows at a
    time (no n·k² copies): with blocks of 3 symbols of 8 it must still see that the solution is
    a fixed point and that half the data's solution is not."""
    import streamspec.core.projected as projected

    monkeypatch.setattr(projected, "ROW_BLOCK", 3)
    hmm = HMM.random(4, 8, random_state=21)
    seq = hmm.sample(60000, random_state=22)
    kw = dict(rank=3, max_outer=50, tol=1e-9, backoff=None)
    cold = MEstimator(**kw)
    solution = cold.fit(accumulate(seq, 8))
    again = MEstimator(**kw)
    again.fit(accumulate(seq, 8), init=solution)
    assert len(again.loss_history_) == 1
    warm = MEstimator(**kw)
    model = warm.fit(accumulate(seq, 8), init=MEstimator(**kw).fit(accumulate(seq[:30000], 8)))
    assert 1 < len(warm.loss_history_) < len(cold.loss_history_)
    np.testing.assert_allclose(model.B, solution.B, atol=1e-6 * np.abs(solution.B).max())
    solution.factors.R[7] *= 1.01  # off the solution in the last block only
    moved = MEstimator(**kw)
    moved.fit(accumulate(seq, 8), init=solution)
    assert len(moved.loss_history_) > 1


def test_warm_start_on_a_grown_alphabet_and_through_a_checkpoint(tmp_path):
    from streamspec import ObservableOperatorModel

    hmm = HMM.random(3, 5, random_state=4)
    seq = hmm.sample(40000, random_state=5)
    first = MomentAccumulator()
    first.learn_many(seq[:20000][seq[:20000] < 4])  # symbol 4 not seen yet
    previous = MEstimator(rank=3, backoff=None).fit(first)
    assert previous.n_symbols == 4 and previous.factors.factorization == "projected"
    previous.save(tmp_path / "m.ckpt")
    loaded = ObservableOperatorModel.load(tmp_path / "m.ckpt")
    np.testing.assert_array_equal(loaded.factors.R, previous.factors.R)
    acc = MomentAccumulator()
    acc.learn_many(seq)
    warm = MEstimator(rank=3, max_outer=1, backoff=None)
    model = warm.fit(acc, init=loaded)
    assert model.n_symbols == 5
    assert [len(h) for h in warm.loss_history_] == [2]  # a GLS step at the previous operators
    cold = MEstimator(rank=3, backoff=None)
    cold.fit(acc)
    assert warm.factors_.loss <= cold.factors_.loss * 1.05


def test_a_rejected_iteration_is_recorded_and_the_previous_operators_kept(monkeypatch):
    import streamspec.core.projected as mest

    hmm = HMM.random(3, 6, random_state=1)
    acc = accumulate(hmm.sample(20000, random_state=2), 6)
    spec = SpectralEstimator(rank=2).fit(acc)
    real = mest.gls_operators
    calls = []

    def broken(A, M, Y):  # the weighted GLS step (the first, W = I, is θ_spec's closed form)
        calls.append(1)
        return real(A, M, Y) * np.nan

    monkeypatch.setattr(mest, "gls_operators", broken)
    est = MEstimator(rank=2, max_outer=3, backoff=None)  # one fit, not two
    model = est.fit(acc)
    assert calls and est.rejected_ == [1] and len(est.loss_history_) == 2
    assert np.isnan(est.loss_history_[1][1])
    np.testing.assert_allclose(model.B, spec.B, atol=1e-12)


def test_backoff_auto_fits_through_fit_with_backoff():
    pytest.importorskip("streamspec.core.backoff")
    n = 300
    seq = zipf_hmm(5, n, random_state=3).sample(30000, random_state=4)
    t = triples_of_sequence(seq[:-5000], n)
    plain = MEstimator(rank=5, backoff=None).fit(t)
    mixed = MEstimator(rank=5).fit(t)
    assert mixed.log_loss([seq[-5000:]]) < plain.log_loss([seq[-5000:]])


def test_dense_formulation_refuses_large_alphabets_and_projected_refuses_dense_options():
    rng = np.random.default_rng(0)
    t = Triples.from_arrays(300, *rng.integers(0, 300, size=(3, 5000)))
    with pytest.raises(ValueError, match=r"would need about .* GiB.*formulation='projected'"):
        MEstimator(rank=10, formulation="dense").fit(t)
    with pytest.raises(ValueError, match="would need about"):
        MEstimator(rank=10, weighting="exact").fit(t)  # "exact" selects the dense formulation
    for kw, what in ((dict(penalty=0.1), "penalty"), (dict(weighting="exact"), "exact"),
                     (dict(factorization="shared"), "shared")):
        with pytest.raises(ValueError, match=f"{what}.*formulation='dense'"):
            MEstimator(rank=2, formulation="projected", **kw).fit(t)
    for kw, what in ((dict(formulation="sparse"), "formulation"), (dict(n_conditions=0), "n_conditions"),
                     (dict(backoff="always"), "backoff")):
        with pytest.raises(ValueError, match=what):
            MEstimator(rank=2, **kw).fit(t)
    model = MEstimator(rank=10).fit(t)  # the projected default fits it
    assert model.B.shape == (300, 10, 10)


def test_default_fits_five_thousand_symbols_under_two_gigabytes():
    script = textwrap.dedent(
        """
        import resource, sys, time
        resource.setrlimit(resource.RLIMIT_AS, (2 * 2**30, 2 * 2**30))
        sys.path.insert(0, sys.argv[1])
        import numpy as np
        from test_mestimator_projected import zipf_hmm, triples_of_sequence
        from streamspec import MEstimator
        n = 5000
        seq = zipf_hmm(10, n, random_state=0).sample(10**5, random_state=1)
        t = triples_of_sequence(seq, n)
        est = MEstimator(rank=10)
        t0 = time.perf_counter()
        model = est.fit(t)
        p = model.predict_proba_next(seq[-5:])
        assert est.formulation_ == "projected" and model.B.shape == (n, 10, 10)
        assert abs(p.sum() - 1) < 1e-9
        print("ok", round(time.perf_counter() - t0, 2), est.weighting, len(est.loss_history_))
        """
    )
    env = dict(os.environ, OPENBLAS_NUM_THREADS="2", OMP_NUM_THREADS="2")
    here = os.path.dirname(os.path.abspath(__file__))
    out = subprocess.run([sys.executable, "-c", script, here], capture_output=True, text=True, env=env,
                         timeout=600, cwd=os.path.dirname(os.path.dirname(here)))
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.startswith("ok"), out.stdout


# ---------------------------------------------------------------------------
# measurements behind the defaults (not a test): python tests/core/test_mestimator_projected.py --bench
# ---------------------------------------------------------------------------


def _alice_letters() -> np.ndarray:
    from streamspec.experiments.datasets import load_alice_letters

    return np.frombuffer(load_alice_letters().encode("ascii"), dtype=np.uint8).astype(np.int64) - ord("a")


def _bench_case(name, n, train, test, estimators, rank=10):
    rows = []
    data = triples_of_sequence(train, n)
    for label, make in estimators:
        est = make(rank)
        arg = data
        if getattr(est, "formulation", "") == "dense":
            arg = data.to_dense()
        t0 = time.perf_counter()
        model = est.fit(arg)
        seconds = time.perf_counter() - t0
        loss = model.log_loss([test])
        rows.append({"case": name, "n": n, "N": len(train), "estimator": label,
                     "seconds": round(seconds, 3), "log_loss": round(loss, 4)})
        print(json.dumps(rows[-1]), flush=True)
    return rows


def bench() -> list:
    """Rows of held-out log loss and fit time; the plain estimators first, then the defaults."""
    projected = [
        ("theta_spec = projected identity", lambda k: MEstimator(rank=k, weighting="identity", backoff=None)),
        ("projected diagonal", lambda k: MEstimator(rank=k, weighting="diagonal", backoff=None)),
        ("projected per_symbol", lambda k: MEstimator(rank=k, weighting="per_symbol", backoff=None)),
        ("projected per_symbol, k'=3k", lambda k: MEstimator(rank=k, n_conditions=3 * k, backoff=None)),
        ("SpectralEstimator() default (backoff)", lambda k: SpectralEstimator(rank=k)),
        ("MEstimator() default (backoff)", lambda k: MEstimator(rank=k)),
    ]
    small = [
        ("SpectralEstimator, no backoff", lambda k: SpectralEstimator(rank=k, backoff=None)),
        ("dense per_symbol (old default)",
         lambda k: MEstimator(rank=k, weighting="per_symbol", formulation="dense", backoff=None)),
        ("dense identity",
         lambda k: MEstimator(rank=k, weighting="identity", formulation="dense", backoff=None)),
    ] + projected
    rows = []
    letters = _alice_letters()
    rows += _bench_case("alice letters", 26, letters[:-20000], letters[-20000:], small)
    hmm = HMM.random(5, 26, random_state=0)
    seq = hmm.sample(10**5 + 20000, random_state=1)
    rows += _bench_case("random HMM m=5", 26, seq[:10**5], seq[10**5:], small)
    for n in (1000, 20000):
        hmm = zipf_hmm(10, n, random_state=n)
        seq = hmm.sample(10**5 + 20000, random_state=n + 1)
        for N in (10**4, 10**5):
            rows += _bench_case(f"Zipf HMM m=10 n={n}", n, seq[:N], seq[-20000:], projected)
    return rows


if __name__ == "__main__":
    if "--bench" in sys.argv:
        bench()


def test_every_form_of_the_inverse_weighting_equals_the_dense_inverse():
    """Σ_x⁻¹ as the estimator applies it (scale, Woodbury for rare symbols, dense for
    frequent ones) equals the inverse of the dense Σ_x, symbol by symbol."""
    from streamspec.core.projected import sigma_groups as _sigma_groups
    from streamspec.core.projected_weighting import projected_weighting
    from streamspec.core.subspace import top_singular

    rng = np.random.default_rng(3)
    n, k, kp = 60, 3, 8
    # a Zipf-like stream: a few frequent symbols (dense Σ_x), many rare ones (low rank),
    # and symbols never in the middle of a triple (Σ_x = c I)
    x = np.minimum(rng.zipf(1.6, 4000) - 1, n - 5)
    t = Triples.from_arrays(n, x[:-2], x[1:-1], x[2:])
    U, _, Q = top_singular(t.P21(), kp)
    U = U[:, :k]
    B = rng.normal(scale=0.1, size=(n, k, k))
    W = projected_weighting("per_symbol", t, U, Q, B, shrinkage=0.3, ridge=1e-6)
    kinds = set()
    R = rng.normal(size=(n, kp, 2))
    seen = np.zeros(n, dtype=bool)
    for g, inverse in _sigma_groups(W, np.arange(n), kp):
        kinds.add(inverse.kind)
        got = inverse.apply(R[g])
        want = np.linalg.solve(W.factor_of(g), R[g])
        np.testing.assert_allclose(got, want, rtol=1e-8, atol=1e-10)
        assert not seen[g].any()
        seen[g] = True
    assert seen.all()
    assert {"scale", "woodbury", "dense"} <= kinds


def test_large_problem_path_weighs_only_frequent_symbols_and_gives_the_same_operators(monkeypatch):
    """On large problems only the symbols whose shrinkage is below 1 get their k × k'
    conditions; the others keep θ_spec's operators in closed form. Both paths must give
    the same operators (the rare symbols' weighting is τ_x I there too)."""
    import streamspec.core.projected as mest

    rng = np.random.default_rng(5)
    n = 400
    x = np.minimum(rng.zipf(1.3, 20_000) - 1, n - 1)
    t = Triples.from_arrays(n, x[:-2], x[1:-1], x[2:])
    full = MEstimator(rank=10, backoff=None).fit(t)
    monkeypatch.setattr(mest, "_FULL_CONDITIONS_MAX", 0)
    est = MEstimator(rank=10, backoff=None)
    part = est.fit(t)
    spec = SpectralEstimator(rank=10, backoff=None).fit(t)
    n_middle = np.bincount(t.x2, weights=t.weights, minlength=n)
    weighted = n_middle >= 20**2 / 100 * 10  # well inside the weighted set (k' = 20)
    rare = n_middle < 20**2 / 100 * 0.5
    assert 0 < weighted.sum() < n // 4 and rare.sum() > n // 10
    np.testing.assert_allclose(part.B, full.B, rtol=1e-8, atol=1e-12)
    # the weighting really acted on the frequent symbols, and only on them
    assert np.abs(part.B[weighted] - spec.B[weighted]).max() > 1e-6
    np.testing.assert_allclose(part.B[rare], spec.B[rare], rtol=1e-8, atol=1e-12)


def test_the_backoff_keeps_theta_m_itself_as_its_model():
    """With the default backoff, the model component is θ_M fitted on all the counts (the
    mixture weighs it; no θ_spec candidate replaces it)."""
    x = HMM.random(3, 40, random_state=1).sample(30_000, random_state=2)
    t = Triples.from_arrays(40, x[:-2], x[1:-1], x[2:])
    model = MEstimator(rank=3).fit(t)
    plain = MEstimator(rank=3, backoff=None).fit(t)
    spec = SpectralEstimator(rank=3, backoff=None).fit(t)
    np.testing.assert_allclose(model.B, plain.B, atol=1e-10)
    assert np.abs(model.B - spec.B).max() > 1e-4 and model.factors is not None
