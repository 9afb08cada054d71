"""MEstimator's fits that keep and reuse their state: cold, warm, rebased or fallen back.

:class:`StatefulFits` is the part of :class:`~streamspec.core.mestimator.MEstimator` that
routes a fit through a previous fit's
:class:`~streamspec.core.projected_state.ProjectedState` (docs/math.md section 9): the
plan of :func:`~streamspec.core.warm_fit.plan_for` decides, a warm plan runs
:func:`~streamspec.core.warm_fit.warm_fit`, any other the estimator's cold fit (with the
backoff's selection when it has one) with the plan's new bases when it found some.
"""

from __future__ import annotations

from streamspec.core.fit_data import triples_of
from streamspec.core.model import ObservableOperatorModel
from streamspec.core.projected_state import ProjectedState, settings_of
from streamspec.core.warm_fit import plan_for, rebased_bases, state_of, warm_fit

__all__ = ["StatefulFits"]


class StatefulFits:
    """``fit_with_state`` and the routing of ``fit(data, init=state)`` (mixed into MEstimator)."""

    def fit_with_state(self, data, init=None) -> tuple[ObservableOperatorModel, ProjectedState | None]:
        """:meth:`fit`, also returning what the next warm refit reuses (kept as ``state_``;
        None in the dense formulation). The state holds the counts fitted (16 bytes a
        distinct triple), O(n · k') floats, the weighted symbols' conditions and weighting
        blocks (O(k · k' + k'²) floats each); the operators are the model's."""
        return self._fit(data, init, keep_state=True)

    def _fit(self, data, init, keep_state: bool):
        self._validate()
        self.__dict__.pop("state_", None)
        formulation = self._resolved_formulation()
        state = state_of(init)
        if state is not None and formulation == "projected":
            return self._refit(data, state, keep_state)
        init = None if state is not None else init
        if self.backoff == "auto":
            model = self._fit_with_backoff(data, init, formulation, keep_state=keep_state)
        else:
            model = self._fit_plain(data, init, formulation, keep_state=keep_state)
        return model, getattr(self, "state_", None)

    def _refit(self, data, state: ProjectedState, keep_state: bool):
        """A refit from ``state``: warm when its plan says so, else cold with what the plan
        found (new bases, or nothing) and ``refit_`` saying why."""
        triples, labels = triples_of(data)
        twin = self.backoff == "auto" and state.choice == "spectral"
        est = self.clone(weighting="identity", backoff=None) if twin else self
        settings = settings_of(est)
        plan = plan_for(state, triples, settings)
        self.formulation_ = "projected"
        if plan.info.path == "warm":
            result = warm_fit(settings, est._max_outer(projected=True), triples, labels, state, plan,
                              keep_state=keep_state, backoff=self.backoff)
            for name, value in result.fitted.items():
                setattr(self, name, value)
            self.model_ = result.model
            if self.backoff == "auto":
                self.choice_ = state.choice
            return result.model, result.fitted.get("state_")
        bases = rebased_bases(plan, triples, settings, state.k)
        if self.backoff == "auto":
            model = self._fit_with_backoff(triples, None, "projected", keep_state=keep_state,
                                           bases=bases, info=plan.info, labels=labels)
        else:
            model = self._fit_projected(triples, labels, None, bases, keep_state=keep_state,
                                        info=plan.info)
        return model, getattr(self, "state_", None)
