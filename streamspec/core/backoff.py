"""The backoff for large alphabets: the HMM mixed with a Kneser–Ney bigram, weights held out.

Spectral HMMs of low rank predict frequent symbols well and rare ones badly: on
large alphabets (words, page ids) they lose to a smoothed bigram. The remedy is a
mixture ``λ_b · p_hmm(·|window) + (1 − λ_b) · p_kn(·|last)``:

* :class:`~streamspec.core.kneser_ney.KneserNeyBigram` (its own module, re-exported
  here): the interpolated Kneser–Ney bigram of the pair counts (previous symbol →
  next), with a uniform floor so that every symbol has positive probability.
* :class:`Backoff`: the bigram and the mixing weights ``λ_b``, one per bucket
  ``b = min(⌊log2(1 + c(last))⌋, 15)`` of the count of the last symbol (rare
  contexts lean on the bigram, or on the HMM, as the held-out data say).
* :func:`fit_with_backoff`: fits an HMM on most of the counts, chooses the λ_b that
  maximise the likelihood of held-out counts, refits on all counts and attaches
  the backoff. The held-out likelihood is concave in each λ_b and λ_b = 0 is the
  bigram alone, so the mixture is never worse than the bigram on the held-out data.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import numpy as np

from streamspec.core.kneser_ney import KneserNeyBigram
from streamspec.core.triples import Triples

__all__ = [
    "KneserNeyBigram",
    "Backoff",
    "fit_with_backoff",
    "select_with_backoff",
    "fit_mixing_weights",
    "N_BUCKETS",
    "bucket_of_counts",
]

N_BUCKETS = 16
_LAMBDA_MAX = 1.0 - 1e-6  # fitted weights stay below 1, so the bigram's floor keeps every symbol possible


def bucket_of_counts(counts) -> np.ndarray:
    """Bucket ``min(⌊log2(1 + c)⌋, 15)`` of each context count ``c``. O(m).

    Examples
    --------
    >>> bucket_of_counts([0, 1, 2, 3, 1000, 1e9]).tolist()
    [0, 1, 1, 2, 9, 15]
    """
    c = np.maximum(np.asarray(counts, dtype=np.float64), 0.0)
    return np.minimum(np.floor(np.log2(1.0 + c)), N_BUCKETS - 1).astype(np.int64)


class Backoff:
    """A Kneser–Ney bigram and the weights ``λ_b`` of the HMM in the mixture, per bucket of
    the last symbol's count: ``λ_b · p_hmm + (1 − λ_b) · p_kn(·|last)``.

    Parameters
    ----------
    kn
        The bigram.
    lambdas
        Shape (16,), in [0, 1]: the weight of the HMM for contexts whose last symbol
        was counted c times, in bucket :func:`bucket_of_counts` (c); the empty
        context uses bucket 0. A scalar is the same weight for all buckets.

    Memory: that of the bigram.

    Examples
    --------
    >>> kn = KneserNeyBigram.from_sequences(2, [[0, 1, 1, 0, 1]])
    >>> b = Backoff(kn, 0.25)
    >>> b.lambda_of([0, -1]).tolist(), b.mix(np.array([[1.0, 0.0]]), [0]).round(4).tolist()
    ([0.25, 0.25], [[0.3125, 0.6875]])
    """

    def __init__(self, kn: KneserNeyBigram, lambdas):
        lam = np.asarray(lambdas, dtype=np.float64)
        if lam.ndim == 0:
            lam = np.full(N_BUCKETS, float(lam))
        if lam.shape != (N_BUCKETS,) or not np.isfinite(lam).all() or (lam < 0).any() or (lam > 1).any():
            raise ValueError(f"lambdas must be {N_BUCKETS} weights in [0, 1], got {lambdas!r}")
        self.kn = kn
        self.lambdas = lam

    @property
    def n(self) -> int:
        return self.kn.n

    def buckets(self, lasts) -> np.ndarray:
        """Bucket of each context (-1: empty context, bucket 0). O(m)."""
        v = self.kn._lasts(lasts)
        return bucket_of_counts(np.where(v >= 0, self.kn.context_counts[np.maximum(v, 0)], 0.0))

    def lambda_of(self, lasts) -> np.ndarray:
        """The weight of the HMM for each context, shape (m,). O(m)."""
        return self.lambdas[self.buckets(lasts)]

    def mix(self, p_hmm: np.ndarray, lasts) -> np.ndarray:
        """Mixture rows from HMM rows (m, n) and contexts (m,). O(m · n)."""
        lam = self.lambda_of(lasts)[:, None]
        return lam * p_hmm + (1.0 - lam) * self.kn.predict_many(lasts)

    def predict(self, last: int | None) -> np.ndarray:
        """The bigram's row (the backoff alone). O(n)."""
        return self.kn.predict(last)

    def predict_many(self, lasts) -> np.ndarray:
        return self.kn.predict_many(lasts)

    def proba_of(self, lasts, nexts) -> np.ndarray:
        return self.kn.proba_of(lasts, nexts)

    def log_loss(self, sequences: Iterable) -> float:
        """Log loss of the backoff alone (the bigram), nats per symbol. O(T log P)."""
        return self.kn.log_loss(sequences)

    def with_lambdas(self, lambdas) -> Backoff:
        return Backoff(self.kn, lambdas)

    # ---------------------------------------------------------------- persistence

    def to_parts(self) -> tuple[dict, dict]:
        """Header values and arrays for a checkpoint (sparse: O(P + 16))."""
        header = {"n": self.kn.n, "discount": self.kn.discount, "unigram_discount": self.kn.unigram_discount}
        arrays = {"pairs": self.kn.pairs, "counts": self.kn.counts, "lambdas": self.lambdas}
        return header, arrays

    @classmethod
    def from_parts(cls, header: dict, arrays: dict) -> Backoff:
        kn = KneserNeyBigram(header["n"], arrays["pairs"], arrays["counts"], discount=header["discount"],
                             unigram_discount=header["unigram_discount"])
        return cls(kn, arrays["lambdas"])

    def __repr__(self) -> str:
        return f"Backoff({self.kn!r}, lambdas={np.round(self.lambdas, 3).tolist()})"


