"""Fitting a model with its backoff: the components on most of the counts, weights on the rest.

:func:`fit_with_backoff` is what every estimator's default ``backoff="auto"`` runs:

1. split the counts at random (binomial thinning of the triples and of the stream
   starts): ``holdout`` of them held out;
2. on the kept counts: the model (``fit``), the Kneser–Ney trigram and a hidden Markov
   model (:class:`~streamspec.core.hmm_estimator.HMMEstimator`, its EM iterations bounded
   by a work budget; with ``hmm_states="auto"`` a few sizes share the budget and the one
   that predicts the held-out counts best is kept);
3. on the held-out counts, each context ``(x1, x2)`` (or a stream start) predicts ``x3``
   under every component: the model stays a component only if the (cross-fitted) mixture
   with it beats the mixture without it by :data:`MIN_MODEL_GAIN` nats per symbol (its
   predictions cost O(n · d), the others' O(K² + log nnz) per observed symbol); the
   starting weights are the Bayes posterior of the blends on those predictions
   (:meth:`~streamspec.core.mixture.ExpertMixture.from_held_out`);
4. the model, the trigram and the HMM again on all the counts (the HMM warm-started from
   step 2, with :data:`_FINAL_SHARE` of the budget), with those weights.

A refit from a previous model (``previous``) fits the model once, rebuilds the trigram,
keeps the weights, and keeps the HMM itself while less than :data:`HMM_REFIT_SHARE` of
the distinct triples changed since its EM (summed over the refits that kept it); past
that, EM warm-starts from it with a budget proportional to that share (docs/math.md
section 10). With ``"auto"`` states, once the counts have grown :data:`STATES_REGROWTH`
times since the size was chosen, the refit chooses it again as step 2 does.

Held-out triples undervalue what the HMM remembers from further back; over windows the
first weights and the model's window filter (``filter_window="auto"``) come from held-out
stretches of L + 1 symbols, and the weights keep learning from every symbol a stream shows.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import numpy as np

from streamspec.core.backoff import Backoff
from streamspec.core.backoff_windows import (
    BASE_STATES,
    candidate_budget,
    choose_window_hmm,
    em_sample,
    fit_window_hmm,
    hmm_states_for_windows,
    moment_hmm,
    noise_level,
    state_candidates,
)
from streamspec.core.count_split import CountSplit, split_counts
from streamspec.core.filter_window import MIN_STRETCH_GAIN
from streamspec.core.held_out import StretchWeights, held_out_items, held_out_scores, hmm_probas, model_probas
from streamspec.core.hidden_markov_model import HiddenMarkovModel
from streamspec.core.hmm_estimator import HMMEstimator
from streamspec.core.hmm_filter import HMMFilter
from streamspec.core.hmm_moments import SharedMoments
from streamspec.core.hmm_smoothing import smoothed_hmm
from streamspec.core.mixture import ExpertMixture, bucket_of_counts
from streamspec.core.parsimony import parsimonious_choice
from streamspec.core.stream_starts import StreamStarts
from streamspec.core.subspace import leading_singular
from streamspec.core.trigram import KneserNeyTrigram, chosen_trigram
from streamspec.core.triples import Triples
from streamspec.core.triples_change import TriplesChange
from streamspec.core.windows import WindowCounts

__all__ = ["fit_with_backoff", "fit_hmm", "hmm_states_for", "noise_level", "em_sample", "SharedFit",
           "EM_BUDGET", "STATE_CANDIDATES", "EM_MAX_TRIPLES", "MAX_HMM_STATES", "MIN_MODEL_GAIN",
           "HMM_REFIT_SHARE", "STATES_REGROWTH", "MOMENT_MAX_TRIPLES", "MIN_COUNTS_PER_PARAMETER"]

EM_BUDGET = 3e8  # EM work of the HMM's first fit: triples × (states² + 30) × iterations (~3 s)
MIN_MODEL_GAIN = 1e-3  # held-out nats per symbol the model must add to be a component
EM_MAX_TRIPLES = 200_000  # distinct triples EM runs on at most (threshold-sampled, unbiased)
# distinct triples the method of moments (EM's start) sees at most: all of them up to this. Why:
# started from the moments of a 200,000-triple sample, a 20-state HMM of 10⁶ symbols over 1,000
# lost 0.09 nats (6.861 against 6.767 after 5 EM iterations), and "auto" then chose 4 states
MOMENT_MAX_TRIPLES = 1_000_000
MAX_HMM_STATES = 64
# HMM sizes "auto" also tries on the held-out counts (measured); those above 16 only where the
# alphabet allows them and min. EM iterations fit their (scaled) budget share (_candidate_states)
STATE_CANDIDATES = (4, 8, 16, 32, 64)
# counted triples per free parameter (K(K-1) + K(n-1)) a size above 16 needs to be tried: with 5
# (20 states over 20 symbols, 3,787 chorale notes) its held-out-chosen HMM lost 0.19% (overfit)
MIN_COUNTS_PER_PARAMETER = 20
HMM_REFIT_SHARE = 0.05  # a refit keeps the HMM until this share of the triples changed since its EM
STATES_REGROWTH = 2.0  # a refit chooses the "auto" HMM size again once the counts grew this much
_MIN_EM_ITER, _MAX_EM_ITER = 5, 200
# the share of EM_BUDGET the chosen HMM's EM on all the counts gets: over windows all of it (its
# longer EM windows then fit: splice's 44 states 1.3277 -> 1.3260 nats), over triples half (all of
# it measured +0.0004 and +0.0017 nats on sticky and generic 20/1000 at 10⁵)
_FINAL_SHARE = {"windows": 1.0, "triples": 0.5}


def hmm_states_for(triples: Triples) -> int:
    """One of the HMM sizes ``"auto"`` tries: the singular values of P21 above the sampling
    noise (:func:`noise_level`: how many hidden directions the counts can tell apart), clipped to
    2..64 and to the alphabet. A truncated SVD of the top 16 values, doubled while all of them
    are above the noise (:func:`~streamspec.core.subspace.leading_singular`; the same count as
    from the top 65, in half the time on the Zipf stream at 10⁷ tokens, where 20 are above):
    O(nnz · 64) per Lanczos iteration at most (a dense SVD up to 1,000 symbols).

    >>> from streamspec.core.hmm import HMM
    >>> x = HMM.random(4, 12, random_state=0, concentration=0.2).sample(100_000, random_state=1)
    >>> hmm_states_for(Triples.from_arrays(12, x[:-2], x[1:-1], x[2:]))
    4
    """
    P21 = triples.P21()
    count = leading_singular(P21, noise_level(P21, triples.total), MAX_HMM_STATES, first=16)[0]
    return int(min(max(count, 2), MAX_HMM_STATES, triples.n))


class SharedFit:
    """What the HMMs of several sizes fitted on the same counts share (:func:`fit_hmm`): the EM
    sample (:func:`em_sample`), the sample the method of moments sees (all the triples up to
    :data:`MOMENT_MAX_TRIPLES`) and its :class:`~streamspec.core.hmm_moments.SharedMoments` up
    to ``max_states`` (built at the first moment start: one SVD of P31 and one pass over the
    triples for every size, where each size redid both). The samples are those ``fit_hmm``
    draws alone with the same seed. O(nnz) to build; the moments O(nnz · max_states²) plus a
    top-``max_states`` SVD once, memory O(nnz + n · max_states²)."""

    def __init__(self, triples: Triples, max_states: int, random_state: int = 0):
        self._rng = np.random.default_rng(random_state)
        self.triples, self.max_states = triples, int(max_states)
        self.sample = em_sample(triples, EM_MAX_TRIPLES, self._rng)
        self._moments: SharedMoments | None | bool = False  # False: not built yet (a warm start)

    def moment_start(self, n_states: int, random_state: int) -> HiddenMarkovModel | None:
        """The method-of-moments HMM of ``n_states`` states (as ``HMMEstimator(n_iter=0,
        random_state=random_state).fit`` on the moment sample), or ``None`` when the moment
        problem is singular. O(16 · n · K² + n · K³) once the shared part is built."""
        if self._moments is False:
            # why: drawn after the EM sample from the same generator, as fit_hmm always has
            counts = (self.sample if self.sample is self.triples
                      else em_sample(self.triples, MOMENT_MAX_TRIPLES, self._rng))
            try:
                self._moments = SharedMoments(counts, self.max_states)
            except (ValueError, np.linalg.LinAlgError, FloatingPointError):
                self._moments = None
        return moment_hmm(self._moments, n_states, random_state)


def fit_hmm(triples: Triples | WindowCounts, n_states: int, budget: float = EM_BUDGET, init=None,
            random_state: int = 0, max_iter: int = _MAX_EM_ITER,
            min_iter: int = _MIN_EM_ITER, shared: SharedFit | None = None) -> HiddenMarkovModel | None:
    """An HMM of the counts: EM on at most :data:`EM_MAX_TRIPLES` distinct triples
    (:func:`em_sample`), its iterations bounded by ``budget`` (``triples × (K² + 30)`` per
    iteration: the measured cost of an E-step, 4–10 ns a unit), at most ``max_iter`` and at
    least ``min_iter``; ``None`` when it cannot be fitted (too few symbols or counts, a
    singular moment problem). Without ``init``, EM starts from the method of moments on up
    to :data:`MOMENT_MAX_TRIPLES` distinct triples (all of them below that), not on the EM
    sample: its error shrinks with every triple it sees. ``shared``: the samples and moments
    of these triples (:class:`SharedFit`, with the same ``random_state``), shared by several
    sizes. Counts of windows (L ≥ 2): over windows, as many grams and the same budget
    (:func:`~streamspec.core.backoff_windows.fit_window_hmm`).

    Cost: O(budget) for EM, at least ``min_iter`` iterations of O(EM_MAX_TRIPLES · K²); the
    moment start, unless ``shared`` has it, a top-K SVD of P31 and O(min(nnz, MOMENT_MAX_TRIPLES)
    · K²), then O(16 · n · K² + n · K³); memory O(min(nnz, MOMENT_MAX_TRIPLES) + n · K²)."""
    if isinstance(triples, WindowCounts):
        return fit_window_hmm(triples, n_states, budget, EM_MAX_TRIPLES, min_iter, max_iter,
                              init=init, random_state=random_state)
    if shared is None:
        shared = SharedFit(triples, n_states, random_state)
    sample = shared.sample
    iters = int(np.clip(budget / max(1.0, sample.nnz * (n_states**2 + 30)), min_iter, max_iter))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            warnings.simplefilter("ignore", UserWarning)  # a failed moment step: EM starts at random
            if init is None:  # None when singular: HMMEstimator retries on the sample, else random
                init = shared.moment_start(n_states, random_state)
            return HMMEstimator(n_states=n_states, n_iter=iters, random_state=random_state).fit(
                sample, init=init)
    except (ValueError, np.linalg.LinAlgError, FloatingPointError):
        return None


def fit_with_backoff(fit: Callable[[Triples], object], triples: Triples, starts: StreamStarts | None = None,
                     *, holdout: float = 0.1, random_state: int | None = 0, max_contexts: int = 2000,
                     hmm_states: int | str | None = "auto", previous=None,
                     grams: WindowCounts | None = None, fit_grams: Callable | None = None,
                     changed: float | None = None, change: TriplesChange | None = None,
                     filter_window: int | str = 2):
    """Fit a model with ``fit`` and attach its :class:`~streamspec.core.backoff.Backoff` (module docstring).

    Parameters
    ----------
    fit
        Callable from :class:`Triples` to an :class:`~streamspec.ObservableOperatorModel`.
    triples, starts
        The counts and the stream starts (``None``: none counted).
    holdout, random_state, max_contexts
        Held-out fraction, seed, and cap on the held-out contexts scored.
    hmm_states
        States of the HMM component: ``"auto"`` (the best on the held-out counts of
        :func:`hmm_states_for` the counts and :data:`STATE_CANDIDATES`; a refit keeps the
        previous number until the counts have grown :data:`STATES_REGROWTH` times since it
        was chosen, then chooses again the same way), an integer (at most the alphabet
        size), or ``None`` for no HMM.
    previous
        A previous model with a backoff (a refit): nothing is held out; the model, the
        trigram and the HMM (warm-started from the previous one, a quarter of the budget)
        are fitted on all the counts, and the previous weights are kept: they were learned
        from the stream. Time: one fit of the model, a quarter of the EM budget (the HMM
        part of a first fit where the "auto" size is chosen again).
    grams
        Counts of windows of L ≥ 2 symbols whose triples are ``triples`` (an accumulator's
        :meth:`~streamspec.MomentAccumulator.windows`), or ``None``. With them the grams
        are split (the triples of each part are its marginal) and the HMM is fitted over
        windows (:mod:`streamspec.core.backoff_windows`): ``"auto"`` states may exceed the
        alphabet, up to 64. Costs the window SVDs and the same EM budget (scaled by K² above 16
        states, :func:`~streamspec.core.backoff_windows.candidate_budget`).
    fit_grams
        With ``grams``: a callable from window counts to the model, used instead of ``fit``
        (a model over windows, :mod:`streamspec.core.spectral_windows`) on the kept grams
        and on all of them.
    changed
        In a refit, the share of the distinct triples that changed since the previous fit
        (``RefitInfo.changed``; None or NaN: unknown). The refit then keeps the previous
        HMM while the shares summed since its EM stay within :data:`HMM_REFIT_SHARE` (same
        states, same alphabet), else runs EM from it for ``EM_BUDGET ×`` that sum (at
        least one iteration). Without it, a quarter of the budget (at least five).
    change
        In a refit, the change of the counts since the previous trigram's
        (:func:`~streamspec.core.triples_change.triples_change` of its ``triples`` and these),
        if known: its trigram is then merged from the previous one
        (:meth:`KneserNeyTrigram.updated`, O(nnz) traffic, no sort); else computed there.
    filter_window
        The estimator's ``window``: ``"auto"`` chooses the model's window filter over windows
        on the held-out stretches (:func:`~streamspec.core.filter_window.choose_window`) and
        a refit keeps the previous model's; an integer is kept as the model has it.

    Time: two fits of the model, the HMM's EM budget (:data:`EM_BUDGET`, up to
    ``1 + 16.1 / c`` times it with sizes above 16, c the sizes up to 16; an EM iteration
    costs O(K² · distinct triples)) and half of it, each size's moment start
    (:func:`fit_hmm`), O(nnz log nnz) for the trigrams, O(max_contexts · n · d) to score the
    model on the held-out contexts (L + 1 times over windows with ``filter_window="auto"``,
    plus O(max_contexts · L² · d²) for the states); memory O(nnz + n · (d² + K)).

    Examples
    --------
    >>> from streamspec import HMM, SpectralEstimator
    >>> x = HMM.random(2, 4, random_state=0).sample(5000, random_state=1)
    >>> t = Triples.from_arrays(4, x[:-2], x[1:-1], x[2:])
    >>> model = fit_with_backoff(SpectralEstimator(rank=2, backoff=None).fit, t)
    >>> model.backoff.components, model.backoff.hmm.n_states   # the model added nothing here
    (('trigram', 'hmm'), 2)
    """
    if not 0.0 < holdout < 1.0:
        raise ValueError(f"holdout must be in (0, 1), got {holdout!r}")
    starts = StreamStarts.empty(triples.n) if starts is None else starts.with_alphabet(triples.n)
    seed = 0 if random_state is None else int(random_state)
    grams = grams if grams is not None and grams.window > 1 else None
    if grams is not None and fit_grams is not None:  # the model over windows
        fit = _on_grams(fit_grams, triples, grams)
    if getattr(previous, "backoff", None) is not None:
        return _refit(fit, triples, starts, previous, hmm_states, seed, grams, changed, change, filter_window)
    rng = np.random.default_rng(random_state)
    split = split_counts(triples, starts, grams, holdout, rng)
    kept, held = split.kept, split.held
    if grams is not None and fit_grams is not None:
        fit = _on_grams(fit_grams, triples, grams, {id(kept): split.kept_hmm})
    mixture, hmm, K, scores, use_model, window, discount = None, None, None, {}, True, None, None
    if kept.total > 0 and held.total > 0:
        stretches = StretchWeights.of(split, int(max_contexts), seed)  # None over triples
        model = fit(kept)
        ctx, x, w, draws = held_out_items(held, split.held_starts, int(max_contexts), rng)
        u, v = ctx[:, 0], ctx[:, 1]
        trigram = chosen_trigram(kept, split.kept_starts, u, v, x, w)  # its discounts, by held-out loss
        if stretches is not None:  # over windows: the first weights, and the window, from held-out stretches
            model = stretches.score(model, trigram, filter_window)
            window = model.window
        P = [model_probas(model, u, v, x), trigram.proba_of(u, v, x)]
        buckets = bucket_of_counts(trigram.context_counts(u, v))
        unigram_x, min_proba, discount = trigram.unigram()[x], model.min_proba, trigram.discount
        # why freed before the HMM's sizes are fitted: their EM is the first fit's memory peak
        del model, trigram
        hmm, hmm_p = _held_out_hmm(split, triples, grams, hmm_states, (ctx, x, w), seed, draws)
        K = hmm.n_states if hmm is not None else 0
        P = np.stack(P if hmm is None else [*P, hmm_p], axis=1)
        scores = held_out_scores(P, buckets, w, u, v, unigram_x, min_proba, rng)
        # the model is a component only where it predicts better (it costs O(n · d) a prediction),
        # on the triples or, its window past 2 symbols, on the stretches (memory triples cannot show)
        use_model = (scores["mixture_without_model"] - scores["mixture"] >= MIN_MODEL_GAIN
                     or stretches is not None and stretches.model_gain(hmm, seed) >= MIN_STRETCH_GAIN)
        if not use_model:
            P = P[:, 1:]
            scores["mixture"] = scores["mixture_without_model"]
        mixture = (ExpertMixture.from_held_out(P.shape[1], buckets, P, w) if stretches is None
                   else stretches.weights(hmm, use_model))
        del kept, held, split  # why: freed before the fits on all the counts
    model = fit(triples) if window is None else fit(triples).with_filter(window=window)
    counts = triples if grams is None else grams
    if K is None:  # too few counts to hold any out: the HMM from all of them, uniform weights
        K = _resolve_states(hmm_states, triples, grams)
        final = fit_hmm(counts, K, candidate_budget(EM_BUDGET, 1, K), random_state=seed) if K else None
        final = smoothed_hmm(final, triples.total)
    else:
        final = _refined_on_all(counts, hmm, triples.total, seed) if hmm else None
    return _attach(model, triples, starts, final, mixture, scores, use_model, discount=discount,
                   states_chosen_at=triples.total if hmm_states == "auto" else float("nan"))


def _refined_on_all(counts: Triples | WindowCounts, chosen: HiddenMarkovModel, total: float,
                    seed: int) -> HiddenMarkovModel | None:
    """The HMM chosen on the kept part of the counts, warm-started on all of them with a share
    of the EM budget (:data:`_FINAL_SHARE`: all of it over windows, half over triples), then
    smoothed for ``total`` counted symbols: how a first fit (and a choice made again) ends.
    Cost: that share of an EM budget, O(K³ + K · n) for the smoothing."""
    share = _FINAL_SHARE["windows" if isinstance(counts, WindowCounts) else "triples"]
    final = fit_hmm(counts, chosen.n_states, candidate_budget(share * EM_BUDGET, 1, chosen.n_states),
                    init=chosen, random_state=seed)
    return smoothed_hmm(final, total)


def _held_out_hmm(split: CountSplit, triples: Triples, grams: WindowCounts | None,
                  hmm_states, held_out: tuple, seed: int, draws: float):
    """The HMM chosen on the held-out part and its probabilities of the held-out items
    ``held_out`` (:func:`~streamspec.core.held_out.held_out_items`, ``draws`` if subsampled): over
    windows by the held-out grams, over triples by those items. Cost: the EM budget of the sizes."""
    ctx, x, w = held_out
    if grams is not None and hmm_states == "auto":  # r or 2r states, by held-out grams
        K = _resolve_states(hmm_states, triples, grams)
        hmm = choose_window_hmm(split.kept_hmm, split.held_grams, state_candidates(K, MAX_HMM_STATES),
                                EM_BUDGET, EM_MAX_TRIPLES, _MIN_EM_ITER, _MAX_EM_ITER, seed)
        # why: over windows startprob_ is the law of a stream's start, not of a triple's
        hmm_p = hmm_probas(hmm, ctx, x, hmm.occupancy()) if hmm is not None else None
    else:  # over triples: "auto" sizes by held-out contexts
        hmm, hmm_p = _select_hmm(split.kept_hmm, _candidate_states(hmm_states, split.kept, grams),
                                 held_out, seed, draws)
    return hmm, hmm_p


def _on_grams(fit_grams: Callable, triples: Triples, grams: WindowCounts, parts: dict | None = None
              ) -> Callable[[Triples], object]:
    """``fit`` for a model over windows: the triples given (all of them, or a part in ``parts``
    by id) stand for their grams."""
    parts = parts or {}

    def fit(t: Triples):
        return fit_grams(grams if t is triples else parts[id(t)])

    return fit


def _refit(fit, triples: Triples, starts: StreamStarts, previous_model, hmm_states, seed: int,
           grams: WindowCounts | None = None, changed: float | None = None,
           change: TriplesChange | None = None, filter_window: int | str = 2):
    """:func:`fit_with_backoff` from a previous model's backoff: all counts, the weights kept, the
    HMM kept while little changed since its EM, else warm-started (its docstring, ``changed``);
    the trigram merged from the previous one (:meth:`KneserNeyTrigram.updated`, ``change``); an
    ``"auto"`` window filter the previous model's."""
    previous: Backoff = previous_model.backoff
    model = fit(triples)
    if filter_window == "auto" and hasattr(previous_model, "window"):  # (a worker's start: none)
        model = model.with_filter(window=int(previous_model.window))
    old_trigram = getattr(previous, "trigram", None)  # why: a backoff-like previous may have none
    trigram = (KneserNeyTrigram.updated(old_trigram, triples, starts, change)
               if isinstance(old_trigram, KneserNeyTrigram) else None)
    old = previous.hmm
    # a backoff-like previous (a refit's start sent to a worker) may not say: then EM runs
    stale = getattr(previous, "hmm_changed", float("nan")) + (
        float("nan") if changed is None else float(changed))
    chosen_at = float(getattr(previous, "states_chosen_at", float("nan")))
    chosen_at = triples.total if chosen_at != chosen_at else chosen_at  # unknown: count from here
    carried = dict(mixture=previous.mixture, use_model=previous.use_model, trigram=trigram,
                   discount=getattr(old_trigram, "discount", None))
    if (hmm_states == "auto" and old is not None and triples.total >= STATES_REGROWTH * chosen_at
            and triples.total > 0):
        # why: more counts support more states (a first fit of 10⁴ symbols chose 4 where 8 and
        # 16 predict a 40,000-event stream better); at each doubling, so the cost is a geometric
        # series: at most about twice that of one choice over the whole stream
        hmm = _rechosen_hmm(triples, starts, grams, seed)
        if hmm is not None:
            return _attach(model, triples, starts, hmm, **carried, hmm_changed=0.0,
                           states_chosen_at=triples.total)
    carried["states_chosen_at"] = chosen_at
    if (old is not None and stale <= HMM_REFIT_SHARE and old.n_symbols == triples.n
            and (hmm_states == "auto" or hmm_states == old.n_states)):
        # why: EM on a few percent more triples moves the HMM little; its E-steps would cost
        # most of the refit
        return _attach(model, triples, starts, old, **carried, hmm_changed=stale)
    # "auto": the number of states chosen on held-out counts is kept until the counts regrow
    K = (old.n_states if hmm_states == "auto" and old is not None
         else _resolve_states(hmm_states, triples, grams))
    init = (HiddenMarkovModel(old.startprob_, old.transmat_, old.emissionprob_)
            if old is not None and K == old.n_states and old.n_symbols <= triples.n else None)
    counts = triples if grams is None else grams
    if init is not None and stale == stale:  # proportional to what changed since its EM
        hmm = fit_hmm(counts, K, candidate_budget(EM_BUDGET * min(stale, 0.25), 1, K), init=init,
                      random_state=seed, min_iter=1)
    else:
        budget = EM_BUDGET / 4 if init is not None else EM_BUDGET
        hmm = fit_hmm(counts, K, candidate_budget(budget, 1, K), init=init, random_state=seed) if K else None
    hmm = smoothed_hmm(hmm, triples.total) if triples.total > 0 else hmm
    return _attach(model, triples, starts, hmm, **carried, hmm_changed=0.0)


