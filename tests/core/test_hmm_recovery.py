"""Recovering an HMM from triple counts (HMMEstimator) and inference with it (HiddenMarkovModel)."""

from __future__ import annotations

import itertools
import time

import numpy as np
import pytest

from streamspec.core.checkpoint import CheckpointError
from streamspec.core.hidden_markov_model import HiddenMarkovModel
from streamspec.core.hmm import HMM
from streamspec.core.hmm_estimator import HMMEstimator, exact_triples, moment_estimate, triple_log_likelihood
from streamspec.core.symbol_input import UnknownSymbolsWarning
from streamspec.core.triples import Triples
from streamspec.streaming.accumulator import MomentAccumulator


def sticky_hmm(m=3, n=6, stay=0.85, seed=0) -> HMM:
    """A well-conditioned HMM: sticky transitions, each state favouring its own symbols."""
    rng = np.random.default_rng(seed)
    T = np.full((m, m), (1 - stay) / (m - 1)) + np.eye(m) * (stay - (1 - stay) / (m - 1))
    O = rng.dirichlet(np.full(n, 0.3), size=m).T * 0.3
    for h in range(m):
        O[h::m, h] += 0.7 / len(range(h, n, m))
    O /= O.sum(axis=0, keepdims=True)
    return HMM(T, O)


def stream_triples(seq, n) -> Triples:
    seq = np.asarray(seq)
    return Triples.from_arrays(n, seq[:-2], seq[1:-1], seq[2:])


def match(truth: HMM, model: HiddenMarkovModel) -> tuple[float, float, np.ndarray]:
    """Emission and transition errors after matching states (``errors_against``)."""
    return model.errors_against(truth)


# ---------------------------------------------------------------------- method of moments


@pytest.mark.parametrize("m,n,seed", [(3, 6, 0), (4, 8, 1), (4, 4, 2)])
def test_moments_exact_on_population_triples(m, n, seed):
    truth = sticky_hmm(m, n, stay=0.7, seed=seed) if seed != 2 else HMM.random(m, n, random_state=3)
    triples = exact_triples(truth)
    model = HMMEstimator(n_states=m, n_iter=0, random_state=seed).fit(triples)
    eO, eT, perm = match(truth, model)
    assert eO < 1e-8 and eT < 1e-8
    assert np.abs(model.startprob_[perm] - truth.pi).max() < 1e-8


def test_moments_exact_from_dense_scaled_counts():
    truth = sticky_hmm(3, 5, seed=3)
    c3 = exact_triples(truth).to_dense()  # c3[x2, x3, x1], scaled by 1e12
    pi, T, O = moment_estimate(Triples.from_dense(c3), 3, random_state=0)
    model = HiddenMarkovModel(pi, T.T, O.T)
    eO, eT, _ = match(truth, model)
    assert eO < 1e-8 and eT < 1e-8


def test_consistency_errors_shrink_with_n():
    truth = sticky_hmm(3, 6, stay=0.85, seed=4)
    seq = truth.sample(1_000_000, random_state=5)
    errs = {}
    for N in (10_000, 1_000_000):
        for n_iter in (0, 50):
            model = HMMEstimator(n_states=3, n_iter=n_iter, random_state=0).fit(stream_triples(seq[:N], 6))
            errs[N, n_iter] = match(truth, model)[:2]
    for n_iter in (0, 50):
        small, large = errs[10_000, n_iter], errs[1_000_000, n_iter]
        assert large[0] < 0.5 * small[0], (n_iter, errs)
        assert large[1] < 0.5 * small[1], (n_iter, errs)
        assert large[0] < 0.03 and large[1] < 0.03, (n_iter, errs)


# ---------------------------------------------------------------------- refinement


def test_refinement_is_monotone_and_not_a_no_op():
    truth = sticky_hmm(3, 6, seed=6)
    triples = stream_triples(truth.sample(200_000, random_state=1), 6)
    rng = np.random.default_rng(0)
    start = HiddenMarkovModel.from_hmm(truth)
    E = start.emissionprob_ + 0.3 * rng.random(start.emissionprob_.shape)
    A = start.transmat_ + 0.3 * rng.random(start.transmat_.shape)
    start = HiddenMarkovModel(start.startprob_, A / A.sum(1, keepdims=True), E / E.sum(1, keepdims=True))
    est = HMMEstimator(n_states=3, n_iter=60, tol=0.0, random_state=0)
    model = est.fit(triples, init=start)
    ll = np.array(est.log_likelihood_history_)
    assert est.start_ == "warm" and len(ll) == 21  # 60 E-steps: 20 SQUAREM cycles of three
    assert (np.diff(ll) >= -1e-12).all()
    assert ll[-1] > ll[0] + 1e-3
    assert np.allclose(est.loss_history_, -ll)
    assert ll[-1] == pytest.approx(triple_log_likelihood(triples, model), abs=1e-12)
    before, after = match(truth, start), match(truth, model)
    assert after[0] < 0.5 * before[0] and after[1] < 0.5 * before[1]


