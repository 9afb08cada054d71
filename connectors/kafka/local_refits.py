"""Refits on this daemon's own partitions (the local state backend).

See :mod:`connectors.kafka.refit_policy` for when it refits: every daemon refits on
the merge of its partitions when ``refit_every`` new symbols arrived or
``refit_interval`` passed (and ``refit_duty`` allows), saves the model beside the
checkpoints and publishes it to ``models_topic`` (if set).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from connectors.config import DaemonConfig
from connectors.kafka.outputs import Outputs
from connectors.kafka.refit_policy import RefitPolicy
from connectors.metrics import DaemonMetrics
from connectors.state.files import PartitionState, StateStore, merge_accumulators
from streamspec.core.checkpoint import CheckpointError
from streamspec.core.hidden_markov_model import HiddenMarkovModel
from streamspec.core.mestimator import MEstimator
from streamspec.core.model import ObservableOperatorModel
from streamspec.streaming.accumulator import MomentAccumulator
from streamspec.streaming.with_hmm import WithHMM

__all__ = ["LocalRefits", "FittedOn"]

log = logging.getLogger("streamspec.daemon")


class LocalRefits(RefitPolicy):
    """Refits on this daemon's partitions; models saved beside the checkpoints.

    ``states`` is the daemon's live dict of partition states, read under ``lock``.
    The saved model (``<state_dir>/<topic>/model.ckpt``, and its HMM) records its
    version in its metadata (``model_version``): it is loaded at start, served as
    that version (the next refit is the next version, so versions go on across
    restarts), and warm-starts the first refit. At shutdown a last refit covers
    every symbol learned (:meth:`start_final_refit`).
    """

    def __init__(self, config: DaemonConfig, estimator: MEstimator | WithHMM, outputs: Outputs,
                 metrics: DaemonMetrics, store: StateStore,
                 states: Mapping[object, PartitionState], lock: threading.RLock,
                 counts_bytes: Callable[[], int]):
        super().__init__(config, estimator, outputs, metrics)
        self.store, self.states, self.lock, self.counts_bytes = store, states, lock, counts_bytes
        self.new_records = 0
        # what each refit's counts held, by the refitter's symbol total at its snapshot
        self._snapshots: dict[int, FittedOn] = {}
        model = self._load(ObservableOperatorModel, self.store.model_path(config.topic), "model")
        if model is not None:  # a restart warm-starts from the saved model's factors
            outputs.serve(model, _version_of(model))
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
        # the version it is about to be served as (a model read back at start keeps its own)
        version = model.metadata.get(_VERSION_KEY) or str(self.outputs.version + 1)
        try:
            model.replace(metadata={**model.metadata, _VERSION_KEY: version}).save(
                self.store.model_path(self.config.topic))
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

    def start_final_refit(self, hurry) -> bool:
        """Keep a merged copy of the partitions' counts if symbols arrived since the last fit."""
        unfitted = self.new_records + self.refitter.n_seen - self.refitter.fitted_on_symbols
        if not self.refits_on or unfitted <= 0:
            return False
        with self.lock:
            view = _PartitionsView(self)
            if not view.n_triples:
                log.info("event=final-refit skipped=too-few-triples min_triples=%d",
                         self.config.min_triples)
                return False
            # the counts, the symbols new in them, and all the symbols they hold
            self._final = (view.copy(), self.new_records,
                           self.refitter.n_seen + self.new_records)
        self.new_records = 0
        return True

    def take_model(self) -> None:
        model = self.refitter.model
        if model is None or model is self.outputs.model:
            return
        record = self._record_fit()
        version = self.outputs.version + 1
        fitted = self.fitted_on(self.refitter.fitted_on_symbols)
        if record is not None:
            log.info(
                "event=refit version=%d n=%d warm=%s symbols=%d triples=%d seconds=%.3f "
                "loss=%.6g path=%s rank=%s fitted_records=%d fitted_offsets=%s age=%.3f",
                version, self.refitter.n_fits, record.warm, record.n_alphabet,
                int(record.n_triples), record.seconds, record.loss, record.path, record.rank,
                -1 if fitted is None else fitted.records,
                "-" if fitted is None else fitted.offsets_text(),
                float("nan") if fitted is None else time.time() - fitted.time,
            )
        self.outputs.serve(model, version)
        self.outputs.publish_model(model, version, self.metrics.records, self.metrics.last_loss,
                                   None if fitted is None else fitted.headers())

    def note_snapshot(self) -> None:
        """When a refit's counts are copied (under the lock): what they hold, and when.

        Keyed by the refitter's symbol total that the fit will record (its ``n_seen``:
        the symbols observed plus those about to be reported). O(partitions).
        """
        key = self.refitter.n_seen + self.new_records
        self._snapshots[key] = FittedOn(
            records=sum(s.records for s in self.states.values()),
            offsets={tp.partition: s.offset for tp, s in self.states.items()},
            time=time.time(),
        )

    def fitted_on(self, n_seen: int) -> FittedOn | None:
        """What the counts of the model fitted at ``n_seen`` held; older snapshots are dropped."""
        fitted = self._snapshots.get(n_seen)
        for key in [k for k in self._snapshots if k <= n_seen]:
            del self._snapshots[key]
        return fitted


