"""More hidden states than symbols: window Hankel matrices, their one-step marginal, and
HMMEstimator over windows (docs/math.md section 11)."""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest

from streamspec import HMM, HiddenMarkovModel, HMMEstimator, MomentAccumulator
from streamspec.core.hmm_em import (
    _estep,
    _groups,
    _window_estep,
    refine_windows,
    window_log_likelihood,
)
from streamspec.core.hmm_moments import exact_triples, exact_windows
from streamspec.core.window_estep import GRAM_UNIT, GramMessages, estep_units
from streamspec.core.window_rank import choose_window, supported_rank, window_for_states
from streamspec.core.window_triples import WindowTriples
from streamspec.core.windows import WindowCounts


def more_states_than_symbols(m: int, n: int, seed: int) -> HMM:
    """A random HMM with m > n states: Dirichlet(1/2) columns, stationary start."""
    return HMM.random(m, n, random_state=seed, concentration=0.5)


def ring(m: int, n: int, seed: int, stay: float = 0.15) -> HMM:
    """m states in a cycle (each stays with probability ``stay``), random emissions over n
    symbols: well conditioned, and every state needs a window to be told apart."""
    rng = np.random.default_rng(seed)
    return HMM(stay * np.eye(m) + (1 - stay) * np.roll(np.eye(m), 1, axis=0),
               rng.dirichlet(np.full(n, 0.7), size=m).T)


def brute_joint(hmm: HMM, seq) -> float:
    """Pr(seq) from the stationary distribution, by the forward recursion."""
    a = hmm.pi * hmm.O[seq[0]]
    for x in seq[1:]:
        a = (hmm.T @ a) * hmm.O[x]
    return float(a.sum())


# ---------------------------------------------------------------------- the Hankel matrices


def test_window_hankel_and_its_one_step_marginal_equal_brute_force():
    truth = ring(5, 2, seed=0)
    L = 2
    wt = WindowTriples.of(exact_windows(truth, L, scale=1.0))
    H = wt.hankel().toarray()
    M = wt.one_step().toarray()
    for (w, wd), (p, pd) in itertools.product(enumerate(wt.windows), repeat=2):
        # H[w, p] = Pr(past p, then the window w starting at the symbol after it)
        assert H[w, p] == pytest.approx(brute_joint(truth, list(pd) + list(wd)), abs=1e-14)
    for x, (p, pd) in itertools.product(range(2), enumerate(wt.windows)):
        # (M H)[x, p] = Pr(past p, next symbol x): the one-step marginal of the future windows
        assert (M @ H)[x, p] == pytest.approx(brute_joint(truth, list(pd) + [x]), abs=1e-14)
    assert supported_rank(exact_windows(truth, 1)) == 2  # one symbol: rank n < m
    assert supported_rank(exact_windows(truth, 3)) == 5  # three: every state


def test_at_window_one_the_hankel_is_p21_to_the_last_bit():
    acc = MomentAccumulator(5, window=1)
    acc.learn_many(np.random.default_rng(0).integers(0, 5, 3000))
    t = acc.triples()
    wt = WindowTriples.of(acc.windows())
    assert wt.triples == t and wt.n_windows == 5
    assert np.array_equal(wt.hankel().toarray(), t.P21().toarray())
    assert np.array_equal(wt.past_marginal(), t.P1())
    assert np.array_equal(wt.one_step().toarray(), np.eye(5)) and np.array_equal(wt.current, t.x2)


def test_window_operators_predict_like_the_hmm_filter():
    """B_x = P3x1[x] H⁺ on window space, b1 = H 1, next-symbol distribution M b: the forward
    filter of the HMM exactly, with 5 states over 2 symbols (section 11)."""
    truth = ring(5, 2, seed=1)
    wt = WindowTriples.of(exact_windows(truth, 3, scale=1.0))
    H, M, t = wt.hankel().toarray(), wt.one_step().toarray(), wt.triples
    P3x1 = np.zeros((2, wt.size, wt.size))
    np.add.at(P3x1, (t.x2, t.x3, t.x1), t.weights / t.total)
    Hinv = np.linalg.pinv(H, rcond=1e-10)
    B = np.einsum("xij,jk->xik", P3x1, Hinv)
    rng = np.random.default_rng(0)
    for _ in range(5):
        history = rng.integers(0, 2, 12)
        b = H.sum(axis=1)  # Pr(window starting now): the state before any symbol
        a = truth.pi.copy()  # the HMM's predictive state distribution
        for x in history:
            predicted = M @ b
            expected = truth.O @ a
            np.testing.assert_allclose(predicted, expected, atol=1e-9)
            # b∞ = 1 gives the same: 1ᵀ B_x b = (M b)[x]
            np.testing.assert_allclose([B[y].sum(axis=0) @ b for y in range(2)], expected, atol=1e-9)
            b = B[x] @ b / predicted[x]
            a = truth.T @ (a * truth.O[x]) / expected[x]


