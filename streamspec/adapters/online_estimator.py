"""The estimator an online learner refits: θ_spec, θ_M or a template, with its rank and HMM."""

from __future__ import annotations

from typing import Any

from streamspec.adapters.rank_selector import RANK_GRID, RankScores, RankSelector
from streamspec.core.mestimator import MEstimator
from streamspec.core.params import clone
from streamspec.core.spectral import SpectralEstimator
from streamspec.streaming.with_hmm import WithHMM

__all__ = ["ESTIMATORS", "check_estimator", "online_estimator"]

ESTIMATORS = ("spectral", "m")


def check_estimator(est: Any) -> None:
    """Refuse anything but ``"spectral"``, ``"m"`` or an object with a ``fit`` method. O(1)."""
    if isinstance(est, str) and est not in ESTIMATORS:
        raise ValueError(f"estimator must be 'spectral', 'm' or an estimator, got {est!r}")
    if not isinstance(est, str) and not callable(getattr(est, "fit", None)):
        raise ValueError(f"estimator must be 'spectral', 'm' or an estimator, got {est!r}")


def online_estimator(est: Any, *, rank: int | str, window: int, min_proba: float,
                     n_states: int | None, sweeps: int, scores: RankScores):
    """The estimator :class:`~streamspec.adapters.river_model.SpectralHMM` refits. O(1).

    ``est``: ``"spectral"`` (:class:`~streamspec.SpectralEstimator`), ``"m"``
    (:class:`~streamspec.MEstimator`), both with this ``rank``, window filter and
    ``min_proba``, or an estimator object (cloned: the learner never edits the
    caller's). ``rank="auto"`` wraps it in a :class:`RankSelector` sharing ``scores``;
    ``n_states`` in a :class:`~streamspec.streaming.with_hmm.WithHMM`.
    """
    auto = isinstance(rank, str) and rank == "auto"  # settings checked by SpectralHMM._validate
    if isinstance(est, str):
        kwargs = {"rank": 1 if auto else rank, "filter": "window", "window": window,
                  "min_proba": min_proba}
        est = SpectralEstimator(**kwargs) if est == "spectral" else MEstimator(**kwargs)
    else:
        est = clone(est)
    if auto:
        est = RankSelector(est, ranks=RANK_GRID, scores=scores)
    if n_states is not None:
        est = WithHMM(est, n_states=n_states, sweeps=sweeps)
    return est
