"""Counting kernels of :class:`~streamspec.streaming.accumulator.MomentAccumulator`.

Grams of window L (triples at L = 1) are packed integer codes (see
:mod:`streamspec.core.windows`; at L = 1 :mod:`streamspec.core.triples`); these functions
turn runs of symbols into codes, count them, and merge sorted code arrays. Every kernel
takes the window L (default 1) and does at L = 1 exactly what it did for triples.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from streamspec.core.windows import pack_grams, window_bits

__all__ = ["stream_codes", "to_packed", "count_run", "compact_counts", "compact_to_packed",
           "run_starts", "reduce_sorted", "sort_reduce", "sort_reduce_weighted", "merge_sorted"]

_COMPACT_CELLS = 1 << 22  # learn_many counts runs with m³ below this by np.bincount
_PARALLEL_AT = 1 << 21  # runs longer than this are sorted as two halves in two threads


def stream_codes(seq: np.ndarray, base: int, window: int = 1) -> np.ndarray:
    """The number in ``base`` of every 2L+1 consecutive digits of ``seq`` (learn_one's order,
    ``(x1·base + x2)·base + x3`` at L = 1). O(len · L)."""
    span = 2 * window + 1
    T = seq.size - span + 1
    codes = seq[:T] * base
    for i in range(1, span - 1):
        codes = (codes + seq[i : i + T]) * base
    return codes + seq[span - 1 : span - 1 + T]


def _positions(window: int) -> list[int]:
    """Gram positions (stream order) from the most significant digit of a packed code."""
    return [window, *range(window + 1, 2 * window + 1), *range(window)]


def to_packed(stream: np.ndarray, base: int, window: int = 1) -> np.ndarray:
    """Stream codes (digits in ``base``, oldest first) to packed gram codes (x, future, past).

    A digit ``base − 1`` is a pad when L > 1. ``base = 2^b`` (growing alphabets) is pure bit
    arithmetic; other bases split the digits. O(len · L).
    """
    b = window_bits(window)
    if base == 1 << b:
        low = stream & ((1 << ((window + 1) * b)) - 1)  # x and the future
        return (low << (window * b)) | (stream >> ((window + 1) * b))
    digits = np.empty((stream.size, 2 * window + 1), dtype=np.int64)
    rest = stream
    for pos in range(2 * window, -1, -1):
        rest, digits[:, pos] = np.divmod(rest, base)
    if window > 1:
        digits[digits == base - 1] = -1
    return pack_grams(digits, window)


_CHUNK = 1 << 18  # symbols per block in the compact count: the codes stay in cache


def count_run(seq: np.ndarray, n: int, window: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Sorted distinct packed codes of the consecutive grams of ``seq`` (no pads) and their counts.

    Small alphabets (m^(2L+1) ≤ 2²² for the largest index m, and not much more cells
    than grams): one ``np.bincount`` of compact codes ``(x, future, past)`` in base m
    (``(x2·m + x3)·m + x1`` at L = 1) computed block by block into a reused buffer (the
    arithmetic runs in cache), whose non-zeros are in packed order already. Otherwise a
    sort of packed codes. O(len · L) or O(len log len).
    """
    span = 2 * window + 1
    T = seq.size - span + 1
    m = n
    if m**span > _COMPACT_CELLS or m**span > 4 * T:
        m = int(seq.max()) + 1
    if m**span <= _COMPACT_CELLS and m**span <= 4 * T:
        return compact_to_packed(compact_counts(seq, m, window), m, window)
    b = window_bits(window)
    order = _positions(window)
    codes = np.array(seq[order[0] : order[0] + T], dtype=np.int64)
    for pos in order[1:]:
        codes <<= b
        codes |= seq[pos : pos + T]
    return sort_reduce(codes)


