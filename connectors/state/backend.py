"""The interface of the daemon's state backends: where partition states are kept.

The daemon holds one :class:`StateBackend`, chosen at construction:
:class:`~connectors.state.local.LocalBackend` (checkpoint files in a state
folder) or :class:`~connectors.state.topic.TopicBackend` (snapshots in a Kafka
state topic). Both restore a partition as a :class:`~connectors.state.files.Restored`
(the newest readable state, else the previous one, else none) and refuse a
state written for another topic, partition or consumer group with
:class:`~connectors.state.files.ForeignCheckpoint`.

A backend that can restore at once (files) answers :meth:`StateBackend.request`
directly; one that must read a log (the state topic) answers ``None``, keeps the
partition in :attr:`StateBackend.pending` and delivers it later through
:meth:`StateBackend.read_pending`, which the daemon calls from its poll loop (never
from a rebalance callback, where blocking reads are not allowed).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from typing import Protocol

from connectors.state.files import PartitionState, Restored
from streamspec.core.checkpoint import CheckpointError

__all__ = ["StateBackend", "PartitionId", "Outcome"]


class PartitionId(Protocol):
    """A source partition (``kafka.TopicPartition`` or anything with these two fields)."""

    topic: str
    partition: int


Outcome = Restored | CheckpointError
"""What restoring a partition gave: its state (or none), or why it cannot be used."""


class StateBackend(ABC):
    """Where the daemon makes partition states durable and restores them from.

    Attributes
    ----------
    pending
        Partitions requested but not restored yet (always empty for a backend that
        restores at once).
    """

    def __init__(self) -> None:
        self.pending: set = set()

    def connect(self, client_id: str) -> None:  # noqa: B027 - optional hook
        """Create the clients the backend needs; ``KafkaError``/``OSError`` to be retried."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Flush and close what :meth:`connect` created."""

    @abstractmethod
    def request(self, tp: PartitionId) -> Restored | None:
        """Restore ``tp`` now, or ``None``: it is pending, see :meth:`read_pending`.

        Raises :class:`~connectors.state.files.ForeignCheckpoint` or
        ``CheckpointError`` when its state exists but cannot be used.
        """

    def read_pending(self, partitions: Sequence[PartitionId]) -> list[tuple[PartitionId, Outcome]]:
        """Restore pending partitions: ``(tp, Restored or the error)`` for each one read.

        Partitions left out (the backend could not be read) stay pending and are
        asked again on the next call. Does not change :attr:`pending`: the caller
        discards the ones it takes (one revoked meanwhile is simply skipped).
        """
        return []

    @abstractmethod
    def save(self, states: Iterable[PartitionState]) -> None:
        """Make ``states`` durable before their offsets are committed; raise if not."""

    def status(self) -> dict[str, int]:
        """Figures for the status line and the metrics (none by default)."""
        return {}
