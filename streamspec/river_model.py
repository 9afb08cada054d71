"""A river classifier that predicts the next symbol of many interleaved streams."""

from __future__ import annotations

import copy
import math
import threading
from collections.abc import Hashable
from typing import Any

import numpy as np
from river import base

from streamspec.accumulator import MomentAccumulator
from streamspec.mestimator import MEstimator, select_rank_by_spectrum
from streamspec.refitter import Refitter, _init_params
from streamspec.spectral import SpectralEstimator

__all__ = ["SpectralHMM", "PredictionTable", "RankSelector", "RankScores"]

_BITS = 20  # bits per symbol in a context code: alphabets up to 2**20 - 1 symbols
_MAX_SYMBOLS = (1 << _BITS) - 1
_EAGER_MAX = 2_000_000  # probabilities precomputed per model swap at most (floats)
_TIME_CHECK = 256  # with refit_interval: symbols between two looks at the clock
_BUILD_LOCK = threading.Lock()  # the first calls from several threads build the state once
RANK_GRID = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128)
_SCORE_EVERY = 4  # rank="auto": one symbol in this many is scored under each candidate


class PredictionTable:
    """Next-symbol predictions of a windowed model, keyed by an integer context code.

    A context is the last ``window`` (or fewer) symbol indices of a stream, encoded as
    ``Σ (x + 1) << 20·age`` (the newest symbol in the low bits, 0 = no symbol), so the
    code of the last ℓ symbols is ``code & ((1 << 20ℓ) - 1)``. Predictions of all
    contexts are computed at once, vectorised, when that takes at most 2·10⁶ floats;
    longer ones are computed on first use and cached. A context holding a symbol the
    model has not seen falls back to its longest suffix of known symbols (the empty
    context: the model's stationary prediction).

    Parameters
    ----------
    model
        An :class:`~streamspec.ObservableOperatorModel` with symbol labels; it is
        used through its window filter with this ``window``.
    window
        Number of past symbols a prediction depends on.

    Examples
    --------
    >>> from streamspec import MomentAccumulator, SpectralEstimator
    >>> acc = MomentAccumulator()
    >>> acc.learn_many("abcabcabc")
    >>> table = PredictionTable(SpectralEstimator(rank=3).fit(acc), window=2)
    >>> code = table.encode([acc.symbols.index("a"), acc.symbols.index("b")])
    >>> table.argmax_of(code)
    'c'

    """

    def __init__(self, model, window: int = 2):
        if model.filter != "window" or model.window != window:
            model = model.with_filter("window", window)
        self.model = model
        self.window = window
        self.n = model.n_symbols
        self.labels = list(model.symbols) if model.symbols is not None else list(range(self.n))
        self.rows: dict[int, np.ndarray] = {}
        self.argmax: dict[int, Hashable] = {}
        self.dicts: dict[int, dict] = {}
        self.logrows: dict[int, list[float]] = {}
        self.log_floor = -math.log(max(model.min_proba, 1e-300))
        self.rank = getattr(model, "selected_rank", None)
        self.candidates: list[tuple[int, PredictionTable]] = []  # filled by prepare_table
        self._mask = (1 << (_BITS * window)) - 1
        self._blocks: list[tuple[list[int], np.ndarray]] = []  # the eagerly computed rows
        self._eager()

    def fill_logrows(self) -> None:
        """Compute :meth:`logrow` for every eagerly computed context at once."""
        for keys, P in self._blocks:
            L = -np.log(np.maximum(P, 1e-300))
            self.logrows.update(zip(keys, L.tolist(), strict=True))

    def encode(self, indices) -> int:
        """The code of a context given as symbol indices, oldest first."""
        code = 0
        for i in indices:
            code = ((code << _BITS) | (int(i) + 1)) & self._mask
        return code

    @staticmethod
    def decode(code: int) -> list[int]:
        """Symbol indices of a context code, oldest first."""
        out = []
        while code:
            out.append((code & _MAX_SYMBOLS) - 1)
            code >>= _BITS
        return out[::-1]

    def _eager(self) -> None:
        m = self.model
        n = self.n
        states = m.b1[None, :]
        codes = np.zeros(1, dtype=np.int64 if _BITS * self.window < 63 else object)
        size = n
        for length in range(self.window + 1):
            if length > 0:
                if size * n * n > _EAGER_MAX:
                    break  # longer contexts: computed on first use
                states = m.extend_states(states)
                digits = np.arange(1, n + 1, dtype=codes.dtype)
                codes = ((codes[:, None] << _BITS) | digits[None, :]).reshape(-1)
                size *= n
            P = m.predict_from_state(states)
            keys = codes.tolist()
            self._blocks.append((keys, P))
            self.rows.update(zip(keys, P, strict=True))
            best = P.argmax(axis=1).tolist()
            labels = self.labels
            self.argmax.update(zip(keys, (labels[b] for b in best), strict=True))

    def row_of(self, code: int) -> np.ndarray:
        """Predicted probabilities (indices of the model) after context ``code``."""
        row = self.rows.get(code)
        if row is not None:
            return row
        digits = self.decode(code)
        known = 0
        for i in reversed(digits):
            if i >= self.n:
                break
            known += 1
        suffix = code & ((1 << (_BITS * known)) - 1)
        row = self.rows.get(suffix)
        if row is None:
            row = self.model.predict_proba_next(np.asarray(digits[len(digits) - known :]))
            self.rows[suffix] = row
        self.rows[code] = row  # dict assignments are atomic: safe for concurrent readers
        return row

    def argmax_of(self, code: int) -> Hashable:
        """The most probable next label after context ``code``."""
        y = self.argmax.get(code)
        if y is None:
            y = self.labels[int(self.row_of(code).argmax())]
            self.argmax[code] = y
        return y

    def logrow(self, code: int) -> list[float]:
        """``-log p`` of each symbol (model indices) after context ``code``, cached."""
        lr = self.logrows.get(code)
        if lr is None:
            lr = [-math.log(v) if v > 0 else self.log_floor for v in self.row_of(code).tolist()]
            self.logrows[code] = lr
        return lr

    def proba_of(self, code: int, labels: list, floor: float) -> dict:
        """``{label: probability}`` over ``labels`` (a superset of the model's, in order).

        Labels the model has not seen get probability ``floor`` before renormalising.
        Cached per code for one alphabet size.
        """
        d = self.dicts.get(code)
        if d is not None and len(d) == len(labels):
            return d
        vals = self.row_of(code).tolist()
        extra = len(labels) - len(vals)
        if extra > 0:
            vals += [floor] * extra
            s = sum(vals)
            vals = [v / s for v in vals]
        d = dict(zip(labels, vals, strict=True))
        self.dicts[code] = d
        return d


