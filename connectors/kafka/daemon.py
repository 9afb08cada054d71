"""The consumer daemon's poll loop: read, learn, checkpoint, then commit.

See :mod:`connectors.kafka` for what the daemon guarantees and the modules it
delegates to: the table of the partitions held (:mod:`~connectors.kafka.assignment`),
their take-over (:mod:`~connectors.kafka.rebalance`), the learning of a batch
(:mod:`~connectors.kafka.learning`), checkpoint-then-commit
(:mod:`~connectors.kafka.checkpoints`), construction and shutdown
(:mod:`~connectors.kafka.lifecycle`: the state backend and the refit policy are
chosen once, when the collaborators are wired), and the status line and metrics
(:mod:`~connectors.kafka.status`).
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Iterable

from kafka import KafkaConsumer, TopicPartition
from kafka.errors import KafkaError, NoOffsetForPartitionError, OffsetOutOfRangeError

from connectors.config import DaemonConfig
from connectors.kafka.clients import backoff, connect
from connectors.kafka.lifecycle import close_clients, connect_others, wire
from connectors.kafka.outputs import DETAIL_MAX
from connectors.kafka.rebalance import EXIT_PARTITION_FAILURE, RebalanceListener
from connectors.kafka.status import Reporting, render_metrics, status_line

__all__ = ["ConsumerDaemon", "EXIT_STATE_FAILURE", "EXIT_PARTITION_FAILURE"]

log = logging.getLogger("streamspec.daemon")

EXIT_STATE_FAILURE = 3
"""Exit status of a daemon stopped because its state could not grow or be checkpointed."""


class ConsumerDaemon(Reporting):
    """Consume a topic, learn its streams, refit in the background, checkpoint exactly once.

    Parameters
    ----------
    config
        The settings (:class:`connectors.config.DaemonConfig`).

    Attributes
    ----------
    states
        The :class:`~connectors.state.files.PartitionState` of every assigned partition.
    failed
        Partitions left unread, and why.
    metrics
        Counters since start.
    model
        The model served (with local state also saved to ``<state_dir>/<topic>/model.ckpt``).
    backend
        Where states are kept (:class:`~connectors.state.local.LocalBackend` or
        :class:`~connectors.state.topic.TopicBackend`).
    refits
        When and on what the daemon refits (:mod:`connectors.kafka.refit_policy`).
    assignment, ownership, learner, checkpoints
        The partitions held, their take-over and hand-back, the learning of batches,
        checkpoint-then-commit (see the module docstring).
    scoring
        The partitions' online predictors: prequential loss, learned weights, predictions
        (:mod:`connectors.kafka.scoring`).
    consumer
        The group's ``KafkaConsumer`` (``None`` until connected).

    All are built by :func:`connectors.kafka.lifecycle.wire`; the figures of the status
    line and the metrics (:meth:`lag`, :meth:`offsets`, ...) come from
    :class:`~connectors.kafka.status.Reporting`.

    Notes
    -----
    :meth:`run` blocks until :meth:`stop` is called (from any thread, or by
    SIGTERM/SIGINT when ``install_signals=True``), then checkpoints, commits,
    refits on everything learned (the model saved and published; a second signal
    stops waiting for that fit), closes and returns 0. After a state failure (memory
    exhausted while learning a valid record, a full alphabet, a checkpoint that
    cannot be written) it stops by itself the same way, with the failed record's
    partition checkpointed before that record, and returns :data:`EXIT_STATE_FAILURE`; :attr:`fatal` says why.
    Subclasses may override :meth:`_consume` (one partition's batch) and
    :meth:`_after_batch` (periodic work).
    """

    def __init__(self, config: DaemonConfig):
        self.config = config
        self._stop = threading.Event()
        self._hurry = threading.Event()  # a second signal: stop waiting for the final refit
        self.consumer: KafkaConsumer | None = None
        self.fatal: str | None = None  # why the daemon stopped on a state failure
        w = wire(config, self._fail)
        self.fmt, self.client_id, self.store, self.metrics = w.fmt, w.client_id, w.store, w.metrics
        self.assignment, self._probe, self.outputs = w.assignment, w.probe, w.outputs
        self.backend, self.refits, self.checkpoints = w.backend, w.refits, w.checkpoints
        self.learner, self.ownership, self.services = w.learner, w.ownership, w.services
        self.watch, self.verifier, self.group_watch = w.watch, w.verifier, w.group_watch
        self.scoring = w.scoring
        self.states, self.failed = self.assignment.states, self.assignment.failed
        self._listener: RebalanceListener | None = None

    # ------------------------------------------------------------------ lifecycle

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
        self.services.start(lambda: render_metrics(self, self.consumer is not None))
        try:
            self.consumer = connect(cfg, self.client_id, self._stop, lambda: connect_others(
                self.outputs, self.backend, self.refits, self.client_id))
            if self.consumer is None:
                return 0
            self.ownership.consumer = self.checkpoints.consumer = self.consumer
            self.verifier.consumer = self.consumer
            self._listener = RebalanceListener(self.ownership.acquire, self.ownership.release)
            self.consumer.subscribe([cfg.topic], listener=self._listener)
            self.watch.attach(self.consumer)
            log.info("event=connected bootstrap=%s", cfg.bootstrap)
            self._loop()
        finally:
            self._shutdown()
        return self._exit_status()

    def _exit_status(self) -> int:
        if self.fatal is not None:
            return EXIT_STATE_FAILURE
        if self.assignment.ever_failed:
            log.error("event=exit status=%d reason=partitions-failed partitions=%s",
                      EXIT_PARTITION_FAILURE, ",".join(
                          f"{tp.partition}:{r}" for tp, r in sorted(self.assignment.ever_failed.items())))
            return EXIT_PARTITION_FAILURE
        return 0

    def _on_signal(self, signum: int) -> None:
        if self._stop.is_set():  # a second signal: do not wait for the final refit
            self._hurry.set()
        log.info("event=signal signal=%s", signal.Signals(signum).name)
        self.stop()

    def _loop(self) -> None:
        cfg = self.config
        last_status = time.monotonic()
        errors = 0
        while not self._stop.is_set():
            batch, errors = self._poll(errors)
            if batch is None:
                continue
            reason = self.watch.changed()
            if reason is not None:  # the records of this poll may come from another log
                self.metrics.reconnections = self.watch.reconnections
                self.verifier.recheck_all(reason, batch)
                batch = {}
            if batch:
                with self.assignment.lock:
                    for tp, messages in batch.items():
                        self._consume(tp, messages)
                        if self.fatal is not None:
                            break  # the other partitions' messages stay unread: offsets say so
            if self.fatal is not None:
                break
            if self.backend.pending:
                self.ownership.restore_pending()
            if self.assignment.to_verify:
                self.verifier.settle()
            self.verifier.check_positions()
            self.group_watch.check(self.consumer, self._rejoin)
            if not batch:
                self._probe.probe(self.consumer)
            self._after_batch()
            now = time.monotonic()
            if cfg.status_interval and now - last_status >= cfg.status_interval:
                log.info("event=status %s", status_line(self))
                last_status = now

    def _poll(self, errors: int) -> tuple[dict | None, int]:
        """One poll: the batch (``None`` after an error, handled) and the errors in a row."""
        try:
            return self.consumer.poll(timeout_ms=self.config.poll_timeout_ms,
                                      max_records=self.config.max_poll_records), 0
        except OffsetOutOfRangeError as exc:  # records deleted, or a log shorter than read
            self.verifier.out_of_range(exc)
        except NoOffsetForPartitionError as exc:  # a partition nobody sought: a bug
            for tp in (exc.args[0] if exc.args and isinstance(exc.args[0], Iterable) else []):
                self.ownership.fail_partition(tp, "no-position", repr(exc))
        except KafkaError as exc:
            errors += 1
            delay = backoff(errors + 1, self.config.retry_backoff_max)
            log.warning("event=poll-error error=%r retry_in=%.1fs", str(exc), delay)
            self._stop.wait(delay)
        return None, errors

    def _rejoin(self) -> None:
        """Join the group again (a fresh metadata request and a rebalance).

        Partitions still held here but no longer assigned by the group are handed back
        first (their states made durable), as a revocation would have.
        """
        assigned = set(self.consumer.assignment())
        a = self.assignment
        stale = (set(a.states) | set(a.failed) | self.backend.pending) - assigned
        if stale:
            self.ownership.release(sorted(stale), True)
        self.consumer.unsubscribe()
        self.consumer.subscribe([self.config.topic], listener=self._listener)

    def _consume(self, tp: TopicPartition, messages: list) -> None:
        """Learn one partition's fetched messages (in offset order), under the lock."""
        self.learner.learn(tp, messages)

    def _after_batch(self) -> None:
        """Periodic work after each poll: take finished refits, checkpoint when due."""
        self.refits.after_batch()
        self.checkpoints.maybe_checkpoint()

    def _fail(self, error: str, tp: TopicPartition | None = None, offset: int | None = None,
              reason: str = "state-failure") -> None:
        """Stop on a state failure (or ``reason``): log it once; the shutdown checkpoints."""
        if self.fatal is None:
            self.fatal = error
            where = "" if tp is None else f" partition={tp.topic}-{tp.partition} offset={offset}"
            log.critical(
                "event=fatal reason=%s%s error=%r counts_mb=%.1f action=stop "
                "(checkpoint the last consistent state, commit nothing past it, exit %d)",
                reason, where, error[:DETAIL_MAX], self.counts_bytes() / 1e6, EXIT_STATE_FAILURE,
            )
        self.stop()

    def _shutdown(self) -> None:
        try:
            close_clients(self.consumer, self.refits, self.checkpoints, self.outputs,
                          self.backend, self._hurry if self.fatal is None else None)
        finally:
            self.services.close()
            log.info(
                "event=stopped records=%d dead_letters=%d refits=%d",
                self.metrics.records, sum(self.metrics.dead_letters.values()), self.metrics.refits,
            )
