"""θ_M: the spectral M-estimator (Tran, Kim & Doshi-Velez, AISTATS 2016), Algorithms 1 and 2."""

from __future__ import annotations

import numpy as np

from streamspec.core import defaults
from streamspec.core.backoff_fit import fit_with_backoff
from streamspec.core.dense import DENSE_MEMORY_LIMIT, DenseFit
from streamspec.core.factors import MFactors
from streamspec.core.fit_data import long_windows_of, starts_of, triples_of
from streamspec.core.fit_steps import FitSteps
from streamspec.core.mestimator_refits import StatefulFits
from streamspec.core.model import ObservableOperatorModel
from streamspec.core.params import Estimator
from streamspec.core.projected_state import settings_of
from streamspec.core.projected_weighting import PROJECTED_WEIGHTINGS
from streamspec.core.spectral import select_rank_by_spectrum
from streamspec.core.triples import Triples
from streamspec.core.warm_fit import cold_fit, drop_cached, with_state
from streamspec.core.windows import MAX_WINDOW, WindowCounts

__all__ = ["MEstimator", "MFactors", "FACTORIZATIONS", "FORMULATIONS", "DENSE_MEMORY_LIMIT",
           "select_rank_by_spectrum"]

FACTORIZATIONS = defaults.FACTORIZATIONS
FORMULATIONS = defaults.FORMULATIONS
_SETTINGS = ("rank", "penalty", "weighting", "factorization", "max_outer", "max_sweeps", "tol",
             "n_restarts", "random_state", "smoothing", "shrinkage", "ridge", "filter", "window",
             "min_proba", "formulation", "n_conditions", "backoff", "hmm_states", "basis_tol",
             "weighting_rtol")


