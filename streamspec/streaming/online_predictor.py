"""Predictions for many interleaved streams under the current model, learning as they go.

:class:`OnlinePredictor` is the online half of streamspec's predictor
(:mod:`streamspec.core.backoff`) for a learner that sees the symbols of many streams one
at a time (the river model, the Kafka daemon): each stream keeps its last symbols and
its hidden-state vector; every symbol is first predicted from them (its prequential
probability, whose log is the running log loss), then the mixing weights learn from it
and the stream moves on. The weights are the learner's, shared by all streams and kept
across refits; a refit swaps the model in (:meth:`OnlinePredictor.set_model`).

Costs per symbol: O(E · K + K²) plus, the first time a context is met, O(n · (d + 1))
for its rows (kept in a cache bounded in floats, least recently used out); the most
probable symbol O(K · TOP + entries) (:meth:`OnlinePredictor.argmax`; O(n · K) below
:data:`PRUNE_RATIO` · K · TOP symbols, where that is cheaper); a full
distribution O(n · K). Where the dense parts fit in a stack
(:class:`~streamspec.streaming.dense_row.StackedRows`, at most 2²¹ floats) a mixed row is
one GEMV of O((K + 3) · n) and its own row, unless a cached one exists, is made again at
each row in O(n · d) (most contexts of a large alphabet are met once: about 80% of the
contexts of demos/bench_river.py's stream are new when met; not measured cached).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Hashable

import numpy as np

from streamspec.core.filters import right_applied
from streamspec.core.mixture import N_BUCKETS, ExpertMixture
from streamspec.core.trigram import START, UNKNOWN
from streamspec.streaming.batch_observation import BatchObservation
from streamspec.streaming.context_codes import CONTEXT_BITS, DIGIT, UNSEEN
from streamspec.streaming.dense_row import StackedPart, StackedRows, add_trigram
from streamspec.streaming.pruned_argmax import pruned_argmax as _pruned_argmax

__all__ = ["OnlinePredictor", "ROW_CACHE_FLOATS", "CONTEXT_BITS", "UNSEEN"]

ROW_CACHE_FLOATS = 1 << 22  # rows kept per model (floats: 32 MiB)
_CONTEXTS_KEPT = 1 << 18  # trigram contexts remembered (then forgotten all at once)
_STATES_KEPT = 1 << 14  # window states of prefixes remembered (≤ 2¹⁴ · d floats; then forgotten at once)
TOP = 32  # argmax: candidates per part before the exact bound is checked
OWN_CUT = 0.25  # argmax: the model's own candidates are above this fraction of its row's maximum
# argmax: the pruned path only when n ≥ PRUNE_RATIO · K · TOP (K HMM states). Its ~15 small numpy
# calls and the gather of K · TOP rows of E cost more than the whole row's few passes over n
# below that: on 2,000 symbols and 16 states, 50 µs against 29 µs (demos/bench_river.py's
# stream, docs/benchmarks.md "River model throughput")
PRUNE_RATIO = 8


class _Rows(StackedPart):
    """The cached rows of one model: its own row per window context, the trigram's per pair."""

    def __init__(self, model, window: int, capacity: int):
        self.model, self.window = model, window
        self.n = model.n_symbols
        self.capacity = max(int(capacity), 4 * self.n)
        self.size = 0
        self._cache: OrderedDict = OrderedDict()
        self._contexts: dict[tuple[int, int], tuple[int, int, float, int]] = {}
        hmm = None if model.backoff is None else model.backoff.hmm
        # the HMM's arrays as the per-symbol steps read them: a row of E per symbol, contiguous
        self.E_T = None if hmm is None else np.ascontiguousarray(hmm.emissionprob_.T)
        self.T = None if hmm is None else np.ascontiguousarray(hmm.transmat_)
        self._tops = None  # the top symbols of each part, for argmax (made on first use)
        self._C = None  # the model's rows C[x] = b∞ᵀ B_x as columns, for its own rows (on first use)
        self._states: dict[tuple[int, ...], np.ndarray] = {}  # window states of contexts' prefixes
        self._stack: StackedRows | None | bool = False  # the dense parts stacked (False: not made yet)
        self.decoded: dict[int, tuple] = {}  # a stream's code -> its context (OnlinePredictor._context)

    def _get(self, key, make):
        row = self._cache.get(key)
        if row is None:
            row = make()
            self._cache[key] = row
            self.size += _floats(row)
            while self.size > self.capacity and len(self._cache) > 1:
                self.size -= _floats(self._cache.popitem(last=False)[1])
        else:
            self._cache.move_to_end(key)
        return row

    def own(self, digits: tuple[int, ...]) -> np.ndarray:
        """The model's own row after the known symbols ``digits`` (oldest first). O(n · d) once."""
        return self._get(("own", digits), lambda: self._own_entry(digits))[0]

    def _own_entry(self, digits: tuple[int, ...]) -> list:
        """``[row, top symbols, bound]`` of a context, its top (:meth:`own_top`) made on first use."""
        return [self._own_row(digits), None, 0.0]

    def _own_row(self, digits: tuple[int, ...]) -> np.ndarray:
        """``model.predict_from_state(model.state_for(digits))`` as a backoff's component (clipped,
        renormalised), in a few vector operations: new contexts are met at most symbols of a
        large alphabet, and the checks and chunking of the model's batch methods cost more than
        the O(n · d) product. O(w · d² + n · d), the state after all but the last symbol
        cached (:meth:`_state`)."""
        model = self.model
        if model.backoff is None:
            return model.predict_from_state(model.state_for(np.asarray(digits, dtype=np.int64)))
        q = np.dot(self._window_state(digits), self._columns())
        np.maximum(q, 0.0, out=q)
        total = q.sum()
        if total > 0:
            q *= 1.0 / total
            return q
        return np.full(self.n, 1.0 / self.n)

    def _columns(self) -> np.ndarray:
        """The model's rows as columns, ``C[:, x] = b∞ᵀ B_x``, (d, n), copied once from the
        model's :attr:`symbol_rows`. O(n · d)."""
        if self._C is None:
            # C[x] · s = b∞ᵀ B_x s, stored transposed: s @ Cᵀ runs along rows of n (a long
            # inner loop), where C @ s would take n dot products of d
            model = self.model
            self._C = np.ascontiguousarray(model.symbol_rows.T)  # the model's, not made again
            self._absbinf = np.abs(model.binf)
        return self._C

    def _window_state(self, digits: tuple[int, ...]) -> np.ndarray:
        """The state the own row of ``digits`` is read from (the model's window of them). O(d²)."""
        model = self.model
        self._columns()  # why: _state reads |b∞|, made with the columns
        if model.filter == "window":
            digits = digits[max(0, len(digits) - model.window):]
        return self._state(digits)

    def _state(self, digits: tuple[int, ...]) -> np.ndarray:
        """The window filter's state after ``digits`` from ``b1`` (filters.update_state, one symbol
        at a time); the states of prefixes are cached (at most :data:`_STATES_KEPT`, then
        forgotten at once), so a new context of w symbols costs one update. O(d²)."""
        model = self.model
        if not digits:
            return model.b1
        prefix = digits[:-1]
        prev = self._states.get(prefix) if prefix else model.b1
        if prev is None:
            prev = self._state(prefix)
            if len(self._states) >= _STATES_KEPT:
                self._states.clear()
            self._states[prefix] = prev
        ops, right = model.operator_factors
        v = ops[digits[-1]] @ right_applied(prev, right)
        z, fb = float(model.binf @ v), float(self._absbinf @ np.abs(v))
        fb = fb if fb > 0 else 1.0
        return v / (z if z > 1e-12 * fb else fb)

    def own_top(self, digits: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray, float]:
        """The model's own row after ``digits``, its most probable symbols (those above
        :data:`OWN_CUT` of its maximum, or the :data:`TOP` largest) and a bound on every other symbol, for
        :meth:`OnlinePredictor.argmax`.
        O(n · d) once per context (the row), O(n) once more (its top)."""
        entry = self._get(("own", digits), lambda: self._own_entry(digits))
        if entry[1] is None:
            row = entry[0]
            thr = OWN_CUT * float(row.max())  # every symbol not above it is bounded by it
            idx = np.flatnonzero(row > thr)
            if idx.size > TOP:  # a flat row: its TOP largest instead
                idx, thr = _top(row, TOP)
            entry[1], entry[2] = idx, float(thr)
        return entry[0], entry[1], entry[2]

    def trigram(self, u: int, v: int) -> np.ndarray:
        """The trigram's row after ``(u, v)``. O(n + entries) once."""
        return self._get(("tri", u, v), lambda: self.model.backoff.trigram.row1(self.context(u, v)[:3]))

    def context(self, u: int, v: int) -> tuple[int, int, float, int]:
        """The trigram's context ``(u, v)``: its ranks and count (:meth:`KneserNeyTrigram.context1`)
        and the weights' bucket, cached (at most :data:`_CONTEXTS_KEPT`, then forgotten at once).
        O(log nnz) once."""
        c = self._contexts.get((u, v))
        if c is None:
            if len(self._contexts) >= _CONTEXTS_KEPT:
                self._contexts.clear()
            top, mid, count = self.model.backoff.trigram.context1(u, v)
            c = self._contexts[(u, v)] = (top, mid, count, _bucket(count))
        return c

    def trigram_proba(self, u: int, v: int, i: int) -> float:
        """The trigram's probability of ``i`` after ``(u, v)``: from the cached row if there is
        one, else a few lookups, O(log nnz), without making the row."""
        row = self._cache.get(("tri", u, v))
        if row is not None:
            return float(row[i])
        return self.model.backoff.trigram.proba1(self.context(u, v)[:3], i)

    def __getstate__(self) -> dict:
        # why: the stack ((K + 3) · n floats) and the decoded contexts are remade on first use
        return {**self.__dict__, "_stack": False, "decoded": {}}

    def __setstate__(self, state: dict) -> None:
        # why: caches pickled before the stack, the decoded contexts and the public scratch
        # row existed (a river model or a checkpoint of an earlier version) go on as new ones
        state.setdefault("_stack", False)
        state.setdefault("decoded", {})
        if "_scratch" in state:
            state["scratch"] = state.pop("_scratch")
        self.__dict__.update(state)

    def tops(self) -> dict:
        """The :data:`TOP` most probable symbols of the trigram's lowest levels and of each HMM
        state, and the TOP-th value of each (a bound on every other symbol). O(n · K) once."""
        if self._tops is None:
            trigram, hmm = self.model.backoff.trigram, self.model.backoff.hmm
            k = min(TOP, self.n)
            self._tops = {"p1": _top(trigram.continuation(), k), "freq": _top(trigram.unigram(), k)}
            if hmm is not None:
                idx, kth = _top(hmm.emissionprob_, k)
                self._tops["hmm"] = (idx.ravel(), kth)
            self.scratch = np.zeros(self.n)  # direct trigram entries of one context, then reset
        return self._tops


