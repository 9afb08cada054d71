"""The predictor's HMM over windows: how many states the window counts support, and its fit.

When the counts are of windows (``MomentAccumulator(window=L)``, L ≥ 2), the hidden
Markov model the predictor mixes in (:mod:`streamspec.core.backoff_fit`) is fitted on
them, not on the triples: its number of states is no longer capped by the alphabet
(``docs/math.md`` section 11), so a 4-symbol stream (DNA) can get 8, 16 or 32 states.

- :func:`hmm_states_for_windows`: the ``"auto"`` number of states, the largest supported
  rank of the window Hankel matrices (singular values above the sampling noise, as for
  triples), clipped to 2..64 (``backoff_fit.MAX_HMM_STATES``);
- :func:`choose_window_hmm`: the spectrum undercounts the states EM can use (the smallest
  singular values of a many-state HMM sink below the noise long before its extra states stop
  paying), so ``"auto"`` fits the supported rank r, 2r and 4r (:func:`state_candidates`), r
  and 2r with half the budget each, 4r with as much again (all scaled up above 16 states by
  the E-step's cost, :func:`window_budget`), and keeps the one whose held-out grams are
  likelier (4r: chorales over windows, 24 states instead of 12, 0.86% better held out);
- :func:`fit_window_hmm`: EM on at most :data:`~streamspec.core.backoff_fit.EM_MAX_TRIPLES`
  distinct grams (threshold-sampled, unbiased), over the longest window whose iterations
  fit the work budget (at least the window whose Hankel supports the states, where the
  method of moments starts). The budget is in the units of the message E-step
  (:func:`~streamspec.core.window_estep.estep_units`, about those of a triple's K² + 30);
- :func:`em_sample`: the same threshold sampling of the triples, for EM over triples.
"""

from __future__ import annotations

import warnings

import numpy as np

from streamspec.core.hidden_markov_model import HiddenMarkovModel
from streamspec.core.hmm_estimator import HMMEstimator
from streamspec.core.hmm_moments import SharedMoments
from streamspec.core.hmm_smoothing import smoothed_hmm
from streamspec.core.triples import Triples
from streamspec.core.window_estep import GramMessages, estep_units
from streamspec.core.window_rank import level_rank, noise_level, supported_rank
from streamspec.core.windows import WindowCounts

__all__ = ["em_sample", "hmm_states_for_windows", "noise_level", "fit_window_hmm", "choose_window_hmm",
           "state_candidates", "sample_grams", "sample_threshold", "em_window", "candidate_budget",
           "window_budget", "moment_hmm", "BASE_STATES"]

# candidates up to this many states share the EM budget evenly; a larger one's share is scaled
# by (K² + 30) / (BASE_STATES² + 30), so it gets as many EM iterations as BASE_STATES states
BASE_STATES = 16

_E_STEPS = 3  # E-steps of one accelerated (SQUAREM) EM iteration over windows, at most
_UNIT = 30  # per triple, an E-step's cost beyond its K² products (candidate_budget's scale)
# EM iterations the window must leave room for: measured on sparse automata (10 states, 4
# symbols, 10⁵ symbols), 120 iterations over 5-grams beat 6 over 7-grams or 5 over 9-grams by
# 0.07 nats a held-out gram; EM over windows needs its iterations more than longer windows
_WINDOW_ITER = 50


def hmm_states_for_windows(grams: WindowCounts, max_states: int) -> int:
    """States of the predictor's HMM for ``"auto"`` over windows: the largest supported rank of
    the window Hankel matrices of every window l ≤ L (:func:`~streamspec.core.window_rank
    .supported_rank`: above the noise level), clipped to ``2..max_states``. L SVDs (dense up to
    1,000 windows, else the top 16, doubled while all are above the noise, to ``max_states + 1``),
    none for a window whose singular values ``grams`` already holds
    (:func:`~streamspec.core.window_rank.level_rank`).

    Examples
    --------
    >>> from streamspec.core.hmm import HMM
    >>> from streamspec.core.hmm_moments import exact_windows
    >>> ring = HMM(T=0.2 * np.eye(4) + 0.8 * np.roll(np.eye(4), 1, axis=0),   # 4 states, 2 symbols
    ...            O=[[0.9, 0.6, 0.2, 0.1], [0.1, 0.4, 0.8, 0.9]])
    >>> hmm_states_for_windows(exact_windows(ring, 3).scaled(1e6), 16)
    4
    """
    # why level_rank: the model's window choice reads the same Hankels of the same grams
    ranks = [level_rank(grams, level, max_states) for level in range(1, grams.window + 1)]
    return int(min(max(max(ranks), 2), max_states))