def prepare_table(model, window: int = 2) -> PredictionTable:
    """The :class:`PredictionTable` of a model, with one per candidate rank if it has some."""
    table = PredictionTable(model, window)
    cands = getattr(model, "candidates", None)
    if cands:
        table.candidates = [
            (r, table if m is model else PredictionTable(m, window)) for r, m in cands.items()
        ]
        for _, t in table.candidates:
            t.fill_logrows()
    return table


class RankScores:
    """Online (out-of-sample) log losses of the candidate ranks of the current model.

    The learner adds ``-log p(symbol)`` under each candidate before learning the symbol;
    the next fit reads them to choose its rank. Shared by :class:`SpectralHMM` and its
    :class:`RankSelector`.
    """

    def __init__(self):
        self.table: PredictionTable | None = None
        self.ranks: list[int] = []
        self.loss: list[float] = []
        self.count = 0

    def reset(self, table: PredictionTable) -> None:
        self.ranks = [r for r, _ in table.candidates]
        self.loss = [0.0] * len(self.ranks)
        self.count = 0
        self.table = table

    def mean(self) -> dict[int, float]:
        """Mean online log loss (nats per symbol) of each candidate rank so far."""
        n = self.count
        return {r: v / n for r, v in zip(self.ranks, list(self.loss), strict=True)} if n else {}

    def choose(self) -> int | None:
        """The candidate rank with the lowest online loss (``None`` without scores)."""
        scores = self.mean()
        return min(scores, key=scores.get) if scores else None