def compact_counts(seq: np.ndarray, m: int, window: int = 1) -> np.ndarray:
    """Counts of the consecutive grams of ``seq`` in base m, ordered (x, future, past), int64
    (m^(2L+1),); ``(x2·m + x3)·m + x1`` at L = 1.

    Computed block by block into one reused buffer, so that the code arithmetic runs
    in cache instead of streaming temporaries of the input's size through memory.
    """
    span = 2 * window + 1
    T = seq.size - span + 1
    counts = np.zeros(m**span, dtype=np.int64)
    buf = np.empty(min(_CHUNK, T), dtype=np.int64)
    order = _positions(window)
    for s in range(0, T, _CHUNK):
        k = min(_CHUNK, T - s)
        b = buf[:k]
        np.multiply(seq[s + order[0] : s + order[0] + k], m, out=b)
        for pos in order[1:-1]:
            b += seq[s + pos : s + pos + k]
            b *= m
        b += seq[s + order[-1] : s + order[-1] + k]
        counts += np.bincount(b, minlength=m**span)
    return counts


def compact_to_packed(counts: np.ndarray, m: int, window: int = 1, pad: int | None = None
                      ) -> tuple[np.ndarray, np.ndarray]:
    """Non-zeros of compact counts (base m, ordered (x, future, past)), as sorted packed codes and
    weights; the digit ``pad`` (if any, L > 1) is a pad. O(m^(2L+1) + nnz · L)."""
    nz = np.flatnonzero(counts)
    span = 2 * window + 1
    digits = np.empty((nz.size, span), dtype=np.int64)
    rest = nz
    for pos in reversed(_positions(window)):
        rest, digits[:, pos] = np.divmod(rest, m)
    if pad is not None:
        digits[digits == pad] = -1
    return pack_grams(digits, window), counts[nz].astype(np.float64)


_POOL: ThreadPoolExecutor | None = None


def run_starts(c: np.ndarray) -> np.ndarray:
    """Positions where a run of equal values of the sorted, non-empty ``c`` starts."""
    first = np.empty(c.size, dtype=bool)
    first[0] = True
    np.not_equal(c[1:], c[:-1], out=first[1:])
    return np.flatnonzero(first)


def reduce_sorted(c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    if c.size == 0:
        return c, np.empty(0)
    starts = run_starts(c)
    counts = np.empty(starts.size)  # run lengths, written as float64 in one pass
    np.subtract(starts[1:], starts[:-1], out=counts[:-1], casting="unsafe")
    counts[-1] = c.size - starts[-1]
    return c[starts], counts


def sort_reduce(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted distinct codes and their multiplicities (sorts ``codes`` in place).

    Long arrays are sorted as two halves in two threads (numpy's sort releases the
    GIL), then merged by one stable sort, which finds the two sorted runs and
    merges them in linear time.
    """
    global _POOL
    if codes.size >= _PARALLEL_AT and (os.cpu_count() or 1) > 1:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(2, thread_name_prefix="streamspec-sort")
        h = codes.size // 2
        list(_POOL.map(np.ndarray.sort, [codes[:h], codes[h:]]))
        codes.sort(kind="stable")
    else:
        codes.sort()
    return reduce_sorted(codes)


def sort_reduce_weighted(codes: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    order = np.argsort(codes, kind="stable")
    c = codes[order]
    if c.size == 0:
        return c, np.empty(0)
    starts = run_starts(c)
    return c[starts], np.add.reduceat(weights[order], starts)


def merge_sorted(a: np.ndarray, aw: np.ndarray, b: np.ndarray, bw: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Union of two sorted distinct code arrays, weights summed. O(len(a) + len(b) log len(a))."""
    if a.size == 0:
        return b, bw
    if b.size == 0:
        return a, aw
    pos = np.searchsorted(a, b)
    hit = a[np.minimum(pos, a.size - 1)] == b
    w = aw.copy()
    w[pos[hit]] += bw[hit]
    miss = ~hit
    return np.insert(a, pos[miss], b[miss]), np.insert(w, pos[miss], bw[miss])