def _rechosen_hmm(triples: Triples, starts: StreamStarts, grams: WindowCounts | None, seed: int,
                  holdout: float = 0.1, max_contexts: int = 2000):
    """The HMM of ``"auto"`` states chosen again, as a first fit chooses it: the sizes fitted on
    most of the counts and scored on the rest (:func:`_held_out_hmm`), the chosen one then
    warm-started on all of them (:func:`_refined_on_all`), smoothed. ``None`` when none could be
    fitted. Cost: the HMM part of a first fit (1.5–2 EM budgets, the sizes' moment starts)."""
    rng = np.random.default_rng(seed)
    split = split_counts(triples, starts, grams, holdout, rng)
    if split.kept.total <= 0 or split.held.total <= 0:
        return None
    *held, draws = held_out_items(split.held, split.held_starts, int(max_contexts), rng)
    hmm, _ = _held_out_hmm(split, triples, grams, "auto", tuple(held), seed, draws)
    if hmm is None:
        return None
    return _refined_on_all(triples if grams is None else grams, hmm, triples.total, seed)


def _attach(model, triples: Triples, starts: StreamStarts, hmm, mixture, scores=None,
            use_model: bool = True, hmm_changed: float = 0.0, trigram: KneserNeyTrigram | None = None,
            states_chosen_at: float = float("nan"), discount: float | None = None):
    """The model with its backoff: the weights ``mixture`` (a copy) if they fit the parts;
    ``hmm_changed``: the share of the triples changed since the HMM's EM; ``trigram``: that of
    ``triples`` and ``starts`` if already built, else built with ``discount``
    (:func:`~streamspec.core.trigram.chosen_trigram`'s choice)."""
    n_components = 1 + int(use_model) + int(hmm is not None)
    mixture = (mixture.copy() if mixture is not None and mixture.n_components == n_components
               else ExpertMixture(n_components))
    if hmm is not None:  # why: the backoff keeps the filter's arrays, indexed like the model
        hmm = HMMFilter.of(hmm)
    trigram = KneserNeyTrigram(triples, starts, discount) if trigram is None else trigram
    return model.with_backoff(Backoff(trigram, mixture, hmm, held_out=scores, use_model=use_model,
                                      hmm_changed=hmm_changed, states_chosen_at=states_chosen_at))


