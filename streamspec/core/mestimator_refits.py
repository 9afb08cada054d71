"""MEstimator's fits that keep and reuse their state: cold, warm, rebased or fallen back.

:class:`StatefulFits` is the part of :class:`~streamspec.core.mestimator.MEstimator` that
routes a fit: over windows when the counts are of windows (docs/math.md section 11,
:mod:`~streamspec.core.projected_windows`; a refit from a
:class:`~streamspec.core.projected_windows.WindowState` keeps its window and rank while
:func:`~streamspec.core.projected_windows.plan_window_refit` says the spectrum has not moved,
else is cold), else ``rank="auto"`` resolved first (a refit
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
from streamspec.core.projected_state import ProjectedState, RefitInfo, settings_of
from streamspec.core.projected_windows import (
    WindowProjectedFit,
    WindowState,
    plan_window_refit,
    window_state,
)
from streamspec.core.rank_selection import resolve_rank, with_metadata
from streamspec.core.spectral_windows import window_rank_for
from streamspec.core.warm_fit import fit_projected, previous_model, run_steps, state_of
from streamspec.core.windows import WindowCounts

__all__ = ["StatefulFits"]


class StatefulFits:
    """``fit_with_state`` and the routing of ``fit(data, init=...)`` (mixed into MEstimator)."""

    def fit_with_state(self, data, init=None
                       ) -> tuple[ObservableOperatorModel, ProjectedState | WindowState | None]:
        """:meth:`fit`, also returning what the next warm refit reuses (kept as ``state_``;
        None in the dense formulation; over windows a
        :class:`~streamspec.core.projected_windows.WindowState`: the window, rank and bases).
        The state holds the counts fitted (16 bytes a
        distinct triple), O(n · k') floats, the weighted symbols' conditions and weighting
        blocks (O(k · k' + k'²) floats each); the operators are the model's."""
        return self._fit(data, init, keep_state=True)

    def _fit(self, data, init, keep_state: bool, grams: WindowCounts | None = None):
        """The fit of :meth:`fit` and :meth:`fit_with_state`. ``grams``: the window counts of
        ``data`` when a caller read them already (None: read here, once, when needed). Why
        passed down: the window Hankels' singular values are kept on that object
        (:func:`~streamspec.core.window_rank.level_rank`), so the window choice and the
        predictor's HMM size read the same ones."""
        self._validate()
        self.__dict__.pop("state_", None)
        wstate = getattr(init, "state_", init)
        if isinstance(wstate, WindowState):
            init = wstate.model  # what a fit that is not over windows (or is cold) can use of it
        else:
            wstate = None
        state = state_of(init)
        if self.count_window != 1 and self._resolved_formulation() == "projected":
            grams = long_windows_of(data) if grams is None else grams
            if grams is not None and grams.window > 1:
                fitted = self._refit_windows(data, grams, init, wstate, keep_state)
                if fitted is not None:
                    return fitted
        self.window_ = 1
        if isinstance(self.rank, str):  # "auto": chosen once, by held-out loss, then fitted
            previous = previous_model(init, state)
            k, scores, meta = resolve_rank(self, triples_of(data)[0], previous)
            est = self.clone(rank=k, count_window=1)  # the window was decided above
            model, new_state = est._fit(data, init, keep_state, grams)
            model = est.model_ = with_metadata(model, new_state, meta)
            self.__dict__.update({name: v for name, v in vars(est).items() if name.endswith("_")})
            self.rank_scores_ = scores
            return model, new_state
        formulation = self._resolved_formulation()
        if state is not None and formulation == "projected":
            return self._refit(data, state, keep_state, grams)
        init = state.model if state is not None else init
        if self.backoff == "auto":
            model = self._fit_with_backoff(data, init, formulation, keep_state=keep_state,
                                           grams=grams)
        else:
            model = self._fit_plain(data, init, formulation, keep_state=keep_state)
        return model, getattr(self, "state_", None)

    def _refit(self, data, state: ProjectedState, keep_state: bool,
               grams: WindowCounts | None = None):
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
                               grams=(long_windows_of(data) if grams is None else grams)
                               if self.backoff else None)
        for name, value in result.fitted.items():
            setattr(self, name, value)
        self.formulation_, self.model_ = "projected", result.model
        return result.model, result.fitted.get("state_")

    def _refit_windows(self, data, grams: WindowCounts, init, wstate: WindowState | None,
                       keep_state: bool):
        """A fit over windows (None when the counts' window chosen is 1): warm from ``wstate``
        when :func:`~streamspec.core.projected_windows.plan_window_refit` keeps its window and
        rank (no SVD of window Hankels to choose them; the HMM of the backoff kept, or EM from
        it, in proportion to the grams' mass changed), else cold; ``refit_`` says which and why.
        The state kept (``keep_state``) is a :class:`~streamspec.core.projected_windows.WindowState`."""
        key = (self.rank, self.count_window, grams.window, grams.n)
        info, share, changed = RefitInfo("cold"), None, 0.0
        windows = None
        if wstate is None and init is not None:
            info = RefitInfo("fallback", "a warm refit over windows starts from the WindowState of "
                             "fit_with_state over windows (window ids are interned afresh): cold fit")
            prior = state_of(init)
            init = prior.model if prior is not None else init  # its backoff is still reused
        marginal = None  # the counts at the kept window, computed once (the plan, fit, state)
        if wstate is not None:
            if wstate.key == key:
                marginal = grams.marginal(wstate.level)
            info, share = plan_window_refit(wstate, grams, key, self.basis_tol,
                                            isinstance(self.rank, str), marginal)
            if info.path == "warm":
                windows, changed = (grams, wstate.level, wstate.k), wstate.changed + share
            else:
                marginal = None
        if windows is None:
            windows = self._window_fit_of(grams)
            if windows is None:
                return None
        model = self._fit_windows(data, init, *windows,
                                  changed=None if share is None or share != share else share,
                                  marginal=marginal)
        self.refit_ = info
        new_state = None
        if keep_state:
            new_state = window_state(grams, windows[1], windows[2], key, self.basis_, model, changed,
                                     marginal)
            self.state_ = new_state
        return model, new_state

    def _window_fit_of(self, grams: WindowCounts) -> tuple[WindowCounts, int, int] | None:
        """``(grams, l, k)`` when the fit over ``grams`` (windows of L ≥ 2, the projected
        formulation: :meth:`_fit` checked both) runs over windows of l ≥ 2 symbols, else None.
        Up to L + 1 SVDs of window Hankels (:func:`~streamspec.core.spectral_windows.window_rank_for`),
        on the same grams the plan and the state read (no second copy of the counts)."""
        if self.count_window == "auto":
            level, k = window_rank_for(grams, self.rank)
        elif self.count_window > grams.window:
            raise ValueError(f"count_window={self.count_window} needs counts of windows of "
                             f"{self.count_window} symbols, these are of {grams.window}")
        else:
            level = int(self.count_window)
            k = window_rank_for(grams.marginal(level), self.rank)[1] if level > 1 else 0
        return (grams, level, k) if level > 1 else None

    def _fit_windows(self, data, init, grams: WindowCounts, level: int, k: int,
                     changed: float | None = None, marginal: WindowCounts | None = None
                     ) -> ObservableOperatorModel:
        """θ_M over windows of ``level`` symbols, rank k (clipped by
        :func:`~streamspec.core.projected_windows.window_projected_rank`), with the backoff (its
        HMM over the windows too) unless ``backoff=None``; cold, a previous model with a
        backoff keeps its weights, its HMM while little changed (``changed``: the grams' mass
        share changed since ``init``, :func:`~streamspec.core.backoff_fit.fit_with_backoff`) and
        merges its trigram. ``marginal``: ``grams.marginal(level)`` if already computed.
        Cost: :mod:`streamspec.core.projected_windows`, twice with the backoff."""
        triples, labels = triples_of(data)
        max_outer = self._max_outer(projected=True)
        last: dict = {}

        def fit_grams(g: WindowCounts) -> ObservableOperatorModel:
            # why no start: window ids are interned afresh (the refit keeps l and k instead)
            counts = marginal if g is grams and marginal is not None else g.marginal(level)
            result = run_steps(WindowProjectedFit(settings_of(self, rank=k), max_outer,
                                                  counts, labels), None)
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
                                     fit_grams=fit_grams, changed=changed if previous else None,
                                     filter_window=self.window)
        for name, value in last["fitted"].items():  # those of the fit on all the counts (the last)
            setattr(self, name, value)
        self.model_ = model
        return model
