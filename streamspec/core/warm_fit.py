"""One projected fit, cold or warm, for either estimator: the steps run in order, and the backoff.

Both :class:`~streamspec.SpectralEstimator` and the projected
:class:`~streamspec.MEstimator` fit through here. Given a previous fit's
:class:`~streamspec.core.projected_state.ProjectedState`, :func:`plan_for` decides the
refit's path (:func:`~streamspec.core.projected_warm.plan_refit`); ``"warm"`` runs
:class:`~streamspec.core.projected_warm.WarmProjectedFit`, the others a cold
:class:`~streamspec.core.projected.ProjectedFit` (``"rebased"`` with the new bases
given, so without an SVD). With the backoff, the fit goes through
:func:`~streamspec.core.backoff_fit.fit_with_backoff`: a refit (a previous model with a
backoff) fits the model once, on all the counts, and keeps the previous weights; a
first fit also fits it on 90% of the counts to score it (docs/math.md section 10).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Any

from streamspec.core.backoff_fit import fit_with_backoff
from streamspec.core.model import ObservableOperatorModel
from streamspec.core.projected import ProjectedFit
from streamspec.core.projected_state import ProjectedSettings, ProjectedState, RefitInfo
from streamspec.core.projected_warm import WarmPlan, WarmProjectedFit, plan_refit
from streamspec.core.triples import Triples

__all__ = ["FitResult", "state_of", "previous_model", "plan_for", "run_steps", "cold_fit",
           "rebased_bases", "fit_projected", "with_state", "drop_cached"]


def with_state(fit):
    """Mark an estimator's ``fit`` as the one its ``fit_with_state`` keeps a state for, so that a
    refitter hands it the previous state (a subclass overriding ``fit`` loses the mark). O(1)."""
    fit.keeps_state = True
    return fit


@dataclass
class FitResult:
    """A fitted model and the attributes its estimator takes (``state_`` and ``refit_`` among them)."""

    model: ObservableOperatorModel
    fitted: dict[str, Any] = field(default_factory=dict)


def state_of(init: Any) -> ProjectedState | None:
    """The warm state in ``init``: a :class:`ProjectedState`, or a fitted estimator's ``state_``."""
    state = getattr(init, "state_", init)
    return state if isinstance(state, ProjectedState) else None


def previous_model(init: Any, state: ProjectedState | None = None) -> ObservableOperatorModel | None:
    """The previous model behind a refit's ``init``: the state's, the model itself, or a fitted
    estimator's ``model_`` (None for a cold fit)."""
    if state is not None:
        return state.model
    if isinstance(init, ObservableOperatorModel):
        return init
    found = getattr(init, "model_", None)
    return found if isinstance(found, ObservableOperatorModel) else None


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
             info: RefitInfo | None = None, init: Any = None,
             reference: Triples | None = None) -> FitResult:
    """A cold projected fit (the bases from ``bases`` when given there; ``reference``: the
    counts ``triples`` are a part of, whose bases start this fit's, :class:`ProjectedFit`)."""
    steps = ProjectedFit(settings, max_outer, triples, labels, bases, scored_only, keep_state,
                         reference)
    if info is not None:
        steps.info = info
    return run_steps(steps, init)


def drop_cached(bases: dict | None, fitted: Triples, whole: Triples,
                model: ObservableOperatorModel | None = None) -> None:
    """Free what the bases cache holds once it is no longer needed: after the fit of a part of
    the counts (the backoff's 90%) its entries; after the fit of all of them everything (the
    cache then only kept a :class:`~streamspec.core.pair_index.PairIndex`, ~50 bytes a distinct
    triple, alive while the backoff's trigram is built). The part's ``model``: its operators
    are left as ``"spare"``, which the fit of all the counts writes its own into once the
    part's model is gone (:meth:`~streamspec.core.projected.ProjectedFit._spare_operators`).
    O(entries)."""
    if bases is None:
        return
    if fitted is whole:
        bases.clear()
        return
    for key in [key for key in bases
                if isinstance(key, tuple) and key[1 if key[0] == "index" else 0] == id(fitted)]:
        del bases[key]
    ops, right = model.operator_factors if model is not None else (None, None)
    if ops is not None and right is None:  # why the weak reference: reused once the model is gone
        bases["spare"] = ops
        bases["spare_of"] = weakref.ref(model)


def _trigram_change(plan: WarmPlan | None, state: ProjectedState | None, previous):
    """The plan's change of the counts when it is the change since the previous model's trigram
    (built from the state's count arrays, the same objects), so that the trigram's merge does not diff
    the counts again (O(nnz) searches, ~2 s at 9 · 10⁶ triples). Else None. O(1)."""
    if plan is None or plan.change is None or state is None:
        return None
    built = getattr(getattr(getattr(previous, "backoff", None), "trigram", None), "triples", None)
    # why the arrays: the state wraps the fit's count arrays in a Triples of its own
    same = (built is not None and built.n == state.triples.n and built.codes is state.triples.codes
            and built.weights is state.triples.weights)
    return plan.change if same else None


def fit_projected(settings: ProjectedSettings, max_outer: int, triples: Triples, labels,
                  state: ProjectedState | None = None, *, keep_state: bool = False,
                  backoff: str | None = None, random_state: int | None = 0, starts=None,
                  hmm_states: int | str | None = "auto", previous=None, init: Any = None,
                  grams=None) -> FitResult:
    """A projected fit of ``triples``: warm from ``state`` when its plan says so, else cold
    (with the plan's bases when it rebased, and its reason); with ``backoff="auto"``
    through :func:`~streamspec.core.backoff_fit.fit_with_backoff` (``starts``,
    ``hmm_states``, ``previous``, ``grams``: its arguments). ``init``: factors a cold fit starts its
    weighting from (θ_M). Returns the model and the fitted attributes; ``state_`` (with
    ``keep_state``) is that of the fit on all the counts."""
    plan = plan_for(state, triples, settings)
    bases = rebased_bases(plan, triples, settings, state.k if state is not None else 0)
    final: dict[str, FitResult] = {}

    def fit(t: Triples) -> ObservableOperatorModel:
        whole = t is triples
        if whole and plan is not None and plan.info.path == "warm":
            result = run_steps(WarmProjectedFit(settings, max_outer, t, labels, state, plan,
                                                keep_state))
        else:
            # why the same cache for the 90%: its bases start from those of all the counts,
            # computed (and kept for the fit on all of them) first
            result = cold_fit(settings, max_outer, t, labels, bases=bases,
                              scored_only=not whole, keep_state=keep_state and whole,
                              info=plan.info if whole and plan is not None else None, init=init,
                              reference=None if whole else triples)
        drop_cached(bases, t, triples, result.model)
        if whole:
            final["result"] = result
        return result.model

    if backoff is None:
        fit(triples)
        return final["result"]
    model = fit_with_backoff(fit, triples, starts, random_state=random_state,
                             hmm_states=hmm_states, previous=previous, grams=grams,
                             changed=None if plan is None else plan.info.changed,
                             change=_trigram_change(plan, state, previous), filter_window=settings.window)
    result = final["result"]
    result.model = model
    if "state_" in result.fitted:  # the next refit starts from this model, backoff and all
        result.fitted["state_"].model = model
    return result
