"""An M-estimator whose fits run in a worker process, away from the consumer's GIL.

A refit in a thread of the daemon competes with the poll loop for the Python
interpreter lock: with the exact weighting a fit is seconds of mostly-Python
work, and the consume rate dropped to a third (see ``docs/benchmarks.md``).
:class:`ProcessMEstimator` is a drop-in :class:`~streamspec.core.mestimator.MEstimator`
for :class:`~streamspec.streaming.refitter.Refitter`: its ``fit`` sends the sparse counts (a
:class:`~streamspec.core.triples.Triples`: 16 bytes per distinct triple, never the
dense n³ array; not the stream tails) with the symbol labels, the estimator's
constructor parameters and the warm-start factors to one long-lived worker process
(``spawn``-started, so no thread state is forked), waits there for the result,
and copies back the fitted attributes. The caller's thread blocks, but it holds
no lock while it waits: the poll loop runs at full speed. The worker runs at a
lower scheduling priority (nice 10): when the cores are busy, consuming (the
exact part) goes first and refits (best effort) take the remaining CPU time.

A worker whose parent dies (even by SIGKILL) exits within half a second: a
watchdog thread notices that it was orphaned.

Examples
--------
>>> from streamspec import MomentAccumulator
>>> acc = MomentAccumulator()
>>> acc.learn_many("abcabcabcaabbcc" * 20)
>>> model = ProcessMEstimator(rank=2, max_sweeps=2).fit(acc)
>>> model.symbols, model.n_symbols, model.factors is not None
(['a', 'b', 'c'], 3, True)
>>> shutdown_worker()
"""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from connectors.refit_start import RefitStart
from streamspec.core.fit_data import long_windows_of, triples_of
from streamspec.core.mestimator import MEstimator
from streamspec.core.model import ObservableOperatorModel
from streamspec.core.triples import Triples
from streamspec.core.windows import WindowCounts

__all__ = ["ProcessMEstimator", "shutdown_worker", "start_worker", "sparse_counts"]

_pool: ProcessPoolExecutor | None = None
_pool_lock = threading.Lock()
_NICE = 10
_BLAS_THREADS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
_FITTED = ("factors_", "weighting_", "loss_history_", "rank_", "model_")


def _worker() -> ProcessPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ProcessPoolExecutor(max_workers=1,
                                        mp_context=multiprocessing.get_context("spawn"),
                                        initializer=_init_worker)
        return _pool


def start_worker() -> Future:
    """Start the worker process now, in the background (its imports take a second or so).

    The returned future is done once the worker is up.
    """
    return _submit(int)


def _submit(fn, *args) -> Future:
    # one BLAS thread in the worker: idle BLAS threads spin, stealing the consumer's cores
    saved = {k: os.environ.get(k) for k in _BLAS_THREADS}
    os.environ.update(dict.fromkeys(_BLAS_THREADS, "1"))
    try:
        return _worker().submit(fn, *args)  # the first submit spawns the worker
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _init_worker() -> None:
    """In the worker: lower its priority, and exit as soon as the parent is gone."""
    try:
        os.nice(_NICE)  # refits are best effort: on busy cores the consumer goes first
    except (AttributeError, OSError):
        pass
    parent = os.getppid()

    def watch() -> None:  # a SIGKILLed parent cannot stop us: notice being orphaned
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(0)

    threading.Thread(target=watch, name="parent-watchdog", daemon=True).start()


def shutdown_worker() -> None:
    """Stop the worker process (a fit in progress is abandoned)."""
    global _pool
    with _pool_lock:
        pool, _pool = _pool, None
    if pool is not None:
        pool.shutdown(wait=False, cancel_futures=True)


def sparse_counts(data) -> tuple[Triples | WindowCounts, list | None]:
    """``(triples, labels)`` of an accumulator (or of a :class:`Triples`), never densified; the
    window counts instead of the triples when the accumulator counts windows (L ≥ 2: the
    predictor's HMM is fitted over them, ``docs/math.md`` section 11).

    ``labels`` is ``None`` for integer alphabets. O(distinct triples or grams); the triples
    are rebuilt without their cached unpacked indices, so that only codes and weights are
    pickled to the worker.
    """
    t, labels = triples_of(data)  # raises on empty counts
    labels = list(labels) if labels is not None else None
    grams = long_windows_of(data)
    if grams is not None:
        return grams, labels
    return Triples(t.n, t.codes, t.weights), labels


def _fit_in_worker(params: dict, triples: Triples, labels, init):
    est = MEstimator(**params)
    model = est.fit(triples, init=init)
    if labels is not None:
        model.symbols = list(labels)
    attrs = {name: getattr(est, name) for name in _FITTED if hasattr(est, name)}
    return model, attrs


class ProcessMEstimator(MEstimator):
    """:class:`~streamspec.core.mestimator.MEstimator` fitting in a worker process (same parameters)."""

    def fit(self, data, init=None) -> ObservableOperatorModel:
        """Fit in the worker process; same arguments and result as ``MEstimator.fit``.

        A previous model ``init`` goes as its :class:`~connectors.refit_start.RefitStart`
        (factors, HMM, learned weights; no rank: ``"auto"`` chooses again). Sends O(distinct
        triples + n·k²) bytes to the worker and back; the fit costs what ``MEstimator.fit``
        costs on sparse counts.
        """
        self._validate()
        triples, labels = sparse_counts(data)
        start = init if isinstance(init, RefitStart) or init is None else RefitStart.of(init)
        for attempt in range(2):
            try:
                future = _submit(_fit_in_worker, self.get_params(), triples, labels, start)
                model, attrs = future.result()
                break
            except BrokenProcessPool:  # the worker died (e.g. killed): start a new one
                shutdown_worker()
                if attempt:
                    raise
        for name, value in attrs.items():
            setattr(self, name, value)
        self.model_ = model
        return model
