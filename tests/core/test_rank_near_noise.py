"""rank="auto" scores the ranks near the noise's first, the far ones only when the best is the largest."""

from __future__ import annotations

import numpy as np
import pytest

from streamspec import SpectralHMM
from streamspec.core import rank_selection
from streamspec.core.triples import Triples

GRID = [1, 2, 3, 4, 6, 9, 14, 21, 32, 48, 64]


def _cluster_walks(n_events: int, seed: int, n_symbols: int = 2_000, n_keys: int = 1_000,
                   n_clusters: int = 8) -> list[tuple[int, int]]:
    """``(key, symbol)`` events: each key a sticky walk over clusters of a Zipf(1.1) alphabet
    (the river benchmark's stream: few counts per symbol, 8 hidden directions)."""
    rng = np.random.default_rng(seed)
    p = 1 / np.arange(1, n_symbols + 1) ** 1.1
    p /= p.sum()
    perm = [rng.permutation(n_symbols) for _ in range(n_clusters)]
    state = rng.integers(0, n_clusters, n_keys)
    keys = rng.integers(n_keys, size=n_events)
    moves = rng.random(n_events) < 0.1
    ranks = rng.choice(n_symbols, size=n_events, p=p)
    events = []
    for k, move, r in zip(keys.tolist(), moves.tolist(), ranks.tolist(), strict=True):
        if move:
            state[k] = rng.integers(n_clusters)
        events.append((k, int(perm[state[k]][r])))
    return events


def _triples(events: list[tuple[int, int]], n: int) -> Triples:
    streams: dict[int, list[int]] = {}
    for k, x in events:
        streams.setdefault(k, []).append(x)
    parts = [np.asarray(s) for s in streams.values() if len(s) >= 3]
    return Triples.from_arrays(n, np.concatenate([s[:-2] for s in parts]),
                               np.concatenate([s[1:-1] for s in parts]),
                               np.concatenate([s[2:] for s in parts]))


def test_far_ranks_are_scored_only_when_the_near_best_is_the_largest():
    calls = []

    def u_shaped(k):  # least at 6: the ranks above near (20) are never scored
        calls.append(k)
        return abs(np.log(k / 6))

    scores = rank_selection.scored_near_first(GRID, 20, u_shaped)
    assert calls == [1, 2, 3, 4, 6, 9, 14] and min(scores, key=scores.get) == 6
    calls.clear()
    scores = rank_selection.scored_near_first(GRID, 20, lambda k: calls.append(k) or -k)
    assert calls == GRID and min(scores, key=scores.get) == 64  # the best lay further: all scored


def test_few_counts_over_a_large_alphabet_score_the_near_ranks_alone(monkeypatch):
    t = _triples(_cluster_walks(10_000, seed=0), 2_000)
    assert rank_selection.max_rank(t.n) == 64
    k, scores = rank_selection.select_rank(t)
    # 8 singular values above the noise: ranks up to near_rank(8) = 20, the best inside them
    assert sorted(scores) == [1, 2, 3, 4, 6, 9, 14] and k < 14
    monkeypatch.setattr(rank_selection, "near_rank", lambda r: 10**6)
    k_all, all_scores = rank_selection.select_rank(t)
    assert sorted(all_scores) == GRID
    # the same held-out contexts: the near ranks' scores are those of the full grid
    assert all(scores[r] == pytest.approx(all_scores[r], rel=1e-12) for r in scores)


def test_the_river_models_first_fit_keeps_a_near_rank():
    # on this stream (the river benchmark's, seed 0) every rank was scored at the first fit
    # (10,000 events) and 64 won by 0.008 nats, with 14 to 48 worse than 9
    model = SpectralHMM(key="user", refit_every=10_000)
    for k, x in _cluster_walks(10_000, seed=0):
        model.learn_one({"user": k}, x)
    assert model.refitter.n_fits == 1
    assert model.rank_ <= rank_selection.near_rank(8)
