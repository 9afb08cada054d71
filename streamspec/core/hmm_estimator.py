"""Learn a discrete HMM from counts: method of moments, then EM on the counted triples or windows.

:class:`HMMEstimator` turns the sufficient statistics kept by
:class:`~streamspec.streaming.accumulator.MomentAccumulator` (the counts of consecutive
triples ``(x1, x2, x3)``, or of the (2L+1)-grams around each symbol with ``window=L``) into
a :class:`~streamspec.core.hidden_markov_model.HiddenMarkovModel` with transition and
emission matrices, without ever revisiting the stream.

Two stages, both linear in the number of *distinct* triples (or grams) ``nnz`` and
independent of the stream's length:

1. **Method of moments** (Anandkumar, Hsu & Kakade 2012; :mod:`streamspec.core.hmm_moments`):
   the eigenvectors of a random combination of the observable operators give the
   emissions, the transitions and π. Over single symbols at most n states can be told
   apart; over windows of L symbols, as many as the rank of the window Hankel matrix
   (``docs/math.md`` sections 8 and 10). Cost O(nnz · m + (n + W) · m²) plus the top-m
   SVD of P31.
2. **Refinement** (:mod:`streamspec.core.hmm_em`): EM maximising the likelihood of the
   counted triples or grams, each distinct one a sample of a three-step (or (2L+1)-step)
   HMM weighted by its count. O(nnz · m²) per iteration for triples, O(nnz · L · m²) for
   grams. The log-likelihood never decreases (``log_likelihood_history_``).

Moments give a consistent, start-free estimate; EM then removes most of its
finite-sample error, and over longer windows it sees more of the dynamics (a sticky
chain's persistence, section 11).
"""

from __future__ import annotations

import contextlib
import warnings

import numpy as np

from streamspec.core import defaults
from streamspec.core.fit_data import windows_of
from streamspec.core.hidden_markov_model import HiddenMarkovModel
from streamspec.core.hmm_em import refine, refine_windows, triple_log_likelihood
from streamspec.core.hmm_moments import exact_triples, moment_estimate, normalise_columns
from streamspec.core.params import Estimator
from streamspec.core.triples import Triples
from streamspec.core.window_estep import estep_units
from streamspec.core.window_rank import window_for_states
from streamspec.core.window_triples import WindowTriples
from streamspec.core.windows import MAX_WINDOW, PAD, WindowCounts

__all__ = ["HMMEstimator", "moment_estimate", "refine", "triple_log_likelihood", "exact_triples"]

_FLOOR = 1e-6  # mass mixed into the emissions/transitions of a start, so no triple is impossible
_START_PRIOR = 10.0  # sequences' worth of the gram start π that a sequence start π₀ is shrunk to
# window "auto": work units of one E-step at most (window_estep.estep_units, 1-4 ns a unit: ~0.3 s;
# it was distinct grams × states², which overstates the message E-step 20-100 times)
_EM_BUDGET = 1 << 27
# window "auto" with EM first over the moments' shorter window: the cycles over the long window
# are this share of n_iter (30 of 300). Measured on bench_windows' 25-state, 8-symbol automaton
# at 10⁶ symbols: 300 cycles over 5-grams then 10 / 30 / 100 over 7-grams were +1.86% / +1.16% /
# +0.59% held out against the truth in 6.4 / 9.7 / 26 CPU s; 300 cycles over 7-grams from the
# moments +2.33% in 61 s (stuck on a plateau for 150 cycles)
_LONG_SHARE = 10
# window "auto" with more states than symbols and EM over the moments' own window (n_iter None, no
# restarts): EM first fits _GROW times the states (_GROW_ITER cycles), keeps the n_states most
# occupied and refines them (_PRUNED_ITER cycles). The moments of more states than the window
# Hankel supports place them poorly, and EM from them stops in a local optimum that wastes
# states; a few more states than needed let EM find the automaton's, the unused ones are dropped.
# bench_windows at 10⁵ symbols, held out against the truth: 50 states over 20 symbols, 3 automata,
# +7.99/+5.62/+3.91% -> +2.35/+1.66/+0.62% at about the same cost; 25 over 20: +3.68 -> +1.13%.
# Where a longer window follows the moments' (coarse, above) the grown start was not better on
# every automaton (25 states over 8 symbols at 10⁶: +0.54/+0.52/+1.16% from the moments,
# +0.94/+0.49/+1.65% grown), so that path keeps the moments' start. Where the triples support
# the states (level 1) but EM runs over windows (L ≥ 2), EM from the triples' moments stopped far
# off (10 states over 20 symbols at 10⁶, automaton 1020: +6.53% against the truth, the triples'
# own fit +11.0%); the moments of the EM window itself, grown, reach the truth (+0.00%), so the
# start is taken there
_GROW = 1.25
_GROW_ITER = 50
_PRUNED_ITER = 30


