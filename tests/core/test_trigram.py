"""The Kneser–Ney trigram of triple counts and stream starts, against a brute-force reference."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamspec.core.trigram import START, UNKNOWN, KneserNeyTrigram, modified_discounts
from tests.core.trigram_data import counts_of

S = "<s>"


def _d(c: float, D) -> float:
    k = min(max(int(np.rint(c)), 1), 3) - 1
    return min(c, D[k])


def _unigram(n: int, counts: dict) -> list[float]:
    total = sum(counts.values())
    if total == 0:
        return [1.0 / n] * n
    vals = [c for c in counts.values() if c > 0]
    D = modified_discounts(np.array(vals))
    lost = sum(_d(c, D) for c in vals)
    return [(max(counts.get(w, 0.0) - _d(counts.get(w, 0.0), D), 0.0) if counts.get(w, 0) > 0 else 0.0)
            / total + lost / n / total for w in range(n)]


class BruteTrigram:
    """The formulas of streamspec.core.trigram, written out with dictionaries from sequences."""

    def __init__(self, n: int, sequences, scale: float = 1.0):
        self.n = n
        c3 = defaultdict(float)
        for seq in sequences:
            padded = [S, S] + list(seq)
            for t in range(2, len(padded)):
                c3[(padded[t - 2], padded[t - 1], padded[t])] += scale
        self.c3 = c3
        regular = [c for k, c in c3.items() if k[0] != S]
        started = [c for k, c in c3.items() if k[0] == S]
        self.D3 = modified_discounts(np.array(regular))
        self.D3s = modified_discounts(np.array(started))
        N2 = defaultdict(float)
        for (_, v, w), c in c3.items():
            if v != S:
                N2[(v, w)] += min(c, 1.0)
        self.N2 = N2
        self.D2 = modified_discounts(np.array(list(N2.values())))
        N1 = defaultdict(float)
        for (_, w), c in N2.items():
            N1[w] += min(c, 1.0)
        self.p1 = _unigram(n, N1)
        freq = defaultdict(float)
        for (_, _, w), c in c3.items():
            freq[w] += c
        self.freq = _unigram(n, freq)

    def p2(self, w, v) -> float:
        if v in (S, None):
            return self.freq[w]
        row = {k[1]: c for k, c in self.N2.items() if k[0] == v}
        tot = sum(row.values())
        if tot == 0:
            return self.p1[w]
        lost = sum(_d(c, self.D2) for c in row.values())
        direct = max(row.get(w, 0.0) - _d(row.get(w, 0.0), self.D2), 0.0) if w in row else 0.0
        return direct / tot + lost / tot * self.p1[w]

    def p(self, w, u, v) -> float:
        if v is None:  # unknown last symbol
            return self.freq[w]
        lower = self.freq[w] if v == S else self.p2(w, v)
        if u is None:  # unknown first symbol
            return lower
        row = {k[2]: c for k, c in self.c3.items() if k[0] == u and k[1] == v}
        tot = sum(row.values())
        if tot == 0:
            return lower
        D = self.D3s if u == S else self.D3
        lost = sum(_d(c, D) for c in row.values())
        direct = max(row[w] - _d(row[w], D), 0.0) if w in row else 0.0
        return direct / tot + lost / tot * lower


def _code(x):
    return {S: START, None: UNKNOWN}.get(x, x)


sequences_st = st.integers(2, 6).flatmap(lambda n: st.tuples(
    st.just(n), st.lists(st.lists(st.integers(0, n - 1), min_size=1, max_size=25), min_size=1, max_size=8)))


@settings(max_examples=60, deadline=None)
@given(sequences_st)
def test_every_probability_matches_the_brute_force_formulas_and_rows_sum_to_one(case):
    n, seqs = case
    kn = KneserNeyTrigram(*counts_of(n, seqs))
    ref = BruteTrigram(n, seqs)
    contexts = [(S, S), (None, None)] + [(S, v) for v in range(n)] + [(None, v) for v in range(n)] + [
        (u, v) for u in range(n) for v in range(n)]
    u = np.array([_code(a) for a, _ in contexts])
    v = np.array([_code(b) for _, b in contexts])
    rows = kn.predict_many(u, v)
    np.testing.assert_allclose(rows.sum(axis=1), 1.0, atol=1e-12)
    assert (rows > 0).all()
    want = np.array([[ref.p(w, a, b) for w in range(n)] for a, b in contexts])
    np.testing.assert_allclose(rows, want, atol=1e-12)
    uu, ww = np.repeat(u, n), np.tile(np.arange(n), len(contexts))
    np.testing.assert_allclose(kn.proba_of(uu, np.repeat(v, n), ww), want.ravel(), atol=1e-12)


def test_the_empty_history_is_the_start_distribution_when_many_streams_start():
    rng = np.random.default_rng(0)
    # sessions start with 0 (90%) or 1, then wander uniformly over 6 symbols
    seqs = [[0 if rng.random() < 0.9 else 1] + rng.integers(0, 6, 8).tolist() for _ in range(500)]
    kn = KneserNeyTrigram(*counts_of(6, seqs))
    p = kn.predict(START, START)
    assert p[0] > 0.85 and p[1] > 0.05 and p[2:].max() < 0.01
    # the unigram (what an unknown history gets) is near-uniform here
    assert kn.unigram()[0] < 0.3 and p[0] > 3 * kn.unigram()[0]


def test_one_long_stream_gives_its_empty_history_the_unigram_not_its_first_symbol():
    text = np.array([0] + [1, 2, 2, 2] * 200)  # starts with the rare symbol 0
    kn = KneserNeyTrigram(*counts_of(3, [text]))
    p = kn.predict(START, START)
    np.testing.assert_allclose(p, kn.unigram(), atol=1e-12)
    assert p[2] > 0.7 and p[0] < 0.01


def test_it_is_a_trigram_not_a_bigram():
    # after "0 1" always 2, after "2 1" always 0: a bigram cannot tell them apart
    seq = [0, 1, 2, 1, 0, 1, 2, 1] * 100
    kn = KneserNeyTrigram(*counts_of(3, [seq]))
    assert kn.predict(0, 1)[2] > 0.95 and kn.predict(2, 1)[0] > 0.95
    assert abs(kn.predict(UNKNOWN, 1)[0] - kn.predict(UNKNOWN, 1)[2]) < 0.05


def test_fractional_counts_give_proper_distributions():
    t, s = counts_of(4, [[0, 1, 2, 3, 0, 1, 2, 2, 1]])
    kn = KneserNeyTrigram(t.scaled(0.37), s.scaled(0.37))
    rows = kn.predict_many([0, 1, START, UNKNOWN], [1, 2, 0, 3])
    np.testing.assert_allclose(rows.sum(axis=1), 1.0, atol=1e-12)
    assert (rows > 0).all()


@pytest.mark.parametrize("scale", [0.37, 0.8, 1.7])
def test_fractional_counts_follow_the_brute_force_formulas(scale):
    # fractional counts (forgetting) round to other discount classes, some to none (below 0.5);
    # 12 symbols and many streams: contexts whose u-major and v-major orders differ, starts
    # inserted among the triples' contexts
    rng = np.random.default_rng(int(scale * 100))
    seqs = [rng.integers(0, 12, size=rng.integers(1, 30)).tolist() for _ in range(40)]
    t, s = counts_of(12, seqs)
    kn = KneserNeyTrigram(t.scaled(scale), s.scaled(scale))
    ref = BruteTrigram(12, seqs, scale)
    contexts = [(S, S), (None, 3)] + [(S, v) for v in range(12)] + [
        (u, v) for u in range(12) for v in range(12)]
    u = np.array([_code(a) for a, _ in contexts])
    v = np.array([_code(b) for _, b in contexts])
    want = np.array([[ref.p(w, a, b) for w in range(12)] for a, b in contexts])
    np.testing.assert_allclose(kn.predict_many(u, v), want, atol=1e-12)
    np.testing.assert_allclose(kn.discounts, ref.D3, atol=1e-15)
    np.testing.assert_allclose(kn.start_discounts, ref.D3s, atol=1e-15)


def test_bad_contexts_are_refused_by_name():
    kn = KneserNeyTrigram(*counts_of(3, [[0, 1, 2, 0]]))
    with pytest.raises(ValueError, match="context symbols must be in -2..2"):
        kn.proba_of([3], [0], [1])
    with pytest.raises(ValueError, match="predicted symbols"):
        kn.proba_of([0], [0], [5])


def test_modified_discounts_follow_chen_and_goodman():
    counts = np.array([1] * 10 + [2] * 5 + [3] * 3 + [4] * 2 + [7])
    y = 10 / (10 + 2 * 5)
    np.testing.assert_allclose(modified_discounts(counts),
                               [1 - 2 * y * 5 / 10, 2 - 3 * y * 3 / 5, 3 - 4 * y * 2 / 3])


@settings(max_examples=30, deadline=None)
@given(sequences_st)
def test_one_context_at_a_time_equals_the_vectorised_probabilities(case):
    n, seqs = case
    kn = KneserNeyTrigram(*counts_of(n, seqs))
    for u in range(-2, n):
        for v in range(-2, n):
            ctx = kn.context1(u, v)
            assert ctx[2] == kn.context_counts([u], [v])[0]
            want = kn.predict(u, v)
            got = [kn.proba1(ctx, w) for w in range(n)]
            np.testing.assert_allclose(got, want, atol=1e-14)
            np.testing.assert_allclose(kn.row1(ctx), want, atol=1e-14)
