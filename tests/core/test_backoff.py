"""The default predictor: the model mixed with a Kneser–Ney trigram and an HMM filter."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from streamspec import HMM, MomentAccumulator, ObservableOperatorModel, SpectralEstimator
from streamspec.core.backoff import Backoff, contexts_of
from streamspec.core.backoff_fit import fit_with_backoff
from streamspec.core.checkpoint import CheckpointError, dump_checkpoint
from streamspec.core.mixture import ExpertMixture
from streamspec.core.stream_starts import StreamStarts
from streamspec.core.trigram import KneserNeyTrigram
from streamspec.core.triples import Triples


def sticky_hmm(n_states=4, n_symbols=12, stay=0.95, seed=0) -> HMM:
    """Long-memory data: the state persists for ~20 symbols; each state prefers a few symbols."""
    rng = np.random.default_rng(seed)
    T = np.full((n_states, n_states), (1 - stay) / (n_states - 1))
    np.fill_diagonal(T, stay)
    O = rng.dirichlet(np.full(n_symbols, 0.2), size=n_states).T
    return HMM(T=T, O=O)


def accumulate(n: int, sequences) -> MomentAccumulator:
    acc = MomentAccumulator(n_symbols=n, window=1)  # these tests count triples
    for i, s in enumerate(sequences):
        acc.learn_many(np.asarray(s), key=i)
    return acc


def trigram_of(acc: MomentAccumulator) -> KneserNeyTrigram:
    return KneserNeyTrigram(acc.triples(), acc.starts())


def trigram_loss(kn: KneserNeyTrigram, sequences) -> float:
    total, count = 0.0, 0
    for s in sequences:
        s = np.asarray(s)
        u, v = contexts_of(s)
        total -= np.log(kn.proba_of(u[:-1], v[:-1], s)).sum()
        count += s.size
    return total / count


def test_the_hidden_state_beats_the_trigram_where_there_is_long_memory():
    """Fails if the HMM filter were replaced by a filter of the last few symbols: no model of
    two symbols of context can know which state a sticky HMM is in."""
    hmm = sticky_hmm()
    train = [hmm.sample(200_000, random_state=1)]
    test = [hmm.sample(20_000, random_state=2)]
    acc = accumulate(12, train)
    model = SpectralEstimator().fit(acc)
    kn = trigram_loss(trigram_of(acc), test)
    mixed = model.log_loss(test)
    truth = -hmm.operators().log_proba(test[0]) / test[0].size
    assert model.backoff.hmm is not None
    assert mixed < kn * 0.98  # the trigram is far from the truth here ...
    assert mixed < truth * 1.01  # ... and the mixture is near it
    assert model.without_backoff().log_loss(test) > mixed + 0.02


def test_the_trigram_is_a_trigram_in_the_mixture():
    """Fails if the trigram were replaced by a bigram: a second-order chain over 6 symbols,
    whose next symbol is decided by the two before it, nearly."""
    rng = np.random.default_rng(3)
    n = 6
    table = rng.dirichlet(np.full(n, 0.1), size=(n, n))  # p(x | a, b): peaked
    x = [0, 1]
    for _ in range(60_000):
        x.append(rng.choice(n, p=table[x[-2], x[-1]]))
    x = np.array(x)
    acc = accumulate(n, [x[:50_000]])
    model = SpectralEstimator(rank=2).fit(acc)
    test = [x[50_000:]]
    kn3 = trigram_loss(trigram_of(acc), test)
    bigram = trigram_of(acc)
    u = np.full(test[0].size, -2)  # the bigram level of the same counts: the first symbol unknown
    v = np.concatenate([[-1], test[0][:-1]])
    kn2 = -np.log(bigram.proba_of(u, v, test[0])).mean()
    assert kn3 < kn2 - 0.2  # the data need the second symbol back
    assert model.log_loss(test) < kn3 + 0.005


def test_the_empty_history_is_the_start_distribution():
    rng = np.random.default_rng(4)
    hmm = sticky_hmm(seed=4)
    sessions = [np.concatenate([[7 if rng.random() < 0.9 else 3], hmm.sample(12, random_state=i)])
                for i in range(3000)]
    acc = accumulate(12, sessions)
    model = SpectralEstimator().fit(acc)
    p = model.predict_proba_next([])
    unigram = trigram_of(acc).unigram()
    assert p[7] > 0.6 and p[7] > 3 * unigram[7] and abs(p.sum() - 1) < 1e-12


def test_every_prediction_path_is_one_online_predictor():
    hmm = sticky_hmm(seed=7)
    acc = accumulate(12, [hmm.sample(30_000, random_state=1)])
    model = SpectralEstimator(rank=3).fit(acc)
    seq = hmm.sample(300, random_state=8)
    for m in (model, model.with_filter("recursive"), model.with_filter("window", 0)):
        assert m.backoff is model.backoff
        P = m.predictive_sequence(seq)
        np.testing.assert_allclose(P.sum(axis=1), 1.0, atol=1e-12)
        for i in (0, 1, 2, 150, 299):
            np.testing.assert_allclose(P[i], m.predict_proba_next(seq[:i]), atol=1e-13)
        np.testing.assert_allclose(m.proba_sequence(seq), P[np.arange(seq.size), seq], atol=1e-13)
        assert m.log_proba(seq) == pytest.approx(np.log(P[np.arange(seq.size), seq]).sum(), rel=1e-12)
        assert m.accuracy([seq]) == np.mean(P.argmax(axis=1) == seq)
    # reading a sequence never changes the model's weights
    before = model.backoff.mixture.log_weights()
    model.log_loss([seq, seq])
    np.testing.assert_array_equal(model.backoff.mixture.log_weights(), before)
    s = model.sample(200, random_state=1)
    assert np.array_equal(s, model.sample(200, random_state=1)) and s.max() < 12


def test_log_loss_carries_the_weights_from_one_sequence_to_the_next():
    hmm = sticky_hmm(seed=9)
    acc = accumulate(12, [hmm.sample(20_000, random_state=1)])
    model = SpectralEstimator(rank=3).fit(acc)
    a, b = hmm.sample(2000, random_state=2), hmm.sample(2000, random_state=3)
    walk = model.walk(a)
    carried = -np.log(model.proba_sequence(b, walk.mixture)).sum()
    fresh = -np.log(model.proba_sequence(b)).sum()
    assert model.log_loss([a, b]) == pytest.approx((-np.log(walk.probs).sum() + carried) / 4000)
    assert carried != fresh


def test_save_and_load_keep_the_backoff_exactly(tmp_path):
    hmm = sticky_hmm(seed=9)
    acc = accumulate(12, [hmm.sample(20_000, random_state=1), hmm.sample(50, random_state=5)])
    model = SpectralEstimator(rank=3).fit(acc)
    model.save(tmp_path / "m.npz")
    back = ObservableOperatorModel.load(tmp_path / "m.npz")
    np.testing.assert_allclose(back.backoff.mixture.log_weights(), model.backoff.mixture.log_weights(),
                               atol=1e-12)
    assert back.backoff.trigram.starts == model.backoff.trigram.starts
    np.testing.assert_array_equal(back.backoff.hmm.transmat_, model.backoff.hmm.transmat_)
    seq = hmm.sample(100, random_state=2)
    np.testing.assert_allclose(back.predictive_sequence(seq), model.predictive_sequence(seq), rtol=1e-12)
    again = ObservableOperatorModel.from_bytes(model.to_bytes())
    assert again.log_loss([seq]) == pytest.approx(model.log_loss([seq]), rel=1e-12)
    plain = model.without_backoff()  # version 1 without a backoff, and version 1 files load
    assert ObservableOperatorModel.from_bytes(plain.to_bytes()).backoff is None
    old_header = {"filter": "window", "window": 2, "min_proba": 1e-6, "symbols": None,
                  "backoff": {"n": 12, "discount": 0.5, "unigram_discount": 0.5}}
    legacy = dump_checkpoint(ObservableOperatorModel._FORMAT, 2, old_header,
                             {"b1": plain.b1, "binf": plain.binf, "B": plain.B,
                              "backoff_pairs": np.array([1]), "backoff_counts": np.array([1.0]),
                              "backoff_lambdas": np.full(16, 0.5)})
    with pytest.raises(CheckpointError, match="bigram backoff.*refit it from its counts"):
        ObservableOperatorModel.from_bytes(legacy)


def test_the_weights_start_from_held_out_counts_and_the_parts_are_optional():
    hmm = sticky_hmm(seed=11)
    x = hmm.sample(20_000, random_state=1)
    t = Triples.from_arrays(12, x[:-2], x[1:-1], x[2:])
    fit = SpectralEstimator(rank=3, backoff=None).fit
    with_hmm = fit_with_backoff(fit, t, StreamStarts.from_sequences(12, [x]))
    without = fit_with_backoff(fit, t, hmm_states=None)
    assert with_hmm.backoff.components[-2:] == ("trigram", "hmm")
    assert without.backoff.hmm is None and "hmm" not in without.backoff.components
    scores = with_hmm.backoff.held_out
    assert scores["mixture"] <= min(scores["trigram"], scores["hmm"]) + 0.01 < scores["unigram"]
    # the busiest contexts' bucket learned from held-out data: its weights moved from uniform
    k = with_hmm.backoff.mixture.n_components
    assert not np.allclose(with_hmm.backoff.mixture.blend(5), 1 / k)
    with pytest.raises(ValueError, match="components"):
        Backoff(with_hmm.backoff.trigram, ExpertMixture(3), None)


def test_the_model_is_a_component_only_where_it_adds_to_the_held_out_loss():
    """Without an HMM, a rank-4 model of a 4-state HMM over 40 symbols smooths what a trigram
    of 5,000 symbols cannot; with the HMM filter it adds nothing, and is left out (then no
    prediction pays its O(n · d))."""
    h = HMM.random(4, 40, random_state=1, concentration=0.1)
    x = h.sample(5000, random_state=1)
    t = Triples.from_arrays(40, x[:-2], x[1:-1], x[2:])
    fit = SpectralEstimator(rank=4, backoff=None).fit
    two = fit_with_backoff(fit, t, hmm_states=None)
    assert two.backoff.components == ("model", "trigram")
    gain = two.backoff.held_out["mixture_without_model"] - two.backoff.held_out["mixture"]
    assert gain > 0.05
    three = fit_with_backoff(fit, t)
    held = three.backoff.held_out
    assert (held["mixture_without_model"] - held["mixture"] >= 1e-3) == three.backoff.use_model
    if not three.backoff.use_model:  # its predictions never ask for the model's rows
        seq = h.sample(50, random_state=3)
        calls = []
        original = three._own_probas
        three._own_probas = lambda x: calls.append(1) or original(x)
        three.log_loss([seq])
        assert calls == []


def test_with_filter_keeps_factors_and_backoff():
    hmm = sticky_hmm(seed=11)
    acc = accumulate(12, [hmm.sample(10_000, random_state=1)])
    model = SpectralEstimator(rank=2).fit(acc)
    model.factors = "sentinel"
    other = model.with_filter("recursive", 4)
    assert other.factors == "sentinel" and other.backoff is model.backoff
    assert model.without_backoff().factors == "sentinel"


def test_tiny_counts_fit():
    t = Triples.from_arrays(3, [0], [1], [2])
    model = SpectralEstimator(rank=1).fit(t)
    p = model.predict_proba_next([0, 1])
    assert model.backoff is not None and abs(p.sum() - 1) < 1e-12 and (p > 0).all()


_MEMORY_LIMITED = textwrap.dedent(
    """
    import resource, numpy as np
    resource.setrlimit(resource.RLIMIT_AS, (1536 * 2**20, 1536 * 2**20))
    from streamspec import SpectralEstimator
    from streamspec.core.triples import Triples
    n = 6000
    try:
        np.zeros((n, n, n))
    except MemoryError:
        pass
    else:
        raise SystemExit("the memory limit is not in force")
    rng = np.random.default_rng(0)
    p = 1.0 / np.arange(1, n + 1) ** 1.05
    x = rng.choice(n, size=300_000, p=p / p.sum())
    t = Triples.from_arrays(n, x[:-2], x[1:-1], x[2:])
    assert np.unique(x).size >= 5000
    model = SpectralEstimator(rank=10).fit(t)
    test = rng.choice(n, size=5000, p=p / p.sum())
    P = model.predictive_sequence(test[:600])
    assert np.allclose(P.sum(axis=1), 1)
    loss = model.log_loss([test])
    alone = model.without_backoff().log_loss([test])
    print(model.n_symbols, model.dim, round(loss, 3), round(alone, 3))
    """
)


def test_a_large_alphabet_fits_and_predicts_within_1_5_gb():
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-c", _MEMORY_LIMITED], capture_output=True, text=True,
                         timeout=600, env=env, cwd=Path(__file__).resolve().parents[2])
    assert out.returncode == 0, out.stderr[-3000:]
    n, d, loss, alone = out.stdout.split()
    assert (int(n), int(d)) == (6000, 10)
    assert float(loss) < float(alone)


def test_forgetting_weights_are_thinned_in_units_not_whole_triples():
    # three distinct triples of fractional weight: sending one whole to the held-out side
    # would leave the parts fitted on the kept counts blind to it
    x = np.array([0, 0, 1] * 100)
    w = 0.99 ** np.arange(x.size - 2)[::-1]
    t = Triples.from_arrays(2, x[:-2], x[1:-1], x[2:], weights=w)
    assert t.nnz == 3
    for seed in range(5):
        model = SpectralEstimator(rank=2, random_state=seed).fit(t)
        assert model.predict_proba_next([1, 0]).argmax() == 0  # "b a" -> "a"
        assert model.predict_proba_next([0, 0]).argmax() == 1  # "a a" -> "b"


def test_a_refit_keeps_the_rank_until_the_counts_have_doubled():
    h = sticky_hmm(seed=3)
    x = h.sample(40_000, random_state=1)
    first = SpectralEstimator()
    model = first.fit(accumulate(12, [x[:10_000]]))
    assert model.metadata["rank_chosen_on"] == "9998" and first.rank_scores_
    again = SpectralEstimator()
    refit = again.fit(accumulate(12, [x[:15_000]]), init=model)  # 1.5 times the counts: kept
    assert refit.rank == model.rank and again.rank_scores_ == {}
    assert refit.metadata["rank_chosen_on"] == "9998"
    chosen = SpectralEstimator()
    later = chosen.fit(accumulate(12, [x[:20_000]]), init=refit)  # doubled: chosen again
    assert chosen.rank_scores_ and later.metadata["rank_chosen_on"] == "19998"


def test_auto_hmm_states_are_chosen_by_held_out_loss_and_kept_by_refits():
    """A sticky 8-state HMM over 40 symbols: the singular values above the noise see fewer
    states; "auto" tries more on the held-out counts and keeps the size that predicts them
    best (its held-out loss is at most that of the singular-value count's HMM, and 0.02 nats
    below that of the count above the Frobenius noise level N^(-1/2), the rule before
    noise_level), and a refit keeps that size."""
    from streamspec.core.backoff_fit import hmm_states_for
    from streamspec.core.subspace import top_singular

    rng = np.random.default_rng(3)
    m, n = 8, 40
    T = np.full((m, m), 0.1 / (m - 1)) + np.eye(m) * (0.9 - 0.1 / (m - 1))
    x = HMM(T, rng.dirichlet(np.full(n, 0.5), size=m).T).sample(20_000, random_state=1)
    t = Triples.from_arrays(n, x[:-2], x[1:-1], x[2:])
    fit = SpectralEstimator(rank=2, backoff=None).fit
    by_spectrum = hmm_states_for(t)
    by_frobenius = max(2, int((top_singular(t.P21(), n)[1] > 1 / np.sqrt(t.total)).sum()))
    assert by_frobenius <= by_spectrum < m
    auto = fit_with_backoff(fit, t, hmm_states="auto")
    fixed = fit_with_backoff(fit, t, hmm_states=by_spectrum)
    coarse = fit_with_backoff(fit, t, hmm_states=by_frobenius)
    assert auto.backoff.hmm.n_states > by_spectrum  # the spectrum undercounts sticky states
    assert auto.backoff.held_out["hmm"] <= fixed.backoff.held_out["hmm"]
    assert auto.backoff.held_out["hmm"] < coarse.backoff.held_out["hmm"] - 0.02
    refit = fit_with_backoff(fit, t, hmm_states="auto", previous=auto)
    assert refit.backoff.hmm.n_states == auto.backoff.hmm.n_states


def _threshold_by_bisection(w: np.ndarray, m: int) -> float:
    """A bisection (50 passes) on the defining equation, as a reference."""
    lo, hi = 0.0, max(float(w.max()), float(w.sum()) / m)
    for _ in range(50):
        mid = 0.5 * (lo + hi)
        if mid > 0 and np.minimum(1.0, w / mid).sum() > m:
            lo = mid
        else:
            hi = mid
    return hi


def test_em_threshold_is_exact_and_matches_the_bisection():
    from streamspec.core.backoff_windows import sample_threshold as _threshold

    rng = np.random.default_rng(0)
    for trial in range(60):
        n = int(rng.integers(2, 2000))
        m = int(rng.integers(1, n))
        w = np.floor(rng.pareto(1.0, size=n) * 3) + 1 if trial % 2 else rng.random(n) * 5
        tau = _threshold(w, m)
        assert tau == pytest.approx(_threshold_by_bisection(w, m), rel=1e-9)
        # the defining equation holds exactly, not to a bisection's tolerance
        assert np.minimum(1.0, w / tau).sum() == pytest.approx(m, rel=1e-12)
    assert _threshold(np.array([1.0, 2.0]), 5) == 0.0  # fewer weights than m: all kept whole
    assert _threshold(np.array([4.0, 4.0, 4.0]), 2) == 6.0  # τ above every weight: 3 · 4/6 = 2
    assert _threshold(np.ones(1000), 100) == 10.0  # singletons: ~100 kept, not all 1,000
