"""The Kafka state backend: partition states as snapshots in a state topic.

Each checkpoint publishes one cumulative snapshot per changed partition
(:mod:`connectors.state.snapshots`) and waits for the broker's acknowledgement
(``acks=all``) before the daemon commits offsets. A newly assigned partition is
pending (paused) until its snapshots have been read from the state topic to its
high-water mark; the newest one is used when it decodes and belongs to this
topic, partition and consumer group, else the previous one (the records after
its offset are read again: exact), and a snapshot of another group is refused.
A follower thread keeps :attr:`TopicBackend.snapshots`, the latest snapshot of
every partition of this group: the global view the group's refits merge.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

from kafka import KafkaProducer
from kafka.errors import KafkaError

from connectors.state.backend import Outcome, PartitionId, StateBackend
from connectors.state.files import ForeignCheckpoint, PartitionState, Restored
from connectors.state.snapshots import (
    LatestSnapshots,
    Snapshot,
    encode_snapshot,
    read_snapshot_history,
    state_partition,
)
from connectors.state.topic_io import TopicFollower, ensure_topic, partition_count
from streamspec.core.checkpoint import CheckpointError

__all__ = ["TopicBackend", "SEND_TIMEOUT", "BOOTSTRAP_TIMEOUT_MS"]

log = logging.getLogger("streamspec.daemon")

SEND_TIMEOUT = 30.0  # seconds to wait for the broker to acknowledge a snapshot
BOOTSTRAP_TIMEOUT_MS = 2000  # one connection attempt; then the daemon's own backoff
_HISTORY = 4  # snapshots kept per partition while restoring: the newest and its fallbacks


class TopicBackend(StateBackend):
    """Partition states in the state topic, restored from it on assignment.

    Parameters
    ----------
    bootstrap
        Broker address(es), comma-separated.
    topic
        The source topic (the state topic gets as many partitions).
    state_topic
        The state topic's name.
    group
        The consumer group: written into every snapshot, checked on restore.

    Attributes
    ----------
    snapshots
        The latest snapshot of every source partition of this group (followed in
        a background thread once connected).
    producer
        The ``acks=all`` producer of snapshots (also used for the group's models).
    """

    def __init__(self, bootstrap: str, topic: str, state_topic: str, group: str | None):
        super().__init__()
        self.bootstrap, self.topic, self.state_topic, self.group = (
            bootstrap, topic, state_topic, group)
        self.snapshots = LatestSnapshots()
        self.producer: KafkaProducer | None = None
        self.client_id = ""
        self._n_state_partitions = 0
        self._follower: TopicFollower | None = None
        self._foreign_seen: set[tuple[int, str | None]] = set()

    def connect(self, client_id: str) -> None:
        """Create the state topic (as many partitions as the source), the producer, the follower."""
        self.client_id = client_id
        n_source = partition_count(self.bootstrap, self.topic)
        if n_source == 0:
            raise KafkaError(f"topic {self.topic} does not exist yet")
        ensure_topic(self.bootstrap, self.state_topic, n_source, compact=True)
        self._n_state_partitions = partition_count(self.bootstrap, self.state_topic)
        if self.producer is not None:  # left by an attempt that failed later: a new one
            self.producer.close(timeout=1)
        self.producer = KafkaProducer(
            bootstrap_servers=self.bootstrap.split(","),
            client_id=f"{client_id}-state",
            acks="all",
            linger_ms=0,
            compression_type="gzip",  # counts are sparse: about 10x smaller
            bootstrap_timeout_ms=BOOTSTRAP_TIMEOUT_MS,
            max_request_size=64 << 20,
        )
        if self._follower is None:
            self._follower = TopicFollower(self.bootstrap, self.state_topic, self._on_message,
                                           f"{client_id}-state").start()
        log.info("event=state-topic topic=%s partitions=%d", self.state_topic,
                 self._n_state_partitions)

    def close(self) -> None:
        try:
            if self.producer is not None:
                self.producer.flush(timeout=10)
                self.producer.close(timeout=10)
        finally:
            if self._follower is not None:
                self._follower.close()

    def _on_message(self, m) -> None:
        try:
            snap = Snapshot.from_message(m.key, m.value, m.headers)
        except ValueError as exc:
            log.warning("event=foreign-state-message partition=%d offset=%d error=%r",
                        m.partition, m.offset, str(exc))
            return
        if snap.group is not None and self.group is not None and snap.group != self.group:
            # another group's counts must never enter this group's model
            if (snap.partition, snap.group) not in self._foreign_seen:
                self._foreign_seen.add((snap.partition, snap.group))
                log.warning("event=foreign-snapshot partition=%d group=%s action=ignored",
                            snap.partition, snap.group)
            return
        self.snapshots.offer(snap)

    def request(self, tp: PartitionId) -> None:
        """Pending: restored by :meth:`read_pending` from the poll loop."""
        self.pending.add(tp)
        return None

    def read_pending(self, partitions: Sequence[PartitionId]) -> list[tuple[PartitionId, Outcome]]:
        """Read the snapshots of ``partitions`` to the end; the state of each, or why not."""
        try:
            history = read_snapshot_history(self.bootstrap, self.state_topic,
                                            [tp.partition for tp in partitions], keep=_HISTORY,
                                            client_id=f"{self.client_id}-restore")
        except (KafkaError, OSError, TimeoutError) as exc:
            log.warning("event=restore-failed partitions=%s error=%r retry=next-poll",
                        ",".join(str(tp.partition) for tp in partitions), str(exc))
            return []
        return [(tp, self._choose(tp, history.newest_first(tp.partition))) for tp in partitions]

    def _choose(self, tp: PartitionId, candidates: list[Snapshot]) -> Outcome:
        """The newest snapshot that decodes; a foreign one is refused (no fallback)."""
        if not candidates:
            return Restored(None, "beginning")
        errors = []
        for i, snap in enumerate(candidates):
            source = f"state-topic snapshot of partition {tp.partition} at offset {snap.offset}"
            try:
                state = snap.state()
                state.check_identity(tp.topic, tp.partition, self.group, source)
            except ForeignCheckpoint as exc:
                return exc
            except CheckpointError as exc:
                errors.append(str(exc))
                continue
            self.snapshots.offer(snap)
            if i:
                log.warning("event=snapshot-fallback partition=%s-%d skipped=%d "
                            "skipped_offsets=%s used_offset=%d", tp.topic, tp.partition, i,
                            ",".join(str(c.offset) for c in candidates[:i]), snap.offset)
                return Restored(state, "previous-snapshot", errors[0])
            return Restored(state, "state-topic")
        older = "" if len(candidates) >= _HISTORY else " (no older snapshot in the topic)"
        return CheckpointError("; ".join(errors) + older)

    def save(self, states: Iterable[PartitionState]) -> None:
        """Publish one snapshot per state; return once the broker acknowledged them all."""
        futures, sent = [], []
        for state in states:
            if self.group is not None:
                state.group = self.group
            key, value, headers = encode_snapshot(state, owner=self.client_id)
            part = state_partition(state.partition, self._n_state_partitions)
            futures.append(self.producer.send(self.state_topic, key=key, value=value,
                                              headers=headers, partition=part))
            sent.append(Snapshot(int(state.partition), int(state.offset), int(state.records),
                                 value, self.client_id, state.group))
        for f in futures:
            f.get(timeout=SEND_TIMEOUT)  # acknowledged by the broker (acks=all)
        for snap in sent:  # the global view has this daemon's own latest at once
            self.snapshots.offer(snap)