def sample_grams(grams: WindowCounts, max_nnz: int, rng: np.random.Generator) -> WindowCounts:
    """At most ~``max_nnz`` distinct grams, unbiased (threshold sampling: grams of weight at least
    τ kept, lighter ones kept with probability w / τ, then weighing τ). O(nnz + max_nnz log max_nnz).

    >>> g = WindowCounts.from_digits(2, 2, [[0, 1, 0, 1, 0], [1, 0, 1, 0, 1]], [9.0, 1.0])
    >>> sample_grams(g, 5, np.random.default_rng(0)) is g
    True
    >>> a, b = (sample_grams(g, 1, np.random.default_rng(0)) for _ in range(2))
    >>> a == b, a._ranks is b._ranks      # the same draw: one memo of spectra, kept on g
    (True, True)
    """
    if grams.nnz <= max_nnz:
        return grams
    draw = ("sample", float(max_nnz), repr(rng.bit_generator.state))  # what decides the sample
    w = grams.weights
    tau = sample_threshold(w, max_nnz)
    keep = (w >= tau) | (rng.random(w.size) * tau < w)
    return grams.derived(grams.window, grams.codes[keep], np.maximum(w[keep], tau), draw)


def sample_threshold(w: np.ndarray, m: int) -> float:
    """τ with Σ min(1, w/τ) = m, exactly: the threshold of an unbiased sample of about m of
    the weights ``w`` (0 when there are at most m weights; m ≥ 1).

    With the weights sorted in decreasing order and j of them at least τ, the sum is
    ``j + S_j / τ`` (``S_j`` the sum of the others), so τ = ``S_j / (m - j)`` for the j
    whose interval holds it; only the m + 1 largest weights need sorting. τ may exceed the
    largest weight (j = 0: every weight sampled, e.g. all of them 1), so that a sample never
    keeps more than about m. O(nnz + m log m) (it was a bisection of 50 passes over all the
    weights, capped at the largest: 26 of 236 s of the default fit at n = 10⁵, 10⁷ tokens,
    and a sample of all singletons kept them all).

    >>> sample_threshold(np.array([1.0, 1.0, 1.0, 1.0, 4.0]), 3)
    2.0
    >>> sample_threshold(np.ones(10), 4)   # all weights below τ: each kept with probability 0.4
    2.5
    """
    w = np.asarray(w, dtype=np.float64)
    m = int(m)
    if w.size <= m:  # every weight kept whole
        return 0.0
    top = np.partition(w, w.size - m - 1)[w.size - m - 1:]  # the m + 1 largest
    top = np.sort(top)[::-1]
    below = float(w.sum()) - np.concatenate(([0.0], np.cumsum(top[:-1])))  # S_j, j = 0..m
    j = np.arange(m)
    tau = below[:m] / (m - j)
    upper = np.concatenate(([np.inf], top[: m - 1]))  # w_(j) (w_(0) = ∞): τ ≤ it ...
    ok = (tau <= upper) & (tau > top[:m])  # ... and above w_(j+1)
    if not ok.any():  # ties at the boundary (cannot happen with exact arithmetic)
        return float(top[0])
    return float(tau[np.argmax(ok)])


def em_window(grams: WindowCounts, n_states: int, budget: float, min_iter: int) -> int:
    """The window EM runs over: the longest l ≤ L whose ``min_iter`` iterations cost at most
    ``budget`` units (three message E-steps an iteration,
    :func:`~streamspec.core.window_estep.estep_units`), but at least the window whose Hankel
    supports the states (:func:`~streamspec.core.window_rank.window_for_states`).
    O(nnz · L² + nnz log nnz) plus up to L SVDs.
    """
    return _em_window(grams, n_states, budget, min_iter, _SharedWindows(grams, max(n_states, 1)))


def _cost(grams: WindowCounts, n_states: int) -> float:
    """Work units of one EM iteration on ``grams``: three message E-steps
    (:func:`~streamspec.core.window_estep.estep_units`, 1–4 ns a unit; it was
    ``nnz · L · (K² + 30)`` an E-step, 20–100 times the E-step's real work on small
    alphabets, so EM got its minimum of 5 iterations where the budget paid for 100).
    O(nnz + P log P)."""
    return estep_units(grams, n_states) * _E_STEPS