def test_choose_window_takes_the_shortest_with_all_the_rank():
    truth = ring(5, 2, seed=0)
    g = exact_windows(truth, 4)
    assert choose_window(g) == 3 and window_for_states(g, 5) == 3 and window_for_states(g, 2) == 1
    assert choose_window(exact_windows(HMM.random(2, 4, random_state=0), 3)) == 1
    triples = WindowCounts.from_triples(exact_triples(truth))
    assert choose_window(triples) == 1 and window_for_states(triples, 5) == 1  # no SVD either


# ---------------------------------------------------------------------- recovery


@pytest.mark.parametrize("m,n,L,seed", [(6, 3, 2, 0), (8, 4, 2, 1), (8, 2, 3, 2), (10, 3, 3, 3),
                                        (5, 2, 3, 4)])
def test_exact_recovery_with_more_states_than_symbols(m, n, L, seed):
    truth = more_states_than_symbols(m, n, seed)
    est = HMMEstimator(n_states=m, n_iter=0, random_state=seed)
    model = est.fit(exact_windows(truth, L))
    eO, eT, perm = model.errors_against(truth)
    assert est.window_ == L
    assert eO < 1e-8 and eT < 1e-8
    assert np.abs(model.startprob_[perm] - truth.pi).max() < 1e-8


def test_states_beyond_the_alphabet_need_windows():
    seq = more_states_than_symbols(8, 4, 0).sample(5000, random_state=0)
    triples = MomentAccumulator(4, window=1)
    triples.learn_many(seq)
    with pytest.raises(ValueError, match="larger than the alphabet.*window"):
        HMMEstimator(n_states=8).fit(triples)
    windows = MomentAccumulator(4, window=2)
    windows.learn_many(seq)
    model = HMMEstimator(n_states=8, random_state=0).fit(windows)
    assert model.n_states == 8 and model.n_symbols == 4
    with pytest.raises(ValueError, match="window=3 needs counts of windows of 3"):
        HMMEstimator(n_states=8, window=3).fit(windows)
    with pytest.raises(ValueError, match="distinct windows"):
        HMMEstimator(n_states=17, window=2).fit(windows)
    with pytest.raises(ValueError, match="window must be"):
        HMMEstimator(n_states=2, window=0).fit(windows)


def test_consistency_as_the_sample_grows():
    truth = HMM(T=0.15 * np.eye(6) + 0.85 * np.roll(np.eye(6), 1, axis=0),
                O=[[0.8, 0.6, 0.3, 0.1, 0.2, 0.5], [0.1, 0.3, 0.1, 0.8, 0.3, 0.1],
                   [0.1, 0.1, 0.6, 0.1, 0.5, 0.4]])  # 6 states, 3 symbols
    seq = truth.sample(1_000_000, random_state=0)
    errors = {}
    for N in (10_000, 100_000, 1_000_000):
        acc = MomentAccumulator(3, window=3)  # moments over pairs, EM over 7-grams
        acc.learn_many(seq[:N])
        moments = HMMEstimator(n_states=6, n_iter=0, random_state=0).fit(acc)
        # why run to convergence: consistency is the converged estimator's property; stopped at
        # the default budget (30 E-steps here) its error at 10⁶ depended on the machine's
        # rounding (0.056 on one, below 0.03 on another), at convergence it is 0.013
        refined = HMMEstimator(n_states=6, n_iter=300, random_state=0).fit(acc)
        errors[N] = (max(moments.errors_against(truth)[:2]), max(refined.errors_against(truth)[:2]))
    assert errors[1_000_000][0] < errors[100_000][0] < errors[10_000][0]
    assert errors[1_000_000][1] < errors[10_000][1]
    assert errors[1_000_000][1] < 0.03


# ---------------------------------------------------------------------- EM over grams


def padded_grams(L: int, seed: int, n: int = 3) -> WindowCounts:
    rng = np.random.default_rng(seed)
    acc = MomentAccumulator(n, window=L)
    for k in range(40):
        acc.learn_many(rng.integers(0, n, rng.integers(1, 15)), key=k)
        if k % 3:
            acc.end(k)
    return acc.windows()