def test_refinement_monotone_from_moments_and_restarts_pick_best():
    truth = HMM.random(4, 10, random_state=3)
    triples = stream_triples(truth.sample(50_000, random_state=2), 10)
    one = HMMEstimator(n_states=4, n_iter=30, tol=0.0, random_state=0)
    one.fit(triples)
    assert (np.diff(one.log_likelihood_history_) >= -1e-12).all()
    many = HMMEstimator(n_states=4, n_iter=30, tol=0.0, n_restarts=3, random_state=0)
    many.fit(triples)
    assert many.log_likelihood_history_[-1] >= one.log_likelihood_history_[-1] - 1e-12
    again = HMMEstimator(n_states=4, n_iter=30, tol=0.0, n_restarts=3, random_state=0).fit(triples)
    assert again == many.model_  # seeded


def test_random_init_and_warm_start_on_grown_alphabet():
    truth = sticky_hmm(3, 6, seed=8)
    seq = truth.sample(60_000, random_state=3)
    acc = MomentAccumulator()
    acc.learn_many([f"s{x}" for x in seq[:30_000] if x < 5])  # symbol s5 not seen yet
    first = HMMEstimator(n_states=3, init="random", random_state=1).fit(acc)
    assert first.n_symbols == 5 and set(first.symbols) == {f"s{i}" for i in range(5)}
    acc.learn_many([f"s{x}" for x in seq[30_000:]])
    est = HMMEstimator(n_states=3, n_iter=20, random_state=1)
    second = est.fit(acc, init=first)
    assert second.n_symbols == 6 and est.start_ == "warm"
    assert second.emissionprob_[:, second.symbols.index("s5")].sum() > 0.01  # learnt from the pad
    assert (np.diff(est.log_likelihood_history_) >= -1e-12).all()


# ---------------------------------------------------------------------- inference vs brute force


def _paths(model: HiddenMarkovModel, x):
    """Joint probability of every state path with the sequence x."""
    m = model.n_states
    for path in itertools.product(range(m), repeat=len(x)):
        p = model.startprob_[path[0]] * model.emissionprob_[path[0], x[0]]
        for t in range(1, len(x)):
            p *= model.transmat_[path[t - 1], path[t]] * model.emissionprob_[path[t], x[t]]
        yield path, p


def path_log_prob(model: HiddenMarkovModel, x, path) -> float:
    lp = np.log(model.startprob_[path[0]] * model.emissionprob_[path[0], x[0]])
    for t in range(1, len(x)):
        lp += np.log(model.transmat_[path[t - 1], path[t]] * model.emissionprob_[path[t], x[t]])
    return float(lp)


@pytest.fixture
def small_model():
    truth = HMM.random(3, 4, random_state=11)
    truth.pi = np.array([0.2, 0.5, 0.3])
    return HiddenMarkovModel.from_hmm(truth)


@pytest.mark.parametrize("x", [[0], [1, 3], [0, 2, 2, 1, 3], [3, 3, 0, 1, 1, 2]])
def test_inference_equals_brute_force(small_model, x):
    model = small_model
    paths = list(_paths(model, x))
    total = sum(p for _, p in paths)
    assert model.score(x) == pytest.approx(np.log(total), rel=1e-12)
    best_p = max(p for _, p in paths)
    logp, path = model.decode(x)
    assert logp == pytest.approx(np.log(best_p), rel=1e-12)
    assert path_log_prob(model, x, path) == pytest.approx(np.log(best_p), rel=1e-12)
    best = [p_ for p_, p in paths if p >= best_p * (1 - 1e-12)]
    if len(best) == 1:  # ties (e.g. swapped states under repeated symbols) may break either way
        assert path.tolist() == list(best[0])
    assert (model.predict(x) == path).all()
    marg = np.zeros((len(x), model.n_states))
    for p_, p in paths:
        marg[np.arange(len(x)), p_] += p
    gamma = model.predict_proba(x)
    assert np.allclose(gamma.sum(axis=1), 1.0)
    assert np.allclose(gamma, marg / total, atol=1e-12)
    filt = model.filter(x)
    for t in range(len(x)):
        prefix = list(_paths(model, x[: t + 1]))
        f = np.zeros(model.n_states)
        for p_, p in prefix:
            f[p_[-1]] += p
        assert np.allclose(filt[t], f / f.sum(), atol=1e-12)
    # next symbol: Pr(x, y) / Pr(x)
    nxt = model.predict_proba_next(x)
    expect = [np.exp(model.score(list(x) + [y]) - model.score(x)) for y in range(model.n_symbols)]
    assert np.allclose(nxt, expect, atol=1e-12) and nxt.sum() == pytest.approx(1.0)