def _candidate_states(hmm_states, triples: Triples, grams: WindowCounts | None = None) -> list[int]:
    """The HMM sizes a first fit tries: for ``"auto"``, :func:`hmm_states_for` the counts and
    :data:`STATE_CANDIDATES`, within 2..min(64, n); those above 16 states only where the data
    support them: :data:`MIN_COUNTS_PER_PARAMETER` counted triples per free parameter, and
    ``_MIN_EM_ITER`` EM iterations on the EM sample within their budget share
    (:func:`~streamspec.core.backoff_windows.candidate_budget`; a larger HMM cut to fewer
    iterations loses to the smaller ones anyway). Else the one given (none for ``None``).
    O(1) beyond :func:`hmm_states_for`."""
    if hmm_states != "auto" or triples.n < 2:
        K = _resolve_states(hmm_states, triples, grams)
        return [K] if K else []
    top = min(MAX_HMM_STATES, triples.n)
    sizes = sorted({min(max(k, 2), top) for k in (hmm_states_for(triples), *STATE_CANDIDATES)})
    n_base, n = sum(k <= BASE_STATES for k in sizes), triples.n
    nnz = min(triples.nnz, EM_MAX_TRIPLES)
    return [k for k in sizes if k <= BASE_STATES or (
        triples.total >= MIN_COUNTS_PER_PARAMETER * k * (k + n - 2)
        and _MIN_EM_ITER * nnz * (k**2 + 30) <= candidate_budget(EM_BUDGET, n_base, k))]