def _best_lambda(a: np.ndarray, b: np.ndarray, w: np.ndarray) -> float:
    """argmax over [0, 1] of ``Σ w log(λ a + (1 − λ) b)`` (b > 0): concave, so bisection on the
    derivative finds the exact maximiser (the fixed point EM converges to)."""
    if w.sum() <= 0:
        return 0.5
    d = a - b

    def slope(lam: float) -> float:
        with np.errstate(divide="ignore", invalid="ignore"):
            return float(np.sum(w * d / (lam * a + (1 - lam) * b)))

    if slope(0.0) <= 0:
        return 0.0
    if slope(_LAMBDA_MAX) >= 0:
        return _LAMBDA_MAX
    lo, hi = 0.0, _LAMBDA_MAX
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if slope(mid) > 0:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def fit_mixing_weights(p_hmm: np.ndarray, p_kn: np.ndarray, weights: np.ndarray,
                       buckets: np.ndarray) -> np.ndarray:
    """The λ_b maximising the weighted held-out log-likelihood ``Σ w log(λ_b p_hmm + (1 − λ_b) p_kn)``.

    One weight per bucket (16), each the exact maximiser of its concave term;
    buckets without data get the maximiser of the pooled objective. λ = 0 is a
    candidate of every bucket, so the optimum is never worse than the backoff alone
    on these data. Time O(m · 60) for m held-out items.

    Examples
    --------
    >>> float(fit_mixing_weights(np.array([0.5, 0.5]), np.array([0.1, 0.1]), np.ones(2), np.zeros(2, int))[0])
    0.999999
    >>> float(fit_mixing_weights(np.array([0.0]), np.array([0.1]), np.ones(1), np.zeros(1, int))[0])
    0.0
    """
    a, b, w = (np.asarray(v, dtype=np.float64) for v in (p_hmm, p_kn, weights))
    pooled = _best_lambda(a, b, w)
    lam = np.full(N_BUCKETS, pooled)
    for k in np.unique(buckets):
        at = buckets == k
        lam[k] = _best_lambda(a[at], b[at], w[at])
    return lam