class MEstimator(StatefulFits, Estimator):
    """θ_M: generalised-method-of-moments spectral estimator (Tran, Kim & Doshi-Velez 2016).

    Two formulations of the same moment conditions ``P3x1[x] ≈ B_x P21``.

    **Projected** (the default for what it can express). With U the top-k left
    and Q the top-k' right singular vectors of P21 (k' = ``n_conditions``,
    default 2k), the parameters are one k × k operator ``B̃_x`` per symbol and the
    conditions of symbol x are the k × k' matrix

        G_x = A_x - B̃_x M,   A_x = Uᵀ P3x1[x] Q,   M = Uᵀ P21 Q,

    weighted by ``W_x = (Σ^(i) ⊗ Σ_x)⁻¹`` and solved per symbol in closed form,
    ``B̃_x = A_x Σ_x⁻¹ Mᵀ (M Σ_x⁻¹ Mᵀ)⁻¹`` (GLS; it does not depend on the i-side
    factor). ``Σ_x`` is re-estimated at the previous operators (Algorithm 1), see
    :class:`~streamspec.core.projected_weighting.ProjectedWeighting`. With W = I this *is*
    θ_spec, because ``Uᵀ P21 Q = [Σ_k, 0]`` makes ``A_x Mᵀ (M Mᵀ)⁻¹ = Uᵀ P3x1[x]
    (Uᵀ P21)⁺``; at full rank (k = k' = n) ``G_x = 0`` is solvable exactly, so every
    weighting gives θ_spec's probabilities (Proposition 1). The model is
    ``b1 = Uᵀ P1``, ``b∞ = (P21ᵀ U)⁺ P1`` and the ``B̃_x`` (θ_spec's parametrisation).

    **Dense** (``formulation="dense"``): the paper read literally, ``b1 = P1``,
    ``b∞ = 1``, ``B_x = R_x S_xᵀ`` with R_x n × k, the n³ conditions
    ``m_xij = P3x1[x]_ij - [R_x S_xᵀ P21]_ij`` and loss ``mᵀ W m + λ N^(-1/2) ‖R‖₁``,
    by alternating minimisation over R and S (Algorithm 2) inside the
    re-estimation of W (Algorithm 1). It is the only formulation with L1
    (``penalty``), the ``"exact"`` weighting and the ``"shared"``/``"per_symbol"``
    factorizations, and it needs n³–n⁵ memory: it refuses to start when its
    estimate exceeds :data:`DENSE_MEMORY_LIMIT` (2 GiB), naming the size.

    Costs, n symbols, nnz distinct triples, P distinct (x2, x1) pairs, rank k, k'
    conditions per symbol:

    ============================  ==========================================  ===================
    mode                          time (per outer iteration)                  memory
    ============================  ==========================================  ===================
    projected, any weighting      SVD (dense O(n³) up to 1,000 symbols, else  O(nnz + n·k·k')
                                  ARPACK O(nnz·k') per iteration) and
                                  ``A_x``: O(nnz·k' + pairs·k·k'), once
    projected ``"identity"``      O(n·k²·k')  (one iteration: θ_spec)         O(n·k·k')
    projected ``"diagonal"``      O(nnz·k + P·k' + n·k²·k')                   O(nnz + n·k')
    projected ``"per_symbol"``    O(nnz·k + P·k'² + n·k'³)                    O(nnz + n·k·k'),
                                                                              Σ_x built in blocks
    dense ``"identity"``          O(n³·k²)                                    O(n³)
    dense ``"diagonal"``          O(n⁴ + n³·k²)                               O(n³ + n²·k²)
    dense ``"per_symbol"``        O(n⁵ + n³·k³)                               O(n⁴ + n³·k²)
    dense ``"exact"``             O(n⁵); R-step coupled (CG/FISTA)            O(n⁴)
    ============================  ==========================================  ===================

    Over windows (``count_window``): the projected rows with W distinct windows in place of
    n for the SVD (of the window Hankel), nnz distinct grams and P distinct (x, future)
    pairs, plus O(nnz · L + nnz log nnz) to intern the windows
    (:mod:`streamspec.core.projected_windows`). Measured figures behind the defaults are
    in ``Notes``.

    Parameters
    ----------
    rank
        k, the rank (1 <= k <= n), or ``"auto"`` (default): the number of singular
        values of P21 above the noise level ``N^(-1/2)`` (projected, above 1,000
        symbols: among the top 100). Chosen by measurement: "auto" fitted in
        0.02-2 s and beat the old default k = 2 by 0.06 nats per symbol on a sparse
        8-state HMM and 0.14 on Alice's characters (docs/benchmarks.md, "Defaults",
        ``python demos/bench_defaults.py``). The rank used is ``rank_`` and the
        fitted model's ``rank``. Every default is in :mod:`streamspec.core.defaults`.
    penalty
        λ of the L1 term ``λ N^(-1/2) ‖R‖₁`` (0 = none); dense formulation only
        (L1 on the projected ``B̃_x`` would depend on the arbitrary basis U, so it
        is not offered there). Solved by coordinate descent to a tight tolerance.
    weighting
        ``"per_symbol"`` (default), ``"diagonal"``, ``"identity"`` (W = I: θ_spec
        in the projected formulation), or ``"exact"`` (dense only: docs/math.md's
        j-blocks with their coupling across x, which no per-symbol split can
        express, so it is not linear in n).
    factorization
        Dense formulation only. ``"fixed"`` (default): S = U, a convex weighted
        lasso in R. ``"shared"``: one learned S. ``"per_symbol"``: independent
        ``R_x, S_x``, the paper read literally (reproduction only: below full rank
        its joint probabilities can blow up, docs/math.md section 6).
    formulation
        ``"auto"`` (default): ``"projected"`` unless a dense-only option is asked
        for (``penalty > 0``, ``weighting="exact"`` or a factorization other than
        ``"fixed"``), then ``"dense"``. ``"projected"`` or ``"dense"`` force one
        (``"projected"`` with a dense-only option is an error).
    n_conditions
        k', the number of right singular vectors Q of P21 the conditions use per
        symbol (k <= k' <= n; default ``min(n, 2k)``, and below n above 1,000
        symbols). k' = k gives θ_spec under every weighting (M is then square);
        the extra k' - k conditions are what the weighting can trade off.
    max_outer
        Outer iterations (re-estimations of W) at most; 1 means W = I only (cold)
        or one GLS step at the previous operators (warm). ``None`` (default): 2 in
        the projected formulation (two-step GMM: θ_spec, then one GLS step with W
        estimated at θ_spec; a third iteration changed the held-out log loss by at
        most 2e-4 nats per symbol on the three data sets of ``python
        demos/bench_defaults.py``, docs/benchmarks.md "Defaults"), 3 in the dense one.
    max_sweeps
        Dense only: alternating sweeps (S-step then R-step) per outer iteration.
    tol
        Relative change of the operators under which the outer loop stops (and,
        dense, relative decrease of the loss under which the sweeps stop).
    n_restarts, random_state
        Dense only: random starts tried besides the spectral start.
    smoothing
        Dense only: pseudo-counts added to the cells before forming W.
    shrinkage
        Shrinkage of W towards the identity, in [0, 1] or ``"auto"``. Dense:
        :func:`~streamspec.core.weighting.resolve_shrinkage`. Projected: per symbol,
        ``s_x = 10 / (10 + N_x / k'²)`` with N_x the triples whose middle symbol
        is x (:func:`~streamspec.core.projected_weighting.resolve_projected_shrinkage`).
    ridge
        Relative ridge on the diagonal of the second moments (both formulations).
    backoff
        ``"auto"`` (default, as :class:`~streamspec.SpectralEstimator`): the model's
        predictions mix it with the Kneser–Ney trigram and an HMM filter of the same
        counts (:mod:`streamspec.core.backoff`), by weights started on held-out counts and
        learned from every symbol read
        (:func:`streamspec.core.backoff_fit.fit_with_backoff`: the model is fitted on 90%
        of the counts to score it, then on all of them, so it fits twice; on large
        problems, n·k·k' > 2²⁴, the first is θ_spec in bases refined from those of all the
        counts; the fitted attributes are those of the last fit). ``None``: the plain model.
    hmm_states
        States of the backoff's HMM: ``"auto"`` (default: chosen on held-out counts, 2..64), an
        integer, or ``None`` (no HMM component).
    filter, window, min_proba
        Passed to the fitted :class:`ObservableOperatorModel`. ``window="auto"`` (default):
        2, or over windows of L ≥ 2 symbols with the backoff the w in 1..L + 1 of least
        held-out loss (:mod:`streamspec.core.filter_window`); an integer is kept.
    count_window
        The window of the model when the counts are of windows (``MomentAccumulator(window=L)``,
        L ≥ 2; ``docs/math.md`` section 11, "θ_M over windows"), as
        :class:`~streamspec.SpectralEstimator`'s: ``"auto"`` (default) the smallest window
        whose Hankel supports what a longer one does, an integer l ≤ L that window, 1 the
        triples. Over a window l ≥ 2 the projected fit runs on the window Hankel
        (:mod:`streamspec.core.projected_windows`: θ_spec over windows, then the GLS steps
        under ``weighting``), with rank up to min(distinct pasts, distinct current windows)
        (``"auto"``: the supported rank of that Hankel, at most 256) and k' conditions up to
        the distinct windows; refits over windows are cold (``refit_.path`` ``"fallback"``
        when a start was given: window ids are interned afresh from each set of counts) and
        ``fit_with_state`` returns no state. The dense formulation fits the triples.
    basis_tol, weighting_rtol
        Warm refits (``fit(data, init=state)``, docs/math.md section 10): the previous
        bases are kept while their backward error on the new counts is at most
        ``basis_tol`` times the sampling noise ``N^(-1/2)`` (0: never kept, the refit is
        then the cold fit to rounding); a symbol's weighting block is reused while its
        count changed by at most ``weighting_rtol`` (relative). Defaults and their
        measurements: :mod:`streamspec.core.defaults`, docs/benchmarks.md "Warm refits".

    Attributes
    ----------
    factors_
        The fitted :class:`MFactors` (its ``loss``: the criterion at the solution; dense:
        with W re-estimated there; projected: under the last step's W, estimated at the
        operators that step started from, which saves a weighting as costly as a step).
    weighting_
        Dense: the weighting re-estimated at the solution (a
        :class:`~streamspec.core.weighting.Weighting`); projected: the last step's (a
        :class:`~streamspec.core.projected_weighting.ProjectedWeighting`).
    loss_history_
        One list per outer iteration, every one recorded, rejected ones included.
        Dense: the training loss after each accepted sweep (W fixed within one; a
        rejected sweep ends the list and is in ``rejected_sweeps_``). Projected:
        ``[loss at the previous operators, loss at the new ones]`` under that
        iteration's W (only ``[loss]`` for the first, W = I, cold iteration); an
        iteration whose solution is not finite or raises that loss is rejected
        (listed in ``rejected_``) and ends the loop with the previous operators.
    rejected_, rejected_sweeps_
        The outer iterations in which a step was rejected, and one tuple ``(outer,
        sweep, rejected loss, kept loss)`` per rejected step (dense: the sweep that
        would have raised the loss under that iteration's W, which ends that
        iteration's sweeps; projected: ``sweep`` is 1, the iteration's single step).
        Empty when every step lowered the loss, as exact steps must: a non-empty
        list points at numerical trouble, never hidden by the history.
    rank_, n_conditions_, formulation_, window_
        The rank, k' (projected), formulation and count window (1: the triples) actually
        used (the rank is also the fitted model's ``rank``).
    basis_
        Projected: ``(U, Q)``, shapes (n, k) and (n, k').
    model_
        The fitted model (also returned by :meth:`fit`).
    refit_, state_
        Projected: how the fit was made (a
        :class:`~streamspec.core.projected_state.RefitInfo`: cold, warm, rebased or
        fallback, and why) and, after :meth:`fit_with_state`, what the next warm refit
        reuses.

    Notes
    -----
    Why projected is the default: the dense formulation's per-symbol weighting
    needs O(n⁴) memory, about 2.3 GiB at n = 100 and 30 GiB at n = 200 at rank 10
    by its own estimate (``dense_bytes``, which makes it refuse to start), and the
    "dense p.s." column below shows its time at n = 26; the projected one is linear
    in n and in nnz. Measured figures behind
    the default weighting:

    Held-out log loss (nats/symbol, window-2 filter, 20,000 held-out symbols) and
    fit time, rank 10, ``python tests/core/test_mestimator_projected.py --bench``
    (2 shared cores; times are indicative, the machine was loaded). Plain models
    (``backoff=None``):

    ===========================  =========  =========  =========  =========  =========
    case (n, N)                  θ_spec     dense p.s. dense id.  proj. p.s. p.s. 3k
    ===========================  =========  =========  =========  =========  =========
    Alice letters (26, 88k)      2.6837     2.6168     2.6626     2.6255     2.6291
      seconds                    0.008      8.1        0.074      0.042      0.067
    random HMM m=5 (26, 10⁵)     3.1759     3.1753     3.1759     3.1742     3.1745
      seconds                    0.002      3.5        0.028      0.039      0.051
    Zipf HMM (1,000, 10⁴)        7.6033     –          –          7.6012     7.6034
    Zipf HMM (1,000, 10⁵)        6.3765     –          –          6.3519     6.3473
      seconds                    10.6       –          –          7.2        9.0
    Zipf HMM (20,000, 10⁴)       9.8169     –          –          9.8166     9.8343
    Zipf HMM (20,000, 10⁵)       9.2245     –          –          9.2169     9.2093
      seconds                    5.2        –          –          14.4       18.0
    ===========================  =========  =========  =========  =========  =========

    With the backoff (the default), the model is one component of a mixture with the
    Kneser–Ney trigram and an HMM filter; its measured contribution, beside the trigram and
    EM, is in docs/benchmarks.md ("Predictions", ``python demos/bench_predict.py``).

    (θ_spec above 26 symbols is the projected identity weighting, equal to it to
    1e-10; the dense formulation cannot run there.) The projected ``"per_symbol"``
    weighting was never worse than θ_spec as a plain model and is the default;
    its k' = 2k default beat k' = 3k at 10⁴ symbols. Behind the backoff the
    difference shrank to ±0.002 nats and was not always in θ_M's favour on large
    alphabets. ``"diagonal"`` equals θ_spec *exactly* in this basis: with
    ``M = [Σ_k, 0]`` a diagonal ``Σ_x`` cannot couple the extra conditions to
    the first k, so only a full ``Σ_x`` can use them; it is kept for completeness.
    The dense per-symbol weighting (the old default) was the best at n = 26 on
    Alice (2.617 against 2.626) at ~100× the time; it is one
    ``formulation="dense"`` away.

    Dense gauge: ``R_x Sᵀ`` is unchanged by ``R → R T, S → S T⁻ᵀ``; S is kept
    orthonormal (QR after each S-step). A sweep that would raise the loss is
    rejected, so with W held fixed the dense training loss never increases.

    Examples
    --------
    >>> from streamspec import MomentAccumulator
    >>> from streamspec.core.hmm import HMM
    >>> hmm = HMM.random(n_states=2, n_symbols=3, random_state=0)
    >>> acc = MomentAccumulator(n_symbols=3)
    >>> acc.learn_many(hmm.sample(20_000, random_state=1))
    >>> est = MEstimator(rank=2)
    >>> model = est.fit(acc)
    >>> est.formulation_, est.n_conditions_, model.B.shape
    ('projected', 3, (3, 2, 2))
    >>> p = model.predict_proba_next([0, 1])
    >>> bool(abs(p.sum() - 1) < 1e-12 and (p >= 0).all())
    True
    >>> dense = MEstimator(rank=2, weighting="exact").fit(acc)   # "exact" needs the dense form
    >>> dense.B.shape
    (3, 3, 3)

    References
    ----------
    Tran, Kim & Doshi-Velez (2016), Spectral M-estimation with applications to
    hidden Markov models, AISTATS. Hsu, Kakade & Zhang (2012), A spectral
    algorithm for learning hidden Markov models, JCSS 78(5).

    """

    def __init__(
        self,
        *,
        rank: int | str = defaults.RANK,
        penalty: float = defaults.PENALTY,
        weighting: str = defaults.WEIGHTING,
        factorization: str = defaults.FACTORIZATION,
        max_outer: int | None = None,
        max_sweeps: int = defaults.MAX_SWEEPS,
        tol: float = defaults.TOL,
        n_restarts: int = 0,
        random_state: int | None = None,
        smoothing: float = 0.0,
        shrinkage: float | str = defaults.SHRINKAGE,
        ridge: float = defaults.RIDGE,
        filter: str = defaults.FILTER,
        window: int | str = defaults.WINDOW,
        min_proba: float = defaults.MIN_PROBA,
        formulation: str = defaults.FORMULATION,
        n_conditions: int | None = None,
        backoff: str | None = defaults.BACKOFF,
        hmm_states: int | str | None = defaults.HMM_STATES,
        basis_tol: float = defaults.BASIS_TOL,
        weighting_rtol: float = defaults.WEIGHTING_RTOL,
        count_window: int | str = "auto",
    ):
        self.rank = rank
        self.penalty = penalty
        self.weighting = weighting
        self.factorization = factorization
        self.max_outer = max_outer
        self.max_sweeps = max_sweeps
        self.tol = tol
        self.n_restarts = n_restarts
        self.random_state = random_state
        self.smoothing = smoothing
        self.shrinkage = shrinkage
        self.ridge = ridge
        self.filter = filter
        self.window = window
        self.min_proba = min_proba
        self.formulation = formulation
        self.n_conditions = n_conditions
        self.backoff = backoff
        self.hmm_states = hmm_states
        self.basis_tol = basis_tol
        self.weighting_rtol = weighting_rtol
        self.count_window = count_window
        self._validate()  # why: a bad setting is refused before anything is fitted

    # ------------------------------------------------------------------ public

    def warm_start(self, sweeps: int) -> MEstimator:
        """A copy for warm refits, ``fit(data, init=model)``: ``sweeps`` sweeps, one outer iteration.

        Dense: at most ``sweeps`` alternating sweeps under W re-estimated at the previous
        operators; projected: one GLS step there. O(parameters).
        """
        return self.clone(max_sweeps=sweeps, max_outer=1)

    def _validate(self) -> None:
        """Check every setting (:func:`streamspec.core.defaults.check_settings`). O(1)."""
        defaults.check_settings(**{name: getattr(self, name) for name in _SETTINGS})
        w = self.count_window
        if w != "auto" and (isinstance(w, bool) or not isinstance(w, int | np.integer)
                            or not 1 <= w <= MAX_WINDOW):
            raise ValueError(f"count_window must be 'auto' or an integer in 1..{MAX_WINDOW}, got {w!r}")
        if self.formulation == "projected":
            dense_only = self._dense_only()
            if dense_only:
                raise ValueError(
                    f"{dense_only} is only available in the dense formulation: use formulation='dense' "
                    "(or 'auto'), which takes n³ to n⁵ memory"
                )

    def _dense_only(self) -> str:
        """The first option asked for that only the dense formulation offers, or ''."""
        if self.penalty > 0:
            return f"penalty={self.penalty!r} (L1 on the projected B̃_x would depend on the basis U)"
        if self.weighting not in PROJECTED_WEIGHTINGS:
            return f"weighting={self.weighting!r} (it couples all symbols)"
        if self.factorization != "fixed":
            return f"factorization={self.factorization!r}"
        return ""

    def _max_outer(self, projected: bool) -> int:
        if self.max_outer is not None:
            return self.max_outer
        return defaults.MAX_OUTER_PROJECTED if projected else defaults.MAX_OUTER_DENSE

    def _resolved_formulation(self) -> str:
        if self.formulation != "auto":
            return self.formulation
        return "dense" if self._dense_only() else "projected"

    @with_state
    def fit(self, data, init=None) -> ObservableOperatorModel:
        """Fit on counts; returns the model.

        ``data``: a :class:`~streamspec.core.triples.Triples` (sparse counts, any
        alphabet size), a MomentAccumulator, or dense counts ``c3[x2, x3, x1]``. Window
        counts (``MomentAccumulator(window=L)``, :class:`~streamspec.core.windows.WindowCounts`)
        are fitted over windows (``count_window``; cold, ``init`` only keeps a previous
        backoff's weights).

        ``init`` warm-starts from a previous solution. The state of an earlier projected
        fit (:meth:`fit_with_state`, or a fitted estimator's ``state_``) gives a refit
        proportional to the change (docs/math.md section 10; ``refit_`` says which path it
        took): bases kept while their backward error is at most ``basis_tol`` noise levels,
        moments updated from the changed triples, weighting blocks reused for symbols whose
        counts changed by at most ``weighting_rtol``. A model returned by an earlier
        ``fit`` (it carries its factors), an :class:`MFactors` or a fitted MEstimator: W is
        re-estimated at the previous operators (projected: in the new basis,
        ``B̃ ← U_newᵀ U_old B̃_old U_oldᵀ U_new``) before the first step, instead of
        starting from W = I; a grown alphabet is padded with zeros; factors of another
        formulation, rank or factorization are ignored. Either way a refit keeps the
        previous rank under ``rank="auto"`` and the previous backoff's weights.
        """
        return self._fit(data, init, keep_state=False)[0]

    def _run(self, steps: FitSteps, init) -> ObservableOperatorModel:
        """The template of every fit: prepare → initial estimate → outer iterations → finish.

        The outer iterations are Algorithm 1's (weighting, R-step, acceptance); the
        formulation's steps (:mod:`streamspec.core.fit_steps`) say how. The fitted
        attributes are set only once the fit has succeeded.
        """
        steps.prepare()
        steps.initial_estimate(init)
        steps.iterate()
        model, fitted = steps.finish()
        for name, value in fitted.items():
            setattr(self, name, value)
        self.model_ = model
        return model

    def _fit_projected(self, triples: Triples, labels, init, bases: dict | None = None,
                       scored_only: bool = False, keep_state: bool = False,
                       info=None, reference: Triples | None = None) -> ObservableOperatorModel:
        result = cold_fit(settings_of(self), self._max_outer(projected=True), triples, labels,
                          bases=bases, scored_only=scored_only, keep_state=keep_state, info=info,
                          init=init, reference=reference)
        for name, value in result.fitted.items():
            setattr(self, name, value)
        self.model_ = result.model
        return result.model

    def _fit_dense(self, data, init) -> ObservableOperatorModel:
        return self._run(DenseFit(self, self._max_outer(projected=False), data), init)

    def _fit_plain(self, data, init, formulation: str, keep_state: bool = False
                   ) -> ObservableOperatorModel:
        self.formulation_ = formulation
        if formulation == "projected":
            triples, labels = triples_of(data)
            return self._fit_projected(triples, labels, init, keep_state=keep_state)
        return self._fit_dense(data, init)

    def _fit_with_backoff(self, data, init, formulation: str, keep_state: bool = False,
                          grams: WindowCounts | None = None):
        triples, labels = triples_of(data)
        if isinstance(init, MEstimator):  # its fitted attributes may be dropped below
            init = _model_of(init)
        bases: dict = {}  # why: the truncated SVD of each set of counts is computed once

        def fit(t: Triples) -> ObservableOperatorModel:
            # why: the fit on the kept counts was scored already; its operators (n·k² floats)
            # are freed before this fit allocates its own
            for name in ("model_", "factors_", "weighting_"):
                self.__dict__.pop(name, None)
            self.formulation_ = formulation
            if formulation == "projected":
                model = self._fit_projected(t, labels, init, bases, scored_only=t is not triples,
                                            keep_state=keep_state and t is triples,
                                            reference=None if t is triples else triples)
                drop_cached(bases, t, triples, model)
                return model
            model = self._fit_dense(t, init)
            model.symbols = None if labels is None else list(labels)
            return model

        seed = 0 if self.random_state is None else self.random_state
        # a previous model, or anything that carries its backoff (a refit's start sent to a
        # worker process without the operators): the refit keeps its weights and its HMM
        previous = init if getattr(init, "backoff", None) is not None else None
        self.model_ = fit_with_backoff(fit, triples, starts_of(data, triples.n), random_state=seed,
                                       hmm_states=self.hmm_states, previous=previous,
                                       grams=long_windows_of(data) if grams is None else grams,
                                       filter_window=self.window)
        state = getattr(self, "state_", None)
        if state is not None:  # the next refit starts from this model, backoff and all
            state.model = self.model_
        return self.model_


def _model_of(init):
    """The previous model behind a warm start's ``init`` (a model, a fitted MEstimator, or
    :class:`MFactors`, which has none)."""
    if isinstance(init, MEstimator):
        return getattr(init, "model_", None) or getattr(init, "factors_", None)
    return init
