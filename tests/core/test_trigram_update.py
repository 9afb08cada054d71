"""The trigram merged from a previous one (KneserNeyTrigram.updated) against the cold build."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from streamspec.core.trigram import START, UNKNOWN, KneserNeyTrigram
from streamspec.core.triples import Triples
from streamspec.core.triples_change import triples_change
from tests.core.trigram_data import counts_of


def _rows(kn: KneserNeyTrigram) -> np.ndarray:
    """Every context's row, starts and unknown symbols included."""
    n = kn.n
    sym = np.arange(n)
    u = np.concatenate([[START, UNKNOWN], np.full(n, START), np.full(n, UNKNOWN), np.repeat(sym, n)])
    v = np.concatenate([[START, UNKNOWN], sym, sym, np.tile(sym, n)])
    return kn.predict_many(u, v)


def _pruned(t: Triples, rng: np.random.Generator) -> Triples:
    """Some triples dropped (an accumulator that prunes), so that the merge must delete them."""
    keep = rng.random(t.nnz) > 0.3
    return Triples(t.n, t.codes[keep], t.weights[keep])


rounds_st = st.tuples(
    st.integers(2, 6),  # first alphabet
    st.lists(st.tuples(st.integers(0, 2),  # symbols added to the alphabet
                       st.sampled_from([1.0, 0.9, 0.5]),  # forgetting factor
                       st.booleans(),  # prune some old triples
                       st.lists(st.lists(st.integers(0, 50), min_size=1, max_size=20),
                                min_size=0, max_size=4)),
             min_size=1, max_size=4),
    st.lists(st.lists(st.integers(0, 50), min_size=1, max_size=25), min_size=1, max_size=6),
    st.integers(0, 2**31 - 1),
)


@settings(max_examples=80, deadline=None)
@given(rounds_st)
def test_merged_trigram_equals_the_cold_build_over_merges_forgetting_pruning_and_growth(case):
    n, rounds, first, seed = case
    rng = np.random.default_rng(seed)
    t, s = counts_of(n, [[x % n for x in seq] for seq in first])
    kn = KneserNeyTrigram(t, s)
    for grow, f, prune, seqs in rounds:
        before = _rows(kn)
        m = n + grow
        t_new, s_new = counts_of(m, [[x % m for x in seq] for seq in seqs])
        old = _pruned(t, rng) if prune else t
        old = Triples(m, old.codes, old.weights * f)
        t, s, n = old + t_new, s.scaled(f).with_alphabet(m) + s_new, m
        # the change given (as a refit's plan passes it) and computed by the merge itself
        up = KneserNeyTrigram.updated(kn, t, s, triples_change(kn.triples, t))
        again = KneserNeyTrigram.updated(kn, t, s)
        cold = KneserNeyTrigram(t, s)
        want = _rows(cold)
        np.testing.assert_allclose(_rows(up), want, rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(_rows(again), want, rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(up.discounts, cold.discounts, rtol=1e-12)
        np.testing.assert_allclose(up.start_discounts, cold.start_discounts, rtol=1e-12)
        assert up._top.keys.size == cold._top.keys.size  # the same entries: none kept when gone
        np.testing.assert_array_equal(up._top.keys, cold._top.keys)
        # the previous trigram keeps predicting what it did while the new one is built
        np.testing.assert_array_equal(_rows(kn), before)
        kn = up  # the next round merges into the merged one


def test_merge_does_not_sort_the_triples(monkeypatch):
    """The point of the merge: no sort of the nnz keys (the cold build's argsort)."""
    rng = np.random.default_rng(0)
    n = 40
    seqs = [rng.integers(0, n, 3000).tolist()]
    t, s = counts_of(n, seqs)
    kn = KneserNeyTrigram(t, s)
    t2, s2 = counts_of(n, [rng.integers(0, n, 30).tolist()])
    t, s = t + t2, s + s2
    sizes = []
    real = np.argsort

    def spy(a, *args, **kw):
        sizes.append(np.size(a))
        return real(a, *args, **kw)

    monkeypatch.setattr(np, "argsort", spy)
    up = KneserNeyTrigram.updated(kn, t, s)
    assert max(sizes, default=0) < t.nnz // 10  # only the change's few keys were sorted
    sizes.clear()
    cold = KneserNeyTrigram(t, s)
    assert max(sizes) >= t.nnz  # the spy sees the cold build's sort
    np.testing.assert_allclose(_rows(up), _rows(cold), rtol=1e-12)


def test_a_pickled_trigram_without_its_counts_is_rebuilt_cold():
    t, s = counts_of(3, [[0, 1, 2, 0, 1, 2, 1]])
    kn = KneserNeyTrigram(t, s)
    del kn._top_counts  # a trigram from before the merge existed
    t2, s2 = counts_of(3, [[2, 1, 0, 2]])
    up = KneserNeyTrigram.updated(kn, t + t2, s + s2)
    np.testing.assert_allclose(_rows(up), _rows(KneserNeyTrigram(t + t2, s + s2)), rtol=1e-12)


def test_a_warm_refit_with_the_backoff_merges_its_trigram_from_the_previous_one(monkeypatch):
    """The refitter's path: ``fit_with_state(acc, init=state)`` with the default backoff hands
    the plan's change to the trigram's merge (no second diff of the counts), and the refit's
    trigram is the cold trigram of all the counts, forgetting included."""
    from streamspec import HMM, MomentAccumulator, SpectralEstimator

    x = HMM.random(3, 25, random_state=5).sample(42_000, random_state=6)
    acc = MomentAccumulator(25, forgetting=0.99999)
    acc.learn_many(x[:40_000])
    first, state = SpectralEstimator(rank=3).fit_with_state(acc)
    acc.learn_many(x[40_000:])
    calls = []
    real = KneserNeyTrigram.updated.__func__

    def spy(cls, previous, triples, starts=None, change=None):
        calls.append((previous, change))
        return real(cls, previous, triples, starts, change)

    monkeypatch.setattr(KneserNeyTrigram, "updated", classmethod(spy))
    est = SpectralEstimator(rank=3)
    model = est.fit(acc, init=state)
    assert est.refit_.path == "warm"
    assert len(calls) == 1 and calls[0][0] is first.backoff.trigram and calls[0][1] is not None
    cold = KneserNeyTrigram(acc.triples(), acc.starts())
    np.testing.assert_allclose(_rows(model.backoff.trigram), _rows(cold), rtol=1e-10)
    assert not np.allclose(_rows(first.backoff.trigram), _rows(cold), rtol=1e-6)