def test_score_long_sequence_does_not_underflow(small_model):
    x, states = small_model.sample(20_000, random_state=0)
    s = small_model.score(x)
    assert np.isfinite(s) and s < -1000
    assert len(states) == 20_000 and states.max() < 3
    assert np.isfinite(small_model.decode(x)[0])


def test_sample_follows_the_model(small_model):
    x, states = small_model.sample(200_000, random_state=1)
    freq = np.bincount(states, minlength=3) / states.size
    assert np.abs(freq - small_model.stationary()).max() < 0.01
    joint = np.zeros((3, 4))
    np.add.at(joint, (states, x), 1)
    emis = joint / joint.sum(axis=1, keepdims=True)
    assert np.abs(emis - small_model.emissionprob_).max() < 0.01


def test_labels_and_unknown_label():
    acc = MomentAccumulator()
    acc.learn_many(list("abracadabra" * 50))
    model = HMMEstimator(n_states=2, random_state=0).fit(acc)
    assert model.symbols == acc.symbols
    assert np.isfinite(model.score(list("abra")))
    assert model.predict_proba_next(list("abr")).shape == (model.n_symbols,)
    # an unknown label is taken as unobserved (issue 20): warned about, never an error
    with pytest.warns(UnknownSymbolsWarning, match="1 unknown symbol.*'z'"):
        assert model.score(list("abz")) == pytest.approx(model.score(list("ab")))
    sampled, _ = model.sample(10, random_state=0)
    assert set(sampled) <= set(acc.symbols) and np.isfinite(model.score(sampled))
    unlabelled = HiddenMarkovModel(model.startprob_, model.transmat_, model.emissionprob_)
    with pytest.raises(ValueError, match="unknown symbol 9"):
        unlabelled.score([0, 9])


# ---------------------------------------------------------------------- hmmlearn and checkpoints


def test_hmmlearn_agrees_and_round_trips(small_model):
    pytest.importorskip("hmmlearn")
    h = small_model.to_hmmlearn()
    x, _ = small_model.sample(300, random_state=2)
    X = x.reshape(-1, 1)
    assert h.score(X) == pytest.approx(small_model.score(x), rel=1e-10)
    lp, path = h.decode(X, algorithm="viterbi")
    ours = small_model.decode(x)
    assert lp == pytest.approx(ours[0], rel=1e-10)
    # both paths are optimal (ties may break differently) and mostly identical
    assert path_log_prob(small_model, x, path) == pytest.approx(ours[0], rel=1e-10)
    assert (path == ours[1]).mean() > 0.9
    assert np.allclose(h.predict_proba(X), small_model.predict_proba(x), atol=1e-10)
    back = HiddenMarkovModel.from_hmmlearn(h)
    assert back == small_model


def test_save_load_round_trip_and_corruption(tmp_path, small_model):
    labelled = HiddenMarkovModel(small_model.startprob_, small_model.transmat_, small_model.emissionprob_,
                                 symbols=["a", 2, ("t", 1), b"z"])
    for model in (small_model, labelled):
        path = tmp_path / "hmm.npz"
        model.save(path)
        back = HiddenMarkovModel.load(path)
        assert back == model and back.symbols == model.symbols
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    bad = tmp_path / "bad.npz"
    bad.write_bytes(bytes(data))
    with pytest.raises(CheckpointError):
        HiddenMarkovModel.load(bad)
    with pytest.raises(CheckpointError):
        HiddenMarkovModel.load(tmp_path / "missing.npz")


# ---------------------------------------------------------------------- bad input


def test_bad_input():
    triples = Triples.from_arrays(3, x1=[0, 1], x2=[1, 2], x3=[2, 0])
    with pytest.raises(ValueError, match="larger than the alphabet"):
        HMMEstimator(n_states=4).fit(triples)
    with pytest.raises(ValueError, match="empty counts"):
        HMMEstimator(n_states=2).fit(Triples.empty(3))
    with pytest.raises(ValueError, match="empty counts"):
        HMMEstimator(n_states=1).fit(MomentAccumulator(n_symbols=3))
    with pytest.raises(ValueError, match="init must be"):
        HMMEstimator(n_states=2, init="kmeans").fit(triples)
    with pytest.raises(ValueError, match="n_states must be"):
        HMMEstimator(n_states=0).fit(triples)
    with pytest.raises(TypeError):
        HMMEstimator(2)  # keyword-only
    with pytest.raises(ValueError, match="rows of transmat"):
        HiddenMarkovModel([1.0, 0.0], [[0.5, 0.6], [0.5, 0.5]], [[1.0], [1.0]])


