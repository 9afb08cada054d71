"""The named steps of one θ_M fit, which :meth:`MEstimator.fit` runs in order.

:class:`~streamspec.core.mestimator.MEstimator` is the template (as hmmlearn's
``BaseHMM.fit``): it runs ``prepare → initial_estimate → iterate → finish`` on the steps
of the formulation it resolved, :class:`~streamspec.core.projected.ProjectedFit` or
:class:`~streamspec.core.dense.DenseFit`. Each outer iteration of ``iterate`` is
Algorithm 1's: re-estimate the weighting W, take the R-step under it (Algorithm 2's
sweeps, dense), accept the step or reject it and stop.

The steps read the estimator's settings and never write them: everything a fit
computes lives on its steps object until ``finish`` hands back the model and the
fitted attributes, so one estimator can fit in several threads at once.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

__all__ = ["FitSteps"]


class FitSteps(ABC):
    """The steps of one fit of one formulation (subclasses implement each step).

    Parameters
    ----------
    est
        The estimator whose settings are read (never written).
    max_outer
        Outer iterations (re-estimations of W) at most.
    """

    def __init__(self, est: Any, max_outer: int):
        self.est, self.max_outer = est, max_outer

    @abstractmethod
    def prepare(self) -> None:
        """Moments, rank and the fixed parts of the problem (no estimate yet)."""

    @abstractmethod
    def initial_estimate(self, init: Any) -> None:
        """The estimate the first outer iteration starts from: warm from ``init`` or cold."""

    @abstractmethod
    def iterate(self) -> None:
        """The outer iterations: weighting, R-step, acceptance, until converged or rejected."""

    @abstractmethod
    def finish(self) -> tuple[Any, dict[str, Any]]:
        """``(model, fitted attributes)``: the model and the ``name_`` values the estimator sets."""
