"""The consumer daemon: learn continuously from a Kafka topic, exactly once, surviving crashes.

:class:`ConsumerDaemon` joins a consumer group (``enable_auto_commit=False``),
parses every message with :func:`connectors.records.parse_kafka`, feeds the
symbols to one :class:`~streamspec.streaming.accumulator.MomentAccumulator` per partition
and refits a model in a background thread.

Exactly once
------------
A partition's counts and the offset of the next message to read are written
together, atomically, in one checkpoint file (:mod:`connectors.state`); offsets
are committed to Kafka only after that file is durable. On start and on every
partition assignment the daemon loads the partition's checkpoint and seeks to
its offset: the checkpoint, not Kafka's committed offset, is the truth. A crash
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
``model-version`` (the refit number of this daemon), ``records`` (symbols
learned so far) and ``loss`` (the fit's final training loss). The same model is
saved to ``<state_dir>/<topic>/model.ckpt``. With ``hmm_states`` (``--states K``)
each refit also fits a K-state HMM (:class:`~streamspec.WithHMM`), saved to
``<state_dir>/<topic>/model.ckpt.hmm`` and published right after its model with
the headers ``format`` (``streamspec.HiddenMarkovModel/1``), ``model-version``,
``records`` and ``refitter`` (value :meth:`HiddenMarkovModel.to_bytes`).

Predictions
-----------
With ``predictions_topic`` set, every record learned once a model exists gives
one JSON message (key: the message's key): ``{"key", "symbol", "partition",
"offset", "history", "next": {symbol: probability}, "top", "model_version"}``,
``next`` listing the 20 most probable next symbols of that stream.

Streams must be partitioned by their key (the default for keyed messages):
each partition keeps the tails of its own streams.

Kafka state backend (many daemons, one model)
---------------------------------------------
With ``state_backend="kafka"`` the checkpoint of a partition is a cumulative
snapshot published to the state topic (:mod:`connectors.state_topic`) and
acknowledged by the broker (acks=all) before the offsets are committed. A newly
assigned partition is paused until its latest snapshot has been read from the
state topic (to the high-water mark), then seeked to the snapshot's offset and
resumed: no shared file system. Every daemon follows the state topic (the
global view: the latest snapshot of every partition) and the model topic. The
owner of partition 0 refits on the merge of the latest snapshots whenever they
changed and either ``refit_every`` new symbols arrived or the view has been idle
for ``max(1 s, 2 checkpoint intervals)``, and publishes each model with the next
version (:mod:`connectors.model_topic`); every daemon serves the newest model it
has read and reports its version (status line, ``streamspec_model_version``).
"""

from __future__ import annotations

import json
import logging
import math
import os
import signal
import socket
import threading
import time
from collections.abc import Iterable

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.consumer.subscription_state import ConsumerRebalanceListener
from kafka.errors import (
    KafkaError,
    MessageSizeTooLargeError,
    NoOffsetForPartitionError,
    OffsetOutOfRangeError,
)
from kafka.structs import OffsetAndMetadata

from connectors.config import DaemonConfig, mestimator_params
from connectors.metrics import DaemonMetrics, MetricsServer
from connectors.model_topic import (
    REFITTER_PARTITION,
    ModelRecord,
    NewestModel,
    encode_hmm,
    encode_model,
    is_hmm_message,
)
from connectors.predictions import StreamPredictor
from connectors.process_fit import ProcessMEstimator, shutdown_worker, start_worker
from connectors.records import MalformedRecord, RecordFormat, format_from_options, parse_kafka
from connectors.state import ForeignCheckpoint, PartitionState, StateStore, merge_accumulators
from connectors.state_topic import (
    LatestSnapshots,
    Snapshot,
    TopicFollower,
    encode_snapshot,
    ensure_topic,
    partition_count,
    read_snapshots,
    read_topic,
    state_partition,
)
from streamspec.core.checkpoint import CheckpointError
from streamspec.core.hidden_markov_model import HiddenMarkovModel
from streamspec.core.mestimator import MEstimator
from streamspec.core.model import ObservableOperatorModel
from streamspec.streaming.accumulator import MomentAccumulator
from streamspec.streaming.refitter import Refitter
from streamspec.streaming.with_hmm import WithHMM

__all__ = ["ConsumerDaemon", "MODEL_SNAPSHOT_HEADERS", "EXIT_STATE_FAILURE",
           "EXIT_PARTITION_FAILURE", "learn_record", "StateFailure"]

log = logging.getLogger("streamspec.daemon")

MODEL_SNAPSHOT_HEADERS = ("format", "model-version", "records", "loss")
"""Headers of every model snapshot message; the value is ``ObservableOperatorModel.to_bytes()``."""

_BOOTSTRAP_TIMEOUT_MS = 2000  # one connection attempt; then the daemon's own backoff
_CACHE_ENTRIES = 1 << 16  # parsed (key, value) pairs kept; the cache is cleared when full
_CACHED_VALUE_BYTES = 64  # only short values are cached
_DETAIL_MAX = 300  # characters of a parse error kept in the dead-letter header
_LOG_EVERY_DEAD = 1000  # after the first 10 of a reason, log one dead letter in this many
_SEND_TIMEOUT = 30.0  # seconds to wait for the broker to acknowledge a state snapshot
_COMMIT_TIMEOUT_MS = 3000  # one offset-commit attempt; a failed one is logged, then retried
_OFFSETS_TIMEOUT_MS = 5000  # one look-up of a partition's log-start / high-water offsets
EXIT_STATE_FAILURE = 3
"""Exit status of a daemon stopped because its state could not grow or be checkpointed."""
EXIT_PARTITION_FAILURE = 4
"""Exit status of a daemon that left a partition unread (refused, unreadable or out-of-range
checkpoint, a failure while taking it over): the others were consumed normally."""


class StateFailure(Exception):
    """The daemon's state could not grow (memory, a full alphabet) or be made durable."""


def is_state_failure(exc: BaseException) -> bool:
    """Whether ``exc``, raised while learning a valid record, means the state cannot grow."""
    if isinstance(exc, MemoryError | StateFailure):
        return True
    return isinstance(exc, ValueError) and "alphabet is full" in str(exc)


def learn_record(acc: MomentAccumulator, records) -> int:
    """Learn the parsed records of one message into ``acc``, all or nothing; the symbols learned.

    A message of one symbol is one ``learn_one`` (all or nothing by itself). A
    message of several symbols, or with an end of sequence, is undone as a whole if
    any step raises: the accumulator's per-call undo records are replayed in reverse
    order, so a message is never half-learned. O(1) per symbol.
    """
    if len(records) == 1 and not records[0].end:
        r = records[0]
        if r.symbol is None:
            return 0
        acc.learn_one(r.symbol, r.key)
        return 1
    snapshot = getattr(acc, "_snapshot", None)
    labels = acc._alphabet._labels if snapshot is not None else None
    undo = []
    learned = 0
    try:
        for r in records:
            if r.symbol is not None:
                if snapshot is not None:
                    undo.append(snapshot(r.key, len(labels)))
                acc.learn_one(r.symbol, r.key)
                learned += 1
            if r.end:
                if snapshot is not None:
                    undo.append(snapshot(r.key, len(labels)))
                acc.end(r.key)
    except BaseException:
        for snap in reversed(undo):
            acc._restore(snap)
        raise
    return learned


