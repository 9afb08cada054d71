"""When the daemon refits, on which counts, and how it publishes and serves the models.

:class:`RefitPolicy` is what both policies share (the background refitter, the
bookkeeping of its fits); :func:`make_estimator` builds the refits' estimator. Two
policies, chosen with the state backend (:func:`connectors.kafka.lifecycle.choose_state`):

* :class:`~connectors.kafka.local_refits.LocalRefits` (local files): every daemon
  refits on the merge of its own partitions when ``refit_every`` new symbols
  arrived or ``refit_interval`` passed (and ``refit_duty`` allows), saves the model
  beside the checkpoints and publishes it to ``models_topic`` (if set);
* :class:`~connectors.kafka.group_refits.GroupRefits` (state topic): the owner of
  partition 0 is the group's refitter: it refits on the merge of the latest
  snapshot of every partition whenever they changed and either ``refit_every`` new
  symbols arrived or the view has been idle for ``max(1 s, 2 checkpoint
  intervals)``, and publishes each model with the next version to the model topic;
  every daemon serves the newest model it has read there.

Refits run in the background (:class:`~streamspec.streaming.refitter.Refitter`);
the poll loop only takes finished models (:meth:`RefitPolicy.after_batch`).

What a refit starts from: the previous model, with its mixing weights replaced by the
partitions' learned ones merged (:meth:`RefitPolicy.learned_into_model`, when the refit's
counts are taken: each partition's weights, from its scorer or its snapshot, averaged per
bucket over the symbols each learned from, :func:`~connectors.state.weights.merge_weights`).
A warm refit (``fit(counts, init=previous)``) keeps those weights, starts the HMM from
the previous one and skips the held-out stage of a first fit; so the model saved and
published carries what the stream taught, and a partition met for the first time starts
from it. Each partition's predictor keeps its own weights across refits.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from concurrent.futures.process import BrokenProcessPool

from connectors.config import DaemonConfig, mestimator_params
from connectors.kafka.outputs import DETAIL_MAX, Outputs
from connectors.metrics import DaemonMetrics
from connectors.process_fit import ProcessMEstimator
from connectors.state.weights import LearnedWeights, merge_weights
from streamspec.core.mestimator import MEstimator
from streamspec.core.model import ObservableOperatorModel
from streamspec.streaming.refitter import FitRecord, Refitter
from streamspec.streaming.with_hmm import WithHMM

__all__ = ["RefitPolicy", "make_estimator"]

log = logging.getLogger("streamspec.daemon")

_MEMORY_FAILURES = (MemoryError, BrokenProcessPool)  # the worker killed: mostly for memory


class _OneLineMemoryFailures(logging.Filter):
    """Drops the refitter's own report (with its traceback) of a refit that ran out of memory.

    The daemon reports it on one line (``event=refit-failed reason=memory``): it is a
    resource limit, not a bug, and a traceback of the worker process helps nobody.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not isinstance(exc, _MEMORY_FAILURES)


def _quiet_memory_failures() -> None:
    refit_log = logging.getLogger("streamspec.refit")
    if not any(isinstance(f, _OneLineMemoryFailures) for f in refit_log.filters):
        refit_log.addFilter(_OneLineMemoryFailures())


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
        self._final: tuple = (None, 0, 0)  # the final refit's counts, new symbols, all symbols
        _quiet_memory_failures()

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

    def start_final_refit(self, hurry: threading.Event) -> bool:
        """At shutdown, while the partitions are held: prepare a fit on everything learned.

        True: :meth:`finish_final_refit` fits after the partitions are handed back.
        """
        return False

    @property
    def refits_on(self) -> bool:
        """Whether refits are on at all (``refit_every`` or ``refit_interval``)."""
        return bool(self.config.refit_every or self.config.refit_interval)

    # shared ---------------------------------------------------------------------------

    def after_batch(self) -> None:
        """After every poll: take a finished model, report failed refits, start a due one."""
        self.take_model()
        self._report_failures()
        self.maybe_refit()

    def _report_failures(self) -> None:
        """One line per failed refit (``reason=memory`` when it ran out of memory)."""
        if self.refit_failures() <= self._failures_logged:
            return
        self._failures_logged = self.metrics.refit_failures
        error = str(getattr(self.refitter, "last_error", None))
        memory = error.split(":", 1)[0] in {e.__name__ for e in _MEMORY_FAILURES}
        log.warning("event=refit-failed%s failures=%d error=%r (the previous model is kept%s)",
                    " reason=memory" if memory else "", self.metrics.refit_failures,
                    error[:DETAIL_MAX], "; the counts are intact: give the daemon more memory, "
                    "or bound the alphabet with --max-symbols" if memory else "")

    def last_refit_error(self) -> str | None:
        """The exception type of the last refit if it failed (``None``: it did not)."""
        error = getattr(self.refitter, "last_error", None)
        return None if not error else str(error).split(":", 1)[0]

    def finish_final_refit(self, hurry: threading.Event) -> None:
        """Fit on the counts :meth:`start_final_refit` kept; serve, save and publish the model.

        A fit still running is waited for first. ``hurry`` set (a second signal) stops
        the waits: the saved model is then the previous one.
        """
        data, n_new, total = self._final
        self._final = (None, 0, 0)
        if not self._wait(hurry):
            return
        self.take_model()
        if data is None:
            return
        if self.refitter.model is not None and self.refitter.fitted_on_symbols >= total:
            log.info("event=final-refit skipped=covered (the refit that was running had every "
                     "symbol)")
            return
        if not self.refitter.observe(n_new, data):  # observe counts the symbols; fit if not due
            self.refitter.fit_now(data)
        log.info("event=final-refit symbols=%d triples=%d (a second SIGTERM or SIGINT stops "
                 "waiting for it)", data.n, int(data.n_triples))
        if self._wait(hurry):
            self.take_model()
            self._report_failures()

    def _wait(self, hurry: threading.Event) -> bool:
        while not self.refitter.wait(0.2):
            if hurry.is_set():
                log.warning("event=final-refit-abandoned (the saved model is the previous one)")
                return False
        return True

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
            self.metrics.last_fit_cpu_seconds = record.cpu_seconds
        return record

    def learned_into_model(self, learned: list[LearnedWeights | None]) -> None:
        """Before a refit starts: the previous model's weights become the partitions' learned
        ones merged, so that the refit keeps them. O(partitions · buckets · blends)."""
        backoff = getattr(self.refitter.model, "backoff", None)
        if backoff is None:
            return
        merged = merge_weights(learned, backoff.mixture, backoff.components)
        if merged is not None:
            backoff.mixture = merged  # the served model's copies in the partitions are theirs

    def _duty_waits(self, now: float) -> bool:
        """Whether ``refit_duty`` asks to wait (refits kept to a fraction of one core).

        Counted in the last fit's CPU seconds (the worker's), not its wall time: on cores
        busy with other work a fit of 2 s of CPU can take 30 s, and waiting 30 s more
        would only make the model older (``demos/bench_model_age.py``). The wall time
        when the CPU time is unknown.
        """
        duty, m = self.config.refit_duty, self.metrics
        seconds = m.last_fit_cpu_seconds if not math.isnan(m.last_fit_cpu_seconds) else (
            m.last_fit_seconds)
        return (duty < 1 and not math.isnan(seconds)
                and now - self.fit_taken_at < seconds * (1 - duty) / duty)
