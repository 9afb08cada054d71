"""A river classifier that predicts the next symbol of many interleaved streams."""

from __future__ import annotations

import copy
import math
import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import Any

import numpy as np
from river import base

from streamspec.core import defaults
from streamspec.core.mestimator import MEstimator
from streamspec.core.params import Estimator, clone
from streamspec.core.spectral import SpectralEstimator, triples_of
from streamspec.core.subspace import DENSE_SVD_MAX, top_singular
from streamspec.core.triples import Triples
from streamspec.streaming.accumulator import MomentAccumulator
from streamspec.streaming.refitter import Refitter, refit_estimator
from streamspec.streaming.with_hmm import WithHMM

__all__ = ["SpectralHMM", "PredictionTable", "RankSelector", "RankScores", "ROW_CACHE_FLOATS"]

_BITS = 20  # bits per symbol in a context code: alphabets up to 2**20 - 1 symbols
_MAX_SYMBOLS = (1 << _BITS) - 1
_EAGER_MAX = 2_000_000  # probabilities precomputed per model swap at most (floats)
ROW_CACHE_FLOATS = 1 << 22  # lazily computed rows kept per prediction table (floats: 32 MiB)
MODEL_FLOATS_MAX = 1 << 24  # rank="auto": candidate ranks k with n·k² above this are skipped
_TIME_CHECK = 256  # with refit_interval: symbols between two looks at the clock
_BUILD_LOCK = threading.Lock()  # the first calls from several threads build the state once
RANK_GRID = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128)
_SCORE_EVERY = 4  # rank="auto": one symbol in this many is scored under each candidate


class _LRU:
    """A cache of per-context entries bounded by the floats they hold (thread-safe).

    Each entry is stored with its cost in floats; once the total passes ``capacity``
    the least recently used entries are dropped. O(1) per operation.
    """

    def __init__(self, capacity: int):
        self.capacity = int(capacity)
        self.size = 0
        self._data: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable):
        with self._lock:
            item = self._data.get(key)
            if item is None:
                return None
            self._data.move_to_end(key)
            return item[0]

    def put(self, key: Hashable, value, cost: int) -> None:
        with self._lock:
            old = self._data.pop(key, None)
            if old is not None:
                self.size -= old[1]
            self._data[key] = (value, cost)
            self.size += cost
            while self.size > self.capacity and len(self._data) > 1:
                _, (_, c) = self._data.popitem(last=False)
                self.size -= c

    def __len__(self) -> int:
        return len(self._data)

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        del state["_lock"]
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()


