"""Building, starting and stopping what the daemon's poll loop runs with, in the order that loses nothing.

* :func:`wire`: every collaborator of the poll loop, built from the config and
  wired together (:class:`Wiring`);
* :func:`choose_state`: the state backend and its refit policy (the one place that
  depends on ``state_backend``);
* :func:`connect_others`: the output producer, then the state backend's and the
  refit policy's clients (all or none: a failure closes what was created, and the
  caller retries with backoff);
* :class:`Services`: the metrics endpoint and the refit worker process, started
  before the consumer and stopped last;
* :func:`close_clients`: at shutdown, the last finished model, the final
  checkpoint and its commit, a final refit on everything learned, then the
  consumer (whose revocation checkpoints again what changed), the outputs and the
  backend.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass

from kafka import KafkaConsumer
from kafka.errors import KafkaError

from connectors.config import DaemonConfig
from connectors.kafka.assignment import Assignment
from connectors.kafka.checkpoints import Checkpointer
from connectors.kafka.clients import BrokerProbe, Committer
from connectors.kafka.group_refits import GroupRefits
from connectors.kafka.group_watch import GroupWatch
from connectors.kafka.learning import BatchLearner, new_accumulator
from connectors.kafka.local_refits import LocalRefits
from connectors.kafka.log_watch import BrokerWatch
from connectors.kafka.outputs import Outputs
from connectors.kafka.rebalance import Ownership
from connectors.kafka.refit_policy import RefitPolicy, make_estimator
from connectors.kafka.scoring import Scoring
from connectors.kafka.verification import LogVerifier
from connectors.metrics import DaemonMetrics, MetricsServer
from connectors.process_fit import shutdown_worker, start_worker
from connectors.records import RecordFormat, format_from_options
from connectors.state.backend import StateBackend
from connectors.state.files import StateStore
from connectors.state.local import LocalBackend
from connectors.state.topic import TopicBackend

__all__ = ["Wiring", "wire", "choose_state", "connect_others", "close_clients", "Services"]

log = logging.getLogger("streamspec.daemon")


@dataclass
class Wiring:
    """The poll loop's collaborators (see :class:`~connectors.kafka.daemon.ConsumerDaemon`)."""

    fmt: RecordFormat
    client_id: str
    store: StateStore
    metrics: DaemonMetrics
    assignment: Assignment
    probe: BrokerProbe
    outputs: Outputs
    backend: StateBackend
    refits: RefitPolicy
    checkpoints: Checkpointer
    learner: BatchLearner
    ownership: Ownership
    services: Services
    watch: BrokerWatch
    verifier: LogVerifier
    group_watch: GroupWatch
    scoring: Scoring


def wire(config: DaemonConfig, fail: Callable[..., None]) -> Wiring:
    """Build the daemon's collaborators from ``config`` and wire them together.

    ``fail(error, tp, offset)`` stops the daemon on a state failure (from the learning
    of a batch and from the checkpoints).
    """
    fmt = format_from_options(**config.format)
    alphabet = config.alphabet
    if alphabet is not None and fmt.int_symbols:
        alphabet = tuple(int(s) for s in alphabet)
    client_id = config.client_id or f"streamspec-{socket.gethostname()}-{os.getpid()}"
    store = StateStore(config.state_dir, owner=client_id, group=config.group)
    metrics = DaemonMetrics()
    assignment = Assignment()
    probe = BrokerProbe(metrics, config.bootstrap, config.retry_backoff_max)
    outputs = Outputs(config, metrics, client_id, fmt.max_bytes, on_limit=fail)
    backend, refits = choose_state(config, store, outputs, metrics, assignment)
    checkpoints = Checkpointer(config, assignment, backend, outputs, metrics,
                               Committer(metrics, config.retry_backoff_max), fail)
    watch = BrokerWatch(config.topic)
    verifier = LogVerifier(config, assignment, metrics,
                           lambda tp, reason, error: ownership.fail_partition(tp, reason, error),
                           watch)
    scoring = Scoring(config, outputs)
    learner = BatchLearner(fmt, frozenset(alphabet) if alphabet is not None else None,
                           assignment, outputs, metrics, refits, checkpoints, fail, verifier,
                           scoring)
    ownership = Ownership(config, metrics, backend, refits, assignment,
                          lambda: new_accumulator(config), checkpoints.save_released,
                          verifier.expect)
    return Wiring(fmt, client_id, store, metrics, assignment, probe, outputs, backend, refits,
                  checkpoints, learner, ownership, Services(config), watch, verifier,
                  GroupWatch(config, metrics), scoring)