def _select_hmm(kept: Triples | WindowCounts, candidates: list[int], held: tuple, seed: int,
                draws: float = np.inf):
    """The smallest candidate HMM whose held-out log loss is within one standard error of the
    least (:func:`parsimonious_choice`), and its probabilities of the held-out symbols;
    ``(None, None)`` when none could be fitted. The candidates up to 16 states share
    :data:`EM_BUDGET`, a larger one gets a share scaled by K²
    (:func:`~streamspec.core.backoff_windows.candidate_budget`). EM costs O(K² · distinct
    triples) per iteration: O(EM_BUDGET · (1 + 16.1 / c) + m · K² per candidate) for c
    candidates up to 16 states and m held-out contexts, plus each candidate's moment start
    (:func:`fit_hmm`). ``draws``: how many contexts were drawn when the held-out contexts
    were subsampled (:func:`~streamspec.core.held_out.held_out_items`), else ∞."""
    ctx, x, w = held
    fitted = []
    n_base = max(1, sum(K <= BASE_STATES for K in candidates))
    # why: one EM sample, one moment sample and one SVD (of the largest size) for every size
    shared = SharedFit(kept, max(candidates), seed) if candidates else None
    for K in candidates:
        hmm = fit_hmm(kept, K, candidate_budget(EM_BUDGET, n_base, K), random_state=seed, shared=shared)
        if hmm is None:
            continue
        hmm = smoothed_hmm(hmm, kept.total)  # why: scored as the backoff will use it
        # why the occupancy over windows: there startprob_ is the law of a stream's start, not
        # of a triple's (a size given over windows comes here, "auto" by held-out grams)
        p = hmm_probas(hmm, ctx, x, hmm.occupancy() if isinstance(kept, WindowCounts) else None)
        fitted.append((hmm, p))
    if not fitted:
        return None, None
    logp = np.stack([np.log(np.maximum(p, 1e-12)) for _, p in fitted])
    return fitted[parsimonious_choice(logp, w, draws)]


def _resolve_states(hmm_states, triples: Triples, grams: WindowCounts | None = None) -> int | None:
    """The HMM's states: ``"auto"`` from the spectrum (of the window Hankels with ``grams``), an
    integer clipped to the alphabet (over windows: to its windows, n^L)."""
    if hmm_states is None or triples.n < 2:
        return None
    if grams is not None:
        if hmm_states == "auto":
            return hmm_states_for_windows(grams, MAX_HMM_STATES)
        return int(min(hmm_states, triples.n ** grams.window))
    if hmm_states == "auto":
        return hmm_states_for(triples)
    return int(min(hmm_states, triples.n))
