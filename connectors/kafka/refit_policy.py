"""When the daemon refits, on which counts, and how it publishes and serves the models.

Two policies, chosen with the state backend:

* :class:`LocalRefits` (local files): every daemon refits on the merge of its own
  partitions when ``refit_every`` new symbols arrived or ``refit_interval``
  passed (and ``refit_duty`` allows), saves the model beside the checkpoints and
  publishes it to ``models_topic`` (if set);
* :class:`GroupRefits` (state topic): the owner of partition 0 is the group's
  refitter: it refits on the merge of the latest snapshot of every partition
  whenever they changed and either ``refit_every`` new symbols arrived or the view
  has been idle for ``max(1 s, 2 checkpoint intervals)``, and publishes each
  model with the next version to the model topic; every daemon serves the newest
  model it has read there.

Refits run in the background (:class:`~streamspec.streaming.refitter.Refitter`);
the poll loop only takes finished models (:meth:`RefitPolicy.after_batch`).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Mapping

from kafka.errors import KafkaError

from connectors.config import DaemonConfig, mestimator_params
from connectors.kafka.outputs import DETAIL_MAX, Outputs
from connectors.metrics import DaemonMetrics
from connectors.model_topic import (
    REFITTER_PARTITION,
    ModelRecord,
    NewestModel,
    encode_hmm,
    encode_model,
    is_hmm_message,
)
from connectors.process_fit import ProcessMEstimator
from connectors.state.files import PartitionState, StateStore, merge_accumulators
from connectors.state.snapshots import LatestSnapshots
from connectors.state.topic import SEND_TIMEOUT, TopicBackend
from connectors.state.topic_io import TopicFollower, ensure_topic, read_topic
from streamspec.core.checkpoint import CheckpointError
from streamspec.core.hidden_markov_model import HiddenMarkovModel
from streamspec.core.mestimator import MEstimator
from streamspec.core.model import ObservableOperatorModel
from streamspec.streaming.accumulator import MomentAccumulator
from streamspec.streaming.refitter import FitRecord, Refitter
from streamspec.streaming.with_hmm import WithHMM

__all__ = ["RefitPolicy", "LocalRefits", "GroupRefits", "make_estimator"]

log = logging.getLogger("streamspec.daemon")


def make_estimator(config: DaemonConfig) -> MEstimator | WithHMM:
    """The refits' estimator: MEstimator's own defaults for every setting not given.

    With ``hmm_states``, wrapped in :class:`~streamspec.WithHMM`: each refit also fits
    an HMM with that many states on the same counts (in the refit thread; the
    operator model's fit still runs in the worker process with ``refit_process``).
    """
    kind = ProcessMEstimator if config.refit_process else MEstimator
    est = kind(**mestimator_params(rank=config.rank, penalty=config.penalty,
                                   weighting=config.weighting, sweeps=config.sweeps,
                                   outer=config.outer, formulation=config.formulation))
    if config.hmm_states is None:
        return est
    return WithHMM(est, config.hmm_states, sweeps=config.warm_sweeps)


class RefitPolicy:
    """What both policies share: the background refitter and the bookkeeping of its fits.

    Parameters
    ----------
    config
        The daemon's settings.
    estimator
        The refits' estimator (wrapped in :class:`~streamspec.WithHMM` with ``hmm_states``).
    outputs
        Where models are served (and, locally, published).
    metrics
        Refits, losses, fit times and failures are counted here.
    """

    def __init__(self, config: DaemonConfig, estimator: MEstimator | WithHMM, outputs: Outputs,
                 metrics: DaemonMetrics):
        self.config, self.outputs, self.metrics = config, outputs, metrics
        self.hmm_estimator = estimator if isinstance(estimator, WithHMM) else None
        self.refitter = Refitter(
            estimator,
            refit_every=config.refit_every or None,
            refit_interval=config.refit_interval,
            sweeps=config.warm_sweeps,
            background=True,
            prepare=self.prepare,  # in the refit thread: no fsync in the poll loop
        )
        self.label_order: list = []  # the last model's labels: refits warm-start from it
        self.fit_taken_at = time.monotonic()
        self._failures_logged = 0

    # hooks (template methods) --------------------------------------------------------

    def prepare(self, model: ObservableOperatorModel) -> None:
        """Called in the refit thread with each new model, before it is taken."""

    def connect(self, client_id: str) -> None:
        """Create the clients the policy needs (``KafkaError`` to be retried)."""

    def close(self) -> None:
        """Stop what :meth:`connect` started."""

    def on_assigned(self, tp) -> None:
        """A partition was restored and is read from now on."""

    def on_revoked(self, tp) -> None:
        """A partition was revoked or lost."""

    def learned(self, n: int) -> None:
        """``n`` new symbols were learned by the poll loop."""

    def take_model(self) -> None:
        """Serve (and publish) a model the refitter finished, if any."""

    def maybe_refit(self) -> None:
        """Start a refit if one is due."""

    def status(self) -> dict[str, int]:
        """Extra figures of the policy for the status line and the metrics."""
        return {}

    # shared ---------------------------------------------------------------------------

    def after_batch(self) -> None:
        """After every poll: take a finished model, report failed refits, start a due one."""
        self.take_model()
        if self.refit_failures() > self._failures_logged:
            self._failures_logged = self.metrics.refit_failures
            log.warning("event=refit-failed failures=%d error=%r (the previous model is kept)",
                        self.metrics.refit_failures,
                        str(getattr(self.refitter, "last_error", None))[:DETAIL_MAX])
        self.maybe_refit()

    def refit_failures(self) -> int:
        """Failed refits so far (the refitter's count; also kept in the metrics)."""
        self.metrics.refit_failures = int(getattr(self.refitter, "n_failures", 0))
        return self.metrics.refit_failures

    def _record_fit(self) -> FitRecord | None:
        """Account for the model just taken: fit time, refits, loss; the fit's record."""
        if self.hmm_estimator is not None and self.hmm_estimator.error is not None:
            log.warning("event=hmm-failed states=%d error=%r", self.config.hmm_states,
                        self.hmm_estimator.error)
        self.fit_taken_at = time.monotonic()
        self.metrics.refits = self.refitter.n_fits
        record = self.refitter.records[-1] if self.refitter.records else None
        if record is not None:
            self.metrics.last_loss = record.loss
            self.metrics.last_fit_seconds = record.seconds
        return record

    def _duty_waits(self, now: float) -> bool:
        """Whether ``refit_duty`` asks to wait (refits kept to a fraction of the time)."""
        duty, seconds = self.config.refit_duty, self.metrics.last_fit_seconds
        return (duty < 1 and not math.isnan(seconds)
                and now - self.fit_taken_at < seconds * (1 - duty) / duty)


class LocalRefits(RefitPolicy):
    """Refits on this daemon's partitions; models saved beside the checkpoints.

    ``states`` is the daemon's live dict of partition states, read under ``lock``.
    The saved model (``<state_dir>/<topic>/model.ckpt``, and its HMM) is loaded at
    start, served as version 0, and warm-starts the first refit.
    """

    def __init__(self, config: DaemonConfig, estimator: MEstimator | WithHMM, outputs: Outputs,
                 metrics: DaemonMetrics, store: StateStore,
                 states: Mapping[object, PartitionState], lock: threading.RLock,
                 counts_bytes: Callable[[], int]):
        super().__init__(config, estimator, outputs, metrics)
        self.store, self.states, self.lock, self.counts_bytes = store, states, lock, counts_bytes
        self.new_records = 0
        model = self._load(ObservableOperatorModel, self.store.model_path(config.topic), "model")
        if model is not None:  # a restart warm-starts from the saved model's factors
            outputs.serve(model, 0)
            self.label_order = list(model.symbols or [])
            self.refitter.adopt(model)
            if self.hmm_estimator is not None:  # and from the saved HMM
                hmm = self._load(HiddenMarkovModel, self.store.hmm_path(config.topic), "hmm")
                self.hmm_estimator.adopt(model, hmm)

    @staticmethod
    def _load(kind, path, what: str):
        if not path.exists():
            return None
        try:
            return kind.load(path)
        except CheckpointError as exc:
            log.warning("event=%s-unreadable path=%s error=%r", what, path, str(exc))
            return None

    def prepare(self, model: ObservableOperatorModel) -> None:
        try:
            model.save(self.store.model_path(self.config.topic))
            hmm = getattr(model, "hmm", None)
            if hmm is not None:
                hmm.save(self.store.hmm_path(self.config.topic))
        except OSError as exc:
            log.warning("event=model-save-failed error=%r", str(exc))

    def learned(self, n: int) -> None:
        self.new_records += n

    def maybe_refit(self) -> None:
        if self.new_records == 0 and not self.refitter.due():
            return
        if self._duty_waits(time.monotonic()):
            return  # keep refits to a fraction of the time; the symbols keep counting
        n_new, self.new_records = self.new_records, 0
        with self.lock:
            try:
                self.refitter.observe(n_new, _PartitionsView(self))
            except MemoryError as exc:  # the snapshot for the refit: the counts are intact
                log.error("event=refit-skipped error=%r counts_mb=%.1f",
                          f"MemoryError: {exc}", self.counts_bytes() / 1e6)

    def take_model(self) -> None:
        model = self.refitter.model
        if model is None or model is self.outputs.model:
            return
        record = self._record_fit()
        if record is not None:
            log.info(
                "event=refit n=%d warm=%s symbols=%d triples=%d seconds=%.3f loss=%.6g",
                self.refitter.n_fits, record.warm, record.n_alphabet, int(record.n_triples),
                record.seconds, record.loss,
            )
        version = self.outputs.version + 1
        self.outputs.serve(model, version)
        self.outputs.publish_model(model, version, self.metrics.records, self.metrics.last_loss)


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


class _PartitionsView:
    """What :class:`~streamspec.streaming.refitter.Refitter` reads of an accumulator, over all partitions.

    ``n_triples`` is a cheap sum; ``copy()`` (called only when a refit starts)
    merges the partitions by label, keeping the previous model's label order so
    that the refit can warm-start from it.
    """

    def __init__(self, policy: LocalRefits):
        self._policy = policy

    @property
    def n_triples(self) -> float:
        total = sum(s.acc.n_triples for s in self._policy.states.values())
        return total if total >= max(1, self._policy.config.min_triples) else 0.0

    def copy(self) -> MomentAccumulator:
        p = self._policy
        acc = merge_accumulators((s.acc for s in p.states.values()), p.label_order)
        p.label_order = list(acc.symbols)
        return acc


class _GlobalView:
    """The merge of the latest snapshot of every partition, for one refit.

    Decoded and merged once, when created (in the poll loop); ``copy()`` hands the
    merged accumulator to :class:`~streamspec.streaming.refitter.Refitter`, keeping the
    previous model's label order so that the refit can warm-start from it.
    """

    def __init__(self, snapshots: LatestSnapshots, policy: RefitPolicy):
        states = snapshots.states()  # one consistent set of snapshots
        self.records = sum(s.records for s in states)
        self._acc = merge_accumulators((s.acc for s in states), policy.label_order)
        policy.label_order = list(self._acc.symbols)

    @property
    def n_triples(self) -> float:
        return self._acc.n_triples

    def copy(self) -> MomentAccumulator:
        return self._acc
