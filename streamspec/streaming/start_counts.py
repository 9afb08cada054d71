"""How the streams of a :class:`~streamspec.streaming.accumulator.MomentAccumulator` begin.

:class:`StartCounting`, a mixin of the accumulator: the first symbol and the first pair of
every stream (every key, and every sequence after an ``end``) are counted, so that a
predictor has a distribution for an empty or one-symbol history
(:class:`~streamspec.core.stream_starts.StreamStarts`). While learning, a start is one
append to a log (undone by truncation when a learning call fails); the log is folded into
the sparse counts when they are read, or when it is long, before a learning call.
"""

from __future__ import annotations

import numpy as np

from streamspec.core.stream_starts import StreamStarts
from streamspec.core.triples import BITS

__all__ = ["StartCounting", "START_LOG_MAX"]

START_LOG_MAX = 8192  # starts logged before they are folded into the counts
_PAIR = 1 << 62  # marks a first pair (a << 21 | b) in the log; a first symbol is its index


class StartCounting:
    """Stream starts: ``_start_log`` (codes), ``_start_w`` (forgetting weights in stored units,
    empty without forgetting) and ``_starts`` (the folded counts, in stored units)."""

    def _init_starts(self) -> None:
        self._start_log: list[int] = []
        self._start_w: list[float] = []
        self._starts = StreamStarts.empty(0)

    def _note_start(self, first: int | None, a: int | None = None, b: int | None = None) -> None:
        """Log a stream's first symbol ``first`` and/or its first pair ``(a, b)``. O(1)."""
        log = self._start_log
        if first is not None:
            log.append(first)
        if a is not None:
            log.append(_PAIR | a << BITS | b)
        if self.forgetting != 1.0:
            self._start_w.extend([self._weight] * ((first is not None) + (a is not None)))

    def _fold_starts(self) -> None:
        """Fold the log into the sparse start counts. O(log + starts)."""
        if not self._start_log:
            return
        codes = np.array(self._start_log, dtype=np.int64)
        w = np.array(self._start_w) if self._start_w else np.ones(codes.size)
        pair = codes >= _PAIR
        n = max(self.n, self._starts.n)
        logged = StreamStarts(n, codes[~pair], w[~pair], codes[pair] - _PAIR, w[pair])
        self._starts = self._starts.with_alphabet(n) + logged
        self._start_log, self._start_w = [], []

    def _fold_starts_if_long(self) -> None:
        """Before a learning call: keep the log short (its undo is a truncation). O(1) amortised."""
        if len(self._start_log) >= START_LOG_MAX:
            self._fold_starts()

    def _starts_nbytes(self) -> int:
        """Bytes of the start counts and of the log. O(1)."""
        return sum(a.nbytes for a in self._starts.to_arrays().values()) + 40 * len(self._start_log)

    def _rescale_starts(self, weight: float) -> None:
        """Forgetting: divide the stored start weights by ``weight`` (see ``_normalise_weight``)."""
        self._fold_starts()
        self._starts = self._starts.scaled(1.0 / weight)

    def starts(self) -> StreamStarts:
        """The counts of the first symbol and the first pair of every stream (a snapshot).

        With forgetting, weighted like the triples counted at the same time. O(starts).

        Examples
        --------
        >>> from streamspec import MomentAccumulator
        >>> acc = MomentAccumulator()
        >>> acc.learn_many("abc", key=1)
        >>> acc.learn_many("ab", key=2)
        >>> acc.learn_one("b", key=3)
        1
        >>> s = acc.starts()
        >>> s.first_counts().tolist(), s.n_streams
        ([2.0, 1.0, 0.0], 3.0)
        """
        self._fold_starts()
        out = self._starts.with_alphabet(self.n)
        return out.scaled(1.0 / self._weight) if self.forgetting != 1.0 else out

    def _adjust_starts(self, firsts: list[int], pairs: list[tuple[int, int]], sign: float) -> None:
        """Add (``sign`` 1) or remove (-1) one count of each first symbol and first pair: how
        :meth:`concat` mends starts that were only the start of a piece. O(starts)."""
        self._fold_starts()
        s = self._starts.with_alphabet(self.n)
        f = np.array(firsts, dtype=np.int64)
        p = np.array([a << BITS | b for a, b in pairs], dtype=np.int64)
        self._starts = StreamStarts(
            s.n, np.concatenate([s.first_codes, f]), np.concatenate([s.first_weights, np.full(f.size, sign)]),
            np.concatenate([s.pair_codes, p]), np.concatenate([s.pair_weights, np.full(p.size, sign)]))

    def _add_starts(self, other: StreamStarts, mapping: np.ndarray) -> None:
        """Add another accumulator's starts (its indices renamed by ``mapping``). O(starts)."""
        self._fold_starts()
        n = max(self.n, self._starts.n)
        moved = other.remapped(mapping, n) if other.n else StreamStarts.empty(n)
        self._starts = self._starts.with_alphabet(n) + moved.scaled(self._weight)
