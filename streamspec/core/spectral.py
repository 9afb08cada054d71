"""The spectral estimator of Hsu, Kakade & Zhang (θ_spec), from sparse triple counts.

Everything is computed from the distinct triples (:class:`~streamspec.core.triples.Triples`):
the top-k left singular vectors U of the sparse P21, then ``b1 = Uᵀ P1``,
``b∞ = (P21ᵀ U)⁺ P1`` and ``B_x = Uᵀ P3x1[x] (Uᵀ P21)⁺`` by
:func:`~streamspec.core.subspace.project_triples`. Time O(nnz · k + P · k² + n · k²)
(nnz distinct triples, P distinct pairs (x2, x3)) plus the truncated SVD, memory
O(n · k²): no array of size n² or n³ is formed, so alphabets of 10⁵ symbols fit.

The dense routines (:func:`spectral_operators`, :func:`top_subspace`,
:func:`~streamspec.core.fit_data.counts_of`) are kept for small alphabets and as the reference.
"""

from __future__ import annotations

import numpy as np

from streamspec.core import defaults
from streamspec.core.backoff_fit import fit_with_backoff
from streamspec.core.fit_data import long_windows_of, starts_of, triples_of
from streamspec.core.model import ObservableOperatorModel
from streamspec.core.pair_index import PairIndex
from streamspec.core.params import Estimator
from streamspec.core.projected_state import ProjectedState, RefitInfo, settings_of
from streamspec.core.projected_windows import WindowState, plan_window_refit, window_state
from streamspec.core.rank_selection import resolve_rank, with_metadata
from streamspec.core.spectral_basis import MAX_AUTO_RANK, check_rank, select_rank_by_spectrum
from streamspec.core.spectral_windows import window_rank_for, window_spectral_operators
from streamspec.core.subspace import project_triples, top_singular
from streamspec.core.triples import Triples
from streamspec.core.warm_fit import fit_projected, previous_model, with_state
from streamspec.core.windows import MAX_WINDOW, WindowCounts

__all__ = [
    "SpectralEstimator",
    "spectral_operators",
    "sparse_spectral_operators",
    "top_subspace",
    "check_rank",
    "select_rank_by_spectrum",
]


def top_subspace(P21: np.ndarray, k: int) -> np.ndarray:
    """U: the top-k left singular vectors of a dense P21, signs fixed for reproducibility. O(n³).

    Examples
    --------
    >>> top_subspace(np.diag([1.0, 3.0]), 1).ravel().tolist()
    [0.0, 1.0]
    """
    U = np.linalg.svd(P21)[0][:, :k]
    signs = np.sign(U[np.abs(U).argmax(axis=0), np.arange(k)])
    return U * np.where(signs == 0, 1.0, signs)


