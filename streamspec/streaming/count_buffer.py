"""The counts of a :class:`~streamspec.streaming.accumulator.MomentAccumulator` and their buffers.

The counts are sorted distinct packed codes of grams of window L (triples at L = 1) with
weights (``_codes``, ``_w``); newly counted grams wait in buffers (learn_one's list
``_pending``, arrays ``_chunks`` and, for small alphabets, one dense array ``_dense``) and
are merged in when the buffers grow large or when the counts are read (``_flush``).
:class:`CountBuffer` holds these steps; the accumulator creates the attributes and
decides what to count.
"""

from __future__ import annotations

import sys
import weakref
from collections.abc import Hashable, Iterable

import numpy as np

from streamspec.core.count_log import CountLog
from streamspec.streaming.count_kernels import (
    compact_counts,
    compact_to_packed,
    count_run,
    merge_sorted,
    sort_reduce,
    sort_reduce_weighted,
    stream_codes,
    to_packed,
)

__all__ = ["CountBuffer", "FLUSH_AT", "count_log", "copied_log", "invalidate_log", "mark_snapshot"]

FLUSH_AT = 8192  # learn_one's triple codes kept in a list before they become one array
_CONSOLIDATE_AT = 65536  # pending triples are merged into the sorted counts past max(this, nnz/2)
_DENSE_CELLS = 1 << 16  # alphabets with n^(2L+1) below this buffer counts in one dense array (512 KiB)
_RESCALE_AT = 1e100  # forgetting: the running weight is folded into the counts past this
_MISSING = object()
# why not an attribute: an accumulator with more than 30 attributes loses CPython's fast
# attribute access in learn_one (accumulator_windows.py); made by the first logged snapshot
_LOGS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


# an unchanged copy of an accumulator (the background refitter's) marks its snapshots in the
# original's log, where the original was when copied: copy -> (log, (epoch, position))
_COPIED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def mark_snapshot(acc, snapshot) -> None:
    """Mark ``acc``'s snapshot in its count log (or, for an unchanged copy, in its original's). O(1)."""
    copied = _COPIED.get(acc)
    if copied is not None:
        copied[0].mark(snapshot, at=copied[1])
    else:
        count_log(acc).mark(snapshot)


def copied_log(original, copy) -> None:
    """``copy`` was just made from ``original`` (flushed): until it changes, its snapshots are
    the original's as it is now. O(1)."""
    log = count_log(original)
    _COPIED[copy] = (log, log.position())


def count_log(acc) -> CountLog:
    """The :class:`~streamspec.core.count_log.CountLog` of ``acc``'s counts (made on first use). O(1)."""
    log = _LOGS.get(acc)
    if log is None:
        log = _LOGS[acc] = CountLog()
    return log


def invalidate_log(acc) -> None:
    """The counts of ``acc`` changed in a way its count log does not hold (an undo, a rescale,
    a recoding): no change since an earlier snapshot is read from the log. O(1)."""
    _COPIED.pop(acc, None)
    log = _LOGS.get(acc)
    if log is not None:
        log.invalidate()


