"""One copy of the grams per fit: each window spectrum computed once per fit, kept on the counts.

The window Hankels' singular values live on the :class:`WindowCounts` object a fit reads
(``_ranks``), not in a module cache: an accumulator gives the same object while its counts
are unchanged, so every reader of one fit (window choice, the HMM's size, its EM window) shares
them, and fits on other counts (or on equal counts of another accumulator) never do.
"""

from __future__ import annotations

import hashlib
import pickle
from collections import Counter

import numpy as np
import pytest
from test_backoff_windows import automaton
from window_data import keyed_counts

from streamspec import MEstimator, MomentAccumulator, SpectralEstimator
from streamspec.core import window_rank
from streamspec.core.hmm import HMM


def _digest(H) -> str:
    H = H.tocsr()
    H.sort_indices()
    return hashlib.sha1(b"".join(np.ascontiguousarray(a).tobytes()
                                 for a in (H.data, H.indices, H.indptr))).hexdigest()


@pytest.fixture
def svds(monkeypatch) -> Counter:
    """Every SVD the rank code runs, by (Hankel contents, shape, values asked for)."""
    calls: Counter = Counter()
    dense, top = window_rank.dense_singular_values, window_rank.top_singular

    def counted_dense(H):
        calls[(_digest(H), H.shape, "all")] += 1
        return dense(H)

    def counted_top(H, k, *args, **kwargs):
        calls[(_digest(H), H.shape, k)] += 1
        return top(H, k, *args, **kwargs)

    monkeypatch.setattr(window_rank, "dense_singular_values", counted_dense)
    monkeypatch.setattr(window_rank, "top_singular", counted_top)
    return calls


# (counts, window and rank main chose before the module cache went: 761be8e)
_CASES = {
    # l = 2: the windows' path (the model, then the HMM over the same grams)
    "automaton": (lambda: keyed_counts(automaton(), "auto", 30_000, 1, length=20, keys=8), (2, 5)),
    # l = 1: the window choice reads the grams, then the triples' path (MEstimator clones
    # itself to choose the rank) reads them again for the HMM's size: one copy was two
    "two states": (lambda: keyed_counts(HMM.random(2, 4, random_state=1), "auto", 20_000, 1,
                                        length=20, keys=4), (1, 1)),
}


@pytest.mark.parametrize("case", sorted(_CASES))
@pytest.mark.parametrize("make", [MEstimator, SpectralEstimator])
def test_an_auto_fit_computes_each_window_spectrum_once(svds, case, make):
    counts, expected = _CASES[case]
    acc = counts()
    grams = acc.windows()
    assert acc.current_window == 4 and grams._ranks is None
    est = make(rank="auto")
    model = est.fit(acc)
    assert (est.window_, est.rank_) == expected  # the values main chose: same ranks, same fit
    assert model.backoff is not None and model.backoff.hmm is not None
    assert len(svds) >= 4  # windows 1..4 of the grams, and of the HMM's kept sample
    assert max(svds.values()) == 1, [v for v in svds.values() if v > 1]
    # the fit read the accumulator's one object: its memo holds every window chosen among
    assert acc.windows() is grams and sorted(grams._ranks) == [1, 2, 3, 4]


class _Copying(MomentAccumulator):
    """An accumulator whose every ``windows()`` is a fresh copy: only the fit's own threading of
    one object can keep its spectra to one SVD each."""

    def windows(self):
        g = super().windows()
        return type(g)(g.n, g.window, g.codes.copy(), g.weights.copy())


@pytest.mark.parametrize("make", [MEstimator, SpectralEstimator])
def test_a_fit_reads_the_grams_once_and_passes_them_down(svds, make):
    acc = _CASES["two states"][0]()
    acc.__class__ = _Copying
    assert acc.windows() is not acc.windows()
    est = make(rank="auto")
    est.fit(acc)
    assert (est.window_, est.rank_) == _CASES["two states"][1]
    assert len(svds) >= 4 and max(svds.values()) == 1, [v for v in svds.values() if v > 1]