def fit_with_backoff(fit: Callable[[Triples], object], triples: Triples, holdout: float = 0.1,
                     random_state: int | None = 0, max_contexts: int = 2000):
    """Fit an HMM with ``fit`` and attach a Kneser–Ney backoff whose weights are chosen on held-out counts.

    1. Split the counts (:meth:`Triples.thin`: binomial thinning; fractional weights are
       thinned in ``ceil(w)`` equal units): ``holdout`` of them held out.
    2. ``fit(kept)`` gives an HMM; a :class:`KneserNeyBigram` is built on the kept pairs.
    3. On the held-out triples, the context ``(x1, x2)`` predicts ``x3``: the HMM
       from the state after ``x1, x2``, the bigram from ``x2``. At most
       ``max_contexts`` distinct contexts are used, drawn with probability ∝ count
       (seeded, with replacement, each weighted by its draws). The λ_b maximise the
       held-out log-likelihood (:func:`fit_mixing_weights`).
    4. ``fit(triples)`` on all the counts, with the bigram of all the counts and those λ_b.

    When the split leaves one side empty (very few counts), λ_b = 0.5.

    Parameters
    ----------
    fit
        Callable from :class:`Triples` to an :class:`~streamspec.ObservableOperatorModel`.
    triples
        The counts.
    holdout, random_state, max_contexts
        Held-out fraction, seed, and cap on the contexts scored.

    Returns
    -------
    The model of ``fit(triples)`` with the backoff attached.

    Time: two fits, plus O(nnz log nnz) for the bigrams and
    O(max_contexts · n · k) for scoring; memory O(nnz + n) beyond the fits, and
    scratch of at most ~2²² floats.

    Examples
    --------
    >>> from streamspec import HMM, SpectralEstimator
    >>> hmm = HMM.random(2, 4, random_state=0)
    >>> x = hmm.sample(5000, random_state=1)
    >>> t = Triples.from_arrays(4, x[:-2], x[1:-1], x[2:])
    >>> model = fit_with_backoff(SpectralEstimator(rank=2, backoff=None).fit, t)
    >>> model.backoff.lambdas.shape, bool((model.backoff.lambdas >= 0).all())
    ((16,), True)
    """
    return select_with_backoff([fit], triples, holdout, random_state, max_contexts)[1]


def select_with_backoff(fits: Sequence[Callable[[Triples], object]], triples: Triples,
                        holdout: float = 0.1, random_state: int | None = 0,
                        max_contexts: int = 2000) -> tuple[int, object, list[float]]:
    """:func:`fit_with_backoff` for several candidate fits: the one best on the held-out counts.

    Every candidate is fitted on the kept counts, gets its own λ_b, and is scored on
    the same held-out contexts (the same draws: candidates are compared on equal
    terms) by the mixed model's mean held-out log-likelihood per triple; the best
    (the first on a tie) is refitted on all the counts. With one candidate this is
    :func:`fit_with_backoff`, draw for draw.

    Returns ``(index, model, scores)``: the chosen candidate's index, its model on all
    the counts with the backoff attached, and every candidate's held-out score (nats
    per triple, higher is better; ``nan`` for all when the split left a side empty,
    and then the first candidate is chosen).

    Time: one fit per candidate on the kept counts plus one on all of them, plus the
    bigrams and O(max_contexts · n · k) scoring per candidate.

    Examples
    --------
    >>> from streamspec import HMM, SpectralEstimator
    >>> x = HMM.random(3, 6, random_state=0).sample(20_000, random_state=1)
    >>> t = Triples.from_arrays(6, x[:-2], x[1:-1], x[2:])
    >>> fits = [SpectralEstimator(rank=1, backoff=None).fit,
    ...         SpectralEstimator(rank=3, backoff=None).fit]
    >>> index, model, scores = select_with_backoff(fits, t)
    >>> index, model.dim, scores[1] > scores[0]
    (1, 3, True)
    """
    if not 0.0 < holdout < 1.0:
        raise ValueError(f"holdout must be in (0, 1), got {holdout!r}")
    if int(max_contexts) < 1:
        raise ValueError(f"max_contexts must be a positive integer, got {max_contexts!r}")
    fits = list(fits)
    if not fits:
        raise ValueError("select_with_backoff needs at least one candidate fit")
    rng = np.random.default_rng(random_state)
    kept, held = _thin(triples, holdout, rng)
    lambdas = [np.full(N_BUCKETS, 0.5) for _ in fits]
    scores = [float("nan")] * len(fits)
    if kept.total > 0 and held.total > 0:
        kn = KneserNeyBigram.from_triples(kept)
        draws = rng.bit_generator.state  # every candidate scores the same drawn contexts
        for i, fit in enumerate(fits):
            rng.bit_generator.state = draws
            # the model of the kept counts is freed after scoring
            lambdas[i], scores[i] = _held_out_lambdas(fit(kept), kn, held, int(max_contexts), rng)
    del kept, held
    best = 0
    for i in range(1, len(fits)):
        if scores[i] > scores[best]:
            best = i
    final = fits[best](triples)
    backoff = Backoff(KneserNeyBigram.from_triples(triples), lambdas[best])
    return best, final.with_backoff(backoff), scores


