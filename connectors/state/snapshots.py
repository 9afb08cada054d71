"""Per-partition state in a Kafka topic: cumulative snapshots, the changelog pattern of Kafka Streams.

With ``--state-backend kafka`` every daemon publishes, after each checkpoint,
the whole state of each partition it changed (counts, stream tails, next offset,
dead-letter counts) as one message of the *state topic*. Snapshots are
cumulative, so a reader needs only the latest one of each source partition; the
broker may compact the topic or not (Tansu never does): readers skip the older
ones.

Message layout
--------------
* key: the source partition number, in decimal ASCII (``b"3"``);
* value: the bytes of :func:`streamspec.core.checkpoint.dump_checkpoint` with the
  format ``streamspec.PartitionState`` (the same header and arrays as the
  checkpoint files of :mod:`connectors.state.files`: npz + JSON header, versioned,
  SHA-256 checksummed, never a pickle); version 2 holds the partition's learned
  mixing weights (:mod:`connectors.state.weights`), version 1 (before them) is read
  too. A daemon older than version 2 refuses the new snapshots as unreadable (the
  partition stays paused, never recounted): upgrade the daemons of a group together;
* headers: ``format`` (``streamspec.PartitionState/1``), ``source-topic``,
  ``source-partition``, ``source-offset`` (the next offset to read), ``records``,
  ``owner`` and ``group`` (the consumer group, when known), so that a reader picks
  the latest snapshot without decoding the older ones;
* partition: source partition ``p`` goes to state partition ``p % S`` (``S``
  partitions in the state topic, created equal to the source's): each daemon
  restoring a partition reads only its state partition, and all the snapshots
  of one source partition are in one log, in the order they were written.

Which snapshot is the latest
----------------------------
The one with the largest ``source-offset`` (ties: the later in the log). Every
snapshot is self-consistent (its counts are exactly those of the messages before
its offset) and processing is deterministic, so two snapshots of one partition
at one offset are equal, and a late write by an evicted member (a zombie) can
never replace a newer state by an older one.

When the latest cannot be read
------------------------------
Unless the topic is compacted, the older snapshots of a partition stay in its
log: :func:`read_snapshot_history` keeps the newest few of each partition, so
that a restore can fall back to the previous one when the newest is corrupt
(its records are then read again from the source: exact, as with the ``.prev``
files of the local backend).

Cost of reading
---------------
Without compaction a state partition grows by one snapshot per checkpoint of
each of its source partitions; restoring reads it all (but decodes only the
winner). With Kafka's ``cleanup.policy=compact`` (set when the topic is
created) it holds about one snapshot per key.

Examples
--------
>>> from connectors.state.files import PartitionState
>>> st = PartitionState("clicks", 2)
>>> st.acc.learn_many("abcab", key="u1")
>>> st.acc.end("u1")  # window "auto": the grams around the last symbols count at the end
>>> st.offset, st.records = 5, 5
>>> key, value, headers = encode_snapshot(st, owner="d1")
>>> key, dict(headers)["source-offset"]
(b'2', b'5')
>>> snap = Snapshot.from_message(key, value, headers)
>>> snap.partition, snap.offset, snap.state().acc.n_triples
(2, 5, 3.0)
>>> latest = LatestSnapshots()
>>> latest.offer(snap), latest.offer(Snapshot(2, 4, 4, b"older"))
(True, False)
>>> latest.offsets()
{2: 5}
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from connectors.state.files import PartitionState, dump_verified, merge_accumulators
from connectors.state.topic_io import partition_count, read_topic
from streamspec.core.checkpoint import CheckpointError, load_checkpoint_bytes
from streamspec.streaming.accumulator import MomentAccumulator

__all__ = [
    "STATE_FORMAT",
    "Snapshot",
    "LatestSnapshots",
    "encode_snapshot",
    "state_partition",
    "read_snapshots",
    "read_snapshot_history",
    "SnapshotHistory",
]

log = logging.getLogger("streamspec.daemon")

STATE_FORMAT = "streamspec.PartitionState"
_STATE_VERSION = 2  # of the value's checkpoint: 2 holds the learned weights (1 is read too)
_FORMAT_HEADER = f"{STATE_FORMAT}/1".encode()  # the message's layout, unchanged


def state_partition(source_partition: int, n_state_partitions: int) -> int:
    """The state-topic partition holding the snapshots of ``source_partition``.

    >>> state_partition(7, 6), state_partition(7, 1)
    (1, 0)
    """
    return int(source_partition) % max(1, int(n_state_partitions))


def encode_snapshot(state: PartitionState, owner: str = "") -> tuple[bytes, bytes, list]:
    """``(key, value, headers)`` of the snapshot message of ``state``.

    Parameters
    ----------
    state
        The partition's state (its accumulator is flushed, not changed).
    owner
        Client id of the writing daemon (informational).

    Raises ``CheckpointError`` if the encoded snapshot would not decode (it is read
    back once before being returned). O(distinct triples + streams).
    """
    state.owner = owner or state.owner
    header, arrays = state.checkpoint_parts()
    state.written_at = header["written_at"]
    # decoded once before it is sent: a snapshot that would not read back is never published
    value = dump_verified(STATE_FORMAT, header, arrays, PartitionState.from_parts,
                          version=_STATE_VERSION)
    headers = [
        ("format", _FORMAT_HEADER),
        ("source-topic", state.topic.encode()),
        ("source-partition", str(int(state.partition)).encode()),
        ("source-offset", str(int(state.offset)).encode()),
        ("records", str(int(state.records)).encode()),
        ("owner", state.owner.encode()),
    ]
    if state.group is not None:
        headers.append(("group", state.group.encode()))
    return str(int(state.partition)).encode(), value, headers


def decode_snapshot(value: bytes, source: str = "state snapshot") -> PartitionState:
    """The :class:`PartitionState` of a snapshot's value; ``CheckpointError`` if bad."""
    header, arrays = load_checkpoint_bytes(value, STATE_FORMAT, _STATE_VERSION, source)
    return PartitionState.from_parts(header, arrays, source)


