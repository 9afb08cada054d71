"""Which log a partition's counts were read from: the last record counted, and the topic.

An offset alone cannot tell one log from another: a topic deleted and re-created,
a broker that lost its log, or an unclean leader election can each leave a new log
that already holds an offset 9,406, and reading on from there would count records
of another log on top of the old counts, and skip the new log's first 9,406 records
without a word. So every checkpoint also records what identifies the log it read:

* :class:`RecordMark`: the last record counted (its offset, timestamp, leader epoch
  and a digest of its key, value and headers), the topic's id when the broker gives
  one, and the log's high-water mark when that record was counted;
* :class:`LogIdentity`: the mark, plus what the daemon could not read (records
  deleted by retention before they were read, how many and which offsets; how often
  reading restarted on a new log).

Before a restored partition is read on (and after every reconnection), the daemon
reads the record at the mark's offset again and compares it
(:meth:`RecordMark.differs_from`), see :mod:`connectors.kafka.verification`.

Checkpoints written before identities were kept have no ``log`` entry:
:meth:`LogIdentity.from_header` reads them with ``recorded=False`` (only the offset
can then be checked).

Examples
--------
>>> from types import SimpleNamespace
>>> m = SimpleNamespace(offset=41, timestamp=1700000000000, key=b"u1", value=b"a",
...                     headers=[], leader_epoch=0)
>>> mark = RecordMark.of(m, topic_id="7c1f", high_water=50)
>>> mark.offset, mark.digest
(41, 'f4ec206cd8f6ae87')
>>> mark.differs_from(m, topic_id="7c1f") is None
True
>>> other = SimpleNamespace(**{**vars(m), "value": b"b"})
>>> mark.differs_from(other, topic_id="7c1f")[:60]
'the record at offset 41 has another key, value or headers (d'
>>> log = LogIdentity(mark)
>>> LogIdentity.from_header(log.to_header()) == log
True
>>> LogIdentity.from_header(None).recorded
False
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from typing import Any

__all__ = ["RecordMark", "LogIdentity", "record_digest", "describe_record"]

_RANGES_KEPT = 32  # deleted ranges remembered per partition (the total is always kept)


def record_digest(key: bytes | None, value: bytes | None, headers=()) -> str:
    """16 hex digits of BLAKE2b over a record's key, value and headers (lengths included).

    O(size of the record). ``None`` (no key, a tombstone) differs from ``b""``.

    >>> record_digest(b"k", b"v") == record_digest(b"k", b"v", [])
    True
    >>> record_digest(None, b"v") == record_digest(b"", b"v")
    False
    """
    h = hashlib.blake2b(digest_size=8)
    for part in (key, value):
        h.update(b"-1;" if part is None else b"%d;" % len(part))
        if part:
            h.update(part)
    for name, data in headers or ():
        name_bytes = name.encode("utf-8", "surrogatepass")
        h.update(b"h%d;%d;" % (len(name_bytes), -1 if data is None else len(data)))
        h.update(name_bytes)
        if data:
            h.update(data)
    return h.hexdigest()


def _when(timestamp_ms: int) -> str:
    if timestamp_ms is None or timestamp_ms < 0:
        return "no timestamp"
    seconds = timestamp_ms / 1000
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{timestamp_ms % 1000:03d}Z"


def describe_record(message: Any) -> str:
    """One line naming a fetched record: offset, timestamp, digest (for logs). O(size)."""
    return (f"offset {message.offset} (timestamp {_when(message.timestamp)}, digest "
            f"{record_digest(message.key, message.value, message.headers)})")


@dataclass(frozen=True)
class RecordMark:
    """The last record counted from a partition: enough to recognise its log again.

    Attributes
    ----------
    offset
        The record's offset (the partition's next offset to read is ``offset + 1``).
    timestamp
        Its timestamp in milliseconds (-1: none).
    digest
        :func:`record_digest` of its key, value and headers.
    leader_epoch
        The leader epoch it was written in (-1: the broker does not say; Tansu says 0).
    topic_id
        The topic's id when it was counted (``None``: the broker gives none).
    high_water
        The log's high-water mark when it was counted: the log held at least this
        many records (``None``: unknown).
    """

    offset: int
    timestamp: int
    digest: str
    leader_epoch: int = -1
    topic_id: str | None = None
    high_water: int | None = None

    @classmethod
    def of(cls, message: Any, topic_id: str | None = None,
           high_water: int | None = None) -> RecordMark:
        """The mark of a fetched record (a ``ConsumerRecord``). O(size of the record)."""
        epoch = getattr(message, "leader_epoch", None)
        return cls(int(message.offset), int(message.timestamp if message.timestamp is not None
                                            else -1),
                   record_digest(message.key, message.value, message.headers),
                   -1 if epoch is None else int(epoch), topic_id,
                   None if high_water is None else int(high_water))

    def differs_from(self, message: Any, topic_id: str | None) -> str | None:
        """How ``message`` (fetched at this mark's offset) is not the record marked; ``None``: it is.

        Compared: the topic id (when both are known), the digest, the timestamp and the
        leader epoch (when both are known). O(size of the record).
        """
        if self.topic_id and topic_id and self.topic_id != topic_id:
            return (f"the topic id changed from {self.topic_id} to {topic_id} (the topic was "
                    "deleted and re-created)")
        digest = record_digest(message.key, message.value, message.headers)
        if digest != self.digest:
            return (f"the record at offset {self.offset} has another key, value or headers "
                    f"(digest {digest}, was {self.digest})")
        stamp = -1 if message.timestamp is None else int(message.timestamp)
        if stamp != self.timestamp:
            return (f"the record at offset {self.offset} has another timestamp "
                    f"({_when(stamp)}, was {_when(self.timestamp)})")
        epoch = getattr(message, "leader_epoch", None)
        if epoch is not None and epoch >= 0 and self.leader_epoch >= 0 and epoch != self.leader_epoch:
            return (f"the record at offset {self.offset} was written in leader epoch {epoch}, "
                    f"not {self.leader_epoch} (the log was truncated and rewritten)")
        return None

    def describe(self) -> str:
        """One line naming the record (for logs)."""
        topic = f", topic id {self.topic_id}" if self.topic_id else ""
        return (f"offset {self.offset} (timestamp {_when(self.timestamp)}, digest "
                f"{self.digest}{topic})")

    def to_header(self) -> dict:
        return {"offset": self.offset, "timestamp": self.timestamp, "digest": self.digest,
                "leader_epoch": self.leader_epoch, "topic_id": self.topic_id,
                "high_water": self.high_water}

    @classmethod
    def from_header(cls, data: dict) -> RecordMark:
        """The mark of :meth:`to_header` (``KeyError``/``TypeError``/``ValueError`` if malformed)."""
        hw = data.get("high_water")
        topic_id = data.get("topic_id")
        return cls(int(data["offset"]), int(data["timestamp"]), str(data["digest"]),
                   int(data.get("leader_epoch", -1)), None if topic_id is None else str(topic_id),
                   None if hw is None else int(hw))


@dataclass
class LogIdentity:
    """What a partition's checkpoint says about the log it read.

    Attributes
    ----------
    mark
        The last record counted (``None``: none yet, e.g. right after a reset).
    recorded
        ``False`` for a checkpoint written before identities were kept (no mark can
        exist then: only the offset can be checked).
    deleted_unread
        Records deleted from the log (retention) before they were read, in total.
    deleted_ranges
        The last few ranges ``(first, last)`` of such records (offsets, inclusive).
    resets
        How many times reading restarted at the start of a new log (policy ``reset``).
    """

    mark: RecordMark | None = None
    recorded: bool = True
    deleted_unread: int = 0
    deleted_ranges: list[tuple[int, int]] = field(default_factory=list)
    resets: int = 0

    def note_deleted(self, first: int, last: int) -> int:
        """Count offsets ``first..last`` as deleted before they were read; how many. O(1)."""
        n = max(0, last - first + 1)
        if n:
            self.deleted_unread += n
            self.deleted_ranges.append((int(first), int(last)))
            del self.deleted_ranges[:-_RANGES_KEPT]
        return n

    def to_header(self) -> dict:
        return {"mark": None if self.mark is None else self.mark.to_header(),
                "deleted_unread": self.deleted_unread,
                "deleted_ranges": [list(r) for r in self.deleted_ranges],
                "resets": self.resets}

    @classmethod
    def from_header(cls, data: dict | None) -> LogIdentity:
        """The identity of :meth:`to_header`; ``None`` (an older checkpoint): ``recorded=False``."""
        if data is None:
            return cls(recorded=False)
        mark = data.get("mark")
        return cls(None if mark is None else RecordMark.from_header(mark), True,
                   int(data.get("deleted_unread", 0)),
                   [(int(a), int(b)) for a, b in data.get("deleted_ranges", [])],
                   int(data.get("resets", 0)))