def _thin(triples: Triples, fraction: float, rng: np.random.Generator) -> tuple[Triples, Triples]:
    """:meth:`Triples.thin` for integer counts; for fractional weights (forgetting), each weight w
    is cut into ``m = ceil(w)`` equal units sent to the held-out side independently, so that a
    few heavy distinct triples are split like counts rather than sent whole to one side. O(nnz)."""
    w = triples.weights
    if np.array_equal(w, np.round(w)):
        return triples.thin(fraction, rng)
    units = np.maximum(np.ceil(w), 1.0)
    held = rng.binomial(units.astype(np.int64), fraction) * (w / units)
    kept = w - held
    a, b = kept > 0, held > 0
    n, codes = triples.n, triples.codes
    return Triples(n, codes[a], kept[a]), Triples(n, codes[b], held[b])


def _held_out_lambdas(model, kn: KneserNeyBigram, held: Triples, max_contexts: int,
                      rng: np.random.Generator) -> tuple[np.ndarray, float]:
    """The λ_b of ``model`` mixed with ``kn`` on the held-out triples, and the mixed model's
    mean held-out log-likelihood per triple (on the drawn contexts)."""
    n = held.n
    x1, x2, x3, w = held.x1, held.x2, held.x3, held.weights
    ctx = x1 * n + x2
    uniq, inv = np.unique(ctx, return_inverse=True)
    ctx_w = np.bincount(inv, weights=w)
    if uniq.size > max_contexts:
        draws = rng.choice(uniq.size, size=max_contexts, p=ctx_w / ctx_w.sum())
        mult = np.bincount(draws, minlength=uniq.size).astype(np.float64)
        sel = mult[inv] > 0
        # each drawn context stands for mult / max_contexts of the held-out mass
        w = (mult[inv] / max_contexts) * w / ctx_w[inv]
        x1, x2, x3, w, inv = x1[sel], x2[sel], x3[sel], w[sel], inv[sel]
        ids, inv = np.unique(inv, return_inverse=True)
        uniq = uniq[ids]
    cx1, cx2 = np.divmod(uniq, n)
    states = model.window_states(np.stack([cx1, cx2], axis=1))
    a = _hmm_probs(model, states, inv, x3)
    b = kn.proba_of(x2, x3)
    buckets = bucket_of_counts(kn.context_counts[x2])
    lam = fit_mixing_weights(a, b, w, buckets)
    mixed = lam[buckets] * a + (1.0 - lam[buckets]) * b
    score = float(np.sum(w * np.log(mixed)) / w.sum())
    return lam, score


def _hmm_probs(model, states: np.ndarray, inv: np.ndarray, nexts: np.ndarray) -> np.ndarray:
    """Clipped, renormalised HMM probabilities of ``nexts[i]`` from ``states[inv[i]]``."""
    denom = model.clipped_row_sums(states)
    num = model.clipped_entries(nexts, states[inv])
    ok = denom[inv] > 0
    return np.where(ok, num / np.where(ok, denom[inv], 1.0), 1.0 / model.n_symbols)
