"""Windows of a :class:`~streamspec.streaming.accumulator.MomentAccumulator`: the level L it counts.

:class:`WindowedStreams`, a mixin of the accumulator. With ``window = L`` the accumulator
counts the (2L+1)-grams of its streams (``docs/math.md`` section 11,
:mod:`streamspec.core.windows`): each stream is read as its padded sequence (``L − 1``
pads, then its symbols, in sliding mode) and every window of 2L + 1 digits of it is one
gram; ``end`` adds the grams centred on the last ``L − 1`` symbols, padded after the end.
At L = 1 there are no pads and the grams are the triples. Here: the level's encoding
(base, pad, tail modulus), the grams counted at an end, the counts as
:class:`~streamspec.core.windows.WindowCounts`, and ``window="auto"``, which reduces the
level (exactly) as a growing alphabet passes the sizes of :func:`auto_window`.
"""

from __future__ import annotations

from collections.abc import Hashable

import numpy as np

from streamspec.core.windows import (
    MAX_WINDOW,
    WindowCounts,
    auto_window,
    max_symbols_for,
    pack_grams,
    sum_duplicates,
    unpack_grams,
    window_bits,
)
from streamspec.streaming.count_buffer import invalidate_log
from streamspec.streaming.count_kernels import merge_sorted, stream_codes, to_packed
from streamspec.streaming.stream_tails import DONE, tail_code, tail_digits

__all__ = ["WindowedStreams"]


