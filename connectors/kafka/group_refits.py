"""One refitter for a group of daemons sharing the state topic, one model sequence.

See :mod:`connectors.kafka.refit_policy` for when it refits: the owner of partition 0
refits on the merge of the latest snapshot of every partition and publishes each
model with the next version to the model topic; every daemon serves the newest
model it has read there.
"""

from __future__ import annotations

import logging
import time

from kafka.errors import KafkaError

from connectors.config import DaemonConfig
from connectors.kafka.outputs import Outputs
from connectors.kafka.refit_policy import RefitPolicy
from connectors.metrics import DaemonMetrics
from connectors.model_topic import (
    REFITTER_PARTITION,
    ModelRecord,
    NewestModel,
    encode_hmm,
    encode_model,
    is_hmm_message,
)
from connectors.state.files import merge_accumulators
from connectors.state.snapshots import LatestSnapshots
from connectors.state.topic import SEND_TIMEOUT, TopicBackend
from connectors.state.topic_io import TopicFollower, ensure_topic, read_topic
from streamspec.core.checkpoint import CheckpointError
from streamspec.core.hidden_markov_model import HiddenMarkovModel
from streamspec.core.mestimator import MEstimator
from streamspec.core.model import ObservableOperatorModel
from streamspec.streaming.accumulator import MomentAccumulator
from streamspec.streaming.with_hmm import WithHMM

__all__ = ["GroupRefits"]

log = logging.getLogger("streamspec.daemon")


class GroupRefits(RefitPolicy):
    """Refits of a group of daemons sharing the state topic: one refitter, one model sequence.

    The owner of :data:`~connectors.model_topic.REFITTER_PARTITION` refits on
    ``backend.snapshots`` (the global view) and publishes through
    ``backend.producer``; every member follows the model topic and serves its newest
    model.
    """

    def __init__(self, config: DaemonConfig, estimator: MEstimator | WithHMM, outputs: Outputs,
                 metrics: DaemonMetrics, backend: TopicBackend):
        super().__init__(config, estimator, outputs, metrics)
        self.backend = backend
        self.models = NewestModel()
        self.is_refitter = False
        self.next_version = 1
        self.client_id = ""
        self._follower: TopicFollower | None = None
        self._fitted: ObservableOperatorModel | None = None
        self._seen_generation = -1
        self._fit_generation = -1
        self._fit_records = 0
        self._view_changed_at = time.monotonic()
        self._refit_idle = max(1.0, 2 * config.checkpoint_interval)

    def connect(self, client_id: str) -> None:
        self.client_id = client_id
        ensure_topic(self.config.bootstrap, self.config.model_topic_name, 1, compact=False)
        if self._follower is None:
            self._follower = TopicFollower(self.config.bootstrap, self.config.model_topic_name,
                                           self._on_model_message, f"{client_id}-models").start()
        log.info("event=model-topic topic=%s", self.config.model_topic_name)

    def close(self) -> None:
        if self._follower is not None:
            self._follower.close()

    def _on_model_message(self, m) -> None:
        if is_hmm_message(m.headers):
            return  # the HMMs are for the topic's readers; daemons serve the operator model
        try:
            self.models.offer(ModelRecord.from_message(m.value, m.headers))
        except ValueError as exc:
            log.warning("event=foreign-model-message offset=%d error=%r", m.offset, str(exc))

    def on_assigned(self, tp) -> None:
        if tp.partition == REFITTER_PARTITION:
            self._take_over()

    def on_revoked(self, tp) -> None:
        if tp.partition == REFITTER_PARTITION:
            if self.is_refitter:
                log.info("event=refitter-resigned version=%d", self.next_version - 1)
            self.is_refitter = False

    def status(self) -> dict[str, int]:
        return {"refitter": int(self.is_refitter), "global_records": self.backend.snapshots.records()}

    def _take_over(self) -> None:
        """Become the refitter: continue the version sequence from the model topic's newest model."""
        newest, newest_hmm = _read_models(self.config.bootstrap, self.config.model_topic_name,
                                          f"{self.client_id}-takeover")
        if newest.record is not None:
            self.models.offer(newest.record)
            try:  # the new refitter warm-starts from the newest published model
                adopted = ObservableOperatorModel.from_bytes(newest.record.value)
                self.refitter.adopt(adopted)
                if self.hmm_estimator is not None:
                    self.hmm_estimator.adopt(adopted, newest_hmm.get(newest.record.version))
            except ValueError as exc:
                log.warning("event=takeover-model-unreadable error=%r", str(exc))
        self.next_version = max(self.next_version, self.models.version + 1)
        self._fit_generation = -1  # refit on the current global view
        self.is_refitter = True
        log.info("event=refitter-elected next_version=%d", self.next_version)

    def maybe_refit(self) -> None:
        """Refitter only: refit on the global view when it changed (see the module doc)."""
        if not self.is_refitter or self.refitter.busy:
            return
        cfg, snapshots = self.config, self.backend.snapshots
        now = time.monotonic()
        generation = snapshots.generation
        if generation != self._seen_generation:
            self._seen_generation, self._view_changed_at = generation, now
        if generation == self._fit_generation:
            return  # nothing new since the last fit
        new_records = snapshots.records() - self._fit_records
        idle = now - self._view_changed_at >= self._refit_idle
        by_count = bool(cfg.refit_every) and new_records >= cfg.refit_every
        by_time = cfg.refit_interval is not None and now - self.fit_taken_at >= cfg.refit_interval
        if not (idle or by_count or by_time):
            return
        if not idle and self._duty_waits(now):
            return
        view = _GlobalView(snapshots, self)
        self._fit_generation = generation
        if view.n_triples >= max(1, cfg.min_triples):
            self._fit_records = view.records
            self.refitter.fit_now(view)

    def take_model(self) -> None:
        self._publish_fitted()
        self._serve_newest()

    def start_final_refit(self, hurry) -> bool:
        """The refitter fits the global view once more, before it hands partition 0 back.

        Blocking (it publishes while it is still the refitter, so that versions never
        collide with its successor's); ``hurry`` stops the wait. Always False: nothing is
        left for :meth:`finish_final_refit`.
        """
        if not self.is_refitter or not self._wait(hurry):
            return False
        self.take_model()
        snapshots = self.backend.snapshots
        if snapshots.generation == self._fit_generation or (
                self.refitter.model is not None and snapshots.records() == self._fit_records):
            return False  # the last fit (perhaps the one just waited for) had every record
        self._fit_generation = snapshots.generation
        view = _GlobalView(snapshots, self)
        if view.n_triples < max(1, self.config.min_triples):
            return False
        self._fit_records = view.records
        self.refitter.fit_now(view)
        log.info("event=final-refit records=%d triples=%d (a second SIGTERM or SIGINT stops "
                 "waiting for it)", view.records, int(view.n_triples))
        if self._wait(hurry):
            self.take_model()
        return False

    def _serve_newest(self) -> None:
        """Serve the newest model read from the model topic."""
        record = self.models.record
        if record is None or record.version <= self.outputs.version:
            return
        try:
            model = record.model()
        except CheckpointError as exc:
            log.error("event=model-unreadable version=%d error=%r", record.version, str(exc))
            self.outputs.version = record.version  # skip it; the next one will do
            return
        self.outputs.serve(model, record.version)
        log.info("event=model version=%d records=%d refitter=%s", record.version, record.records,
                 record.refitter)

    def _publish_fitted(self) -> None:
        """Publish a model the refitter just fitted, with the next version."""
        model = self.refitter.model
        if model is None or model is self._fitted:
            return
        self._fitted = model
        record = self._record_fit()
        if not self.is_refitter:
            return  # partition 0 moved away while it was fitting: the new refitter publishes
        version = self.next_version
        self.next_version += 1
        key, value, headers = encode_model(model, version, self._fit_records,
                                           self.metrics.last_loss, self.client_id)
        if not self._send(key, value, headers, "model-publish-failed", version):
            return
        self.models.offer(ModelRecord(version, self._fit_records, value, self.client_id))
        hmm = getattr(model, "hmm", None)
        if hmm is not None:  # right after its model
            self._send(*encode_hmm(hmm, version, self._fit_records, self.client_id),
                       "hmm-publish-failed", version)
        log.info(
            "event=refit version=%d records=%d seconds=%.3f loss=%.6g warm=%s",
            version, self._fit_records, self.metrics.last_fit_seconds, self.metrics.last_loss,
            record.warm if record is not None else None,
        )

    def _send(self, key: bytes, value: bytes, headers: list, event: str, version: int) -> bool:
        try:
            self.backend.producer.send(self.config.model_topic_name, key=key, value=value,
                                       headers=headers).get(timeout=SEND_TIMEOUT)
        except (KafkaError, TimeoutError) as exc:
            log.warning("event=%s version=%d error=%r", event, version, str(exc))
            return False
        return True