@dataclass(frozen=True)
class FittedOn:
    """What the counts of a refit held when they were copied: how model age is measured.

    Attributes
    ----------
    records
        Records learned by the partitions held (their totals, restored ones included).
    offsets
        Next offset of each partition: every record before it is in the counts.
    time
        When the counts were copied (Unix seconds).

    Examples
    --------
    >>> FittedOn(5, {0: 3, 1: 2}, 1700000000.25).offsets_text()
    '0:3,1:2'
    >>> FittedOn(5, {0: 3, 1: 2}, 1700000000.25).headers()
    [('fitted-records', b'5'), ('fitted-offsets', b'{"0": 3, "1": 2}'), ('snapshot-time', b'1700000000.250')]
    """

    records: int
    offsets: dict[int, int]
    time: float

    def offsets_text(self) -> str:
        """``partition:offset,...`` (the log line's ``fitted_offsets``). O(partitions)."""
        return ",".join(f"{p}:{o}" for p, o in sorted(self.offsets.items())) or "-"

    def headers(self) -> list[tuple[str, bytes]]:
        """The model message's headers that say what it was fitted on. O(partitions)."""
        return [("fitted-records", str(int(self.records)).encode()),
                ("fitted-offsets", json.dumps({str(p): int(o) for p, o in
                                               sorted(self.offsets.items())}).encode()),
                ("snapshot-time", f"{self.time:.3f}".encode())]


_VERSION_KEY = "model_version"  # in the saved model's metadata


def _version_of(model: ObservableOperatorModel) -> int:
    """The version a saved model was served as (0: saved before versions were recorded)."""
    try:
        return max(0, int(model.metadata.get(_VERSION_KEY, 0)))
    except ValueError:
        return 0


class _PartitionsView:
    """What :class:`~streamspec.streaming.refitter.Refitter` reads of an accumulator, over all partitions.

    ``n_triples`` is a cheap sum; ``copy()`` (called only when a refit starts)
    merges the partitions by label, keeping the previous model's label order so
    that the refit can warm-start from it, and their learned weights into the
    previous model, so that the refit keeps them.
    """

    def __init__(self, policy: LocalRefits):
        self._policy = policy

    @property
    def n_triples(self) -> float:
        total = sum(s.acc.n_triples for s in self._policy.states.values())
        return total if total >= max(1, self._policy.config.min_triples) else 0.0

    def copy(self) -> MomentAccumulator:
        p = self._policy
        p.note_snapshot()
        acc = merge_accumulators((s.acc for s in p.states.values()), p.label_order)
        p.label_order = list(acc.symbols)
        p.learned_into_model([s.learned() for s in p.states.values()])
        return acc
