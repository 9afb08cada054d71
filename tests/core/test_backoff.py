"""The Kneser–Ney backoff and its mixture with the HMM."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from streamspec import HMM, ObservableOperatorModel, SpectralEstimator
from streamspec.core.backoff import (
    N_BUCKETS,
    Backoff,
    KneserNeyBigram,
    bucket_of_counts,
    fit_mixing_weights,
    fit_with_backoff,
)
from streamspec.core.checkpoint import dump_checkpoint
from streamspec.core.triples import Triples


def brute_force_kn(n, pairs):
    """Interpolated KN, written out from the definitions with dicts."""
    c = Counter(pairs)
    counts = np.array(list(c.values()), dtype=float)
    n1, n2 = (counts == 1).sum(), (counts == 2).sum()
    D = float(np.clip(n1 / (n1 + 2 * n2), 0.1, 0.9)) if n1 + 2 * n2 else 0.5
    preds = {w: len({v for (v, w2) in c if w2 == w}) for w in range(n)}
    cont = np.array([preds[w] for w in range(n)], dtype=float)
    m1, m2 = (cont == 1).sum(), (cont == 2).sum()
    D1 = float(np.clip(m1 / (m1 + 2 * m2), 0.1, 0.9)) if m1 + 2 * m2 else 0.5
    P = len(c)
    seen_w = (cont > 0).sum()
    p_cont = np.array([(max(cont[w] - D1, 0) + D1 * seen_w / n) / P for w in range(n)])
    table = np.empty((n, n))
    for v in range(n):
        cv = sum(k for (a, _), k in c.items() if a == v)
        if cv == 0:
            table[v] = p_cont
            continue
        types = sum(1 for (a, _) in c if a == v)
        for w in range(n):
            table[v, w] = max(c.get((v, w), 0) - D, 0) / cv + D * types / cv * p_cont[w]
    return table, p_cont, D, D1


def test_kn_equals_the_brute_force_definition():
    rng = np.random.default_rng(2)
    n = 7
    x = rng.choice(n - 1, size=40, p=[0.4, 0.2, 0.15, 0.1, 0.1, 0.05])  # symbol 6 never seen
    table, p_cont, D, D1 = brute_force_kn(n, list(zip(x[:-1].tolist(), x[1:].tolist(), strict=True)))
    kn = KneserNeyBigram.from_sequences(n, [x])
    assert abs(kn.discount - D) < 1e-15 and abs(kn.unigram_discount - D1) < 1e-15
    assert 0.1 < D < 0.9 and 0.1 < D1 < 0.9  # an example where the clipping does not act
    np.testing.assert_allclose(kn.predict_many(np.arange(n)), table, rtol=1e-13)
    np.testing.assert_allclose(kn.predict(None), p_cont, rtol=1e-13)
    assert (kn.predict(6) == p_cont).all()  # a context never seen falls back to the continuation


@pytest.mark.parametrize("fractional", [False, True])
def test_kn_rows_are_positive_distributions_and_the_three_views_agree(fractional):
    rng = np.random.default_rng(1)
    n = 60
    x = rng.zipf(1.3, size=(3, 4000)) % n
    w = rng.random(4000) * 3 if fractional else None
    kn = KneserNeyBigram.from_triples(Triples.from_arrays(n, *x, weights=w))
    lasts = np.array([-1, *range(n)])
    rows = kn.predict_many(lasts)
    assert (rows > 0).all()
    np.testing.assert_allclose(rows.sum(axis=1), 1.0, atol=1e-12)
    np.testing.assert_array_equal(rows[3], kn.predict(2))
    nexts = rng.integers(0, n, size=lasts.size)
    np.testing.assert_allclose(kn.proba_of(lasts, nexts), rows[np.arange(lasts.size), nexts], rtol=1e-14)
    assert kn.proba_of([], []).shape == (0,)


def test_kn_of_nothing_is_uniform_and_bad_input_is_refused():
    kn = KneserNeyBigram(4, [], [])
    np.testing.assert_allclose(kn.predict(2), 0.25)
    with pytest.raises(ValueError, match="sorted"):
        KneserNeyBigram(3, [5, 2], [1.0, 1.0])
    with pytest.raises(ValueError, match="positive"):
        KneserNeyBigram(3, [2, 5], [1.0, 0.0])
    with pytest.raises(ValueError, match="unknown context"):
        KneserNeyBigram(3, [2], [1.0]).predict(3)
    with pytest.raises(ValueError, match="lambdas"):
        Backoff(kn, np.full(N_BUCKETS, 1.5))


def test_mixing_weights_maximise_the_objective_and_never_lose_to_the_backoff():
    rng = np.random.default_rng(2)
    m = 500
    a = rng.random(m) * (rng.random(m) < 0.7)  # the HMM gives some items nothing
    b = rng.random(m) + 1e-3
    w = rng.random(m)
    buckets = rng.integers(0, 4, size=m)
    lam = fit_mixing_weights(a, b, w, buckets)

    def objective(k, lk):
        at = buckets == k
        return np.sum(w[at] * np.log(lk * a[at] + (1 - lk) * b[at]))

    for k in range(4):
        best = objective(k, lam[k])
        assert best >= objective(k, 0.0) - 1e-12
        for g in np.linspace(0, 0.999, 50):
            assert best >= objective(k, g) - 1e-9
    # buckets without data take the pooled weight
    assert np.all(lam[4:] == lam[4]) and 0 <= lam[4] <= 1


def hmm_data(n_symbols=40, seed=0, length=200_000):
    rng = np.random.default_rng(seed)
    zipf = 1.0 / np.arange(1, n_symbols + 1)
    O = np.stack([zipf[rng.permutation(n_symbols)] for _ in range(3)], axis=1)
    O /= O.sum(axis=0)
    T = np.array([[0.8, 0.1, 0.1], [0.1, 0.8, 0.1], [0.1, 0.1, 0.8]])
    hmm = HMM(T, O)
    x = hmm.sample(length, random_state=seed + 1)
    return hmm, x


def held_out_losses(model, kn, held):
    """Mean held-out log loss of the mixture and of the bigram on held-out triples."""
    ctx = np.stack([held.x1, held.x2], axis=1)
    states = model.window_states(ctx)
    mix = model.predict_from_state(states, held.x2)[np.arange(held.nnz), held.x3]
    alone = kn.proba_of(held.x2, held.x3)
    w = held.weights / held.total
    return -np.sum(w * np.log(mix)), -np.sum(w * np.log(alone))


def test_the_mixture_beats_the_backoff_on_the_held_out_counts():
    hmm, x = hmm_data()
    n = hmm.n_symbols
    t = Triples.from_arrays(n, x[:-2], x[1:-1], x[2:])
    fit = SpectralEstimator(rank=3, backoff=None).fit
    model = fit_with_backoff(fit, t, holdout=0.1, random_state=0)
    # the same split as fit_with_backoff's
    kept, held = t.thin(0.1, np.random.default_rng(0))
    kn = KneserNeyBigram.from_triples(kept)
    part = fit(kept).with_backoff(Backoff(kn, model.backoff.lambdas))
    mixed, alone = held_out_losses(part, kn, held)
    assert mixed < alone - 0.01  # strictly better on data of a real HMM
    assert model.backoff.lambdas.max() > 0.3
    # and on fresh data, the mixture beats both of its parts
    test = [hmm.sample(20_000, random_state=9)]
    both = model.log_loss(test)
    assert both < model.backoff.log_loss(test) and both < model.without_backoff().log_loss(test) + 1e-3


def test_the_mixture_is_never_worse_than_the_backoff_on_held_out_counts_of_noise():
    rng = np.random.default_rng(3)
    n = 30
    x = rng.zipf(1.5, size=50_000) % n  # no hidden structure: a bigram is all there is
    t = Triples.from_arrays(n, x[:-2], x[1:-1], x[2:])
    fit = SpectralEstimator(rank=2, backoff=None).fit
    model = fit_with_backoff(fit, t, random_state=4)
    kept, held = t.thin(0.1, np.random.default_rng(4))
    kn = KneserNeyBigram.from_triples(kept)
    mixed, alone = held_out_losses(fit(kept).with_backoff(Backoff(kn, model.backoff.lambdas)), kn, held)
    assert mixed <= alone + 1e-12


def test_lambda_zero_reproduces_the_backoff_exactly():
    hmm, x = hmm_data(seed=5, length=20_000)
    t = Triples.from_arrays(hmm.n_symbols, x[:-2], x[1:-1], x[2:])
    hmm_only = SpectralEstimator(rank=3, backoff=None).fit(t)
    kn = KneserNeyBigram.from_triples(t)
    model = hmm_only.with_backoff(Backoff(kn, 0.0))
    seq = hmm.sample(500, random_state=6)
    lasts = np.concatenate(([-1], seq[:-1]))
    np.testing.assert_array_equal(model.predictive_sequence(seq), kn.predict_many(lasts))
    assert model.log_loss([seq]) == pytest.approx(kn.log_loss([seq]), rel=1e-14)
    np.testing.assert_array_equal(model.predict_proba_next(seq[:10]), kn.predict(int(seq[9])))
    np.testing.assert_array_equal(model.predict_proba_next([]), kn.predict(None))
    # λ = 1 is the HMM clipped and renormalised (not floored)
    one = hmm_only.with_backoff(Backoff(kn, 1.0))
    raw = hmm_only.with_filter().predict_from_state(hmm_only.state_for(seq[:5]))
    np.testing.assert_allclose(one.predict_proba_next(seq[:5]), raw, atol=1e-5)


def test_every_prediction_path_uses_the_backoff_consistently():
    hmm, x = hmm_data(seed=7, length=30_000)
    t = Triples.from_arrays(hmm.n_symbols, x[:-2], x[1:-1], x[2:])
    model = SpectralEstimator(rank=3).fit(t)
    assert model.backoff is not None
    seq = hmm.sample(300, random_state=8)
    for m in (model, model.with_filter("recursive"), model.with_filter("window", 0)):
        assert m.backoff is model.backoff
        P = m.predictive_sequence(seq)
        for i in (0, 1, 2, 150, 299):
            np.testing.assert_allclose(P[i], m.predict_proba_next(seq[:i]), atol=1e-13)
        np.testing.assert_allclose(m.proba_sequence(seq), P[np.arange(seq.size), seq], atol=1e-15)
        assert m.log_proba(seq) == pytest.approx(np.log(P[np.arange(seq.size), seq]).sum(), rel=1e-12)
    s = model.sample(200, random_state=1)
    assert np.array_equal(s, model.sample(200, random_state=1)) and s.max() < hmm.n_symbols


def test_save_and_load_keep_the_backoff(tmp_path):
    hmm, x = hmm_data(seed=9, length=20_000)
    t = Triples.from_arrays(hmm.n_symbols, x[:-2], x[1:-1], x[2:])
    model = SpectralEstimator(rank=3).fit(t)
    model.save(tmp_path / "m.npz")
    back = ObservableOperatorModel.load(tmp_path / "m.npz")
    np.testing.assert_array_equal(back.backoff.lambdas, model.backoff.lambdas)
    np.testing.assert_array_equal(back.backoff.kn.pairs, model.backoff.kn.pairs)
    seq = hmm.sample(100, random_state=2)
    np.testing.assert_array_equal(back.predictive_sequence(seq), model.predictive_sequence(seq))
    again = ObservableOperatorModel.from_bytes(model.to_bytes())
    assert again.log_loss([seq]) == model.log_loss([seq])
    # without a backoff, the checkpoint is still version 1, and version 1 files load
    plain = model.without_backoff()
    assert ObservableOperatorModel.from_bytes(plain.to_bytes()).backoff is None
    v1 = dump_checkpoint(
        ObservableOperatorModel._FORMAT, 1,
        {"filter": "window", "window": 2, "min_proba": 1e-6, "symbols": None},
        {"b1": plain.b1, "binf": plain.binf, "B": plain.B},
    )
    old = ObservableOperatorModel.from_bytes(v1)
    np.testing.assert_array_equal(old.predictive_sequence(seq), plain.predictive_sequence(seq))


def test_with_filter_keeps_factors_and_backoff():
    hmm, x = hmm_data(seed=11, length=10_000)
    t = Triples.from_arrays(hmm.n_symbols, x[:-2], x[1:-1], x[2:])
    model = SpectralEstimator(rank=2).fit(t)
    model.factors = "sentinel"
    other = model.with_filter("recursive", 4)
    assert other.factors == "sentinel" and other.backoff is model.backoff
    assert (other.filter, other.window) == ("recursive", 4)
    assert model.without_backoff().factors == "sentinel"


def test_buckets():
    assert bucket_of_counts([0, 1, 3, 7, 2**20]).tolist() == [0, 1, 2, 3, 15]


def test_tiny_counts_fit_with_the_default_weight():
    t = Triples.from_arrays(3, [0], [1], [2])
    model = SpectralEstimator(rank=1).fit(t)
    assert model.backoff is not None
    p = model.predict_proba_next([0, 1])
    assert abs(p.sum() - 1) < 1e-12 and (p > 0).all()


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
    alone = model.backoff.log_loss([test])
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
    assert float(loss) <= float(alone) + 0.02


def test_forgetting_weights_are_thinned_in_units_not_whole_triples():
    # three distinct triples of fractional weight: sending one whole to the held-out side
    # would leave the HMM of the kept counts blind to it
    x = np.array([0, 0, 1] * 100)
    w = 0.99 ** np.arange(x.size - 2)[::-1]
    t = Triples.from_arrays(2, x[:-2], x[1:-1], x[2:], weights=w)
    assert t.nnz == 3
    for seed in range(5):
        model = SpectralEstimator(rank=2, random_state=seed).fit(t)
        assert model.predict_proba_next([1, 0]).argmax() == 0  # "b a" -> "a"
        assert model.predict_proba_next([0, 0]).argmax() == 1  # "a a" -> "b"