# ---------------------------------------------------------------------- large alphabets


def test_large_alphabet_is_fast_and_sparse():
    rng = np.random.default_rng(0)
    m, n = 5, 6000
    # each state emits mostly from its own block of symbols
    O = rng.dirichlet(np.full(n, 0.05), size=m).T * 0.2
    for h in range(m):
        O[h * (n // m):(h + 1) * (n // m), h] += 0.8 / (n // m)
    O /= O.sum(axis=0, keepdims=True)
    T = np.full((m, m), 0.1 / (m - 1)) + np.eye(m) * (0.9 - 0.1 / (m - 1))
    truth = HMM(T, O)
    seq = truth.sample(200_000, random_state=1)
    assert np.unique(seq).size >= 5000
    triples = stream_triples(seq, n)
    t0 = time.perf_counter()
    est = HMMEstimator(n_states=m, random_state=0)
    model = est.fit(triples)
    elapsed = time.perf_counter() - t0
    assert elapsed < 60, elapsed
    assert model.emissionprob_.shape == (m, n)
    eO, eT, _ = match(truth, model)
    assert eO < 0.25 and eT < 0.1, (eO, eT)
    # the moments alone (η = U3 θ: a random η over 6000 symbols mixes the states up, eT ~ 0.5)
    t0 = time.perf_counter()
    moments = HMMEstimator(n_states=m, n_iter=0, random_state=0).fit(triples)
    assert time.perf_counter() - t0 < 20
    eO, eT, _ = match(truth, moments)
    assert eO < 0.25 and eT < 0.1, (eO, eT)


def test_moment_step_returns_distinct_states_on_a_sticky_hmm():
    """Under noise, close eigenvalues turn into complex-conjugate pairs whose real parts
    are one state twice, which no EM can separate: the η choice avoids them and copies
    that remain are split."""
    m, n = 10, 50
    rng = np.random.default_rng(1050)
    T = np.full((m, m), 0.1 / (m - 1)) + np.eye(m) * (0.9 - 0.1 / (m - 1))
    truth = HMM(T, rng.dirichlet(np.full(n, 0.5), size=m).T)
    x = truth.sample(100_000, random_state=1)
    t = Triples.from_arrays(n, x[:-2], x[1:-1], x[2:])
    for n_iter in (0, 50):
        O = HMMEstimator(n_states=m, n_iter=n_iter, random_state=0).fit(t).emissionprob_
        closest = min(np.abs(O[i] - O[j]).sum() for i in range(m) for j in range(i))
        assert closest > 0.05, f"two states emit alike (n_iter={n_iter}): {closest:.2e}"


def test_errors_against_matches_states_and_measures_the_worst_error():
    truth = HiddenMarkovModel([0.5, 0.3, 0.2], [[0.8, 0.1, 0.1], [0.2, 0.7, 0.1], [0.3, 0.3, 0.4]],
                              [[0.7, 0.2, 0.1], [0.1, 0.8, 0.1], [0.1, 0.1, 0.8]])
    order = np.array([2, 0, 1])  # model state j is truth state order[j]
    O = truth.emissionprob_[order].copy()
    O[0] = [0.2, 0.1, 0.7]  # truth state 2, off by 0.1 in total variation
    T = truth.transmat_[np.ix_(order, order)].copy()
    T[1, 1] += 0.05  # truth 0 -> 0
    T[1, 2] -= 0.05
    model = HiddenMarkovModel(truth.startprob_[order], T, O)
    e_o, e_t, perm = model.errors_against(truth)
    assert perm.tolist() == [1, 2, 0]  # the model's state for each truth state
    assert e_o == pytest.approx(0.1) and e_t == pytest.approx(0.05)
    assert model.errors_against(truth.to_hmm())[:2] == (e_o, e_t)  # an HMM works too
    with pytest.raises(ValueError, match="states cannot be matched"):
        model.errors_against(HiddenMarkovModel([1.0], [[1.0]], [[0.2, 0.3, 0.5]]))


def test_equal_emission_columns_are_split_and_distinct_ones_kept():
    from streamspec.core.hmm_moments import _split_duplicates  # moved with the method of moments

    O = np.array([[0.5, 0.5, 0.1], [0.3, 0.3, 0.1], [0.2, 0.2, 0.8]])  # states 0 and 1 equal
    out = _split_duplicates(O, np.random.default_rng(0))
    np.testing.assert_array_equal(out[:, [0, 2]], O[:, [0, 2]])  # the first copy and others kept
    assert np.abs(out[:, 1] - out[:, 0]).sum() > 0.05  # the copy is pulled apart
    np.testing.assert_allclose(out.sum(axis=0), 1.0)
    assert (out > 0).all()
