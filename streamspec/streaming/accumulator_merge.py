"""Joining :class:`~streamspec.streaming.accumulator.MomentAccumulator` s: merge and concat.

:class:`AccumulatorMerge`, a mixin of the accumulator. Counts are sufficient
statistics (docs/math.md section 1), so accumulators fed disjoint streams merge by adding
counts (:meth:`~AccumulatorMerge.merge`, matched by symbol label), and consecutive
pieces of the same streams join exactly by also counting the triples that straddle
the border (:meth:`~AccumulatorMerge.concat`, from the tails and heads of the streams).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Self

import numpy as np

from streamspec.core.windows import auto_window, max_symbols_for, pack_grams
from streamspec.streaming.count_kernels import to_packed
from streamspec.streaming.stream_tails import NEW, remap_digits, tail_code, tail_digits

__all__ = ["AccumulatorMerge"]


class AccumulatorMerge:
    """``merge``, ``concat`` and ``+``; reads and writes the accumulator's counts and streams."""

    def merge(self, other: Self) -> Self:
        """A new accumulator holding both sets of counts, matched by symbol label.

        Exact when the two were fed disjoint sets of streams. For a key present in
        both, the tail of ``other`` is kept (it is taken to be the later part); to
        join consecutive pieces of the same streams exactly, use :meth:`concat`.
        With ``max_symbols``, labels of ``other`` that do not fit become :data:`OTHER`.
        With the same ``window``: with ``"auto"`` the result keeps the shorter of the two
        current windows (or shorter, for the joined alphabet). With different ones (sliding
        mode; e.g. a checkpoint of triples, window 1, and counts of ``"auto"``): the result's
        window is the shorter of the two current windows, an integer, and the longer counts
        are coarsened to it exactly (each (2L+1)-gram's inner (2l+1)-gram, the grams a
        shorter window completes at open streams' ends added); sequences mode refuses.
        Time O((nnz₁ + nnz₂) log + n + streams), memory of the result.
        """
        out, mapping, other = self._merge_counts(other)
        for key, tail in other._tails.items():
            out._tails[key] = out._remapped_tail(tail, mapping, other)
        for key, (symbols, ended) in other._heads.items():
            out._heads.setdefault(key, (tuple(int(mapping[s]) for s in symbols), ended))
        return out

    def _remapped_tail(self, tail: int, mapping: np.ndarray, other: Self) -> int:
        """``other``'s tail (same level) in this accumulator's symbols and base. O(L)."""
        digits = tail_digits(tail, other._base, other._L)
        if not digits:
            return tail
        digits = [self._pad if d == other._pad else d for d in remap_digits(digits, mapping, other._pad)]
        return tail_code(digits, self._base, self._L)

    def _merge_counts(self, other: Self) -> tuple[Self, np.ndarray, Self]:
        """A copy of self with other's counts added, other's index -> new index, and other (a
        reduced copy when the result's window is shorter)."""
        if not isinstance(other, AccumulatorMerge):
            raise TypeError(f"can only merge a MomentAccumulator, not {type(other).__name__}")
        for name in ("mode", "n_symbols", "forgetting", "max_symbols"):
            if getattr(self, name) != getattr(other, name):
                raise ValueError(
                    f"cannot merge accumulators with {name}={getattr(self, name)!r} and "
                    f"{getattr(other, name)!r}"
                )
        window = self._joined_window(other)
        out = self.copy()
        out._reduce_window(other._L)
        if window != out.window:
            out.window = window
            out._reduce_window(window)
            out._set_level(out._L)  # the integer window's limits from now on
        if other.n_symbols is not None:
            mapping = np.arange(other.n, dtype=np.int64)
        else:
            mapping = np.array([out._alphabet.index_of(s) for s in other._alphabet._labels],
                               dtype=np.int64)
        if out.window == "auto":
            out._reduce_window(auto_window(out.n))
        elif out.n > max_symbols_for(out._L):
            raise ValueError(f"window {out._L} holds at most {max_symbols_for(out._L):,} symbols: "
                             f"the merged alphabet has {out.n:,}")
        if other._L > out._L:
            other = other.copy()
            other._reduce_window(out._L)
        out._normalise_weight()
        g = other.windows()
        if g.nnz:
            d = g.digits()
            real = d >= 0
            d[real] = mapping[d[real]]
            out._add_chunk((pack_grams(d, out._L), g.weights, False))
        out._total += other.n_triples
        out._add_starts(other.starts(), mapping)
        out._flush()
        return out, mapping, other

    def _joined_window(self, other: Self) -> int | str:
        """The ``window`` setting of a join: the common one, else (sliding mode) the shorter of
        the two current windows, as an integer: the longer counts are coarsened to it exactly
        (each gram's inner part, :meth:`_reduce_window`), and counts of a shorter window can
        never be made longer again. Sequences mode refuses (its grams are each sequence's
        first, whose shorter prefixes are not all kept). O(1)."""
        if self.window == other.window:
            return self.window
        if self.mode != "sliding":
            raise ValueError(
                f"cannot merge accumulators with window={self.window!r} and {other.window!r} in "
                f"mode 'sequences' (only each sequence's first gram is counted): count both at "
                f"one window"
            )
        return min(self._L, other._L)

    def concat(self, later: Self) -> Self:
        """A new accumulator for this one followed by ``later`` on the same streams.

        Both must have been built with ``track_heads=True``. Every stream that was
        still open here continues with ``later``'s first symbols of it, so the grams
        that straddle the border are counted (and, with a window L ≥ 2, the grams
        ``later`` counted as the start of a sequence, padded before it, are taken back):
        the result equals one accumulator fed both pieces in order. ``concat`` is
        associative, so chunks can be reduced by a tree of joins (in order); streams
        that do not cross between the two are simply merged. Time O((nnz₁ + nnz₂) log
        + n + streams · L²).

        Examples
        --------
        >>> from streamspec import MomentAccumulator
        >>> first, second = (MomentAccumulator(3, track_heads=True) for _ in range(2))
        >>> first.learn_many([0, 1, 2, 0])
        >>> second.learn_many([1, 2])
        >>> whole = MomentAccumulator(3)
        >>> whole.learn_many([0, 1, 2, 0, 1, 2])
        >>> first.concat(second).triples() == whole.triples()
        True
        """
        if not (self.track_heads and later.track_heads):
            raise ValueError("concat needs accumulators built with track_heads=True")
        out, mapping, later = self._merge_counts(later)
        not_starts: tuple[list, list] = ([], [])  # `later`'s starts of streams that go on from here
        border_pairs = []  # first pairs that straddle the border
        add, remove = [], []  # stream codes of the grams that straddle it, and of later's padded ones
        for key, (symbols, ended) in later._heads.items():
            head = [int(mapping[s]) for s in symbols]
            left = tail_digits(out._tails.get(key), out._base, out._L)
            left_real = [d for d in left if d != out._pad]
            if left and head:
                not_starts[0].append(head[0])
                if len(head) > 1:
                    not_starts[1].append(tuple(head[:2]))
                if len(left_real) == 1:
                    border_pairs.append((left_real[0], head[0]))
            if left and (head or ended):  # an end in `later` closes the sequence open here
                out._border_grams(left, head, ended, add, remove)
            out._join_tail(key, left, head, ended, later, mapping)
            mine = out._heads.get(key)
            if mine is None:
                out._heads[key] = (tuple(head), ended)
            elif not mine[1]:  # the first segment here was open: `later` continues it
                out._heads[key] = ((mine[0] + tuple(head))[: 2 * out._L], ended)
        for key, tail in later._tails.items():  # streams opened by `later` before any head
            if key not in later._heads:
                out._tails[key] = out._remapped_tail(tail, mapping, later)
        out._count_border(add, remove)
        out._adjust_starts(*not_starts, -1.0)
        out._adjust_starts([], border_pairs, 1.0)
        return out

    def _border_grams(self, left: list[int], head: list[int], ended: bool, add: list, remove: list) -> None:
        """The grams of a stream that crosses the border: ``add`` those centred between the last
        L symbols here and ``later``'s first L, ``remove`` those ``later`` counted padded before
        its first symbol (centred on its symbols 2..L). Complete grams only. O(L²)."""
        L, pad, span = self._L, self._pad, 2 * self._L + 1
        after = [pad] * (L - 1) if ended and len(head) < 2 * L else []
        for seq, starts, out in (([pad] * (L - 1) + head + after, range(L - 1), remove),
                                 (left + head + after, range(len(left)), add)):
            out += [self._stream_code(seq[s : s + span]) for s in starts if s + span <= len(seq)]

    def _join_tail(self, key, left: list[int], head: list[int], ended: bool, later: Self,
                   mapping: np.ndarray) -> None:
        """The tail of ``key`` after the join: ``later``'s, or, when its first segment is still
        open and shorter than 2L, the end of this tail followed by it. O(L)."""
        later_tail = later._tails.get(key)
        if later_tail is None:
            self._tails.pop(key, None)
        elif not ended and len(head) < 2 * self._L:
            self._tails[key] = tail_code((left or [self._pad] * self._P0) + head, self._base, self._L)
        else:
            self._tails[key] = self._remapped_tail(later_tail, mapping, later)

    def _count_border(self, add: list[int], remove: list[int]) -> None:
        """Count ``add`` and take back ``remove`` (stream codes); zero counts are dropped. O(nnz)."""
        if add:
            self._count(add)
        if remove:
            codes = to_packed(np.array(remove, dtype=np.int64), self._base, self._L)
            self._add_chunk((codes, np.full(codes.size, -1.0), False))
            self._total -= len(remove)
        self._flush()
        keep = self._w != 0
        if not keep.all():
            self._codes, self._w = self._codes[keep], self._w[keep]

    def _note_head(self, key: Hashable, tail: int, new: Sequence[int]) -> None:
        """Record symbols of the first segment of ``key`` while it has fewer than 2L."""
        head = self._heads.get(key)
        if head is None:
            if tail == NEW:
                self._heads[key] = (tuple(new[: 2 * self._L]), False)
        elif not head[1] and len(head[0]) < 2 * self._L and tail != NEW:
            self._heads[key] = ((head[0] + tuple(new))[: 2 * self._L], False)

    def __add__(self, other: Self) -> Self:
        """``a + b`` is :meth:`merge`."""
        return self.merge(other)
