"""Predictions for many interleaved streams under the current model, learning as they go.

:class:`OnlinePredictor` is the online half of streamspec's predictor
(:mod:`streamspec.core.backoff`) for a learner that sees the symbols of many streams one
at a time (the river model, the Kafka daemon): each stream keeps its last symbols and
its hidden-state vector; every symbol is first predicted from them (its prequential
probability, whose log is the running log loss), then the mixing weights learn from it
and the stream moves on. The weights are the learner's, shared by all streams and kept
across refits; a refit swaps the model in (:meth:`OnlinePredictor.set_model`).

Costs per symbol: O(E · K + K²) plus, the first time a context is met, O(n · (d + 1))
for its rows (kept in a cache bounded in floats, least recently used out); a full
distribution O(n · K).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Hashable, Sequence

import numpy as np

from streamspec.core.hmm_filter import filtered
from streamspec.core.mixture import ExpertMixture
from streamspec.core.trigram import START, UNKNOWN

__all__ = ["OnlinePredictor", "ROW_CACHE_FLOATS", "CONTEXT_BITS", "UNSEEN"]

ROW_CACHE_FLOATS = 1 << 22  # rows kept per model (floats: 32 MiB)
CONTEXT_BITS = 22  # bits per symbol in a stream's context code (0: no symbol, the start)
_DIGIT = (1 << CONTEXT_BITS) - 1
_BUCKETS_KEPT = 1 << 18  # contexts whose bucket is remembered (then forgotten all at once)
UNSEEN = _DIGIT - 1  # the index of a label no model knows (above every alphabet: 2²¹ symbols)
_MIN_VECTOR = 4  # streams whose next items are filtered as one array step, at least


class _Rows:
    """The cached rows of one model: its own row per window context, the trigram's per pair."""

    def __init__(self, model, window: int, capacity: int):
        self.model, self.window = model, window
        self.n = model.n_symbols
        self.capacity = max(int(capacity), 4 * self.n)
        self.size = 0
        self._cache: OrderedDict = OrderedDict()
        self._buckets: dict[tuple[int, int], int] = {}

    def _get(self, key, make):
        row = self._cache.get(key)
        if row is None:
            row = make()
            self._cache[key] = row
            self.size += row.size
            while self.size > self.capacity and len(self._cache) > 1:
                self.size -= self._cache.popitem(last=False)[1].size
        else:
            self._cache.move_to_end(key)
        return row

    def own(self, digits: tuple[int, ...]) -> np.ndarray:
        """The model's own row after the known symbols ``digits`` (oldest first). O(n · d) once."""
        return self._get(("own", digits), lambda: self.model.predict_from_state(
            self.model.state_for(np.asarray(digits, dtype=np.int64))))

    def trigram(self, u: int, v: int) -> np.ndarray:
        """The trigram's row after ``(u, v)``. O(n + entries) once."""
        return self._get(("tri", u, v), lambda: self.model.backoff.trigram.predict(u, v))

    def trigram_proba(self, u: int, v: int, i: int) -> float:
        """The trigram's probability of ``i`` after ``(u, v)``: from the cached row if there is
        one, else one lookup, O(log nnz), without making the row."""
        row = self._cache.get(("tri", u, v))
        if row is not None:
            return float(row[i])
        return float(self.model.backoff.trigram.proba_of([u], [v], [i])[0])

    def bucket(self, u: int, v: int) -> int:
        """The weights' bucket of context ``(u, v)`` (cached: one integer each, at most
        :data:`_BUCKETS_KEPT`). O(log nnz) once."""
        b = self._buckets.get((u, v))
        if b is None:
            if len(self._buckets) >= _BUCKETS_KEPT:
                self._buckets.clear()
            b = self._buckets[(u, v)] = int(self.model.backoff.buckets([u], [v])[0])
        return b