def candidate_budget(budget: float, n_candidates: int, n_states: int) -> float:
    """The EM work units of one of ``n_candidates`` HMM sizes sharing ``budget``: an even share,
    scaled by ``(K² + 30) / (16² + 30)`` above :data:`BASE_STATES` states (an iteration costs
    O(K²) a triple or gram), so a larger candidate runs as many iterations as a 16-state one.
    Summed over distinct candidates up to 64 states, at most ``budget · (1 + 16.1 / n_candidates)``.
    O(1).

    >>> candidate_budget(4e8, 4, 16), round(candidate_budget(4e8, 4, 32) / 1e8, 3)
    (100000000.0, 3.685)
    """
    share = budget / max(1, n_candidates)
    return share * max(1.0, (n_states**2 + _UNIT) / (BASE_STATES**2 + _UNIT))


def window_budget(share: float, grams: WindowCounts, n_states: int) -> float:
    """A candidate's EM work units over windows: ``share``, scaled above :data:`BASE_STATES`
    states by the E-step's own cost ratio ``estep_units(K) / estep_units(16)`` on ``grams``, so
    that a larger HMM gets as many iterations as a 16-state one. Over windows the E-step grows
    about as K (its m² products are per distinct past and future, few where the windows
    repeat), so :func:`candidate_budget`'s K² scaling (right for triples) gave a 64-state
    candidate 14 times the share for twice the work an iteration. O(nnz + P log P).

    >>> g = WindowCounts.from_digits(2, 2, [[-1, 0, 1, 1, 0], [0, 1, 1, 0, 1], [1, 1, 1, 0, 1]])
    >>> window_budget(1e6, g, 8), round(window_budget(1e6, g, 64) / 1e6, 3)
    (1000000.0, 6.929)
    """
    if n_states <= BASE_STATES:
        return float(share)
    return float(share) * estep_units(grams, n_states) / estep_units(grams, BASE_STATES)


def state_candidates(rank: int, max_states: int) -> list[int]:
    """The numbers of states ``"auto"`` tries over windows: the supported rank, twice and four
    times it, within ``2..max_states``. O(1).

    >>> state_candidates(5, 64), state_candidates(12, 64), state_candidates(40, 64)
    ([5, 10, 20], [12, 24, 48], [40, 64])
    """
    return sorted({int(min(max(k, 2), max_states)) for k in (rank, 2 * rank, 4 * rank)})


def choose_window_hmm(kept: WindowCounts, held: WindowCounts, candidates: list[int], budget: float,
                      max_nnz: int, min_iter: int, max_iter: int, random_state: int = 0
                      ) -> HiddenMarkovModel | None:
    """Of HMMs with each number of states in ``candidates`` fitted on ``kept`` (each with half the
    budget, scaled by the E-step's cost above 16 states, :func:`window_budget`),
    the one under which the ``held`` grams are likeliest (their mean log-likelihood at their own
    window, the same for every candidate, from its gram and sequence start distributions), each
    smoothed first (:func:`~streamspec.core.hmm_smoothing.smoothed_hmm`, as the backoff uses it);
    ``None`` if none could be fitted.
    O(Σ window_budget + nnz_held · L · K² per candidate): an EM iteration costs
    O(nnz · K + (P + F) · L · K²) for P distinct pasts and F futures, at least ``min_iter``
    of them."""
    best, best_ll = None, -np.inf
    scored = sample_grams(held, max_nnz, np.random.default_rng(random_state))
    # why: every size fits the same samples and reads the same window ranks (one SVD per window,
    # not two per size: em_window's and HMMEstimator's, the latter of the top 129 values)
    shared = _SharedWindows(kept, max(candidates, default=1), max_nnz, random_state)
    sample = shared.sample(kept.window)  # the grams EM's cost is counted on (window_budget)
    for K in candidates:
        share = window_budget(budget / min(2, len(candidates)), sample, K)
        fitted = _fit(kept, K, share, max_nnz, min_iter, max_iter, None, random_state, shared)
        if fitted is None:
            continue
        model, est = fitted
        # why: scored as the backoff will use it, no held-out gram at probability 0 (hmm_smoothing)
        model = smoothed_hmm(model, kept.total)
        if scored.nnz == 0:
            return model  # nothing held out: the first (smallest) that fits
        pi0 = getattr(est, "sequence_startprob_", model.startprob_)
        pi = getattr(est, "gram_startprob_", model.startprob_)
        with np.errstate(all="ignore"):
            ll = GramMessages(scored).estep(pi, pi0, model.transmat_.T, model.emissionprob_.T,
                                            stats=False)[0]
        if best is None or ll > best_ll:
            best, best_ll = model, ll
    return best


