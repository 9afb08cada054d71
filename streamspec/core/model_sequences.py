"""Predicting and scoring sequences with a model and its backoff (a mixin of the model).

Without a backoff, a model's prediction of each symbol is its own (filtered, clipped,
renormalised, floored) distribution. With one (every estimator's default), it is the
online predictor of :mod:`streamspec.core.backoff`: the model, the Kneser–Ney trigram and
the HMM filter, mixed by weights that learn from each symbol once it has been predicted.
Every routine here is that one predictor read in order along the sequence, so that
``predict_proba_next(seq[:t])``, row t of ``predictive_sequence(seq)`` and
``proba_sequence(seq)[t]`` agree, and :meth:`SequencePrediction.log_loss` is the
prequential log loss of the stream of its sequences (the weights carry over from one
sequence to the next; the model itself never changes by being read).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np

from streamspec.core.backoff import contexts_of
from streamspec.core.hmm_filter import advance

__all__ = ["SequencePrediction"]


class SequencePrediction:
    """``predict_proba_next``, ``proba_sequence``, ``predictive_sequence``, ``log_proba``,
    ``log_loss``, ``accuracy`` and ``sample`` of an
    :class:`~streamspec.core.model.ObservableOperatorModel` (a mixin)."""

    # ------------------------------------------------------------------ the model's own part

    def _own_probas(self, x: np.ndarray) -> np.ndarray:
        """The model's own probability of each symbol of ``x`` from the symbols before it. (T,)

        Only the row sums of the (c, n) products are needed, not the rows: three passes over a
        chunked (c, n) scratch of ≤ ~2²² floats. Time O(T · (w · d² + n · d)).
        """
        out = np.empty(len(x))
        for start, stop, V, _ in self._chunks(x):
            q = V @ self._C.T
            np.clip(q, 0.0, None, out=q)
            s = q.sum(axis=1)
            nexts = x[start:stop]
            ok = s > 0
            a = np.where(ok, q[np.arange(q.shape[0]), nexts] / np.where(ok, s, 1.0), 1.0 / self.n_symbols)
            if self.backoff is None and self.min_proba > 0:
                # floor at min_proba, renormalise: Σ_x max(q_x / s, m) = Σ_x max(q_x, m s) / s
                sf = np.where(ok, s, 1.0)
                np.maximum(q, (self.min_proba * sf)[:, None], out=q)
                f = np.where(ok, q.sum(axis=1) / sf, 1.0)  # uniform rows: n · max(1/n, m) = 1
                a = np.maximum(a, self.min_proba) / f
            out[start:stop] = a
        return out

    def walk(self, seq, mixture=None):
        """The sequence read by the online predictor (:meth:`~streamspec.core.backoff.Backoff.walk`):
        contexts, HMM states and the weights in force at each position 0..T. Needs a backoff.
        O(T · (w · d² + n · d + K² + E · K)).
        """
        if self.backoff is None:
            raise ValueError("walk needs a model with a backoff (the plain model has no weights)")
        x = self._seq(seq)
        own = self._own_probas(x) if self.backoff.use_model else None
        return self.backoff.walk(x, own, mixture)

    # ------------------------------------------------------------------ distributions

    def _row_chunks(self, x: np.ndarray, walk) -> Iterator[tuple[int, int, np.ndarray]]:
        """``(start, stop, rows)``: the predictive rows of positions ``start..stop-1``, chunked."""
        for start, stop, V, _ in self._chunks(x):
            own = self._rows(V) if walk is None or self.backoff.use_model else None
            if walk is None:
                yield start, stop, own
                continue
            sl = slice(start, stop)
            states = None if walk.states is None else walk.states[sl]
            yield start, stop, self.backoff.rows(walk.u[sl], walk.v[sl], states, own, walk.blends[sl])

    def predict_proba_next(self, history) -> np.ndarray:
        """Distribution of the next symbol given ``history`` (indices), shape (n,).

        Always a valid distribution: non-negative, sums to 1. Without a backoff, the model's
        own from its filter: O(w · d² + n · d) (window), O(t · d²) (recursive). With one, the
        online predictor after reading the history: O(t · (w · d² + n · d + K² + E · K)).

        Examples
        --------
        >>> from streamspec.core.model import ObservableOperatorModel
        >>> m = ObservableOperatorModel([1.0], [1.0], [[[0.25]], [[0.75]]])
        >>> m.predict_proba_next([0, 1, 1]).tolist()
        [0.25, 0.75]
        """
        h = self._seq(history)
        uses_own = self.backoff is None or self.backoff.use_model
        own = self.predict_from_state(self.state_for(h)) if uses_own else None
        if self.backoff is None:
            return own
        w = self.walk(h)
        states = None if w.states is None else w.states[-1:]
        return self.backoff.rows(w.u[-1:], w.v[-1:], states, None if own is None else own[None],
                                 w.blends[-1:])[0]

    def predictive_sequence(self, seq) -> np.ndarray:
        """Predictive distributions before each symbol of ``seq``: shape (t, n).

        Row t is the prediction of ``seq[t]`` from ``seq[:t]``. Time O(t · (w · d² + n · d));
        memory: the (t, n) result plus chunked scratch of ≤ ~2²² floats. To score a sequence
        without the (t, n) result use :meth:`proba_sequence`.
        """
        x = self._seq(seq)
        out = np.empty((len(x), self.n_symbols))
        walk = self.walk(x) if self.backoff is not None else None
        for start, stop, rows in self._row_chunks(x, walk):
            out[start:stop] = rows
        return out

    def proba_sequence(self, seq, mixture=None) -> np.ndarray:
        """``Pr(seq[t] | seq[:t])`` for each t, shape (t,), without the (t, n) table.

        ``mixture``: the backoff's weights to start from (default: the model's). Time
        O(t · (w · d² + n · d)), memory O(t) plus chunked scratch of ≤ ~2²² floats.

        Examples
        --------
        >>> from streamspec.core.model import ObservableOperatorModel
        >>> m = ObservableOperatorModel([1.0], [1.0], [[[0.25]], [[0.75]]])
        >>> m.proba_sequence([0, 1]).tolist()
        [0.25, 0.75]
        """
        x = self._seq(seq)
        if self.backoff is None:
            return self._own_probas(x)
        return self.walk(x, mixture).probs

    # ------------------------------------------------------------------ scores

    def log_proba(self, seq) -> float:
        """``log Pr(x_1..x_t)`` by the chain rule over the predictive distributions.

        Never underflows: a sum of log conditionals, each at least ``log(min_proba)``
        (or positive by the trigram's floor). Time as :meth:`proba_sequence`.
        """
        x = self._seq(seq)
        if x.size == 0:
            return 0.0
        return float(np.log(self.proba_sequence(x)).sum())

    def log_loss(self, sequences: Iterable) -> float:
        """Mean negative log-likelihood per symbol (nats) over held-out sequences.

        With a backoff, the prequential loss of the online predictor over the sequences in
        order (its weights carry over from one sequence to the next); compare
        ``without_backoff().log_loss``. Time O(T · (n · d + K² + E · K)), memory chunked.
        """
        total, count, mixture = 0.0, 0, None
        for seq in sequences:
            x = self._seq(seq)
            if x.size == 0:
                continue
            if self.backoff is None:
                p = self._own_probas(x)
            else:
                walk = self.walk(x, mixture)
                p, mixture = walk.probs, walk.mixture
            total -= float(np.log(p).sum())
            count += x.size
        if count == 0:
            raise ValueError("log_loss needs at least one symbol")
        return total / count

    def accuracy(self, sequences: Iterable) -> float:
        """Fraction of symbols equal to the argmax of their predictive distribution. O(T · n · d)."""
        hits, count, mixture = 0, 0, None
        for seq in sequences:
            x = self._seq(seq)
            walk = self.walk(x, mixture) if self.backoff is not None and x.size else None
            mixture = walk.mixture if walk is not None else mixture
            for start, stop, rows in self._row_chunks(x, walk):
                hits += int((rows.argmax(axis=1) == x[start:stop]).sum())
            count += x.size
        if count == 0:
            raise ValueError("accuracy needs at least one symbol")
        return hits / count

    def sample(self, length: int, random_state: int | np.random.Generator | None = None) -> np.ndarray:
        """Draw a sequence of ``length`` symbol indices from the model's predictions (with the
        backoff, if any: its weights fixed as fitted). O(length · n · (d + K)) time, O(n) memory."""
        rng = np.random.default_rng(random_state)
        out = np.empty(int(length), dtype=np.int64)
        u = rng.random(out.size)
        state = self.initial_state()
        hmm = None if self.backoff is None else self.backoff.hmm
        a = None if hmm is None else hmm.startprob_
        for t in range(out.size):
            if self.filter == "window":
                state = self.state_for(out[max(0, t - self.window) : t])
            p = None if self.backoff is not None and not self.backoff.use_model else (
                self.predict_from_state(state))
            if self.backoff is not None:
                p = self._sample_row(out[:t], p, a)
            out[t] = min(int(np.searchsorted(np.cumsum(p), u[t], side="right")), self.n_symbols - 1)
            if self.filter == "recursive":
                state = self.update_state(state, out[t])
            if hmm is not None:
                a = advance(a, hmm.transmat_, hmm.emissionprob_, int(out[t]))
        return out

    def _sample_row(self, history: np.ndarray, own: np.ndarray, hmm_state) -> np.ndarray:
        """The mixed row after ``history`` with the fitted weights. O(n · (d + K))."""
        u, v = (c[-1:] for c in contexts_of(history[-2:]))  # the last two symbols are the context
        blends = self.backoff.mixture.blends(self.backoff.buckets(u, v))
        states = None if hmm_state is None else hmm_state[None]
        return self.backoff.rows(u, v, states, None if own is None else own[None], blends)[0]
