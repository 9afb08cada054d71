"""What the daemon sends besides its state: dead letters, predictions, models.

All go through one producer (``linger_ms=5``); they are flushed before every
checkpoint that moves past their messages, so they are delivered at least once.
:class:`Outputs` also holds the model being served (for predictions, the partitions'
scoring and the status line; the predictions themselves are made by each partition's
predictor, :mod:`connectors.kafka.scoring`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import NamedTuple

from kafka import KafkaProducer
from kafka.errors import KafkaError, MessageSizeTooLargeError

from connectors.config import DaemonConfig
from connectors.kafka.clients import BOOTSTRAP_TIMEOUT_MS
from connectors.malformed import MalformedReport, TooManyMalformed
from connectors.metrics import DaemonMetrics
from connectors.model_topic import encode_hmm
from connectors.state.files import PartitionState
from streamspec.core.model import ObservableOperatorModel

__all__ = ["Outputs", "DETAIL_MAX", "MODEL_SNAPSHOT_HEADERS"]

log = logging.getLogger("streamspec.daemon")

DETAIL_MAX = 300  # characters of an error kept in a dead-letter header or a log line


class DeadLetter(NamedTuple):
    """Why a message is a dead letter, as :class:`~connectors.malformed.MalformedReport` reads it."""

    reason: str
    detail: str

MODEL_SNAPSHOT_HEADERS = ("format", "model-version", "records", "loss")
"""Headers of every model snapshot message; the value is ``ObservableOperatorModel.to_bytes()``."""


class Outputs:
    """The daemon's output producer and the model it serves.

    Parameters
    ----------
    config
        The daemon's settings (topics of the outputs).
    metrics
        Counted into: dead letters per reason, predictions.
    client_id
        The daemon's client id (the key of its model messages).
    max_bytes
        Largest message value accepted as input (a dead letter may be as large).

    Attributes
    ----------
    producer
        ``None`` until :meth:`connect`, and when no output topic is set.
    model, version
        The model served, and its version (0: none yet, or loaded at start).
    """

    def __init__(self, config: DaemonConfig, metrics: DaemonMetrics, client_id: str,
                 max_bytes: int, on_limit: Callable[..., None] | None = None):
        self.config, self.metrics, self.client_id = config, metrics, client_id
        self.max_bytes = max_bytes
        # dead letters are reported and limited as malformed lines of files are (issue 20)
        self.malformed = MalformedReport(config.max_malformed or "none", what="messages",
                                         logger=log, event="dead-letter")
        self.on_limit = on_limit
        self.producer: KafkaProducer | None = None
        self.model: ObservableOperatorModel | None = None
        self.version = 0

    def connect(self) -> KafkaProducer | None:
        """Create the producer if any output topic is set (``KafkaError`` to be retried)."""
        cfg = self.config
        if not (cfg.dead_letter_topic_name or cfg.predictions_topic or cfg.models_topic):
            return None
        self.producer = KafkaProducer(
            bootstrap_servers=cfg.bootstrap.split(","),
            client_id=f"{self.client_id}-out",
            linger_ms=5,
            bootstrap_timeout_ms=BOOTSTRAP_TIMEOUT_MS,
            max_request_size=max(16 << 20, 2 * self.max_bytes),
        )
        return self.producer

    def close(self) -> None:
        self.malformed.log_summary()
        if self.producer is not None:
            self.producer.flush(timeout=10)
            self.producer.close(timeout=10)

    def serve(self, model: ObservableOperatorModel, version: int) -> None:
        """Serve ``model`` (predictions, scoring, metrics) as version ``version``; the
        partitions' predictors follow it at their next batch."""
        self.model = model
        self.version = version

    def flush(self) -> bool:
        """Wait until every output sent is acknowledged; False (logged) if it failed."""
        if self.producer is None:
            return True
        try:
            self.producer.flush(timeout=30)
            return True
        except KafkaError as exc:
            log.warning("event=output-flush-failed error=%r", str(exc))
            return False

    def dead_letter(self, state: PartitionState, m, reason: str, detail: str) -> None:
        """Count message ``m`` as a dead letter of ``reason`` and send it unchanged."""
        state.dead_letters[reason] += 1
        self.metrics.dead_letters[reason] += 1
        report = self.malformed
        report.skipped(f"{m.topic}-{m.partition} offset {m.offset}",
                       DeadLetter(reason, detail[:DETAIL_MAX]), counted=True, check=False)
        if report.exceeded() and self.on_limit is not None:
            try:
                report.check()
            except TooManyMalformed as exc:
                self.on_limit(str(exc), reason="too-many-malformed")
        topic = self.config.dead_letter_topic_name
        if topic is None or self.producer is None:
            return
        headers = [
            ("reason", reason.encode()),
            ("detail", detail[:DETAIL_MAX].encode("utf-8", "replace")),
            ("source-topic", m.topic.encode()),
            ("source-partition", str(m.partition).encode()),
            ("source-offset", str(m.offset).encode()),
        ]
        try:
            self.producer.send(topic, key=m.key, value=m.value, headers=headers)
        except MessageSizeTooLargeError:
            headers.append(("truncated-from", str(len(m.value)).encode()))
            self.producer.send(topic, key=m.key, value=m.value[: self.max_bytes],
                               headers=headers)

    def send_prediction(self, key: bytes | None, value: bytes) -> None:
        """Send one prediction message (JSON ``value``) to ``predictions_topic``."""
        self.producer.send(self.config.predictions_topic, key=key, value=value)
        self.metrics.predictions += 1

    def publish_model(self, model: ObservableOperatorModel, version: int, records: int,
                      loss: float, fitted: list[tuple[str, bytes]] | None = None) -> None:
        """Send ``model`` (and its HMM, right after it) to ``models_topic``, if set.

        ``fitted``: more headers, saying what the model was fitted on (local refits:
        :meth:`connectors.kafka.local_refits.FittedOn.headers`).
        """
        topic = self.config.models_topic
        if not topic or self.producer is None:
            return
        headers = [
            ("format", b"streamspec.ObservableOperatorModel/1"),
            ("model-version", str(version).encode()),
            ("records", str(records).encode()),
            ("loss", repr(loss).encode()),
            *(fitted or []),
        ]
        key = self.client_id.encode()
        try:
            self.producer.send(topic, key=key, value=model.to_bytes(), headers=headers)
            hmm = getattr(model, "hmm", None)
            if hmm is not None:
                _, value, hmm_headers = encode_hmm(hmm, version, records, self.client_id)
                # the model's key: the same partition, so the HMM stays right after its model
                self.producer.send(topic, key=key, value=value, headers=hmm_headers)
        except KafkaError as exc:  # e.g. larger than max_request_size: it is still served
            self.metrics.model_publish_failures += 1
            log.warning("event=model-publish-failed version=%d topic=%s error=%r (the model "
                        "is served and saved; only its message is missing)", version, topic,
                        str(exc)[:DETAIL_MAX])
