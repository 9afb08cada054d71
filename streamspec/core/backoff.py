"""What every fitted model predicts with: the model, a Kneser–Ney trigram and an HMM filter, mixed.

A spectral model of low rank predicts frequent symbols well and rare ones badly, and
no model of two symbols of context knows where the stream was earlier. The default
prediction of every fitted model is therefore a mixture of up to three components:

* ``"model"``: the observable-operator model's own prediction (clipped at 0 and
  renormalised);
* ``"trigram"``: the interpolated modified Kneser–Ney trigram of the same counts,
  stream starts included (:class:`~streamspec.core.trigram.KneserNeyTrigram`);
* ``"hmm"``: the exact forward filter of a hidden Markov model recovered from the same
  counts (:mod:`~streamspec.core.hmm_filter`): the long memory.

Their weights are a switching Bayesian mixture of blends per bucket of the trigram
context's count (:class:`~streamspec.core.mixture.ExpertMixture`), started from held-out
counts by :func:`~streamspec.core.backoff_fit.fit_with_backoff` and learned from every
symbol a stream shows before it is counted. Reading a sequence (:meth:`Backoff.walk`) is
the same online predictor: every symbol is predicted from the ones before it, and the
weights learn from it on a copy (the model itself never changes by being read).

Costs: a row O(n · K) plus the trigram row O(n + entries); the probability of one observed
symbol O(K² + log nnz) besides the model's; learning the weights O(E · K) per symbol
(E experts, K components).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from streamspec.core.hmm_filter import HMMFilter, predictive_states, symbol_probas
from streamspec.core.mixture import ExpertMixture, bucket_of_counts
from streamspec.core.trigram import START, KneserNeyTrigram

__all__ = ["Backoff", "Walk", "COMPONENTS", "contexts_of"]

COMPONENTS = ("model", "trigram", "hmm")


def contexts_of(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(u, v)``: the two symbols before each position 0..T of ``x`` (-1: the start). O(T).

    Examples
    --------
    >>> [a.tolist() for a in contexts_of(np.array([4, 5, 6]))]
    [[-1, -1, 4, 5], [-1, 4, 5, 6]]
    """
    x = np.asarray(x, dtype=np.int64)
    start = np.full(2, START, dtype=np.int64)
    padded = np.concatenate([start, x])
    return padded[: x.size + 1], padded[1 : x.size + 2]


@dataclass
class Walk:
    """A sequence read by the online predictor (:meth:`Backoff.walk`), positions 0..T.

    ``u, v`` the trigram contexts, ``states`` the HMM's predictive states (``None``
    without an HMM), ``blends`` the component weights in force at each position (T + 1,
    K), ``probs`` the mixture's probability of each observed symbol (T,), and
    ``mixture`` the weights after the last symbol.
    """

    u: np.ndarray
    v: np.ndarray
    states: np.ndarray | None
    blends: np.ndarray
    probs: np.ndarray
    mixture: ExpertMixture


