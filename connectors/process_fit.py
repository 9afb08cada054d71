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
no lock while it waits: the poll loop runs at full speed. The worker runs at the
caller's scheduling priority unless told otherwise (:func:`start_worker`, the daemon's
``refit_nice``): the daemon's duty cycle keeps refits to half of one core in CPU time,
and a lower priority (nice 10, the default until issue 21) made them wait for every
other job on shared cores, so that a 2-3 s fit took 30-50 s and the model aged by as
much (docs/kafka-daemon.md, "Model age").

A worker whose parent dies (even by SIGKILL) exits within half a second: a
watchdog thread notices that it was orphaned.

Examples
--------
>>> from streamspec import MomentAccumulator
>>> acc = MomentAccumulator(window=1)   # triples: a fit over windows keeps no factors
>>> acc.learn_many("abcabcabcaabbcc" * 20)
>>> model = ProcessMEstimator(rank=2, max_sweeps=2).fit(acc)
>>> model.symbols, model.n_symbols, model.factors is not None
(['a', 'b', 'c'], 3, True)
>>> shutdown_worker()
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import threading
import time
import uuid
import weakref
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from connectors.refit_start import RefitStart
from streamspec.core.fit_data import long_windows_of, triples_of
from streamspec.core.mestimator import MEstimator
from streamspec.core.model import ObservableOperatorModel
from streamspec.core.triples import Triples
from streamspec.core.windows import WindowCounts

__all__ = ["ProcessMEstimator", "shutdown_worker", "start_worker", "sparse_counts", "NICE"]

log = logging.getLogger("streamspec.refit")

_pool: ProcessPoolExecutor | None = None
_pool_lock = threading.Lock()
NICE = 0
"""The worker's default niceness increment: the consumer's priority (see the module doc)."""
_nice = [NICE]  # the one the next worker starts with
_BLAS_THREADS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
_FITTED = ("factors_", "weighting_", "loss_history_", "rank_", "model_", "refit_")


def _worker() -> ProcessPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ProcessPoolExecutor(max_workers=1,
                                        mp_context=multiprocessing.get_context("spawn"),
                                        initializer=_init_worker, initargs=(_nice[0],))
        return _pool


def start_worker(nice: int | None = None) -> Future:
    """Start the worker process now, in the background (its imports take a second or so).

    ``nice``: its scheduling priority, as an increment over this process's (default
    :data:`NICE`, or the last one given; a running worker with another one is replaced).
    The returned future is done once the worker is up.
    """
    if nice is not None and nice != _nice[0]:
        _nice[0] = int(nice)
        shutdown_worker()
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


def _init_worker(nice: int = NICE) -> None:
    """In the worker: lower its priority, and exit as soon as the parent is gone."""
    try:
        if nice:
            os.nice(nice)  # asked for: on busy cores the consumer goes first
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


_KEPT: dict = {}  # in the worker: the last fit's reusable state and its token


def _fit_in_worker(params: dict, triples: Triples, labels, init, token: str | None = None):
    """In the worker: one fit; warm from the state kept by the previous fit if ``token`` is its.

    The state (:class:`~streamspec.core.projected_state.ProjectedState`: bases, moments,
    weighting blocks, the counts fitted) stays here; the parent only holds its token. The
    weights the refit keeps are ``init``'s (the partitions' learned ones), not the state's.
    """
    cpu0 = time.process_time()
    est = MEstimator(**params)
    state = _KEPT.get("state") if token is not None and _KEPT.get("token") == token else None
    _KEPT.clear()  # the previous state is freed before this fit allocates its own
    if state is not None and isinstance(init, RefitStart):
        state = init.onto(state)  # the stream's weights, merged by the parent
    model, new_state = est.fit_with_state(triples, init=state if state is not None else init)
    new_token = None
    if new_state is not None:
        new_token = uuid.uuid4().hex
        _KEPT.update(token=new_token, state=new_state)
    if labels is not None:
        model.symbols = list(labels)
    attrs = {name: getattr(est, name) for name in _FITTED if hasattr(est, name)}
    attrs["worker_cpu_seconds_"] = time.process_time() - cpu0
    attrs["worker_niceness_"] = os.nice(0)
    return model, attrs, new_token


class ProcessMEstimator(MEstimator):
    """:class:`~streamspec.core.mestimator.MEstimator` fitting in a worker process (same parameters)."""

    def fit(self, data, init=None) -> ObservableOperatorModel:
        """Fit in the worker process; same arguments and result as ``MEstimator.fit``.

        A refit from the model this process's last fit returned is a warm refit from that
        fit's state, which the worker kept (``MEstimator.fit_with_state``: bases, moments and
        weighting blocks reused, a cost proportional to the change; docs/math.md section
        10); ``refit_`` says which path it took. Any other ``init`` (a model read back at a
        restart, or after the worker was restarted) warm-starts from its factors.
        ``worker_cpu_seconds_``, ``worker_niceness_``: the worker's CPU time for this fit,
        and the niceness it ran at.

        A previous model ``init`` goes as its :class:`~connectors.refit_start.RefitStart`
        (factors, HMM, learned weights; no rank: ``"auto"`` chooses again). Sends O(distinct
        triples + n·k²) bytes to the worker and back; the fit costs what ``MEstimator.fit``
        costs on sparse counts.
        """
        self._validate()
        triples, labels = sparse_counts(data)
        start = init if isinstance(init, RefitStart) or init is None else RefitStart.of(init)
        t0 = time.perf_counter()
        token = _TOKENS.get(id(init)) if init is not None else None
        if token is not None and token[0]() is not init:
            token = None  # another object at a reused address
        params = self.get_params()
        bound = getattr(self, "warm_sweeps_", None)
        if token is None and bound is not None and init is not None:
            # a warm start from factors: bounded, as MEstimator.warm_start's copy is; a refit
            # from the kept state is not (it computes what a cold fit computes)
            params.update(max_sweeps=bound, max_outer=1)
        for attempt in range(2):
            try:
                future = _submit(_fit_in_worker, params, triples, labels, start,
                                 None if token is None else token[1])
                model, attrs, new_token = future.result()
                break
            except BrokenProcessPool:  # the worker died (e.g. killed): start a new one
                shutdown_worker()
                if attempt:
                    raise
        log.info("event=worker-fit seconds=%.3f cpu_seconds=%.3f path=%s (the worker's CPU "
                 "time: below the seconds when other processes had the cores)",
                 time.perf_counter() - t0, attrs["worker_cpu_seconds_"],
                 getattr(attrs.get("refit_"), "path", "-"))
        for name, value in attrs.items():
            setattr(self, name, value)
        self.model_ = model
        _TOKENS.clear()  # the worker keeps one state: the last fit's
        if new_token is not None:
            _TOKENS[id(model)] = (weakref.ref(model), new_token)
        return model


    def warm_start(self, sweeps: int) -> ProcessMEstimator:
        """A copy for refits: bounded to ``sweeps`` sweeps in one outer iteration when it
        starts from a model's factors (``MEstimator.warm_start``), unbounded when the worker
        refits from the state it kept (as the refitter does in-process). O(parameters)."""
        copy = self.clone()
        copy.warm_sweeps_ = int(sweeps)
        return copy


_TOKENS: dict[int, tuple] = {}  # id(model) -> (its weak reference, the token of its state)