@pytest.mark.parametrize("L", [1, 2, 3])
def test_message_estep_equals_gram_by_gram_forward_backward(L):
    g = padded_grams(L, seed=L)
    rng = np.random.default_rng(0)
    m = 4
    pi, pi0 = rng.dirichlet(np.ones(m)), rng.dirichlet(np.ones(m))
    T, O = rng.dirichlet(np.ones(m), size=m).T, rng.dirichlet(np.ones(3), size=m).T
    fast, reference = GramMessages(g).estep(pi, pi0, T, O), _window_estep(_groups(g), pi, pi0, T, O)
    assert fast[0] == pytest.approx(reference[0], rel=1e-12)
    for a, b in zip(fast[1], reference[1], strict=True):
        np.testing.assert_allclose(a, b, atol=1e-13)
    # the gram log-likelihood, run by run with the HMM's own forward filter
    model = HiddenMarkovModel(pi, T.T, O.T)
    by_runs = sum(w * model.score(row[row >= 0]) for row, w in zip(g.digits(), g.weights, strict=True)
                  if (row[: L - 1] >= 0).all()) / g.total
    starts = sum(w * HiddenMarkovModel(pi0, T.T, O.T).score(row[row >= 0])
                 for row, w in zip(g.digits(), g.weights, strict=True) if not (row[: L - 1] >= 0).all())
    assert window_log_likelihood(g, model, pi0) == pytest.approx(by_runs + starts / g.total, rel=1e-12)
    if L == 1:  # no pads: the triple E-step
        t = g.triples()
        ll, (s_pi, s_T, s_O) = _estep(t, pi, T, O)
        assert fast[0] == pytest.approx(ll, rel=1e-12)
        for a, b in ((fast[1][0], s_pi), (fast[1][2], s_T), (fast[1][3], s_O)):
            np.testing.assert_allclose(a, b, atol=1e-13)


def test_em_flushes_vanishing_probabilities_to_zero():
    # EM drives unused entries to 0 geometrically; clipped at 1e-300 (as they were) they made
    # subnormal products, 10-100x slower, in every later E-step
    from streamspec.core.hmm_em import _normalised, _project

    counts = np.array([[1e-200, 3.0], [2.0, 1e-70], [2.0, 0.0]])
    new = _normalised(counts, np.full((3, 2), 1 / 3))
    assert new[0, 0] == 0.0 and new[1, 1] == 0.0 and new[1, 0] == 0.5
    np.testing.assert_allclose(new.sum(axis=0), 1.0)
    jumped = _project(np.array([[-0.2, 1e-90], [0.7, 0.3], [0.5, 0.7]]))  # an extrapolation
    assert (jumped[0] == 0.0).all() and np.allclose(jumped.sum(axis=0), 1.0)
    g = padded_grams(2, seed=5)
    rng = np.random.default_rng(2)
    T, O = rng.dirichlet(np.ones(4), size=4).T, rng.dirichlet(np.ones(3), size=4).T
    T[0, 1] = 1e-250  # a vanishing transition: gone after one iteration
    pi, pi0, T, O, history, _ = refine_windows(g, np.ones(4) / 4, np.ones(4) / 4, T, O, n_iter=3, tol=0.0)
    assert T[0, 1] == 0.0 and not ((T > 0) & (T < 1e-60)).any() and np.all(np.diff(history) >= -1e-12)


@pytest.mark.parametrize("L", [1, 2, 3])
def test_estep_units_count_the_messages_the_estep_passes(L):
    g = padded_grams(L, seed=20 + L)
    m = 12
    if L == 1:
        assert estep_units(g, m) == g.nnz * (m * m + GRAM_UNIT)
        return
    msg = GramMessages(g)
    P, F, Q = msg.past.shape[0], msg.future.shape[0], msg.pair_x.size
    assert estep_units(g, m) == (g.nnz + Q) * (m + GRAM_UNIT) + (P + F) * L * (m * m / 8 + GRAM_UNIT)
    # the passes are per distinct past and future, far fewer than the grams on 3 symbols
    assert P + F < g.nnz / 2
    assert estep_units(g, 64) < 0.2 * g.nnz * L * 64**2


@pytest.mark.parametrize("L", [2, 3])
def test_window_em_never_lowers_the_likelihood(L):
    g = padded_grams(L, seed=10 + L)
    rng = np.random.default_rng(1)
    m = 5
    pi = rng.dirichlet(np.ones(m))
    T, O = rng.dirichlet(np.ones(m), size=m).T, rng.dirichlet(np.ones(3), size=m).T
    *_, history, _ = refine_windows(g, pi, pi, T, O, n_iter=40, tol=0.0)
    assert np.all(np.diff(history) >= -1e-12)
    assert history[-1] > history[0] + 0.05  # and it is not a no-op


def test_window_em_learns_a_sticky_chain_better_than_triples():
    rng = np.random.default_rng(0)
    m, n = 3, 6
    T = np.full((m, m), 0.1 / (m - 1)) + np.eye(m) * (0.9 - 0.1 / (m - 1))
    truth = HMM(T, rng.dirichlet(np.full(n, 0.5), size=m).T)
    train, test = truth.sample(50_000, random_state=1), truth.sample(20_000, random_state=2)
    acc = MomentAccumulator(n, window=2)
    acc.learn_many(train)
    loss = {w: -HMMEstimator(n_states=m, random_state=0, window=w).fit(acc).score(test) / test.size
            for w in (1, 2)}
    true_loss = -HiddenMarkovModel(truth.pi, truth.T.T, truth.O.T).score(test) / test.size
    # measured: triples 1.6060, 5-grams 1.6004, the truth 1.6004 nats
    assert loss[2] < loss[1] - 0.003 and loss[2] - true_loss < 0.3 * (loss[1] - true_loss)