def _top(p: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The indices of the ``k`` largest entries of each row of ``p`` and the smallest of them. O(size)."""
    idx = np.argpartition(-p, k - 1, axis=-1)[..., :k]
    return idx, np.take_along_axis(p, idx, axis=-1).min(axis=-1)


def _floats(entry) -> int:
    """Floats held by a cache entry: a row, or an own row with its top. O(1)."""
    if isinstance(entry, list):  # an own row and its top (at most TOP more, filled in later)
        return entry[0].size
    return entry.size


def _bucket(count: float) -> int:
    """:func:`~streamspec.core.mixture.bucket_of_counts` of one count, without arrays. O(1)."""
    return min(math.ceil(math.log(1.0 + max(count, 0.0)) / math.log(4.0) - 1e-12), N_BUCKETS - 1)


class OnlinePredictor(BatchObservation):
    """Per-stream contexts and hidden states, and the weights learned from every symbol.

    Parameters
    ----------
    window
        Symbols of context of the model's own prediction; ``None``: each model's ``window``.
    cache_floats
        Capacity of the cache of rows (floats).

    Attributes
    ----------
    model
        The current model (``None`` before the first :meth:`set_model`).
    mixture
        The :class:`~streamspec.core.mixture.ExpertMixture` learned so far.
    loss, n_scored
        The sum of ``-log p`` of the symbols scored (each predicted before it was learned)
        and their number: ``loss / n_scored`` is the prequential log loss.

    Examples
    --------
    >>> from streamspec import MomentAccumulator, SpectralEstimator
    >>> acc = MomentAccumulator(n_symbols=3, window=1)
    >>> acc.learn_many([0, 1, 2] * 200)
    >>> online = OnlinePredictor(window=2)
    >>> online.set_model(SpectralEstimator(rank=3).fit(acc))
    >>> [round(online.observe("s", x), 2) for x in (0, 1, 2)]
    [0.33, 0.77, 1.0]
    >>> int(online.row("s").argmax())
    0
    """

    _last = None  # what _peek returned last (a class default: states pickled before it have none)
    _prune_from = 4 * TOP + 1  # argmax prunes from this many symbols (set per model; pickles before it)

    def __init__(self, window: int | None = 2, cache_floats: int = ROW_CACHE_FLOATS):
        self.follows_model = window is None  # the window of each model set (its fit chose it)
        self.cache_floats = cache_floats
        self.model = None
        self.mixture: ExpertMixture | None = None
        self.components: tuple[str, ...] = ()  # the components the weights are for
        self._rows: _Rows | None = None
        self._set_window(2 if window is None else window)
        self._codes: dict[Hashable, int] = {}
        self._post: dict[Hashable, np.ndarray] = {}  # the HMM filter after each stream's last symbol
        self._last = None  # (model, code, post, key, what _peek returned)
        self.loss = 0.0
        self.n_scored = 0

    # ---------------------------------------------------------------- models

    def set_model(self, model) -> None:
        """Swap in a model (its backoff carries the trigram and the HMM). The streams keep
        their symbols; their hidden states are kept when the HMM has as many states (warm
        refits keep the states' order); the weights are kept when they are for the same
        components, else taken from the model. O(1) (rows are computed lazily)."""
        old = self.model
        self.model = model
        if getattr(self, "follows_model", False) and model.window != self.window:
            self._set_window(model.window)
        self._rows = _Rows(model, self.window, self.cache_floats)
        self._prune_from = _prune_from(model)
        if model.backoff is None:  # the model alone: nothing to mix, nothing to learn
            self._post.clear()
            return
        if self.mixture is None or self.components != model.backoff.components:
            self.mixture = model.backoff.mixture.copy()
            self.components = model.backoff.components
        old_hmm = None if old is None or old.backoff is None else old.backoff.hmm
        hmm = model.backoff.hmm
        if hmm is None or old_hmm is None or old_hmm.n_states != hmm.n_states:
            self._post.clear()

    def _set_window(self, window: int) -> None:
        """Keep each stream's last max(window, 2) symbols from now on (its code keeps those it has). O(1)."""
        self.window = int(window)
        self._mask = (1 << (CONTEXT_BITS * max(self.window, 2))) - 1

    def set_weights(self, mixture: ExpertMixture, components: tuple[str, ...]) -> None:
        """Go on from learned weights (e.g. read from a checkpoint) over ``components``: the
        next :meth:`set_model` keeps them if its model mixes the same components. O(1)."""
        if mixture.n_components != len(components):
            raise ValueError(f"weights of {mixture.n_components} components for {components}")
        self.mixture, self.components = mixture, tuple(components)

    # ---------------------------------------------------------------- one stream

    def _digits(self, key: Hashable) -> list[int]:
        """The stream's last symbols (oldest first), -1 for a position before its start."""
        code = self._codes.get(key, 0)
        return [((code >> (CONTEXT_BITS * a)) & DIGIT) - 1 for a in range(max(self.window, 2) - 1, -1, -1)]

    def _context(self, key: Hashable) -> tuple[tuple[int, ...], int, int]:
        """The stream's context: the known symbols of the model's window (oldest first) and the
        trigram's ``(u, v)`` (-1: the start, -2: a symbol the model does not know). O(window)."""
        code = self._codes.get(key, 0)
        decoded = self._rows.decoded
        out = decoded.get(code)
        if out is not None:
            return out
        if len(decoded) >= _CONTEXTS_KEPT:
            decoded.clear()
        digits = self._digits(key)
        n = self.model.n_symbols
        known = []
        for x in reversed(digits[len(digits) - self.window:] if self.window else []):
            if not 0 <= x < n:
                break
            known.append(x)
        u, v = (UNKNOWN if x >= n else START if x < 0 else x for x in digits[-2:])
        out = decoded[code] = (tuple(reversed(known)), (START if v == START else u), v)
        return out

    def _peek(self, key: Hashable) -> tuple[tuple[int, ...], int, int, np.ndarray | None]:
        """:meth:`_context` and :meth:`_predictive` of the stream, kept for the next call while
        the stream, its state and the model are unchanged (``predict_one`` then ``learn_one``
        ask for the same stream). O(window + K²), O(1) again."""
        code, post, model = self._codes.get(key, 0), self._post.get(key), self.model
        last = self._last
        if (last is not None and last[0] is model and last[1] == code and last[2] is post
                and last[3] == key):
            return last[4]
        out = (*self._context(key), self._predictive(key))
        self._last = (model, code, post, key, out)
        return out

    def _own(self, window: tuple[int, ...]) -> np.ndarray | None:
        """The model's own row after the window, when it is a component (or the whole prediction)."""
        backoff = self.model.backoff
        return self._rows.own(window) if backoff is None or backoff.use_model else None

    def _predictive(self, key: Hashable) -> np.ndarray | None:
        """The HMM's predictive state of the stream's next symbol (``None`` without an HMM). O(K²)."""
        T = self._rows.T
        if T is None:
            return None
        post = self._post.get(key)
        return self.model.backoff.hmm.startprob_ if post is None else post @ T

    def posterior(self, key: Hashable) -> np.ndarray:
        """The HMM's filtered state after the stream's last symbol (``startprob_`` before one). O(K)."""
        post = self._post.get(key)
        return self.model.backoff.hmm.startprob_.copy() if post is None else post.copy()

    def hmm_row(self, key: Hashable) -> np.ndarray:
        """The HMM filter's next-symbol distribution alone. O(K² + n · K)."""
        return self._predictive(key) @ self.model.backoff.hmm.emissionprob_

    def row(self, key: Hashable) -> np.ndarray | None:
        """The distribution of the stream's next symbol over the model's symbols (``None``
        before a model). O(n · K) (plus its rows on a context's first use)."""
        if self.model is None:
            return None
        window, u, v, state = self._peek(key)
        backoff = self.model.backoff
        if backoff is None:
            return self._own(window)
        rows = self._rows
        top, mid, _, bucket = rows.context(u, v)
        lam = self.mixture.blend(bucket).tolist()
        j = int(backoff.use_model)
        if backoff.hmm is not None and rows.stack() is not None:  # one GEMV of the stacked parts
            return rows.mixed(window, backoff.trigram.tables(top, mid), lam, state)
        if backoff.hmm is not None:  # the weight folded into the K-vector: one (K, n) product
            out = (lam[j + 1] * state) @ backoff.hmm.emissionprob_
            add_trigram(out, backoff.trigram, top, mid, lam[j])
        else:
            out = lam[j] * self._rows.trigram(u, v)
        if j:
            out += lam[0] * self._own(window)
        return out

    def argmax(self, key: Hashable) -> tuple[int, float] | None:
        """The most probable next symbol of the stream and its probability (``row(key)``'s
        argmax and maximum), ``None`` before a model, without the mixed row: the candidates
        are the context's trigram entries, the top :data:`TOP` symbols of the trigram's
        lowest level and of each HMM state, and, when the model's own rows are a part, the
        top symbols of the context's own row (:meth:`_Rows.own_top`, cached per context);
        every other symbol is bounded by those lists' cut-offs, so when the best candidate
        beats the bound it is the argmax; otherwise the whole row is computed. Below
        :data:`PRUNE_RATIO` · K · TOP symbols the whole row is computed at once (cheaper there).
        O(K · TOP + entries) pruned, O(n · K) below that, plus O(n · d) once per context for
        its own row."""
        model = self.model
        if model is None:
            return None
        backoff = model.backoff
        if not (backoff is None or model.n_symbols < self._prune_from):
            window, u, v, state = self._peek(key)
            top, mid, _, bucket = self._rows.context(u, v)
            lam = self.mixture.blend(bucket)
            own = None
            if backoff.use_model:  # the model's part: its row's top symbols, cached per context
                own, lam = (self._rows.own_top(window), lam[0]), lam[1:]
            best = _pruned_argmax(backoff.trigram, self._rows, top, mid, lam, state, own)
            if best is not None:
                return best
        row = self.row(key)
        i = int(row.argmax())
        return i, float(row[i])

    def observe(self, key: Hashable, i: int, learn: bool = True) -> float | None:
        """Stream ``key`` showed symbol index ``i``: its prequential probability (``None`` before a
        model, or for a symbol new since the model's fit), then the weights learn from it
        (``learn``) and the stream moves on. O(E · K + K² + log nnz), plus O(n · d) for a new
        context when the model itself is a component."""
        p = None
        model = self.model
        if model is not None:
            backoff = model.backoff
            window, u, v, state = self._peek(key)
            if 0 <= i < model.n_symbols:
                if backoff is None:  # the model alone
                    p = float(self._own(window)[i])
                else:
                    rows = self._rows
                    P = [rows.trigram_proba(u, v, i)]
                    if backoff.use_model:
                        P.insert(0, rows.own_proba(window, i))
                    if state is not None:
                        # the state times the symbol's emissions: its probability (the sum)
                        # and, normalised, the stream's filtered state (_filtered), at once
                        post = state * rows.E_T[i]
                        z = float(post.sum())
                        P.append(z)
                        if z > 0:
                            post /= z
                            self._post[key] = post
                            state = None
                    P, bucket, mix = np.array(P), rows.context(u, v)[3], self.mixture
                    p = mix.observe(bucket, P) if learn else float(mix.blend(bucket) @ P)
                self.loss -= math.log(max(p, 1e-300))
                self.n_scored += 1
            if state is not None:
                self._post[key] = self._filtered(state, i)
        self._codes[key] = ((self._codes.get(key, 0) << CONTEXT_BITS) | (i + 1)) & self._mask
        return p

    def _filtered(self, state: np.ndarray, i: int) -> np.ndarray:
        """:func:`~streamspec.core.hmm_filter.filtered` with the cached rows of E. O(K)."""
        E_T = self._rows.E_T
        if 0 <= i < E_T.shape[0]:
            post = state * E_T[i]
            z = post.sum()
            if z > 0:
                return post / z
        return state / state.sum()

    def end(self, key: Hashable) -> None:
        """The stream's sequence is over: its next symbol starts a new one. O(1)."""
        self._codes.pop(key, None)
        self._post.pop(key, None)

    @property
    def log_loss(self) -> float:
        """The prequential log loss so far, nats per symbol (NaN before any symbol was scored)."""
        return self.loss / self.n_scored if self.n_scored else float("nan")

    def __len__(self) -> int:
        return len(self._codes)


def _prune_from(model) -> int:
    """The alphabet size from which :meth:`OnlinePredictor.argmax` prunes (below it the whole
    row is cheaper): above 4 · TOP symbols and :data:`PRUNE_RATIO` · K · TOP. O(1)."""
    hmm = None if model.backoff is None else model.backoff.hmm
    k = 1 if hmm is None else hmm.n_states
    return max(4 * TOP + 1, PRUNE_RATIO * k * TOP)
