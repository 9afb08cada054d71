"""Mixing weights learned from the stream itself: a switching Bayesian mixture of blends.

A prediction mixes K component predictors (the Kneser–Ney trigram, the hidden-state
filter, the operator model). Which blend is best depends on the data and on the
context: rare contexts should lean on the smoother parts. In a stream every symbol is a
held-out test of the current predictor before it is learned, so the weights are learned
online from those prequential losses:

* the *experts* are a fixed grid of blends ``λ ∈ Δ_K`` (convex weights in steps of
  ``1/resolution``), each predicting ``λ · p`` for the component probabilities ``p``;
* one posterior over the experts is kept per *bucket* of the trigram context's count
  (:func:`bucket_of_counts`), updated by Bayes' rule with each observed symbol and then
  mixed with the uniform distribution at a small switching rate α_t (fixed share,
  Herbster & Warmuth 1998), so that the weights follow a drifting stream; the rate falls
  with the bucket's symbols, ``α_t = α / (1 + t / h)`` (≈ α·h / t late: the decreasing
  rate of Koolen & de Rooij's switch distribution), so a stationary stream pays
  ~α·h·log(T / h) nats in all instead of α·T;
* the prediction is the posterior mean blend ``λ̄_b = Σ_e w_e λ_e``, so mixing costs
  O(K) per symbol once ``λ̄_b`` is known.

Guarantee (the test of this module): for every sequence and every expert e,
``Σ_t −log p_mix(x_t) ≤ Σ_t −log p_e(x_t) + B · log E + Σ_t log(1 / (1 − α_t))`` with B
buckets, E experts and T symbols (from a uniform prior; the last sum ≤ T · log(1 / (1 − α)));
so the mixture is never worse
than its best fixed blend, in particular than any component alone, by more than that.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

__all__ = ["ExpertMixture", "bucket_of_counts", "N_BUCKETS", "simplex_grid"]

N_BUCKETS = 6
_LOG_FLOOR = 1e-300  # an expert that gave probability 0 keeps a finite log-weight


def bucket_of_counts(counts) -> np.ndarray:
    """Bucket ``min(⌈log4(1 + c)⌉, 5)`` of each context count: 0 for an unseen context, then
    counts ≤ 3, ≤ 15, ≤ 63, ≤ 255 and more. O(m).

    Examples
    --------
    >>> bucket_of_counts([0, 1, 3, 4, 100, 1e9]).tolist()
    [0, 1, 1, 2, 4, 5]
    """
    c = np.maximum(np.asarray(counts, dtype=np.float64), 0.0)
    b = np.ceil(np.log(1.0 + c) / np.log(4.0) - 1e-12)
    return np.minimum(b, N_BUCKETS - 1).astype(np.int64)


def simplex_grid(k: int, resolution: int) -> np.ndarray:
    """Every point of the simplex in ``k`` dimensions with coordinates in steps of
    ``1 / resolution``, shape (E, k). O(E · k).

    Examples
    --------
    >>> simplex_grid(2, 2).tolist()
    [[0.0, 1.0], [0.5, 0.5], [1.0, 0.0]]
    """
    pts = [c for c in itertools.product(range(resolution + 1), repeat=k) if sum(c) == resolution]
    return np.array(pts, dtype=np.float64) / resolution


def _rate(alpha: float, half_life: float | None, t: float) -> float:
    """The switching rate after a bucket's ``t`` symbols: ``α / (1 + t / h)``, α without h. O(1)."""
    return alpha if half_life is None else alpha / (1.0 + t / half_life)