def _read_models(bootstrap: str, topic: str, client_id: str
                 ) -> tuple[NewestModel, dict[int, HiddenMarkovModel]]:
    """The newest model of the model topic, and the HMMs published with each version."""
    newest = NewestModel()
    hmms: dict[int, HiddenMarkovModel] = {}

    def take(m) -> None:
        if is_hmm_message(m.headers):
            try:
                hmms[int(dict(m.headers)["model-version"])] = HiddenMarkovModel.from_bytes(m.value)
            except (KeyError, ValueError):
                pass
            return
        try:
            newest.offer(ModelRecord.from_message(m.value, m.headers))
        except ValueError:
            pass

    try:
        read_topic(bootstrap, topic, take, client_id=client_id)
    except (KafkaError, OSError, TimeoutError) as exc:
        log.warning("event=takeover-read-failed error=%r", str(exc))
    return newest, hmms


class _GlobalView:
    """The merge of the latest snapshot of every partition, for one refit.

    Decoded and merged once, when created (in the poll loop); ``copy()`` hands the
    merged accumulator to :class:`~streamspec.streaming.refitter.Refitter`, keeping the
    previous model's label order so that the refit can warm-start from it; the
    snapshots' learned weights, merged, become the previous model's.
    """

    def __init__(self, snapshots: LatestSnapshots, policy: RefitPolicy):
        states = snapshots.states()  # one consistent set of snapshots
        self.records = sum(s.records for s in states)
        self._acc = merge_accumulators((s.acc for s in states), policy.label_order)
        policy.label_order = list(self._acc.symbols)
        policy.learned_into_model([s.weights for s in states])

    @property
    def n_triples(self) -> float:
        return self._acc.n_triples

    def copy(self) -> MomentAccumulator:
        return self._acc
