"""rank="auto" scores the ranks near the noise's first, the far ones only when the best is the largest."""

from __future__ import annotations

import numpy as np
import pytest

from streamspec import SpectralHMM
from streamspec.core import rank_selection
from streamspec.core.triples import Triples
from streamspec.experiments.cluster_walks import cluster_sessions

GRID = [1, 2, 3, 4, 6, 9, 14, 21, 32, 48, 64]


def _triples(events: list[tuple[dict, int]], n: int) -> Triples:
    """The triples of each user's stream (the river benchmark's keyed stream)."""
    streams: dict[int, list[int]] = {}
    for x, y in events:
        streams.setdefault(x["user"], []).append(y)
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
    t = _triples(cluster_sessions(10_000, seed=0), 2_000)
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
    for x, y in cluster_sessions(10_000, seed=0):
        model.learn_one(x, y)
    assert model.refitter.n_fits == 1
    assert model.rank_ <= rank_selection.near_rank(8)