class ExpertMixture:
    """Posterior weights over a grid of blends of ``n_components`` predictors, per bucket.

    Parameters
    ----------
    n_components
        K, the number of component predictors (1 to 4).
    resolution
        Steps per unit of the grid of blends: E = C(resolution + K - 1, K - 1) experts.
    switching
        α, the fixed-share rate: the share of the posterior moved back to the uniform
        distribution after each symbol. It costs up to α nats a symbol where the best blend
        does not change; after a change the new best blend starts from at least α / E and
        grows geometrically, so the symbols it takes to trust it grow only with log(E / α)
        (measured: 32 symbols at α = 10⁻⁴, 37 at 10⁻⁵, 42 at 10⁻⁶, for two components
        swapping 0.6 and 0.4). Default 10⁻⁴ (a constant 10⁻⁵ gained 2–8·10⁻⁵ nats on 20 of
        the 23 data sets, lost up to 1.1·10⁻⁴ on the other three and 8·10⁻⁴ on
        ``bench_river.py``'s stream, where the weights learn while the model is refit).
    switching_half_life
        h: after h symbols of a bucket its rate has halved, ``α_t = α / (1 + t / h)``
        (t: the bucket's symbols learned by this mixture). ``None``: a constant α. Default
        5,000: against a constant 10⁻⁴, 2–7·10⁻⁵ nats better on 20 of the 23 data sets and
        the window automata, ≤ 2·10⁻⁵ worse on two, 2·10⁻⁴ worse on ``bench_river.py``'s
        stream (docs/benchmarks.md, "The mixture's first weights over windows").
    log_weights
        Optional starting log-posterior, shape (N_BUCKETS, E) (e.g. from held-out
        counts, :meth:`observe_many` with ``weights``); uniform by default.

    Memory O(N_BUCKETS · E); every update O(E · K).

    Examples
    --------
    Two components, the first always right: the posterior moves to the blends that trust it.

    >>> mix = ExpertMixture(2, resolution=4)
    >>> mix.blend(0).round(6).tolist()
    [0.5, 0.5]
    >>> for _ in range(50):
    ...     _ = mix.observe(0, np.array([0.9, 0.1]))
    >>> mix.blend(0).round(2).tolist(), mix.blend(1).round(6).tolist()
    ([1.0, 0.0], [0.5, 0.5])
    """

    def __init__(self, n_components: int, *, resolution: int = 10, switching: float = 1e-4,
                 switching_half_life: float | None = 5000.0, log_weights=None):
        if not 1 <= int(n_components) <= 4:
            raise ValueError(f"n_components must be 1 to 4, got {n_components!r}")
        if not (isinstance(resolution, int) and resolution >= 1):
            raise ValueError(f"resolution must be a positive integer, got {resolution!r}")
        if not 0.0 <= switching < 1.0:
            raise ValueError(f"switching must be in [0, 1), got {switching!r}")
        h = switching_half_life
        if h is not None and not (isinstance(h, int | float) and not isinstance(h, bool) and h > 0
                                  and math.isfinite(h)):
            raise ValueError(f"switching_half_life must be a positive number or None, got {h!r}")
        self.n_components = int(n_components)
        self.resolution = resolution
        self.switching = float(switching)
        self.switching_half_life = None if h is None else float(h)
        self.grid = simplex_grid(self.n_components, resolution)
        E = self.grid.shape[0]
        if log_weights is None:
            lw = np.zeros((N_BUCKETS, E))
        else:
            lw = np.array(log_weights, dtype=np.float64)
            if lw.shape != (N_BUCKETS, E) or not np.isfinite(lw).all():
                raise ValueError(f"log_weights must be finite, of shape ({N_BUCKETS}, {E})")
        self._posterior = np.exp(lw - lw.max(axis=1, keepdims=True))
        self._posterior /= self._posterior.sum(axis=1, keepdims=True)
        self._blends = self._posterior @ self.grid
        self.n_observed = np.zeros(N_BUCKETS)

    @property
    def n_experts(self) -> int:
        return self.grid.shape[0]

    def restore_observed(self, seen) -> None:
        """Set the symbols each bucket has learned (its switching rate's clock) as a checkpoint
        kept them; ``ValueError`` unless finite, non-negative, one per bucket. O(B)."""
        seen = np.array(seen, dtype=np.float64).reshape(-1)
        if seen.shape != (N_BUCKETS,) or not (np.isfinite(seen) & (seen >= 0)).all():
            raise ValueError(f"observed counts must be non-negative, one per bucket ({N_BUCKETS})")
        self.n_observed = seen

    def log_weights(self) -> np.ndarray:
        """The log-posterior over the experts, (N_BUCKETS, E), for a checkpoint. O(B · E)."""
        return np.log(np.maximum(self._posterior, _LOG_FLOOR))

    def blend(self, bucket: int) -> np.ndarray:
        """λ̄_b, the posterior mean blend of a bucket, shape (K,), summing to 1. O(K)."""
        return self._blends[int(bucket)].copy()

    def blends(self, buckets) -> np.ndarray:
        """λ̄ of each bucket, shape (m, K). O(m · K)."""
        return self._blends[np.asarray(buckets, dtype=np.int64)]

    def observe(self, bucket: int, probs: np.ndarray) -> float:
        """Learn from one symbol: the components gave it ``probs`` (K,). Returns the mixture's
        probability of it *before* learning (the prequential prediction). O(E · K)."""
        b = int(bucket)
        pe = np.dot(self.grid, probs)
        w = self._posterior[b]  # a view: updated in place, as observe_many does
        p = float(np.dot(w, pe))
        if not p > 0 or p == math.inf:  # no expert gave the symbol any mass: nothing to learn
            return max(p, 0.0) if math.isfinite(p) else 0.0
        w *= pe
        a = _rate(self.switching, self.switching_half_life, self.n_observed[b])
        w *= (1.0 - a) / p
        if a:
            w += a / w.size
        np.dot(w, self.grid, out=self._blends[b])  # why: in place, one numpy call fewer a symbol
        self.n_observed[b] += 1
        return p

    def observe_many(self, buckets, probs: np.ndarray) -> np.ndarray:
        """:meth:`observe` each row of ``probs`` (T, K) in order; the prequential probabilities (T,).

        O(T · E · K), one symbol at a time (each prediction uses only the symbols before it).
        """
        P = np.asarray(probs, dtype=np.float64)
        b_all = np.asarray(buckets, dtype=np.int64)
        if P.ndim != 2 or b_all.shape != (P.shape[0],):
            raise ValueError(f"one bucket per row of probabilities: {b_all.shape} and {P.shape}")
        out = np.empty(P.shape[0])
        if P.shape[0] == 0:
            return out
        # why: the experts' probabilities of every row in one product, each posterior updated
        # in place, the blends once per bucket at the end: 4 small vector operations a symbol
        # instead of 9 (the same updates, up to rounding)
        PE = P @ self.grid.T
        alpha, E, h = self.switching, self.n_experts, self.switching_half_life
        seen = self.n_observed.tolist()  # the symbols each bucket learned so far: its rate's t
        rows = list(self._posterior)  # views: updated in place
        learned = np.zeros(N_BUCKETS)
        dot = np.dot
        for t, (b, pe) in enumerate(zip(b_all.tolist(), PE, strict=True)):
            w = rows[b]
            p = float(dot(w, pe))
            if not p > 0 or p == np.inf:  # as observe: nothing to learn from it
                out[t] = max(p, 0.0) if np.isfinite(p) else 0.0
                continue
            out[t] = p
            w *= pe
            a = _rate(alpha, h, seen[b])
            w *= (1.0 - a) / p
            if a:
                w += a / E
            seen[b] += 1
            learned[b] += 1
        touched = learned > 0
        self._blends[touched] = self._posterior[touched] @ self.grid
        self.n_observed += learned
        return out

    @classmethod
    def from_held_out(cls, n_components: int, buckets, probs: np.ndarray, weights=None, *,
                      strength: float = 1000.0, **kwargs) -> ExpertMixture:
        """A mixture whose starting posterior is the Bayes posterior on held-out data.

        ``probs[i]`` (K,) are the components' probabilities of held-out symbol i in bucket
        ``buckets[i]``, counted ``weights[i]`` times. The log-likelihood of every expert is
        tempered so that each bucket's data weigh at most ``strength`` symbols, so the
        stream can still move the weights. O(m · E · K).
        """
        mix = cls(n_components, **kwargs)
        P = np.asarray(probs, dtype=np.float64)
        w = np.ones(P.shape[0]) if weights is None else np.asarray(weights, dtype=np.float64)
        b = np.asarray(buckets, dtype=np.int64)
        loglik = np.log(np.maximum(P @ mix.grid.T, _LOG_FLOOR)) * w[:, None]  # (m, E)
        lw = np.zeros((N_BUCKETS, mix.n_experts))
        for k in range(N_BUCKETS):
            at = b == k
            total = w[at].sum()
            if total > 0:
                lw[k] = loglik[at].sum(axis=0) * min(1.0, strength / total)
        return cls(n_components, resolution=mix.resolution, switching=mix.switching,
                   switching_half_life=mix.switching_half_life, log_weights=lw)

    def copy(self) -> ExpertMixture:
        out = ExpertMixture(self.n_components, resolution=self.resolution, switching=self.switching,
                            switching_half_life=self.switching_half_life)
        out._posterior = self._posterior.copy()
        out._blends = self._blends.copy()
        out.n_observed = self.n_observed.copy()
        return out

    def __repr__(self) -> str:
        return (f"ExpertMixture(n_components={self.n_components}, experts={self.n_experts}, "
                f"switching={self.switching:g}, blends={np.round(self._blends, 3).tolist()})")
