"""The partitions a daemon holds and what each one waits for: one table, one lock.

The poll loop (:mod:`connectors.kafka.daemon`), the rebalance callbacks
(:mod:`connectors.kafka.rebalance`), the learning of batches
(:mod:`connectors.kafka.learning`) and the checkpoints
(:mod:`connectors.kafka.checkpoints`) all read and change this table, from two
threads (kafka-python runs the rebalance callbacks while ``poll`` waits), so every
change is made under :attr:`Assignment.lock`.
"""

from __future__ import annotations

import threading

from kafka import KafkaConsumer, TopicPartition

from connectors.kafka.clients import high_water
from connectors.kafka.expectation import Expectation
from connectors.state.files import PartitionState

__all__ = ["Assignment"]


class Assignment:
    """The state of every held partition, and the sets that say what each one needs.

    Attributes
    ----------
    lock
        Held for every change (poll loop vs rebalance callbacks); re-entrant.
    states
        The :class:`~connectors.state.files.PartitionState` of every partition read.
    failed
        Partitions left unread, and why (status line, metrics).
    ever_failed
        Every partition failed since start, and why (the exit status).
    to_verify
        Partitions held back until their log is verified, each with its
        :class:`~connectors.kafka.expectation.Expectation`.
    dirty
        Partitions changed since their last checkpoint.
    uncommitted
        The checkpointed offset of every partition whose commit has not succeeded yet.
    """

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.states: dict[TopicPartition, PartitionState] = {}
        self.failed: dict[TopicPartition, str] = {}
        self.ever_failed: dict[TopicPartition, str] = {}
        self.to_verify: dict[TopicPartition, Expectation] = {}
        self.dirty: set[TopicPartition] = set()
        self.uncommitted: dict[TopicPartition, int] = {}

    def forget(self, tp: TopicPartition) -> PartitionState | None:
        """Drop ``tp`` from every table but the failed ones; its state, if it had one."""
        self.to_verify.pop(tp, None)
        self.dirty.discard(tp)
        self.uncommitted.pop(tp, None)
        return self.states.pop(tp, None)

    def offsets(self) -> dict[int, int]:
        """The next offset to read of every partition held."""
        with self.lock:
            return {tp.partition: s.offset for tp, s in self.states.items()}

    def counts_bytes(self) -> int:
        """Memory taken by the counts of the partitions held (``acc.memory_bytes()`` summed).

        O(symbols + streams) per partition: called for status lines and metrics only.
        """
        with self.lock:
            accs = [s.acc for s in self.states.values()]
        return int(sum(a.memory_bytes() for a in accs))

    def n_symbols(self) -> int:
        """Distinct symbols over the partitions held: the alphabet their merged counts have.

        The refits fit the partitions merged by label, so this is the ``symbols=`` of
        their log lines. O(symbols of every partition).
        """
        with self.lock:
            accs = [s.acc for s in self.states.values()]
        if len(accs) == 1:
            return accs[0].n
        return len(set().union(*(a.symbols for a in accs))) if accs else 0

    def lag(self, consumer: KafkaConsumer | None) -> int | None:
        """Messages behind the high-water marks of the partitions held.

        ``None`` (``lag=?``) when unknown, whenever a partition failed (it is not
        read, so how far behind it is cannot be known from the fetches), and while a
        partition's log ends before its position (another log: it is being verified).
        """
        if consumer is None:
            return None
        total, known = 0, False
        with self.lock:
            items = list(self.states.items())
        for tp, state in items:
            hw = high_water(consumer, tp)
            if hw is not None:
                if hw < state.offset:
                    return None  # never "lag=0" on a log shorter than what was read
                total += hw - state.offset
                known = True
        if self.failed:
            return None  # an unread partition's lag is unknown: never report it as caught up
        return total if known else None