def test_sequence_starts_give_the_start_distribution():
    truth = HMM(T=[[0.7, 0.3, 0.0], [0.0, 0.7, 0.3], [0.3, 0.0, 0.7]],
                O=[[0.8, 0.1, 0.1], [0.1, 0.8, 0.1], [0.1, 0.1, 0.8]], pi=[1.0, 0.0, 0.0])
    acc = MomentAccumulator(3, window=2)
    for k, seq in enumerate(truth.sample_many(3000, 8, random_state=0)):
        acc.learn_many(seq, key=k)
        acc.end(k)
    est = HMMEstimator(n_states=3, random_state=0)
    model = est.fit(acc)
    _, _, perm = model.errors_against(truth)
    assert model.startprob_[perm[0]] > 0.95  # every sequence starts in state 0
    assert est.gram_startprob_[perm[0]] < 0.6  # a gram's first state does not


def sparse_automaton(K: int, n: int, seed: int) -> HMM:
    """PAutomaC-like (as demos/bench_windows.py): each state with 3 successors, one the next state
    of a cycle, and 3 emitted symbols, Dirichlet(1) weights; the start on 2 states."""
    rng = np.random.default_rng(seed)
    T, O = np.zeros((K, K)), np.zeros((n, K))
    for h in range(K):
        succ = np.concatenate([[(h + 1) % K], rng.choice(np.setdiff1d(np.arange(K), [(h + 1) % K]),
                                                         2, replace=False)])
        T[succ, h] = rng.dirichlet(np.ones(3))
        sym = rng.choice(n, 3, replace=False)
        O[sym, h] = rng.dirichlet(np.ones(3))
    pi = np.zeros(K)
    pi[rng.choice(K, 2, replace=False)] = 0.5
    return HMM(T, O, pi)


def grown_and_plain(K: int, n: int, seed: int):
    """HMMEstimator's default fit (its ``start_``, the fitted HMM) and the fit from the moments of
    K states (``n_iter`` given: the start before the grown one) of 1,000 sequences of 50 symbols
    of ``sparse_automaton(K, n, seed)`` counted in windows of 2, and the held-out loss function
    (200 fresh sequences) with the truth's loss."""
    truth = sparse_automaton(K, n, seed=seed)
    acc = MomentAccumulator(n_symbols=n, window=2)
    for s in truth.sample_many(1000, 50, random_state=10):
        acc.learn_many(s)
        acc.end()
    test = truth.sample_many(200, 50, random_state=20)

    def loss(model):
        return -sum(model.score(s) for s in test) / test.size

    est = HMMEstimator(n_states=K, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        grown = est.fit(acc)
        plain = HMMEstimator(n_states=K, random_state=0, n_iter=300).fit(acc)
    return est, grown, plain, loss, loss(HiddenMarkovModel.from_hmm(truth))


def test_em_over_the_moments_own_window_grows_then_prunes_the_states():
    # 25 states over 20 symbols, windows of 2: the moments' window is the counts' own, and the
    # Hankel supports far fewer than 25 dimensions; EM from those moments stops in a local optimum
    est, grown, plain, loss, best = grown_and_plain(25, 20, seed=0)
    assert est.start_ == "moments, 32 states pruned to 25" and grown.n_states == 25
    assert est.window_ == 2 and est.n_iter_ == 30
    # measured: truth 1.6957, grown 1.7071 (+0.67%), from the moments of 25 states 1.7638 (+4.0%)
    assert loss(grown) < 1.015 * best
    assert loss(grown) < loss(plain) - 0.03


@pytest.mark.parametrize("seed", [0, 5])
def test_em_over_windows_from_the_triples_moments_takes_the_grown_start(seed):
    # 10 states over 20 symbols, windows of 2: the triples support the 10 states (the moments'
    # level is 1), but EM over the windows from the triples' moments stopped far off (+2.2% and
    # +4.3% on these automata); the moments of the window itself, grown and pruned, do not
    est, grown, plain, loss, best = grown_and_plain(10, 20, seed=seed)
    assert est.start_ == "moments, 13 states pruned to 10" and est.window_ == 2
    # measured: +0.04% / +0.06% against the truth grown, +2.24% / +4.34% from the triples' moments
    assert loss(grown) < 1.005 * best
    assert loss(grown) < loss(plain) - 0.015 * best
