"""MEstimator's fits that keep and reuse their state: cold, warm, rebased or fallen back.

:class:`StatefulFits` is the part of :class:`~streamspec.core.mestimator.MEstimator` that
routes a fit: over windows when the counts are of windows (cold, docs/math.md section 11,
:mod:`~streamspec.core.projected_windows`), else ``rank="auto"`` resolved first (a refit
keeps the previous rank,
:func:`~streamspec.core.rank_selection.resolve_rank`), then, given a previous fit's
:class:`~streamspec.core.projected_state.ProjectedState` in the projected formulation,
:func:`~streamspec.core.warm_fit.fit_projected` (warm when the state's plan says so,
docs/math.md section 10), else the estimator's own cold fit.
"""

from __future__ import annotations

from streamspec.core.backoff_fit import fit_with_backoff
from streamspec.core.fit_data import long_windows_of, starts_of, triples_of
from streamspec.core.model import ObservableOperatorModel
from streamspec.core.projected_state import ProjectedState, settings_of
from streamspec.core.projected_windows import WindowProjectedFit
from streamspec.core.rank_selection import resolve_rank, with_metadata
from streamspec.core.spectral_windows import window_rank_for
from streamspec.core.warm_fit import fit_projected, previous_model, run_steps, state_of
from streamspec.core.windows import WindowCounts

__all__ = ["StatefulFits"]


class StatefulFits:
    """``fit_with_state`` and the routing of ``fit(data, init=...)`` (mixed into MEstimator)."""

    def fit_with_state(self, data, init=None) -> tuple[ObservableOperatorModel, ProjectedState | None]:
        """:meth:`fit`, also returning what the next warm refit reuses (kept as ``state_``;
        None in the dense formulation and over windows). The state holds the counts fitted (16 bytes a
        distinct triple), O(n · k') floats, the weighted symbols' conditions and weighting
        blocks (O(k · k' + k'²) floats each); the operators are the model's."""
        return self._fit(data, init, keep_state=True)

    def _fit(self, data, init, keep_state: bool):
        self._validate()
        self.__dict__.pop("state_", None)
        state = state_of(init)
        windows = self._window_fit_of(data)
        if windows is not None:  # over windows: cold, no state (projected_windows)
            model = self._fit_windows(data, state.model if state is not None else init, *windows)
            return model, None
        self.window_ = 1
        if isinstance(self.rank, str):  # "auto": chosen once, by held-out loss, then fitted
            previous = previous_model(init, state)
            k, scores, meta = resolve_rank(self, triples_of(data)[0], previous)
            est = self.clone(rank=k, count_window=1)  # the window was decided above
            model, new_state = est._fit(data, init, keep_state)
            model = est.model_ = with_metadata(model, new_state, meta)
            self.__dict__.update({name: v for name, v in vars(est).items() if name.endswith("_")})
            self.rank_scores_ = scores
            return model, new_state
        formulation = self._resolved_formulation()
        if state is not None and formulation == "projected":
            return self._refit(data, state, keep_state)
        init = state.model if state is not None else init
        if self.backoff == "auto":
            model = self._fit_with_backoff(data, init, formulation, keep_state=keep_state)
        else:
            model = self._fit_plain(data, init, formulation, keep_state=keep_state)
        return model, getattr(self, "state_", None)

    def _refit(self, data, state: ProjectedState, keep_state: bool):
        """A refit from ``state`` (:func:`~streamspec.core.warm_fit.fit_projected`): warm when
        its plan says so, else cold with what the plan found (new bases, or nothing) and
        ``refit_`` saying why; with the backoff, from the state's model."""
        triples, labels = triples_of(data)
        seed = 0 if self.random_state is None else self.random_state
        result = fit_projected(settings_of(self), self._max_outer(projected=True), triples, labels,
                               state, keep_state=keep_state, backoff=self.backoff,
                               random_state=seed,
                               starts=starts_of(data, triples.n) if self.backoff else None,
                               hmm_states=self.hmm_states, previous=state.model,
                               grams=long_windows_of(data) if self.backoff else None)
        for name, value in result.fitted.items():
            setattr(self, name, value)
        self.formulation_, self.model_ = "projected", result.model
        return result.model, result.fitted.get("state_")

    def _window_fit_of(self, data) -> tuple[WindowCounts, int, int] | None:
        """``(grams, l, k)`` when the fit runs over windows of l ≥ 2 symbols (window counts, the
        projected formulation, ``count_window`` not 1), else None. Up to L + 1 SVDs of window
        Hankels (:func:`~streamspec.core.spectral_windows.window_rank_for`)."""
        if self.count_window == 1 or self._resolved_formulation() != "projected":
            return None
        grams = long_windows_of(data)
        if grams is None:
            return None
        if self.count_window == "auto":
            level, k = window_rank_for(grams, self.rank)
        elif self.count_window > grams.window:
            raise ValueError(f"count_window={self.count_window} needs counts of windows of "
                             f"{self.count_window} symbols, these are of {grams.window}")
        else:
            level = int(self.count_window)
            k = window_rank_for(grams.marginal(level), self.rank)[1] if level > 1 else 0
        return (grams, level, k) if level > 1 else None

    def _fit_windows(self, data, init, grams: WindowCounts, level: int, k: int
                     ) -> ObservableOperatorModel:
        """θ_M over windows of ``level`` symbols, rank k (clipped by
        :func:`~streamspec.core.projected_windows.window_projected_rank`), with the backoff (its
        HMM over the windows too) unless ``backoff=None``; cold, a previous model with a
        backoff keeps its weights. Cost: :mod:`streamspec.core.projected_windows`, twice with
        the backoff."""
        triples, labels = triples_of(data)
        max_outer = self._max_outer(projected=True)
        last: dict = {}

        def fit_grams(g: WindowCounts) -> ObservableOperatorModel:
            result = run_steps(WindowProjectedFit(settings_of(self, rank=k), max_outer,
                                                  g.marginal(level), labels), init)
            last["fitted"] = result.fitted
            return result.model

        for name in ("model_", "factors_", "weighting_", "state_"):
            self.__dict__.pop(name, None)
        self.formulation_ = "projected"
        if self.backoff is None:
            model = fit_grams(grams)
        else:
            seed = 0 if self.random_state is None else self.random_state
            previous = init if getattr(init, "backoff", None) is not None else None
            model = fit_with_backoff(None, triples, starts_of(data, triples.n), random_state=seed,
                                     hmm_states=self.hmm_states, previous=previous, grams=grams,
                                     fit_grams=fit_grams)
        for name, value in last["fitted"].items():  # those of the fit on all the counts (the last)
            setattr(self, name, value)
        self.model_ = model
        return model