def spectral_operators(
    P1: np.ndarray, P21: np.ndarray, P3x1: np.ndarray, k: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Hsu et al. from dense moments: ``b1 = Uᵀ P1``, ``b∞ = (P21ᵀ U)⁺ P1``, ``B_x = Uᵀ P3x1[x] (Uᵀ P21)⁺``.

    The dense reference: time O(n³ · k), memory O(n³). See
    :func:`sparse_spectral_operators` for the same from sparse counts.

    Examples
    --------
    >>> from streamspec.core.moments import probabilities
    >>> c3 = np.zeros((2, 2, 2)); c3[0, 1, 1] = 3; c3[1, 0, 0] = 1
    >>> b1, binf, B = spectral_operators(*probabilities(c3), 2)
    >>> B.shape, round(float(binf @ b1), 12)
    ((2, 2, 2), 1.0)
    """
    U = top_subspace(P21, k)
    pinv = np.linalg.pinv(U.T @ P21)
    b1 = U.T @ P1
    binf = np.linalg.pinv(P21.T @ U) @ P1
    B = np.einsum("dk,xkl,lm->xdm", U.T, P3x1, pinv, optimize=True)
    return b1, binf, B


def sparse_spectral_operators(
    triples: Triples, k: int, random_state: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(b1, b∞, B)`` of θ_spec from sparse triple counts; equal to :func:`spectral_operators`.

    (U, V) are the top-k left and right singular vectors of the sparse P21
    (:func:`~streamspec.core.subspace.top_singular`: dense SVD up to 1,000 symbols,
    truncated sparse SVD above), ``M1 = Uᵀ P21 V`` (k × k, Σ_k up to rounding) and

        b1 = Uᵀ P1,   b∞ = M1⁻ᵀ Vᵀ P1,   B_x = (Uᵀ P3x1[x] V) M1⁻¹

    (docs/math.md (7.1); ``V M1⁻¹ = (Uᵀ P21)⁺`` for exact singular vectors), the B_x from
    :func:`~streamspec.core.subspace.project_triples` with ``left = U`` and
    ``right = V M1⁻¹``. Time O(nnz · k + P · k² + n · k²) plus the SVD; memory
    O(n · k²) for B and O(n · k) besides.

    Examples
    --------
    >>> t = Triples.from_arrays(3, x1=[0, 1, 2, 0], x2=[1, 2, 0, 1], x3=[2, 0, 1, 2])
    >>> b1, binf, B = sparse_spectral_operators(t, 3)
    >>> B.shape, round(float(binf @ b1), 12)
    ((3, 3, 3), 1.0)
    """
    k = check_rank(k, triples.n)
    index = PairIndex(triples)
    N = triples.total
    c21 = index.c21()
    U, _, V = top_singular(c21 * (1.0 / N), k, random_state=random_state)
    M1 = U.T @ np.asarray(c21 @ V) / N
    P1 = np.bincount(index.x1, weights=triples.weights, minlength=triples.n) / N
    M1inv = np.linalg.pinv(M1)  # why pinv: M1 is singular when P21 has rank below k
    b1 = U.T @ P1
    binf = M1inv.T @ (V.T @ P1)
    B = project_triples(triples, U, V @ M1inv, index=index)
    return b1, binf, B


class SpectralEstimator(Estimator):
    """θ_spec: the spectral estimator of Hsu, Kakade & Zhang (2012), with a smoothed backoff.

    Parameters
    ----------
    rank
        Dimension k of the model (1 <= k <= n), or ``"auto"`` (default,
        :data:`streamspec.core.defaults.RANK`): the number of singular values of P21
        above the noise level ``N^(-1/2)`` (at most 256 above 1,000 symbols).
        To choose the rank by held-out log loss instead, see
        :func:`streamspec.core.selection.select_predictor`.
    filter, window, min_proba
        Passed to the fitted :class:`ObservableOperatorModel`. ``window="auto"`` (default):
        2, or over windows of L ≥ 2 symbols with the backoff the w in 1..L + 1 of least
        held-out loss (:mod:`streamspec.core.filter_window`); an integer is kept.
    backoff
        ``"auto"`` (default): mix the model's predictions with an interpolated
        Kneser–Ney trigram and an HMM filter of the same counts, with weights started on
        held-out counts and learned from every symbol read
        (:func:`streamspec.core.backoff_fit.fit_with_backoff`; this fits the model twice).
        ``None``: the model alone.
    random_state
        Seed of the held-out split and of the sparse SVD's start vector.
    hmm_states
        States of the HMM whose forward filter the backoff mixes in: ``"auto"`` (default:
        chosen on held-out counts, 2..64), an integer, or ``None`` (no HMM component).
    count_window
        The window of the model when the counts are of windows (``MomentAccumulator(window=L)``,
        L ≥ 2; ``docs/math.md`` section 11; not ``window``, the filter's): ``"auto"``
        (default) the smallest window whose Hankel supports what a longer one does
        (:func:`~streamspec.core.window_rank.choose_window`), an integer l ≤ L that
        window, 1 the triples. Over a window l ≥ 2 the model is θ_spec on the window
        Hankel (:mod:`streamspec.core.spectral_windows`): its rank can exceed the alphabet
        (``"auto"``: the supported rank of that Hankel); refits are cold. Counts of triples
        are fitted as always, without any SVD of windows.
    basis_tol
        Warm refits (``fit(data, init=state)``, docs/math.md section 10): the previous
        bases are kept while their backward error on the new counts is at most this many
        sampling noise levels ``N^(-1/2)`` (0: never kept; the refit is then the cold fit
        to rounding).

    Fitting costs O(nnz · k + P · k² + n · k²) time and O(n · k²) memory (nnz
    distinct triples, P distinct pairs), plus the truncated SVD of P21 above 1,000
    symbols and, with the backoff, O(max_contexts · n · k) for the mixing weights.

    Examples
    --------
    >>> from streamspec import MomentAccumulator
    >>> acc = MomentAccumulator(n_symbols=2)
    >>> acc.learn_many([0, 1] * 50)
    >>> model = SpectralEstimator(rank=2, backoff=None).fit(acc)
    >>> model.predict_proba_next([0, 1, 0]).round(3).tolist()
    [0.0, 1.0]
    >>> SpectralEstimator(rank=2).fit(acc).predict_proba_next([0, 1, 0]).round(2).tolist()
    [0.01, 0.99]

    References
    ----------
    Hsu, Kakade & Zhang (2012), A spectral algorithm for learning hidden Markov
    models, Journal of Computer and System Sciences 78(5).

    """

    def __init__(self, *, rank: int | str = defaults.RANK, filter: str = defaults.FILTER,
                 window: int | str = defaults.WINDOW, min_proba: float = defaults.MIN_PROBA,
                 backoff: str | None = defaults.BACKOFF, random_state: int = 0,
                 hmm_states: int | str | None = defaults.HMM_STATES,
                 basis_tol: float = defaults.BASIS_TOL, count_window: int | str = "auto"):
        self.rank = rank
        self.filter = filter
        self.window = window
        self.min_proba = min_proba
        self.backoff = backoff
        self.random_state = random_state
        self.hmm_states = hmm_states
        self.basis_tol = basis_tol
        self.count_window = count_window
        self._validate()  # why: a bad setting is refused before anything is fitted

    def _validate(self) -> None:
        defaults.check_settings(rank=self.rank, filter=self.filter, window=self.window,
                                min_proba=self.min_proba, backoff=self.backoff,
                                random_state=self.random_state, hmm_states=self.hmm_states,
                                basis_tol=self.basis_tol)
        w = self.count_window
        if w != "auto" and (isinstance(w, bool) or not isinstance(w, int | np.integer)
                            or not 1 <= w <= MAX_WINDOW):
            raise ValueError(f"count_window must be 'auto' or an integer in 1..{MAX_WINDOW}, got {w!r}")

    @with_state
    def fit(self, data, init=None) -> ObservableOperatorModel:
        """Fit on a MomentAccumulator, :class:`Triples` or dense counts ``c3[x2, x3, x1]``.

        ``init``: None (a cold fit); the state of an earlier fit (a
        :class:`~streamspec.core.projected_state.ProjectedState` from
        :meth:`fit_with_state`, or a fitted estimator holding one in ``state_``) for a warm
        refit, which reuses its bases and updates its moments from the triples that
        changed (docs/math.md section 10; ``refit_`` says which path it took); or a previous
        model of this estimator. Either way a refit keeps the previous rank when the rank
        is ``"auto"``, and the previous backoff's weights (they were learned from the
        stream; its HMM warm-starts the new one). Returns the model (also ``model_``; the
        rank used is ``rank_``, and with ``rank="auto"`` every candidate's held-out loss
        ``rank_scores_``). Time and memory: see the class docstring.
        """
        return self._fit(data, init, keep_state=False)[0]

    def fit_with_state(self, data, init=None) -> tuple[ObservableOperatorModel, ProjectedState]:
        """:meth:`fit`, also returning what the next warm refit reuses (and keeping it as
        ``state_``). The state holds the counts fitted (16 bytes a distinct triple) and
        O(n · k) floats besides the model."""
        return self._fit(data, init, keep_state=True)

    def _fit(self, data, init, keep_state: bool):
        self._validate()  # the settings may have been changed since construction
        self.__dict__.pop("state_", None)
        grams = long_windows_of(data) if self.count_window != 1 else None
        wstate = getattr(init, "state_", init)
        if isinstance(wstate, WindowState):
            init = wstate.model  # what a fit that is not over windows (or is cold) can use of it
        else:
            wstate = None
        if grams is not None and grams.window > 1:
            # why "spectral" in the key: θ_M's state (its bases, its window) is not θ_spec's
            key = ("spectral", self.rank, self.count_window, grams.window, grams.n)
            info, share, changed, level = RefitInfo("cold"), None, 0.0, 1
            marginal = None  # the counts at the kept window, computed once (plan, fit, state)
            if wstate is not None:
                marginal = grams.marginal(wstate.level) if wstate.key == key else None
                info, share = plan_window_refit(wstate, grams, key, self.basis_tol,
                                                isinstance(self.rank, str), marginal)
                if info.path == "warm":  # the window and rank kept: no SVD to choose them
                    level, k, changed = wstate.level, wstate.k, wstate.changed + share
                else:
                    marginal = None
            elif init is not None:
                info = RefitInfo("fallback", "a warm refit over windows starts from the WindowState "
                                 "of fit_with_state over windows: cold fit")
            if info.path != "warm":
                level, k = self._window_and_rank(grams)
            if level > 1:
                bases: dict = {}
                model = self._fit_windows(data, init, grams, level, k, bases,
                                          None if share is None or share != share else share,
                                          marginal)
                self.refit_, new_state = info, None
                if keep_state:
                    new_state = window_state(grams, level, k, key, (bases["U"], bases["V"]), model,
                                             changed, marginal)
                    self.state_ = new_state
                return model, new_state
        self.window_ = 1
        triples, labels = triples_of(data)
        state = getattr(init, "state_", init)
        state = state if isinstance(state, ProjectedState) else None
        previous = previous_model(init, state)
        k, scores, meta = resolve_rank(self, triples, previous)
        settings = settings_of(self, rank=k, weighting="identity", per_rank=1,
                               auto_cap=MAX_AUTO_RANK)
        fit = fit_projected(settings, 1, triples, labels, state, keep_state=keep_state,
                            backoff=self.backoff, random_state=self.random_state,
                            starts=starts_of(data, triples.n) if self.backoff else None,
                            hmm_states=self.hmm_states, previous=previous,
                            grams=(grams if grams is not None else long_windows_of(data))
                            if self.backoff else None)  # why: the window choice's copy, its ranks kept
        for name in ("refit_", "state_", "basis_"):  # θ_M's own attributes (losses, W) are not its
            if name in fit.fitted:
                setattr(self, name, fit.fitted[name])
        model = with_metadata(fit.model, fit.fitted.get("state_"), meta)
        self.model_, self.rank_, self.rank_scores_ = model, k, scores
        return model, fit.fitted.get("state_")

    def _window_and_rank(self, grams: WindowCounts) -> tuple[int, int | str]:
        """``(l, k)``: the model's window and rank over ``grams`` (l = 1: the triples' path,
        which chooses its own rank). Up to L + 1 SVDs of window Hankels."""
        if self.count_window == "auto":
            return window_rank_for(grams, self.rank)
        if self.count_window > grams.window:
            raise ValueError(f"count_window={self.count_window} needs counts of windows of "
                             f"{self.count_window} symbols, these are of {grams.window}")
        level = int(self.count_window)
        return (level, window_rank_for(grams.marginal(level), self.rank)[1]) if level > 1 else (1, 0)

    def _fit_windows(self, data, init, grams: WindowCounts, level: int, k: int,
                     bases: dict | None = None, changed: float | None = None,
                     marginal: WindowCounts | None = None):
        """θ_spec over windows of ``level`` symbols, rank k, with the backoff (its HMM over the
        windows too); a previous model with a backoff keeps its weights, and its HMM while little
        changed (``changed``: the grams' mass share changed since it, ``fit_with_backoff``).
        ``bases`` receives the top-k singular vectors of the fit on all the grams; ``marginal``:
        ``grams.marginal(level)`` if already computed. Cold:
        O(SVD + nnz · k + P · k²) twice with the backoff."""
        triples, labels = triples_of(data)

        def fit_grams(g: WindowCounts) -> ObservableOperatorModel:
            # why the dict is filled by every call: the last one is the fit on all the grams
            counts = marginal if g is grams and marginal is not None else g.marginal(level)
            b1, binf, B = window_spectral_operators(counts, k, self.random_state, bases)
            return ObservableOperatorModel(b1, binf, B, filter=self.filter,
                                           window=defaults.filter_window(self.window),
                                           min_proba=self.min_proba, symbols=labels, rank=k)

        if self.backoff is None:
            model = fit_grams(grams)
        else:
            previous = init if getattr(init, "backoff", None) is not None else None
            model = fit_with_backoff(None, triples, starts_of(data, triples.n),
                                     random_state=self.random_state, hmm_states=self.hmm_states,
                                     previous=previous, grams=grams, fit_grams=fit_grams,
                                     changed=changed if previous is not None else None,
                                     filter_window=self.window)
        self.model_, self.rank_, self.rank_scores_, self.window_ = model, k, None, level
        return model
