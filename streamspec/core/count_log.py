"""The counts added to a store of triples since each of its snapshots: a warm refit's change
read from a log instead of found by comparing two snapshots of every count.

A refit needs ``new = f · old + Δ`` between the snapshot its previous fit saw and the one it
fits (:func:`~streamspec.core.triples_change.triples_change`). Comparing the snapshots costs a
binary search of every old code in the new ones and a dozen passes over nnz-sized arrays (0.25–
0.85 s at 9 · 10⁶ distinct triples, most of it page faults of the temporaries), whatever the
change. The accumulator knows the change as it makes it: every batch of counts it merges into
its sorted counts is appended here (:meth:`CountLog.append`), and every snapshot it hands out is
marked with the log's position (:meth:`CountLog.mark`); between two marked snapshots of one log
Δ is the sum of the batches between their marks and f = 1 (:func:`logged_delta`),
O(|Δ| log |Δ|).

Only what a snapshot still needs is kept: batches older than the oldest live marked snapshot
are dropped (a snapshot's mark goes with it), nothing is kept while no snapshot is alive, and
a log that grows past a quarter of the counts it describes is dropped whole (comparing is
then as cheap, relatively): its memory stays below a quarter of the counts'. Whoever
changes the counts otherwise (forgetting, pruning, an undo) invalidates the log
(:meth:`~CountLog.invalidate`): its marks then give no change and the comparison is used.
Arrays in, arrays out; no reference to the store.
"""

from __future__ import annotations

import os
import threading
import weakref

import numpy as np

from streamspec.core.triples import Triples
from streamspec.core.windows import sum_duplicates

__all__ = ["CountLog", "logged_delta"]

_MIN_ENTRIES = 1 << 16  # a log may always hold this many entries (small stores)
_LOGS_MADE: weakref.WeakSet = weakref.WeakSet()


def _after_fork() -> None:
    # why: a fork while a background refit held a log's lock would leave it held in the child
    for log in list(_LOGS_MADE):
        log._lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


class CountLog:
    """Batches of counts ``(codes, weights)`` added to one store since its live snapshots.

    Memory: the entries appended since the oldest live marked snapshot, at most
    ``max(65,536, nnz / 4)`` (beyond, the log is dropped); :attr:`nbytes`.

    Examples
    --------
    >>> log = CountLog()
    >>> old = Triples(3, np.array([1, 2]), np.array([1.0, 1.0])); log.mark(old)
    >>> log.append(np.array([2, 5]), np.array([1.0, 1.0]), nnz=3)
    >>> new = Triples(3, np.array([1, 2, 5]), np.array([1.0, 2.0, 1.0])); log.mark(new)
    >>> d = logged_delta(old, new)
    >>> d.codes.tolist(), d.weights.tolist()
    ([2, 5], [1.0, 1.0])
    >>> log.invalidate(); logged_delta(old, new) is None
    True
    """

    def __init__(self):
        self._lock = threading.Lock()  # why: a background refit reads while the store appends
        _LOGS_MADE.add(self)
        self._batches: list[tuple[np.ndarray, np.ndarray]] = []
        self._start = 0  # the position of _batches[0]
        self._entries = 0
        self._epoch = 0  # bumped by invalidate: marks of an earlier epoch give no change
        self._live: dict[int, int] = {}  # id(snapshot) -> its position, while it lives

    def append(self, codes: np.ndarray, weights: np.ndarray, nnz: int) -> None:
        """Log a batch added to the store (sorted or not, repeats allowed), the store then
        holding ``nnz`` distinct entries. Kept only while a marked snapshot lives. O(1)."""
        with self._lock:
            if not self._live:
                self._start += len(self._batches) + 1
                self._batches, self._entries = [], 0
                return
            self._batches.append((codes, weights))
            self._entries += codes.size
            if self._entries > max(_MIN_ENTRIES, nnz // 4):
                self._drop()

    def position(self) -> tuple[int, int]:
        """``(epoch, position)`` of the store now: a copy of it made now marks its snapshots
        there (:meth:`mark`'s ``at``). O(1)."""
        with self._lock:
            return self._epoch, self._start + len(self._batches)

    @property
    def nbytes(self) -> int:
        """Bytes of the batches held. O(batches)."""
        with self._lock:
            return sum(c.nbytes + w.nbytes for c, w in self._batches)

    def mark(self, snapshot: Triples, at: tuple[int, int] | None = None) -> None:
        """Mark ``snapshot``, just taken, as the store now (or as it was at :meth:`position`
        ``at``: a snapshot of a copy made then that has not changed since): changes to it can be
        read from here on while its arrays live (any :class:`Triples` over the same two arrays is
        the same snapshot: fits wrap them in their own). Drops the batches no live snapshot
        needs. O(live snapshots)."""
        codes = snapshot.codes
        with self._lock:
            if at is not None and at[0] != self._epoch:
                return  # invalidated since: nothing to read for it
            position = self._start + len(self._batches) if at is None else at[1]
            self._live[id(codes)] = position
            _MARKS[id(codes)] = (self, self._epoch, position, weakref.ref(snapshot.weights))
            weakref.finalize(codes, self._forget, id(codes)).atexit = False
            oldest = min(self._live.values())
            if oldest > self._start:
                drop = oldest - self._start
                self._entries -= sum(c.size for c, _ in self._batches[:drop])
                del self._batches[:drop]
                self._start = oldest

    def invalidate(self) -> None:
        """The counts changed in a way the log does not hold: no change is read from it for
        the snapshots marked so far. O(1)."""
        with self._lock:
            self._drop()

    def _drop(self) -> None:
        self._start += len(self._batches) + 1
        self._batches, self._entries = [], 0
        self._epoch += 1
        self._live.clear()

    def _forget(self, key: int) -> None:
        with self._lock:
            self._live.pop(key, None)
        _MARKS.pop(key, None)

    def batches(self, epoch: int, lo: int, hi: int) -> list[tuple[np.ndarray, np.ndarray]] | None:
        """The batches logged between positions ``lo`` and ``hi`` of ``epoch``, ``None`` if the
        log no longer holds them. O(batches)."""
        with self._lock:
            if epoch != self._epoch or lo < self._start or hi > self._start + len(self._batches):
                return None
            return self._batches[lo - self._start : hi - self._start]


# id(snapshot.codes) -> (log, epoch, position, weakref to snapshot.weights)
_MARKS: dict[int, tuple[CountLog, int, int, weakref.ref]] = {}


def _mark_of(t: Triples) -> tuple | None:
    """The mark of the snapshot whose arrays ``t`` holds (both: a rescaled copy shares the codes)."""
    mark = _MARKS.get(id(t.codes))
    return mark if mark is not None and mark[3]() is t.weights else None


def logged_delta(old: Triples, new: Triples) -> Triples | None:
    """Δ with ``new = old + Δ``, read from the log that marked both snapshots, or ``None`` (not
    marked by one log, the log invalidated or dropped since, or ``new`` older than ``old``):
    the summed batches, without the entries that cancel, over ``new``'s alphabet.
    O(|Δ| log |Δ|)."""
    a, b = _mark_of(old), _mark_of(new)
    if a is None or b is None or a[0] is not b[0] or a[1] != b[1] or b[2] < a[2] or old.n > new.n:
        return None
    batches = a[0].batches(a[1], a[2], b[2])
    if batches is None:
        return None
    if not batches:
        return Triples.empty(new.n)
    return Triples(new.n, *sum_duplicates(np.concatenate([c for c, _ in batches]),
                                          np.concatenate([w for _, w in batches])))