class CountBuffer:
    """Buffered counting and undo of :class:`~streamspec.streaming.accumulator.MomentAccumulator`
    (a mixin: the attributes are the accumulator's)."""

    def _snapshot(self, key: Hashable, n_labels: int) -> tuple:
        """What a learning call may change, to undo it exactly (O(1))."""
        return (key, n_labels, self._tails.get(key, _MISSING), self._heads.get(key, _MISSING),
                self._chunks, len(self._chunks), self._chunked, self._codes, self._w,
                self._pending, len(self._pending), self._pending_w, len(self._pending_w),
                self._total, self._weight, self._dense,
                self._start_log, len(self._start_log), self._start_w, len(self._start_w), self._starts)

    def _restore(self, snap: tuple) -> None:
        (key, n_labels, tail, head, chunks, n_chunks, chunked, codes, w,
         pending, n_pending, pending_w, n_pending_w, total, weight, dense,
         start_log, n_start_log, start_w, n_start_w, starts) = snap
        if n_labels >= 0:
            self._alphabet.truncate(n_labels)
        for store, value in ((self._tails, tail), (self._heads, head)):
            if value is _MISSING:
                store.pop(key, None)
            else:
                store[key] = value
        del chunks[n_chunks:]
        del pending[n_pending:]
        del pending_w[n_pending_w:]
        self._chunks, self._chunked, self._codes, self._w = chunks, chunked, codes, w
        self._pending, self._pending_w = pending, pending_w
        self._total, self._weight = total, weight
        self._dense = dense
        del start_log[n_start_log:]
        del start_w[n_start_w:]
        self._start_log, self._start_w, self._starts = start_log, start_w, starts
        invalidate_log(self)  # what the undone call logged is not in the counts

    def __getstate__(self) -> dict:
        # why without the last windows(): it is rebuilt in O(1) from the counts (O(nnz) under
        # forgetting), and its memo of singular values belongs to the fits of this process
        return {**self.__dict__, "_windows_view": None}

    def __setstate__(self, state: dict) -> None:
        if "_dense_m" in state:  # pickled when the dense buffer's alphabet size had its own slot
            m = state.pop("_dense_m")
            state["_dense"] = None if state["_dense"] is None else (state["_dense"], m)
        state.setdefault("_windows_view", None)  # pickled before windows() kept its snapshot
        self.__dict__.update(state)

    def memory_bytes(self) -> int:
        """Estimated bytes held: counts, buffers, alphabet and per-stream state.

        Counts: the sorted codes and weights plus the buffered arrays and the count log's
        batches since the oldest live snapshot (core/count_log.py; exact ``nbytes``); the
        learn_one buffers (list slots and int objects, ~40 bytes a triple); the alphabet
        (``sys.getsizeof`` of its dict, list and labels); the stream tails and heads (dict
        slots, ~100 bytes a stream). Not counted: numpy and Python temporaries of a call in
        progress. O(n + streams) time.

        Examples
        --------
        >>> from streamspec import MomentAccumulator
        >>> acc = MomentAccumulator(26)
        >>> acc.learn_many(np.arange(26).repeat(3))
        >>> 0 < acc.memory_bytes() < 20_000
        True
        """
        size = self._codes.nbytes + self._w.nbytes + (self._dense[0].nbytes if self._dense is not None else 0)
        log = _LOGS.get(self)
        size += log.nbytes if log is not None else 0  # what a warm refit reads its change from
        for codes, w, _ in self._chunks:
            size += codes.nbytes + (w.nbytes if w is not None else 0)
        size += 40 * (len(self._pending) + len(self._pending_w) + len(self._default_buffer))
        a = self._alphabet
        size += sys.getsizeof(a._index) + sys.getsizeof(a._labels)
        size += sum(sys.getsizeof(s) for s in a._labels)
        return int(size + 100 * (len(self._tails) + len(self._heads)) + self._starts_nbytes())

    def learn_all(self, items: Iterable[tuple[Hashable, Hashable | None, bool]]) -> int:
        """Learn ``(key, symbol, end)`` items all or nothing; the number of symbols learned.

        ``symbol`` None: nothing to learn; ``end``: the key's sequence ends after it. If
        any step raises (a full alphabet, memory), every item already learned is undone,
        so the counts, the alphabet and the stream tails are as before the call. O(1)
        per item.

        >>> from streamspec import MomentAccumulator
        >>> acc = MomentAccumulator()
        >>> acc.learn_all([("u", "a", False), ("u", "b", False), ("u", "c", True)])
        3
        >>> acc.n_triples, acc.keys
        (1.0, [])
        """
        undo = []
        learned = 0
        try:
            for key, symbol, end in items:
                if symbol is not None:
                    undo.append(self._snapshot(key, len(self._alphabet)))
                    self.learn_one(symbol, key)
                    learned += 1
                if end:
                    undo.append(self._snapshot(key, len(self._alphabet)))
                    self.end(key)
        except BaseException:
            for point in reversed(undo):
                self._restore(point)
            raise
        return learned

    def _count(self, codes) -> None:
        """Count grams given as stream codes (their 2L+1 digits in base, ``(x1·base + x2)·base + x3``
        at L = 1)."""
        if self.forgetting == 1.0:
            self._pending.extend(codes)
            if len(self._pending) >= FLUSH_AT:
                self._flush_pending()
            return
        g = self.forgetting
        for code in codes:
            self._weight /= g
            self._pending.append(code)
            self._pending_w.append(self._weight)
            self._total += self._weight
        if self._weight > _RESCALE_AT or len(self._pending) >= FLUSH_AT:
            self._normalise_weight()

    def _count_run(self, seq: np.ndarray) -> None:
        """Count every consecutive gram of a run of symbol indices without pads (sliding mode).
        O(len(seq) · L) when buffered, else one counting kernel (see
        :mod:`streamspec.streaming.count_kernels`)."""
        L = self._L
        if self.forgetting != 1.0:
            self._count_weighted_run(seq)
        elif seq.size - 2 * L < FLUSH_AT:
            self._pending.extend(stream_codes(seq, self._base, L).tolist())
            if len(self._pending) >= FLUSH_AT:
                self._flush_pending()
        else:
            n = len(self._alphabet)
            if n ** (2 * L + 1) <= _DENSE_CELLS:
                self._dense_add(compact_counts(seq, n, L), n)
            else:
                self._add_chunk((*count_run(seq, n, L), True))
            self._total += seq.size - 2 * L

    def _count_weighted_run(self, seq: np.ndarray) -> None:
        codes = to_packed(stream_codes(seq, self._base, self._L), self._base, self._L)
        g = self.forgetting
        # weights grow geometrically along the run; fold them in blocks that stay finite
        block = max(1, int(np.log(_RESCALE_AT) / -np.log(g)) // 2)
        for start in range(0, codes.size, block):
            part = codes[start : start + block]
            w = self._weight * g ** -np.arange(1, part.size + 1, dtype=np.float64)
            self._add_chunk((part, w, False))
            self._total += float(w.sum())
            self._weight = float(w[-1])
            self._normalise_weight()

    def _normalise_weight(self) -> None:
        """Fold the running forgetting weight into the stored counts (O(nnz + buffered))."""
        if self._weight == 1.0:
            return
        self._flush_pending()
        weight = self._weight
        invalidate_log(self)  # every count scaled (no log is kept under forgetting anyway)
        chunks = [(c, (w if w is not None else np.ones(c.size)) / weight, s) for c, w, s in self._chunks]
        self._w, self._chunks = self._w / weight, chunks
        self._total /= weight
        self._rescale_starts(weight)
        self._weight = 1.0

    def _flush_pending(self) -> None:
        """Turn learn_one's list of grams into one array of packed codes (all-or-nothing)."""
        if not self._pending:
            return
        stream = np.array(self._pending, dtype=np.int64)
        weights = np.array(self._pending_w) if self._pending_w else None
        L, base = self._L, self._base
        cells = base ** (2 * L + 1)
        if weights is None and base <= len(self._alphabet) + 1 and cells <= 4 * stream.size:
            # small fixed alphabet: count now. Stream code past·base^(L+1) + (x, future) ->
            # compact code (x, future)·base^L + past (x1·n² + (x2·n + x3) -> (x2·n + x3)·n + x1)
            high = base ** (L + 1)
            counts = np.bincount(stream % high * base**L + stream // high, minlength=cells)
            if cells <= _DENSE_CELLS:
                self._dense_add(counts, base)
            else:
                self._add_chunk((*compact_to_packed(counts, base, L, self._pad), True))
        else:
            self._add_chunk((to_packed(stream, base, L), weights, False))
        if weights is None:
            self._total += stream.size
        self._pending, self._pending_w = [], []

    def _dense_add(self, counts: np.ndarray, m: int) -> None:
        """Add compact counts over m symbols to the dense buffer (the in-place add comes last)."""
        if self._dense is not None and self._dense[1] != m:
            self._flush_dense()
        if self._dense is None:
            self._dense = (counts, m)
        else:
            dense = self._dense[0]
            dense += counts

    def _flush_dense(self) -> None:
        if self._dense is not None:
            # why: only learn_one's counts (base = n + 1 with pads) use the pad digit base − 1
            dense, m = self._dense
            pad = self._pad if m == self._base else None
            self._add_chunk((*compact_to_packed(dense, m, self._L, pad), True))
            self._dense = None

    def _add_chunk(self, chunk: tuple[np.ndarray, np.ndarray | None, bool]) -> None:
        """Buffer counted triples, merging all buffers into the counts when they are large."""
        if chunk[2] and self._codes.size <= 4 * chunk[0].size:  # O(chunk) to merge now
            w = chunk[1] if chunk[1] is not None else np.ones(chunk[0].size)
            self._codes, self._w = merge_sorted(self._codes, self._w, chunk[0], w)
            self._logged(chunk[0], w)
        elif self._chunked + chunk[0].size >= max(_CONSOLIDATE_AT, self._codes.size // 2):
            self._consolidate([*self._chunks, chunk])
        else:
            self._chunks.append(chunk)
            self._chunked += chunk[0].size

    def _consolidate(self, chunks: list) -> None:
        """Merge buffered triples into the sorted counts; assigns only at the end."""
        if not chunks:
            return
        if len(chunks) == 1 and chunks[0][2]:
            codes, w = chunks[0][0], chunks[0][1]
            if w is None:
                w = np.ones(codes.size)
        else:
            codes = np.concatenate([c for c, _, _ in chunks])
            if all(w is None for _, w, _ in chunks):
                codes, w = sort_reduce(codes)
            else:
                weights = np.concatenate([w if w is not None else np.ones(c.size) for c, w, _ in chunks])
                codes, w = sort_reduce_weighted(codes, weights)
        batch, batch_w = codes, w
        codes, w = merge_sorted(self._codes, self._w, batch, batch_w)
        if self.forgetting != 1.0:
            keep = w > 0  # weights that underflowed to zero
            if not keep.all():
                codes, w = codes[keep], w[keep]
        self._codes, self._w, self._chunks, self._chunked = codes, w, [], 0
        self._logged(batch, batch_w)

    def _logged(self, codes: np.ndarray, w: np.ndarray) -> None:
        """Tell the count log (a warm refit's change, core/count_log.py) what was just merged. O(1)."""
        _COPIED.pop(self, None)  # a copy that changed marks its snapshots in a log of its own
        log = _LOGS.get(self)
        if log is not None:
            log.append(codes, w, self._codes.size)
