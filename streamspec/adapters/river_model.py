"""A river classifier that predicts the next symbol of many interleaved streams."""

from __future__ import annotations

import threading
from collections.abc import Hashable
from typing import Any

from river import base

from streamspec.adapters.online_estimator import check_estimator, online_estimator
from streamspec.adapters.prediction_table import (
    CONTEXT_BITS,
    MAX_SYMBOLS,
    ROW_CACHE_FLOATS,
    PredictionTable,
    TablePreparer,
)
from streamspec.adapters.rank_selector import MODEL_FLOATS_MAX, RANK_GRID, RankScores, RankSelector
from streamspec.adapters.stream_states import StreamStates
from streamspec.core import defaults
from streamspec.streaming.accumulator import MomentAccumulator
from streamspec.streaming.refitter import Refitter

# PredictionTable, RankSelector, RankScores and the constants: re-exported (their old home)
__all__ = ["SpectralHMM", "PredictionTable", "RankSelector", "RankScores", "ROW_CACHE_FLOATS",
           "MODEL_FLOATS_MAX", "RANK_GRID"]

_TIME_CHECK = 256  # with refit_interval: symbols between two looks at the clock
_BUILD_LOCK = threading.Lock()  # the first calls from several threads build the state once
_SCORE_EVERY = 4  # rank="auto": one symbol in this many is scored under each candidate


