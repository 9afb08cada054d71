"""The local state backend: one checkpoint file per partition in the state folder.

See :class:`~connectors.state.files.StateStore` for the files, their ``.prev``
fallback and the identity checks.
"""

from __future__ import annotations

from collections.abc import Iterable

from connectors.state.backend import PartitionId, StateBackend
from connectors.state.files import PartitionState, Restored, StateStore

__all__ = ["LocalBackend"]


class LocalBackend(StateBackend):
    """Partition states in checkpoint files, restored at once on assignment.

    Parameters
    ----------
    store
        The state folder, with the daemon's client id and consumer group.
    """

    def __init__(self, store: StateStore):
        super().__init__()
        self.store = store

    def request(self, tp: PartitionId) -> Restored:
        """The partition's newest readable checkpoint (else the previous one, else none)."""
        return self.store.restore(tp.topic, tp.partition)

    def save(self, states: Iterable[PartitionState]) -> None:
        """Write each checkpoint atomically (it reads back before it replaces the old one)."""
        for state in states:
            self.store.save(state)
