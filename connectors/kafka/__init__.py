"""The consumer daemon: learn continuously from a Kafka topic, exactly once, surviving crashes.

:class:`ConsumerDaemon` joins a consumer group (``enable_auto_commit=False``),
parses every message with :func:`connectors.records.parse_kafka`, feeds the
symbols to one :class:`~streamspec.streaming.accumulator.MomentAccumulator` per partition
and refits a model in a background thread.

Exactly once
------------
A partition's counts and the offset of the next message to read are written
together, atomically, in one checkpoint file (:mod:`connectors.state.files`); offsets
are committed to Kafka only after that file is durable. On start and on every
partition assignment the daemon loads the partition's checkpoint and seeks to
its offset: the checkpoint, not Kafka's committed offset, is the truth. The
checkpoint also marks the last record counted (what identifies the log read), and
that record is read again and compared before the partition is read on, on
assignment and after every reconnection (:mod:`connectors.kafka.verification`): a
replaced or truncated log, or records deleted before they were read, are never
skipped silently (``on_offset_out_of_range``). A crash
at any instant therefore leaves a checkpoint whose counts are exactly those of
the messages before its offset, and the restarted daemon continues from there.
Every checkpoint is self-consistent, so even a late write by an evicted member
cannot make a count wrong. Outputs (dead letters, predictions, models) are sent
and flushed before the checkpoint that moves past their messages: they are
delivered at least once.

Poison messages
---------------
A message that cannot be parsed (reasons ``empty``, ``undecodable``,
``bad-json``, ``missing-field``, ``bad-field``, ``oversized``), that carries,
with a fixed alphabet, an unknown symbol (``unknown-symbol``), or whose
processing raised (``unprocessable``: a bug, never a crash loop) is sent unchanged
to the dead-letter topic with headers ``reason``, ``detail``, ``source-topic``,
``source-partition`` and ``source-offset``, counted in the partition's
checkpoint, and skipped.

State failures are not poison
-----------------------------
A *valid* record whose learning fails because the state cannot grow (a
``MemoryError``, or an alphabet that is full) is never a dead letter: the record
is not at fault. Every record is learned all or nothing (the accumulator undoes a
failed call; a message of several symbols is undone as a whole), so the daemon
stops cleanly instead: it logs ``event=fatal reason=state-failure``, checkpoints
every partition at its last consistent state (the failed record's partition at
the failed record's offset, so it is read again on restart), commits no further,
and :meth:`ConsumerDaemon.run` returns :data:`EXIT_STATE_FAILURE` (3). The same
happens if a checkpoint cannot be written or would not read back (the last good
one is kept). Bound the state with ``max_symbols`` (``--max-symbols``): counts
take 16 bytes per distinct triple, and the status line (``counts_mb=``) and the
metrics (``streamspec_counts_bytes``) show how much.

Model snapshots
---------------
With ``models_topic`` set, every refitted model is published as one message:
the value is :meth:`ObservableOperatorModel.to_bytes` (an ``.npz`` archive of
the arrays ``b1``, ``binf`` and ``B`` plus a JSON header holding the format name
``streamspec.ObservableOperatorModel``, its version, the symbol labels, the
filter settings and a SHA-256 checksum; never a pickle), loaded back by
:meth:`ObservableOperatorModel.from_bytes`. The key is the daemon's client id;
the headers are ``format`` (``streamspec.ObservableOperatorModel/1``),
``model-version`` (the model's version: one more per refit, carried across
restarts by the saved model's metadata ``model_version``), ``records`` (symbols
learned so far), ``loss`` (the fit's final training loss), and what the model was
fitted on: ``fitted-records`` (records in its counts), ``fitted-offsets`` (JSON: the
next offset of each partition when its counts were copied; every record before it is
in them) and ``snapshot-time`` (when they were copied, Unix seconds): a record's
*model age* is the time from it to the first model that includes it
(``demos/bench_model_age.py``). The same model is
saved to ``<state_dir>/<topic>/model.ckpt``; at shutdown one last refit covers
every symbol learned. With ``hmm_states`` (``--states K``)
each refit also fits a K-state HMM (:class:`~streamspec.WithHMM`), saved to
``<state_dir>/<topic>/model.ckpt.hmm`` and published right after its model with
the headers ``format`` (``streamspec.HiddenMarkovModel/1``), ``model-version``,
``records`` and ``refitter`` (value :meth:`HiddenMarkovModel.to_bytes`).

Prequential loss and learned weights
------------------------------------
Once a model is served, each partition's records are predicted before they are
learned by the partition's own online predictor (:mod:`connectors.kafka.scoring`;
``score_every``: every symbol, or the symbols numbered 0, N, 2N, ...): the
partition's prequential log loss (status line ``loss=``, metric
``streamspec_prequential_log_loss``) and the mixing weights learned from it, saved in
the partition's checkpoint and merged into the weights each refit starts from
(:mod:`connectors.kafka.refit_policy`).

Predictions
-----------
With ``predictions_topic`` set, every record learned once a model exists gives
one JSON message (key: the message's key): ``{"key", "symbol", "partition",
"offset", "history", "next": {symbol: probability}, "top", "model_version"}``,
``next`` listing the 20 most probable next symbols of that stream. They come from
the same per-partition predictor, which scores every symbol then.

Streams must be partitioned by their key (the default for keyed messages):
each partition keeps the tails of its own streams.

Kafka state backend (many daemons, one model)
---------------------------------------------
With ``state_backend="kafka"`` the checkpoint of a partition is a cumulative
snapshot published to the state topic (:mod:`connectors.state.snapshots`) and
acknowledged by the broker (acks=all) before the offsets are committed. A newly
assigned partition is paused until its latest snapshot has been read from the
state topic (to the high-water mark), then seeked to the snapshot's offset and
resumed: no shared file system. A snapshot of another consumer group is refused;
when the newest snapshot cannot be decoded, the previous one is used (the
records after its offset are read again). Every daemon follows the state topic (the
global view: the latest snapshot of every partition) and the model topic. The
owner of partition 0 refits on the merge of the latest snapshots whenever they
changed and either ``refit_every`` new symbols arrived or the view has been idle
for ``max(1 s, 2 checkpoint intervals)``, and publishes each model with the next
version (:mod:`connectors.model_topic`); every daemon serves the newest model it

Modules
-------
* :mod:`connectors.kafka.daemon`: :class:`ConsumerDaemon`, the poll loop;
* :mod:`connectors.kafka.assignment`: the table of the partitions held, under one lock;
* :mod:`connectors.kafka.learning`: one partition's batch: records, dead letters, predictions;
* :mod:`connectors.kafka.checkpoints`: checkpoint, then commit;
* :mod:`connectors.kafka.lifecycle`: the collaborators wired (the state backend chosen once);
  clients connected, closed;
* :mod:`connectors.kafka.clients`: clients created, commits and outage probes, with backoff;
* :mod:`connectors.kafka.rebalance`: assignment, revocation, failed partitions;
* :mod:`connectors.kafka.verification`: the log under a partition checked against its mark
  (:mod:`connectors.kafka.expectation`: what a partition held back waits for);
* :mod:`connectors.kafka.log_watch`: reconnections and topic id changes noticed;
* :mod:`connectors.kafka.group_watch`: a daemon left without partitions, reported, rejoined;
* :mod:`connectors.kafka.refit_policy`: when to refit, what both policies share;
* :mod:`connectors.kafka.local_refits`: refits on this daemon's partitions (local state);
* :mod:`connectors.kafka.group_refits`: one refitter for the group (state topic);
* :mod:`connectors.kafka.outputs`: dead letters, predictions, model messages;
* :mod:`connectors.kafka.scoring`: each partition's records predicted before they are
  learned (prequential loss, learned weights, predictions);
* :mod:`connectors.kafka.status`: the daemon's figures, the status line and the Prometheus metrics;
* the state backends live in :mod:`connectors.state` (files, state topic).
"""

from connectors.ingest import StateFailure, learn_record
from connectors.kafka.daemon import EXIT_STATE_FAILURE, ConsumerDaemon
from connectors.kafka.outputs import MODEL_SNAPSHOT_HEADERS
from connectors.kafka.rebalance import EXIT_PARTITION_FAILURE

__all__ = ["ConsumerDaemon", "MODEL_SNAPSHOT_HEADERS", "EXIT_STATE_FAILURE",
           "EXIT_PARTITION_FAILURE", "learn_record", "StateFailure"]