def test_fits_on_other_counts_never_share_a_memo(svds):
    truth = automaton()

    def counts(seed: int) -> MomentAccumulator:
        return keyed_counts(truth, "auto", 20_000, seed, length=20, keys=8)

    first, other, again = counts(1), counts(2), counts(1)  # `again`: equal to `first`, not it
    assert first.windows() == again.windows() and first.windows() != other.windows()
    fitted = []
    for acc in (first, other, again):
        svds.clear()
        est = MEstimator(rank="auto")
        est.fit(acc)
        fitted.append(((est.window_, est.rank_), sum(svds.values()), dict(acc.windows()._ranks)))
    (choice, n_first, memo), (_, n_other, memo_other), (choice_again, n_again, memo_again) = fitted
    assert n_first > 0 and n_other > 0
    # equal counts of another accumulator: computed afresh (a content-keyed cache gave 0), the same
    assert n_again == n_first and choice_again == choice
    spectra = [memo, memo_other, memo_again]
    assert all(a[level] is not b[level] for i, a in enumerate(spectra) for b in spectra[i + 1:]
               for level in a.keys() & b.keys())
    # later fits left the first one's memo as it was
    assert first.windows()._ranks == memo and all(first.windows()._ranks[k] is v for k, v in memo.items())


def test_the_accumulator_gives_one_snapshot_while_its_counts_are_unchanged():
    acc = MomentAccumulator(n_symbols=3, window=2, forgetting=0.99)
    acc.learn_many([0, 1, 2, 0, 1, 1, 2])
    g = acc.windows()
    saved = g.codes.copy(), g.weights.copy()
    assert acc.windows() is g and acc.triples().total == pytest.approx(g.triples().total)
    with pytest.raises(ValueError):
        g.weights[0] = 1.0  # read-only: the snapshot is shared by every reader of a fit
    acc.learn_one(2)
    h = acc.windows()
    assert h is not g and h.total > g.total
    np.testing.assert_array_equal(g.codes, saved[0])  # the old snapshot did not move
    np.testing.assert_array_equal(g.weights, saved[1])
    acc.learn_many([0, 2, 1, 0])
    h2 = acc.windows()
    assert h2 is not h and acc.windows() is h2
    grown = MomentAccumulator(window="auto")  # a growing alphabet: the window is reduced
    grown.learn_many(list(range(4)) * 3)
    before = grown.windows()
    grown.learn_many(list(range(4, 40)))
    after = grown.windows()
    assert after is not before and after.window < before.window


def test_a_pickled_accumulator_leaves_its_snapshot_and_loads_older_pickles():
    acc = MomentAccumulator(n_symbols=3, window=1)
    for x in np.random.default_rng(0).integers(0, 3, 20_000).tolist():
        acc.learn_one(x, key="k")  # buffered in the dense array (small alphabet)
    assert acc._dense is not None
    # a pickle of before: the dense buffer's alphabet size in its own attribute, no snapshot
    state = pickle.loads(pickle.dumps(acc.__dict__))
    state.pop("_windows_view")
    state["_dense"], state["_dense_m"] = state["_dense"][0], state["_dense"][1]
    older = MomentAccumulator.__new__(MomentAccumulator)
    older.__setstate__(state)
    grams = acc.windows()
    assert window_rank.level_rank(grams, 1) >= 0 and grams._ranks is not None
    copy = pickle.loads(pickle.dumps(acc))
    assert copy._windows_view is None and copy.windows() == grams and copy.windows()._ranks is None
    assert older.windows() == grams
    for a in (acc, older):
        for x in [1, 2, 0, 1] * 3000:
            a.learn_one(x, key="k")
    assert older.windows() == acc.windows() != grams and len(vars(older)) == len(vars(acc))


def test_another_estimator_on_unchanged_counts_computes_no_spectrum_again(svds):
    # the grams are the accumulator's same snapshot, and the HMM's held-out split the same
    # part of it (same fraction, same generator state): every spectrum is the first fit's
    acc = _CASES["automaton"][0]()
    first = MEstimator(rank="auto")
    first.fit(acc)
    computed = sum(svds.values())
    svds.clear()
    second = SpectralEstimator(rank="auto")
    second.fit(acc)
    assert computed >= 7 and sum(svds.values()) == 0, svds  # windows 1..4, and 2..4 kept
    assert (second.window_, second.rank_) == (first.window_, first.rank_) == _CASES["automaton"][1]
    # a fixed window reads the marginal, a new object each fit, made by the same rule
    MEstimator(count_window=3).fit(acc)
    svds.clear()
    plain = SpectralEstimator(backoff=None, count_window=3)
    plain.fit(acc)
    assert sum(svds.values()) == 0 and plain.window_ == 3, svds
    acc.learn_many([0, 1, 2, 3] * 50, key="more")
    acc.end("more")
    MEstimator(rank="auto").fit(acc)  # other counts: computed afresh
    assert sum(svds.values()) >= 7
