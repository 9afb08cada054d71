"""Many symbols of many streams at once: :meth:`BatchObservation.observe_many`.

The daemon reads each poll's records as one batch; :class:`BatchObservation` (mixed into
:class:`~streamspec.streaming.online_predictor.OnlinePredictor`) gives the same figures as
observing them one at a time, with the per-item Python work cut to reading the contexts:
one vectorised trigram lookup, the HMM filter advanced for all the batch's streams at
once, the weights updated in order (docs/math.md section 9).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np

from streamspec.core.trigram import START, UNKNOWN
from streamspec.streaming.context_codes import CONTEXT_BITS, DIGIT

__all__ = ["BatchObservation", "ObservedBatch", "MIN_VECTOR"]

MIN_VECTOR = 4  # streams whose next items are filtered as one array step, at least


class ObservedBatch:
    """What :meth:`BatchObservation.observe_many` gathers in its first pass over a batch."""

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


class BatchObservation:
    """:meth:`observe_many`, for a predictor holding ``model``, ``mixture``, ``loss``,
    ``n_scored``, the streams' context codes ``_codes`` and filtered states ``_post``, the
    rows ``_rows``, and ``_context``/``end`` (an :class:`OnlinePredictor`)."""

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

    def _first_pass_reads(self) -> tuple[int, bool, bool]:
        """What both first passes (:meth:`_read_plain`, :meth:`_read_batch`) read of the model:
        its number of symbols, whether its backoff has an HMM to filter, and whether the model
        itself is a component (its windows then wanted for the scored symbols). O(1)."""
        backoff = self.model.backoff
        return (self.model.n_symbols, backoff is not None and backoff.hmm is not None,
                backoff is None or backoff.use_model)

    def _read_plain(self, keys, indices, scored) -> ObservedBatch:
        """:meth:`_read_batch` of a batch without ends (the common case), fewer steps an item:
        the items' ranks in their streams are counted afterwards, as arrays. O(T)."""
        codes, mask, post = self._codes, self._mask, self._post
        n, with_hmm, own = self._first_pass_reads()
        batch = ObservedBatch()
        S, U, V, X, rows = batch.scored, batch.u, batch.v, batch.x, batch.rows
        row_hmm, rget, cget = [], rows.get, codes.get
        every = scored is None
        for t, (key, i) in enumerate(zip(keys, indices, strict=True)):
            if i < 0:
                continue
            code = cget(key, 0)
            if i < n and (every or scored[t]):
                v = (code & DIGIT) - 1
                u = ((code >> CONTEXT_BITS) & DIGIT) - 1
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

    def _read_batch(self, keys, indices, scored, ends) -> ObservedBatch:
        """Pass 1, in order: the contexts of the scored symbols, every stream's items for the
        HMM, the streams' contexts moved on. O(T) (the hot loop: locals only)."""
        codes, mask, post = self._codes, self._mask, self._post
        n, with_hmm, own = self._first_pass_reads()
        batch = ObservedBatch()
        S, U, V, X, items = batch.scored, batch.u, batch.v, batch.x, batch.items
        rows, restart, ranks = batch.rows, batch.restart, []
        for t, (key, i) in enumerate(zip(keys, indices, strict=True)):
            if i >= 0:
                code = codes.get(key, 0)
                if i < n and (scored is None or scored[t]):
                    v = (code & DIGIT) - 1
                    u = ((code >> CONTEXT_BITS) & DIGIT) - 1
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

    def _advance_hmm(self, batch: ObservedBatch, indices) -> None:
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

    def _filter_levels(self, batch: ObservedBatch, indices, cur: np.ndarray) -> None:
        """The filter over the batch's items (``cur``: the streams' filtered states, updated in
        place), and each item's probability under the HMM. The i-th items of all streams are
        one array step while at least :data:`MIN_VECTOR` streams have one (O(S · K²) each);
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
        vector = int(np.argmax(sizes < MIN_VECTOR)) if (sizes < MIN_VECTOR).any() else sizes.size
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

    def _score(self, batch: ObservedBatch) -> np.ndarray:
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