class Backoff:
    """The trigram, the HMM and the learned weights that a model's predictions mix with it.

    Parameters
    ----------
    trigram
        The Kneser–Ney trigram of the counts.
    mixture
        The weights: an :class:`~streamspec.core.mixture.ExpertMixture` over the
        components (:attr:`components`, in the order ``"model", "trigram", "hmm"``).
    hmm
        Optional :class:`~streamspec.core.hmm_filter.HMMFilter` (the arrays of a
        :class:`~streamspec.core.hidden_markov_model.HiddenMarkovModel`) over the same
        alphabet: its forward filter is the third component.
    held_out
        How good it was on held-out counts when it was fitted
        (:func:`~streamspec.core.held_out.held_out_scores`: nats per symbol of the
        ``"mixture"``, ``"unigram"``, ``"trigram"``, ``"model"``, ``"hmm"``, and the
        ``"symbols"`` scored); ``{}`` when not measured (a refit).
    use_model
        Whether the model's own prediction is a component. A fit leaves it out where it
        does not improve the held-out loss (it costs O(n · d) per prediction; the trigram
        and the HMM filter cost O(K² + log nnz) per observed symbol).
    hmm_changed
        The share of the distinct triples that changed since the HMM's EM, summed over the
        refits that kept it (NaN: unknown, e.g. after a checkpoint; a refit then runs EM).
        Not saved in checkpoints.
    states_chosen_at
        The counted triples (their total weight) when the HMM's number of states was
        chosen on held-out counts (NaN: unknown, e.g. after a checkpoint; the next refit
        then counts from its own total). A refit chooses it again once the counts have
        grown :data:`~streamspec.core.backoff_fit.STATES_REGROWTH` times. Not saved in
        checkpoints.

    Memory: the trigram's O(nnz + n), the HMM's O(n · K), the mixture's O(E).

    Examples
    --------
    >>> from streamspec.core.triples import Triples
    >>> t = Triples.from_arrays(2, x1=[0, 1, 0], x2=[1, 0, 1], x3=[0, 1, 0])
    >>> b = Backoff(KneserNeyTrigram(t), ExpertMixture(2))
    >>> b.components, b.n
    (('model', 'trigram'), 2)
    >>> walk = b.walk(np.array([0, 1, 0]), np.array([0.5, 0.5, 0.5]))
    >>> walk.probs.shape, walk.blends.shape
    ((3,), (4, 2))
    """

    def __init__(self, trigram: KneserNeyTrigram, mixture: ExpertMixture,
                 hmm: HMMFilter | None = None, held_out: dict[str, float] | None = None,
                 use_model: bool = True, hmm_changed: float = float("nan"),
                 states_chosen_at: float = float("nan")):
        self.trigram = trigram
        self.hmm_changed = float(hmm_changed)
        self.states_chosen_at = float(states_chosen_at)
        self.hmm = hmm
        self.mixture = mixture
        self.held_out = dict(held_out or {})
        self.use_model = bool(use_model)
        self.components = tuple(c for c, on in zip(COMPONENTS, (use_model, True, hmm is not None),
                                                   strict=True) if on)
        if mixture.n_components != len(self.components):
            raise ValueError(f"a mixture of {mixture.n_components} components for the components "
                             f"{self.components}")
        if hmm is not None and hmm.n_symbols != trigram.n:
            raise ValueError(f"an HMM over {hmm.n_symbols} symbols for a trigram over {trigram.n}")

    @property
    def n(self) -> int:
        return self.trigram.n

    # ---------------------------------------------------------------- the parts

    def hmm_states(self, x: np.ndarray) -> np.ndarray | None:
        """The HMM's predictive states at positions 0..T of ``x``, (T + 1, K); ``None`` without one.
        O(T · K²)."""
        if self.hmm is None:
            return None
        h = self.hmm
        return predictive_states(h.startprob_, h.transmat_, h.emissionprob_, x)

    def buckets(self, u, v) -> np.ndarray:
        """The weights' bucket of each context: its count in the trigram. O(m log nnz)."""
        return bucket_of_counts(self.trigram.context_counts(u, v))

    def component_probas(self, u, v, states, x, p_model) -> np.ndarray:
        """The components' probabilities of symbols ``x`` (m,), shape (m, K); ``p_model`` is
        ignored (may be ``None``) when the model is not a component. O(m · (K + log nnz))."""
        cols = [self.trigram.proba_of(u, v, x)]
        if self.use_model:
            cols.insert(0, np.asarray(p_model, dtype=np.float64))
        if self.hmm is not None:
            cols.append(symbol_probas(states, self.hmm.emissionprob_, x))
        return np.stack(cols, axis=1)

    def rows(self, u, v, states, p_model_rows, blends: np.ndarray) -> np.ndarray:
        """Mixed predictive rows (m, n) from the model's rows (ignored when it is not a
        component), contexts, HMM states and blends. O(m · n · K + trigram entries)."""
        j = int(self.use_model)
        out = blends[:, j : j + 1] * self.trigram.predict_many(u, v)
        if self.use_model:
            out += blends[:, :1] * p_model_rows
        if self.hmm is not None:
            out += blends[:, j + 1 : j + 2] * (np.atleast_2d(states) @ self.hmm.emissionprob_)
        return out

    # ---------------------------------------------------------------- reading a sequence

    def walk(self, x, p_model, mixture: ExpertMixture | None = None) -> Walk:
        """Read ``x`` (indices) as the online predictor: predict each symbol, then learn from it.

        ``p_model[t]`` is the model's own probability of ``x[t]`` (``None`` when the model is
        not a component). The weights start from
        ``mixture`` (default: this backoff's) and are learned on a copy. O(T · (K² + E · K +
        log nnz)).
        """
        x = np.asarray(x, dtype=np.int64)
        u, v = contexts_of(x)
        states = self.hmm_states(x)
        P = self.component_probas(u[:-1], v[:-1], None if states is None else states[:-1], x, p_model)
        mix = (self.mixture if mixture is None else mixture).copy()
        buckets = self.buckets(u, v)
        blends = np.empty((x.size + 1, mix.n_components))
        probs = np.empty(x.size)
        for t in range(x.size):
            blends[t] = mix.blend(buckets[t])
            probs[t] = mix.observe(buckets[t], P[t])
        blends[x.size] = mix.blend(buckets[x.size])
        return Walk(u, v, states, blends, probs, mix)

    # ---------------------------------------------------------------- persistence

    def to_parts(self) -> tuple[dict, dict]:
        """Header values and arrays for a checkpoint: the trigram's counts, the HMM, the weights.
        O(nnz + n · K + E)."""
        mix = self.mixture
        header = {"components": list(self.components), "resolution": mix.resolution,
                  "switching": mix.switching, "switching_half_life": mix.switching_half_life,
                  "held_out": self.held_out}
        arrays = {f"trigram_{k}": v for k, v in self.trigram.to_arrays().items()}
        arrays["log_weights"], arrays["weights_observed"] = mix.log_weights(), mix.n_observed
        if self.hmm is not None:
            arrays.update(hmm_startprob=self.hmm.startprob_, hmm_transmat=self.hmm.transmat_,
                          hmm_emissionprob=self.hmm.emissionprob_)
        return header, arrays

    @classmethod
    def from_parts(cls, header: dict, arrays: dict, n: int) -> Backoff:
        """The backoff of :meth:`to_parts` over ``n`` symbols (``ValueError`` if malformed)."""
        trigram = KneserNeyTrigram.from_arrays(
            n, {k[len("trigram_"):]: v for k, v in arrays.items() if k.startswith("trigram_")})
        components = tuple(header["components"])
        if "trigram" not in components or not set(components) <= set(COMPONENTS):
            raise ValueError(f"unknown components {components!r}")
        # a file without a half-life was written when the rate was constant: it stays so
        mixture = ExpertMixture(len(components), resolution=int(header["resolution"]),
                                switching=float(header["switching"]),
                                switching_half_life=header.get("switching_half_life"),
                                log_weights=arrays["log_weights"])
        if "weights_observed" in arrays:  # the symbols each bucket learned: its rate's clock
            try:
                mixture.restore_observed(arrays["weights_observed"])
            except ValueError as exc:
                raise ValueError(f"weights_observed: {exc}") from None
        hmm = None
        if "hmm" in components:
            hmm = HMMFilter(arrays["hmm_startprob"], arrays["hmm_transmat"], arrays["hmm_emissionprob"])
        held_out = {str(k): float(v) for k, v in header.get("held_out", {}).items()}
        return cls(trigram, mixture, hmm, held_out, use_model="model" in components)

    def __repr__(self) -> str:
        return f"Backoff({self.trigram!r}, hmm={self.hmm!r}, {self.mixture!r})"