class _Rebalance(ConsumerRebalanceListener):
    """Checkpoint partitions before they are revoked; load and seek on assignment.

    kafka-python runs these callbacks on its IO thread while ``poll`` waits, so
    they never call blocking consumer APIs (``commit``): the new owner commits
    after its first checkpoint.
    """

    def __init__(self, daemon: ConsumerDaemon):
        self.daemon = daemon

    def on_partitions_revoked(self, revoked):
        self.daemon._release(revoked, lost=False)

    def on_partitions_lost(self, lost):
        self.daemon._release(lost, lost=True)

    def on_partitions_assigned(self, assigned):
        self.daemon._acquire(assigned)


class ConsumerDaemon:
    """Consume a topic, learn its streams, refit in the background, checkpoint exactly once.

    Parameters
    ----------
    config
        The settings (:class:`connectors.config.DaemonConfig`).

    Attributes
    ----------
    states
        The :class:`~connectors.state.PartitionState` of every assigned partition.
    metrics
        Counters since start.
    model
        The latest model (also saved to ``<state_dir>/<topic>/model.ckpt``).

    Notes
    -----
    :meth:`run` blocks until :meth:`stop` is called (from any thread, or by
    SIGTERM/SIGINT when ``install_signals=True``), then checkpoints, commits,
    closes and returns 0. After a state failure (see the module docstring: memory
    exhausted while learning a valid record, a full alphabet, a checkpoint that
    cannot be written) it stops by itself the same way, with the failed record's
    partition checkpointed before that record, and returns
    :data:`EXIT_STATE_FAILURE`; :attr:`fatal` says why.
    """

    def __init__(self, config: DaemonConfig):
        self.config = config
        self.fmt: RecordFormat = format_from_options(**config.format)
        alphabet = config.alphabet
        if alphabet is not None and self.fmt.int_symbols:
            alphabet = tuple(int(s) for s in alphabet)
        self._allowed = frozenset(alphabet) if alphabet is not None else None
        self.client_id = config.client_id or f"streamspec-{socket.gethostname()}-{os.getpid()}"
        self.store = StateStore(config.state_dir, owner=self.client_id, group=config.group)
        self.states: dict[TopicPartition, PartitionState] = {}
        self.metrics = DaemonMetrics()
        self._lock = threading.RLock()  # partition states: poll loop vs rebalance callbacks
        self._stop = threading.Event()
        self._consumer: KafkaConsumer | None = None
        self._producer: KafkaProducer | None = None
        self._dirty: set[TopicPartition] = set()
        # partitions left unread, and why (shown in the status line, metrics, exit status)
        self.failed: dict[TopicPartition, str] = {}
        self._ever_failed: dict[TopicPartition, str] = {}  # for the exit status
        # restored partitions, paused until their offset is checked against the log
        self._to_verify: set[TopicPartition] = set()
        self._commit_errors = 0  # consecutive failed commits: the backoff
        self._next_commit = 0.0  # monotonic time before which no commit is tried
        self._broker_down_since: float | None = None
        self._next_probe_log = 0.0
        self._probe_errors = 0
        self._refit_failures_logged = 0
        # parsed records of short (key, value) pairs: streams repeat a few symbols, and
        # parsing depends on nothing else (records are immutable; timestamps are not used)
        self._parse_cache: dict[tuple, list] = {}
        self._uncommitted: dict[TopicPartition, int] = {}
        self._new_since_fit = 0
        self._since_checkpoint = 0
        self._last_checkpoint = time.monotonic()
        self._model_version = 0
        self._fit_taken_at = time.monotonic()
        # kafka state backend: pending restores, the global view, the shared model
        self._kafka_state = config.state_backend == "kafka"
        self._pending: set[TopicPartition] = set()
        self._snapshots = LatestSnapshots()
        self._models = NewestModel()
        self._followers: list[TopicFollower] = []
        self._state_producer: KafkaProducer | None = None  # snapshots and models, gzip
        self._n_state_partitions = 0
        self._is_refitter = False
        self._next_version = 1
        self._seen_generation = -1
        self._fit_generation = -1
        self._fit_records = 0
        self._view_changed_at = time.monotonic()
        self._refit_idle = max(1.0, 2 * config.checkpoint_interval)
        self.model = None if self._kafka_state else self._load_model()
        self._fitted = self.model
        self._label_order = list(self.model.symbols or []) if self.model is not None else []
        self._hmm_estimator: WithHMM | None = None
        self._refitter = Refitter(
            self._estimator(),
            refit_every=config.refit_every or None,
            refit_interval=config.refit_interval,
            sweeps=config.warm_sweeps,
            background=True,
            prepare=self._save_model,  # in the refit thread: no fsync in the poll loop
        )
        if self.model is not None:  # a restart warm-starts from the saved model's factors
            self._refitter.adopt(self.model)
            if self._hmm_estimator is not None:  # and from the saved HMM
                self._hmm_estimator.adopt(self.model, self._load_hmm())
        self._predictor: StreamPredictor | None = None
        if self.model is not None and config.predictions_topic:
            self._predictor = StreamPredictor(self.model, version=0)
        self._metrics_server: MetricsServer | None = None
        self.fatal: str | None = None  # why the daemon stopped on a state failure

    # ------------------------------------------------------------------ lifecycle

    def stop(self) -> None:
        """Ask :meth:`run` to finish: stop polling, checkpoint, commit, close (any thread)."""
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def run(self, install_signals: bool = False) -> int:
        """Consume until stopped; returns the exit status (0)."""
        if install_signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, lambda signum, frame: self._on_signal(signum))
        cfg = self.config
        log.info(
            "event=start client=%s topic=%s group=%s state_dir=%s bootstrap=%s",
            self.client_id, cfg.topic, cfg.group, cfg.state_dir, cfg.bootstrap,
        )
        if cfg.metrics_port is not None:
            self._metrics_server = MetricsServer(self._render_metrics, cfg.metrics_port)
            log.info("event=metrics url=http://127.0.0.1:%d/metrics", self._metrics_server.port)
        if cfg.refit_process and (cfg.refit_every or cfg.refit_interval):
            start_worker()  # its start-up is done by the time the first refit is due
        try:
            if not self._connect():
                return 0
            self._loop()
        finally:
            self._shutdown()
        if self.fatal is not None:
            return EXIT_STATE_FAILURE
        if self._ever_failed:
            log.error("event=exit status=%d reason=partitions-failed partitions=%s",
                      EXIT_PARTITION_FAILURE,
                      ",".join(f"{tp.partition}:{r}" for tp, r in sorted(self._ever_failed.items())))
            return EXIT_PARTITION_FAILURE
        return 0

    @property
    def metrics_port(self) -> int | None:
        return self._metrics_server.port if self._metrics_server is not None else None

    def _on_signal(self, signum: int) -> None:
        log.info("event=signal signal=%s", signal.Signals(signum).name)
        self.stop()

    def _connect(self) -> bool:
        """Create the clients, retrying with exponential backoff; False if stopped first."""
        cfg = self.config
        delay = 0.5
        while not self._stop.is_set():
            try:
                consumer = KafkaConsumer(
                    bootstrap_servers=cfg.bootstrap.split(","),
                    group_id=cfg.group,
                    client_id=self.client_id,
                    enable_auto_commit=False,
                    # why: an out-of-range offset must be seen (the on_offset_out_of_range
                    # policy), never reset silently; every partition is sought explicitly
                    auto_offset_reset="none",
                    session_timeout_ms=cfg.session_timeout_ms,
                    heartbeat_interval_ms=cfg.heartbeat_interval_ms,
                    max_poll_interval_ms=cfg.max_poll_interval_ms,
                    max_poll_records=cfg.max_poll_records,
                    bootstrap_timeout_ms=_BOOTSTRAP_TIMEOUT_MS,
                )
                try:
                    producer = self._make_producer()
                except Exception:
                    consumer.close(autocommit=False)
                    raise
                if self._kafka_state:
                    try:
                        self._prepare_topics()
                        self._state_producer = KafkaProducer(
                            bootstrap_servers=cfg.bootstrap.split(","),
                            client_id=f"{self.client_id}-state",
                            acks="all",
                            linger_ms=0,
                            compression_type="gzip",  # counts are sparse: about 10x smaller
                            bootstrap_timeout_ms=_BOOTSTRAP_TIMEOUT_MS,
                            max_request_size=64 << 20,
                        )
                    except Exception:
                        consumer.close(autocommit=False)
                        if producer is not None:
                            producer.close(timeout=1)
                        raise
            except (KafkaError, OSError, TimeoutError) as exc:
                log.warning(
                    "event=broker-unavailable bootstrap=%s error=%r retry_in=%.1fs",
                    cfg.bootstrap, str(exc) or type(exc).__name__, delay,
                )
                self._stop.wait(delay)
                delay = min(delay * 2, cfg.retry_backoff_max)
                continue
            self._consumer, self._producer = consumer, producer
            if self._kafka_state:
                self._start_followers()
            consumer.subscribe([cfg.topic], listener=_Rebalance(self))
            log.info("event=connected bootstrap=%s", cfg.bootstrap)
            return True
        return False

    def _prepare_topics(self) -> None:
        """Kafka backend: create the state topic (as many partitions as the source) and the model topic."""
        cfg = self.config
        n_source = partition_count(cfg.bootstrap, cfg.topic)
        if n_source == 0:
            raise KafkaError(f"topic {cfg.topic} does not exist yet")
        ensure_topic(cfg.bootstrap, cfg.state_topic_name, n_source, compact=True)
        ensure_topic(cfg.bootstrap, cfg.model_topic_name, 1, compact=False)
        self._n_state_partitions = partition_count(cfg.bootstrap, cfg.state_topic_name)
        log.info("event=state-topic topic=%s partitions=%d model_topic=%s",
                 cfg.state_topic_name, self._n_state_partitions, cfg.model_topic_name)

    def _start_followers(self) -> None:
        cfg = self.config
        if self._followers:
            return
        self._followers = [
            TopicFollower(cfg.bootstrap, cfg.state_topic_name, self._on_snapshot_message,
                          f"{self.client_id}-state").start(),
            TopicFollower(cfg.bootstrap, cfg.model_topic_name, self._on_model_message,
                          f"{self.client_id}-models").start(),
        ]

    def _on_snapshot_message(self, m) -> None:
        try:
            self._snapshots.offer(Snapshot.from_message(m.key, m.value, m.headers))
        except ValueError as exc:
            log.warning("event=foreign-state-message partition=%d offset=%d error=%r",
                        m.partition, m.offset, str(exc))

    def _on_model_message(self, m) -> None:
        if is_hmm_message(m.headers):
            return  # the HMMs are for the topic's readers; daemons serve the operator model
        try:
            self._models.offer(ModelRecord.from_message(m.value, m.headers))
        except ValueError as exc:
            log.warning("event=foreign-model-message offset=%d error=%r", m.offset, str(exc))

    def _make_producer(self) -> KafkaProducer | None:
        cfg = self.config
        if not (cfg.dead_letter_topic_name or cfg.predictions_topic or cfg.models_topic):
            return None
        return KafkaProducer(
            bootstrap_servers=cfg.bootstrap.split(","),
            client_id=f"{self.client_id}-out",
            linger_ms=5,
            bootstrap_timeout_ms=_BOOTSTRAP_TIMEOUT_MS,
            max_request_size=max(16 << 20, 2 * self.fmt.max_bytes),
        )

    def _loop(self) -> None:
        cfg = self.config
        consumer = self._consumer
        last_status = time.monotonic()
        errors = 0
        while not self._stop.is_set():
            try:
                batch = consumer.poll(
                    timeout_ms=cfg.poll_timeout_ms, max_records=cfg.max_poll_records
                )
                errors = 0
            except OffsetOutOfRangeError as exc:  # the log moved under a partition being read
                self._out_of_range_while_reading(exc)
                continue
            except NoOffsetForPartitionError as exc:  # a partition nobody sought: a bug
                for tp in (exc.args[0] if exc.args and isinstance(exc.args[0], Iterable)
                           else []):
                    self._fail_partition(tp, "no-position", repr(exc))
                continue
            except KafkaError as exc:
                errors += 1
                delay = min(0.5 * 2 ** min(errors, 10), cfg.retry_backoff_max)
                log.warning("event=poll-error error=%r retry_in=%.1fs", str(exc), delay)
                self._stop.wait(delay)
                continue
            if batch:
                with self._lock:
                    for tp, messages in batch.items():
                        self._consume(tp, messages)
                        if self.fatal is not None:
                            break  # the other partitions' messages stay unread: offsets say so
            if self.fatal is not None:
                break
            if self._pending:
                self._restore_pending()
            if self._to_verify:
                self._verify_offsets()
            if not batch:
                self._probe_broker()
            self._after_batch()
            now = time.monotonic()
            if cfg.status_interval and now - last_status >= cfg.status_interval:
                self._status()
                last_status = now

    def _shutdown(self) -> None:
        try:
            if self._consumer is not None:
                self._take_model()
                self._checkpoint_and_commit(final=True)
                # close() revokes the partitions, which checkpoints them again if changed
                self._consumer.close(autocommit=False)
            for producer in (self._producer, self._state_producer):
                if producer is not None:
                    producer.flush(timeout=10)
                    producer.close(timeout=10)
        except KafkaError as exc:
            log.warning("event=close-error error=%r", str(exc))
        finally:
            for follower in self._followers:
                follower.close()
            self._refitter.wait(5.0)  # a fit still running dies with the process: counts are safe
            if self.config.refit_process:
                shutdown_worker()
            if self._metrics_server is not None:
                self._metrics_server.close()
            log.info(
                "event=stopped records=%d dead_letters=%d refits=%d",
                self.metrics.records, sum(self.metrics.dead_letters.values()), self.metrics.refits,
            )

    # ------------------------------------------------------------------ partitions

    def _acquire(self, partitions: Iterable[TopicPartition]) -> None:
        """Take over newly assigned partitions (in the rebalance callback).

        kafka-python swallows what a rebalance callback raises, so nothing escapes:
        a partition whose take-over fails is paused and listed as failed (status
        line, metrics, exit status) instead of being silently left unread.
        """
        with self._lock:
            for tp in partitions:
                if tp in self.states:
                    continue
                try:
                    self._acquire_one(tp)
                except Exception as exc:  # noqa: BLE001 - see the docstring
                    self._fail_partition(tp, "assign-failed", f"{type(exc).__name__}: {exc}")

    def _acquire_one(self, tp: TopicPartition) -> None:
        self.failed.pop(tp, None)
        if self._kafka_state:
            # paused until its snapshot is read from the state topic (in the poll loop:
            # no blocking reads in this callback); a position, so that no reset is needed
            self._consumer.seek(tp, 0)
            self._consumer.pause(tp)
            self._pending.add(tp)
            return
        try:
            restored = self.store.restore(tp.topic, tp.partition)
        except ForeignCheckpoint as exc:
            self.metrics.unreadable_checkpoints += 1
            self._fail_partition(tp, "foreign-checkpoint", str(exc))
            return
        except CheckpointError as exc:
            # never start such a partition afresh (that would count it twice):
            # leave it paused, unread, until the file is repaired or removed
            self.metrics.unreadable_checkpoints += 1
            self._fail_partition(tp, "unreadable-checkpoint", str(exc))
            return
        state = restored.state
        if state is None:
            state = PartitionState(tp.topic, tp.partition, self._new_accumulator())
            self._consumer.seek_to_beginning(tp)
        else:
            if restored.source == "previous-checkpoint":
                self.metrics.unreadable_checkpoints += 1
                log.warning(
                    "event=checkpoint-fallback partition=%s-%d newest_error=%r "
                    "action=use-previous offset=%d records=%d (the records from this offset "
                    "on are read again from the log: nothing is lost or counted twice)",
                    tp.topic, tp.partition, restored.newest_error, state.offset, state.records)
            self._consumer.seek(tp, state.offset)
            self._to_verify.add(tp)  # checked against the log once its high-water mark is known
        self.states[tp] = state
        log.info(
            "event=assigned partition=%s-%d offset=%d from=%s records=%d",
            tp.topic, tp.partition, state.offset, restored.source, state.records,
        )

    def _fail_partition(self, tp: TopicPartition, reason: str, error: str) -> None:
        """Leave ``tp`` unread, visibly: paused, listed as failed, exit status not 0."""
        self.failed[tp] = reason
        self._ever_failed[tp] = reason
        self.states.pop(tp, None)
        self._to_verify.discard(tp)
        self._pending.discard(tp)
        self._dirty.discard(tp)
        self._uncommitted.pop(tp, None)
        try:
            self._consumer.seek(tp, 0)  # a position (never fetched: paused), so no reset is asked
            self._consumer.pause(tp)
        except Exception as exc:  # noqa: BLE001 - already failing; say so, keep going
            log.error("event=pause-failed partition=%s-%d error=%r", tp.topic, tp.partition,
                      str(exc))
        log.error("event=partition-failed partition=%s-%d reason=%s action=paused "
                  "(not read until fixed; exit status %d) error=%r", tp.topic, tp.partition,
                  reason, EXIT_PARTITION_FAILURE, error[:2 * _DETAIL_MAX])

    def _failed_text(self) -> str:
        return ",".join(f"{tp.partition}:{r}" for tp, r in sorted(self.failed.items()))

    def _verify_offsets(self) -> None:
        """Check restored offsets against the log; apply ``on_offset_out_of_range``.

        A checkpoint offset beyond the high-water mark (the topic was re-created, the
        log truncated) or before the log-start offset (records removed unread) would
        otherwise skip records silently. The high-water mark is the one of the first
        fetch response (some brokers answer offset look-ups inexactly); a partition
        whose fetch at its offset returns records needs no check.
        """
        with self._lock:
            ready = []
            for tp in sorted(self._to_verify):
                if tp not in self.states:
                    self._to_verify.discard(tp)
                    continue
                hw = self._consumer.highwater(tp)
                if hw is not None:
                    ready.append((tp, hw))
        if not ready:
            return
        try:
            starts = self._consumer.beginning_offsets([tp for tp, _ in ready],
                                                      timeout_ms=_OFFSETS_TIMEOUT_MS)
        except KafkaError as exc:
            log.warning("event=offsets-unavailable partitions=%s error=%r retry=next-poll",
                        ",".join(str(tp.partition) for tp, _ in ready), str(exc))
            return
        with self._lock:
            for tp, hw in ready:
                if tp not in self._to_verify or tp not in self.states:
                    continue  # revoked, or records arrived meanwhile
                self._to_verify.discard(tp)
                state, start = self.states[tp], starts.get(tp) or 0
                if not start <= state.offset <= hw:
                    self._offset_out_of_range(tp, state, start, hw)

    def _offset_out_of_range(self, tp: TopicPartition, state: PartitionState, start: int,
                             end: int | None) -> bool:
        """Apply the policy to a partition whose offset is outside the log; True: read on."""
        where = "beyond the high-water mark" if end is not None and state.offset > end else \
            "before the log-start offset"
        if self.config.on_offset_out_of_range == "reset":
            skipped = max(0, start - state.offset) if state.offset < start else 0
            log.warning(
                "event=offset-reset partition=%s-%d checkpoint_offset=%d log_start=%d "
                "high_water=%s (%s) action=read-from-log-start records_kept=%d "
                "records_never_read=%d", tp.topic, tp.partition, state.offset, start,
                end, where, state.records, skipped)
            state.offset = start
            self._consumer.seek(tp, start)
            self._dirty.add(tp)
            return True
        self._fail_partition(
            tp, "offset-out-of-range",
            f"checkpoint offset {state.offset} of {tp.topic}-{tp.partition} is {where} "
            f"(log start {start}, high-water mark {end}): the topic was re-created or "
            "records were removed before they were read; restart with "
            "--on-offset-out-of-range reset to keep the counts and read from the log start")
        return False

    def _out_of_range_while_reading(self, exc: OffsetOutOfRangeError) -> None:
        """The fetch position left the log while reading: the same policy as on restore."""
        positions = exc.args[0] if exc.args and isinstance(exc.args[0], dict) else {}
        tps = [tp for tp in positions if tp in self.states]
        try:
            starts = self._consumer.beginning_offsets(tps, timeout_ms=_OFFSETS_TIMEOUT_MS)
            ends = self._consumer.end_offsets(tps, timeout_ms=_OFFSETS_TIMEOUT_MS)
        except KafkaError as err:
            log.warning("event=offsets-unavailable error=%r retry=next-poll", str(err))
            self._stop.wait(0.5)
            return
        with self._lock:
            for tp in tps:
                state = self.states.get(tp)
                if state is not None:
                    self._offset_out_of_range(tp, state, starts.get(tp, 0), ends.get(tp))

    def _release(self, partitions: Iterable[TopicPartition], lost: bool) -> None:
        with self._lock:
            for tp in partitions:
                self._pending.discard(tp)
                self._to_verify.discard(tp)
                self.failed.pop(tp, None)  # another member takes it (and reports it if it fails)
                if self._kafka_state and tp.partition == REFITTER_PARTITION:
                    if self._is_refitter:
                        log.info("event=refitter-resigned version=%d", self._next_version - 1)
                    self._is_refitter = False
                state = self.states.pop(tp, None)
                if state is None:
                    continue
                if tp in self._dirty:
                    self._flush_outputs()
                    try:
                        self._save_states([state])
                        self.metrics.checkpoints += 1
                    except (KafkaError, TimeoutError) as exc:  # the last snapshot stays the truth
                        log.warning("event=snapshot-failed partition=%s-%d error=%r",
                                    tp.topic, tp.partition, str(exc))
                    except (MemoryError, OSError, CheckpointError) as exc:
                        log.error("event=checkpoint-failed partition=%s-%d error=%r "
                                  "action=keep-previous", tp.topic, tp.partition,
                                  f"{type(exc).__name__}: {exc}")
                        self._fail(f"checkpoint failed: {type(exc).__name__}: {exc}")
                    self._dirty.discard(tp)
                self._uncommitted.pop(tp, None)
                log.info(
                    "event=%s partition=%s-%d offset=%d records=%d",
                    "lost" if lost else "revoked", tp.topic, tp.partition, state.offset,
                    state.records,
                )

    def _restore_pending(self) -> None:
        """Kafka backend: read the latest snapshots of the paused new partitions, seek, resume."""
        cfg = self.config
        with self._lock:
            pending = sorted(self._pending)
        try:
            latest = read_snapshots(cfg.bootstrap, cfg.state_topic_name,
                                    [tp.partition for tp in pending],
                                    client_id=f"{self.client_id}-restore")
        except (KafkaError, OSError, TimeoutError) as exc:
            log.warning("event=restore-failed partitions=%s error=%r retry=next-poll",
                        ",".join(str(tp.partition) for tp in pending), str(exc))
            return
        with self._lock:
            for tp in pending:
                if tp not in self._pending:
                    continue  # revoked while reading
                self._pending.discard(tp)
                snap = latest.get(tp.partition)
                if snap is None:
                    state = PartitionState(tp.topic, tp.partition, self._new_accumulator())
                    self._consumer.seek_to_beginning(tp)
                    source = "beginning"
                else:
                    try:
                        state = snap.state()
                        state.check_identity(tp.topic, tp.partition, None,
                                             f"state-topic snapshot of partition {tp.partition}")
                    except ForeignCheckpoint as exc:
                        self.metrics.unreadable_checkpoints += 1
                        self._fail_partition(tp, "foreign-checkpoint", str(exc))
                        continue
                    except CheckpointError as exc:  # never recount: stay paused
                        self.metrics.unreadable_checkpoints += 1
                        self._fail_partition(tp, "unreadable-checkpoint", str(exc))
                        continue
                    self._snapshots.offer(snap)
                    self._consumer.seek(tp, state.offset)
                    source = "state-topic"
                    self._to_verify.add(tp)  # resumed once its offset is checked
                self.states[tp] = state
                self._consumer.resume(tp)
                log.info(
                    "event=assigned partition=%s-%d offset=%d from=%s records=%d",
                    tp.topic, tp.partition, state.offset, source, state.records,
                )
                if tp.partition == REFITTER_PARTITION:
                    self._take_over_refits()

    def _take_over_refits(self) -> None:
        """Become the refitter: continue the version sequence from the model topic's newest model."""
        newest = NewestModel()
        newest_hmm: dict[int, HiddenMarkovModel] = {}

        def take(m) -> None:
            if is_hmm_message(m.headers):
                try:
                    version = int(dict(m.headers)["model-version"])
                    newest_hmm[version] = HiddenMarkovModel.from_bytes(m.value)
                except (KeyError, ValueError):
                    pass
                return
            try:
                newest.offer(ModelRecord.from_message(m.value, m.headers))
            except ValueError:
                pass

        try:
            read_topic(self.config.bootstrap, self.config.model_topic_name, take,
                       client_id=f"{self.client_id}-takeover")
        except (KafkaError, OSError, TimeoutError) as exc:
            log.warning("event=takeover-read-failed error=%r", str(exc))
        if newest.record is not None:
            self._models.offer(newest.record)
            try:  # the new refitter warm-starts from the newest published model
                adopted = ObservableOperatorModel.from_bytes(newest.record.value)
                self._refitter.adopt(adopted)
                if self._hmm_estimator is not None:
                    self._hmm_estimator.adopt(adopted, newest_hmm.get(newest.record.version))
            except ValueError as exc:
                log.warning("event=takeover-model-unreadable error=%r", str(exc))
        self._next_version = max(self._next_version, self._models.version + 1)
        self._fit_generation = -1  # refit on the current global view
        self._is_refitter = True
        log.info("event=refitter-elected next_version=%d", self._next_version)

    def _save_states(self, states: list[PartitionState]) -> None:
        """Make the states durable: checkpoint files (local) or acknowledged snapshots (kafka)."""
        if not self._kafka_state:
            for state in states:
                self.store.save(state)
            return
        topic = self.config.state_topic_name
        futures = []
        for state in states:
            key, value, headers = encode_snapshot(state, owner=self.client_id)
            part = state_partition(state.partition, self._n_state_partitions)
            futures.append(self._state_producer.send(topic, key=key, value=value, headers=headers,
                                               partition=part))
        for f in futures:
            f.get(timeout=_SEND_TIMEOUT)  # acknowledged by the broker (acks=all)

    def _new_accumulator(self) -> MomentAccumulator:
        cfg = self.config
        if cfg.max_symbols is None:
            return MomentAccumulator(mode=cfg.mode)
        return MomentAccumulator(mode=cfg.mode, max_symbols=cfg.max_symbols)

    # ------------------------------------------------------------------ records

    def _consume(self, tp: TopicPartition, messages) -> None:
        state = self.states.get(tp)
        if state is None:  # fetched before a revocation: the new owner reads it
            return
        acc = state.acc
        fmt = self.fmt
        allowed = self._allowed
        predictor = self._predictor
        cache = self._parse_cache
        learned = 0
        if messages:
            self._to_verify.discard(tp)  # records at its offset: the offset is in the log
        for m in messages:
            if m.offset < state.offset:
                continue  # already counted (fetched before the seek)
            value = m.value
            small = value is not None and len(value) <= _CACHED_VALUE_BYTES
            records = cache.get((m.key, value)) if small else None
            if records is None:
                try:
                    records = parse_kafka(m.key, value, fmt)
                except MalformedRecord as exc:
                    self._dead_letter(state, m, exc.reason, exc.detail)
                    state.offset = m.offset + 1
                    continue
                if small:
                    if len(cache) >= _CACHE_ENTRIES:
                        cache.clear()
                    cache[(m.key, value)] = records
            if allowed is not None:
                unknown = [r.symbol for r in records if r.symbol is not None
                           and r.symbol not in allowed]
                if unknown:
                    detail = f"symbol {unknown[0]!r} is not in the fixed alphabet"
                    self._dead_letter(state, m, "unknown-symbol", detail)
                    state.offset = m.offset + 1
                    continue
            try:
                learned += learn_record(acc, records)
            except Exception as exc:  # deterministic, so a replay does exactly the same
                if is_state_failure(exc):  # the record is valid: stop, never a dead letter
                    self._fail(f"{type(exc).__name__}: {exc}", tp, m.offset)
                    break
                self._dead_letter(state, m, "unprocessable", f"{type(exc).__name__}: {exc}")
            if predictor is not None:  # outputs only: they never change what is counted
                self._predict_all(predictor, m, records)
            state.offset = m.offset + 1
        state.records += learned
        self.metrics.records += learned
        self.metrics.messages += len(messages)
        self._new_since_fit += learned
        self._since_checkpoint += len(messages)
        self._dirty.add(tp)

    def _fail(self, error: str, tp: TopicPartition | None = None, offset: int | None = None) -> None:
        """Stop on a state failure: log it once; the shutdown checkpoints the consistent states."""
        if self.fatal is None:
            self.fatal = error
            where = "" if tp is None else f" partition={tp.topic}-{tp.partition} offset={offset}"
            log.critical(
                "event=fatal reason=state-failure%s error=%r counts_mb=%.1f action=stop "
                "(checkpoint the last consistent state, commit nothing past it, exit %d)",
                where, error[:_DETAIL_MAX], self.counts_bytes() / 1e6, EXIT_STATE_FAILURE,
            )
        self.stop()

    def counts_bytes(self) -> int:
        """Memory taken by the counts of the assigned partitions (``acc.memory_bytes()`` summed).

        O(symbols + streams) per partition: called for status lines and metrics only.
        """
        with self._lock:
            accs = [s.acc for s in self.states.values()]
        return int(sum(a.memory_bytes() for a in accs))

    def _dead_letter(self, state: PartitionState, m, reason: str, detail: str) -> None:
        state.dead_letters[reason] += 1
        self.metrics.dead_letters[reason] += 1
        n = self.metrics.dead_letters[reason]
        if n <= 10 or n % _LOG_EVERY_DEAD == 0:
            log.warning(
                "event=dead-letter reason=%s partition=%s-%d offset=%d count=%d detail=%r",
                reason, m.topic, m.partition, m.offset, n, detail[:_DETAIL_MAX],
            )
        topic = self.config.dead_letter_topic_name
        if topic is None or self._producer is None:
            return
        headers = [
            ("reason", reason.encode()),
            ("detail", detail[:_DETAIL_MAX].encode("utf-8", "replace")),
            ("source-topic", m.topic.encode()),
            ("source-partition", str(m.partition).encode()),
            ("source-offset", str(m.offset).encode()),
        ]
        try:
            self._producer.send(topic, key=m.key, value=m.value, headers=headers)
        except MessageSizeTooLargeError:
            headers.append(("truncated-from", str(len(m.value)).encode()))
            self._producer.send(topic, key=m.key, value=m.value[: self.fmt.max_bytes],
                                headers=headers)

    def _predict_all(self, predictor: StreamPredictor, m, records) -> None:
        try:
            for r in records:
                if r.symbol is not None:
                    out = predictor.observe(r.key, r.symbol)
                    out.update(symbol=r.symbol, partition=m.partition, offset=m.offset)
                    self._producer.send(
                        self.config.predictions_topic,
                        key=m.key,
                        value=json.dumps(out, default=str).encode(),
                    )
                    self.metrics.predictions += 1
                if r.end:
                    predictor.forget(r.key)
        except (KafkaError, ValueError) as exc:
            log.warning("event=prediction-failed partition=%s-%d offset=%d error=%r",
                        m.topic, m.partition, m.offset, str(exc))

    # ------------------------------------------------------------------ periodic work

    def _after_batch(self) -> None:
        cfg = self.config
        self._take_model()
        if self._refit_failures() > self._refit_failures_logged:
            self._refit_failures_logged = self.metrics.refit_failures
            log.warning("event=refit-failed failures=%d error=%r (the previous model is kept)",
                        self.metrics.refit_failures,
                        str(getattr(self._refitter, "last_error", None))[:_DETAIL_MAX])
        if self._kafka_state:
            self._maybe_refit_global()
        else:
            self._maybe_refit()
        now = time.monotonic()
        if (self._dirty or self._uncommitted) and (
            (cfg.checkpoint_every and self._since_checkpoint >= cfg.checkpoint_every)
            or now - self._last_checkpoint >= cfg.checkpoint_interval
        ):
            self._checkpoint_and_commit()

    def _maybe_refit(self) -> None:
        if self._new_since_fit == 0 and not self._refitter.due():
            return
        duty = self.config.refit_duty
        seconds = self.metrics.last_fit_seconds
        if duty < 1 and not math.isnan(seconds):
            if time.monotonic() - self._fit_taken_at < seconds * (1 - duty) / duty:
                return  # keep refits to a fraction of the time; the symbols keep counting
        n_new, self._new_since_fit = self._new_since_fit, 0
        with self._lock:
            try:
                self._refitter.observe(n_new, _PartitionsView(self))
            except MemoryError as exc:  # the snapshot for the refit: the counts are intact
                log.error("event=refit-skipped error=%r counts_mb=%.1f",
                          f"MemoryError: {exc}", self.counts_bytes() / 1e6)

    def _maybe_refit_global(self) -> None:
        """Kafka backend, refitter only: refit on the global view when it changed (see the module doc)."""
        if not self._is_refitter or self._refitter.busy:
            return
        cfg = self.config
        now = time.monotonic()
        generation = self._snapshots.generation
        if generation != self._seen_generation:
            self._seen_generation, self._view_changed_at = generation, now
        if generation == self._fit_generation:
            return  # nothing new since the last fit
        new_records = self._snapshots.records() - self._fit_records
        idle = now - self._view_changed_at >= self._refit_idle
        by_count = bool(cfg.refit_every) and new_records >= cfg.refit_every
        by_time = cfg.refit_interval is not None and now - self._fit_taken_at >= cfg.refit_interval
        if not (idle or by_count or by_time):
            return
        duty, seconds = cfg.refit_duty, self.metrics.last_fit_seconds
        if duty < 1 and not math.isnan(seconds) and not idle:
            if now - self._fit_taken_at < seconds * (1 - duty) / duty:
                return
        view = _GlobalView(self)
        self._fit_generation = generation
        if view.n_triples >= max(1, cfg.min_triples):
            self._fit_records = view.records
            self._refitter.fit_now(view)

    def _serve(self, model: ObservableOperatorModel, version: int) -> None:
        """Serve ``model`` (predictions, metrics) as version ``version``."""
        self.model = model
        self._model_version = version
        if self.config.predictions_topic:
            if self._predictor is None:
                self._predictor = StreamPredictor(model, version)
            else:
                self._predictor.set_model(model, version)

    def _take_newest_model(self) -> None:
        """Kafka backend: serve the newest model read from the model topic."""
        record = self._models.record
        if record is None or record.version <= self._model_version:
            return
        try:
            model = record.model()
        except CheckpointError as exc:
            log.error("event=model-unreadable version=%d error=%r", record.version, str(exc))
            self._model_version = record.version  # skip it; the next one will do
            return
        self._serve(model, record.version)
        log.info("event=model version=%d records=%d refitter=%s", record.version, record.records,
                 record.refitter)

    def _take_model(self) -> None:
        if self._kafka_state:
            self._take_fitted_global()
            self._take_newest_model()
            return
        model = self._refitter.model
        if model is None or model is self.model:
            return
        record = self._refitter.records[-1] if self._refitter.records else None
        self.model = model
        self._log_hmm_failure()
        self._fit_taken_at = time.monotonic()
        self._model_version += 1
        self.metrics.refits = self._refitter.n_fits
        if record is not None:
            self.metrics.last_loss = record.loss
            self.metrics.last_fit_seconds = record.seconds
            log.info(
                "event=refit n=%d warm=%s symbols=%d triples=%d seconds=%.3f loss=%.6g",
                self._refitter.n_fits, record.warm, record.n_alphabet, int(record.n_triples),
                record.seconds, record.loss,
            )
        if self.config.predictions_topic:
            if self._predictor is None:
                self._predictor = StreamPredictor(model, self._model_version)
            else:
                self._predictor.set_model(model, self._model_version)
        if self.config.models_topic and self._producer is not None:
            headers = [
                ("format", b"streamspec.ObservableOperatorModel/1"),
                ("model-version", str(self._model_version).encode()),
                ("records", str(self.metrics.records).encode()),
                ("loss", repr(self.metrics.last_loss).encode()),
            ]
            self._producer.send(
                self.config.models_topic, key=self.client_id.encode(), value=model.to_bytes(),
                headers=headers,
            )
            hmm = getattr(model, "hmm", None)
            if hmm is not None:
                _, value, hmm_headers = encode_hmm(hmm, self._model_version,
                                                   self.metrics.records, self.client_id)
                # the model's key: the same partition, so the HMM stays right after its model
                self._producer.send(self.config.models_topic, key=self.client_id.encode(),
                                    value=value, headers=hmm_headers)

    def _take_fitted_global(self) -> None:
        """Kafka backend: publish a model the refitter just fitted, with the next version."""
        model = self._refitter.model
        if model is None or model is self._fitted:
            return
        self._fitted = model
        self._log_hmm_failure()
        self._fit_taken_at = time.monotonic()
        self.metrics.refits = self._refitter.n_fits
        record = self._refitter.records[-1] if self._refitter.records else None
        if record is not None:
            self.metrics.last_loss = record.loss
            self.metrics.last_fit_seconds = record.seconds
        if not self._is_refitter:
            return  # partition 0 moved away while it was fitting: the new refitter publishes
        version = self._next_version
        self._next_version += 1
        key, value, headers = encode_model(model, version, self._fit_records,
                                           self.metrics.last_loss, self.client_id)
        try:
            self._state_producer.send(self.config.model_topic_name, key=key, value=value,
                                      headers=headers).get(timeout=_SEND_TIMEOUT)
        except (KafkaError, TimeoutError) as exc:
            log.warning("event=model-publish-failed version=%d error=%r", version, str(exc))
            return
        self._models.offer(ModelRecord(version, self._fit_records, value, self.client_id))
        self._publish_hmm(model, version)
        log.info(
            "event=refit version=%d records=%d seconds=%.3f loss=%.6g warm=%s",
            version, self._fit_records, self.metrics.last_fit_seconds, self.metrics.last_loss,
            record.warm if record is not None else None,
        )

    def _log_hmm_failure(self) -> None:
        """With ``hmm_states``: say why the last refit kept the previous HMM (if it did)."""
        if self._hmm_estimator is not None and self._hmm_estimator.error is not None:
            log.warning("event=hmm-failed states=%d error=%r", self.config.hmm_states,
                        self._hmm_estimator.error)

    def _publish_hmm(self, model, version: int) -> None:
        """Kafka backend: publish the HMM fitted with model ``version`` (if any) after it."""
        hmm = getattr(model, "hmm", None)
        if hmm is None:
            return
        key, value, headers = encode_hmm(hmm, version, self._fit_records, self.client_id)
        try:
            self._state_producer.send(self.config.model_topic_name, key=key, value=value,
                                      headers=headers).get(timeout=_SEND_TIMEOUT)
        except (KafkaError, TimeoutError) as exc:
            log.warning("event=hmm-publish-failed version=%d error=%r", version, str(exc))

    def _flush_outputs(self) -> bool:
        if self._producer is None:
            return True
        try:
            self._producer.flush(timeout=30)
            return True
        except KafkaError as exc:
            log.warning("event=output-flush-failed error=%r", str(exc))
            return False

    def _checkpoint_and_commit(self, final: bool = False) -> None:
        """Flush outputs, write the changed partitions' checkpoints, then commit their offsets."""
        if not self._flush_outputs():
            return  # outputs not delivered: keep the old checkpoints, retry later
        with self._lock:
            dirty = [(tp, self.states[tp]) for tp in sorted(self._dirty) if tp in self.states]
            try:
                self._save_states([state for _, state in dirty])
            except (KafkaError, TimeoutError) as exc:  # not durable: commit nothing, retry later
                log.warning("event=snapshot-failed error=%r", str(exc))
                return
            except (MemoryError, OSError, CheckpointError) as exc:  # the last good one stays
                log.error("event=checkpoint-failed error=%r action=keep-previous",
                          f"{type(exc).__name__}: {exc}")
                self._fail(f"checkpoint failed: {type(exc).__name__}: {exc}")
                return
            for tp, state in dirty:
                self._uncommitted[tp] = state.offset
                self.metrics.checkpoints += 1
            self._dirty.clear()
            offsets = {
                tp: OffsetAndMetadata(off, "", -1)
                for tp, off in self._uncommitted.items() if tp in self.states
            }
        self._since_checkpoint = 0
        self._last_checkpoint = time.monotonic()
        if offsets and (final or self._last_checkpoint >= self._next_commit):
            self._commit(offsets)
        if final:
            log.info(
                "event=final-checkpoint partitions=%s",
                ",".join(f"{tp.partition}:{s.offset}" for tp, s in sorted(self.states.items())),
            )

    def _commit(self, offsets: dict) -> None:
        """Commit ``offsets``: one bounded attempt; a failure is logged with its backoff.

        The checkpoints already hold the offsets (they are the truth), so a failed
        commit loses nothing: it is tried again after the backoff, and the line per
        failed attempt shows that the broker is unreachable while it is.
        """
        try:
            self._consumer.commit(offsets, timeout_ms=_COMMIT_TIMEOUT_MS)
        except KafkaError as exc:
            self.metrics.commit_failures += 1
            self._commit_errors += 1
            delay = min(0.5 * 2 ** min(self._commit_errors - 1, 10), self.config.retry_backoff_max)
            self._next_commit = time.monotonic() + delay
            log.warning("event=commit-failed attempt=%d error=%r retry_in=%.1fs "
                        "(the checkpoints hold the offsets: nothing is lost)",
                        self._commit_errors, str(exc) or type(exc).__name__, delay)
            return
        if self._commit_errors:
            log.info("event=commit-recovered failed_attempts=%d", self._commit_errors)
        self._commit_errors, self._next_commit = 0, 0.0
        self.metrics.commits += 1
        with self._lock:
            for tp, om in offsets.items():
                if self._uncommitted.get(tp) == om.offset:
                    del self._uncommitted[tp]

    def _probe_broker(self) -> None:
        """After an empty poll: while the group coordinator is unreachable, say so, with backoff.

        An idle daemon has nothing to commit, so without this an outage would be
        silent until the next message. One line per backoff step, as at start-up.
        """
        coordinator = getattr(self._consumer, "_coordinator", None)
        try:
            down = coordinator is not None and coordinator.coordinator_unknown()
        except Exception:  # noqa: BLE001 - a private API: never let it stop the loop
            return
        now = time.monotonic()
        if not down:
            if self._broker_down_since is not None:
                log.info("event=broker-available down_seconds=%.1f",
                         now - self._broker_down_since)
            self._broker_down_since = None
            return
        if self._broker_down_since is None:
            self._broker_down_since, self._probe_errors = now, 0
            self._next_probe_log = now
        if now >= self._next_probe_log:
            self._probe_errors += 1
            self.metrics.broker_failures += 1
            delay = min(0.5 * 2 ** min(self._probe_errors - 1, 10), self.config.retry_backoff_max)
            self._next_probe_log = now + delay
            log.warning("event=broker-unavailable bootstrap=%s attempt=%d down_seconds=%.1f "
                        "retry_in=%.1fs", self.config.bootstrap, self._probe_errors,
                        now - self._broker_down_since, delay)

    # ------------------------------------------------------------------ reporting

    def lag(self) -> int | None:
        """Messages behind the high-water marks of the assigned partitions.

        ``None`` (``lag=?``) when unknown, and whenever a partition failed (it is not
        read, so how far behind it is cannot be known from the fetches).
        """
        total, known = 0, False
        with self._lock:
            items = list(self.states.items())
        for tp, state in items:
            try:
                hw = self._consumer.highwater(tp)
            except (KeyError, AttributeError):
                hw = None
            if hw is not None:
                total += max(0, hw - state.offset)
                known = True
        if self.failed:
            return None  # an unread partition's lag is unknown: never report it as caught up
        return total if known else None

    def _status(self) -> None:
        rate = self.metrics.rate_since_last_status()
        lag = self.lag()
        m = self.metrics
        log.info(
            "event=status rate=%.0f/s records=%d lag=%s partitions=%s refits=%d last_loss=%s "
            "dead_letters=%d model_version=%d symbols=%d counts_mb=%.1f failed=%s paused=%s "
            "refit_failures=%d%s",
            rate, m.records, "?" if lag is None else lag,
            ",".join(str(tp.partition) for tp in sorted(self.states)) or "-",
            m.refits, "nan" if math.isnan(m.last_loss) else f"{m.last_loss:.6g}",
            sum(m.dead_letters.values()), self._model_version, self._n_symbols(),
            self.counts_bytes() / 1e6, self._failed_text() or "-", self._paused_text() or "-",
            self._refit_failures(),
            f" refitter={int(self._is_refitter)} global_records={self._snapshots.records()}"
            if self._kafka_state else "",
        )

    def _render_metrics(self) -> str:
        lag = self.lag() if self._consumer is not None else None
        self._refit_failures()
        gauges = {"partitions": len(self.states), "model_version": self._model_version,
                  "counts_bytes": self.counts_bytes(), "symbols": self._n_symbols(),
                  "failed_partitions": len(self.failed),
                  "paused_partitions": len(self._paused())}
        if self._kafka_state:
            gauges["refitter"] = int(self._is_refitter)
            gauges["global_records"] = self._snapshots.records()
        if lag is not None:
            gauges["lag"] = lag
        return self.metrics.prometheus(gauges)

    def _paused(self) -> list[TopicPartition]:
        """Partitions taken but not read yet: waiting for their state or their offset check."""
        with self._lock:
            return sorted(self._pending | self._to_verify)

    def _paused_text(self) -> str:
        return ",".join(str(tp.partition) for tp in self._paused())

    def _refit_failures(self) -> int:
        """Failed refits so far (the refitter's count; also kept in the metrics)."""
        self.metrics.refit_failures = int(getattr(self._refitter, "n_failures", 0))
        return self.metrics.refit_failures

    def _n_symbols(self) -> int:
        """Largest alphabet among the assigned partitions."""
        with self._lock:
            return max((s.acc.n for s in self.states.values()), default=0)

    # ------------------------------------------------------------------ model

    def _estimator(self) -> MEstimator | WithHMM:
        """The refits' estimator: MEstimator's own defaults for every setting not given.

        With ``hmm_states``, wrapped in :class:`~streamspec.WithHMM`: each refit also fits
        an HMM with that many states on the same counts (in the refit thread; the
        operator model's fit still runs in the worker process with ``refit_process``).
        """
        cfg = self.config
        kind = ProcessMEstimator if cfg.refit_process else MEstimator
        est = kind(**mestimator_params(rank=cfg.rank, penalty=cfg.penalty,
                                       weighting=cfg.weighting, sweeps=cfg.sweeps,
                                       outer=cfg.outer, formulation=cfg.formulation))
        if cfg.hmm_states is None:
            return est
        self._hmm_estimator = WithHMM(est, cfg.hmm_states, sweeps=cfg.warm_sweeps)
        return self._hmm_estimator

    def _save_model(self, model: ObservableOperatorModel) -> None:
        if self._kafka_state:
            return  # the model topic holds the models
        try:
            model.save(self.store.model_path(self.config.topic))
            hmm = getattr(model, "hmm", None)
            if hmm is not None:
                hmm.save(self.store.hmm_path(self.config.topic))
        except OSError as exc:
            log.warning("event=model-save-failed error=%r", str(exc))

    def _load_hmm(self) -> HiddenMarkovModel | None:
        path = self.store.hmm_path(self.config.topic)
        if not path.exists():
            return None
        try:
            return HiddenMarkovModel.load(path)
        except CheckpointError as exc:
            log.warning("event=hmm-unreadable path=%s error=%r", path, str(exc))
            return None

    def _load_model(self) -> ObservableOperatorModel | None:
        path = self.store.model_path(self.config.topic)
        if not path.exists():
            return None
        try:
            return ObservableOperatorModel.load(path)
        except CheckpointError as exc:
            log.warning("event=model-unreadable path=%s error=%r", path, str(exc))
            return None


