"""The consumer daemon's poll loop: read, learn, checkpoint, then commit.

See :mod:`connectors.kafka` for what the daemon guarantees. This module is the
loop and its lifecycle; the parts it delegates to:

* :mod:`connectors.kafka.clients`: the consumer (and the others) created with
  backoff; commits and outage probes, each failed attempt logged;
* :mod:`connectors.kafka.rebalance`: assignment, revocation, offset checks;
* :mod:`connectors.state.backend`: where states are made durable (local files or
  the state topic), chosen once at construction;
* :mod:`connectors.kafka.refit_policy`: when to refit, on which counts, which
  model to serve;
* :mod:`connectors.kafka.outputs`: dead letters, predictions, model messages;
* :mod:`connectors.kafka.status`: the status line and the metrics.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Iterable

from kafka import KafkaConsumer, TopicPartition
from kafka.errors import KafkaError, NoOffsetForPartitionError, OffsetOutOfRangeError
from kafka.structs import OffsetAndMetadata

from connectors.config import DaemonConfig, mestimator_params
from connectors.ingest import is_state_failure, learn_record
from connectors.kafka.clients import BrokerProbe, Committer, backoff, connect
from connectors.kafka.outputs import DETAIL_MAX, Outputs
from connectors.kafka.rebalance import EXIT_PARTITION_FAILURE, Partitions, RebalanceListener
from connectors.kafka.refit_policy import GroupRefits, LocalRefits, RefitPolicy
from connectors.kafka.status import render_metrics, status_line
from connectors.metrics import DaemonMetrics, MetricsServer
from connectors.process_fit import ProcessMEstimator, shutdown_worker, start_worker
from connectors.records import MalformedRecord, RecordFormat, format_from_options, parse_kafka
from connectors.state.backend import StateBackend
from connectors.state.files import PartitionState, StateStore
from connectors.state.local import LocalBackend
from connectors.state.topic import TopicBackend
from streamspec.core.checkpoint import CheckpointError
from streamspec.core.mestimator import MEstimator
from streamspec.core.model import ObservableOperatorModel
from streamspec.streaming.accumulator import MomentAccumulator
from streamspec.streaming.refitter import Refitter
from streamspec.streaming.with_hmm import WithHMM

__all__ = ["ConsumerDaemon", "EXIT_STATE_FAILURE", "EXIT_PARTITION_FAILURE"]

log = logging.getLogger("streamspec.daemon")

_CACHE_ENTRIES = 1 << 16  # parsed (key, value) pairs kept; the cache is cleared when full
_CACHED_VALUE_BYTES = 64  # only short values are cached
EXIT_STATE_FAILURE = 3
"""Exit status of a daemon stopped because its state could not grow or be checkpointed."""


class ConsumerDaemon(Partitions):
    """Consume a topic, learn its streams, refit in the background, checkpoint exactly once.

    Parameters
    ----------
    config
        The settings (:class:`connectors.config.DaemonConfig`).

    Attributes
    ----------
    states
        The :class:`~connectors.state.files.PartitionState` of every assigned partition.
    metrics
        Counters since start.
    model
        The model served (with local state also saved to ``<state_dir>/<topic>/model.ckpt``).
    backend
        Where states are kept (:class:`~connectors.state.local.LocalBackend` or
        :class:`~connectors.state.topic.TopicBackend`).
    refits
        When and on what the daemon refits (:mod:`connectors.kafka.refit_policy`).

    Notes
    -----
    :meth:`run` blocks until :meth:`stop` is called (from any thread, or by
    SIGTERM/SIGINT when ``install_signals=True``), then checkpoints, commits,
    closes and returns 0. After a state failure (memory exhausted while learning a
    valid record, a full alphabet, a checkpoint that cannot be written) it stops by
    itself the same way, with the failed record's partition checkpointed before
    that record, and returns :data:`EXIT_STATE_FAILURE`; :attr:`fatal` says why.
    Subclasses may override :meth:`_consume` (one partition's batch) and
    :meth:`_after_batch` (periodic work).
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
        self._dirty: set[TopicPartition] = set()
        # partitions left unread, and why (shown in the status line, metrics, exit status)
        self.failed: dict[TopicPartition, str] = {}
        self._ever_failed: dict[TopicPartition, str] = {}  # for the exit status
        # restored partitions, paused until their offset is checked against the log
        self._to_verify: set[TopicPartition] = set()
        self._committer = Committer(self.metrics, config.retry_backoff_max)
        self._probe = BrokerProbe(self.metrics, config.bootstrap, config.retry_backoff_max)
        # parsed records of short (key, value) pairs: streams repeat a few symbols, and
        # parsing depends on nothing else (records are immutable; timestamps are not used)
        self._parse_cache: dict[tuple, list] = {}
        self._uncommitted: dict[TopicPartition, int] = {}
        self._since_checkpoint = 0
        self._last_checkpoint = time.monotonic()
        self.outputs = Outputs(config, self.metrics, self.client_id, self.fmt.max_bytes)
        self._hmm_estimator: WithHMM | None = None
        estimator = self._estimator()
        self.backend: StateBackend
        self.refits: RefitPolicy
        if config.state_backend == "kafka":  # the one choice; no branch on it afterwards
            topic_backend = TopicBackend(config.bootstrap, config.topic, config.state_topic_name,
                                         config.group)
            self.backend = topic_backend
            self.refits = GroupRefits(config, estimator, self.outputs, self.metrics,
                                      topic_backend)
        else:
            self.backend = LocalBackend(self.store)
            self.refits = LocalRefits(config, estimator, self.outputs, self.metrics, self.store,
                                      self.states, self._lock, self.counts_bytes)
        self._refitter: Refitter = self.refits.refitter
        self._metrics_server: MetricsServer | None = None
        self.fatal: str | None = None  # why the daemon stopped on a state failure

    # ------------------------------------------------------------------ lifecycle

    @property
    def model(self) -> ObservableOperatorModel | None:
        """The model served (``None`` before the first one)."""
        return self.outputs.model

    @property
    def model_version(self) -> int:
        return self.outputs.version

    def stop(self) -> None:
        """Ask :meth:`run` to finish: stop polling, checkpoint, commit, close (any thread)."""
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def run(self, install_signals: bool = False) -> int:
        """Consume until stopped; returns the exit status (0, 3 or 4: see the module doc)."""
        if install_signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, lambda signum, frame: self._on_signal(signum))
        cfg = self.config
        log.info(
            "event=start client=%s topic=%s group=%s state_dir=%s bootstrap=%s",
            self.client_id, cfg.topic, cfg.group, cfg.state_dir, cfg.bootstrap,
        )
        if cfg.metrics_port is not None:
            self._metrics_server = MetricsServer(
                lambda: render_metrics(self, self._consumer is not None), cfg.metrics_port)
            log.info("event=metrics url=http://127.0.0.1:%d/metrics", self._metrics_server.port)
        if cfg.refit_process and (cfg.refit_every or cfg.refit_interval):
            start_worker()  # its start-up is done by the time the first refit is due
        try:
            self._consumer = connect(cfg, self.client_id, self._stop, self._connect_others)
            if self._consumer is None:
                return 0
            self._consumer.subscribe([cfg.topic],
                                     listener=RebalanceListener(self._acquire, self._release))
            log.info("event=connected bootstrap=%s", cfg.bootstrap)
            self._loop()
        finally:
            self._shutdown()
        return self._exit_status()

    def _exit_status(self) -> int:
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

    def _connect_others(self) -> None:
        """The output producer, then the backend's and the refit policy's clients."""
        self.outputs.connect()
        try:
            self.backend.connect(self.client_id)
            self.refits.connect(self.client_id)
        except Exception:
            if self.outputs.producer is not None:
                self.outputs.producer.close(timeout=1)
                self.outputs.producer = None
            raise

    def _loop(self) -> None:
        cfg = self.config
        consumer = self._consumer
        last_status = time.monotonic()
        errors = 0
        while not self._stop.is_set():
            try:
                batch = consumer.poll(timeout_ms=cfg.poll_timeout_ms,
                                      max_records=cfg.max_poll_records)
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
                delay = backoff(errors + 1, cfg.retry_backoff_max)
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
            if self.backend.pending:
                self._restore_pending()
            if self._to_verify:
                self._verify_offsets()
            if not batch:
                self._probe.probe(consumer)
            self._after_batch()
            now = time.monotonic()
            if cfg.status_interval and now - last_status >= cfg.status_interval:
                log.info("event=status %s", status_line(self))
                last_status = now

    def _shutdown(self) -> None:
        try:
            if self._consumer is not None:
                self.refits.take_model()
                self._checkpoint_and_commit(final=True)
                # close() revokes the partitions, which checkpoints them again if changed
                self._consumer.close(autocommit=False)
            self.outputs.close()
            self.backend.close()
        except KafkaError as exc:
            log.warning("event=close-error error=%r", str(exc))
        finally:
            self.refits.close()
            self._refitter.wait(5.0)  # a fit still running dies with the process: counts are safe
            if self.config.refit_process:
                shutdown_worker()
            if self._metrics_server is not None:
                self._metrics_server.close()
            log.info(
                "event=stopped records=%d dead_letters=%d refits=%d",
                self.metrics.records, sum(self.metrics.dead_letters.values()), self.metrics.refits,
            )

    # ------------------------------------------------------------------ records

    def _consume(self, tp: TopicPartition, messages: list) -> None:
        """Learn one partition's fetched messages (in offset order), under the lock."""
        state = self.states.get(tp)
        if state is None:  # fetched before a revocation: the new owner reads it
            return
        acc, fmt, allowed, cache = state.acc, self.fmt, self._allowed, self._parse_cache
        predicting = self.outputs.predictor is not None
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
                    self.outputs.dead_letter(state, m, exc.reason, exc.detail)
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
                    self.outputs.dead_letter(state, m, "unknown-symbol", detail)
                    state.offset = m.offset + 1
                    continue
            try:
                learned += learn_record(acc, records)
            except Exception as exc:  # deterministic, so a replay does exactly the same
                if is_state_failure(exc):  # the record is valid: stop, never a dead letter
                    self._fail(f"{type(exc).__name__}: {exc}", tp, m.offset)
                    break
                self.outputs.dead_letter(state, m, "unprocessable", f"{type(exc).__name__}: {exc}")
            if predicting:  # outputs only: they never change what is counted
                self.outputs.predict_all(m, records)
            state.offset = m.offset + 1
        self._count(tp, state, learned, len(messages))

    def _count(self, tp: TopicPartition, state: PartitionState, learned: int, n: int) -> None:
        state.records += learned
        self.metrics.records += learned
        self.metrics.messages += n
        self.refits.learned(learned)
        self._since_checkpoint += n
        self._dirty.add(tp)

    def _fail(self, error: str, tp: TopicPartition | None = None, offset: int | None = None) -> None:
        """Stop on a state failure: log it once; the shutdown checkpoints the consistent states."""
        if self.fatal is None:
            self.fatal = error
            where = "" if tp is None else f" partition={tp.topic}-{tp.partition} offset={offset}"
            log.critical(
                "event=fatal reason=state-failure%s error=%r counts_mb=%.1f action=stop "
                "(checkpoint the last consistent state, commit nothing past it, exit %d)",
                where, error[:DETAIL_MAX], self.counts_bytes() / 1e6, EXIT_STATE_FAILURE,
            )
        self.stop()

    # ------------------------------------------------------------------ checkpoints

    def _after_batch(self) -> None:
        cfg = self.config
        self.refits.after_batch()
        now = time.monotonic()
        if (self._dirty or self._uncommitted) and (
            (cfg.checkpoint_every and self._since_checkpoint >= cfg.checkpoint_every)
            or now - self._last_checkpoint >= cfg.checkpoint_interval
        ):
            self._checkpoint_and_commit()

    def _save_released(self, tp: TopicPartition, state: PartitionState) -> None:
        """Make a revoked partition's state durable (outputs first); a failure is logged."""
        self.outputs.flush()
        try:
            self.backend.save([state])
            self.metrics.checkpoints += 1
        except (KafkaError, TimeoutError) as exc:  # the last snapshot stays the truth
            log.warning("event=snapshot-failed partition=%s-%d error=%r",
                        tp.topic, tp.partition, str(exc))
        except (MemoryError, OSError, CheckpointError) as exc:
            log.error("event=checkpoint-failed partition=%s-%d error=%r "
                      "action=keep-previous", tp.topic, tp.partition,
                      f"{type(exc).__name__}: {exc}")
            self._fail(f"checkpoint failed: {type(exc).__name__}: {exc}")

    def _checkpoint_and_commit(self, final: bool = False) -> None:
        """Flush outputs, make the changed partitions' states durable, then commit their offsets."""
        if not self.outputs.flush():
            return  # outputs not delivered: keep the old checkpoints, retry later
        with self._lock:
            dirty = [(tp, self.states[tp]) for tp in sorted(self._dirty) if tp in self.states]
            try:
                self.backend.save([state for _, state in dirty])
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
        if offsets and (final or self._committer.due(self._last_checkpoint)):
            if self._committer.commit(self._consumer, offsets):
                with self._lock:
                    for tp, om in offsets.items():
                        if self._uncommitted.get(tp) == om.offset:
                            del self._uncommitted[tp]
        if final:
            log.info("event=final-checkpoint partitions=%s",
                     ",".join(f"{tp.partition}:{s.offset}" for tp, s in sorted(self.states.items())))

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

    def counts_bytes(self) -> int:
        """Memory taken by the counts of the assigned partitions (``acc.memory_bytes()`` summed).

        O(symbols + streams) per partition: called for status lines and metrics only.
        """
        with self._lock:
            accs = [s.acc for s in self.states.values()]
        return int(sum(a.memory_bytes() for a in accs))

    def offsets(self) -> dict[int, int]:
        """The next offset to read of every assigned partition."""
        with self._lock:
            return {tp.partition: s.offset for tp, s in self.states.items()}

    def paused(self) -> list[TopicPartition]:
        """Partitions taken but not read yet: waiting for their state or their offset check."""
        with self._lock:
            return sorted(self.backend.pending | self._to_verify)

    def refit_failures(self) -> int:
        """Failed refits so far."""
        return self.refits.refit_failures()

    def n_symbols(self) -> int:
        """Largest alphabet among the assigned partitions."""
        with self._lock:
            return max((s.acc.n for s in self.states.values()), default=0)

    def extra_status(self) -> dict[str, int]:
        """The refit policy's figures (with the state topic: ``refitter``, ``global_records``)."""
        return self.refits.status()

    # ------------------------------------------------------------------ construction

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

    def _new_accumulator(self) -> MomentAccumulator:
        cfg = self.config
        if cfg.max_symbols is None:
            return MomentAccumulator(mode=cfg.mode)
        return MomentAccumulator(mode=cfg.mode, max_symbols=cfg.max_symbols)