@dataclass(frozen=True)
class Snapshot:
    """One snapshot message, not yet decoded.

    Attributes
    ----------
    partition
        The source partition.
    offset
        Its next offset to read.
    records
        Symbols learned from it so far.
    value
        The encoded state (see :func:`decode_snapshot`).
    owner
        Client id of the daemon that wrote it.
    group
        The consumer group it was written for (``None``: not recorded).
    """

    partition: int
    offset: int
    records: int
    value: bytes = field(repr=False)
    owner: str = ""
    group: str | None = None

    @classmethod
    def from_message(cls, key: bytes | None, value: bytes | None, headers) -> Snapshot:
        """Read the headers of a state-topic message; ``ValueError`` if it is not a snapshot."""
        h = {k: v for k, v in (headers or [])}
        if h.get("format") != _FORMAT_HEADER or value is None:
            raise ValueError(f"not a {STATE_FORMAT} snapshot (format {h.get('format')!r})")
        try:
            return cls(
                partition=int(h["source-partition"]),
                offset=int(h["source-offset"]),
                records=int(h.get("records", b"0")),
                value=value,
                owner=h.get("owner", b"").decode("utf-8", "replace"),
                group=None if h.get("group") is None else h["group"].decode("utf-8", "replace"),
            )
        except (KeyError, ValueError) as exc:
            raise ValueError(f"malformed snapshot headers ({exc})") from None

    def state(self) -> PartitionState:
        """Decode the snapshot (``CheckpointError`` if it is corrupt)."""
        return decode_snapshot(self.value, f"snapshot of partition {self.partition} "
                                           f"at offset {self.offset}")


