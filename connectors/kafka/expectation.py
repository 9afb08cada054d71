"""What a partition held back until its log is verified waits for, and what its log turned out to be.

See :mod:`connectors.kafka.verification`, which creates and decides them; the table
of the partitions held (:attr:`connectors.kafka.assignment.Assignment.to_verify`)
keeps one :class:`Expectation` per partition held back.
"""

from __future__ import annotations

from dataclasses import dataclass

from connectors.state.identity import RecordMark

__all__ = ["Expectation", "Verdict"]


@dataclass(frozen=True)
class Verdict:
    """What a partition's log turned out to be (see :mod:`connectors.kafka.verification`).

    ``kind``: ``"replaced"``, ``"truncated"`` or ``"deleted"``; ``detail`` says why,
    ``log_now`` what the log holds now; ``first_available`` (``"deleted"``): the first
    offset still in the log.
    """

    kind: str
    detail: str
    log_now: str
    first_available: int | None = None


@dataclass
class Expectation:
    """A partition held back until its log is verified.

    Attributes
    ----------
    offset
        The partition's next offset to read (its counts end before it).
    mark
        The record expected at ``mark.offset`` (``None``: only the offset is checked).
    reason
        Why it is verified: ``assigned``, ``reconnected``, ``topic-id-changed``,
        ``behind-high-water``, ``out-of-range``.
    high_water
        The high-water mark known when the check began (a stale one proves nothing).
    verdict
        Set when the log is known not to be the one read (applied by the poll loop).
    short_since
        When the log was first seen ending before the mark.
    gap
        The first offset fetched, when it was past the one expected (decided with the
        log's start offset by the poll loop).
    """

    offset: int
    mark: RecordMark | None
    reason: str
    high_water: int | None = None
    verdict: Verdict | None = None
    short_since: float | None = None
    gap: int | None = None

    @property
    def fetch_offset(self) -> int:
        return self.mark.offset if self.mark is not None else self.offset
