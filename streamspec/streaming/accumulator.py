"""Incremental counts of observation triples from many interleaved streams, kept sparse.

The accumulator is one class built of mixins, each in its own module: counting buffers
(:mod:`~streamspec.streaming.count_buffer`), dense views of the counts
(:mod:`~streamspec.streaming.accumulator_views`), merge and concat
(:mod:`~streamspec.streaming.accumulator_merge`) and checkpoints
(:mod:`~streamspec.streaming.accumulator_io`); learning and the streams are here.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np

from streamspec.core import defaults
from streamspec.core.alphabet import MAX_LABELS, OTHER, Alphabet
from streamspec.core.triples import MAX_SYMBOLS, Triples
from streamspec.streaming.accumulator_io import AccumulatorIO
from streamspec.streaming.accumulator_merge import AccumulatorMerge
from streamspec.streaming.accumulator_views import AccumulatorViews
from streamspec.streaming.accumulator_windows import WindowedStreams
from streamspec.streaming.count_buffer import FLUSH_AT, CountBuffer, copied_log, mark_snapshot
from streamspec.streaming.start_counts import StartCounting
from streamspec.streaming.stream_tails import DONE, NEW, tail_code, tail_digits

__all__ = ["MomentAccumulator", "OTHER"]

_MODES = ("sliding", "sequences")
assert MAX_LABELS == MAX_SYMBOLS


class MomentAccumulator(CountBuffer, StartCounting, WindowedStreams, AccumulatorViews, AccumulatorMerge,
                        AccumulatorIO):
    """Counts of symbol triples (x1, x2, x3), or of windows around each symbol, kept one symbol at a
    time, sparse.

    The counts ``c3[x2, x3, x1]`` are all the state: ``c21`` and ``c1`` are their
    marginals, because in both modes P1 and P21 are taken from the same triples
    as P3x1 (``docs/math.md`` section 1). Probabilities divide by the
    number (or, with forgetting, the total weight) of triples. With ``window`` L ≥ 2
    the state is the counts of the (2L+1)-grams around each symbol (:meth:`windows`),
    of which the triples are a marginal (section 11); merges, ``concat``, forgetting,
    checkpoints and keyed streams work on them alike.

    Parameters
    ----------
    n_symbols
        ``None`` (default): symbols are arbitrary hashable labels and the alphabet
        grows as new ones arrive. An integer n: symbols are exactly the integers
        ``0..n-1``; anything else raises a ``ValueError`` naming the symbol.
        At most 2²¹ = 2,097,152 symbols either way (three indices pack one int64).
    mode
        ``"sliding"`` (default): every consecutive triple of every stream counts
        (long stationary streams). ``"sequences"``: each stream is one independent
        sequence and only its first three symbols count (Hsu, Kakade & Zhang);
        after :meth:`end` the same key starts a new sequence.
    forgetting
        Weight factor in (0, 1] applied to all earlier triples each time a triple
        is counted: 1 (default) keeps plain counts; below 1 the counts are
        exponentially weighted, with an effective memory of ``1 / (1 - forgetting)``
        triples.
    track_heads
        Also keep the first two symbols of each stream, so that accumulators built
        over consecutive pieces of the same streams (chunks of a file, say) can be
        joined exactly with :meth:`concat`. Off by default: it adds per-stream state.
    max_symbols
        Growing alphabets only (``n_symbols=None``): cap the alphabet at this many
        symbols, so that memory stays bounded whatever the stream sends. Policy: new
        labels take indices ``0 .. max_symbols-2``; once these are used, every new
        label is counted as the reserved symbol :data:`OTHER` (``"<other>"``), which
        takes the last index, ``max_symbols-1``, the first time it is needed, and
        :meth:`learn_one` returns that index. Labels already known keep their index.
    window
        L, the symbols of past and future kept around each counted symbol: 1 counts
        triples; L ≥ 2 counts (2L+1)-grams (:meth:`windows`, ``docs/math.md`` section
        11), and the symbol indices must stay below ``2^b − 1``, ``b = 63 // (2L+1)``
        (4,095 symbols at L = 2, 511 at 3). ``"auto"`` (the default,
        :data:`streamspec.core.defaults.COUNT_WINDOW`): the window
        :func:`~streamspec.core.windows.auto_window` gives the alphabet (the smallest L
        with n^L ≥ 128: 4, 3, 2 for 4, 8, 20 symbols, 1 from 128 symbols on), resolved
        as follows. A fixed alphabet (``n_symbols``): at once. A growing alphabet in
        sliding mode: it starts long and its counts are reduced exactly (to
        :meth:`windows` at the smaller L, nothing lost) each time the alphabet passes a
        size of :func:`auto_window`, so that large alphabets count plain triples after
        their first 128 labels and the current L is always that of the alphabet so far
        (:attr:`current_window`). Sequences mode: 1 (only the first gram of each
        sequence counts, so a longer window would drop every sequence shorter than
        2L + 1 symbols, and shorter grams cannot be recovered from longer ones; give an
        integer window for longer ones). The estimators
        then fit on the shortest l ≤ L whose windows give the rank the data support
        (:func:`~streamspec.core.window_rank.choose_window`).

    Attributes
    ----------
    n_triples
        Total weight of the counted triples (their number without forgetting).
    symbols
        The label of each index.

    Notes
    -----
    Storage is sparse: the distinct triples as one sorted array of packed int64
    codes (:func:`streamspec.core.triples.pack`, 21 bits a symbol) and one float64 array
    of counts, 16 bytes per distinct triple, plus buffers of triples not merged yet.
    Memory is O(distinct triples + alphabet + streams): 16 bytes a distinct triple,
    the labels, and O(1) per stream (its last two symbol indices in one integer;
    with ``track_heads`` also its first two).

    :meth:`learn_one` costs amortised O(1) (it appends one code to a list; every
    8,192 codes become one array) plus amortised O(log) for merging: buffered
    triples are sorted and merged into the counts only when they reach
    ``max(65,536, distinct/2)`` or when counts are read. :meth:`learn_many` is
    vectorised: a run whose largest symbol index m has m³ ≤ 2²² is counted by one
    ``np.bincount`` of compact codes, larger-alphabet runs by a sort of packed codes
    (two halves in two threads for long runs). Alphabets with n³ ≤ 2¹⁶ also keep
    their unmerged counts in one dense array of n³ integers (at most 512 KiB), so
    that counting stays as fast as a bare ``np.bincount``.

    Dense views -- :meth:`counts` (``c3``), ``c21``, ``probabilities``, ``P21``,
    ``P3x1``, :meth:`second_moments` -- build numpy arrays from the sparse counts,
    for small alphabets: above :data:`streamspec.core.triples.DENSE_LIMIT` cells they raise
    :class:`streamspec.core.triples.DenseTooLarge` (a ``ValueError`` naming the size).
    ``c1`` and ``P1`` are O(n) and always available; :meth:`triples` gives the
    sparse counts at any size.

    Every learning call is all-or-nothing: if :meth:`learn_one` or :meth:`learn_many`
    raises (a bad symbol, ``MemoryError``), alphabet, stream tails and counts are as
    they were before the call.

    Examples
    --------
    >>> acc = MomentAccumulator(n_symbols=3, window=1)    # triples ("auto" would count 11-grams)
    >>> acc.learn_many([0, 1, 2, 0, 1], key="a")
    >>> for x in [2, 2, 1]:
    ...     _ = acc.learn_one(x, key="b")
    >>> acc.n_triples
    4.0
    >>> acc.P21.sum(), acc.P3x1.shape
    (np.float64(1.0), (3, 3, 3))
    >>> acc.triples()
    Triples(n=3, nnz=4, total=4)
    >>> acc.learn_one(7)
    Traceback (most recent call last):
    ...
    ValueError: unknown symbol 7: this alphabet is fixed to the integers 0..2

    With labels:

    >>> words = MomentAccumulator()
    >>> words.learn_many("abracadabra")
    >>> words.current_window, words.end()  # 5 symbols: windows of 4 (counted up to its end)
    (4, None)
    >>> words.symbols
    ['a', 'b', 'r', 'c', 'd']
    >>> int(words.counts()[words.symbols.index("r"), 0, 1])   # "b r a": x1=b, x2=r, x3=a
    2

    With a capped alphabet:

    >>> capped = MomentAccumulator(max_symbols=3)
    >>> [capped.learn_one(w) for w in ["to", "be", "or", "not", "to", "be"]]
    [0, 1, 2, 2, 0, 1]
    >>> capped.symbols
    ['to', 'be', '<other>']

    References
    ----------
    Hsu, Kakade & Zhang (2012), A spectral algorithm for learning hidden Markov models.

    """

    def __init__(
        self,
        n_symbols: int | None = None,
        mode: str = "sliding",
        forgetting: float = 1.0,
        track_heads: bool = False,
        max_symbols: int | None = None,
        window: int | str = defaults.COUNT_WINDOW,
    ):
        self.n_symbols = n_symbols
        self.mode = mode
        self.forgetting = forgetting
        self.track_heads = track_heads
        self.max_symbols = max_symbols
        self.window = window
        self._validate()
        self._check_window()
        self._alphabet = Alphabet(n_symbols, max_symbols)
        self._fixed_n = int(n_symbols) if n_symbols is not None else -1
        # stream codes and tails are numbers in a base set by the window (_set_level)
        self._plain = mode == "sliding" and forgetting == 1.0
        self._set_level(self._initial_level())
        # the counts: sorted distinct packed codes (x2, x3, x1) and their weights (stored units)
        self._codes = np.empty(0, dtype=np.int64)
        self._w = np.empty(0)
        # triples not merged yet: arrays of packed codes (weights None = 1 each; sorted flag)
        self._chunks: list[tuple[np.ndarray, np.ndarray | None, bool]] = []
        self._chunked = 0
        # small alphabets (n³ ≤ count_buffer's DENSE_CELLS): unmerged counts also in one dense array,
        # indexed (x2·m + x3)·m + x1, with the alphabet size m it was made for: (array, m)
        self._dense: tuple[np.ndarray, int] | None = None
        # the last windows(), given again while the counts are the same (accumulator_windows.py).
        # Why _dense holds its m: one more attribute would cost learn_one its fast attribute
        # access (more than 30 attributes, see _pad)
        self._windows_view: tuple | None = None
        # learn_one's triples as "stream codes" (x1·base + x2)·base + x3 (and forgetting weights)
        self._pending: list[int] = []
        self._pending_w: list[float] = []
        self._default_buffer: list[int] = []  # symbols of the default stream not yet counted
        # per stream: its last symbols, a·base + b, or -1 - b with one symbol, or DONE
        self._tails: dict[Hashable, int] = {}
        # track_heads: per key, the first (up to two) symbol indices of its first
        # segment here, and whether that segment was ended; see concat()
        self._heads: dict[Hashable, tuple[tuple[int, ...], bool]] = {}
        self._weight = 1.0  # forgetting: weight of the next triple in stored units
        self._total = 0.0  # stored units, like _w (without the plain `_pending` list)
        self._init_starts()  # the first symbol and pair of every stream (start_counts.py)

    def _validate(self) -> None:
        if self.track_heads and (self.mode != "sliding" or self.forgetting != 1.0):
            raise ValueError("track_heads needs mode='sliding' and forgetting=1")
        if self.mode not in _MODES:
            raise ValueError(f"mode must be one of {_MODES}, got {self.mode!r}")
        f = self.forgetting
        if isinstance(f, bool) or not isinstance(f, int | float) or not 0 < f <= 1:
            raise ValueError(f"forgetting must be a number in (0, 1], got {f!r}")
        n = self.n_symbols
        if n is not None:
            if isinstance(n, bool) or not isinstance(n, int | np.integer) or not 1 <= n <= MAX_SYMBOLS:
                raise ValueError(f"n_symbols must be None or an integer in 1..{MAX_SYMBOLS}, got {n!r}")
            if self.max_symbols is not None:
                raise ValueError("max_symbols caps growing alphabets only: leave it None with n_symbols")
        m = self.max_symbols
        if m is not None and (
            isinstance(m, bool) or not isinstance(m, int | np.integer) or not 1 <= m <= MAX_SYMBOLS
        ):
            raise ValueError(f"max_symbols must be None or an integer in 1..{MAX_SYMBOLS}, got {m!r}")

    # ------------------------------------------------------------------ learning

    def learn_one(self, x: Hashable, key: Hashable = None) -> int:
        """Count one symbol of stream ``key`` (the default stream when ``None``).

        Amortised O(1) time (a few dictionary and list operations; the buffered
        triples are merged in bulk, amortised O(log) each); memory: 8 bytes per
        buffered triple until the merge.

        Returns
        -------
        int
            The symbol's index in the alphabet (new labels get the next one; with a
            full capped alphabet, the index of :data:`OTHER`).
        """
        # hottest path: a valid integer of the default stream (sliding, no forgetting)
        # is only buffered; the buffer is counted by learn_many's vectorised code
        if key is None and self._plain and type(x) is int and 0 <= x < self._fixed_n:
            buffer = self._default_buffer
            buffer.append(x)
            if len(buffer) >= FLUSH_AT:
                try:
                    self._flush_default()
                except BaseException:
                    buffer.pop()
                    raise
            return x
        if key is None and self._default_buffer:
            self._flush_default()  # keep the default stream's symbols in order
        # the hot path (a known symbol continuing a sliding stream without forgetting)
        # is kept to a few dictionary and list operations
        if type(x) is int and 0 <= x < self._fixed_n:
            i = x
            n0 = -1
        else:
            n0 = len(self._alphabet._labels)
            i = self._alphabet.index_of(x)
            if i >= self._grow_at:
                self._grown(n0)  # past what the window's codes hold: reduce it, or refuse
        tails = self._tails
        tail = tails.get(key, NEW)
        if tail >= 0 and self._hot:
            code = tail * self._base + i
            tails[key] = code % self._tail_mod
            pending = self._pending
            pending.append(code)
            if len(pending) >= FLUSH_AT:
                try:
                    self._flush_pending()
                except BaseException:
                    pending.pop()
                    tails[key] = tail
                    if n0 >= 0:
                        self._alphabet.truncate(n0)
                    raise
            return i
        self._fold_starts_if_long()
        snap = self._snapshot(key, n0)
        try:
            self._learn_other(i, key, tail)
        except BaseException:
            self._restore(snap)
            raise
        return i

    def _learn_other(self, i: int, key: Hashable, tail: int) -> None:
        if self.track_heads:
            self._note_head(key, tail, (i,))
        if tail == NEW:
            self._tails[key] = tail_code([self._pad] * self._P0 + [i], self._base, self._L)
            self._note_start(i)
        elif tail >= 0:
            if self.mode == "sequences":
                self._tails[key] = DONE
            else:
                self._tails[key] = (tail * self._base + i) % self._tail_mod
            self._count((tail * self._base + i,))
        elif tail != DONE:
            digits = tail_digits(tail, self._base, self._L)
            real = [d for d in digits if d != self._pad]
            self._tails[key] = tail_code(digits + [i], self._base, self._L)
            if len(real) == 1:
                self._note_start(None, real[0], i)

    def learn_many(self, xs: Sequence | np.ndarray, key: Hashable = None) -> None:
        """Count several consecutive symbols of one stream (a list or 1-D array).

        Time O(m · L) for m symbols when the run's alphabet is small (m^(2L+1) ≤ 2²²
        compact codes, one ``np.bincount``), else O(m log m) (a sort of packed
        codes); memory O(m) temporarily. The counted run is merged into the
        sorted counts in bulk (amortised O(log) a gram).
        """
        if key is None and self._default_buffer:
            self._flush_default()
        self._fold_starts_if_long()
        n0 = len(self._alphabet._labels)
        idx = self._alphabet.encode(xs)  # all or nothing by itself
        if len(self._alphabet) > self._grow_at:
            self._grown(n0)
        snap = self._snapshot(key, n0)
        try:
            self._learn_encoded(idx, key)
        except BaseException:
            self._restore(snap)
            raise

    def _learn_encoded(self, idx: np.ndarray, key: Hashable) -> None:
        if idx.size == 0:
            return
        tail = self._tails.get(key)
        L, pad, span = self._L, self._pad, 2 * self._L + 1
        if self.track_heads:
            self._note_head(key, NEW if tail is None else tail, idx[: 2 * L].tolist())
        if tail == DONE:
            return
        digits = [pad] * self._P0 if tail is None else tail_digits(tail, self._base, L)
        real = [d for d in digits if d != pad]
        if tail is None:
            self._note_start(int(idx[0]), *((int(idx[0]), int(idx[1])) if idx.size > 1 else ()))
        elif len(real) == 1:
            self._note_start(None, real[0], int(idx[0]))
        seq = np.concatenate([np.asarray(digits, dtype=np.int64), idx]) if digits else idx
        if self.mode == "sequences":
            if seq.size >= span:
                self._count((self._stream_code(seq[:span]),))
                self._tails[key] = DONE
            else:
                self._store_tail(key, seq)
            return
        self._store_tail(key, seq)
        if seq.size < span:
            return
        n_pads = len(digits) - len(real)  # leading pads: the grams that hold them go one by one
        if n_pads:
            self._count(self._stream_codes(seq[: n_pads + span - 1]))
            seq = seq[n_pads:]
        if seq.size >= span:
            self._count_run(seq)

    def end(self, key: Hashable = None) -> None:
        """Declare the sequence of stream ``key`` over: its next symbol starts a new one.

        With a window L ≥ 2 (sliding mode) the grams centred on its last L − 1 symbols are
        counted now, padded after the end. O(L²).
        """
        self._flush_default()
        snap = self._snapshot(key, -1)
        try:
            self._count_end(key)
        except BaseException:
            self._restore(snap)
            raise
        self._tails.pop(key, None)
        if self.track_heads:  # an end closes the first segment if it is still open
            symbols, _ = self._heads.get(key, ((), False))
            self._heads[key] = (symbols, True)

    @property
    def keys(self) -> list:
        """Keys of the streams with a live tail. O(streams)."""
        self._flush_default()
        return list(self._tails)

    # ------------------------------------------------------------------ counts

    @property
    def symbols(self) -> list:
        """The label of each index (a new list, O(n))."""
        return self._alphabet.labels

    @property
    def alphabet(self) -> Alphabet:
        """The :class:`~streamspec.core.alphabet.Alphabet` itself (not a copy). O(1)."""
        return self._alphabet

    @property
    def n(self) -> int:
        """Current alphabet size. O(1)."""
        return len(self._alphabet)

    @property
    def n_triples(self) -> float:
        """Total weight of the counted triples. O(1) (plus counting the default stream's buffer)."""
        self._flush_default()
        total = self._total + (len(self._pending) if not self._pending_w else 0)
        return float(total / self._weight) if self.forgetting != 1.0 else float(total)

    def triples(self) -> Triples:
        """The counts as a :class:`~streamspec.core.triples.Triples` snapshot (a copy).

        Independent of later learning. Time and memory O(nnz) (merging buffered
        triples first: O(p log p) for p of them).

        Examples
        --------
        >>> acc = MomentAccumulator(window=1)
        >>> acc.learn_many("abcabc")
        >>> t = acc.triples()
        >>> t.nnz, t.total
        (3, 4.0)
        >>> [acc.symbols[i] + acc.symbols[j] + acc.symbols[k] for i, j, k in zip(t.x1, t.x2, t.x3)]
        ['cab', 'abc', 'bca']
        >>> t.weights.tolist()   # sorted by the middle symbol
        [1.0, 2.0, 1.0]
        """
        if self._L > 1:
            return self.windows().triples()
        self._flush()
        if self.forgetting != 1.0:
            return Triples(self.n, self._codes.copy(), self._w / self._weight)
        out = Triples(self.n, self._codes.copy(), self._w.copy())
        mark_snapshot(self, out)  # a warm refit reads its change since `out` from the log
        return out

    def copy(self) -> MomentAccumulator:
        """An independent copy. Time and memory O(nnz + n + streams)."""
        self._flush()
        out = MomentAccumulator(self.n_symbols, self.mode, self.forgetting, self.track_heads,
                                self.max_symbols, self.window)
        out._set_level(self._L)
        out._alphabet = self._alphabet.copy()
        out._codes, out._w = self._codes.copy(), self._w.copy()
        out._tails = dict(self._tails)
        out._heads = dict(self._heads)
        out._weight = self._weight
        out._total = self._total
        self._fold_starts()
        out._starts = self._starts  # immutable: shared
        copied_log(self, out)  # (a background refit fits a copy: its change is in our log)
        return out

    # ------------------------------------------------------------------ internals

    def _flush_default(self) -> None:
        buffer = self._default_buffer
        if buffer:
            self._default_buffer = []
            try:  # already validated symbol by symbol; learn_many is all-or-nothing
                self.learn_many(np.array(buffer, dtype=np.int64))
            except BaseException:
                self._default_buffer = buffer
                raise

    def _flush(self) -> None:
        """Everything counted so far merged into the sorted arrays."""
        self._flush_default()
        self._flush_pending()
        self._flush_dense()
        self._consolidate(self._chunks)

    def __repr__(self) -> str:
        return (
            f"MomentAccumulator(n_symbols={self.n_symbols!r}, mode={self.mode!r}, "
            f"forgetting={self.forgetting!r}; {self.n} symbols, {self.n_triples:g} triples, "
            f"{len(self._tails)} streams)"
        )
