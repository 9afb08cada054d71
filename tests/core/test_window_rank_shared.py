"""The window Hankels' singular values are computed once per (grams, window) and shared."""

from __future__ import annotations

import hashlib
from collections import Counter

import numpy as np
import pytest
import scipy.sparse as sp
from test_backoff_windows import automaton
from window_data import keyed_counts

from streamspec import SpectralEstimator
from streamspec.core import window_rank
from streamspec.core.hmm import HMM
from streamspec.core.subspace import DENSE_SVD_MAX
from streamspec.core.window_rank import count_above_noise, level_rank, noise_level, supported_rank
from streamspec.core.window_triples import WindowTriples


def _key(counts) -> tuple:
    digest = hashlib.sha1(counts.codes.tobytes() + counts.weights.tobytes()).hexdigest()
    return counts.n, counts.window, digest


def test_each_window_hankel_of_a_default_fit_is_computed_once(monkeypatch):
    # the model's window choice (kept and all grams), the HMM's size (all grams) and its EM
    # window (kept sample, then all grams) read the Hankels of the same marginals
    acc = keyed_counts(automaton(), "auto", 30_000, 1, length=20, keys=8)
    built = Counter()

    class Counting(WindowTriples):
        @classmethod
        def of(cls, counts):
            built[_key(counts)] += 1
            return WindowTriples.of(counts)

    monkeypatch.setattr(window_rank, "WindowTriples", Counting)
    model = SpectralEstimator().fit(acc)
    assert model.backoff.hmm is not None
    assert len(built) >= 4  # kept and all grams, several windows each
    assert max(built.values()) == 1, [c for c in built.values() if c > 1]


def _fresh(counts, max_rank: int) -> int:
    full = counts.full()
    H = sp.csr_matrix(WindowTriples.of(full).hankel())
    return count_above_noise(H, noise_level(H, full.total), max_rank)


@pytest.mark.parametrize("order", [(3, 40, 8, 129), (129, 8, 3, 40)])
def test_level_rank_gives_the_numbers_of_a_fresh_svd_in_any_order(order):
    # 40 symbols, pairs: more windows than the dense SVD takes, so the Lanczos path (whose
    # values for each k are kept) is the one replayed
    K, n = 20, 40  # sticky, each state emitting two symbols of its own: rank 20 > the first 16
    O = np.zeros((n, K))
    O[np.arange(n), np.arange(n) // 2] = 0.5
    truth = HMM(T=0.6 * np.eye(K) + 0.4 / K, O=0.5 * O + 0.5 / n)
    grams = keyed_counts(truth, 2, 200_000, 3, length=50, keys=2).windows()
    assert WindowTriples.of(grams.full()).size > DENSE_SVD_MAX
    fresh = [[_fresh(grams.marginal(level), m) for m in order] for level in (1, 2)]
    shared = [[level_rank(grams, level, m) for m in order] for level in (1, 2)]
    assert shared == fresh
    assert fresh[1][order.index(3)] == 4 and max(fresh[1]) > 16  # capped at 3 + 1; doubled past 16
    assert supported_rank(grams, order[0]) == fresh[1][0]  # the grams' own window, same cache
    assert sorted(grams._ranks) == [1, 2]