class SpectralHMM(base.Classifier):
    """Next-symbol prediction for many interleaved streams with a spectral HMM.

    Each call of :meth:`learn_one` gives the symbol ``y`` that stream ``x[key]`` just
    emitted; :meth:`predict_proba_one` gives the distribution of that stream's *next*
    symbol. All streams share one model, learned from the counts of symbol triples
    (:class:`~streamspec.MomentAccumulator`) and refitted every ``refit_every`` symbols
    (and/or ``refit_interval`` seconds) by a :class:`~streamspec.Refitter`.

    Parameters
    ----------
    rank
        Rank of the model (clamped to the current number of symbols), or ``"auto"``
        (default): each refit also fits the ranks of a grid within a factor 2 of the
        current one, every symbol then scores each candidate before it is learned, and
        the next refit keeps the rank with the lowest online (out-of-sample) log loss
        (:class:`RankSelector`; the first fit takes the number of singular values of P21
        above the noise level). To keep learning fast only every 4th symbol is scored
        (2,500 per refit with the default ``refit_every``), at one dictionary lookup per
        candidate; each refit fits 2-5 ranks.
    estimator
        ``"spectral"`` (default): θ_spec, :class:`~streamspec.SpectralEstimator`, which
        fits in milliseconds and predicted best in our measurements (see Notes).
        ``"m"``: :class:`~streamspec.MEstimator` with its own defaults for everything
        but ``rank``, ``window`` and ``min_proba``; with an integer ``rank``, refits
        are warm-started and run at most ``sweeps`` sweeps (with ``rank="auto"`` every
        candidate rank is fitted cold, which is costly). Or an estimator object, used
        as a template (its ``window`` is overridden by ``window``).
    window
        The prediction depends on the last ``window`` symbols of the stream (the window
        filter of docs/math.md section 4); 0 predicts the stationary distribution.
    refit_every
        Refit after this many learned symbols (all streams together); ``None``: only
        ``refit_interval``.
    refit_interval
        Refit after this many seconds (checked every 256 learned symbols).
    sweeps
        Alternating sweeps of a warm-started refit (``estimator="m"``).
    background
        Fit in a worker thread on a snapshot of the counts (learning and predicting
        never wait) instead of inside :meth:`learn_one` (deterministic, default).
    key
        Name of the feature holding the stream identifier. ``None`` (default), or an
        ``x`` without that field: the default stream.
    min_proba
        Floor of every predicted probability of a fitted model; also the probability
        (before renormalising) of symbols that appeared after the last fit.
    forgetting
        Forgetting factor of the counts, in (0, 1] (1: plain counts); see
        :class:`~streamspec.MomentAccumulator`.
    max_symbols
        Cap of the alphabet (``None``: unbounded). Once ``max_symbols`` labels are
        known, new ones are counted, and predicted, as the reserved label ``"<other>"``
        (``streamspec.streaming.accumulator.OTHER``): memory stays bounded on open vocabularies.
    n_states
        ``None`` (default): no hidden-state model. An integer m: every refit also fits
        an :class:`~streamspec.HMMEstimator` with m states (``random_state=0``) on the
        same counts, warm-started from the previous HMM (O(nnz · m² · iterations) per
        refit for nnz distinct triples, in the same thread as the refit), and every
        stream keeps its filtered state vector (m floats, updated by the forward
        recursion in O(m²) per learned symbol): see :meth:`predict_state_one` and
        :attr:`hmm`. A refit whose HMM fit fails (e.g. fewer symbols than states)
        keeps the previous HMM.
    predictor
        ``"window"`` (default): predictions of the operator model from the last
        ``window`` symbols (a table lookup). ``"hmm"`` (needs ``n_states``): the HMM's
        next-symbol distribution from the stream's filtered state, ``(α T) O``,
        O(m² + n·m) per call; until the first HMM fit, the window predictions.

    Attributes
    ----------
    model
        The current :class:`~streamspec.ObservableOperatorModel` (``None`` before the
        first fit).
    refitter
        The :class:`~streamspec.Refitter`: number of fits, their durations and losses.
    symbols
        Labels seen so far, in order of first appearance.

    Notes
    -----
    With ``n_states``, a stream's state vector is started from the HMM's
    ``startprob_`` at its first symbol after the first HMM fit (symbols learned before
    that fit are not replayed) and kept across refits (warm starts keep the order of
    the states). A symbol the HMM has not seen (new since its fit) moves the state
    by the transition only, without an emission factor.

    Before the first fit (fewer than ``refit_every`` symbols, or no triple yet), the
    predictions are the frequencies of the symbols seen so far (before any symbol:
    an empty dict, so :meth:`predict_one` returns ``None``). Symbols that appear after
    the last fit are in the predictions with probability ``min_proba`` (renormalised);
    a context containing one falls back to the longest suffix the model knows.

    Prediction is a dictionary lookup: when a model is swapped in, the prediction and
    its argmax are computed for every context of ``window`` symbols (or lazily for large
    alphabets, in a cache bounded by :data:`ROW_CACHE_FLOATS`; see
    :class:`PredictionTable`), and each stream only keeps an integer code of its last
    symbols. Memory: the counts are sparse (16 bytes per distinct triple), a model of
    rank k holds n·k² floats, and ``rank="auto"`` skips ranks above
    :data:`MODEL_FLOATS_MAX` floats per model; nothing of size n² or n³ is formed.
    :meth:`predict_proba_one` returns a dict over all n labels, O(n) per call.

    Defaults, measured by progressive validation (from symbol 20,000, refits every
    10⁴ symbols; ``min_proba=1e-3`` unless said otherwise), the setting of
    ``python demos/river_pipeline.py`` (which prints the default's figures; the
    other settings are one argument away in its model list):

    - Alice (26 letters, 108k): θ_spec at window 2 and fixed rank 20 reached 2.35 nats
      per letter (2.62 with ``min_proba=1e-6``: unseen trigrams), 2.32 at rank 26, 2.47
      at rank 12; window 1 (the bigram model) 2.46; window 3 4.9-6.6 (too few counts
      per context). ``rank="auto"`` reached 2.27 (33.3% accuracy), settling at 24-26.
    - 1,000 interleaved sessions of a 5-state, 12-symbol HMM (150k symbols): rank 5
      1.833, rank 12 (full) 2.33, ``"auto"`` 1.832 (settling at 6); the true HMM's
      filter scores 1.76.
    - θ_spec is the default estimator because ``rank="auto"`` fits several ranks at
      every refit and the best ranks found were the high ones, where θ_M and θ_spec
      predict alike; ``estimator="m"`` with a fixed rank is the choice when a lower
      rank is wanted. Batch fits of both, with times, are compared in
      :class:`~streamspec.MEstimator`'s Notes and in docs/benchmarks.md.

    At full rank and window 2, θ_spec predicts the empirical trigram conditional;
    lower ranks smooth it, and the floor ``min_proba`` (clamped below ``1 / n``) keeps
    unseen trigrams from costing ``-log(1e-6)``.

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
        window: int = defaults.WINDOW,
        refit_every: int | None = defaults.REFIT_EVERY,
        refit_interval: float | None = None,
        sweeps: int = defaults.WARM_SWEEPS,
        background: bool = False,
        key: str | None = None,
        min_proba: float = defaults.ONLINE_MIN_PROBA,
        forgetting: float = 1.0,
        max_symbols: int | None = None,
        n_states: int | None = None,
        predictor: str = "window",
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
        if self.predictor not in ("window", "hmm"):
            raise ValueError(f"predictor must be 'window' or 'hmm', got {self.predictor!r}")
        if self.predictor == "hmm" and self.n_states is None:
            raise ValueError("predictor='hmm' needs n_states")

    # ------------------------------------------------------------------ state

    def _build(self) -> None:
        """Create the learning state (on first use, so that ``__init__`` only stores)."""
        with _BUILD_LOCK:
            if not self._built:
                self._build_state()

    def _build_state(self) -> None:
        self._validate()  # again: a setting may have been changed after construction
        w = self.window
        if self.max_symbols is None:
            self._acc = MomentAccumulator(forgetting=self.forgetting)
        else:
            self._acc = MomentAccumulator(forgetting=self.forgetting, max_symbols=self.max_symbols)
        self._scores = RankScores()
        self._refitter = Refitter(
            self._make_estimator(),
            refit_every=self.refit_every,
            refit_interval=self.refit_interval,
            sweeps=self.sweeps,
            background=self.background,
            prepare=TablePreparer(w),
        )
        self._lock = threading.Lock()
        self._labels: list[Hashable] = []
        self._freq: list[int] = []
        self._best = 0
        self._ctx: dict[Hashable, int] = {}
        self._mask = (1 << (CONTEXT_BITS * w)) - 1
        self._countdown = self._next_countdown()
        self._unreported = 0
        self._tick = _SCORE_EVERY - 1  # rank="auto": the first symbol after a fit is scored
        self._states = StreamStates()  # n_states: the filtered state of each stream
        self._built = True

    def _make_estimator(self):
        return online_estimator(self.estimator, rank=self.rank, window=self.window,
                                min_proba=self.min_proba, n_states=self.n_states, sweeps=self.sweeps,
                                scores=self._scores)

    def _next_countdown(self) -> int:
        n = self._refitter.until_due()
        if self.refit_interval is not None:
            n = min(n, _TIME_CHECK)
        if self._refitter.busy:
            n = min(n, 64)  # a coalesced trigger: look again soon after the fit ends
        return n

    @property
    def refitter(self) -> Refitter:
        if not self._built:
            self._build()
        return self._refitter

    @property
    def model(self):
        return self.refitter.model

    @property
    def hmm(self):
        """The current :class:`~streamspec.HiddenMarkovModel` (``None`` without ``n_states``
        or before its first fit)."""
        return getattr(self.refitter.model, "hmm", None)

    @property
    def rank_(self) -> int | None:
        """The rank of the current model (the selected one with ``rank="auto"``)."""
        table = self.refitter.prepared
        if table is None:
            return None
        return table.rank if table.rank is not None else self._refitter.records[-1].rank

    @property
    def rank_scores(self) -> dict[int, float]:
        """``rank="auto"``: mean online log loss of each candidate rank since the last fit."""
        return self._scores.mean() if self._built else {}

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
                self._new_label(y if self.max_symbols is None else self._acc.symbols[i], i)
            code = self._ctx.get(key, 0)
            table = self._refitter._current.prepared
            if table is not None and table.candidates:
                self._tick += 1
                if self._tick >= _SCORE_EVERY:
                    self._tick = 0
                    self._scores.add(table, code, i)
            self._ctx[key] = ((code << CONTEXT_BITS) | (i + 1)) & self._mask
            if self.n_states is not None:
                self._states.advance(self._current_hmm(), key, i)
            f = self._freq
            f[i] += 1
            if f[i] > f[self._best]:
                self._best = i
            self._unreported += 1
            self._countdown -= 1
            if self._countdown <= 0:
                self._refitter.observe(self._unreported, self._acc)
                self._unreported = 0
                self._countdown = self._next_countdown()

    def _current_hmm(self):
        """The HMM of the current model (``None`` without ``n_states`` or before its first fit)."""
        return getattr(self._refitter._current.model, "hmm", None)

    def _new_label(self, y: Hashable, i: int) -> None:
        if i >= MAX_SYMBOLS:
            raise ValueError(f"SpectralHMM supports at most {MAX_SYMBOLS} distinct symbols")
        self._labels.append(y)  # before _freq: readers size by _freq
        self._freq.append(0)

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
        """Forget the history of stream ``key`` (its next symbol starts afresh)."""
        if not self._built:
            return
        with self._lock:
            self._ctx.pop(key, None)
            self._states.end(key)
            self._acc.end(key)

    # ------------------------------------------------------------------ predicting

    def predict_state_one(self, x: dict) -> dict[int, float]:
        """Filtered posterior ``Pr(h_t = h | the stream's symbols)`` over the hidden states.

        The state vector of the stream of ``x`` after its last learned symbol, as
        ``{state: probability}`` (states ``0..n_states-1`` of :attr:`hmm`); a stream
        without a symbol since the first HMM fit gets the HMM's ``startprob_``. ``{}``
        without ``n_states`` or before the first HMM fit. O(m).

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
        if not self._built or self.n_states is None:
            return {}
        key = x.get(self.key) if self.key is not None else None
        return self._states.posterior(self._current_hmm(), key)

    def _predict_hmm(self, key: Hashable) -> dict[Hashable, float] | None:
        """``predictor="hmm"``: ``(α T) O`` over all labels, ``None`` before an HMM. O(m² + n·m)."""
        labels = self._labels[: len(self._freq)]
        return self._states.predict(self._current_hmm(), key, labels, self.min_proba)

    def predict_proba_one(self, x: dict, **kwargs: Any) -> dict[Hashable, float]:
        """Distribution of the next symbol of the stream of ``x`` (``{}`` before any symbol).

        ``predictor="window"``: a table lookup, O(n) to copy the dict;
        ``predictor="hmm"``: O(m² + n·m) (see :meth:`_predict_hmm`).
        """
        if not self._built:
            return {}
        key = x.get(self.key) if self.key is not None else None
        if self.predictor == "hmm":
            d = self._predict_hmm(key)
            if d is not None:
                return d
        table = self._refitter._current.prepared
        if table is None:
            f = list(self._freq)  # one atomic copy: consistent even under concurrent learning
            total = sum(f)
            if not total:
                return {}
            return dict(zip(self._labels[: len(f)], [c / total for c in f], strict=True))
        code = self._ctx.get(key, 0)
        labels = self._labels
        d = table.dicts.get(code)
        if d is None or len(d) != len(labels):
            d = table.proba_of(code, labels[: len(self._freq)], self.min_proba)
        return dict(d)

    def predict_one(self, x: dict, **kwargs: Any) -> Hashable | None:
        """The most probable next symbol of the stream of ``x`` (``None`` before any symbol)."""
        if not self._built:
            return None
        if self.predictor == "hmm":
            d = self._predict_hmm(x.get(self.key) if self.key is not None else None)
            if d is not None:
                return max(d, key=d.get)
        table = self._refitter._current.prepared
        if table is None:
            return self._labels[self._best] if self._freq else None
        code = self._ctx.get(x.get(self.key) if self.key is not None else None, 0)
        y = table.argmax.get(code)
        return y if y is not None else table.argmax_of(code)

    # ------------------------------------------------------------------ river plumbing

    @classmethod
    def _unit_test_params(cls):
        yield {}  # the defaults: river's checks then only see the count-based predictions
        yield {"rank": 2, "refit_every": 50}  # several fits within each check's 200 samples
        yield {"refit_every": 50}  # the same with rank="auto"
        yield {"rank": 2, "refit_every": 50, "estimator": "m", "sweeps": 2}
        yield {"rank": 2, "refit_every": 50, "n_states": 2, "predictor": "hmm"}

    def _unit_test_skips(self) -> set[str]:
        if self.background:
            # The check compares a model with its deep copy fed the same samples; background
            # fits finish at different times in the two copies, so their predictions may
            # legitimately differ for a while. Everything else is checked in this mode too.
            return {"check_shuffle_features_no_impact"}
        return set()

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state.pop("_lock", None)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        if self._built:
            self._lock = threading.Lock()