def fit_window_hmm(grams: WindowCounts, n_states: int, budget: float, max_nnz: int, min_iter: int,
                   max_iter: int, init=None, random_state: int = 0) -> HiddenMarkovModel | None:
    """An HMM of ``n_states`` states fitted on window counts: :func:`em_window` (its cost counted
    on at most ``max_nnz`` grams), :func:`sample_grams` of the grams of that window to
    ``max_nnz``, then :class:`~streamspec.core.hmm_estimator.HMMEstimator` with its
    iterations bounded by ``budget``; ``None`` when it cannot be fitted (too few distinct
    windows, a singular moment problem). The grams are summed to the EM window before they
    are sampled: a sample of the longer grams summed to a shorter window is noisier than the
    shorter grams themselves (fewer distinct, often all kept; a sticky 5-state HMM over 10
    symbols at 10⁶ symbols lost 0.5%: 2.0862 against 2.0758 nats). O(budget) plus the SVDs of
    :func:`em_window`.
    """
    fitted = _fit(grams, n_states, budget, max_nnz, min_iter, max_iter, init, random_state)
    return None if fitted is None else fitted[0]


def moment_hmm(moments: SharedMoments | None, n_states: int, random_state: int
               ) -> HiddenMarkovModel | None:
    """The method-of-moments HMM of ``n_states`` states from ``moments`` shared by several sizes,
    seeded as ``HMMEstimator(n_iter=0, random_state=random_state)`` seeds its moment step;
    ``None`` when there are no moments, too few of them for ``n_states``, or the moment
    problem is singular. O(16 · n · K² + n · K³)."""
    if moments is None or n_states > moments.max_states:
        return None
    seed = np.random.default_rng(random_state).integers(2**32)  # HMMEstimator's moment seed
    try:
        with np.errstate(all="ignore"):
            pi, T, O = moments.estimate(n_states, seed)
        return HiddenMarkovModel(pi, T.T, O.T)
    except (ValueError, np.linalg.LinAlgError, FloatingPointError):
        return None


class _SharedWindows:
    """What HMM sizes fitted on the same grams share, each computed once when first asked for:
    the marginals of every window, their seeded samples of at most ``max_nnz`` grams, the
    supported ranks (:func:`~streamspec.core.window_rank.supported_rank`, the top
    ``max_states`` + 1 singular values) of their Hankels and
    :func:`~streamspec.core.window_rank.window_for_states` from them (the same window for every
    ``n_states ≤ max_states``: a rank counted from more singular values reaches n_states
    exactly when one counted from n_states + 1 does), and the moments of the triples
    (:meth:`moment_start`). One SVD per window asked for."""

    def __init__(self, grams: WindowCounts, max_states: int, max_nnz: float = np.inf,
                 random_state: int = 0):
        self.grams, self.max_states, self._ranks = grams, int(max_states), {}
        self.max_nnz, self.random_state = max_nnz, random_state
        self._marginals: dict[int, WindowCounts] = {}
        self._samples: dict[int, WindowCounts] = {}
        self._moments = False  # SharedMoments of the triples, built at the first use

    def marginal(self, level: int) -> WindowCounts:
        if level not in self._marginals:
            self._marginals[level] = self.grams.marginal(level)
        return self._marginals[level]

    def sample(self, level: int) -> WindowCounts:
        """The grams of window ``level``, threshold-sampled to ``max_nnz`` (seeded)."""
        if level not in self._samples:
            self._samples[level] = sample_grams(self.marginal(level), self.max_nnz,
                                                np.random.default_rng(self.random_state))
        return self._samples[level]

    def moment_start(self, n_states: int, random_state: int) -> HiddenMarkovModel | None:
        """The method-of-moments HMM of the triples (where the moments' window is 1),
        as ``HMMEstimator(n_states, n_iter=0, random_state).fit`` would start EM: one SVD and
        one pass over the triples for every size (:class:`~streamspec.core.hmm_moments
        .SharedMoments`); ``None`` when singular. O(16 · n · K² + n · K³) once built."""
        if self._moments is False:
            try:
                self._moments = SharedMoments(self.marginal(1).triples(), min(self.max_states, self.grams.n))
            except (ValueError, np.linalg.LinAlgError, FloatingPointError):
                self._moments = None
        return moment_hmm(self._moments, n_states, random_state)

    def rank(self, level: int) -> int:
        if level not in self._ranks:
            # why: of the sample, as EM sees it (an SVD of up to max_nnz grams, not of all of them);
            # unsampled, the Hankel of the grams' own marginal, whose singular values the model's
            # window choice and hmm_states_for_windows already computed (level_rank)
            sample = self.sample(level)
            self._ranks[level] = (level_rank(self.grams, level, self.max_states)
                                  if sample is self.marginal(level)
                                  else supported_rank(sample, self.max_states))
        return self._ranks[level]

    def window_for_states(self, n_states: int, top: int) -> int:
        """``window_for_states(grams.marginal(top), n_states)``: the smallest window up to ``top``
        supporting the states, else of those with room for them the one supporting most."""
        if top == 1:
            return 1
        room = [level for level in range(1, top + 1) if self.grams.n**level >= n_states]
        best, best_rank = None, -1
        for level in room or [top]:
            r = self.rank(level)
            if r >= n_states:
                return level
            if r > best_rank:
                best, best_rank = level, r
        return best


