"""Partition ownership: take over assigned partitions, hand back revoked ones, check offsets.

:class:`Partitions` is the part of :class:`~connectors.kafka.daemon.ConsumerDaemon`
that owns partitions; :class:`RebalanceListener` calls it from kafka-python's
rebalance callbacks. A partition is restored from the daemon's state backend
(at once, or paused until :meth:`Partitions._restore_pending` reads it in the
poll loop), sought to its checkpoint offset, and checked against the log before
it is trusted. A partition that cannot be taken over is paused and listed as
failed (status line, metrics, exit status): never silently left unread, never
started afresh (that would count it twice).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable

from kafka import KafkaConsumer, TopicPartition
from kafka.consumer.subscription_state import ConsumerRebalanceListener
from kafka.errors import KafkaError, OffsetOutOfRangeError

from connectors.config import DaemonConfig
from connectors.kafka.clients import OFFSETS_TIMEOUT_MS
from connectors.kafka.outputs import DETAIL_MAX, Outputs
from connectors.kafka.refit_policy import RefitPolicy
from connectors.metrics import DaemonMetrics
from connectors.state.backend import Outcome, StateBackend
from connectors.state.files import ForeignCheckpoint, PartitionState, Restored
from streamspec.core.checkpoint import CheckpointError
from streamspec.streaming.accumulator import MomentAccumulator

__all__ = ["RebalanceListener", "Partitions", "EXIT_PARTITION_FAILURE"]

log = logging.getLogger("streamspec.daemon")

EXIT_PARTITION_FAILURE = 4
"""Exit status of a daemon that left a partition unread (refused, unreadable or out-of-range
checkpoint, a failure while taking it over): the others were consumed normally."""


class RebalanceListener(ConsumerRebalanceListener):
    """Checkpoint partitions before they are revoked; restore and seek on assignment.

    kafka-python runs these callbacks on its IO thread while ``poll`` waits, so
    they never call blocking consumer APIs (``commit``): the new owner commits
    after its first checkpoint.
    """

    def __init__(self, acquire: Callable[[Iterable[TopicPartition]], None],
                 release: Callable[[Iterable[TopicPartition], bool], None]):
        self.acquire, self.release = acquire, release

    def on_partitions_revoked(self, revoked):
        self.release(revoked, False)

    def on_partitions_lost(self, lost):
        self.release(lost, True)

    def on_partitions_assigned(self, assigned):
        self.acquire(assigned)


class Partitions:
    """Assignment, revocation and offset checks of the daemon's partitions (a base class).

    The daemon provides the attributes below and :meth:`_new_accumulator`,
    :meth:`_save_released` (make one revoked state durable).
    """

    config: DaemonConfig
    metrics: DaemonMetrics
    backend: StateBackend
    refits: RefitPolicy
    outputs: Outputs
    states: dict[TopicPartition, PartitionState]
    failed: dict[TopicPartition, str]
    _consumer: KafkaConsumer | None
    _lock: threading.RLock
    _stop: threading.Event
    _ever_failed: dict[TopicPartition, str]
    _to_verify: set[TopicPartition]
    _dirty: set[TopicPartition]
    _uncommitted: dict[TopicPartition, int]

    def _new_accumulator(self) -> MomentAccumulator:
        raise NotImplementedError

    def _save_released(self, tp: TopicPartition, state: PartitionState) -> None:
        raise NotImplementedError

    def _acquire(self, partitions: Iterable[TopicPartition]) -> None:
        """Take over newly assigned partitions (in the rebalance callback).

        kafka-python swallows what a rebalance callback raises, so nothing escapes:
        a partition whose take-over fails is paused and listed as failed (status
        line, metrics, exit status) instead of being silently left unread.
        """
        with self._lock:
            for tp in partitions:
                if tp in self.states:
                    continue
                try:
                    self._acquire_one(tp)
                except Exception as exc:  # noqa: BLE001 - see the docstring
                    self._fail_partition(tp, "assign-failed", f"{type(exc).__name__}: {exc}")

    def _acquire_one(self, tp: TopicPartition) -> None:
        self.failed.pop(tp, None)
        try:
            outcome: Outcome | None = self.backend.request(tp)
        except CheckpointError as exc:
            outcome = exc
        if outcome is None:
            # paused until the backend has its state (read in the poll loop: no blocking
            # reads in this callback); a position, so that no reset is needed
            self._consumer.seek(tp, 0)
            self._consumer.pause(tp)
            return
        self._install(tp, outcome)

    def _install(self, tp: TopicPartition, outcome: Outcome) -> bool:
        """Start reading ``tp`` from its restored state; False if it failed (paused)."""
        if isinstance(outcome, ForeignCheckpoint):
            self.metrics.unreadable_checkpoints += 1
            self._fail_partition(tp, "foreign-checkpoint", str(outcome))
            return False
        if isinstance(outcome, CheckpointError):
            # never start such a partition afresh (that would count it twice):
            # leave it paused, unread, until the state is repaired or removed
            self.metrics.unreadable_checkpoints += 1
            self._fail_partition(tp, "unreadable-checkpoint", str(outcome))
            return False
        restored: Restored = outcome
        state = restored.state
        if state is None:
            state = PartitionState(tp.topic, tp.partition, self._new_accumulator())
            self._consumer.seek_to_beginning(tp)
        else:
            if restored.newest_error is not None:
                self.metrics.unreadable_checkpoints += 1
                log.warning(
                    "event=checkpoint-fallback partition=%s-%d newest_error=%r "
                    "action=use-previous from=%s offset=%d records=%d (the records from this "
                    "offset on are read again from the log: nothing is lost or counted twice)",
                    tp.topic, tp.partition, restored.newest_error, restored.source,
                    state.offset, state.records)
            self._consumer.seek(tp, state.offset)
            self._to_verify.add(tp)  # checked against the log once its high-water mark is known
        self.states[tp] = state
        log.info(
            "event=assigned partition=%s-%d offset=%d from=%s records=%d",
            tp.topic, tp.partition, state.offset, restored.source, state.records,
        )
        return True

    def _restore_pending(self) -> None:
        """Restore the partitions the backend could not restore at once; seek and resume them."""
        with self._lock:
            pending = sorted(self.backend.pending)
        ready = self.backend.read_pending(pending)  # blocking reads: outside the lock
        with self._lock:
            for tp, outcome in ready:
                if tp not in self.backend.pending:
                    continue  # revoked while reading
                self.backend.pending.discard(tp)
                if self._install(tp, outcome):
                    self._consumer.resume(tp)
                    self.refits.on_assigned(tp)

    def _fail_partition(self, tp: TopicPartition, reason: str, error: str) -> None:
        """Leave ``tp`` unread, visibly: paused, listed as failed, exit status not 0."""
        self.failed[tp] = reason
        self._ever_failed[tp] = reason
        self.states.pop(tp, None)
        self._to_verify.discard(tp)
        self.backend.pending.discard(tp)
        self._dirty.discard(tp)
        self._uncommitted.pop(tp, None)
        try:
            self._consumer.seek(tp, 0)  # a position (never fetched: paused), so no reset is asked
            self._consumer.pause(tp)
        except Exception as exc:  # noqa: BLE001 - already failing; say so, keep going
            log.error("event=pause-failed partition=%s-%d error=%r", tp.topic, tp.partition,
                      str(exc))
        log.error("event=partition-failed partition=%s-%d reason=%s action=paused "
                  "(not read until fixed; exit status %d) error=%r", tp.topic, tp.partition,
                  reason, EXIT_PARTITION_FAILURE, error[:2 * DETAIL_MAX])

    def _release(self, partitions: Iterable[TopicPartition], lost: bool) -> None:
        with self._lock:
            for tp in partitions:
                self.backend.pending.discard(tp)
                self._to_verify.discard(tp)
                self.failed.pop(tp, None)  # another member takes it (and reports it if it fails)
                self.refits.on_revoked(tp)
                state = self.states.pop(tp, None)
                if state is None:
                    continue
                if tp in self._dirty:
                    self._save_released(tp, state)
                    self._dirty.discard(tp)
                self._uncommitted.pop(tp, None)
                log.info(
                    "event=%s partition=%s-%d offset=%d records=%d",
                    "lost" if lost else "revoked", tp.topic, tp.partition, state.offset,
                    state.records,
                )

    def _verify_offsets(self) -> None:
        """Check restored offsets against the log; apply ``on_offset_out_of_range``.

        A checkpoint offset beyond the high-water mark (the topic was re-created, the
        log truncated) or before the log-start offset (records removed unread) would
        otherwise skip records silently. The high-water mark is the one of the first
        fetch response (some brokers answer offset look-ups inexactly); a partition
        whose fetch at its offset returns records needs no check.
        """
        with self._lock:
            ready = []
            for tp in sorted(self._to_verify):
                if tp not in self.states:
                    self._to_verify.discard(tp)
                    continue
                hw = self._consumer.highwater(tp)
                if hw is not None:
                    ready.append((tp, hw))
        if not ready:
            return
        try:
            starts = self._consumer.beginning_offsets([tp for tp, _ in ready],
                                                      timeout_ms=OFFSETS_TIMEOUT_MS)
        except KafkaError as exc:
            log.warning("event=offsets-unavailable partitions=%s error=%r retry=next-poll",
                        ",".join(str(tp.partition) for tp, _ in ready), str(exc))
            return
        with self._lock:
            for tp, hw in ready:
                if tp not in self._to_verify or tp not in self.states:
                    continue  # revoked, or records arrived meanwhile
                self._to_verify.discard(tp)
                state, start = self.states[tp], starts.get(tp) or 0
                if not start <= state.offset <= hw:
                    self._offset_out_of_range(tp, state, start, hw)

    def _offset_out_of_range(self, tp: TopicPartition, state: PartitionState, start: int,
                             end: int | None) -> bool:
        """Apply the policy to a partition whose offset is outside the log; True: read on."""
        where = "beyond the high-water mark" if end is not None and state.offset > end else \
            "before the log-start offset"
        if self.config.on_offset_out_of_range == "reset":
            skipped = max(0, start - state.offset) if state.offset < start else 0
            log.warning(
                "event=offset-reset partition=%s-%d checkpoint_offset=%d log_start=%d "
                "high_water=%s (%s) action=read-from-log-start records_kept=%d "
                "records_never_read=%d", tp.topic, tp.partition, state.offset, start,
                end, where, state.records, skipped)
            state.offset = start
            self._consumer.seek(tp, start)
            self._dirty.add(tp)
            return True
        self._fail_partition(
            tp, "offset-out-of-range",
            f"checkpoint offset {state.offset} of {tp.topic}-{tp.partition} is {where} "
            f"(log start {start}, high-water mark {end}): the topic was re-created or "
            "records were removed before they were read; restart with "
            "--on-offset-out-of-range reset to keep the counts and read from the log start")
        return False

    def _out_of_range_while_reading(self, exc: OffsetOutOfRangeError) -> None:
        """The fetch position left the log while reading: the same policy as on restore."""
        positions = exc.args[0] if exc.args and isinstance(exc.args[0], dict) else {}
        tps = [tp for tp in positions if tp in self.states]
        try:
            starts = self._consumer.beginning_offsets(tps, timeout_ms=OFFSETS_TIMEOUT_MS)
            ends = self._consumer.end_offsets(tps, timeout_ms=OFFSETS_TIMEOUT_MS)
        except KafkaError as err:
            log.warning("event=offsets-unavailable error=%r retry=next-poll", str(err))
            self._stop.wait(0.5)
            return
        with self._lock:
            for tp in tps:
                state = self.states.get(tp)
                if state is not None:
                    self._offset_out_of_range(tp, state, starts.get(tp, 0), ends.get(tp))
