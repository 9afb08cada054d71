"""Tests for streamspec.experiments.baselines.KneserNeyNGram against a brute-force reference."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from streamspec.experiments.baselines import KneserNeyNGram, NGramModel


def reference(sequences, n: int, order: int, D: float):
    """Interpolated Kneser–Ney written out plainly from its definition: dictionaries of
    n-gram tuples, sequences padded with ``order`` start symbols ``n``."""
    top: Counter = Counter()
    for seq in sequences:
        padded = [n] * order + list(seq)
        for t in range(order, len(padded)):
            top[tuple(padded[t - order : t + 1])] += 1
    levels = {order: top}
    for k in range(order - 1, -1, -1):  # continuation counts: distinct left extensions
        levels[k] = Counter(gram[1:] for gram in levels[k + 1])

    def p(w: int, h: tuple) -> float:
        lower = p(w, h[1:]) if h else 1.0 / n
        grams = {g: c for g, c in levels[len(h)].items() if g[:-1] == h}
        total = sum(grams.values())
        if total == 0:
            return lower
        return max(grams.get(h + (w,), 0) - D, 0) / total + D * len(grams) / total * lower

    def next_row(history) -> np.ndarray:
        h = tuple(([n] * order + list(history))[len(history):]) if order else ()
        return np.array([p(w, h) for w in range(n)])

    return next_row


def random_streams(rng, n: int, count: int) -> list[np.ndarray]:
    """Short streams of a sticky chain (so that some contexts recur and others are unseen)."""
    out = []
    for _ in range(count):
        x = [int(rng.integers(n))]
        for _ in range(int(rng.integers(1, 30))):
            x.append(x[-1] if rng.random() < 0.5 else int(rng.integers(n)))
        out.append(np.array(x))
    return out


@pytest.mark.parametrize("order", [0, 1, 2])
@pytest.mark.parametrize("seed", range(4))
def test_kneser_ney_matches_the_brute_force_reference(order, seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(3, 7))
    train = random_streams(rng, n, 5)
    D = float(rng.choice([0.75, 0.5]))
    kn = KneserNeyNGram(n, order=order, discount=D).fit(train)
    ref = reference(train, n, order, D)
    histories = [[], [int(rng.integers(n))], list(train[0][:3]), list(rng.integers(0, n, size=4))]
    for h in histories:  # seen, unseen and start contexts
        row = kn.predict_proba_next(h)
        np.testing.assert_allclose(row, ref(h), rtol=1e-12, atol=1e-15)
        assert row.sum() == pytest.approx(1.0, abs=1e-12) and (row > 0).all()
    test = random_streams(rng, n, 3)
    for x in test:
        expected = [ref(list(x[:t]))[x[t]] for t in range(len(x))]
        np.testing.assert_allclose(kn.proba_sequence(x), expected, rtol=1e-12)
    total = sum(-np.log([ref(list(x[:t]))[x[t]] for t in range(len(x))]).sum() for x in test)
    assert kn.log_loss(test) == pytest.approx(total / sum(map(len, test)), rel=1e-12)


def test_kneser_ney_is_neither_add_alpha_nor_a_lower_order():
    rng = np.random.default_rng(7)
    train = random_streams(rng, 5, 40)
    test = random_streams(rng, 5, 10)
    tri = KneserNeyNGram(5, order=2).fit(train)
    bi = KneserNeyNGram(5, order=1).fit(train)
    h = list(train[0][:2])
    assert not np.allclose(tri.predict_proba_next(h), bi.predict_proba_next(h))
    assert not np.allclose(tri.predict_proba_next(h), NGramModel(5, order=2).fit(train).predict_proba_next(h))
    # a start is a context: the first symbol is predicted from the counts of first symbols
    firsts = Counter(int(s[0]) for s in train)
    assert int(tri.predict_proba_next([]).argmax()) == firsts.most_common(1)[0][0]
    assert np.isfinite(tri.log_loss(test))


def test_kneser_ney_scales_to_large_alphabets_sparsely():
    rng = np.random.default_rng(0)
    n = 50_000
    train = [rng.integers(0, n, size=20_000) for _ in range(3)]
    kn = KneserNeyNGram(n, order=2).fit(train)
    assert sum(codes.size for codes, *_ in kn.levels_) < 4 * 60_000  # distinct grams, not n^3
    row = kn.predict_proba_next(train[0][:5])
    assert row.shape == (n,) and row.sum() == pytest.approx(1.0, abs=1e-9)


def test_kneser_ney_rejects_bad_input():
    with pytest.raises(ValueError, match="discount"):
        KneserNeyNGram(3, discount=1.5)
    with pytest.raises(ValueError, match="order"):
        KneserNeyNGram(3, order=-1)
    with pytest.raises(ValueError, match="out of range"):
        KneserNeyNGram(3).fit([[0, 1, 3]])
    with pytest.raises(ValueError, match="2\\^62"):
        KneserNeyNGram(10**7, order=2)
    with pytest.raises(ValueError, match="at least one symbol"):
        KneserNeyNGram(3).fit([[0, 1, 2]]).log_loss([[]])