class LatestSnapshots:
    """The latest snapshot of every source partition (largest offset; ties: the later).

    Thread-safe: a :class:`TopicFollower` offers snapshots from its thread while
    the daemon reads. :attr:`generation` grows whenever a snapshot wins, so a
    reader can tell whether anything changed since it last looked.
    """

    def __init__(self) -> None:
        self._latest: dict[int, Snapshot] = {}
        self._lock = threading.Lock()
        self._decoded: dict[int, tuple[int, PartitionState]] = {}
        self.generation = 0

    def offer(self, snap: Snapshot) -> bool:
        """Keep ``snap`` if it is at least as new as the partition's current one."""
        with self._lock:
            old = self._latest.get(snap.partition)
            if old is not None and snap.offset < old.offset:
                return False
            self._latest[snap.partition] = snap
            self.generation += 1
            return True

    def get(self, partition: int) -> Snapshot | None:
        with self._lock:
            return self._latest.get(partition)

    def snapshots(self) -> dict[int, Snapshot]:
        """A copy of the latest snapshot per source partition."""
        with self._lock:
            return dict(self._latest)

    def offsets(self) -> dict[int, int]:
        """Next offset per source partition, as the latest snapshots say."""
        with self._lock:
            return {p: s.offset for p, s in sorted(self._latest.items())}

    def records(self) -> int:
        """Symbols learned from all partitions, as the latest snapshots say."""
        with self._lock:
            return sum(s.records for s in self._latest.values())

    def states(self) -> list[PartitionState]:
        """The decoded latest states (each decoded once; corrupt ones are skipped, logged)."""
        out = []
        for p, snap in sorted(self.snapshots().items()):
            cached = self._decoded.get(p)
            if cached is not None and cached[0] == snap.offset:
                out.append(cached[1])
                continue
            try:
                state = snap.state()
            except CheckpointError as exc:
                log.error("event=snapshot-unreadable partition=%d offset=%d error=%r",
                          p, snap.offset, str(exc))
                continue
            self._decoded[p] = (snap.offset, state)
            out.append(state)
        return out

    def merged(self, order: Iterable | None = None) -> MomentAccumulator:
        """The global counts: the latest state of every partition merged by label."""
        return merge_accumulators((s.acc for s in self.states()), order)


class SnapshotHistory:
    """The newest ``keep`` snapshots of every source partition, newest first.

    Ordered as :class:`LatestSnapshots` chooses (largest offset; ties: the later in
    the log). Memory: at most ``keep`` snapshot values per partition.
    """

    def __init__(self, keep: int = 4) -> None:
        self.keep = max(1, int(keep))
        self._seen = 0
        self._by_partition: dict[int, list[tuple[int, int, Snapshot]]] = {}

    def offer(self, snap: Snapshot) -> None:
        self._seen += 1
        kept = self._by_partition.setdefault(snap.partition, [])
        kept.append((snap.offset, self._seen, snap))
        kept.sort(key=lambda item: (item[0], item[1]), reverse=True)
        del kept[self.keep:]

    def newest_first(self, partition: int) -> list[Snapshot]:
        """The kept snapshots of ``partition``, the one to use first at the front."""
        return [snap for _, _, snap in self._by_partition.get(partition, [])]


def _snapshot_taker(wanted: set[int] | None, offer) -> Callable:
    """A message callback that decodes a snapshot and offers it when its partition is wanted.

    Messages that are not snapshots are logged and skipped (a state topic shared by mistake).
    """
    def take(m) -> None:
        try:
            snap = Snapshot.from_message(m.key, m.value, m.headers)
        except ValueError as exc:
            log.warning("event=foreign-state-message topic=%s partition=%d offset=%d error=%r",
                        m.topic, m.partition, m.offset, str(exc))
            return
        if wanted is None or snap.partition in wanted:
            offer(snap)

    return take


def read_snapshots(
    bootstrap: str,
    state_topic: str,
    source_partitions: Iterable[int] | None = None,
    timeout: float = 30.0,
    client_id: str = "streamspec-state-reader",
) -> LatestSnapshots:
    """The latest snapshot of the given source partitions (all: ``None``), read to the end.

    Only the state partitions holding those source partitions are read.
    """
    latest = LatestSnapshots()
    wanted = None if source_partitions is None else set(source_partitions)
    take = _snapshot_taker(wanted, latest.offer)

    partitions = None
    if wanted is not None:
        n_state = partition_count(bootstrap, state_topic)
        if n_state == 0:
            return latest
        partitions = {state_partition(p, n_state) for p in wanted}
    read_topic(bootstrap, state_topic, take, partitions, timeout, client_id)
    return latest


def read_snapshot_history(
    bootstrap: str,
    state_topic: str,
    source_partitions: Iterable[int],
    keep: int = 4,
    timeout: float = 30.0,
    client_id: str = "streamspec-state-reader",
) -> SnapshotHistory:
    """The newest ``keep`` snapshots of each of ``source_partitions``, read to the end.

    Only the state partitions holding those source partitions are read; messages
    that are not snapshots are logged and skipped.
    """
    history = SnapshotHistory(keep)
    wanted = set(source_partitions)
    take = _snapshot_taker(wanted, history.offer)

    n_state = partition_count(bootstrap, state_topic)
    if n_state and wanted:
        read_topic(bootstrap, state_topic, take, {state_partition(p, n_state) for p in wanted},
                   timeout, client_id)
    return history
