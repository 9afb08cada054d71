"""A rechoice of ``rank="auto"`` tries the ranks near the previous one first."""

from types import SimpleNamespace

import numpy as np

from streamspec import SpectralEstimator
from streamspec.core import rank_selection
from streamspec.core.defaults import filter_window
from streamspec.core.hmm import HMM
from streamspec.core.triples import Triples


def _counts(states: int, seed: int = 0) -> Triples:
    x = HMM.random(states, 40, random_state=seed, concentration=0.2).sample(60_000, random_state=1)
    return Triples.from_arrays(40, x[:-2], x[1:-1], x[2:])


def _spy(monkeypatch) -> list:
    calls, real = [], rank_selection.select_rank

    def select(triples, **kwargs):
        k, scores = real(triples, **kwargs)
        calls.append((kwargs.get("k_max"), k, scores))
        return k, scores

    monkeypatch.setattr(rank_selection, "select_rank", select)
    return calls


def _previous(rank: int, chosen_on: float) -> SimpleNamespace:
    return SimpleNamespace(rank=rank, metadata={rank_selection.RANK_CHOSEN_ON: f"{chosen_on:.0f}"})


def test_a_rechoice_inside_the_near_ranks_scores_only_them(monkeypatch):
    t = _counts(3)
    calls = _spy(monkeypatch)
    k, scores, meta = rank_selection.resolve_rank(SpectralEstimator(), t, _previous(6, t.total / 4))
    assert [c[0] for c in calls] == [rank_selection.near_rank(6)]  # one selection, capped
    assert max(scores) <= rank_selection.near_rank(6) and k < max(scores)
    assert meta == {rank_selection.RANK_CHOSEN_ON: f"{t.total:.0f}"}


def test_a_best_rank_at_the_edge_of_the_near_ones_scores_them_all(monkeypatch):
    t = _counts(12, seed=2)
    full_k, full_scores = rank_selection.select_rank(t, min_proba=SpectralEstimator().min_proba,
                                                     window=filter_window(SpectralEstimator().window))
    assert full_k >= rank_selection.near_rank(1)  # the counts need at least the largest near rank
    calls = _spy(monkeypatch)
    k, scores, _ = rank_selection.resolve_rank(SpectralEstimator(), t, _previous(1, t.total / 4))
    assert [c[0] for c in calls] == [rank_selection.near_rank(1), None]
    assert calls[0][1] == max(calls[0][2])  # the capped choice was at its edge
    assert (k, scores) == (full_k, full_scores)  # then the full selection decides
    assert np.isfinite(list(scores.values())).all()
