"""The estimator an online learner refits: θ_spec, θ_M or a template, with its rank and HMM."""

from __future__ import annotations

from typing import Any

from streamspec.core import defaults
from streamspec.core.mestimator import MEstimator
from streamspec.core.params import clone, get_params
from streamspec.core.spectral import SpectralEstimator

__all__ = ["ESTIMATORS", "check_estimator", "online_estimator"]

ESTIMATORS = ("spectral", "m")


def check_estimator(est: Any) -> None:
    """Refuse anything but ``"spectral"``, ``"m"`` or an object with a ``fit`` method. O(1)."""
    if isinstance(est, str) and est not in ESTIMATORS:
        raise ValueError(f"estimator must be 'spectral', 'm' or an estimator, got {est!r}")
    if not isinstance(est, str) and not callable(getattr(est, "fit", None)):
        raise ValueError(f"estimator must be 'spectral', 'm' or an estimator, got {est!r}")


def online_estimator(est: Any, *, rank: int | str, window: int | str, min_proba: float,
                     n_states: int | None):
    """The estimator :class:`~streamspec.adapters.river_model.SpectralHMM` refits. O(1).

    ``est``: ``"spectral"`` (:class:`~streamspec.SpectralEstimator`) or ``"m"``
    (:class:`~streamspec.MEstimator`), both with this ``rank``, window filter,
    ``min_proba`` and ``hmm_states=n_states`` (``"auto"`` when ``None``); or an estimator
    object, cloned (the learner never edits the caller's) with its ``window`` and
    ``hmm_states`` set where it has them.

    Examples
    --------
    >>> online_estimator("m", rank=3, window=2, min_proba=1e-3, n_states=4).hmm_states
    4
    """
    states = defaults.HMM_STATES if n_states is None else n_states
    if isinstance(est, str):
        kwargs = {"rank": rank, "filter": "window", "window": window, "min_proba": min_proba,
                  "hmm_states": states}
        return SpectralEstimator(**kwargs) if est == "spectral" else MEstimator(**kwargs)
    params = get_params(est)
    changes = {k: v for k, v in (("window", window), ("hmm_states", states)) if k in params}
    return clone(est, **changes)