class PredictionTable:
    """Next-symbol predictions of a windowed model, keyed by an integer context code.

    A context is the last ``window`` (or fewer) symbol indices of a stream, encoded as
    ``Σ (x + 1) << 20·age`` (the newest symbol in the low bits, 0 = no symbol), so the
    code of the last ℓ symbols is ``code & ((1 << 20ℓ) - 1)``. Predictions of all
    contexts of a length are computed at once, vectorised, when that takes at most
    ``_EAGER_MAX`` (2·10⁶) floats (:attr:`rows`; with 26 symbols and window 2, all of
    them). Longer contexts, and every context of a large alphabet, are computed on
    first use, O(window·k² + n·k) for rank k, and kept in a least-recently-used cache
    bounded by :data:`ROW_CACHE_FLOATS` (2²² floats, 32 MiB) in total: a row or a row
    of log probabilities costs n floats, a ``{label: probability}`` dict 8 per entry.
    So the table never holds n^(w+1) floats, whatever the alphabet. A context holding
    a symbol the model has not seen falls back to its longest suffix of known symbols
    (the empty context: the model's stationary prediction). When the model has a
    Kneser–Ney backoff (``model.backoff``), each prediction is given the context's last
    symbol (``predict_from_state(state, last)``).

    Parameters
    ----------
    model
        An :class:`~streamspec.ObservableOperatorModel` with symbol labels; it is
        used through its window filter with this ``window``.
    window
        Number of past symbols a prediction depends on.
    cache_floats
        Capacity of the cache of lazily computed rows (default :data:`ROW_CACHE_FLOATS`).

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

    def __init__(self, model, window: int = 2, cache_floats: int | None = None):
        if model.filter != "window" or model.window != window:
            model = model.with_filter("window", window)
        self.model = model
        self.window = window
        self.n = model.n_symbols
        self.labels = list(model.symbols) if model.symbols is not None else list(range(self.n))
        self.backoff = getattr(model, "backoff", None) is not None
        self.rows: dict[int, np.ndarray] = {}  # the eagerly computed rows (bounded)
        self.argmax: dict[int, Hashable] = {}  # their argmax
        self.dicts: dict[int, dict] = {}  # kept empty: dicts live in the bounded cache
        self.logrows: dict[int, list[float]] = {}  # fill_logrows: eager contexts only
        self.log_floor = -math.log(max(model.min_proba, 1e-300))
        self.rank = model.rank if model.candidates else None  # the rank a selector chose
        self.candidates: list[tuple[int, PredictionTable]] = []  # filled by prepare_table
        self._mask = (1 << (_BITS * window)) - 1
        self._blocks: list[tuple[list[int], np.ndarray]] = []  # the eagerly computed rows
        capacity = ROW_CACHE_FLOATS if cache_floats is None else cache_floats
        self._cache = _LRU(max(int(capacity), 8 * self.n))  # room for one row at least
        self._eager()

    @property
    def cached_floats(self) -> int:
        """Floats held by the cache of lazily computed rows (at most its capacity)."""
        return self._cache.size

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

    def _predict(self, states: np.ndarray, last: np.ndarray | None) -> np.ndarray:
        """Rows of predictions from ``states`` (c, d); ``last``: each one's last symbol (or None)."""
        m = self.model
        if not self.backoff:
            return m.predict_from_state(states)
        if last is None:
            return m.predict_from_state(states, None)
        try:
            return m.predict_from_state(states, last)
        except (TypeError, ValueError):  # a backoff taking one last symbol at a time
            return np.stack([m.predict_from_state(s, int(x)) for s, x in zip(states, last,
                                                                             strict=True)])

    def _eager(self) -> None:
        m = self.model
        n = self.n
        states = m.b1[None, :]
        codes = np.zeros(1, dtype=np.int64 if _BITS * self.window < 63 else object)
        size = n
        for length in range(self.window + 1):
            last = None
            if length > 0:
                if size * n * n > _EAGER_MAX:
                    break  # longer contexts: computed on first use
                states = m.extend_states(states)
                digits = np.arange(1, n + 1, dtype=codes.dtype)
                codes = ((codes[:, None] << _BITS) | digits[None, :]).reshape(-1)
                last = np.tile(np.arange(n), size // n)
                size *= n
            P = self._predict(states, last)
            keys = codes.tolist()
            self._blocks.append((keys, P))
            self.rows.update(zip(keys, P, strict=True))
            best = P.argmax(axis=1).tolist()
            labels = self.labels
            self.argmax.update(zip(keys, (labels[b] for b in best), strict=True))

    def _known_suffix(self, code: int) -> tuple[int, list[int]]:
        """The code of the longest suffix of known symbols, and those symbols (oldest first)."""
        digits = self.decode(code)
        known = 0
        for i in reversed(digits):
            if i >= self.n:
                break
            known += 1
        return code & ((1 << (_BITS * known)) - 1), digits[len(digits) - known :]

    def row_of(self, code: int) -> np.ndarray:
        """Predicted probabilities (indices of the model) after context ``code``.

        Eager rows are a lookup; others cost O(window·k² + n·k) on first use and are
        then cached (bounded, least recently used first out).
        """
        row = self.rows.get(code)
        if row is not None:
            return row
        entry = self._cache.get(("row", code))
        if entry is not None:
            return entry
        suffix, digits = self._known_suffix(code)
        row = self.rows.get(suffix)
        if row is None:
            row = self._cache.get(("row", suffix))
        if row is None:
            state = self.model.state_for(np.asarray(digits, dtype=np.int64))
            last = np.asarray(digits[-1:], dtype=np.int64) if digits else None
            row = self._predict(state[None, :], last)[0]
            self._cache.put(("row", suffix), row, self.n)
        if suffix != code:
            self._cache.put(("row", code), row, 1)  # the same array: only a reference
        return row

    def argmax_of(self, code: int) -> Hashable:
        """The most probable next label after context ``code``."""
        y = self.argmax.get(code)
        if y is None:
            y = self._cache.get(("argmax", code))
            if y is None:
                y = self.labels[int(self.row_of(code).argmax())]
                self._cache.put(("argmax", code), y, 1)
        return y

    def logrow(self, code: int):
        """``-log p`` of each symbol (model indices) after context ``code``, cached.

        A list for the eager contexts (:meth:`fill_logrows`), else an array of n floats.
        """
        lr = self.logrows.get(code)
        if lr is None:
            lr = self._cache.get(("log", code))
            if lr is None:
                lr = -np.log(np.maximum(self.row_of(code), 1e-300))
                self._cache.put(("log", code), lr, self.n)
        return lr

    def proba_of(self, code: int, labels: list, floor: float) -> dict:
        """``{label: probability}`` over ``labels`` (a superset of the model's, in order).

        Labels the model has not seen get probability ``floor`` before renormalising.
        Cached per code for one alphabet size (8 floats per entry of the cache). O(n).
        """
        d = self._cache.get(("dict", code))
        if d is not None and len(d) == len(labels):
            return d
        vals = self.row_of(code).tolist()
        extra = len(labels) - len(vals)
        if extra > 0:
            vals += [floor] * extra
            s = sum(vals)
            vals = [v / s for v in vals]
        d = dict(zip(labels, vals, strict=True))
        self._cache.put(("dict", code), d, 8 * len(d))
        return d


def prepare_table(model, window: int = 2) -> PredictionTable:
    """The :class:`PredictionTable` of a model, with one per candidate rank if it has some."""
    table = PredictionTable(model, window)
    cands = model.candidates
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


class RankSelector(Estimator):
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
    >>> model.rank, sorted(model.candidates)
    (4, [2, 4])

    """

    def __init__(self, estimator, *, ranks: tuple = RANK_GRID, scores: RankScores | None = None):
        self.estimator = estimator
        self.ranks = ranks
        self.scores = scores

    def fit(self, data):
        """Fit the candidate ranks near the current choice; returns the chosen one's model.

        Costs one fit per candidate (2-5), plus, for the first fit, a truncated SVD of
        the sparse P21 (O(nnz · k) per iteration). Ranks k with n·k² above
        :data:`MODEL_FLOATS_MAX` floats are left out of the grid (a model holds n·k²).
        """
        n = data.n
        cap = n if n <= DENSE_SVD_MAX else n - 1  # a truncated SVD needs k < n
        grid = sorted({min(int(r), cap) for r in self.ranks})
        fits = [r for r in grid if n * r * r <= MODEL_FLOATS_MAX]
        grid = fits or grid[:1]
        choice = self.scores.choose() if self.scores is not None else None
        if choice is None:
            k = spectrum_rank(triples_of(data)[0], max(grid))
            choice = min(grid, key=lambda r: (abs(r - k), r))
        choice = min(choice, max(grid))
        near = sorted({r for r in grid if choice / 2 <= r <= choice * 2} | {choice})
        models = {}
        for r in near:
            # as the Refitter does: a model needs min_proba < 1/n
            est, _ = refit_estimator(clone(self.estimator, rank=r), n, None, 1)
            models[r] = est.fit(data)
        model = models[choice].replace(candidates=models)
        models[choice] = model  # why: prepare_table recognises the chosen model among them
        self.rank_ = choice
        return model


def spectrum_rank(triples: Triples, kmax: int) -> int:
    """Number of singular values of P21 above the noise level ``N^(-1/2)``, at most ``kmax``.

    P21 stays sparse: up to :data:`~streamspec.core.subspace.DENSE_SVD_MAX` symbols all its
    singular values are computed (O(n³)), above it only the top ``kmax`` (a truncated
    SVD, O(nnz · kmax) per iteration, O(n · kmax) memory).

    Examples
    --------
    >>> t = Triples.from_arrays(3, x1=[0, 1, 2] * 30, x2=[1, 2, 0] * 30, x3=[2, 0, 1] * 30)
    >>> spectrum_rank(t, 3)
    3
    """
    total = triples.total
    if not total > 0:
        raise ValueError("cannot choose a rank from empty counts")
    P21 = triples.P21()
    if triples.n <= DENSE_SVD_MAX:
        sv = np.linalg.svd(P21.toarray(), compute_uv=False)
    else:
        sv = top_singular(P21, max(1, min(kmax, triples.n - 1)))[1]
    return max(1, min(int(kmax), int((sv > 1.0 / np.sqrt(total)).sum())))


class _Prepare:
    """Picklable ``prepare`` callback of the refitter: model -> prediction tables."""

    def __init__(self, window: int):
        self.window = window

    def __call__(self, model) -> PredictionTable:
        return prepare_table(model, self.window)


class _HMMState:
    """Arrays of an HMM for the per-symbol forward step: ``T`` (m, m) and ``E`` = Oᵀ (n, m)."""

    def __init__(self, hmm):
        self.hmm = hmm
        self.T = np.ascontiguousarray(hmm.transmat_)
        self.E = np.ascontiguousarray(hmm.emissionprob_.T)
        self.start = hmm.startprob_.copy()
        self.n = hmm.n_symbols
        self.m = hmm.n_states

    def step(self, alpha: np.ndarray | None, i: int) -> np.ndarray:
        """Forward recursion ``α ← (α T) ∘ O[:, i]`` normalised (O(m²)); symbol ``i`` unknown
        to the HMM (index ≥ n): no emission factor. ``alpha=None``: a stream's first symbol."""
        a = self.start if alpha is None else alpha @ self.T
        if i < self.n:
            b = a * self.E[i]
            s = b.sum()
            if s > 0:
                return b / s
        return a / a.sum()


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
        est = self.estimator
        if isinstance(est, str) and est not in ("spectral", "m"):
            raise ValueError(f"estimator must be 'spectral', 'm' or an estimator, got {est!r}")
        if not isinstance(est, str) and not callable(getattr(est, "fit", None)):
            raise ValueError(f"estimator must be 'spectral', 'm' or an estimator, got {est!r}")
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
        self._alpha: dict[Hashable, np.ndarray] = {}  # n_states: filtered state of each stream
        self._hs: _HMMState | None = None  # the arrays of the HMM the states follow
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
        if auto:
            est = RankSelector(est, ranks=RANK_GRID, scores=self._scores)
        if self.n_states is not None:
            est = WithHMM(est, n_states=self.n_states, sweeps=self.sweeps)
        return est

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
                    self._score(table, code, i)
            self._ctx[key] = ((code << _BITS) | (i + 1)) & self._mask
            if self.n_states is not None:
                self._advance_state(key, i)
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

    def _hmm_state(self) -> _HMMState | None:
        """The forward-step arrays of the current HMM (rebuilt when a refit swaps it)."""
        hmm = getattr(self._refitter._current.model, "hmm", None)
        if hmm is None:
            return None
        hs = self._hs
        if hs is None or hs.hmm is not hmm:
            hs = self._hs = _HMMState(hmm)
        return hs

    def _advance_state(self, key: Hashable, i: int) -> None:
        """One forward step of stream ``key``'s filtered state with symbol index ``i``. O(m²)."""
        hs = self._hmm_state()
        if hs is not None:
            self._alpha[key] = hs.step(self._alpha.get(key), i)

    def _new_label(self, y: Hashable, i: int) -> None:
        if i >= _MAX_SYMBOLS:
            raise ValueError(f"SpectralHMM supports at most {_MAX_SYMBOLS} distinct symbols")
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
            self._alpha.pop(key, None)
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
        hs = self._hmm_state()
        if hs is None:
            return {}
        key = x.get(self.key) if self.key is not None else None
        alpha = self._alpha.get(key)
        if alpha is None:
            alpha = hs.start
        return dict(enumerate(alpha.tolist()))

    def _predict_hmm(self, key: Hashable) -> dict[Hashable, float] | None:
        """``predictor="hmm"``: ``(α T) O`` over all labels, ``None`` before an HMM. O(m² + n·m).

        Every probability is floored at ``min(min_proba, 0.5 / n)`` (labels that
        appeared after the HMM's fit: that floor), then renormalised.
        """
        hs = self._hmm_state()
        if hs is None:
            return None
        alpha = self._alpha.get(key)
        state = hs.start if alpha is None else alpha @ hs.T
        labels = self._labels[: len(self._freq)]
        floor = min(self.min_proba, 0.5 / max(len(labels), 1))
        p = np.full(len(labels), floor)
        p[: hs.n] = np.maximum(hs.E @ state, floor)
        p /= p.sum()
        return dict(zip(labels, p.tolist(), strict=True))

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