def _fit(grams: WindowCounts, n_states: int, budget: float, max_nnz: int, min_iter: int,
         max_iter: int, init, random_state: int, shared: _SharedWindows | None = None):
    """:func:`fit_window_hmm`'s model and its fitted estimator, or ``None``. ``shared``: the
    marginals, samples and ranks of ``grams`` (the same ``max_nnz`` and seed), when several
    sizes fit."""
    if shared is None:
        shared = _SharedWindows(grams, n_states, max_nnz, random_state)
    try:
        L = _em_window(grams, n_states, budget, max(min_iter, _WINDOW_ITER), shared)
        counts = shared.sample(L)
        iters = int(np.clip(budget / max(1.0, _cost(counts, n_states)), min_iter, max_iter))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            warnings.simplefilter("ignore", UserWarning)  # a failed moment step: EM starts at random
            est = HMMEstimator(n_states=n_states, n_iter=iters, random_state=random_state, window=L)
            est._validate()
            level = shared.window_for_states(n_states, L)  # est.fit's, from the ranks
            est._check_level(counts, level)
            if init is None and level == 1:  # the sizes share the moments (of all the triples)
                init = shared.moment_start(n_states, random_state)
            return est._fit_windows(counts, None, L, level, init), est
    except (ValueError, np.linalg.LinAlgError, FloatingPointError):
        return None


def _em_window(grams: WindowCounts, n_states: int, budget: float, min_iter: int,
               shared: _SharedWindows) -> int:
    """:func:`em_window` with the marginals and window ranks of ``grams`` from ``shared``, an
    iteration's cost counted on the sample of at most ``shared.max_nnz`` grams EM runs on."""
    level = shared.window_for_states(n_states, grams.window)
    L = grams.window
    while L > level and _cost(shared.sample(L), n_states) * min_iter > budget:
        L -= 1
    return L


def em_sample(triples: Triples, max_nnz: int, rng: np.random.Generator) -> Triples:
    """At most ~``max_nnz`` distinct triples that EM can run on instead of all of them, unbiased:
    triples of weight at least a threshold τ are kept; lighter ones are kept with probability
    w / τ and then weigh τ (threshold sampling), so every expected count is unchanged. O(nnz).

    >>> t = Triples.from_arrays(3, [0, 1, 2, 0], [1, 2, 0, 2], [2, 0, 1, 1], [50.0, 1.0, 1.0, 1.0])
    >>> em_sample(t, 10, np.random.default_rng(0)) is t, em_sample(t, 2, np.random.default_rng(0)).nnz <= 3
    (True, True)
    """
    if triples.nnz <= max_nnz:
        return triples
    w = triples.weights
    tau = sample_threshold(w, max_nnz)
    keep = (w >= tau) | (rng.random(w.size) * tau < w)
    return Triples(triples.n, triples.codes[keep], np.maximum(w[keep], tau))