def _one_blas_thread():
    """Limit BLAS to one thread while EM runs (its products are (chunk × m)·(m × m): threads only
    add overhead, 3-7× on a loaded machine); a no-op when threadpoolctl is not installed."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - threadpoolctl comes with scikit-learn
        return contextlib.nullcontext()
    return threadpool_limits(1, user_api="blas")


def _gram_occupancy(pi: np.ndarray, T: np.ndarray, L: int) -> np.ndarray:
    """The mean state distribution over the 2L + 1 positions of a gram whose first state is
    drawn from ``pi`` (``T[h2, h1]`` column-stochastic): the states' share of the positions EM
    saw, through no more of the chain's run than it saw. O(L · m²)."""
    p, total = pi, pi.copy()
    for _ in range(2 * L):
        p = T @ p
        total += p
    return total / total.sum()


def _collapsed(stationary: np.ndarray, seen: np.ndarray) -> bool:
    """Whether T's stationary distribution puts most of its mass where the fit's grams' states
    are not (total variation above 1/2 from their share ``seen``): a near-absorbing state the
    counts hardly visit, which would take the smoothing's and the held-out scoring's weight whole
    (a 5-state fit over triples of a sticky 10-state HMM over 100 symbols: 0.999 on one state,
    held-out contexts 4.99 nats from it against 4.42 from the triples' share). O(m)."""
    return bool(0.5 * np.abs(stationary - seen).sum() > 0.5)


def _floored(params: tuple, n: int) -> tuple:
    """``(pi, pi0, T, O)`` floored again, as a start is, and renormalised: EM over a shorter
    window (or a pruned model) zeroed entries that the next fit may need, and EM never revives a
    zero (25 states, 8 symbols, 10⁶ symbols, 30 cycles over the long window: +1.16% of the truth
    from the floored start, +2.61% without). O(m² + n · m)."""
    pi, pi0, T, O = params
    pi, pi0 = ((p + _FLOOR) / (p + _FLOOR).sum() for p in (pi, pi0))
    return pi, pi0, normalise_columns(T, floor=_FLOOR), normalise_columns(O, floor=_FLOOR / n)