class WindowedStreams:
    """The window level of the accumulator: ``_L``, ``_base``, ``_pad``, ``_P0``, ``_tail_mod``,
    ``_grow_at``; reads and writes the accumulator's counts and streams."""

    def _check_window(self) -> None:
        """Refuse a bad ``window`` (or one the fixed alphabet or ``max_symbols`` cannot fit). O(1)."""
        w = self.window
        if w != "auto" and (isinstance(w, bool) or not isinstance(w, int | np.integer)
                            or not 1 <= w <= MAX_WINDOW):
            raise ValueError(f"window must be 'auto' or an integer in 1..{MAX_WINDOW}, got {w!r}")
        size = self.n_symbols if self.n_symbols is not None else self.max_symbols
        if w != "auto" and size is not None and size > max_symbols_for(int(w)):
            raise ValueError(f"window {w} holds at most {max_symbols_for(int(w)):,} symbols, "
                             f"not {size:,}: use a shorter window")

    def _initial_level(self) -> int:
        if self.window != "auto":
            return int(self.window)
        if self.mode != "sliding":
            # why 1: sequences mode counts one gram per sequence, so a window of L would drop
            # every sequence shorter than 2L + 1 symbols (the paper's triples: all of them), and
            # it cannot reduce a window exactly as the alphabet grows
            return 1
        return auto_window(self.n_symbols if self.n_symbols is not None else 0)

    def _set_level(self, L: int) -> None:
        """Encode streams at window L: base n (n + 1 with a pad digit for L ≥ 2) for a fixed
        alphabet, 2^b for a growing one (no recoding as it grows). O(1)."""
        self._L = L
        if self.n_symbols is not None:
            self._base = int(self.n_symbols) + (L > 1)
        else:
            self._base = 1 << window_bits(L)
        self._tail_mod = self._base ** (2 * L)
        # learn_one's fast path for a hot tail: not while heads still need symbols (2L > 2)
        self._hot = self._plain and not (self.track_heads and L > 1)
        # the largest alphabet this level takes: its codes' room, or auto's next step down
        self._grow_at = max_symbols_for(L)
        if self.window == "auto" and self.n_symbols is None and L > 1:
            self._grow_at = next(n for n in range(1, 1 << 8) if auto_window(n + 1) < L)

    # why properties: an instance with more than 30 attributes loses CPython's fast attribute
    # access (shared keys), which learn_one's hot path feels (~10%)
    @property
    def _pad(self) -> int | None:
        """The digit of a pad in stream codes (``base − 1``), None at L = 1 (no pads)."""
        return self._base - 1 if self._L > 1 else None

    @property
    def _P0(self) -> int:
        """Pads before a sequence's first symbol: L − 1 in sliding mode, none in sequences mode."""
        return self._L - 1 if self.mode == "sliding" else 0

    @property
    def current_window(self) -> int:
        """L, the window the counts are kept at now (``window`` itself unless ``"auto"``). O(1)."""
        return self._L

    def windows(self) -> WindowCounts:
        """The counts of the grams as :class:`~streamspec.core.windows.WindowCounts`: a snapshot,
        independent of later learning, and the same object while the counts are unchanged.

        Why the same object: a fit reads the grams in several places (the window choice, the
        predictor's HMM, the triples), and the window Hankels' singular values are kept on the
        object (:func:`~streamspec.core.window_rank.level_rank`), so each is computed once per
        set of counts. Its arrays are the accumulator's own, made read-only: the accumulator
        replaces its arrays when it counts (never writes them in place), so the snapshot stays
        as it was. At L = 1, the triples (:meth:`triples` holds the same codes). Grams centred
        on the last L − 1 symbols of a stream still open are counted when it goes on or ends.
        Time O(nnz) to merge buffered grams (and to divide the weights under forgetting), O(1)
        when nothing changed; no copy of the codes.

        Examples
        --------
        >>> from streamspec import MomentAccumulator
        >>> acc = MomentAccumulator(n_symbols=2, window=2)
        >>> acc.learn_many([0, 1, 1, 0])
        >>> acc.end()
        >>> acc.windows().digits().tolist()       # centred on the 2nd and 3rd symbols
        [[0, 1, 1, 0, -1], [-1, 0, 1, 1, 0]]
        >>> g = acc.windows()
        >>> acc.windows() is g, g.weights.flags.writeable
        (True, False)
        >>> acc.learn_many([1, 1, 0, 1]); acc.end()
        >>> acc.windows().total, g.total          # a new snapshot; the old one unchanged
        (4.0, 2.0)
        """
        self._flush()
        view = self._windows_view
        # why identity: _codes and _w are replaced whenever the counts change (merge_sorted,
        # _consolidate, _normalise_weight, _reduce_window, _restore), never written in place
        if (view is not None and view[0] is self._codes and view[1] is self._w
                and view[2] == (self._weight, self._L, self.n)):
            return view[3]
        codes, w = self._codes, self._w
        codes.flags.writeable = False
        if self.forgetting != 1.0:
            w = w / self._weight
        w.flags.writeable = False
        grams = WindowCounts(self.n, self._L, codes, w)
        self._windows_view = (self._codes, self._w, (self._weight, self._L, self.n), grams)
        return grams

    def _store_tail(self, key, seq: np.ndarray) -> None:
        self._tails[key] = tail_code(seq[-2 * self._L :].tolist(), self._base, self._L)

    def _stream_code(self, digits) -> int:
        code = 0
        for d in digits:
            code = code * self._base + int(d)
        return code

    def _stream_codes(self, seq: np.ndarray) -> list[int]:
        """The stream codes of every gram of ``seq`` (digits, pads included), as Python ints."""
        return stream_codes(np.asarray(seq, dtype=np.int64), self._base, self._L).tolist()

    def _count_end(self, key: Hashable) -> None:
        """Count the grams centred on the last L − 1 symbols of ``key``'s sequence (sliding mode):
        its tail, then L − 1 pads. O(L²)."""
        tail = self._tails.get(key)
        if self._L == 1 or self.mode != "sliding" or tail is None or tail == DONE:
            return
        digits = tail_digits(tail, self._base, self._L) + [self._pad] * (self._L - 1)
        if len(digits) > 2 * self._L:
            self._count(self._stream_codes(np.array(digits)))

    def _grown(self, n0: int) -> None:
        """The alphabet grew past what this level takes: with ``"auto"`` reduce the window (for
        good: a failing learning call does not undo it), else remove the new labels and refuse."""
        n = len(self._alphabet)
        if self.window == "auto":
            try:
                self._reduce_window(auto_window(n))
            except BaseException:
                self._alphabet.truncate(n0)
                raise
            return
        self._alphabet.truncate(n0)
        raise ValueError(f"window {self._L} holds at most {max_symbols_for(self._L):,} symbols: "
                         f"a new label would be symbol {n:,} (use a shorter window or max_symbols)")

    def _reduce_window(self, level: int) -> None:
        """Keep the counts at window ``level`` < L from now on, exactly: the grams' inner parts,
        plus the grams the shorter window completes on each open stream's last symbols.

        Heads are cut to 2·level symbols, tails re-encoded. Sliding mode only. Everything is
        computed first, then assigned. O(nnz · L + streams · L²).
        """
        if level >= self._L:
            return
        self._flush()
        self._fold_starts()
        old = (self._L, self._base, self._pad)
        d = unpack_grams(self._codes, old[0])[:, old[0] - level : old[0] + level + 1]
        codes, w = sum_duplicates(pack_grams(d, level), self._w)
        self._set_level(level)
        try:
            tails, extra = self._reduced_tails(old, level)
        except BaseException:
            self._set_level(old[0])
            raise
        if extra:
            new = to_packed(np.array(extra, dtype=np.int64), self._base, level)
            new, new_w = sum_duplicates(new, np.full(new.size, self._weight))
            codes, w = merge_sorted(codes, w, new, new_w)
            self._total += self._weight * len(extra)
        self._codes, self._w, self._tails = codes, w, tails
        invalidate_log(self)  # the counts recoded at another window
        self._heads = {k: (sym[: 2 * level], ended) for k, (sym, ended) in self._heads.items()}

    def _reduced_tails(self, old: tuple, level: int) -> tuple[dict, list[int]]:
        """The tails at ``level`` (this level's encoding is set) and the stream codes of the grams
        complete at ``level`` but not at the old L (centred T − L + 1 .. T − level). O(streams · L²)."""
        L, base, pad = old
        tails, extra = {}, []
        for key, tail in self._tails.items():
            if tail == DONE:
                tails[key] = DONE
                continue
            digits = tail_digits(tail, base, L)
            real = [v for v in digits if v != pad]
            whole = len(real) < len(digits)  # pads: the tail holds the whole sequence so far
            seq = [self._pad] * (level - 1) + real if whole else real
            for j in range(level, L):  # the gram centred j symbols before the last
                start = len(seq) - 1 - j - level
                if start >= 0:
                    extra.append(self._stream_code(seq[start : start + 2 * level + 1]))
            tails[key] = tail_code(seq, self._base, level)
        return tails, extra