class _PartitionsView:
    """What :class:`~streamspec.streaming.refitter.Refitter` reads of an accumulator, over all partitions.

    ``n_triples`` is a cheap sum; ``copy()`` (called only when a refit starts)
    merges the partitions by label, keeping the previous model's label order so
    that the refit can warm-start from it.
    """

    def __init__(self, daemon: ConsumerDaemon):
        self._daemon = daemon

    @property
    def n_triples(self) -> float:
        d = self._daemon
        total = sum(s.acc.n_triples for s in d.states.values())
        return total if total >= max(1, d.config.min_triples) else 0.0

    def copy(self) -> MomentAccumulator:
        d = self._daemon
        acc = merge_accumulators((s.acc for s in d.states.values()), d._label_order)
        d._label_order = list(acc.symbols)
        return acc


class _GlobalView:
    """Kafka backend: the merge of the latest snapshot of every partition, for one refit.

    Decoded and merged once, when created (in the poll loop); ``copy()`` hands the
    merged accumulator to :class:`~streamspec.streaming.refitter.Refitter`, keeping the
    previous model's label order so that the refit can warm-start from it.
    """

    def __init__(self, daemon: ConsumerDaemon):
        states = daemon._snapshots.states()  # one consistent set of snapshots
        self.records = sum(s.records for s in states)
        self._acc = merge_accumulators((s.acc for s in states), daemon._label_order)
        daemon._label_order = list(self._acc.symbols)

    @property
    def n_triples(self) -> float:
        return self._acc.n_triples

    def copy(self) -> MomentAccumulator:
        return self._acc
