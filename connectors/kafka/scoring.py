"""Every record predicted before it is learned, per partition: prequential loss and learned weights.

Once the daemon serves a model, each partition's records are read by that partition's
:class:`~streamspec.streaming.online_predictor.OnlinePredictor` (:class:`PartitionScorer`,
kept on the partition's :class:`~connectors.state.files.PartitionState` as ``scorer``):
every stream keeps its last symbols and its HMM filter state, and the predictor's mixing
weights (:class:`~streamspec.core.mixture.ExpertMixture`) learn from the probability the
current model gave each symbol *before* the symbol is counted. That probability is a
held-out test of the model: the sum of its ``−log`` over the symbols scored, divided by
their number, is the partition's running prequential log loss (status line ``loss=``,
metric ``streamspec_prequential_log_loss``).

What is scored (``score_every``, ``--score-every N``): the partition's symbols numbered
0, N, 2N, ... (their rank among every symbol the partition has taught, which the
checkpoint keeps, so a replay after a crash scores the same ones). Every symbol still
moves its stream's context and hidden state; only the scored ones cost the weights'
update (O(E · K) each). ``1`` scores every symbol; ``0`` none (no predictor at all).
With a predictions topic every symbol is predicted and scored by the same predictor (the
prediction needs the row anyway).

Per partition, so that a partition's weights, loss and streams move with it: they are
saved in its checkpoint (:class:`~connectors.state.weights.LearnedWeights`), restored with
it (another daemon, a restart), and merged into the weights the next refit's model starts
from (:func:`~connectors.state.weights.merge_weights`, called by the refit policies).
"""

from __future__ import annotations

import json
import logging
from typing import Any

from kafka.errors import KafkaError

from connectors.config import DaemonConfig
from connectors.kafka.outputs import DETAIL_MAX, Outputs
from connectors.predictions import StreamPredictor
from connectors.record_scoring import RecordScorer
from connectors.state.files import PartitionState
from connectors.state.weights import LearnedWeights
from streamspec.core.model import ObservableOperatorModel

__all__ = ["Scoring", "PartitionScorer", "describe"]

log = logging.getLogger("streamspec.daemon")


class PartitionScorer(RecordScorer):
    """One partition's online predictor: its records scored, its weights learned.

    Parameters
    ----------
    state
        The partition's state: its saved weights (``state.weights``) are where the
        predictor starts; its accumulator says which labels a capped alphabet counts as
        ``"<other>"``.
    every
        Score the symbols numbered 0, ``every``, 2 · ``every``, ...
    predictions
        Whether each symbol's next-symbol distribution is wanted (a predictions topic).

    Attributes
    ----------
    stream
        The :class:`~connectors.predictions.StreamPredictor` over :attr:`online`
        (predictions only).
    """

    def __init__(self, state: PartitionState, every: int, predictions: bool):
        super().__init__(state.acc, state.weights, every)
        self.state, self.predictions = state, predictions
        self.stream: StreamPredictor | None = None

    def follow(self, model: ObservableOperatorModel, version: int = 0) -> None:
        """Predict with ``model`` from now on (the streams and the weights go on). O(1), or
        O(n) when the model changed (its labels indexed)."""
        super().follow(model)
        if self.predictions:
            if self.stream is None:
                self.stream = StreamPredictor(model, version, online=self.online)
            elif self.stream.model is not model or self.stream.version != version:
                self.stream.set_model(model, version)


class Scoring:
    """The daemon's side of the partitions' scorers: which model they follow, the predictions.

    Parameters
    ----------
    config
        ``score_every`` and ``predictions_topic``.
    outputs
        The model served (:attr:`~connectors.kafka.outputs.Outputs.model`), and where
        predictions are sent.
    """

    def __init__(self, config: DaemonConfig, outputs: Outputs):
        self.every = int(config.score_every)
        self.predicting = bool(config.predictions_topic)
        self.outputs = outputs
        self._failures = 0

    def scorer(self, state: PartitionState) -> PartitionScorer | None:
        """The partition's scorer following the model served (``None``: no model yet, or
        nothing to score). O(1) (O(n) when the model changed)."""
        model = self.outputs.model
        if model is None or not (self.every or self.predicting):
            return None
        sc = state.scorer
        try:
            if sc is None:
                sc = state.scorer = PartitionScorer(state, self.every or 1, self.predicting)
            sc.follow(model, self.outputs.version)
        except Exception as exc:  # noqa: BLE001 - scoring is an output: never stop learning
            self._failed(state, exc)
            return None
        return sc

    def add(self, scorer: PartitionScorer, m, records, number: int) -> None:
        """A message just learned: scored at the end of the batch, or predicted now (and sent)."""
        if not self.predicting:
            scorer.add(records, number)
            return
        try:
            for r in records:
                if r.symbol is not None:
                    out = scorer.stream.observe(r.key, r.symbol, scorer.index_of(r.symbol))
                    out.update(symbol=r.symbol, partition=m.partition, offset=m.offset)
                    self.outputs.send_prediction(m.key, json.dumps(out, default=str).encode())
                if r.end:
                    scorer.stream.forget(r.key)
        except (KafkaError, ValueError) as exc:
            log.warning("event=prediction-failed partition=%s-%d offset=%d error=%r",
                        m.topic, m.partition, m.offset, str(exc))

    def flush(self, scorer: PartitionScorer) -> None:
        """Score what the batch added. A failure is logged (once in a while), never raised:
        scoring is an output, the counts never depend on it."""
        try:
            scorer.flush()
        except Exception as exc:  # noqa: BLE001 - see the docstring
            self._failed(scorer.state, exc)

    def _failed(self, state: PartitionState, exc: Exception) -> None:
        """Log a scoring failure: the 1st, 2nd, 4th, 8th, ... (with their count)."""
        self._failures += 1
        if self._failures & (self._failures - 1) == 0:
            log.warning("event=scoring-failed partition=%s-%d failures=%d error=%r",
                        state.topic, state.partition, self._failures,
                        f"{type(exc).__name__}: {exc}"[:DETAIL_MAX])

    def status(self, states) -> dict[int, LearnedWeights]:
        """The learned weights and loss of every partition that has scored a symbol."""
        out = {}
        for tp, state in states.items():
            learned = state.learned()
            if learned is not None and learned.scored:
                out[tp.partition] = learned
        return out

    def __repr__(self) -> str:
        return f"Scoring(every={self.every}, predicting={self.predicting})"


def describe(learned: dict[int, Any]) -> tuple[str, str]:
    """``loss=`` and ``scored=`` of the status line: ``P:nats,...`` and ``P:symbols,...``."""
    if not learned:
        return "-", "-"
    items = sorted(learned.items())
    return (",".join(f"{p}:{w.log_loss:.4f}" for p, w in items),
            ",".join(f"{p}:{w.scored}" for p, w in items))