class RankSelector:
    """Estimator wrapper that fits several ranks and keeps the one with the best online loss.

    Each fit uses the ranks of ``ranks`` within a factor 2 of the current choice (and the
    alphabet size). The choice is the candidate of the previous fit with the lowest log
    loss on the symbols that arrived after it (:class:`RankScores`): a progressive,
    out-of-sample criterion, as math.md section 4 recommends. The first fit, with no
    scores yet, takes the number of singular values of P21 above the noise level
    ``N^(-1/2)``.

    Parameters
    ----------
    estimator
        The estimator template (its ``rank`` is replaced).
    ranks
        The grid of ranks.
    scores
        The shared :class:`RankScores`.

    Examples
    --------
    >>> from streamspec import MomentAccumulator, SpectralEstimator
    >>> acc = MomentAccumulator()
    >>> acc.learn_many("abcd" * 50)
    >>> model = RankSelector(SpectralEstimator(), ranks=(1, 2, 4), scores=RankScores()).fit(acc)
    >>> model.selected_rank, sorted(model.candidates)
    (4, [2, 4])

    """

    def __init__(self, estimator, ranks: tuple = RANK_GRID, scores: RankScores | None = None):
        self.estimator = estimator
        self.ranks = ranks
        self.scores = scores

    def fit(self, data):
        n = data.n
        grid = sorted({min(int(r), n) for r in self.ranks})
        choice = self.scores.choose() if self.scores is not None else None
        if choice is None:
            k = select_rank_by_spectrum(data.P21, data.n_triples)
            choice = min(grid, key=lambda r: (abs(r - k), r))
        choice = min(choice, n)
        near = sorted({r for r in grid if choice / 2 <= r <= choice * 2} | {choice})
        models = {}
        for r in near:
            params = _init_params(self.estimator)
            params["rank"] = r
            models[r] = type(self.estimator)(**params).fit(data)
        model = models[choice]
        model.candidates = models
        model.selected_rank = choice
        self.rank = choice
        return model