class _Batch:
    """What :meth:`OnlinePredictor.observe_many` gathers in its first pass over a batch."""

    def __init__(self) -> None:
        self.scored: list[int] = []  # positions scored, in order, with their contexts
        self.u: list[int] = []
        self.v: list[int] = []
        self.x: list[int] = []
        self.windows: list[tuple[int, ...]] = []
        self.rows: dict[Hashable, int] = {}  # the HMM's streams, in order of appearance
        self.items: list[tuple[int, int, bool, int]] = []  # (t, stream row, restarts, rank)
        self.restart: set[int] = set()  # stream rows whose sequence ended since their last item
        self.arrays: tuple | None = None  # or the items as arrays already (a batch without ends)
        self.hmm_proba = np.zeros(0)

    def set_items(self, t, row: list[int], has_state: list[bool]) -> None:
        """The HMM's items of a batch without ends: positions and stream rows; each one's rank
        in its stream, and whether it starts from no state, follow. O(items log items)."""
        row_a = np.array(row, dtype=np.int64)
        order = np.argsort(row_a, kind="stable")
        sizes = np.bincount(row_a)
        rank = np.empty_like(row_a)
        rank[order] = np.arange(row_a.size) - np.repeat(np.cumsum(sizes) - sizes, sizes)
        fresh = (rank == 0) & ~np.array(has_state, dtype=bool)[row_a]
        self.arrays = (np.asarray(t, dtype=np.int64), row_a, fresh, rank)

    def hmm_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Positions, stream rows, restarts and ranks of the HMM's items, as arrays."""
        if self.arrays is not None:
            return self.arrays
        t, row, fresh, rank = zip(*self.items, strict=True)
        return (np.array(t, dtype=np.int64), np.array(row, dtype=np.int64),
                np.array(fresh, dtype=bool), np.array(rank, dtype=np.int64))

    def has_items(self) -> bool:
        return bool(self.items) or (self.arrays is not None and self.arrays[0].size > 0)


