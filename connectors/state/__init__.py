"""Durable partition state: checkpoint files, state-topic snapshots, and the backends over them.

* :mod:`connectors.state.files`: :class:`PartitionState`, :class:`SourceState` and
  :class:`StateStore` (one checkpoint file per partition, with a ``.prev`` fallback);
* :mod:`connectors.state.identity`: what identifies the log a partition was read from
  (the last record counted, records deleted before they were read);
* :mod:`connectors.state.weights`: the mixing weights a partition's stream taught and
  its prequential loss (kept in its checkpoint), and their merge for a refit;
* :mod:`connectors.state.snapshots`: the snapshot messages of the state topic and
  their readers (Kafka needed);
* :mod:`connectors.state.topic_io`: topics read to their end, followed in a thread,
  created (Kafka needed);
* :mod:`connectors.state.backend`: the :class:`~connectors.state.backend.StateBackend`
  interface the daemon uses, implemented by :mod:`connectors.state.local` (the
  files) and :mod:`connectors.state.topic` (the state topic).

Importing this package needs no Kafka client: ``streamspec learn`` uses the files only.
"""

from connectors.state.files import (
    BlockedCheckpoint,
    ForeignCheckpoint,
    PartitionState,
    Restored,
    SourceState,
    StateStore,
    dump_verified,
    merge_accumulators,
)
from connectors.state.identity import LogIdentity, RecordMark
from connectors.state.weights import LearnedWeights, merge_weights

__all__ = ["PartitionState", "SourceState", "StateStore", "merge_accumulators",
           "dump_verified", "ForeignCheckpoint", "BlockedCheckpoint", "Restored", "LogIdentity",
           "RecordMark", "LearnedWeights", "merge_weights"]