class _Prepare:
    """Picklable ``prepare`` callback of the refitter: model -> prediction tables."""

    def __init__(self, window: int):
        self.window = window

    def __call__(self, model) -> PredictionTable:
        return prepare_table(model, self.window)


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
        filter of math.md section 4); 0 predicts the stationary distribution.
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
    Before the first fit (fewer than ``refit_every`` symbols, or no triple yet), the
    predictions are the frequencies of the symbols seen so far (before any symbol:
    an empty dict, so :meth:`predict_one` returns ``None``). Symbols that appear after
    the last fit are in the predictions with probability ``min_proba`` (renormalised);
    a context containing one falls back to the longest suffix the model knows.

    Prediction is a dictionary lookup: when a model is swapped in, the prediction and
    its argmax are computed for every context of ``window`` symbols (or lazily for large
    alphabets), and each stream only keeps an integer code of its last symbols.

    Defaults, measured by progressive validation (from symbol 20,000, refits every
    10⁴ symbols; ``min_proba=1e-3`` unless said otherwise):

    - Alice (26 letters, 108k): θ_spec at window 2 and fixed rank 20 reached 2.35 nats
      per letter (2.62 with ``min_proba=1e-6``: unseen trigrams), 2.32 at rank 26, 2.47
      at rank 12; window 1 (the bigram model) 2.46; window 3 4.9-6.6 (too few counts
      per context). ``rank="auto"`` reached 2.27 (33.3% accuracy), settling at 24-26.
    - 1,000 interleaved sessions of a 5-state, 12-symbol HMM (150k symbols): rank 5
      1.833, rank 12 (full) 2.33, ``"auto"`` 1.832 (settling at 6); the true HMM's
      filter scores 1.76.
    - On an 80/20 split of Alice (held-out log loss, window 2), at rank 20 the
      M-estimator (``factorization="fixed"``) beat θ_spec: 2.43 with exact weighting
      (7.8 s per fit) and 2.45 with identity weighting (0.03 s), against 2.54 (a few
      ms); at rank 26, where ``"auto"`` ends on Alice, all three give 2.19. θ_spec is
      the default because ``rank="auto"`` fits several ranks at every refit and the
      best ranks found were the high ones; ``estimator="m"`` with a fixed rank is the
      choice when a lower rank is wanted.

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
        rank: int | str = "auto",
        estimator: Any = "spectral",
        window: int = 2,
        refit_every: int | None = 10_000,
        refit_interval: float | None = None,
        sweeps: int = 3,
        background: bool = False,
        key: str | None = None,
        min_proba: float = 1e-3,
        forgetting: float = 1.0,
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
        self._built = False

    # ------------------------------------------------------------------ state

    def _build(self) -> None:
        """Create the learning state (on first use, so that ``__init__`` only stores)."""
        with _BUILD_LOCK:
            if not self._built:
                self._build_state()

    def _build_state(self) -> None:
        w = self.window
        if isinstance(w, bool) or not isinstance(w, int) or w < 0:
            raise ValueError(f"window must be a non-negative integer, got {w!r}")
        self._acc = MomentAccumulator(forgetting=self.forgetting)
        self._scores = RankScores()
        self._refitter = Refitter(
            self._make_estimator(),
            refit_every=self.refit_every,
            refit_interval=self.refit_interval,
            sweeps=self.sweeps,
            background=self.background,
            prepare=_Prepare(w),
        )
        self._lock = threading.Lock()
        self._labels: list[Hashable] = []
        self._freq: list[int] = []
        self._best = 0
        self._ctx: dict[Hashable, int] = {}
        self._mask = (1 << (_BITS * w)) - 1
        self._countdown = self._next_countdown()
        self._unreported = 0
        self._tick = _SCORE_EVERY - 1  # rank="auto": the first symbol after a fit is scored
        self._built = True

    def _make_estimator(self):
        est = self.estimator
        auto = isinstance(self.rank, str) and self.rank == "auto"
        if not auto and (isinstance(self.rank, bool) or not isinstance(self.rank, int)):
            raise ValueError(f"rank must be a positive integer or 'auto', got {self.rank!r}")
        rank = 1 if auto else self.rank
        if isinstance(est, str):
            kwargs = {"rank": rank, "filter": "window", "window": self.window}
            kwargs["min_proba"] = self.min_proba
            if est == "spectral":
                est = SpectralEstimator(**kwargs)
            elif est == "m":
                est = MEstimator(**kwargs)
            else:
                raise ValueError(f"estimator must be 'spectral', 'm' or an estimator, got {est!r}")
        elif not callable(getattr(est, "fit", None)):
            raise ValueError(f"estimator must be 'spectral', 'm' or an estimator, got {est!r}")
        else:
            est = copy.deepcopy(est)
        return RankSelector(est, RANK_GRID, self._scores) if auto else est

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
            if i == len(self._freq):
                self._new_label(y, i)
            code = self._ctx.get(key, 0)
            table = self._refitter._current.prepared
            if table is not None and table.candidates:
                self._tick += 1
                if self._tick >= _SCORE_EVERY:
                    self._tick = 0
                    self._score(table, code, i)
            self._ctx[key] = ((code << _BITS) | (i + 1)) & self._mask
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

    def _score(self, table: PredictionTable, code: int, i: int) -> None:
        """Add the online loss of symbol ``i`` after ``code`` under each candidate rank."""
        sc = self._scores
        if sc.table is not table:
            sc.reset(table)
        loss = sc.loss
        for j, (_, cand) in enumerate(table.candidates):
            lr = cand.logrows.get(code)
            if lr is None:
                lr = cand.logrow(code)
            loss[j] += lr[i] if i < len(lr) else cand.log_floor
        sc.count += 1

    def _new_label(self, y: Hashable, i: int) -> None:
        if i >= _MAX_SYMBOLS:
            raise ValueError(f"SpectralHMM supports at most {_MAX_SYMBOLS} distinct symbols")
        self._labels.append(y)  # before _freq: readers size by _freq
        self._freq.append(0)

    def refit(self, wait: bool = True) -> bool:
        """Fit now on all the symbols learned so far (``wait``: join a background fit)."""
        if not self._built:
            self._build()
        with self._lock:
            self._refitter.observe(self._unreported, self._acc)
            self._unreported = 0
            started = self._refitter.fit_now(self._acc)
            self._countdown = self._next_countdown()
        if wait:
            self._refitter.wait()
        return started

    def end_stream(self, key: Hashable = None) -> None:
        """Forget the history of stream ``key`` (its next symbol starts afresh)."""
        if not self._built:
            return
        with self._lock:
            self._ctx.pop(key, None)
            self._acc.end(key)

    # ------------------------------------------------------------------ predicting

    def predict_proba_one(self, x: dict, **kwargs: Any) -> dict[Hashable, float]:
        """Distribution of the next symbol of the stream of ``x`` (``{}`` before any symbol)."""
        if not self._built:
            return {}
        key = x.get(self.key) if self.key is not None else None
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
