"""Learning one partition's batch: records to its accumulator, dead letters, predictions.

:class:`BatchLearner` turns the messages a poll returned for one partition into
counts, in offset order, one message at a time and all or nothing
(:func:`connectors.ingest.learn_record`). A message that cannot be parsed, carries
a symbol outside the fixed alphabet, or whose learning raised is a dead letter and
is skipped; a valid message whose learning fails because the state cannot grow is
a state failure: the batch stops before it (its partition's offset stays on it).
Once a model is served, each message learned is also given to the partition's
predictor (:mod:`connectors.kafka.scoring`): its symbols are scored (their prequential
probability, the weights learning from it) at the end of the batch, in order, or
predicted at once with a predictions topic; what is counted never depends on it.
The partition's offset moves past every message handled, so the checkpoint is
always "the counts of every message before this offset", and the last message
handled is the partition's mark (:class:`~connectors.state.identity.RecordMark`:
what identifies its log). A partition held back until its log is verified gives
its batch to the verifier first (:mod:`connectors.kafka.verification`).
"""

from __future__ import annotations

from collections.abc import Callable

from kafka import TopicPartition

from connectors.config import DaemonConfig
from connectors.ingest import is_state_failure, learn_record
from connectors.kafka.assignment import Assignment
from connectors.kafka.checkpoints import Checkpointer
from connectors.kafka.outputs import Outputs
from connectors.kafka.refit_policy import RefitPolicy
from connectors.kafka.scoring import Scoring
from connectors.kafka.verification import LogVerifier
from connectors.metrics import DaemonMetrics
from connectors.records import MalformedRecord, RecordFormat, parse_kafka
from connectors.state.files import PartitionState
from streamspec.streaming.accumulator import MomentAccumulator

__all__ = ["BatchLearner", "new_accumulator"]

_CACHE_ENTRIES = 1 << 16  # parsed (key, value) pairs kept; the cache is cleared when full
_CACHED_VALUE_BYTES = 64  # only short values are cached


def new_accumulator(config: DaemonConfig) -> MomentAccumulator:
    """The empty counts of a partition read for the first time (of the configured window)."""
    if config.max_symbols is None:
        return MomentAccumulator(mode=config.mode, window=config.window)
    return MomentAccumulator(mode=config.mode, max_symbols=config.max_symbols, window=config.window)


class BatchLearner:
    """Learns the batches of the partitions held, with their dead letters and predictions.

    Parameters
    ----------
    fmt
        How messages are parsed.
    allowed
        The fixed alphabet (``None``: any symbol).
    assignment
        The partitions held (a batch of a partition no longer held is dropped).
    outputs
        Dead letters and predictions go there.
    metrics, refits, checkpoints
        Told how many records were learned and messages read.
    on_state_failure
        Called with the error, the partition and the offset of a valid message that
        could not be learned (the daemon stops).
    verifier
        Checks the first batch of a partition held back until its log is verified,
        and marks the last record counted.
    scoring
        The partitions' predictors: each message learned is scored (or predicted).
    """

    def __init__(self, fmt: RecordFormat, allowed: frozenset | None, assignment: Assignment,
                 outputs: Outputs, metrics: DaemonMetrics, refits: RefitPolicy,
                 checkpoints: Checkpointer,
                 on_state_failure: Callable[[str, TopicPartition, int], None],
                 verifier: LogVerifier, scoring: Scoring):
        self.fmt, self.allowed, self.assignment = fmt, allowed, assignment
        self.outputs, self.metrics, self.refits = outputs, metrics, refits
        self.checkpoints, self.on_state_failure = checkpoints, on_state_failure
        self.verifier, self.scoring = verifier, scoring
        # parsed records of short (key, value) pairs: streams repeat a few symbols, and
        # parsing depends on nothing else (records are immutable; timestamps are not used)
        self._cache: dict[tuple, list] = {}

    def learn(self, tp: TopicPartition, messages: list) -> None:
        """Learn one partition's fetched messages (in offset order), under the lock."""
        state = self.assignment.states.get(tp)
        if state is None:  # fetched before a revocation: the new owner reads it
            return
        if tp in self.assignment.to_verify:  # the first records say whether the log is the one read
            messages = self.verifier.check_batch(tp, state, messages)
            if not messages:
                return
        acc, cache, allowed = state.acc, self._cache, self.allowed
        scorer = self.scoring.scorer(state)
        learned, start = 0, state.offset
        if messages:
            self.outputs.malformed.read(len(messages))  # the base of --max-malformed's share
        for m in messages:
            if m.offset < state.offset:
                continue  # already counted (fetched before the seek)
            value = m.value  # the cache hit stays in this loop: it is the common case
            records = (cache.get((m.key, value))
                       if value is not None and len(value) <= _CACHED_VALUE_BYTES else None)
            if records is None:
                records = self._parse(state, m)
            if records is None or (allowed is not None and not self._in_alphabet(state, m,
                                                                                  records)):
                state.offset = m.offset + 1  # sent as a dead letter
                continue
            try:
                n = learn_record(acc, records)
            except Exception as exc:  # deterministic, so a replay does exactly the same
                if is_state_failure(exc):  # the record is valid: stop, never a dead letter
                    self.on_state_failure(f"{type(exc).__name__}: {exc}", tp, m.offset)
                    break
                self.outputs.dead_letter(state, m, "unprocessable", f"{type(exc).__name__}: {exc}")
            else:
                if scorer is not None:  # outputs only: they never change what is counted
                    self.scoring.add(scorer, m, records, state.records + learned)
                learned += n
            state.offset = m.offset + 1
        if scorer is not None:
            self.scoring.flush(scorer)
        if state.offset > start:
            self._mark(tp, state, messages)
        state.records += learned
        self.metrics.records += learned
        self.metrics.messages += len(messages)
        self.refits.learned(learned)
        self.checkpoints.counted(tp, len(messages))

    def _mark(self, tp: TopicPartition, state: PartitionState, messages: list) -> None:
        """Remember the last message handled (one digest per batch): the log's identity."""
        for m in reversed(messages):  # the last one, unless a state failure stopped the batch
            if m.offset == state.offset - 1:
                state.log.mark = self.verifier.mark_of(tp, m)
                return

    def _parse(self, state: PartitionState, m) -> list | None:
        """The records of message ``m`` (cached when short); ``None``: sent as a dead letter."""
        try:
            records = parse_kafka(m.key, m.value, self.fmt)
        except MalformedRecord as exc:
            self.outputs.dead_letter(state, m, exc.reason, exc.detail)
            return None
        if m.value is not None and len(m.value) <= _CACHED_VALUE_BYTES:
            if len(self._cache) >= _CACHE_ENTRIES:
                self._cache.clear()
            self._cache[(m.key, m.value)] = records
        return records

    def _in_alphabet(self, state: PartitionState, m, records: list) -> bool:
        """Whether every symbol of ``records`` is in the fixed alphabet; else a dead letter."""
        unknown = [r.symbol for r in records
                   if r.symbol is not None and r.symbol not in self.allowed]
        if unknown:
            detail = f"symbol {unknown[0]!r} is not in the fixed alphabet"
            self.outputs.dead_letter(state, m, "unknown-symbol", detail)
        return not unknown