class OnlinePredictor:
    """Per-stream contexts and hidden states, and the weights learned from every symbol.

    Parameters
    ----------
    window
        Symbols of context the model's own prediction uses (its window filter).
    switching
        The weights' switching rate when there is no model yet to take them from.
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
    >>> acc = MomentAccumulator(n_symbols=3)
    >>> acc.learn_many([0, 1, 2] * 200)
    >>> online = OnlinePredictor(window=2)
    >>> online.set_model(SpectralEstimator(rank=3).fit(acc))
    >>> [round(online.observe("s", x), 2) for x in (0, 1, 2)]
    [0.33, 0.67, 1.0]
    >>> int(online.row("s").argmax())
    0
    """

    def __init__(self, window: int = 2, cache_floats: int = ROW_CACHE_FLOATS):
        self.window = int(window)
        self.cache_floats = cache_floats
        self.model = None
        self.mixture: ExpertMixture | None = None
        self.components: tuple[str, ...] = ()  # the components the weights are for
        self._rows: _Rows | None = None
        self._keep = max(self.window, 2)  # symbols kept per stream
        self._mask = (1 << (CONTEXT_BITS * self._keep)) - 1
        self._codes: dict[Hashable, int] = {}
        self._post: dict[Hashable, np.ndarray] = {}  # the HMM filter after each stream's last symbol
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
        self._rows = _Rows(model, self.window, self.cache_floats)
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
        return [((code >> (CONTEXT_BITS * a)) & _DIGIT) - 1 for a in range(self._keep - 1, -1, -1)]

    def _context(self, key: Hashable) -> tuple[tuple[int, ...], int, int]:
        """The stream's context: the known symbols of the model's window (oldest first) and the
        trigram's ``(u, v)`` (-1: the start, -2: a symbol the model does not know). O(window)."""
        digits = self._digits(key)
        n = self.model.n_symbols
        known = []
        for x in reversed(digits[len(digits) - self.window:] if self.window else []):
            if not 0 <= x < n:
                break
            known.append(x)
        u, v = (UNKNOWN if x >= n else START if x < 0 else x for x in digits[-2:])
        return tuple(reversed(known)), (START if v == START else u), v

    def _own(self, window: tuple[int, ...]) -> np.ndarray | None:
        """The model's own row after the window, when it is a component (or the whole prediction)."""
        backoff = self.model.backoff
        return self._rows.own(window) if backoff is None or backoff.use_model else None

    def _predictive(self, key: Hashable) -> np.ndarray | None:
        """The HMM's predictive state of the stream's next symbol (``None`` without an HMM). O(K²)."""
        hmm = None if self.model.backoff is None else self.model.backoff.hmm
        if hmm is None:
            return None
        post = self._post.get(key)
        return hmm.startprob_ if post is None else post @ hmm.transmat_

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
        window, u, v = self._context(key)
        own, backoff = self._own(window), self.model.backoff
        if backoff is None:
            return own
        parts = {"model": own, "trigram": self._rows.trigram(u, v)}
        if backoff.hmm is not None:
            parts["hmm"] = self._predictive(key) @ backoff.hmm.emissionprob_
        lam = self.mixture.blend(self._rows.bucket(u, v))
        return sum(w * parts[c] for w, c in zip(lam, backoff.components, strict=True))

    def observe(self, key: Hashable, i: int, learn: bool = True) -> float | None:
        """Stream ``key`` showed symbol index ``i``: its prequential probability (``None`` before a
        model, or for a symbol new since the model's fit), then the weights learn from it
        (``learn``) and the stream moves on. O(E · K + K² + log nnz), plus O(n · d) for a new
        context when the model itself is a component."""
        p = None
        model = self.model
        if model is not None:
            backoff = model.backoff
            window, u, v = self._context(key)
            state = self._predictive(key)
            if 0 <= i < model.n_symbols:
                if backoff is None:  # the model alone
                    p = float(self._own(window)[i])
                else:
                    probs = {"trigram": self._rows.trigram_proba(u, v, i)}
                    if backoff.use_model:
                        probs["model"] = self._own(window)[i]
                    if state is not None:
                        probs["hmm"] = float(state @ backoff.hmm.emissionprob_[:, i])
                    P = np.array([probs[c] for c in backoff.components])
                    bucket = self._rows.bucket(u, v)
                    mix = self.mixture
                    p = mix.observe(bucket, P) if learn else float(mix.blend(bucket) @ P)
                self.loss -= math.log(max(p, 1e-300))
                self.n_scored += 1
            if state is not None:
                self._post[key] = filtered(state, backoff.hmm.emissionprob_, i)
        self._codes[key] = ((self._codes.get(key, 0) << CONTEXT_BITS) | (i + 1)) & self._mask
        return p

    # ---------------------------------------------------------------- many symbols at once

    def observe_many(self, keys: Sequence[Hashable], indices: Sequence[int],
                     scored: Sequence[bool] | None = None,
                     ends: Sequence[bool] | None = None) -> np.ndarray:
        """Stream ``keys[t]`` showed symbol index ``indices[t]``, for t in order: what
        :meth:`observe` does for each, with the weights learning only from the ``scored``
        symbols (default: all); the others still move their stream (its context and its
        hidden state). ``ends[t]``: the stream's sequence ends after item t (:meth:`end`); an
        index below 0 is no symbol (an end alone).

        Returns the prequential probability of each item, NaN where it was not scored (not
        asked, no model yet, or a symbol new since the model's fit). The same figures as
        :meth:`observe` one at a time, at a fraction of the cost: O(T) steps of Python for
        the contexts, one vectorised trigram lookup, the HMM filter advanced for all streams
        at once (O(L) array steps of O(S · K²), S streams of at most L items in the batch),
        and O(E · K) per scored symbol for the weights (plus O(n · d) per new context when
        the model itself is a component).
        """
        out = np.full(len(keys), np.nan)
        model = self.model
        if model is None:
            for t, (key, i) in enumerate(zip(keys, indices, strict=True)):
                if i >= 0:
                    self._codes[key] = ((self._codes.get(key, 0) << CONTEXT_BITS) | (i + 1)) & self._mask
                if ends is not None and ends[t]:
                    self.end(key)
            return out
        if ends is None or not any(ends):
            batch = self._read_plain(keys, indices, scored)
        else:
            batch = self._read_batch(keys, indices, scored, ends)
        if batch.rows:
            self._advance_hmm(batch, indices)
        if batch.scored:
            out[batch.scored] = self._score(batch)
        return out

    def _read_plain(self, keys, indices, scored) -> _Batch:
        """:meth:`_read_batch` of a batch without ends (the common case), fewer steps an item:
        the items' ranks in their streams are counted afterwards, as arrays. O(T)."""
        model, codes, mask, post = self.model, self._codes, self._mask, self._post
        n, backoff = model.n_symbols, model.backoff
        with_hmm = backoff is not None and backoff.hmm is not None
        own = backoff is None or backoff.use_model
        batch = _Batch()
        S, U, V, X, rows = batch.scored, batch.u, batch.v, batch.x, batch.rows
        row_hmm, rget, cget = [], rows.get, codes.get
        every = scored is None
        for t, (key, i) in enumerate(zip(keys, indices, strict=True)):
            if i < 0:
                continue
            code = cget(key, 0)
            if i < n and (every or scored[t]):
                v = (code & _DIGIT) - 1
                u = ((code >> CONTEXT_BITS) & _DIGIT) - 1
                v = UNKNOWN if v >= n else v  # -1 (the start) stays
                u = START if v == START else UNKNOWN if u >= n else u
                S.append(t), U.append(u), V.append(v), X.append(i)
                if own:
                    batch.windows.append(self._context(key)[0])
            if with_hmm:
                row = rget(key)
                if row is None:
                    row = rows[key] = len(rows)
                row_hmm.append(row)
            codes[key] = ((code << CONTEXT_BITS) | (i + 1)) & mask
        if row_hmm:
            t_hmm = np.flatnonzero(np.asarray(indices) >= 0)  # the items with a symbol
            batch.set_items(t_hmm, row_hmm, [k in post for k in rows])
        return batch

    def _read_batch(self, keys, indices, scored, ends) -> _Batch:
        """Pass 1, in order: the contexts of the scored symbols, every stream's items for the
        HMM, the streams' contexts moved on. O(T) (the hot loop: locals only)."""
        model, codes, mask, post = self.model, self._codes, self._mask, self._post
        n, backoff = model.n_symbols, model.backoff
        with_hmm = backoff is not None and backoff.hmm is not None
        own = backoff is None or backoff.use_model
        batch = _Batch()
        S, U, V, X, items = batch.scored, batch.u, batch.v, batch.x, batch.items
        rows, restart, ranks = batch.rows, batch.restart, []
        for t, (key, i) in enumerate(zip(keys, indices, strict=True)):
            if i >= 0:
                code = codes.get(key, 0)
                if i < n and (scored is None or scored[t]):
                    v = (code & _DIGIT) - 1
                    u = ((code >> CONTEXT_BITS) & _DIGIT) - 1
                    v = UNKNOWN if v >= n else v  # -1 (the start) stays
                    u = START if v == START else UNKNOWN if u >= n else u
                    S.append(t), U.append(u), V.append(v), X.append(i)
                    if own:
                        batch.windows.append(self._context(key)[0])
                if with_hmm:
                    row = rows.get(key)
                    if row is None:
                        row = rows[key] = len(ranks)
                        ranks.append(0)
                        fresh = key not in post
                    else:
                        fresh = row in restart
                        restart.discard(row)
                    items.append((t, row, fresh, ranks[row]))
                    ranks[row] += 1
                codes[key] = ((code << CONTEXT_BITS) | (i + 1)) & mask
            if ends is not None and ends[t]:
                codes.pop(key, None)
                if with_hmm:
                    row = rows.get(key)
                    if row is None:
                        row = rows[key] = len(ranks)
                        ranks.append(0)
                    restart.add(row)
        return batch

    def _advance_hmm(self, batch: _Batch, indices) -> None:
        """The HMM filter of every stream of the batch, one array step per item rank in a stream:
        the predictive state of each item (for its score), then the filtered one. O(L · S · K²)."""
        hmm = self.model.backoff.hmm
        keys = list(batch.rows)
        cur = np.stack([self._post.get(k, hmm.startprob_) for k in keys])
        if batch.has_items():
            self._filter_levels(batch, indices, cur)
        for r, k in enumerate(keys):
            if r in batch.restart:
                self._post.pop(k, None)
            else:  # a copy: a row would keep the whole batch's array alive
                self._post[k] = cur[r].copy()

    def _filter_levels(self, batch: _Batch, indices, cur: np.ndarray) -> None:
        """The filter over the batch's items (``cur``: the streams' filtered states, updated in
        place), and each item's probability under the HMM. The i-th items of all streams are
        one array step while at least :data:`_MIN_VECTOR` streams have one (O(S · K²) each);
        the items of the few longest streams beyond are filtered one by one (O(K²) each)."""
        hmm = self.model.backoff.hmm
        T, E = hmm.transmat_, hmm.emissionprob_
        t_all, row, fresh, level = batch.hmm_arrays()
        x = np.asarray(indices, dtype=np.int64)[t_all]
        known = x < E.shape[1]
        if known.all():
            ET = E.T[x]  # (items, K)
        else:  # a symbol the HMM does not know moves the state by the transition only
            ET = np.where(known[:, None], E[:, np.where(known, x, 0)].T, 1.0)
        proba = batch.hmm_proba = np.zeros(int(t_all.max()) + 1)
        scoring = bool(batch.scored)
        sizes = np.bincount(level)
        restarts = np.bincount(level, weights=fresh, minlength=sizes.size) > 0
        vector = int(np.argmax(sizes < _MIN_VECTOR)) if (sizes < _MIN_VECTOR).any() else sizes.size
        order = np.argsort(level, kind="stable")
        bounds = np.concatenate([[0], np.cumsum(sizes)])
        for lvl in range(vector):
            at = order[bounds[lvl]:bounds[lvl + 1]]
            r = row[at]
            pred = cur[r] @ T
            if restarts[lvl]:
                pred[fresh[at]] = hmm.startprob_
            q = pred * ET[at]
            z = q.sum(axis=1)
            if scoring:
                proba[t_all[at]] = np.where(known[at], z, 0.0)
            if (z > 0).all():
                cur[r] = q / z[:, None]
            else:  # no mass for the symbol: the predictive state itself, normalised
                ok = (z > 0)[:, None]
                cur[r] = np.where(ok, q / np.where(ok, z[:, None], 1.0),
                                  pred / pred.sum(axis=1, keepdims=True))
        rest = order[bounds[vector]:]
        for j in rest[np.argsort(row[rest], kind="stable")].tolist():  # by stream, in order
            r = row[j]
            pred = hmm.startprob_ if fresh[j] else cur[r] @ T
            q = pred * ET[j]
            z = float(q.sum())
            proba[t_all[j]] = z if known[j] else 0.0
            cur[r] = q / z if z > 0 else pred / pred.sum()

    def _score(self, batch: _Batch) -> np.ndarray:
        """The scored symbols' probabilities; the weights learn from them in order. O(m · E · K)."""
        backoff = self.model.backoff
        t_s, u, v, x = (np.asarray(a, dtype=np.int64) for a in
                        (batch.scored, batch.u, batch.v, batch.x))
        own = None
        if backoff is None or backoff.use_model:
            own = np.array([self._rows.own(w)[i] for w, i in zip(batch.windows, x.tolist(),
                                                                  strict=True)])
        if backoff is None:
            p = own
        else:
            cols = {"model": own, "trigram": backoff.trigram.proba_of(u, v, x)}
            if backoff.hmm is not None:
                cols["hmm"] = batch.hmm_proba[t_s]
            P = np.stack([cols[c] for c in backoff.components], axis=1)
            p = self.mixture.observe_many(backoff.buckets(u, v), P)
        self.loss -= float(np.log(np.maximum(p, 1e-300)).sum())
        self.n_scored += int(p.size)
        return p

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
