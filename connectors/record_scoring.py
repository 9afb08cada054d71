"""Records predicted before they are learned: the prequential loss and the weights it teaches.

:class:`RecordScorer` reads parsed records (:class:`~connectors.records.Record`) in the
order they are learned, with an
:class:`~streamspec.streaming.online_predictor.OnlinePredictor` following the current
model: each stream keeps its last symbols and its HMM filter state; the probability the
model gave a symbol before it was counted is its prequential score (its ``−log`` summed
is the prequential loss), and the mixing weights learn from it. Records are buffered
and scored in batches (:meth:`~streamspec.streaming.online_predictor.OnlinePredictor.observe_many`:
the same figures as one at a time, at a fraction of the cost).

The daemon keeps one per partition (:mod:`connectors.kafka.scoring`); ``learn --follow``
one for its files, from its first periodic fit on, so that each save starts from the
weights its records taught (:class:`~connectors.refit_start.RefitStart`).

Examples
--------
>>> from streamspec import MEstimator, MomentAccumulator
>>> from connectors.records import Record
>>> acc = MomentAccumulator()
>>> acc.learn_many(list("abcabcabcb") * 30, key="s")
>>> scorer = RecordScorer(acc)
>>> scorer.follow(MEstimator(rank=2).fit(acc))
>>> scorer.add([Record("s", c) for c in "abcabc"], number=0)
>>> scorer.flush()
>>> scorer.online.n_scored, scorer.since_model()[1]
(6, 6)
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from connectors.state.weights import LearnedWeights
from streamspec.core.alphabet import OTHER
from streamspec.core.model import ObservableOperatorModel
from streamspec.streaming.online_predictor import UNSEEN, OnlinePredictor

__all__ = ["RecordScorer"]

_MISSES_KEPT = 1 << 16  # labels outside the model's alphabet whose index is remembered
_BUFFERED = 1 << 12  # records scored together at most (the daemon flushes once a batch)


class RecordScorer:
    """Records scored by the current model before they are learned; the weights they teach.

    Parameters
    ----------
    acc
        The accumulator the records are learned into: with a capped alphabet, it says
        which labels are counted as ``"<other>"``.
    weights
        Where the weights and the loss start (e.g. a checkpoint's); ``None``: the model's
        weights, no loss yet.
    every
        Score the symbols numbered 0, ``every``, 2 · ``every``, ... (every symbol still
        moves its stream).

    Attributes
    ----------
    online
        The :class:`~streamspec.streaming.online_predictor.OnlinePredictor` (``None``
        before the first model).
    """

    def __init__(self, acc, weights: LearnedWeights | None = None, every: int = 1):
        if int(every) < 1:
            raise ValueError(f"every must be a positive integer, got {every!r}")
        self.acc, self.weights, self.every = acc, weights, int(every)
        self.online: OnlinePredictor | None = None
        self._index: dict = {}
        self._misses: dict = {}
        self._other = UNSEEN
        self._at_model = (0.0, 0)  # loss and symbols scored when the model was swapped in
        self._keys: list = []  # the records added since the last flush: stream keys,
        self._symbols: list = []  # symbols (None: an end alone),
        self._ends: list[int] = []  # the positions after which a stream ended,
        self._first = 0  # and the number of the first symbol among them

    # ---------------------------------------------------------------- the model

    def follow(self, model: ObservableOperatorModel) -> None:
        """Predict with ``model`` from now on (the streams and the weights go on). O(1), or
        O(n) when the model changed (its labels indexed; the buffered records are scored
        by the model they came under first)."""
        online = self.online
        if online is not None and online.model is model:
            return
        self.flush()
        if online is None:
            self.online = online = self._new_predictor()
        before = online.mixture
        online.set_model(model)
        if online.mixture is not None and online.mixture is not before:
            online.mixture.n_observed[:] = 0  # taken from the model: nothing learned here yet
        labels = model.symbols if model.symbols is not None else range(model.n_symbols)
        self._index = {s: i for i, s in enumerate(labels)}
        self._misses.clear()
        self._other = self._index.get(OTHER, UNSEEN)
        self._at_model = (online.loss, online.n_scored)

    def _new_predictor(self) -> OnlinePredictor:
        """A predictor going on from :attr:`weights`, following each model's window (a fit's
        choice, ``window="auto"``: the streams keep their symbols when it changes)."""
        online = OnlinePredictor(window=None)
        learned = self.weights
        if learned is not None:
            if learned.mixture is not None:
                online.set_weights(learned.mixture, learned.components)
            online.loss, online.n_scored = learned.loss, learned.scored
        return online

    def index_of(self, symbol) -> int:
        """The model's index of a label just learned: a label a capped alphabet counted as
        ``"<other>"`` is that one's; a label new since the fit is ``UNSEEN``. O(1)."""
        i = self._index.get(symbol)
        if i is not None:
            return i
        i = self._misses.get(symbol)
        if i is None:
            i = UNSEEN
            if self._other != UNSEEN and getattr(self.acc, "max_symbols", None) is not None:
                try:
                    self.acc.alphabet.index_of(symbol, grow=False)
                except ValueError:  # not among the labels counted: counted as "<other>"
                    i = self._other
            if len(self._misses) >= _MISSES_KEPT:
                self._misses.clear()
            self._misses[symbol] = i
        return i

    # ---------------------------------------------------------------- records

    def add(self, records: Iterable, number: int) -> None:
        """The records of one message (or line) just learned; ``number``: the symbols learned
        before them (it picks the scored ones: the symbols a flush holds are numbered in a
        row). O(1) each; scored at :meth:`flush` (by itself every 4,096 records). Before
        the first model there is nothing to score them by: they are ignored."""
        if self.online is None:
            return
        keys, symbols = self._keys, self._symbols
        if not keys:
            self._first = number
        if len(records) == 1 and not records[0].end:  # the common case: one symbol
            r = records[0]
            if r.symbol is not None:
                keys.append(r.key)
                symbols.append(r.symbol)
        else:
            for r in records:
                if r.symbol is not None or r.end:
                    keys.append(r.key)
                    symbols.append(r.symbol)
                    if r.end:
                        self._ends.append(len(keys) - 1)
        if len(keys) >= _BUFFERED:
            self.flush()

    def flush(self) -> None:
        """Score the records added since the last flush, in order, and learn from them."""
        if not self._keys or self.online is None:
            return
        keys, symbols, ends = self._keys, self._symbols, self._ends
        self._keys, self._symbols, self._ends = [], [], []
        get = self._index.get
        indices = [get(s, -2) for s in symbols]  # -2: not among the model's labels
        if -2 in indices:
            indices = [i if i != -2 else -1 if s is None else self.index_of(s)
                       for i, s in zip(indices, symbols, strict=True)]
        scored = None
        if self.every > 1:
            if ends:  # ends alone take no number
                has = np.fromiter((s is not None for s in symbols), bool, len(symbols))
                number = self._first + np.cumsum(has) - 1  # each symbol's number
                mask = has & (number % self.every == 0)
            else:  # the symbols are numbered in a row: every every-th one
                mask = np.zeros(len(keys), dtype=bool)
                mask[-self._first % self.every::self.every] = True
            scored = mask.tolist()
        end_mask = None
        if ends:
            end_mask = [False] * len(keys)
            for t in ends:
                end_mask[t] = True
        self.online.observe_many(keys, indices, scored, end_mask)

    # ---------------------------------------------------------------- what was learned

    def learned_weights(self) -> LearnedWeights | None:
        """The weights and loss so far (``None`` before the first model: :attr:`weights`). O(1)."""
        on = self.online
        if on is None:
            return None
        return LearnedWeights(on.components, on.mixture, on.loss, on.n_scored)

    def since_model(self) -> tuple[float, int]:
        """``(nats, symbols)`` scored since the current model was swapped in (by it). O(1)."""
        if self.online is None:
            return 0.0, 0
        return self.online.loss - self._at_model[0], self.online.n_scored - self._at_model[1]