class HMMEstimator(Estimator):
    """Fit a :class:`~streamspec.core.hidden_markov_model.HiddenMarkovModel` to triple or window counts.

    Parameters
    ----------
    n_states
        Number of hidden states m. Over triples at most the number of symbols n; over
        windows of L symbols (counts of ``MomentAccumulator(window=...)``) up to the
        number of distinct windows, recovered when the window Hankel matrix has rank m.
    n_iter
        Iterations of the refinement (EM on the counted triples or grams, accelerated by
        SQUAREM); 0 keeps the method-of-moments estimate. Over triples the E-steps, run as
        ⌈n_iter / 3⌉ cycles of at most three; over windows the cycles. None (default): 50
        over triples, 300 over windows (the tolerance usually stops it well before).
    tol
        The refinement stops when an iteration raises the mean triple (gram)
        log-likelihood by less than this.
    n_restarts
        Additional refinements from seeded random starts; the start whose refined
        log-likelihood is highest wins.
    random_state
        Seed of the moment step's random combination and of the random starts.
    init
        ``"moments"`` (default): start the refinement from the method of moments;
        ``"random"``: from a seeded random model (Dirichlet rows).
    window
        L, the window of the refinement, at most the counts' own (an integer, or
        ``"auto"``, the default). The moments always use the shortest window, at most L,
        whose Hankel matrix supports m dimensions
        (:func:`~streamspec.core.window_rank.window_for_states`); longer windows only add
        noise to them. EM gains from every symbol of context (it sees a sticky chain's
        persistence, ``docs/math.md`` section 11), so ``"auto"`` refines over the counts'
        own window, shortened while one E-step would exceed 2²⁷ work units (about 0.3 s,
        :func:`~streamspec.core.window_estep.estep_units`), but not below the moments'
        window. When that window is longer than the moments' one and the moments need
        windows (more states than symbols), EM runs first over the moments' window
        (``n_iter`` cycles, its E-steps many times cheaper) and then over L from there
        (``n_iter`` cycles, or 30 by default: the short window's fit is close, the long
        window refines it). When L is the moments' window itself (e.g. 20 symbols, counts
        of windows of 2) and the states outnumber the symbols, EM (``n_iter`` None, no
        restarts) starts from the moments of ⌈1.25 m⌉ states for 50 cycles, keeps the m most
        occupied and refines them for 30: EM from the moments of m states that the Hankel
        does not support stops in a local optimum that wastes states (``start_`` says
        "pruned"). The same start is taken when the triples would give the moments but EM
        runs over windows of L ≥ 2 (EM from the triples' moments can stop far off). Counts
        of triples give L = 1: exactly the fit over triples.
        Over windows EM is accelerated (SQUAREM: an iteration is a cycle of up to three
        E-steps).

    Attributes (after :meth:`fit`)
    -------------------------------
    model_
        The fitted :class:`HiddenMarkovModel` (also returned by :meth:`fit`).
    window_
        The window L fitted on.
    coarse_window_
        The moments' window EM ran over first (``window="auto"``, see ``window``), else None.
    log_likelihood_history_
        Mean triple (gram) log-likelihood after each refinement cycle of the winning start
        (over ``window_`` only).
    loss_history_
        Its negative (mean log loss per triple or gram).
    n_iter_, converged_
        SQUAREM cycles run by the winning start and whether it met ``tol``.
    start_
        How the winning start was obtained: ``"moments"``, ``"random"``, ``"warm"``
        or ``"restart k"``.
    gram_startprob_, sequence_startprob_
        Windows only: the state distribution at the first symbol of a gram, and at the
        start of a sequence (from the grams padded before it); the model's
        ``startprob_`` is the latter, shrunk towards the former by 10 sequences' worth
        (all the former when no sequence start was counted).

    Costs: the top-m SVD of the sparse P31, O(nnz · m + (n + W) · m²) for the moments,
    O(nnz · m²) (triples) or O(nnz · L · m²) (grams) per refinement iteration and per
    start, for nnz distinct triples or grams and W windows; memory O(nnz + (n + W) · m).
    Nothing depends on the stream's length.

    Examples
    --------
    >>> from streamspec.core.hmm import HMM
    >>> truth = HMM(T=[[0.95, 0.1], [0.05, 0.9]], O=[[0.6, 0.1], [0.3, 0.2], [0.1, 0.7]])
    >>> est = HMMEstimator(n_states=2, n_iter=0, random_state=0)
    >>> hmm = est.fit(exact_triples(truth))
    >>> order = np.argsort(-hmm.emissionprob_[:, 0])
    >>> hmm.emissionprob_[order].round(6).tolist()
    [[0.6, 0.3, 0.1], [0.1, 0.2, 0.7]]
    >>> hmm.transmat_[np.ix_(order, order)].round(6).tolist()
    [[0.95, 0.05], [0.1, 0.9]]

    More states than symbols, from windows (here the population counts of a 4-state
    ring over 2 symbols):

    >>> from streamspec.core.hmm_moments import exact_windows
    >>> ring = HMM(T=0.2 * np.eye(4) + 0.8 * np.roll(np.eye(4), 1, axis=0),
    ...            O=[[0.9, 0.6, 0.2, 0.1], [0.1, 0.4, 0.8, 0.9]])
    >>> est = HMMEstimator(n_states=4, n_iter=0, random_state=0)
    >>> hmm = est.fit(exact_windows(ring, 2))
    >>> est.window_, hmm.errors_against(ring)[0] < 1e-8
    (2, True)
    """

    def __init__(
        self,
        *,
        n_states: int,
        n_iter: int | None = None,
        tol: float = defaults.HMM_TOL,
        n_restarts: int = 0,
        random_state=None,
        init: str = defaults.HMM_INIT,
        window: int | str = "auto",
    ):
        self.n_states = n_states
        self.n_iter = n_iter
        self.tol = tol
        self.n_restarts = n_restarts
        self.random_state = random_state
        self.init = init
        self.window = window

    def _validate(self) -> None:
        """Check the settings (:func:`streamspec.core.defaults.check_hmm_settings`, the window). O(1)."""
        defaults.check_hmm_settings(n_states=self.n_states, n_iter=self.n_iter, tol=self.tol,
                                    n_restarts=self.n_restarts, init=self.init)
        w = self.window
        if w != "auto" and (isinstance(w, bool) or not isinstance(w, int | np.integer)
                            or not 1 <= w <= MAX_WINDOW):
            raise ValueError(f"window must be 'auto' or an integer in 1..{MAX_WINDOW}, got {w!r}")

    def _choose_windows(self, grams: WindowCounts) -> tuple[int, int]:
        """``(L, l)``: the window of the refinement and the (shorter or equal) one of the moments,
        after checking that the states can be told apart. O(1) for triples; else up to L SVDs
        of window Hankel matrices and O(nnz · L) per window."""
        m = self.n_states
        if self.window != "auto" and self.window > grams.window:
            raise ValueError(f"window={self.window} needs counts of windows of {self.window} symbols, "
                             f"these are of {grams.window} (MomentAccumulator(window=...))")
        top = grams.window if self.window == "auto" else int(self.window)
        level = window_for_states(grams.marginal(top), m)
        self._check_level(grams, level)
        if self.window != "auto":
            return top, level
        L = top  # the longest window whose E-step fits the budget, at least the moments' window
        while L > level and estep_units(grams.marginal(L), m) > _EM_BUDGET:
            L -= 1
        return L, level

    def _check_level(self, grams: WindowCounts, level: int) -> None:
        """Raise ``ValueError`` when the states cannot be told apart over windows of ``level``
        symbols (more than the alphabet at 1, more than the distinct windows above). O(nnz · L)."""
        n, m = grams.n, self.n_states
        if level == 1 and m > n:
            raise ValueError(
                f"n_states={m} is larger than the alphabet ({n} symbols): the states of a discrete "
                "HMM cannot be told apart from fewer symbols, count windows of several symbols "
                "(MomentAccumulator(window=...)) to learn more states"
            )
        if level > 1 and m > WindowTriples.of(grams.marginal(level).full()).n_windows:
            raise ValueError(f"n_states={m} is larger than the number of distinct windows of {level} "
                             "symbols counted: count longer windows, or more data")

    def _random_start(self, rng, n: int, m: int | None = None):
        m = self.n_states if m is None else m
        pi = rng.dirichlet(np.ones(m))
        T = rng.dirichlet(np.ones(m), size=m).T + 2.0 * np.eye(m)  # mildly sticky
        T /= T.sum(axis=0, keepdims=True)
        O = rng.dirichlet(np.ones(n), size=m).T
        return pi, T, O

    def _warm_start(self, init: HiddenMarkovModel, n: int, labels: list | None):
        m = self.n_states
        if init.n_states != m:
            raise ValueError(f"init has {init.n_states} states, the estimator {m}")
        E = init.emissionprob_.T  # (n_old, m)
        if labels is not None and init.symbols is not None:
            O = np.zeros((n, m))
            where = {s: i for i, s in enumerate(labels)}
            for j, s in enumerate(init.symbols):
                if s in where:
                    O[where[s]] = E[j]
        else:
            if init.n_symbols > n:
                raise ValueError(f"init knows {init.n_symbols} symbols, the counts only {n}")
            O = np.zeros((n, m))
            O[: init.n_symbols] = E
        # symbols new to the model get a small mass, so that no triple is impossible
        O = normalise_columns(O, floor=_FLOOR / n)
        T = normalise_columns(init.transmat_.T, floor=_FLOOR)
        pi = init.startprob_ + _FLOOR
        return pi / pi.sum(), T, O

    def fit(self, data, *, init: HiddenMarkovModel | None = None) -> HiddenMarkovModel:
        """Fit to the counts of ``data`` and return the :class:`HiddenMarkovModel`.

        Parameters
        ----------
        data
            A :class:`~streamspec.streaming.accumulator.MomentAccumulator` (its labels become the
            model's ``symbols`` when it has them; its windows when it counts them), a
            :class:`~streamspec.core.triples.Triples`, a
            :class:`~streamspec.core.windows.WindowCounts`, or dense counts ``c3[x2, x3, x1]``.
        init
            A previous model to start the refinement from (warm start) instead of the
            method of moments; symbols it does not know get a small emission mass.

        Cost: see the class docstring; O(nnz · L · m² · n_iter · (1 + n_restarts)) dominates.

        Over triples, the model's ``startprob_`` is the distribution of the first hidden
        state of a counted triple: for triples counted along long streams, close to the
        stationary distribution, not the distribution at the start of a stream. Over
        windows it is the distribution at the start of a sequence (``sequence_startprob_``),
        and the model's ``occupancy_`` the mean over a gram's 2L + 1 positions from its first
        state's (``gram_startprob_``).
        """
        self._validate()
        grams, labels = windows_of(data)  # refuses empty counts
        L, level = self._choose_windows(grams)
        return self._fit_windows(grams, labels, L, level, init)

    def _fit_windows(self, grams: WindowCounts, labels, L: int, level: int,
                     init: HiddenMarkovModel | None) -> HiddenMarkovModel:
        """:meth:`fit` once the windows are known: EM over ``L``, the moments over ``level``
        (:meth:`_choose_windows`'s; a caller that knows them already, e.g. from supported ranks
        shared by several sizes, skips its SVDs). O(refinement) plus the moments."""
        counts = grams.triples() if L == 1 else grams.marginal(L)
        n = grams.n
        rng = np.random.default_rng(self.random_state)
        moments = None
        if (level == 1 < L and init is None and self.init == "moments" and self.window == "auto"
                and self.n_iter is None and self.n_restarts == 0):
            level = L  # the triples' moments, refined over windows, can stop far off (_GROW)
        if init is None and self.init == "moments":
            moments = counts if L == 1 else (grams.triples() if level == 1 else
                                             WindowTriples.of(grams.marginal(level).full()))
        # "auto" with more states than symbols: EM first over the moments' window, whose E-step
        # is many times cheaper (7-grams of 8 symbols: 15x), then over the long window from there;
        # by default from more states than asked for, pruned (_GROW)
        coarse = (self.window == "auto" and init is None and self.n_iter != 0 and 2 <= level < L)
        self.coarse_window_ = level if coarse else None
        grow = (self.window == "auto" and moments is not None and 2 <= level == L and self.n_iter is None
                and self.n_restarts == 0)
        starts = [] if grow else self._starts(moments, n, init, labels, rng)
        with _one_blas_thread():
            if grow:
                best = self._fit_grown(counts, n, rng)
            elif coarse:
                name, _, _, params = self._refine_all(grams.marginal(level), starts)
                n_long = (defaults.HMM_WINDOW_N_ITER // _LONG_SHARE if self.n_iter is None
                          else self.n_iter)
                *params, hist, conv = refine_windows(counts, *_floored(params, n), n_long, self.tol)
                best = (name, hist, conv, tuple(params))
            else:
                best = self._refine_all(counts, starts)
        name, hist, conv, params = best
        self.start_ = name
        self.window_ = L
        self.log_likelihood_history_ = list(hist)
        self.loss_history_ = [-v for v in hist]
        self.n_iter_ = len(hist) - 1
        self.converged_ = conv
        self.n_symbols_ = n
        pi, T, O = params[0], params[-2], params[-1]
        if L > 1:
            pi = self._sequence_start(counts, params[0], params[1])
        # why the occupancy: the stationary distribution of a T seen through short windows can
        # be a near-absorbing state's (HiddenMarkovModel's occupancy); over triples T's stays
        # (slightly better held out on sticky HMMs) unless it contradicts the triples' share
        seen = _gram_occupancy(params[0], T, L)
        model = HiddenMarkovModel(pi, T.T, O.T, symbols=labels, occupancy=seen if L > 1 else None)
        if L == 1 and _collapsed(model.stationary(), seen):  # rare: built again with the share
            model = HiddenMarkovModel(pi, T.T, O.T, symbols=labels, occupancy=seen)
        self.model_ = model
        return self.model_

    def _fit_grown(self, counts: WindowCounts, n: int, rng):
        """EM over the grams ``counts`` (whose window is also the moments') with ⌈_GROW · m⌉
        states from their moments for _GROW_ITER cycles, then the m most occupied of them (by
        the gram start distribution) refined for _PRUNED_ITER cycles; ``(name, history,
        converged, params)`` as :meth:`_refine_all`. O(nnz · L · m² · (_GROW² · _GROW_ITER +
        _PRUNED_ITER)) plus the moments of the larger HMM."""
        m = self.n_states
        moments = WindowTriples.of(counts.full())
        big = min(int(np.ceil(_GROW * m)), moments.n_windows)
        name, _, _, params = self._refine_all(counts, self._starts(moments, n, None, None, rng, big),
                                              _GROW_ITER)
        pi, pi0, T, O = params
        keep = np.sort(np.argsort(-pi, kind="stable")[:m])  # the most occupied, in their order
        params = (pi[keep], pi0[keep], T[np.ix_(keep, keep)], O[:, keep])
        *params, hist, conv = refine_windows(counts, *_floored(params, n), _PRUNED_ITER, self.tol)
        return f"{name}, {big} states pruned to {m}", hist, conv, tuple(params)

    def _starts(self, moments, n: int, init, labels, rng, m: int | None = None) -> list:
        """The named starting points ``(pi, T, O)`` of the refinement (the method of moments on
        ``moments``, triples or interned windows, unless ``init`` or ``"random"``), of ``m``
        states (default ``n_states``)."""
        m = self.n_states if m is None else m
        starts = []
        if init is not None:
            if not isinstance(init, HiddenMarkovModel):
                raise TypeError(f"init must be a HiddenMarkovModel, got {type(init).__name__}")
            starts.append(("warm", self._warm_start(init, n, labels)))
        elif moments is not None:
            try:
                starts.append(("moments", moment_estimate(moments, m,
                                                          random_state=rng.integers(2**32))))
            except np.linalg.LinAlgError as exc:
                warnings.warn(
                    f"method of moments failed ({exc}); starting from a random model", stacklevel=3
                )
        if not starts:
            starts.append(("random", self._random_start(rng, n, m)))
        for k in range(self.n_restarts):
            starts.append((f"restart {k + 1}", self._random_start(rng, n)))
        return starts

    def _refine_all(self, counts, starts: list, n_iter: int | None = None):
        """Refine every start on triples (or grams), ``n_iter`` iterations (default: the
        estimator's); ``(name, history, converged, params)`` of the best, params ``(pi, T, O)``
        (or ``(pi, pi0, T, O)``)."""
        n_iter = self.n_iter if n_iter is None else n_iter
        n = counts.n
        best = None
        for name, (pi, T, O) in starts:
            if self.n_iter != 0 and name != "warm":
                # a floor keeps every counted triple possible, so EM's log-likelihood is finite
                O = normalise_columns(O, floor=_FLOOR / n)
                T = normalise_columns(T, floor=_FLOOR)
                pi = (pi + _FLOOR) / (pi + _FLOOR).sum()
            if isinstance(counts, Triples):
                iters = defaults.HMM_N_ITER if n_iter is None else n_iter
                *params, hist, conv = refine(counts, pi, T, O, iters, self.tol)
            else:
                iters = defaults.HMM_WINDOW_N_ITER if n_iter is None else n_iter
                *params, hist, conv = refine_windows(counts, pi, pi, T, O, iters, self.tol)
            if best is None or hist[-1] > best[1][-1]:
                best = (name, hist, conv, tuple(params))
        return best

    def _sequence_start(self, grams: WindowCounts, pi: np.ndarray, pi0: np.ndarray) -> np.ndarray:
        """π₀ shrunk towards π by :data:`_START_PRIOR` sequences; sets the two start attributes.
        O(nnz · L)."""
        L = grams.window
        d = grams.digits()
        # one gram per counted sequence has L - 1 pads before it: the one centred on its 2nd symbol
        c0 = float(grams.weights[(d[:, : L - 1] == PAD).all(axis=1)].sum())
        self.gram_startprob_, self.sequence_startprob_ = pi, pi0
        start = (c0 * pi0 + _START_PRIOR * pi) / (c0 + _START_PRIOR)
        return start / start.sum()

    def __repr__(self) -> str:
        return (
            f"HMMEstimator(n_states={self.n_states!r}, n_iter={self.n_iter!r}, tol={self.tol!r}, "
            f"n_restarts={self.n_restarts!r}, random_state={self.random_state!r}, init={self.init!r}, "
            f"window={self.window!r})"
        )
