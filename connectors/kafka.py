"""The consumer daemon: learn continuously from a Kafka topic, exactly once, surviving crashes.

:class:`ConsumerDaemon` joins a consumer group (``enable_auto_commit=False``),
parses every message with :func:`connectors.records.parse_kafka`, feeds the
symbols to one :class:`~streamspec.accumulator.MomentAccumulator` per partition
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
saved to ``<state_dir>/<topic>/model.ckpt``.

Predictions
-----------
With ``predictions_topic`` set, every record learned once a model exists gives
one JSON message (key: the message's key): ``{"key", "symbol", "partition",
"offset", "history", "next": {symbol: probability}, "top", "model_version"}``,
``next`` listing the 20 most probable next symbols of that stream.

Streams must be partitioned by their key (the default for keyed messages):
each partition keeps the tails of its own streams.
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
from kafka.errors import KafkaError, MessageSizeTooLargeError
from kafka.structs import OffsetAndMetadata

from connectors.config import DaemonConfig
from connectors.metrics import DaemonMetrics, MetricsServer
from connectors.predictions import StreamPredictor
from connectors.process_fit import ProcessMEstimator, shutdown_worker, start_worker
from connectors.records import MalformedRecord, RecordFormat, format_from_options, parse_kafka
from connectors.state import PartitionState, StateStore, merge_accumulators
from streamspec.accumulator import MomentAccumulator
from streamspec.checkpoint import CheckpointError
from streamspec.mestimator import MEstimator
from streamspec.model import ObservableOperatorModel
from streamspec.refitter import Refitter

__all__ = ["ConsumerDaemon", "MODEL_SNAPSHOT_HEADERS"]

log = logging.getLogger("streamspec.daemon")

MODEL_SNAPSHOT_HEADERS = ("format", "model-version", "records", "loss")
"""Headers of every model snapshot message; the value is ``ObservableOperatorModel.to_bytes()``."""

_BOOTSTRAP_TIMEOUT_MS = 2000  # one connection attempt; then the daemon's own backoff
_CACHE_ENTRIES = 1 << 16  # parsed (key, value) pairs kept; the cache is cleared when full
_CACHED_VALUE_BYTES = 64  # only short values are cached
_DETAIL_MAX = 300  # characters of a parse error kept in the dead-letter header
_LOG_EVERY_DEAD = 1000  # after the first 10 of a reason, log one dead letter in this many


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
    closes and returns 0.
    """

    def __init__(self, config: DaemonConfig):
        self.config = config
        self.fmt: RecordFormat = format_from_options(**config.format)
        alphabet = config.alphabet
        if alphabet is not None and self.fmt.int_symbols:
            alphabet = tuple(int(s) for s in alphabet)
        self._allowed = frozenset(alphabet) if alphabet is not None else None
        self.client_id = config.client_id or f"streamspec-{socket.gethostname()}-{os.getpid()}"
        self.store = StateStore(config.state_dir, owner=self.client_id)
        self.states: dict[TopicPartition, PartitionState] = {}
        self.metrics = DaemonMetrics()
        self._lock = threading.RLock()  # partition states: poll loop vs rebalance callbacks
        self._stop = threading.Event()
        self._consumer: KafkaConsumer | None = None
        self._producer: KafkaProducer | None = None
        self._dirty: set[TopicPartition] = set()
        # parsed records of short (key, value) pairs: streams repeat a few symbols, and
        # parsing depends on nothing else (records are immutable; timestamps are not used)
        self._parse_cache: dict[tuple, list] = {}
        self._uncommitted: dict[TopicPartition, int] = {}
        self._new_since_fit = 0
        self._since_checkpoint = 0
        self._last_checkpoint = time.monotonic()
        self._model_version = 0
        self._fit_taken_at = time.monotonic()
        self.model = self._load_model()
        self._label_order = list(self.model.symbols or []) if self.model is not None else []
        self._refitter = Refitter(
            self._estimator(),
            refit_every=config.refit_every or None,
            refit_interval=config.refit_interval,
            sweeps=config.sweeps,
            background=True,
            prepare=self._save_model,  # in the refit thread: no fsync in the poll loop
        )
        self._predictor: StreamPredictor | None = None
        if self.model is not None and config.predictions_topic:
            self._predictor = StreamPredictor(self.model, version=0)
        self._metrics_server: MetricsServer | None = None

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
                    auto_offset_reset="earliest",
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
            except (KafkaError, OSError) as exc:
                log.warning(
                    "event=broker-unavailable bootstrap=%s error=%r retry_in=%.1fs",
                    cfg.bootstrap, str(exc) or type(exc).__name__, delay,
                )
                self._stop.wait(delay)
                delay = min(delay * 2, cfg.retry_backoff_max)
                continue
            self._consumer, self._producer = consumer, producer
            consumer.subscribe([cfg.topic], listener=_Rebalance(self))
            log.info("event=connected bootstrap=%s", cfg.bootstrap)
            return True
        return False

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
            if self._producer is not None:
                self._producer.flush(timeout=10)
                self._producer.close(timeout=10)
        except KafkaError as exc:
            log.warning("event=close-error error=%r", str(exc))
        finally:
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
        with self._lock:
            for tp in partitions:
                if tp in self.states:
                    continue
                try:
                    state = self.store.load(tp.topic, tp.partition)
                except CheckpointError as exc:
                    # never start such a partition afresh (that would count it twice):
                    # leave it paused, unread, until the file is repaired or removed
                    self._consumer.pause(tp)
                    self.metrics.unreadable_checkpoints += 1
                    log.error("event=checkpoint-unreadable partition=%s-%d action=paused "
                              "error=%r", tp.topic, tp.partition, str(exc))
                    continue
                if state is None:
                    state = PartitionState(tp.topic, tp.partition, self._new_accumulator())
                    self._consumer.seek_to_beginning(tp)
                    source = "beginning"
                else:
                    self._consumer.seek(tp, state.offset)
                    source = "checkpoint"
                self.states[tp] = state
                log.info(
                    "event=assigned partition=%s-%d offset=%d from=%s records=%d",
                    tp.topic, tp.partition, state.offset, source, state.records,
                )

    def _release(self, partitions: Iterable[TopicPartition], lost: bool) -> None:
        with self._lock:
            for tp in partitions:
                state = self.states.pop(tp, None)
                if state is None:
                    continue
                if tp in self._dirty:
                    self._flush_outputs()
                    self.store.save(state)
                    self._dirty.discard(tp)
                    self.metrics.checkpoints += 1
                self._uncommitted.pop(tp, None)
                log.info(
                    "event=%s partition=%s-%d offset=%d records=%d",
                    "lost" if lost else "revoked", tp.topic, tp.partition, state.offset,
                    state.records,
                )

    def _new_accumulator(self) -> MomentAccumulator:
        return MomentAccumulator(mode=self.config.mode)

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
                for r in records:
                    if r.symbol is not None:
                        acc.learn_one(r.symbol, r.key)
                        learned += 1
                    if r.end:
                        acc.end(r.key)
            except Exception as exc:  # deterministic, so a replay does exactly the same
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
            self._refitter.observe(n_new, _PartitionsView(self))

    def _take_model(self) -> None:
        model = self._refitter.model
        if model is None or model is self.model:
            return
        record = self._refitter.records[-1] if self._refitter.records else None
        self.model = model
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
            for tp in list(self._dirty):
                state = self.states.get(tp)
                if state is not None:
                    self.store.save(state)
                    self._uncommitted[tp] = state.offset
                    self.metrics.checkpoints += 1
            self._dirty.clear()
            offsets = {
                tp: OffsetAndMetadata(off, "", -1)
                for tp, off in self._uncommitted.items() if tp in self.states
            }
        self._since_checkpoint = 0
        self._last_checkpoint = time.monotonic()
        if offsets:
            try:
                self._consumer.commit(offsets)
                self.metrics.commits += 1
                with self._lock:
                    for tp, om in offsets.items():
                        if self._uncommitted.get(tp) == om.offset:
                            del self._uncommitted[tp]
            except KafkaError as exc:  # the checkpoint is the truth: try again next time
                self.metrics.commit_failures += 1
                log.warning("event=commit-failed error=%r", str(exc))
        if final:
            log.info(
                "event=final-checkpoint partitions=%s",
                ",".join(f"{tp.partition}:{s.offset}" for tp, s in sorted(self.states.items())),
            )

    # ------------------------------------------------------------------ reporting

    def lag(self) -> int | None:
        """Messages behind the high-water marks of the assigned partitions (None: unknown)."""
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
        return total if known else None

    def _status(self) -> None:
        rate = self.metrics.rate_since_last_status()
        lag = self.lag()
        m = self.metrics
        log.info(
            "event=status rate=%.0f/s records=%d lag=%s partitions=%s refits=%d last_loss=%s "
            "dead_letters=%d",
            rate, m.records, "?" if lag is None else lag,
            ",".join(str(tp.partition) for tp in sorted(self.states)) or "-",
            m.refits, "nan" if math.isnan(m.last_loss) else f"{m.last_loss:.6g}",
            sum(m.dead_letters.values()),
        )

    def _render_metrics(self) -> str:
        lag = self.lag() if self._consumer is not None else None
        gauges = {"partitions": len(self.states), "model_version": self._model_version}
        if lag is not None:
            gauges["lag"] = lag
        return self.metrics.prometheus(gauges)

    # ------------------------------------------------------------------ model

    def _estimator(self) -> MEstimator:
        cfg = self.config
        kind = ProcessMEstimator if cfg.refit_process else MEstimator
        return kind(
            rank=cfg.rank, penalty=cfg.penalty, weighting=cfg.weighting,
            max_sweeps=cfg.sweeps, max_outer=cfg.outer,
        )

    def _save_model(self, model: ObservableOperatorModel) -> None:
        try:
            model.save(self.store.model_path(self.config.topic))
        except OSError as exc:
            log.warning("event=model-save-failed error=%r", str(exc))

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
    """What :class:`~streamspec.refitter.Refitter` reads of an accumulator, over all partitions.

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
