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

from streamspec.core.triples import BITS
from streamspec.streaming.stream_tails import NEW, remap_tail, tail_list

__all__ = ["AccumulatorMerge"]


class AccumulatorMerge:
    """``merge``, ``concat`` and ``+``; reads and writes the accumulator's counts and streams."""

    def merge(self, other: Self) -> Self:
        """A new accumulator holding both sets of counts, matched by symbol label.

        Exact when the two were fed disjoint sets of streams. For a key present in
        both, the tail of ``other`` is kept (it is taken to be the later part); to
        join consecutive pieces of the same streams exactly, use :meth:`concat`.
        With ``max_symbols``, labels of ``other`` that do not fit become :data:`OTHER`.
        Time O((nnz₁ + nnz₂) log + n + streams), memory of the result.
        """
        out, mapping = self._merge_counts(other)
        for key, tail in other._tails.items():
            out._tails[key] = remap_tail(tail, mapping, out._base)
        for key, (symbols, ended) in other._heads.items():
            out._heads.setdefault(key, (tuple(int(mapping[s]) for s in symbols), ended))
        return out

    def _merge_counts(self, other: Self) -> tuple[Self, np.ndarray]:
        """A copy of self with other's counts added, and other's index -> new index."""
        if not isinstance(other, AccumulatorMerge):
            raise TypeError(f"can only merge a MomentAccumulator, not {type(other).__name__}")
        for name in ("mode", "n_symbols", "forgetting", "max_symbols"):
            if getattr(self, name) != getattr(other, name):
                raise ValueError(
                    f"cannot merge accumulators with {name}={getattr(self, name)!r} and "
                    f"{getattr(other, name)!r}"
                )
        out = self.copy()
        if other.n_symbols is not None:
            mapping = np.arange(other.n, dtype=np.int64)
        else:
            mapping = np.array([out._alphabet.index_of(s) for s in other._alphabet._labels],
                               dtype=np.int64)
        out._normalise_weight()
        t = other.triples()
        if t.nnz:
            x1, x2, x3 = t._xs()
            codes = (mapping[x2] << 2 * BITS) | (mapping[x3] << BITS) | mapping[x1]
            out._add_chunk((codes, t.weights, False))
        out._total += other.n_triples
        out._add_starts(other.starts(), mapping)
        out._flush()
        return out, mapping

    def concat(self, later: Self) -> Self:
        """A new accumulator for this one followed by ``later`` on the same streams.

        Both must have been built with ``track_heads=True``. Every stream that was
        still open here continues with ``later``'s first symbols of it, so the triples
        that straddle the border are counted: the result equals one accumulator fed
        both pieces in order. ``concat`` is associative, so chunks can be reduced by
        a tree of joins (in order); streams that do not cross between the two are
        simply merged. Time O((nnz₁ + nnz₂) log + n + streams).

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
        out, mapping = self._merge_counts(later)
        not_starts: tuple[list, list] = ([], [])  # `later`'s starts of streams that go on from here
        border_pairs = []  # first pairs that straddle the border
        for key, (symbols, ended) in later._heads.items():
            head = tuple(int(mapping[s]) for s in symbols)
            left_tail = tail_list(out._tails.get(key), out._base)
            if left_tail and head:
                not_starts[0].append(head[0])
                if len(head) > 1:
                    not_starts[1].append(head[:2])
                if len(left_tail) == 1:
                    border_pairs.append((left_tail[0], head[0]))
            joined = left_tail + list(head)
            codes = [(joined[p] * out._base + joined[p + 1]) * out._base + joined[p + 2]
                     for p in range(len(joined) - 2)]
            if codes:
                out._count(codes)
            later_tail = later._tails.get(key)
            if later_tail is None:
                out._tails.pop(key, None)
            elif not ended and len(head) < 2:
                out._store_tail(key, np.asarray(joined[-2:], dtype=np.int64))
            else:
                out._tails[key] = remap_tail(later_tail, mapping, out._base)
            mine = out._heads.get(key)
            if mine is None:
                out._heads[key] = (head, ended)
            elif not mine[1]:  # the first segment here was open: `later` continues it
                out._heads[key] = ((mine[0] + head)[:2], ended)
        for key, tail in later._tails.items():  # streams opened by `later` before any head
            if key not in later._heads:
                out._tails[key] = remap_tail(tail, mapping, out._base)
        out._adjust_starts(*not_starts, -1.0)
        out._adjust_starts([], border_pairs, 1.0)
        return out

    def _note_head(self, key: Hashable, tail: int, new: Sequence[int]) -> None:
        """Record symbols of the first segment of ``key`` while it has fewer than two."""
        head = self._heads.get(key)
        if head is None:
            if tail == NEW:
                self._heads[key] = (tuple(new[:2]), False)
        elif not head[1] and len(head[0]) < 2 and tail != NEW:
            self._heads[key] = ((head[0] + tuple(new))[:2], False)

    def __add__(self, other: Self) -> Self:
        """``a + b`` is :meth:`merge`."""
        return self.merge(other)
