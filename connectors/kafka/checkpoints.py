"""Checkpoint, then commit: the order that makes the daemon's counting exactly once.

:class:`Checkpointer` flushes the outputs (dead letters, predictions, models are
delivered at least once, before the checkpoint that moves past their messages),
makes the changed partitions' states durable through the state backend, and only
then commits their offsets. A state that cannot be made durable is never
committed past: a broker error leaves the previous checkpoint the truth (retried
later), and a checkpoint that cannot be written is a state failure (the daemon
stops).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from kafka import KafkaConsumer, TopicPartition
from kafka.errors import KafkaError
from kafka.structs import OffsetAndMetadata

from connectors.config import DaemonConfig
from connectors.kafka.assignment import Assignment
from connectors.kafka.clients import Committer
from connectors.kafka.outputs import Outputs
from connectors.metrics import DaemonMetrics
from connectors.state.backend import StateBackend
from connectors.state.files import PartitionState
from streamspec.core.checkpoint import CheckpointError

__all__ = ["Checkpointer"]

log = logging.getLogger("streamspec.daemon")

# the failures of writing a checkpoint: the daemon stops (the last good one stays)
_WRITE_FAILURES = (MemoryError, OSError, CheckpointError)


class Checkpointer:
    """Makes the changed partitions durable after enough records or time, then commits them.

    Parameters
    ----------
    config
        ``checkpoint_every`` and ``checkpoint_interval`` say when.
    assignment
        The partitions held: :attr:`~connectors.kafka.assignment.Assignment.dirty`
        ones are saved, :attr:`~connectors.kafka.assignment.Assignment.uncommitted`
        ones committed.
    backend, outputs, metrics, committer
        Where states go, what is flushed first, the counters, the commits.
    on_failure
        Called with the error when a checkpoint cannot be written (a state failure).

    Attributes
    ----------
    consumer
        The group consumer that commits (set once connected).
    """

    def __init__(self, config: DaemonConfig, assignment: Assignment, backend: StateBackend,
                 outputs: Outputs, metrics: DaemonMetrics, committer: Committer,
                 on_failure: Callable[[str], None]):
        self.config, self.assignment, self.backend = config, assignment, backend
        self.outputs, self.metrics, self.committer = outputs, metrics, committer
        self.on_failure = on_failure
        self.consumer: KafkaConsumer | None = None
        self.since_checkpoint = 0  # messages read since the last checkpoint
        self.last_checkpoint = time.monotonic()

    def counted(self, tp: TopicPartition, n_messages: int) -> None:
        """``n_messages`` of ``tp`` were read: it changed (called under the lock)."""
        self.since_checkpoint += n_messages
        self.assignment.dirty.add(tp)

    def maybe_checkpoint(self) -> None:
        """Checkpoint and commit if ``checkpoint_every`` messages or ``checkpoint_interval`` passed."""
        cfg, a = self.config, self.assignment
        if (a.dirty or a.uncommitted) and (
            (cfg.checkpoint_every and self.since_checkpoint >= cfg.checkpoint_every)
            or time.monotonic() - self.last_checkpoint >= cfg.checkpoint_interval
        ):
            self.checkpoint_and_commit()

    def checkpoint_and_commit(self, final: bool = False) -> None:
        """Flush outputs, make the changed partitions' states durable, then commit their offsets."""
        if not self.outputs.flush():
            return  # outputs not delivered: keep the old checkpoints, retry later
        offsets = self._checkpoint()
        if offsets is None:
            return
        self.since_checkpoint = 0
        self.last_checkpoint = time.monotonic()
        if offsets and (final or self.committer.due(self.last_checkpoint)):
            self._commit(offsets)
        if final:
            states = sorted(self.assignment.states.items())
            log.info("event=final-checkpoint partitions=%s",
                     ",".join(f"{tp.partition}:{s.offset}" for tp, s in states))

    def save_released(self, tp: TopicPartition, state: PartitionState) -> None:
        """Make a revoked partition's state durable (outputs first); a failure is logged."""
        self.outputs.flush()
        try:
            self.backend.save([state])
            self.metrics.checkpoints += 1
        except (KafkaError, TimeoutError) as exc:  # the last snapshot stays the truth
            log.warning("event=snapshot-failed partition=%s-%d error=%r",
                        tp.topic, tp.partition, str(exc))
        except _WRITE_FAILURES as exc:
            log.error("event=checkpoint-failed partition=%s-%d error=%r "
                      "action=keep-previous", tp.topic, tp.partition,
                      f"{type(exc).__name__}: {exc}")
            self.on_failure(f"checkpoint failed: {type(exc).__name__}: {exc}")

    def _checkpoint(self) -> dict[TopicPartition, OffsetAndMetadata] | None:
        """Save the changed states; the offsets to commit, or ``None`` if nothing was saved."""
        a = self.assignment
        with a.lock:
            dirty = [(tp, a.states[tp]) for tp in sorted(a.dirty) if tp in a.states]
            try:
                self.backend.save([state for _, state in dirty])
            except (KafkaError, TimeoutError) as exc:  # not durable: commit nothing, retry later
                log.warning("event=snapshot-failed error=%r", str(exc))
                return None
            except _WRITE_FAILURES as exc:  # the last good one stays
                log.error("event=checkpoint-failed error=%r action=keep-previous",
                          f"{type(exc).__name__}: {exc}")
                self.on_failure(f"checkpoint failed: {type(exc).__name__}: {exc}")
                return None
            for tp, state in dirty:
                a.uncommitted[tp] = state.offset
                self.metrics.checkpoints += 1
            a.dirty.clear()
            return {tp: OffsetAndMetadata(off, "", -1)
                    for tp, off in a.uncommitted.items() if tp in a.states}

    def _commit(self, offsets: dict[TopicPartition, OffsetAndMetadata]) -> None:
        """Commit (outside the lock: it blocks); forget what was committed and not changed since."""
        if self.committer.commit(self.consumer, offsets):
            with self.assignment.lock:
                for tp, om in offsets.items():
                    if self.assignment.uncommitted.get(tp) == om.offset:
                        del self.assignment.uncommitted[tp]