def choose_state(config: DaemonConfig, store: StateStore, outputs: Outputs,
                 metrics: DaemonMetrics, assignment: Assignment) -> tuple[StateBackend, RefitPolicy]:
    """The state backend and the refit policy that goes with it (``config.state_backend``).

    ``"kafka"``: the state topic, one refitter for the group on the global counts;
    ``"local"``: checkpoint files in ``store``, refits on the partitions held.
    """
    estimator = make_estimator(config)
    if config.state_backend == "kafka":  # the one choice; no branch on it afterwards
        backend = TopicBackend(config.bootstrap, config.topic, config.state_topic_name,
                               config.group)
        return backend, GroupRefits(config, estimator, outputs, metrics, backend)
    return LocalBackend(store), LocalRefits(config, estimator, outputs, metrics, store,
                                            assignment.states, assignment.lock,
                                            assignment.counts_bytes)


def connect_others(outputs: Outputs, backend: StateBackend, refits: RefitPolicy,
                   client_id: str) -> None:
    """The output producer, then the backend's and the refit policy's clients."""
    outputs.connect()
    try:
        backend.connect(client_id)
        refits.connect(client_id)
    except Exception:
        if outputs.producer is not None:
            outputs.producer.close(timeout=1)
            outputs.producer = None
        raise


def close_clients(consumer: KafkaConsumer | None, refits: RefitPolicy,
                  checkpoints: Checkpointer, outputs: Outputs, backend: StateBackend,
                  hurry: threading.Event | None = None) -> None:
    """Serve the last model, checkpoint and commit, refit on everything, close the clients.

    The final refit (on the symbols learned since the last one) starts on a copy of
    the counts before the consumer hands the partitions back, and is waited for
    after (``hurry`` set, e.g. by a second signal, stops the wait; ``None``: no final
    refit, as after a state failure); its model is saved and published like any
    other. A ``KafkaError`` while closing is logged: the checkpoints written are the
    truth.
    """
    try:
        if consumer is not None:
            refits.take_model()
            checkpoints.checkpoint_and_commit(final=True)
            final = hurry is not None and refits.start_final_refit(hurry)
            try:
                # close() revokes the partitions, which checkpoints them again if changed
                consumer.close(autocommit=False)
            finally:
                if final:
                    refits.finish_final_refit(hurry)
        outputs.close()
        backend.close()
    except KafkaError as exc:
        log.warning("event=close-error error=%r", str(exc))
    finally:
        refits.close()
        refits.refitter.wait(5.0)  # a fit still running dies with the process: counts are safe


class Services:
    """What runs beside the poll loop: the metrics endpoint and the refit worker process.

    Parameters
    ----------
    config
        ``metrics_port`` (``None``: no endpoint), ``refit_process``, and whether
        refits are on at all (``refit_every``, ``refit_interval``).
    """

    def __init__(self, config: DaemonConfig):
        self.config = config
        self.metrics_server: MetricsServer | None = None

    @property
    def port(self) -> int | None:
        """The port of the metrics endpoint (``None``: none)."""
        return self.metrics_server.port if self.metrics_server is not None else None

    def start(self, render: Callable[[], str]) -> None:
        """Serve ``render()`` as the metrics; start the refit worker if refits run in one."""
        cfg = self.config
        if cfg.metrics_port is not None:
            self.metrics_server = MetricsServer(render, cfg.metrics_port)
            log.info("event=metrics url=http://127.0.0.1:%d/metrics", self.metrics_server.port)
        if cfg.refit_process and (cfg.refit_every or cfg.refit_interval):
            start_worker(cfg.refit_nice)  # started by the time the first refit is due

    def close(self) -> None:
        """Stop the worker process (if refits used one) and the metrics endpoint."""
        if self.config.refit_process:
            shutdown_worker()
        if self.metrics_server is not None:
            self.metrics_server.close()
