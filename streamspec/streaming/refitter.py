"""Scheduled, warm-started refits of a model on a growing accumulator, inline or in a thread."""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from streamspec.core import defaults
from streamspec.core.params import get_params
from streamspec.streaming.fit_record import FitRecord
from streamspec.streaming.refits import fit_once, keeps_state, refit_estimator

__all__ = ["Refitter", "FitRecord", "refit_estimator", "keeps_state"]

log = logging.getLogger("streamspec.refit")


@dataclass(frozen=True)
class _Current:
    """Everything a reader needs about the current model; replaced by one assignment."""

    model: Any = None
    prepared: Any = None
    n_seen: int = 0
    n_triples: float = 0.0
    state: Any = None  # what the next warm refit reuses (the estimator's fit_with_state)


class Refitter:
    """Decides when to refit, fits (inline or in a worker thread) and swaps the model atomically.

    The refitter owns no data: the caller keeps a
    :class:`~streamspec.MomentAccumulator` and reports each batch of learned symbols
    with :meth:`observe`. When a trigger fires the refitter fits the estimator on the
    counts: the first fit is cold (the estimator as given). An estimator with
    ``fit_with_state`` (:class:`~streamspec.SpectralEstimator`, the projected
    :class:`~streamspec.MEstimator`) hands back the state of each fit, and the next fit
    is a warm refit from it, proportional to the change of the counts (docs/math.md
    section 10: the previous bases kept while they still fit, the moments updated from the
    triples that changed, the weighting blocks of unchanged symbols reused; the record's
    ``path`` says how it went). Otherwise (the dense formulation, or the first fit after
    :meth:`adopt`) an estimator whose ``fit`` accepts ``init`` is warm-started from the
    previous model's factors R, S (W re-estimated at its operators) with at most
    ``sweeps`` alternating sweeps in a single outer iteration.

    Parameters
    ----------
    estimator
        Anything with ``fit(accumulator) -> model``; its constructor parameters must be
        readable as attributes of the same name (sklearn/river convention,
        :class:`~streamspec.core.params.Estimator`), because each fit uses a fresh copy
        (:func:`refit_estimator`: ``rank`` clamped to the alphabet size n, ``min_proba``
        to ``0.5 / n`` when it is not below ``1 / n``, and, when warm, the estimator's
        own ``warm_start(sweeps)``). The given object is never fitted itself.
    refit_every
        Fit after this many newly observed symbols (``None``: no count trigger).
    refit_interval
        Fit when this many seconds have passed since the last trigger and at least one
        symbol arrived meanwhile (``None``: no time trigger). Checked in :meth:`observe`.
    sweeps
        Alternating-minimisation sweeps of a warm refit (a small bound).
    background
        ``False`` (default): fits run inside :meth:`observe`, deterministically.
        ``True``: :meth:`observe` copies the accumulator (a snapshot of its sparse counts
        and stream tails: O(distinct triples + streams), never an n³ array) and a single
        worker thread fits on it; the new model replaces the old one by a single attribute
        assignment, so readers see the old model or the new one, never a mix. A trigger
        that fires while a fit is running is coalesced: the symbols keep counting and the
        next fit starts, on fresher counts, at the first :meth:`observe` after it ends.
    prepare
        Optional ``prepare(model) -> object``, run after each successful fit (in the
        worker thread in background mode) and swapped in together with the model as
        :attr:`prepared` (e.g. tables of predictions).
    max_records
        How many :class:`FitRecord` to keep (older ones are dropped; counters are not).

    Attributes
    ----------
    n_fits
        Successful fits so far.
    n_failures
        Failed fits (the previous model was kept; see :attr:`last_error`). Each one is
        also logged as a WARNING on the ``"streamspec.refit"`` logger, with the
        exception.
    last_error
        ``"ExceptionType: message"`` of the last failed fit, ``None`` if none failed
        since the last success.
    records
        The last ``max_records`` fits, oldest first.

    Notes
    -----
    Nothing here densifies the counts: the estimator receives the accumulator (or its
    snapshot) and reads its sparse triples (``MomentAccumulator.triples()``).

    Thread safety: :meth:`observe` reads the accumulator, so it must be called by the
    thread that writes the accumulator, or under the same lock. The worker only ever
    touches its private snapshot. Fitting errors never propagate out of the worker (nor
    out of :meth:`observe` in inline mode): they are recorded and the old model stays.
    Pickling (and ``copy.deepcopy``) keep the current model and the statistics but not a
    fit in progress.

    Examples
    --------
    >>> from streamspec import MomentAccumulator, MEstimator
    >>> acc = MomentAccumulator()
    >>> refitter = Refitter(MEstimator(rank=2, weighting="identity"), refit_every=500)
    >>> for t in range(1_200):
    ...     _ = acc.learn_one("abcab"[t % 5])
    ...     _ = refitter.observe(1, acc)
    >>> refitter.n_fits, refitter.fitted_on_symbols, [r.warm for r in refitter.records]
    (2, 1000, [False, True])
    >>> p = refitter.model.predict_proba_next([acc.alphabet.index_of("c")])
    >>> acc.symbols[int(p.argmax())]
    'a'

    """

    def __init__(
        self,
        estimator,
        refit_every: int | None = 10_000,
        refit_interval: float | None = None,
        sweeps: int = defaults.WARM_SWEEPS,
        background: bool = False,
        prepare: Callable[[Any], Any] | None = None,
        max_records: int = 100,
    ):
        if not callable(getattr(estimator, "fit", None)):
            raise TypeError(f"estimator must have a fit method, got {estimator!r}")
        # why: a bad estimator setting (rank=0, weighting="bogus") would make every refit
        # fail; refuse it now, naming it, rather than count failures later
        settings = get_params(estimator)
        defaults.check_settings(**{k: v for k, v in settings.items()
                                   if k in _ESTIMATOR_SETTINGS and not (v is None and k == "rank")})
        if refit_every is not None and (
            isinstance(refit_every, bool) or not isinstance(refit_every, int) or refit_every < 1
        ):
            raise ValueError(f"refit_every must be a positive integer or None, got {refit_every!r}")
        if refit_interval is not None and (
            isinstance(refit_interval, bool)
            or not isinstance(refit_interval, int | float)
            or not refit_interval > 0
        ):
            raise ValueError(
                "refit_interval must be a positive number of seconds or None, "
                f"got {refit_interval!r}"
            )
        if isinstance(sweeps, bool) or not isinstance(sweeps, int) or sweeps < 1:
            raise ValueError(f"sweeps must be a positive integer, got {sweeps!r}")
        if isinstance(max_records, bool) or not isinstance(max_records, int) or max_records < 1:
            raise ValueError(f"max_records must be a positive integer, got {max_records!r}")
        self.estimator = estimator
        self.refit_every = refit_every
        self.refit_interval = refit_interval
        self.sweeps = sweeps
        self.background = bool(background)
        self.prepare = prepare
        self.max_records = max_records
        self._init_runtime()
        self._current = _Current()
        self._seen = 0
        self._since = 0
        self._last_trigger = time.monotonic()
        self.n_fits = 0
        self.n_failures = 0
        self.last_error: str | None = None
        self.last_fit_seconds: float | None = None
        self.records: deque[FitRecord] = deque(maxlen=max_records)
        self._attempts = 0
        self._closed = False

    def _init_runtime(self) -> None:
        self._lock = threading.Lock()  # guards the bookkeeping written by the worker
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ state

    @property
    def model(self):
        """The current model (``None`` before the first successful fit)."""
        return self._current.model

    @property
    def prepared(self):
        """What ``prepare`` returned for the current model (``None`` without ``prepare``)."""
        return self._current.prepared

    @property
    def current(self) -> tuple[Any, Any]:
        """``(model, prepared)``, read together (consistent even while a fit swaps)."""
        cur = self._current
        return cur.model, cur.prepared

    @property
    def fitted_on_symbols(self) -> int:
        """Observed symbols when the current model's snapshot was taken (0 before any fit)."""
        return self._current.n_seen

    @property
    def fitted_on_triples(self) -> float:
        """Triples counted in the current model's snapshot (0 before any fit)."""
        return self._current.n_triples

    @property
    def n_seen(self) -> int:
        """Symbols reported to :meth:`observe` so far."""
        return self._seen

    @property
    def busy(self) -> bool:
        """Whether a background fit is running."""
        t = self._thread
        return t is not None and t.is_alive()

    @property
    def loss_history(self) -> list[float]:
        """Final training loss of each kept fit record, oldest first (NaN if not reported)."""
        return [r.loss for r in self.records if r.error is None]

    @property
    def last_loss_history(self) -> list[float]:
        """Training loss after each sweep of the last successful fit."""
        for r in reversed(self.records):
            if r.error is None:
                return list(r.losses)
        return []

    # ------------------------------------------------------------------ triggers

    def due(self) -> bool:
        """Whether a trigger has fired (without fitting)."""
        if self._since <= 0:
            return False
        if self.refit_every is not None and self._since >= self.refit_every:
            return True
        return (
            self.refit_interval is not None
            and time.monotonic() - self._last_trigger >= self.refit_interval
        )

    def until_due(self) -> int:
        """Symbols that can arrive before the count trigger fires (1 when it is due now).

        Lets a hot loop call :meth:`observe` once per batch instead of once per symbol;
        without ``refit_every`` this is large, so a caller relying on ``refit_interval``
        should cap its batches itself.
        """
        if self.refit_every is None:
            return 1 << 30
        return max(1, self.refit_every - self._since)

    def observe(self, n_new: int, accumulator) -> bool:
        """Report ``n_new`` newly learned symbols; fit if a trigger fires.

        Returns whether a fit was run (inline) or started (background).
        """
        self._seen += n_new
        self._since += n_new
        if not self.due():
            return False
        return self.fit_now(accumulator)

    def fit_now(self, accumulator) -> bool:
        """Fit now, whatever the triggers (inline: synchronously; background: in the worker).

        Returns ``False`` without fitting when the accumulator holds no triple yet, when
        the refitter is closed, or when a background fit is already running.
        """
        if self._closed or self.busy:
            return False
        if not accumulator.n_triples > 0:
            return False
        self._since = 0
        self._last_trigger = time.monotonic()
        if not self.background:
            self._fit(accumulator, self._seen)
            return True
        snapshot = accumulator.copy()
        self._thread = threading.Thread(
            target=self._fit,
            args=(snapshot, self._seen),
            name="streamspec-refit",
            daemon=True,
        )
        self._thread.start()
        return True

    def adopt(self, model, n_seen: int = 0, n_triples: float = 0.0) -> None:
        """Install ``model`` (e.g. read from a checkpoint or a model topic) as the current one.

        The next fit then warm-starts from its factors, as if this refitter had fitted
        it: a restarted daemon or a newly elected refitter need not start cold.
        ``prepare`` runs on it as on a fitted model.
        """
        prepared = self.prepare(model) if self.prepare is not None else None
        with self._lock:
            self._current = _Current(model, prepared, n_seen, n_triples)

    def wait(self, timeout: float | None = None) -> bool:
        """Join the running background fit, if any; returns whether none is left running."""
        t = self._thread
        if t is not None:
            t.join(timeout)
            if t.is_alive():
                return False
        return True

    def close(self) -> None:
        """Wait for a running fit and refuse further fits."""
        self._closed = True
        self.wait()

    # ------------------------------------------------------------------ fitting

    def _fit(self, data, n_seen: int) -> None:
        t0, cpu0 = time.perf_counter(), time.thread_time()
        est, warm, model, prepared, error, state, path = None, False, None, None, None, None, "cold"
        try:
            cur = self._current
            est, model, state, warm, path = fit_once(self.estimator, data, cur.model, cur.state,
                                                     self.sweeps)
            if self.prepare is not None:
                prepared = self.prepare(model)
        except Exception as exc:  # noqa: BLE001 - recorded, the old model is kept
            error = f"{type(exc).__name__}: {exc}"
            log.warning("event=refit_failed attempt=%d symbols=%d error=%r (the previous model "
                        "is kept)", self._attempts + 1, getattr(data, "n", -1), error,
                        exc_info=exc)
        seconds = time.perf_counter() - t0
        # this thread's CPU time, and another process's that fitted for it (it says so)
        cpu = time.thread_time() - cpu0 + float(getattr(est, "worker_cpu_seconds_", 0.0))
        history = getattr(est, "loss_history_", None) if error is None else None
        losses = tuple(float(v) for outer in (history or []) for v in outer)
        sweeps = (
            sum(max(len(outer) - 1, 0) for outer in history) if history is not None else None
        )
        n_triples = float(data.n_triples)
        with self._lock:
            self._attempts += 1
            record = FitRecord(
                index=self._attempts,
                warm=warm,
                n_seen=n_seen,
                n_triples=n_triples,
                n_alphabet=data.n,
                rank=(getattr(model, "rank", None) if model is not None
                      else getattr(est, "rank", None)),
                seconds=seconds,
                sweeps=sweeps,
                losses=losses,
                error=error,
                path=path,
                cpu_seconds=cpu,
            )
            self.records.append(record)
            self.last_fit_seconds = seconds
            if error is None:
                # the atomic swap (the state goes with its model)
                self._current = _Current(model, prepared, n_seen, n_triples, state)
                self.n_fits += 1
                self.last_error = None
            else:
                self.n_failures += 1
                self.last_error = error

    # ------------------------------------------------------------------ pickling

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        del state["_lock"], state["_thread"]
        # why: the warm state is as large as the counts; a copy refits from the model instead
        cur = state["_current"]
        state["_current"] = _Current(cur.model, cur.prepared, cur.n_seen, cur.n_triples)
        return state

    def __setstate__(self, state: dict) -> None:
        state.pop("inline_catch_ups", None)  # pickled while background fits could start early
        self.__dict__.update(state)
        self._init_runtime()

    def __repr__(self) -> str:
        mode = "background" if self.background else "inline"
        return (
            f"Refitter({type(self.estimator).__name__}, refit_every={self.refit_every}, "
            f"refit_interval={self.refit_interval}, sweeps={self.sweeps}, {mode}; "
            f"{self.n_fits} fits, {self.n_failures} failures)"
        )


# settings of an estimator checked when a Refitter is built (the same rules everywhere)
_ESTIMATOR_SETTINGS = ("rank", "penalty", "weighting", "factorization", "formulation", "max_outer",
                       "max_sweeps", "tol", "n_restarts", "shrinkage", "ridge", "filter", "window",
                       "min_proba", "n_conditions", "backoff", "hmm_states")
