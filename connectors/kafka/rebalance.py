"""Partition ownership: take over assigned partitions, hand back revoked ones, check offsets.

:class:`Ownership` takes over and hands back the partitions of a
:class:`~connectors.kafka.daemon.ConsumerDaemon` (its
:class:`~connectors.kafka.assignment.Assignment`); :class:`RebalanceListener`
calls it from kafka-python's rebalance callbacks. A partition is restored from the daemon's state backend
(at once, or paused until :meth:`Ownership.restore_pending` reads it in the
poll loop), sought to its checkpoint's last record, and verified against the log
before it is read on (:mod:`connectors.kafka.verification`). A partition that
cannot be taken over is paused and listed as failed (status line, metrics, exit
status): never silently left unread, never started afresh (that would count it
twice).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from kafka import KafkaConsumer, TopicPartition
from kafka.consumer.subscription_state import ConsumerRebalanceListener

from connectors.config import DaemonConfig
from connectors.kafka.assignment import Assignment
from connectors.kafka.outputs import DETAIL_MAX
from connectors.kafka.refit_policy import RefitPolicy
from connectors.metrics import DaemonMetrics
from connectors.state.backend import Outcome, StateBackend
from connectors.state.files import BlockedCheckpoint, ForeignCheckpoint, PartitionState, Restored
from streamspec.core.checkpoint import CheckpointError
from streamspec.streaming.accumulator import MomentAccumulator

__all__ = ["RebalanceListener", "Ownership", "EXIT_PARTITION_FAILURE"]

log = logging.getLogger("streamspec.daemon")

EXIT_PARTITION_FAILURE = 4
"""Exit status of a daemon that left a partition unread (refused, unreadable or blocked
checkpoint, a log that is not the one read, records deleted unread with policy ``fail``, a
failure while taking it over): the others were consumed normally."""


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


class Ownership:
    """Assignment, revocation and offset checks of a daemon's partitions.

    Parameters
    ----------
    config, metrics, backend, refits
        The daemon's settings, counters, state backend and refit policy.
    assignment
        The table of the partitions held (changed under its lock).
    new_accumulator
        The empty counts of a partition without a state.
    save_released
        Makes one revoked partition's state durable.
    expect
        ``expect(tp, state, reason)``: hold a restored partition back until its log is
        verified (:meth:`connectors.kafka.verification.LogVerifier.expect`).

    Attributes
    ----------
    consumer
        The group consumer (set once connected).
    """

    def __init__(self, config: DaemonConfig, metrics: DaemonMetrics, backend: StateBackend,
                 refits: RefitPolicy, assignment: Assignment,
                 new_accumulator: Callable[[], MomentAccumulator],
                 save_released: Callable[[TopicPartition, PartitionState], None],
                 expect: Callable[[TopicPartition, PartitionState, str], bool]):
        self.config, self.metrics, self.backend, self.refits = config, metrics, backend, refits
        self.assignment = assignment
        self.new_accumulator, self.save_released = new_accumulator, save_released
        self.expect = expect
        self.consumer: KafkaConsumer | None = None

    def acquire(self, partitions: Iterable[TopicPartition]) -> None:
        """Take over newly assigned partitions (in the rebalance callback).

        kafka-python swallows what a rebalance callback raises, so nothing escapes:
        a partition whose take-over fails is paused and listed as failed (status
        line, metrics, exit status) instead of being silently left unread.
        """
        with self.assignment.lock:
            for tp in partitions:
                if tp in self.assignment.states:
                    continue
                try:
                    self._acquire_one(tp)
                except Exception as exc:  # noqa: BLE001 - see the docstring
                    self.fail_partition(tp, "assign-failed", f"{type(exc).__name__}: {exc}")

    def _acquire_one(self, tp: TopicPartition) -> None:
        self.assignment.failed.pop(tp, None)
        try:
            outcome: Outcome | None = self.backend.request(tp)
        except CheckpointError as exc:
            outcome = exc
        if outcome is None:
            # paused until the backend has its state (read in the poll loop: no blocking
            # reads in this callback); a position, so that no reset is needed
            self.consumer.seek(tp, 0)
            self.consumer.pause(tp)
            return
        self._install(tp, outcome)

    def _install(self, tp: TopicPartition, outcome: Outcome) -> bool:
        """Start reading ``tp`` from its restored state; False if it failed (paused)."""
        if isinstance(outcome, ForeignCheckpoint):
            self.metrics.unreadable_checkpoints += 1
            self.fail_partition(tp, "foreign-checkpoint", str(outcome))
            return False
        if isinstance(outcome, BlockedCheckpoint):  # once per assignment: says what to do
            self.fail_partition(tp, "checkpoint-path-blocked", str(outcome))
            return False
        if isinstance(outcome, CheckpointError):
            # never start such a partition afresh (that would count it twice):
            # leave it paused, unread, until the state is repaired or removed
            self.metrics.unreadable_checkpoints += 1
            self.fail_partition(tp, "unreadable-checkpoint", str(outcome))
            return False
        restored: Restored = outcome
        state = restored.state
        if state is None:
            state = PartitionState(tp.topic, tp.partition, self.new_accumulator())
            self.consumer.seek_to_beginning(tp)
        else:
            if restored.newest_error is not None:
                self.metrics.unreadable_checkpoints += 1
                log.warning(
                    "event=checkpoint-fallback partition=%s-%d newest_error=%r "
                    "action=use-previous from=%s offset=%d records=%d (the records from this "
                    "offset on are read again from the log: nothing is lost or counted twice)",
                    tp.topic, tp.partition, restored.newest_error, restored.source,
                    state.offset, state.records)
            self.consumer.seek(tp, state.offset)
        self.assignment.states[tp] = state
        log.info(
            "event=assigned partition=%s-%d offset=%d from=%s records=%d",
            tp.topic, tp.partition, state.offset, restored.source, state.records,
        )
        self.expect(tp, state, "assigned")  # re-read its last record before reading on
        return True

    def restore_pending(self) -> None:
        """Restore the partitions the backend could not restore at once; seek and resume them."""
        with self.assignment.lock:
            pending = sorted(self.backend.pending)
        ready = self.backend.read_pending(pending)  # blocking reads: outside the lock
        with self.assignment.lock:
            for tp, outcome in ready:
                if tp not in self.backend.pending:
                    continue  # revoked while reading
                self.backend.pending.discard(tp)
                if self._install(tp, outcome):
                    self.consumer.resume(tp)
                    self.refits.on_assigned(tp)

    def fail_partition(self, tp: TopicPartition, reason: str, error: str) -> None:
        """Leave ``tp`` unread, visibly: paused, listed as failed, exit status not 0."""
        self.assignment.failed[tp] = reason
        self.assignment.ever_failed[tp] = reason
        self.assignment.forget(tp)
        self.backend.pending.discard(tp)
        try:
            self.consumer.seek(tp, 0)  # a position (never fetched: paused), so no reset is asked
            self.consumer.pause(tp)
        except Exception as exc:  # noqa: BLE001 - already failing; say so, keep going
            log.error("event=pause-failed partition=%s-%d error=%r", tp.topic, tp.partition,
                      str(exc))
        log.error("event=partition-failed partition=%s-%d reason=%s action=paused "
                  "(not read until fixed; exit status %d) error=%r", tp.topic, tp.partition,
                  reason, EXIT_PARTITION_FAILURE, error[:2 * DETAIL_MAX])

    def release(self, partitions: Iterable[TopicPartition], lost: bool) -> None:
        """Hand back revoked (or lost) partitions, their changed states made durable first."""
        a = self.assignment
        with a.lock:
            for tp in partitions:
                self.backend.pending.discard(tp)
                a.failed.pop(tp, None)  # another member takes it (and reports it if it fails)
                self.refits.on_revoked(tp)
                changed = tp in a.dirty
                state = a.forget(tp)
                if state is None:
                    continue
                if changed:
                    self.save_released(tp, state)
                log.info(
                    "event=%s partition=%s-%d offset=%d records=%d",
                    "lost" if lost else "revoked", tp.topic, tp.partition, state.offset,
                    state.records,
                )
