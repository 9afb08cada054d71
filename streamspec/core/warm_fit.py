"""One projected fit, cold or warm, for either estimator: the steps run in order, and the backoff.

Both :class:`~streamspec.SpectralEstimator` and the projected
:class:`~streamspec.MEstimator` fit through here. Given a previous fit's
:class:`~streamspec.core.projected_state.ProjectedState`, :func:`plan_for` decides the
refit's path (:func:`~streamspec.core.projected_warm.plan_refit`); ``"warm"`` runs
:class:`~streamspec.core.projected_warm.WarmProjectedFit`, the others a cold
:class:`~streamspec.core.projected.ProjectedFit` (``"rebased"`` with the new bases
given, so without an SVD). A warm refit with the backoff keeps the previous model's
mixing weights and rebuilds only the Kneser–Ney bigram of the new counts (its pairs are
the index's, no sort): choosing the weights again needs two more fits on held-out
counts, which a cold fit does (docs/math.md section 9).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from streamspec.core.backoff import Backoff, KneserNeyBigram, fit_with_backoff
from streamspec.core.model import ObservableOperatorModel
from streamspec.core.pair_index import PairIndex
from streamspec.core.projected import ProjectedFit
from streamspec.core.projected_state import ProjectedSettings, ProjectedState, RefitInfo
from streamspec.core.projected_warm import WarmPlan, WarmProjectedFit, plan_refit
from streamspec.core.triples import Triples

__all__ = ["FitResult", "state_of", "plan_for", "run_steps", "cold_fit", "warm_fit",
           "rebased_bases", "fit_projected", "bigram_of"]


@dataclass
class FitResult:
    """A fitted model and the attributes its estimator takes (``state_`` and ``refit_`` among them)."""

    model: ObservableOperatorModel
    fitted: dict[str, Any] = field(default_factory=dict)


def state_of(init: Any) -> ProjectedState | None:
    """The warm state in ``init``: a :class:`ProjectedState`, or a fitted estimator's ``state_``."""
    state = getattr(init, "state_", init)
    return state if isinstance(state, ProjectedState) else None


def plan_for(state: ProjectedState | None, triples: Triples, settings: ProjectedSettings
             ) -> WarmPlan | None:
    """The refit's plan (None without a state). See :func:`~streamspec.core.projected_warm.plan_refit`."""
    return None if state is None else plan_refit(state, triples, settings)


def run_steps(steps: ProjectedFit, init: Any = None) -> FitResult:
    """``prepare → initial_estimate → iterate → finish`` (:mod:`streamspec.core.fit_steps`)."""
    steps.prepare()
    steps.initial_estimate(init)
    steps.iterate()
    model, fitted = steps.finish()
    return FitResult(model, fitted)


def rebased_bases(plan: WarmPlan | None, triples: Triples, settings: ProjectedSettings,
                  k: int) -> dict:
    """The bases cache of :class:`ProjectedFit` holding a rebased plan's bases (else empty)."""
    if plan is None or plan.refined is None:
        return {}
    r = plan.refined
    key = (id(triples), settings.rank, settings.n_conditions, settings.per_rank)
    return {key: (k, r.U, r.s, r.V)}


def cold_fit(settings: ProjectedSettings, max_outer: int, triples: Triples, labels, *,
             bases: dict | None = None, scored_only: bool = False, keep_state: bool = False,
             info: RefitInfo | None = None, init: Any = None) -> FitResult:
    """A cold projected fit (the bases from ``bases`` when given there)."""
    steps = ProjectedFit(settings, max_outer, triples, labels, bases, scored_only, keep_state)
    if info is not None:
        steps.info = info
    return run_steps(steps, init)


def bigram_of(triples: Triples, index: PairIndex | None = None) -> KneserNeyBigram:
    """The interpolated Kneser–Ney bigram of the pairs (x2, x3) of the counts: the pairs of
    the index are already sorted and distinct, so this is O(nnz), without a sort."""
    idx = index if index is not None else PairIndex(triples)
    counts = np.add.reduceat(idx.weights, idx.pair_starts[:-1]) if idx.nnz else np.zeros(0)
    pairs = idx.px2.astype(np.int64) * idx.n + idx.px3
    keep = counts > 0
    return KneserNeyBigram(idx.n, pairs[keep], counts[keep])


def warm_fit(settings: ProjectedSettings, max_outer: int, triples: Triples, labels,
             state: ProjectedState, plan: WarmPlan, *, keep_state: bool = False,
             backoff: str | None = None) -> FitResult:
    """The kept-bases refit; with ``backoff="auto"`` the previous mixing weights and the
    bigram of the new counts are attached (when the previous model had a backoff)."""
    steps = WarmProjectedFit(settings, max_outer, triples, labels, state, plan, keep_state)
    if backoff == "auto" and state.backoff is not None:
        steps.backoff = Backoff(bigram_of(triples), state.backoff.lambdas)
    result = run_steps(steps)
    new_state = result.fitted.get("state_")
    if new_state is not None:
        new_state.backoff, new_state.choice = result.model.backoff, state.choice
    return result


def fit_projected(settings: ProjectedSettings, max_outer: int, triples: Triples, labels,
                  state: ProjectedState | None = None, *, keep_state: bool = False,
                  backoff: str | None = None, random_state: int | None = 0) -> FitResult:
    """θ_spec's fit (one candidate): warm from ``state`` when its plan says so, else cold,
    with the backoff chosen on held-out counts when ``backoff="auto"``
    (:func:`~streamspec.core.backoff.fit_with_backoff`, which fits twice)."""
    plan = plan_for(state, triples, settings)
    if plan is not None and plan.info.path == "warm":
        return warm_fit(settings, max_outer, triples, labels, state, plan, keep_state=keep_state,
                        backoff=backoff)
    bases = rebased_bases(plan, triples, settings, state.k if state is not None else 0)
    info = plan.info if plan is not None else None
    if backoff is None:
        return cold_fit(settings, max_outer, triples, labels, bases=bases, keep_state=keep_state,
                        info=info)
    final: dict[str, FitResult] = {}

    def fit(t: Triples) -> ObservableOperatorModel:
        whole = t is triples
        res = cold_fit(settings, max_outer, t, labels, bases=bases if whole else None,
                       scored_only=not whole, keep_state=keep_state and whole,
                       info=info if whole else None)
        if whole:
            final["result"] = res
        return res.model

    model = fit_with_backoff(fit, triples, random_state=random_state)
    result = final["result"]
    result.model = model
    if "state_" in result.fitted:
        result.fitted["state_"].backoff, result.fitted["state_"].choice = model.backoff, "spectral"
    return result
