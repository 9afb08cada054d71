"""A river classifier that predicts the next symbol of many interleaved streams."""

from __future__ import annotations

import threading
from collections.abc import Hashable
from typing import Any

import numpy as np
from river import base

from streamspec.adapters.lazy_proba import LazyProba
from streamspec.adapters.online_estimator import check_estimator, online_estimator
from streamspec.adapters.refit_schedule import RefitSchedule
from streamspec.core import defaults
from streamspec.core.hidden_markov_model import HiddenMarkovModel
from streamspec.streaming.accumulator import MomentAccumulator
from streamspec.streaming.online_predictor import OnlinePredictor
from streamspec.streaming.refitter import Refitter

__all__ = ["SpectralHMM", "PREDICTORS"]

_BUILD_LOCK = threading.Lock()  # the first calls from several threads build the state once
PREDICTORS = ("mixture", "hmm")


class SpectralHMM(RefitSchedule, base.Classifier):
    """Next-symbol prediction for many interleaved streams, learned from their counts.

    Each call of :meth:`learn_one` gives the symbol ``y`` that stream ``x[key]`` just
    emitted; :meth:`predict_proba_one` gives the distribution of that stream's *next*
    symbol. All streams share one model, fitted on the counts of symbol triples and
    stream starts (:class:`~streamspec.MomentAccumulator`) every ``refit_every`` symbols
    (and/or ``refit_interval`` seconds) by a :class:`~streamspec.Refitter`. A prediction
    is streamspec's predictor (:mod:`streamspec.core.backoff`): the spectral model, the
    Kneser–Ney trigram of the counts and the forward filter of an HMM of the counts
    (each stream keeps its hidden-state vector), mixed by weights learned from every
    symbol before it is counted (:class:`~streamspec.streaming.online_predictor.OnlinePredictor`).

    Parameters
    ----------
    rank
        Rank of the spectral model (clamped to the current number of symbols), or
        ``"auto"`` (default): the estimator's own choice at each refit.
    estimator
        ``"spectral"`` (default): θ_spec, :class:`~streamspec.SpectralEstimator`, which fits
        fastest. ``"m"``: :class:`~streamspec.MEstimator` (warm-started refits, at most
        ``sweeps`` sweeps). Or an estimator object, used as a template (its ``window``
        and ``hmm_states`` are overridden).
    window
        Symbols of context of the spectral model's own prediction (its window filter):
        ``"auto"`` (default) each fit's choice (:mod:`streamspec.core.filter_window`), or an
        integer; the trigram always sees two, the HMM the whole stream.
    refit_every
        Refit after this many learned symbols (all streams together); ``None``: only
        ``refit_interval``.
    refit_interval
        Refit after this many seconds (checked every 256 learned symbols).
    sweeps
        Alternating sweeps of a warm-started refit (``estimator="m"``).
    background
        Fit in a worker thread on a snapshot of the counts instead of inside
        :meth:`learn_one`. With ``refit_every``, on a schedule by symbols, not by the
        clock, and with inline's models: each fit runs on the counts of exactly the symbols
        an inline refit sees, from the same previous model, and is waited for, so the
        predictions are inline's on every run (the worker thread only keeps the fit off
        the caller's stack; :mod:`~streamspec.adapters.refit_schedule` says why fits do
        not start early). With ``refit_interval`` alone (already a clock), or after
        :meth:`refit` with ``wait=False``, a finished model is swapped in at the next symbol.
    key
        Name of the feature holding the stream identifier. ``None`` (default), or an ``x``
        without that field: the default stream.
    min_proba
        Probability (before renormalising) of symbols that appeared after the last fit.
    forgetting
        Forgetting factor of the counts, in (0, 1] (1: plain counts).
    max_symbols
        Cap of the alphabet (``None``: unbounded). Once ``max_symbols`` labels are known,
        new ones are counted, and predicted, as the reserved label ``"<other>"``.
    n_states
        States of the HMM in the predictions (``None``: the estimator's ``"auto"``, the
        size chosen on held-out counts, 2..64). :attr:`hmm` is that HMM with the labels;
        :meth:`predict_state_one` each stream's filtered state.
    predictor
        ``"mixture"`` (default): the mixed prediction. ``"hmm"``: the HMM's filter alone
        (the mixture until the first fit with an HMM).
    count_window
        The window L of the counts (``MomentAccumulator(window=L)``; not ``window``, the
        spectral model's filter): ``"auto"`` (default,
        :data:`streamspec.core.defaults.COUNT_WINDOW`) counts the (2L+1)-grams around each
        symbol with the L the alphabet needs (L = 1, plain triples, from 128 symbols on;
        see :class:`MomentAccumulator`), and the HMM of the predictions is fitted over
        them, so that it can have more states than the alphabet has symbols (up to 64
        with ``n_states=None``; ``docs/math.md`` section 11); 1 counts triples only.
    lazy_proba
        ``True`` (default): :meth:`predict_proba_one` returns a
        :class:`~streamspec.adapters.lazy_proba.LazyProba`, a ``dict`` whose entries are made
        only when a caller reads them all (``p.get(y)`` reads the row). ``False``: a plain
        ``dict`` built at once (for C extensions that read a dict's storage directly).

    Attributes
    ----------
    model
        The current :class:`~streamspec.ObservableOperatorModel` (``None`` before the
        first fit); its ``backoff`` holds the trigram and the HMM.
    refitter
        The :class:`~streamspec.Refitter`: number of fits, their durations and losses.
    online
        The :class:`~streamspec.streaming.online_predictor.OnlinePredictor`: the streams'
        contexts and states, the learned weights and the prequential log loss.
    symbols
        Labels seen so far, in order of first appearance.

    Notes
    -----
    Before the first fit (fewer than ``refit_every`` symbols, or no triple yet), the
    predictions are the frequencies of the symbols seen so far (before any symbol: an
    empty dict, so :meth:`predict_one` returns ``None``). Symbols that appear after the
    last fit are in the predictions with probability ``min_proba`` (renormalised); a
    context holding one falls back to what the model knows (the spectral model to the
    longest known suffix, the trigram to its bigram level, the HMM moves by its
    transitions only).

    Costs per symbol: :meth:`learn_one` O(1) for the counts plus O(E · K + K²) for the
    weights and the stream's HMM state (E = 66 blends, K states) and, the first time a
    context is met, O(n · d) for its rows (cached, bounded); :meth:`predict_one` O(n · K)
    below 8 · K · 32 symbols (the whole row is cheaper there), else typically O(K · 32 +
    entries) (an exact pruned argmax); :meth:`predict_proba_one` O(n · K) for the row, river's
    dict over every label made only when a caller reads every entry (O(n) more, once;
    ``p.get(y)`` is O(1): :class:`~streamspec.adapters.lazy_proba.LazyProba`). Memory: the
    counts (16 bytes per distinct triple),
    a model of rank d (n · d² floats) with its trigram (O(nnz)) and HMM (n · K), one
    integer and K floats per stream, the row cache (at most 2²² floats) and the dense parts
    stacked for the mixed row (at most 2²¹ floats, :mod:`streamspec.streaming.dense_row`).

    Examples
    --------
    >>> model = SpectralHMM(rank=3, refit_every=20, key="user")
    >>> for t in range(60):
    ...     model.learn_one({"user": t % 2}, "abc"[(t // 2) % 3])
    >>> model.refitter.n_fits
    3
    >>> model.predict_one({"user": 0})   # user 0 just emitted "a", "b", "c", ..., "c"
    'a'
    >>> p = model.predict_proba_one({"user": 1})
    >>> sorted(p), round(sum(p.values()), 12)
    (['a', 'b', 'c'], 1.0)

    """

    def __init__(
        self,
        rank: int | str = defaults.RANK,
        estimator: Any = "spectral",
        window: int | str = defaults.WINDOW,
        refit_every: int | None = defaults.REFIT_EVERY,
        refit_interval: float | None = None,
        sweeps: int = defaults.WARM_SWEEPS,
        background: bool = False,
        key: str | None = None,
        min_proba: float = defaults.ONLINE_MIN_PROBA,
        forgetting: float = 1.0,
        max_symbols: int | None = None,
        n_states: int | None = None,
        predictor: str = "mixture",
        count_window: int | str = defaults.COUNT_WINDOW,
        lazy_proba: bool = True,
    ):
        self.rank = rank
        self.estimator = estimator
        self.window = window
        self.refit_every = refit_every
        self.refit_interval = refit_interval
        self.sweeps = sweeps
        self.background = background
        self.key = key
        self.min_proba = min_proba
        self.forgetting = forgetting
        self.max_symbols = max_symbols
        self.n_states = n_states
        self.predictor = predictor
        self.count_window = count_window
        self.lazy_proba = lazy_proba
        self._built = False
        self._validate()  # why: a bad setting is refused before any symbol is learned

    def _validate(self) -> None:
        """Check every setting (:func:`streamspec.core.defaults.check_settings`). O(1)."""
        defaults.check_settings(
            rank=self.rank, window=self.window, refit_every=self.refit_every,
            refit_interval=self.refit_interval, sweeps=self.sweeps, min_proba=self.min_proba,
            forgetting=self.forgetting, max_symbols=self.max_symbols, n_states=self.n_states,
        )
        check_estimator(self.estimator)
        if not isinstance(self.lazy_proba, bool):
            raise ValueError(f"lazy_proba must be True or False, got {self.lazy_proba!r}")
        if self.predictor not in PREDICTORS:
            raise ValueError(f"predictor must be one of {PREDICTORS}, got {self.predictor!r}")
        try:  # the accumulator's own rules (a window in 1..10 or "auto", room for max_symbols)
            self._new_counts()
        except ValueError as exc:
            raise ValueError(f"count_window: {exc}") from None

    def _new_counts(self) -> MomentAccumulator:
        """The empty counts of the settings. O(1)."""
        kwargs = {} if self.max_symbols is None else {"max_symbols": self.max_symbols}
        return MomentAccumulator(forgetting=self.forgetting, window=self.count_window, **kwargs)

    # ------------------------------------------------------------------ state

    def _build(self) -> None:
        """Create the learning state (on first use, so that ``__init__`` only stores)."""
        with _BUILD_LOCK:
            if not self._built:
                self._build_state()

    def _build_state(self) -> None:
        self._validate()  # again: a setting may have been changed after construction
        self._acc = self._new_counts()
        est = online_estimator(self.estimator, rank=self.rank, window=self.window,
                               min_proba=self.min_proba, n_states=self.n_states)
        self._refitter = Refitter(est, refit_every=self.refit_every, refit_interval=self.refit_interval,
                                  sweeps=self.sweeps, background=self.background)
        self._online = OnlinePredictor(window=None if self.window == "auto" else self.window)
        self._lock = threading.Lock()
        self._labels: list[Hashable] = []
        self._label_index: dict[Hashable, int] = {}  # label -> its position in _labels
        self._freq: list[int] = []
        self._best = 0
        self._n = 0  # symbols learned
        self._fit_at = self._first_fit_at()  # the next scheduled fit (None: no schedule)
        self._countdown = self._next_countdown()
        self._unreported = 0
        self._built = True

    def _sync(self):
        """The online predictor following the refitter's current model (swapped in here, by
        the learner's thread, under its lock, once a fit has finished). O(1)."""
        model = self._refitter._current.model
        if model is not None and model is not self._online.model:
            self._online.set_model(model)
        return self._online.model

    @property
    def refitter(self) -> Refitter:
        if not self._built:
            self._build()
        return self._refitter

    @property
    def online(self) -> OnlinePredictor:
        if not self._built:
            self._build()
        return self._online

    @property
    def model(self):
        return self.refitter.model

    @property
    def hmm(self) -> HiddenMarkovModel | None:
        """The HMM of the current model's predictions, with the labels (``None`` before a fit
        with one)."""
        model = self.refitter.model
        hmm = None if model is None or model.backoff is None else model.backoff.hmm
        if hmm is None:
            return None
        return HiddenMarkovModel(hmm.startprob_, hmm.transmat_, hmm.emissionprob_,
                                 symbols=self._labels[: hmm.n_symbols])

    @property
    def rank_(self) -> int | None:
        """The rank of the current model (``None`` before the first fit)."""
        model = self.refitter.model
        return None if model is None else int(model.rank)

    @property
    def accumulator(self) -> MomentAccumulator:
        """The triple counts (read them under no concurrent learning)."""
        if not self._built:
            self._build()
        return self._acc

    @property
    def symbols(self) -> list:
        return list(self._labels) if self._built else []

    @property
    def _multiclass(self) -> bool:
        return True

    # ------------------------------------------------------------------ learning

    def learn_one(self, x: dict, y: Hashable, **kwargs: Any) -> None:
        """Record that the stream of ``x`` emitted ``y``; refits when a trigger fires."""
        if not self._built:
            self._build()
        key = x.get(self.key) if self.key is not None else None
        with self._lock:
            i = self._acc.learn_one(y, key)
            if i == len(self._freq):  # a new label (or, at the cap, the label "<other>")
                self._labels.append(y if self.max_symbols is None else self._acc.symbols[i])
                self._label_index[self._labels[i]] = i
                self._freq.append(0)
            self._sync()
            self._online.observe(key, i)
            f = self._freq
            f[i] += 1
            if f[i] > f[self._best]:
                self._best = i
            self._unreported += 1
            self._n += 1
            self._countdown -= 1
            if self._countdown <= 0:
                self._trigger()

    def refit(self, wait: bool = True) -> bool:
        """Fit now on all the symbols learned so far (``wait``: join a background fit).

        Returns whether a new model was fitted and swapped in: ``False`` when there was
        nothing to fit on (no triple yet), a background fit was already running, or
        the fit failed (then the previous model is kept, the failure is logged and
        counted in :attr:`n_failures`). With ``wait=False`` in background mode, whether
        a fit was started. Costs one fit.
        """
        if not self._built:
            self._build()
        with self._lock:
            self._refitter.observe(self._unreported, self._acc)
            self._unreported = 0
            attempts = self._refitter.n_fits + self._refitter.n_failures
            started = self._refitter.fit_now(self._acc)
            self._countdown = self._next_countdown()
        if wait:
            self._refitter.wait()
            if started and self._refitter.n_fits + self._refitter.n_failures > attempts:
                return self._refitter.records[-1].error is None
        return started

    @property
    def n_failures(self) -> int:
        """Refits that failed so far (each logged as a warning; the previous model was kept)."""
        return self._refitter.n_failures if self._built else 0

    @property
    def last_error(self) -> str | None:
        """``"ExceptionType: message"`` of the last failed refit (``None`` after a success)."""
        return self._refitter.last_error if self._built else None

    def end_stream(self, key: Hashable = None) -> None:
        """Forget the history of stream ``key`` (its next symbol starts a new sequence)."""
        if not self._built:
            return
        with self._lock:
            self._online.end(key)
            self._acc.end(key)

    # ------------------------------------------------------------------ predicting

    def predict_state_one(self, x: dict) -> dict[int, float]:
        """Filtered posterior ``Pr(h_t = h | the stream's symbols)`` over the HMM's states.

        ``{state: probability}`` (states of :attr:`hmm`) after the stream's last symbol; a
        stream without a symbol since the current HMM was swapped in gets its
        ``startprob_``; ``{}`` before a fit with an HMM. O(K).

        Examples
        --------
        >>> model = SpectralHMM(rank=2, refit_every=200, n_states=2)
        >>> model.predict_state_one({})
        {}
        >>> for t in range(400):
        ...     model.learn_one({}, ("ab" if (t // 20) % 2 == 0 else "cd")[t % 2])
        >>> model.hmm
        HiddenMarkovModel(n_states=2, n_symbols=4, labelled)
        >>> post = model.predict_state_one({})
        >>> sorted(post), round(sum(post.values()), 9)
        ([0, 1], 1.0)
        """
        if not self._built:
            return {}
        with self._lock:
            model = self._sync()
            if model is None or model.backoff is None or model.backoff.hmm is None:
                return {}
            post = self._online.posterior(x.get(self.key) if self.key is not None else None)
        return dict(enumerate(post.tolist()))

    def _row(self, key: Hashable) -> np.ndarray | None:
        """The next-symbol distribution over all labels (the model's, then the newer ones at
        ``min_proba``), ``None`` before a model. O(n · K)."""
        with self._lock:
            model = self._sync()
            if model is None:
                return None
            if self.predictor == "hmm" and model.backoff is not None and model.backoff.hmm is not None:
                p = self._online.hmm_row(key)
            else:
                p = self._online.row(key)
            n_labels = len(self._freq)
        extra = n_labels - p.size
        if extra <= 0:
            return p / p.sum()
        # why: one array and one pass (the row is new: concatenate, full and a divide were three)
        floor, out = min(self.min_proba, 0.5 / n_labels), np.empty(n_labels)
        total = float(p.sum()) + extra * floor
        np.divide(p, total, out=out[: p.size])
        out[p.size:] = floor / total
        return out

    def predict_proba_one(self, x: dict, **kwargs: Any) -> dict[Hashable, float]:
        """Distribution of the next symbol of the stream of ``x`` (``{}`` before any symbol).

        A ``dict`` over every label seen (river's contract), ``{label: probability}``: a
        :class:`~streamspec.adapters.lazy_proba.LazyProba`, whose entries are made when a
        caller first reads them all (iteration, ``items()``, ``dict(p)``, ...); ``p[y]``,
        ``p.get(y)``, ``y in p`` and ``len(p)`` read the row directly. O(n · K) for the row,
        O(n) more for the entries, once, if they are read."""
        if not self._built:
            return {}
        p = self._row(x.get(self.key) if self.key is not None else None)
        if p is None:
            f = list(self._freq)  # one atomic copy: consistent even under concurrent learning
            total = sum(f)
            if not total:
                return {}
            return dict(zip(self._labels[: len(f)], [c / total for c in f], strict=True))
        # river's dict, its 2,000 floats and insertions made only if a caller reads them all
        # (LazyProba); labels learned meanwhile (other threads) are after p: not keys
        if not self.lazy_proba:
            return dict(zip(self._labels, p.tolist(), strict=False))
        return LazyProba(p, self._labels, self._label_index)

    def predict_one(self, x: dict, **kwargs: Any) -> Hashable | None:
        """The most probable next symbol of the stream of ``x`` (``None`` before any symbol).
        Typically O(K · 32 + the context's trigram entries and top symbols of its own row),
        exact (:meth:`~streamspec.streaming.online_predictor.OnlinePredictor.argmax`), plus
        O(n · d) the first time a context is met (its own row, cached); O(n · K) when the
        bound does not settle it or labels are newer than the model."""
        if not self._built:
            return None
        key = x.get(self.key) if self.key is not None else None
        if self.predictor == "mixture":
            with self._lock:
                model = self._sync()
                best = None if model is None else self._online.argmax(key)  # no O(n) work if it can
                n_labels = len(self._freq)
            # labels newer than the model have the floor (before renormalising): they win only
            # if every other symbol is below it
            if best is not None and best[1] >= min(self.min_proba, 0.5 / n_labels):
                return self._labels[best[0]]
        p = self._row(key)  # the HMM alone, or a floor above every symbol
        if p is None:
            return self._labels[self._best] if self._freq else None
        return self._labels[int(p.argmax())]

    # ------------------------------------------------------------------ river plumbing

    @classmethod
    def _unit_test_params(cls):
        yield {}  # the defaults: river's checks then only see the count-based predictions
        yield {"rank": 2, "refit_every": 50}  # several fits within each check's 200 samples
        yield {"refit_every": 50}  # the same with rank="auto"
        yield {"rank": 2, "refit_every": 50, "estimator": "m", "sweeps": 2}
        yield {"rank": 2, "refit_every": 50, "n_states": 2, "predictor": "hmm"}
        yield {"refit_every": 50, "count_window": 2}  # the HMM over windows of two symbols

    def _unit_test_skips(self) -> set[str]:
        if self.background and self.refit_every is None:
            # The check compares a model with its deep copy fed the same samples; fits on the
            # clock finish at different times in the two copies, so their predictions may
            # legitimately differ for a while (fits on refit_every's schedule do not).
            # Everything else is checked in this mode too.
            return {"check_shuffle_features_no_impact"}
        return set()

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state.pop("_lock", None)
        return state

    def __setstate__(self, state: dict) -> None:
        state.setdefault("lazy_proba", True)  # pickled before the setting existed
        self.__dict__.update(state)
        if self._built:
            self._lock = threading.Lock()
            if "_label_index" not in state:  # pickled before predict_proba_one's lazy dict
                self._label_index = {label: i for i, label in enumerate(self._labels)}
            if "_n" not in state:  # pickled before fits were scheduled by symbols
                self._n, self._fit_at = 0, None
            # pickled while scheduled fits could start early: a finished model is swapped in
            # at the next symbol, as every scheduled one now
            self.__dict__.pop("_swap_at", None)
